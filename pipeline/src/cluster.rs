//! Where this process sits among the processes of one indexing run: from the
//! command line (`-n N -p P -h HOSTFILE`, as timely programs take them) or, on
//! Kubernetes, from the environment (the StatefulSet ordinal in the host name,
//! peers from the headless service's name pattern).

use crate::UsageError;

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

    /// The timely configuration of this process with `threads` workers.
    pub fn timely(&self, threads: usize) -> timely::Config {
        if self.addresses.len() <= 1 {
            return timely::Config::process(threads);
        }
        timely::Config {
            communication: timely::CommunicationConfig::Cluster {
                threads,
                process: self.process,
                addresses: self.addresses.clone(),
                report: false,
                zerocopy: false,
            },
            worker: timely::WorkerConfig::default(),
        }
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
}
