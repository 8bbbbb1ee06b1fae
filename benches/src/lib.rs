//! memweave's benchmarks live in `benches/`; this library holds what they share.

use std::path::PathBuf;
use std::process::Command;

use memweave_llm::{BackendKind, LlmArgs};

pub mod archive;
pub mod questions;

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

/// The model flags of a build: the extractive backend, or the OpenAI-compatible
/// server at `url` (the simulator), with the defaults `memweave index` has.
pub fn llm_args(url: Option<&str>) -> LlmArgs {
    LlmArgs {
        backend: if url.is_some() {
            BackendKind::Openai
        } else {
            BackendKind::Extractive
        },
        llm_urls: url.map(str::to_string).into_iter().collect(),
        llm_model: Some("memweave-sim".into()),
        llm_api_key_env: "MEMWEAVE_LLM_API_KEY".into(),
        llm_timeout_s: 30.0,
        llm_max_attempts: 10,
        llm_concurrency: 64,
        llm_max_concurrency: 128,
        llm_rpm: None,
        llm_tpm: None,
        llm_max_tokens: 512,
        prompts: None,
        cache_only: false,
    }
}
