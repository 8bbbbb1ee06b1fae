//! No poison loop: a document whose build kills the indexer (a stack overflow,
//! an abort, an invalid memory access: nothing `catch_unwind` sees) is set
//! aside, not built again on every restart.
//!
//! `memweave index` runs the indexer as its child and stays beside it, small
//! and idle. The child tells it, over a socket on its stdin, which documents
//! it starts and finishes building ([`Flights`]). When the child dies of a
//! crash signal, the documents it was building are what killed it: one alone
//! is quarantined (the next child writes its `quarantined` row instead of
//! building it, and the round commits past it as past any error); several are
//! suspects, which the next child builds one at a time, so that the one that
//! kills it again is alone. The supervisor then starts the child again. An
//! operator's signal (SIGKILL, SIGTERM, SIGINT) and the kernel's OOM killer
//! (SIGKILL) accuse nothing: the supervisor ends as its child did.
//!
//! Each restart quarantines a document or adds suspects, so it ends; a crash
//! with nothing in flight, or only suspects built alone before, is not a
//! document's, and the supervisor exits with it. What the supervisor learnt
//! lives as long as it does: after a quarantined row is committed the
//! document's state keeps it set aside (until its text changes), whatever
//! process reads it next.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use memweave_operators::build::Document;
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};

/// Set in the supervised child's environment to the supervisor's pid.
pub const SUPERVISED_BY: &str = "MEMWEAVE_SUPERVISED_BY";

/// How long the supervisor waits, once its child is gone, for the last of
/// what it wrote (the socket is the child's alone, so its end comes at once).
const LAST_WORDS: Duration = Duration::from_secs(5);

/// A build as both processes know it: the document and the text it had.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct BuildKey {
    doc_id: String,
    content_hash: String,
}

impl BuildKey {
    fn of(doc: &Document) -> Self {
        BuildKey {
            doc_id: doc.doc_id.clone(),
            content_hash: doc.content_hash.clone(),
        }
    }
}

/// What the child says, a JSON line each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Flight {
    Began(BuildKey),
    Ended(BuildKey),
}

/// What the supervisor has learnt, handed to each child as it starts.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Verdicts {
    /// Builds that killed a child alone, by document id.
    quarantined: BTreeMap<String, Quarantined>,
    /// Builds in flight when a child died with others: built one at a time.
    suspects: BTreeSet<BuildKey>,
}

/// A build that killed a child alone: the text it had, and how it killed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Quarantined {
    content_hash: String,
    why: String,
}

/// The child's side: it reports the builds it starts and ends, and asks
/// which to set aside or to build alone. Without a supervisor (a library
/// caller, a test) it records nothing and builds everything together.
#[derive(Clone, Default)]
pub struct Flights(Option<Arc<Recorder>>);

struct Recorder {
    socket: Mutex<UnixStream>,
    verdicts: Verdicts,
    /// A suspect's build holds it exclusively, every other build shared.
    alone: tokio::sync::RwLock<()>,
    /// Whether a failed report was logged (the supervisor gone: once is enough).
    complained: AtomicBool,
}

impl std::fmt::Debug for Flights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Flights(unsupervised)"),
            Some(recorder) => f
                .debug_struct("Flights")
                .field("quarantined", &recorder.verdicts.quarantined.len())
                .field("suspects", &recorder.verdicts.suspects.len())
                .finish(),
        }
    }
}

impl Flights {
    /// In the child `supervisor` (a pid, from [`SUPERVISED_BY`]) started:
    /// dies with it, and reads what it has learnt off the socket on stdin.
    pub fn join(supervisor: &str) -> std::io::Result<Flights> {
        let gone = || std::io::Error::other("the supervising memweave process is gone");
        // An orphan would go on writing the tables beside the next start.
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        let parent = rustix::process::getppid().map(Pid::as_raw_nonzero);
        if parent.map(|pid| pid.to_string()).as_deref() != Some(supervisor) {
            return Err(gone());
        }
        let socket = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned()?);
        let mut header = String::new();
        BufReader::new(&socket).read_line(&mut header)?;
        let verdicts: Verdicts = serde_json::from_str(&header).map_err(|_| gone())?;
        if !verdicts.quarantined.is_empty() || !verdicts.suspects.is_empty() {
            tracing::warn!(
                quarantined = verdicts.quarantined.len(),
                suspects = verdicts.suspects.len(),
                "restarted after a crash: setting aside the documents that caused it, building the suspects one at a time"
            );
        }
        Ok(Flights(Some(Arc::new(Recorder {
            socket: Mutex::new(socket),
            verdicts,
            alone: tokio::sync::RwLock::new(()),
            complained: AtomicBool::new(false),
        }))))
    }

    /// Why `doc` is set aside, when its build killed a process before.
    pub fn quarantined(&self, doc: &Document) -> Option<&str> {
        let recorder = self.0.as_ref()?;
        let quarantined = recorder.verdicts.quarantined.get(&doc.doc_id)?;
        (quarantined.content_hash == doc.content_hash).then_some(quarantined.why.as_str())
    }

    /// `build` (of `doc`), reported to the supervisor while it runs; a
    /// suspect's alone.
    pub async fn recorded<F: Future>(&self, doc: &Document, build: F) -> F::Output {
        let Some(recorder) = &self.0 else {
            return build.await;
        };
        let key = BuildKey::of(doc);
        let suspect = recorder.verdicts.suspects.contains(&key);
        let _alone = match suspect {
            true => Some(recorder.alone.write().await),
            false => None,
        };
        let _shared = match suspect {
            true => None,
            false => Some(recorder.alone.read().await),
        };
        recorder.report(&Flight::Began(key.clone()));
        // Dropped before the turn, so that the next suspect's start follows
        // this build's end, whether it finished or was dropped.
        let _ended = Ended { recorder, key };
        build.await
    }
}

struct Ended<'a> {
    recorder: &'a Recorder,
    key: BuildKey,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let key = std::mem::take(&mut self.key);
        self.recorder.report(&Flight::Ended(key));
    }
}

impl Recorder {
    /// Writes `flight` before the build goes on: a blocking write of one line
    /// to a socket its reader drains.
    fn report(&self, flight: &Flight) {
        let mut line = serde_json::to_vec(flight).expect("a flight serializes");
        line.push(b'\n');
        let written = self
            .socket
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .write_all(&line);
        if let Err(error) = written
            && !self.complained.swap(true, Ordering::Relaxed)
        {
            tracing::warn!("cannot report builds to the supervisor: {error}");
        }
    }
}

/// The supervisor: runs `program args` (this same `memweave index`) as its
/// child until it ends of itself, and says the exit code to end with.
pub fn supervise(program: &Path, args: &[OsString]) -> std::io::Result<u8> {
    let child_pid = Arc::new(AtomicI32::new(0));
    let stopping = Arc::new(AtomicBool::new(false));
    forward_stop_signals(Arc::clone(&child_pid), Arc::clone(&stopping))?;
    let mut verdicts = Verdicts::default();
    loop {
        let (status, in_flight) = run_child(program, args, &verdicts, &child_pid)?;
        if stopping.load(Ordering::SeqCst) {
            return Ok(exit_code(status));
        }
        match judge(status, &in_flight, &mut verdicts) {
            Judgement::Exit(code) => return Ok(code),
            Judgement::Restart => continue,
        }
    }
}

/// Runs one child to its end: its exit, and the builds it had in flight.
fn run_child(
    program: &Path,
    args: &[OsString],
    verdicts: &Verdicts,
    child_pid: &AtomicI32,
) -> std::io::Result<(ExitStatus, BTreeSet<BuildKey>)> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut child = Command::new(program)
        .args(args)
        .env(SUPERVISED_BY, std::process::id().to_string())
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .spawn()?;
    // (The command, and with it our copy of the child's end, is gone: the
    // socket ends when the child does.)
    child_pid.store(child.id() as i32, Ordering::SeqCst);
    let mut header = serde_json::to_vec(verdicts).expect("verdicts serialize");
    header.push(b'\n');
    // A child that fails before reading it (a usage error) closes the socket.
    let _ = (&ours).write_all(&header);
    let (done, finished) = mpsc::channel();
    // Detached: past LAST_WORDS its reader is left to the socket's end.
    std::thread::Builder::new()
        .name("supervise-flights".into())
        .spawn(move || {
            let _ = done.send(read_flights(ours));
        })?;
    let status = child.wait()?;
    child_pid.store(0, Ordering::SeqCst);
    let in_flight = finished.recv_timeout(LAST_WORDS).unwrap_or_default();
    Ok((status, in_flight))
}

/// Reads the child's reports to the socket's end: the builds still in flight.
fn read_flights(socket: UnixStream) -> BTreeSet<BuildKey> {
    let mut running: HashMap<BuildKey, usize> = HashMap::new();
    for line in BufReader::new(socket).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Flight>(&line) {
            Ok(Flight::Began(key)) => *running.entry(key).or_default() += 1,
            Ok(Flight::Ended(key)) => {
                if let Some(n) = running.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        running.remove(&key);
                    }
                }
            }
            Err(_) => {}
        }
    }
    running.into_keys().collect()
}

#[derive(Debug, PartialEq)]
enum Judgement {
    Exit(u8),
    Restart,
}

/// What a child's end means: done, or a document to set aside (or narrow
/// down) and a restart.
fn judge(status: ExitStatus, in_flight: &BTreeSet<BuildKey>, verdicts: &mut Verdicts) -> Judgement {
    let Some(crash) = status.signal().and_then(crash_signal) else {
        return Judgement::Exit(exit_code(status));
    };
    let news: Vec<BuildKey> = in_flight
        .iter()
        .filter(|key| !verdicts.suspects.contains(*key))
        .cloned()
        .collect();
    if in_flight.len() == 1
        && let Some(alone) = in_flight.first()
    {
        tracing::error!(
            doc_id = alone.doc_id,
            "the indexer died of {crash} while building one document alone: it is set aside (quarantined); restarting"
        );
        verdicts.suspects.remove(alone);
        verdicts.quarantined.insert(
            alone.doc_id.clone(),
            Quarantined {
                content_hash: alone.content_hash.clone(),
                why: format!("the indexer died of {crash} while building it alone"),
            },
        );
        Judgement::Restart
    } else if !news.is_empty() {
        tracing::error!(
            documents = news.len(),
            "the indexer died of {crash} while building several documents: restarting, to build each of them alone"
        );
        verdicts.suspects.extend(news);
        Judgement::Restart
    } else {
        tracing::error!(
            "the indexer died of {crash} with no new document in flight: not a document's doing, so not restarted"
        );
        Judgement::Exit(exit_code(status))
    }
}

/// A signal that means the process failed on its own (rather than being
/// stopped), named with what causes it.
fn crash_signal(signal: i32) -> Option<&'static str> {
    let signal = Signal::from_named_raw(signal)?;
    Some(match signal {
        Signal::SEGV => "SIGSEGV (an invalid memory access)",
        Signal::ABORT => "SIGABRT (an abort: a stack overflow, an allocation failure)",
        Signal::BUS => "SIGBUS (a bad memory access)",
        Signal::ILL => "SIGILL (an illegal instruction)",
        Signal::FPE => "SIGFPE (an arithmetic fault)",
        Signal::SYS => "SIGSYS (a forbidden system call)",
        Signal::TRAP => "SIGTRAP (a trap)",
        _ => return None,
    })
}

/// The exit code a shell gives `status`: its code, or 128 and its signal.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}

/// Passes SIGTERM and SIGINT on to the child (Kubernetes signals only the
/// container's first process), and marks the supervisor as stopping.
fn forward_stop_signals(
    child_pid: Arc<AtomicI32>,
    stopping: Arc<AtomicBool>,
) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Installed before the first child starts, so that no stop is missed.
    let (mut terminate, mut interrupt) = {
        let _entered = runtime.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    std::thread::Builder::new()
        .name("supervise-signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                loop {
                    tokio::select! {
                        _ = terminate.recv() => {},
                        _ = interrupt.recv() => {},
                    }
                    stopping.store(true, Ordering::SeqCst);
                    if let Some(pid) = Pid::from_raw(child_pid.load(Ordering::SeqCst)) {
                        let _ = rustix::process::kill_process(pid, Signal::TERM);
                    }
                }
            })
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> BuildKey {
        BuildKey {
            doc_id: id.into(),
            content_hash: format!("hash-{id}"),
        }
    }

    fn killed_by(signal: Signal) -> ExitStatus {
        ExitStatus::from_raw(signal.as_raw())
    }

    fn keys(ids: &[&str]) -> BTreeSet<BuildKey> {
        ids.iter().map(|id| key(id)).collect()
    }

    #[test]
    fn a_crash_with_several_in_flight_makes_suspects_and_one_alone_is_quarantined() {
        let mut verdicts = Verdicts::default();
        let judged = judge(
            killed_by(Signal::SEGV),
            &keys(&["a", "b", "c"]),
            &mut verdicts,
        );
        assert_eq!(judged, Judgement::Restart);
        assert_eq!(verdicts.suspects, keys(&["a", "b", "c"]));
        assert!(verdicts.quarantined.is_empty());

        // Built alone, "b" kills the next child too: it is the one.
        let judged = judge(killed_by(Signal::ABORT), &keys(&["b"]), &mut verdicts);
        assert_eq!(judged, Judgement::Restart);
        assert_eq!(verdicts.suspects, keys(&["a", "c"]));
        let quarantined = &verdicts.quarantined["b"];
        assert_eq!(quarantined.content_hash, "hash-b");
        assert!(quarantined.why.contains("SIGABRT"), "{quarantined:?}");
        // What the next child is handed reads back as it was.
        let handed = serde_json::to_string(&verdicts).unwrap();
        assert_eq!(serde_json::from_str::<Verdicts>(&handed).unwrap(), verdicts);
    }

    #[test]
    fn a_stop_an_error_or_a_crash_no_document_explains_ends_the_supervisor() {
        let mut verdicts = Verdicts::default();
        // An operator's or the OOM killer's SIGKILL accuses nothing.
        let judged = judge(killed_by(Signal::KILL), &keys(&["a"]), &mut verdicts);
        assert_eq!(judged, Judgement::Exit(137));
        assert_eq!(verdicts, Verdicts::default());
        assert_eq!(
            judge(ExitStatus::from_raw(130 << 8), &keys(&["a"]), &mut verdicts),
            Judgement::Exit(130)
        );
        assert_eq!(
            judge(killed_by(Signal::SEGV), &BTreeSet::new(), &mut verdicts),
            Judgement::Exit(139)
        );
        // Suspects that were built alone and crash together again: not theirs.
        verdicts.suspects = keys(&["a", "b"]);
        assert_eq!(
            judge(killed_by(Signal::SEGV), &keys(&["a", "b"]), &mut verdicts),
            Judgement::Exit(139)
        );
        assert!(verdicts.quarantined.is_empty());
    }

    #[test]
    fn the_builds_in_flight_are_those_begun_and_not_ended() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let lines = [
            Flight::Began(key("a")),
            Flight::Began(key("b")),
            Flight::Ended(key("a")),
            Flight::Began(key("c")),
        ];
        let mut writer = &theirs;
        for flight in &lines {
            writer
                .write_all(format!("{}\n", serde_json::to_string(flight).unwrap()).as_bytes())
                .unwrap();
        }
        drop(theirs);
        assert_eq!(read_flights(ours), keys(&["b", "c"]));
    }
}
