//! Where this process sits among the processes of one indexing run: from the
//! command line (`-n N -p P -h HOSTFILE`, as timely programs take them) or, on
//! Kubernetes, from the environment (the StatefulSet ordinal in the host name,
//! peers from the headless service's name pattern).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};

use crate::{IndexError, UsageError};

/// Port of a peer address when the pattern names none.
const DEFAULT_PORT: u16 = 2101;

/// Cluster flags of `memweave index`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Processes in the run (each with --workers threads); all run the same
    /// command with their own --process.
    #[arg(short = 'n', long, env = "MEMWEAVE_PROCESSES", default_value_t = 1)]
    pub processes: usize,
    /// This process's index, 0..N; process 0 writes the tables. Default: the
    /// trailing number of the host name (a StatefulSet pod's ordinal), else 0.
    #[arg(short = 'p', long, env = "MEMWEAVE_PROCESS")]
    pub process: Option<usize>,
    /// File whose first N lines are the processes' HOST:PORT addresses.
    #[arg(short = 'h', long, value_name = "HOSTFILE")]
    pub hostfile: Option<std::path::PathBuf>,
    /// Peer addresses without a hostfile: {} is replaced by each process index,
    /// e.g. memweave-indexer-{}.memweave-indexer:2101 for a headless service.
    #[arg(long, env = "MEMWEAVE_PEERS")]
    pub peers: Option<String>,
}

/// One process's place in the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    pub process: usize,
    /// Every process's address, in index order; empty for a single process.
    pub addresses: Vec<String>,
}

impl Cluster {
    pub fn processes(&self) -> usize {
        self.addresses.len().max(1)
    }

    /// Timely's communication for this process's `threads` workers: threads
    /// alone, or connected to every other process. The connections are made
    /// here rather than by timely, whose connect and accept loops sleep a whole
    /// second between tries (a second of every run's start) and print to stdout.
    pub fn communication(&self, threads: usize) -> Result<Communication, IndexError> {
        if self.addresses.len() <= 1 {
            return timely::CommunicationConfig::Process(threads)
                .try_build()
                .map_err(IndexError::StartWorkers);
        }
        let sockets = self.connect()?;
        let hooks = timely::communication::Hooks::default();
        let local = ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), None);
        let (builders, guard) =
            initialize_networking_from_sockets(local, sockets, self.process, threads, hooks)
                .map_err(IndexError::Network)?;
        let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
        Ok((builders, Box::new(guard)))
    }

    /// A stream to every other process (`None` at this one's place): this
    /// process connects to those before it and accepts those after it, each
    /// connection opened by the connecting process's index.
    fn connect(&self) -> Result<Vec<Option<TcpStream>>, IndexError> {
        let me = self.process;
        let mut sockets: Vec<Option<TcpStream>> = Vec::new();
        for (index, address) in self.addresses.iter().enumerate().take(me) {
            let mut stream = patiently(
                || match TcpStream::connect(address) {
                    Ok(stream) => Ok(Some(stream)),
                    Err(_) => Ok(None),
                },
                || format!("waiting for process {index} at {address}"),
            )?;
            stream.set_nodelay(true)?;
            stream.write_all(&(me as u64).to_be_bytes())?;
            sockets.push(Some(stream));
        }
        sockets.push(None);
        let later = self.addresses.len() - me - 1;
        if later == 0 {
            return Ok(sockets);
        }
        let address = &self.addresses[me];
        // A pod's own DNS name may resolve only a moment after it starts.
        let started = Instant::now();
        let mut binding = TcpListener::bind(address);
        while binding.is_err() && started.elapsed() < BIND_PATIENCE {
            std::thread::sleep(RETRY);
            binding = TcpListener::bind(address);
        }
        let listener = binding.map_err(|source| IndexError::Listen {
            process: me,
            address: address.clone(),
            source,
        })?;
        listener.set_nonblocking(true)?;
        let mut accepted: Vec<Option<TcpStream>> = (0..later).map(|_| None).collect();
        while accepted.iter().any(Option::is_none) {
            let mut stream = patiently(
                || match listener.accept() {
                    Ok((stream, _)) => Ok(Some(stream)),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
                    Err(e) => Err(e),
                },
                || format!("process {me} waiting on {address} for the processes after it"),
            )?;
            // A stray connection (a port probe) must not stop the wait.
            match handshake(&mut stream, me, &accepted) {
                Ok(slot) => accepted[slot] = Some(stream),
                Err(e) => tracing::warn!("{address}: ignoring a connection: {e:#}"),
            }
        }
        sockets.extend(accepted);
        Ok(sockets)
    }
}

/// Reads the index a connecting process sends first; returns its place among
/// the processes after `me` still awaited.
fn handshake(
    stream: &mut TcpStream,
    me: usize,
    awaited: &[Option<TcpStream>],
) -> std::io::Result<usize> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HANDSHAKE))?;
    let mut index = [0; 8];
    stream.read_exact(&mut index)?;
    stream.set_read_timeout(None)?;
    let index = u64::from_be_bytes(index);
    usize::try_from(index)
        .ok()
        .and_then(|i| i.checked_sub(me + 1))
        .filter(|&slot| awaited.get(slot).is_some_and(Option::is_none))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("it claims to be process {index}"),
            )
        })
}

/// Timely's allocators for this process's workers, and what must live as long
/// as they do (the network threads).
pub type Communication = (Vec<AllocatorBuilder>, Box<dyn std::any::Any + Send>);

/// How often a process tries again to reach another that is not up yet.
const RETRY: Duration = Duration::from_millis(20);
/// How long a process retries listening on its own address.
const BIND_PATIENCE: Duration = Duration::from_secs(60);
/// How long an accepted connection may take to say which process it is.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// How often the wait is logged.
const WAIT_REPORT: Duration = Duration::from_secs(10);

/// Tries `attempt` every [`RETRY`] until it yields, logging `waiting()` now and
/// then: peers start in any order (on Kubernetes, minutes apart).
fn patiently<T>(
    mut attempt: impl FnMut() -> std::io::Result<Option<T>>,
    waiting: impl Fn() -> String,
) -> std::io::Result<T> {
    let mut reported = Instant::now();
    loop {
        if let Some(value) = attempt()? {
            return Ok(value);
        }
        if reported.elapsed() >= WAIT_REPORT {
            tracing::info!("{}", waiting());
            reported = Instant::now();
        }
        std::thread::sleep(RETRY);
    }
}

impl ClusterArgs {
    /// Resolves the flags (and, where they are silent, the environment).
    pub fn resolve(&self) -> Result<Cluster, UsageError> {
        let n = self.processes;
        if n == 0 {
            return Err(UsageError("--processes must be at least 1".into()));
        }
        if n == 1 {
            return Ok(Cluster::default());
        }
        let process = match self.process {
            Some(p) => p,
            None => std::env::var("HOSTNAME")
                .ok()
                .and_then(|h| ordinal(&h))
                .unwrap_or(0),
        };
        if process >= n {
            return Err(UsageError(format!(
                "process {process} is not among the {n} processes (0..{n})"
            )));
        }
        let addresses: Vec<String> = match (&self.hostfile, &self.peers) {
            (Some(file), _) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| UsageError(format!("hostfile {}: {e}", file.display())))?;
                let lines: Vec<String> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .take(n)
                    .map(str::to_string)
                    .collect();
                if lines.len() < n {
                    return Err(UsageError(format!(
                        "hostfile {} names {} addresses, --processes {n}",
                        file.display(),
                        lines.len()
                    )));
                }
                lines
            }
            (None, Some(pattern)) if pattern.contains("{}") => (0..n)
                .map(|i| with_port(&pattern.replace("{}", &i.to_string())))
                .collect(),
            (None, Some(pattern)) => {
                return Err(UsageError(format!(
                    "--peers {pattern} has no {{}} to put the process index in"
                )));
            }
            (None, None) => (0..n)
                .map(|i| format!("localhost:{}", usize::from(DEFAULT_PORT) + i))
                .collect(),
        };
        Ok(Cluster { process, addresses })
    }
}

/// The trailing number of a StatefulSet pod's host name (`indexer-3` → 3).
fn ordinal(host: &str) -> Option<usize> {
    host.rsplit_once('-')?.1.parse().ok()
}

fn with_port(address: &str) -> String {
    if address
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        address.to_string()
    } else {
        format!("{address}:{DEFAULT_PORT}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_come_from_a_hostfile_or_a_name_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, "10.0.0.1:2101\n10.0.0.2:2101\n10.0.0.3:2101\n").unwrap();
        let args = ClusterArgs {
            processes: 2,
            process: Some(1),
            hostfile: Some(hosts),
            peers: None,
        };
        let cluster = args.resolve().unwrap();
        assert_eq!(cluster.process, 1);
        assert_eq!(cluster.addresses, ["10.0.0.1:2101", "10.0.0.2:2101"]);

        let args = ClusterArgs {
            processes: 3,
            process: Some(2),
            hostfile: None,
            peers: Some("indexer-{}.indexer".into()),
        };
        assert_eq!(
            args.resolve().unwrap().addresses,
            [
                "indexer-0.indexer:2101",
                "indexer-1.indexer:2101",
                "indexer-2.indexer:2101"
            ]
        );
        assert_eq!(ordinal("memweave-indexer-7"), Some(7));
        assert_eq!(ordinal("laptop"), None);
        let outside = ClusterArgs {
            processes: 2,
            process: Some(2),
            ..ClusterArgs::default()
        };
        assert!(outside.resolve().is_err());
    }

    /// Three processes started in any order connect pairwise, each stream at
    /// its peer's place; a stray connection to a listener is ignored.
    #[test]
    fn processes_connect_in_any_order_and_ignore_strays() {
        let ports: Vec<u16> = (0..3)
            .map(|_| {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                listener.local_addr().unwrap().port()
            })
            .collect();
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let start = |process: usize| {
            let cluster = Cluster {
                process,
                addresses: addresses.clone(),
            };
            std::thread::spawn(move || {
                let mut sockets = cluster.connect().unwrap();
                // Each says who it is on every stream, then hears who is there.
                for socket in sockets.iter_mut().flatten() {
                    socket.write_all(&[process as u8]).unwrap();
                }
                sockets
                    .iter_mut()
                    .map(|socket| {
                        socket.as_mut().map(|s| {
                            let mut peer = [0];
                            s.read_exact(&mut peer).unwrap();
                            peer[0]
                        })
                    })
                    .collect::<Vec<Option<u8>>>()
            })
        };
        let first = start(0);
        let stray = loop {
            if let Ok(stream) = TcpStream::connect(&addresses[0]) {
                break stream;
            }
            std::thread::sleep(RETRY);
        };
        drop(stray);
        let (last, middle) = (start(2), start(1));
        assert_eq!(first.join().unwrap(), [None, Some(1), Some(2)]);
        assert_eq!(middle.join().unwrap(), [Some(0), None, Some(2)]);
        assert_eq!(last.join().unwrap(), [Some(0), Some(1), None]);
    }
}
