//! Measuring a `memweave` process: its peak memory while it runs.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A process's peak memory, in bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Peak {
    /// Resident set (VmHWM): its own memory and the pages of the `memweave`
    /// executable it has mapped: 60 to 110 MiB, depending on how much of
    /// the code a run has reached by its peak (at 10M tokens more of it than
    /// at 1M).
    pub rss: u64,
    /// Anonymous resident memory (RssAnon, polled): the process's own.
    pub anon: u64,
}

/// `BINARY index SOURCE --out TABLES` with `extra` flags: its wall time,
/// its stdout and its peak memory.
pub fn index_measured(
    binary: &Path,
    source: &Path,
    tables: &Path,
    extra: &[&str],
) -> (Duration, String, Peak) {
    let started = Instant::now();
    let child = Command::new(binary)
        .arg("index")
        .arg(source)
        .arg("--out")
        .arg(tables)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the memweave binary starts");
    let (output, peak) = wait_measuring(child);
    (started.elapsed(), output, peak)
}

/// Waits for `child`, a `memweave index`, polling the peak RSS of the
/// indexer it supervises (its child, which builds the memory); returns its
/// stdout and the peak.
pub fn wait_measuring(mut child: Child) -> (String, Peak) {
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let reader =
        std::thread::spawn(move || std::io::read_to_string(stdout).expect("its stdout is UTF-8"));
    let supervisor = child.id();
    let indexers = format!("/proc/{supervisor}/task/{supervisor}/children");
    let mut peak = Peak::default();
    loop {
        let pids = std::fs::read_to_string(&indexers).unwrap_or_default();
        for text in pids
            .split_whitespace()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        {
            let bytes = |field: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                    .map_or(0, |kb| kb * 1024)
            };
            peak.rss = peak.rss.max(bytes("VmHWM:"));
            peak.anon = peak.anon.max(bytes("RssAnon:"));
        }
        if let Some(exit) = child.try_wait().expect("the child can be waited on") {
            let output = reader.join().expect("the stdout reader finishes");
            assert!(exit.success(), "memweave index failed ({exit}):\n{output}");
            return (output, peak);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
