//! memweave's benchmarks live in `benches/`; this library holds what they share.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use memweave_llm::{LlmConfig, PoolConfig};

pub mod archive;
pub mod measure;
pub mod questions;
pub mod spend;

/// A corpus under `../shared/data` beside the checkout (never copied into the
/// repository). Cargo sets `CARGO_MANIFEST_DIR` when it runs a benchmark; that
/// value wins over the one compiled in, which is stale when another checkout
/// sharing the target directory built the binary.
pub fn shared_data(name: &str) -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let path = manifest_dir.join("../../shared/data").join(name);
    assert!(
        path.exists(),
        "{} is missing: the benchmarks read the shared corpora beside the checkout",
        path.display()
    );
    path
}

/// The files of `dir`, in name order (the shared corpora's documents, read in
/// the same order by every benchmark).
pub fn files_in(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

/// Runs `command` (a child process the benchmark measures apart, or a
/// reference implementation) and reads the one JSON object it prints.
pub fn json_output(command: &mut Command) -> serde_json::Value {
    let output = command.output().expect("the child process starts");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the child prints one JSON object")
}

/// The model of a build: the extractive backend, or the OpenAI-compatible
/// server at `url` (the simulator), with a shorter timeout and more requests
/// in flight than the defaults, as a simulated pool answers fast.
pub fn llm_config(url: Option<&str>) -> LlmConfig {
    let Some(url) = url else {
        return LlmConfig::default();
    };
    LlmConfig::openai(PoolConfig {
        timeout: Duration::from_secs(30),
        initial_concurrency: 64,
        max_concurrency: 128,
        ..PoolConfig::new(vec![url.to_string()], "memweave-sim")
    })
}
