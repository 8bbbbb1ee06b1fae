//! Parsing untrusted bytes in child processes, so that what a parser does to
//! its process (a stack overflow, an allocation past every budget, a hang)
//! costs one file, not the indexer: the way Apache Tika's forked parser and
//! Chromium's renderers keep hostile input away from the process that holds
//! state.
//!
//! A [`ParserPool`] keeps worker processes (the same binary, started with
//! [`ParserCommand::args`]) and sends each one file at a time over its stdin;
//! the worker ([`serve_worker`]) limits its own memory first, parses on
//! a thread of a fixed stack, and answers over stdout. A worker that dies or
//! outlives [`ParseLimits::time`] (the pool kills it) makes that file a
//! `too_large`, `timeout` or `corrupt` error; the next file gets a new worker.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memweave_operators::build::RawDocument;
use serde::{Deserialize, Serialize};

use crate::{IngestError, Parsed, ReadOptions, SourceFile, kind};

/// What one file's parse may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// The worker's private writable memory (RLIMIT_DATA: its heap, its
    /// allocator's reservations and its threads' stacks; not the binary).
    pub memory_bytes: u64,
    /// Wall time one file may take before its worker is killed.
    pub time: Duration,
}

/// 2 GiB: the worker itself reserves about 100 MiB (jemalloc's arenas, the
/// parse thread's stack), and the largest real files parse in a few
/// hundred MiB.
pub const DEFAULT_PARSE_MEMORY_BYTES: u64 = 2 << 30;

/// Two minutes: the largest real PDFs parse in seconds.
pub const DEFAULT_PARSE_TIME: Duration = Duration::from_secs(120);

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            memory_bytes: DEFAULT_PARSE_MEMORY_BYTES,
            time: DEFAULT_PARSE_TIME,
        }
    }
}

/// The stack of the thread a worker parses on: deep enough for any real
/// document's nesting, and an overflow ends only the worker.
const PARSE_STACK_BYTES: usize = 64 << 20;

/// How to start a worker: a program that runs [`serve_worker`] when given
/// `args` (for memweave, its own binary and `parse-worker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParserCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub limits: ParseLimits,
}

/// Worker processes, each parsing one file at a time; as many run as files
/// are parsed at once, and an idle one waits for the next file.
#[derive(Debug)]
pub struct ParserPool {
    command: ParserCommand,
    idle: Mutex<Vec<Worker>>,
}

impl ParserPool {
    pub fn new(command: ParserCommand) -> Self {
        ParserPool {
            command,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Worker>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `file`'s documents from `bytes`, parsed by a worker: what
    /// [`crate::parse`] gives in process, or the error of a worker that did
    /// not come back.
    pub fn parse(&self, file: &SourceFile, bytes: Vec<u8>, options: &ReadOptions) -> Parsed {
        let request = Request {
            file: file.clone(),
            bytes,
            columns: options.columns.clone(),
            max_inflated_bytes: options.max_inflated_bytes,
            max_record_bytes: options.max_record_bytes,
        };
        let request = match bincode::serialize(&request) {
            Ok(request) => request,
            Err(e) => {
                return vec![Err(IngestError::new(
                    &file.uri,
                    kind::CORRUPT,
                    e.to_string(),
                ))];
            }
        };
        let limits = self.command.limits;
        let popped = self.idle().pop();
        let mut worker = match popped.map_or_else(|| Worker::start(&self.command), Ok) {
            Ok(worker) => worker,
            Err(e) => {
                let message = format!("no parser process could be started: {e}");
                return vec![Err(IngestError::new(&file.uri, kind::UNREADABLE, message))];
            }
        };
        match worker.exchange(&request, limits) {
            Ok(reply) => {
                self.idle().push(worker);
                match bincode::deserialize::<Vec<WireResult>>(&reply) {
                    Ok(parsed) => parsed.into_iter().map(WireResult::into_parsed).collect(),
                    Err(e) => {
                        let message = format!("its parser's answer could not be read: {e}");
                        vec![Err(IngestError::new(&file.uri, kind::CORRUPT, message))]
                    }
                }
            }
            Err(ended) => vec![Err(ended.error(&file.uri, limits))],
        }
    }
}

/// One file for a worker, with how to read it.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    file: SourceFile,
    bytes: Vec<u8>,
    columns: crate::Columns,
    max_inflated_bytes: u64,
    max_record_bytes: u64,
}

/// A document or an error as a worker sends it (an error's kind by name).
#[derive(Debug, Serialize, Deserialize)]
enum WireResult {
    Document(RawDocument),
    Error {
        source: String,
        kind: String,
        message: String,
    },
}

impl WireResult {
    fn of(parsed: Result<RawDocument, IngestError>) -> Self {
        match parsed {
            Ok(doc) => WireResult::Document(doc),
            Err(e) => WireResult::Error {
                source: e.source,
                kind: e.kind.to_string(),
                message: e.message,
            },
        }
    }

    fn into_parsed(self) -> Result<RawDocument, IngestError> {
        match self {
            WireResult::Document(doc) => Ok(doc),
            WireResult::Error {
                source,
                kind: name,
                message,
            } => {
                let kind = kind::ALL
                    .into_iter()
                    .find(|k| *k == name)
                    .unwrap_or(kind::CORRUPT);
                Err(IngestError::new(source, kind, message))
            }
        }
    }
}

/// A running worker. Dropped, it is killed (an idle one would also stop at
/// the end of its stdin).
#[derive(Debug)]
struct Worker {
    child: Arc<Mutex<Child>>,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: ChildStderr,
}

/// Why a worker did not answer.
#[derive(Debug)]
enum Ended {
    /// Killed at the time limit.
    Late,
    /// It died, saying this on stderr (with its exit status).
    Died(String),
}

impl Ended {
    fn error(&self, uri: &str, limits: ParseLimits) -> IngestError {
        match self {
            Ended::Late => IngestError::new(
                uri,
                kind::TIMEOUT,
                format!("its parser took longer than {:?}; stopped", limits.time),
            ),
            Ended::Died(said) if said.contains("memory allocation of") => IngestError::new(
                uri,
                kind::TOO_LARGE,
                format!(
                    "parsing it needs more than the parser's {} MiB (it inflates past the limit)",
                    limits.memory_bytes >> 20
                ),
            ),
            // Safe Rust faults on its stack's guard page, and nowhere else
            // when the parsers' C code behaves: a SIGSEGV is an overflow.
            Ended::Died(said)
                if said.contains("overflowed its stack") || said.contains("SIGSEGV") =>
            {
                IngestError::new(
                    uri,
                    kind::CORRUPT,
                    format!(
                        "its structure nests without end: the parser overflowed its stack ({said})"
                    ),
                )
            }
            Ended::Died(said) => IngestError::new(
                uri,
                kind::CORRUPT,
                format!("its parser process died: {said}"),
            ),
        }
    }
}

impl Worker {
    fn start(command: &ParserCommand) -> std::io::Result<Worker> {
        let mut child = Command::new(&command.program)
            .args(&command.args)
            .arg(command.limits.memory_bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let missing = || std::io::Error::other("a worker's pipe is missing");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(missing)?);
        let stderr = child.stderr.take().ok_or_else(missing)?;
        Ok(Worker {
            child: Arc::new(Mutex::new(child)),
            stdin,
            stdout,
            stderr,
        })
    }

    /// Sends one request and reads its answer, killing the worker past the
    /// time limit.
    fn exchange(&mut self, request: &[u8], limits: ParseLimits) -> Result<Vec<u8>, Ended> {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let late = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (child, late) = (Arc::clone(&self.child), Arc::clone(&late));
            std::thread::spawn(move || {
                if finished.recv_timeout(limits.time) == Err(RecvTimeoutError::Timeout) {
                    late.store(true, Ordering::SeqCst);
                    let _ = lock(&child).kill();
                }
            })
        };
        let answer = write_frame(&mut self.stdin, request)
            .and_then(|()| read_frame(&mut self.stdout, limits.memory_bytes));
        drop(done);
        let _ = watchdog.join();
        match answer {
            Ok(Some(answer)) => Ok(answer),
            _ if late.load(Ordering::SeqCst) => Err(Ended::Late),
            _ => Err(Ended::Died(self.last_words())),
        }
    }

    /// What a dead worker said on stderr, and how it ended.
    fn last_words(&mut self) -> String {
        let status = lock(&self.child)
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        let mut said = String::new();
        let _ = (&mut self.stderr).take(64 << 10).read_to_string(&mut said);
        let said = said.trim();
        if said.is_empty() {
            status
        } else {
            format!("{said} ({status})")
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn lock(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child.lock().unwrap_or_else(|e| e.into_inner())
}

/// A frame: its length (8 bytes, little-endian), then its bytes.
fn write_frame(out: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    out.write_all(&(frame.len() as u64).to_le_bytes())?;
    out.write_all(frame)?;
    out.flush()
}

/// The next frame, `None` at the end of the stream; one longer than `max` is
/// refused before it is allocated.
fn read_frame(input: &mut impl BufRead, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    if input.fill_buf()?.is_empty() {
        return Ok(None);
    }
    let mut length = [0u8; 8];
    input.read_exact(&mut length)?;
    let length = u64::from_le_bytes(length);
    if length > max {
        return Err(std::io::Error::other(format!("a frame of {length} bytes")));
    }
    let mut frame = vec![0; usize::try_from(length).map_err(std::io::Error::other)?];
    input.read_exact(&mut frame)?;
    Ok(Some(frame))
}

/// A worker's life: limits its own private memory to `memory_bytes`, then
/// parses each file sent on stdin and answers on stdout until stdin ends.
/// Parsers that print are sent to /dev/null: only the protocol reaches the
/// pool. Panics are caught per file (`corrupt`) and print nothing, so the
/// worker's stderr holds only what ended it.
pub fn serve_worker(memory_bytes: u64) -> std::io::Result<()> {
    let limit = rustix::process::Rlimit {
        current: Some(memory_bytes),
        maximum: Some(memory_bytes),
    };
    rustix::process::setrlimit(rustix::process::Resource::Data, limit)?;
    std::panic::set_hook(Box::new(|_| {}));
    let protocol = std::fs::File::from(rustix::io::dup(std::io::stdout())?);
    rustix::stdio::dup2_stdout(std::fs::File::open("/dev/null")?)?;
    let mut output = BufWriter::new(protocol);
    let mut input = BufReader::new(std::io::stdin().lock());
    while let Some(frame) = read_frame(&mut input, memory_bytes)? {
        let request: Request = bincode::deserialize(&frame).map_err(std::io::Error::other)?;
        drop(frame);
        let parse = move || {
            let options = ReadOptions {
                columns: request.columns,
                max_inflated_bytes: request.max_inflated_bytes,
                max_record_bytes: request.max_record_bytes,
                parsers: crate::Parsers::default(),
            };
            crate::parse_here(&request.file, request.bytes, &options)
        };
        let parsed = std::thread::Builder::new()
            .name("parse".into())
            .stack_size(PARSE_STACK_BYTES)
            .spawn(parse)?
            .join()
            .map_err(|_| std::io::Error::other("the parse thread panicked"))?;
        let answer: Vec<WireResult> = parsed.into_iter().map(WireResult::of).collect();
        write_frame(
            &mut output,
            &bincode::serialize(&answer).map_err(std::io::Error::other)?,
        )?;
    }
    Ok(())
}
