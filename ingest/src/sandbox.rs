//! Parsing untrusted bytes in child processes, so that what a parser does to
//! its process (a stack overflow, an allocation past every budget, a hang)
//! costs one file, not the indexer: the way Apache Tika's forked parser and
//! Chromium's renderers keep hostile input away from the process that holds
//! state.
//!
//! A [`ParserPool`] keeps worker processes (the same binary, started with
//! [`ParserCommand::args`]) and sends each one file at a time over its stdin
//! (a file's bytes, or a dataset's path, whose rows come back one by one);
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
        let request = Request::Whole {
            file: file.clone(),
            bytes,
            options: WireOptions::of(options),
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
        let mut worker = match self.worker() {
            Ok(worker) => worker,
            Err(e) => return vec![Err(e.for_file(&file.uri))],
        };
        let reply = match worker.exchange(&request, limits) {
            Ok(reply) => reply,
            Err(ended) => return vec![Err(ended.error(&file.uri, limits))],
        };
        match bincode::deserialize::<Vec<WireResult>>(&reply) {
            Ok(parsed) => {
                // Only a worker whose answer could be read is in step to be reused.
                self.idle().push(worker);
                parsed.into_iter().map(WireResult::into_parsed).collect()
            }
            Err(e) => {
                let message = format!("its parser's answer could not be read: {e}");
                vec![Err(IngestError::new(&file.uri, kind::CORRUPT, message))]
            }
        }
    }

    /// An idle worker still alive, or a new one: an idle worker killed from
    /// outside (the OOM killer, an operator) costs no file.
    fn worker(&self) -> Result<Worker, NoWorker> {
        loop {
            let Some(worker) = self.idle().pop() else {
                return Worker::start(&self.command).map_err(NoWorker);
            };
            if worker.is_alive() {
                return Ok(worker);
            }
        }
    }

    /// The rows of the dataset `file` whose bytes are at `path`, read by a
    /// worker and sent back one at a time as they are taken: what
    /// [`crate::read_rows`] gives in process, the rows before a worker's
    /// death kept and its error last. Each row must come within the time
    /// limit.
    pub fn rows(
        self: &Arc<Self>,
        file: &SourceFile,
        path: &std::path::Path,
        options: &ReadOptions,
    ) -> StreamedRows {
        let uri = file.uri.clone();
        let request = Request::Rows {
            file: file.clone(),
            path: path.to_path_buf(),
            options: WireOptions::of(options),
        };
        let mut rows = StreamedRows {
            pool: Arc::clone(self),
            uri,
            worker: None,
            ended: None,
        };
        let started = match (self.worker(), bincode::serialize(&request)) {
            (Ok(mut worker), Ok(request)) => match write_frame(&mut worker.stdin, &request) {
                Ok(()) => Ok(worker),
                Err(_) => Err(worker.ended()),
            },
            (Err(e), _) => {
                rows.ended = Some(Err(e.for_file(&rows.uri)));
                return rows;
            }
            (_, Err(e)) => Err(Ended::Died {
                status: "not started".into(),
                said: e.to_string(),
            }),
        };
        match started {
            Ok(worker) => rows.worker = Some(worker),
            Err(ended) => rows.ended = Some(Err(ended.error(&rows.uri, self.command.limits))),
        }
        rows
    }
}

/// A worker that could not be started.
#[derive(Debug)]
struct NoWorker(std::io::Error);

impl NoWorker {
    fn for_file(&self, uri: &str) -> IngestError {
        let message = format!("no parser process could be started: {}", self.0);
        IngestError::new(uri, kind::UNREADABLE, message)
    }
}

/// A dataset's rows as a worker sends them ([`ParserPool::rows`]). Dropped
/// before its end, the worker is stopped rather than given back mid-stream.
#[derive(Debug)]
pub struct StreamedRows {
    pool: Arc<ParserPool>,
    uri: String,
    worker: Option<Worker>,
    /// The last item, once the stream has ended badly.
    ended: Option<Result<RawDocument, IngestError>>,
}

impl Iterator for StreamedRows {
    type Item = Result<RawDocument, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        let limits = self.pool.command.limits;
        let Some(worker) = self.worker.as_mut() else {
            return self.ended.take();
        };
        let row = worker.receive(limits).and_then(|frame| {
            bincode::deserialize::<Option<WireResult>>(&frame).map_err(|e| Ended::Died {
                status: "an answer that could not be read".into(),
                said: e.to_string(),
            })
        });
        match row {
            Ok(Some(row)) => Some(row.into_parsed()),
            Ok(None) => {
                if let Some(worker) = self.worker.take() {
                    self.pool.idle().push(worker);
                }
                None
            }
            Err(ended) => {
                self.worker = None;
                Some(Err(ended.error(&self.uri, limits)))
            }
        }
    }
}

/// One file for a worker: its bytes to parse whole, or (a dataset) where
/// it is, to send its rows one by one.
#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Whole {
        file: SourceFile,
        bytes: Vec<u8>,
        options: WireOptions,
    },
    Rows {
        file: SourceFile,
        path: PathBuf,
        options: WireOptions,
    },
}

/// [`ReadOptions`] as a worker gets them (it parses in its own process).
#[derive(Debug, Serialize, Deserialize)]
struct WireOptions {
    columns: crate::Columns,
    max_inflated_bytes: u64,
    max_record_bytes: u64,
}

impl WireOptions {
    fn of(options: &ReadOptions) -> Self {
        WireOptions {
            columns: options.columns.clone(),
            max_inflated_bytes: options.max_inflated_bytes,
            max_record_bytes: options.max_record_bytes,
        }
    }

    fn here(self) -> ReadOptions {
        ReadOptions {
            columns: self.columns,
            max_inflated_bytes: self.max_inflated_bytes,
            max_record_bytes: self.max_record_bytes,
            parsers: crate::Parsers::default(),
            // Labels are given in the process that asked, never here.
            access: crate::Access::default(),
        }
    }
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
    /// It died: how it ended, and what it said on stderr.
    Died { status: String, said: String },
}

impl Ended {
    /// The error row of `uri`: the same words whenever the same file ends a
    /// worker the same way (what the worker said names threads and
    /// addresses, so it goes to the log, not the row).
    fn error(&self, uri: &str, limits: ParseLimits) -> IngestError {
        let (status, said) = match self {
            Ended::Late => {
                let message = format!("its parser took longer than {:?}; stopped", limits.time);
                return IngestError::new(uri, kind::TIMEOUT, message);
            }
            Ended::Died { status, said } => (status, said),
        };
        tracing::warn!(source = uri, %status, said = said.as_str(), "a parser process died");
        if said.contains("memory allocation of") {
            let message = format!(
                "parsing it needs more than the parser's {} MiB (it inflates past the limit)",
                limits.memory_bytes >> 20
            );
            return IngestError::new(uri, kind::TOO_LARGE, message);
        }
        // Safe Rust faults on its stack's guard page, and nowhere else when
        // the parsers' C code behaves: a SIGSEGV is an overflow too.
        if said.contains("overflowed its stack") || status.contains("SIGSEGV") {
            let message = "its structure nests without end: the parser overflowed its stack";
            return IngestError::new(uri, kind::CORRUPT, message);
        }
        IngestError::new(
            uri,
            kind::CORRUPT,
            format!("its parser process died ({status})"),
        )
    }
}

impl Worker {
    /// Not yet exited: a worker that is may be given a file.
    fn is_alive(&self) -> bool {
        matches!(lock(&self.child).try_wait(), Ok(None))
    }

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
        match write_frame(&mut self.stdin, request) {
            Ok(()) => self.receive(limits),
            Err(_) => Err(self.ended()),
        }
    }

    /// The worker's next frame, killing it past the time limit.
    fn receive(&mut self, limits: ParseLimits) -> Result<Vec<u8>, Ended> {
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
        let answer = read_frame(&mut self.stdout, limits.memory_bytes);
        drop(done);
        let _ = watchdog.join();
        match answer {
            Ok(Some(answer)) => Ok(answer),
            _ if late.load(Ordering::SeqCst) => Err(Ended::Late),
            _ => Err(self.ended()),
        }
    }

    /// How a dead worker ended, and what it said on stderr.
    fn ended(&mut self) -> Ended {
        let status = lock(&self.child)
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        let mut said = String::new();
        let _ = (&mut self.stderr).take(64 << 10).read_to_string(&mut said);
        Ended::Died {
            status,
            said: said.trim().to_string(),
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

/// `value` as one frame.
fn send(out: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    write_frame(
        out,
        &bincode::serialize(value).map_err(std::io::Error::other)?,
    )
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
    // Every file is parsed on one thread of a fixed stack, made once.
    let serve = move || -> std::io::Result<()> {
        let mut output = BufWriter::new(protocol);
        let mut input = BufReader::new(std::io::stdin().lock());
        while let Some(frame) = read_frame(&mut input, memory_bytes)? {
            let request: Request = bincode::deserialize(&frame).map_err(std::io::Error::other)?;
            drop(frame);
            match request {
                Request::Whole {
                    file,
                    bytes,
                    options,
                } => {
                    let parsed = crate::parse_here(&file, bytes, &options.here());
                    let answer: Vec<WireResult> = parsed.into_iter().map(WireResult::of).collect();
                    send(&mut output, &answer)?;
                }
                // The rows go out as they are read.
                Request::Rows {
                    file,
                    path,
                    options,
                } => {
                    for row in crate::read_rows_here(&file, &path, &options.here()) {
                        send(&mut output, &Some(WireResult::of(row)))?;
                    }
                    send(&mut output, &None::<WireResult>)?;
                }
            }
        }
        Ok(())
    };
    std::thread::Builder::new()
        .name("parse".into())
        .stack_size(PARSE_STACK_BYTES)
        .spawn(serve)?
        .join()
        .map_err(|_| std::io::Error::other("the parse thread panicked"))?
}
