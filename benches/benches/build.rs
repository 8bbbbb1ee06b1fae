//! Whole builds, all four memories: throughput and peak memory with the
//! extractive backend, and model calls per 1,000 input tokens per memory
//! through the simulator.
//!
//! Throughput: pg-essays and the Python 3.11 documentation sources (Debian's
//! python3.11-doc, installed by this bench when missing and possible), each
//! built in a child process of its own so its peak resident memory (VmHWM) is
//! its own; MB/s/core = megabytes of text / wall seconds / workers.
//!
//! Calls: pg-essays built through the simulator once per memory (fresh tables,
//! fresh cache), then all four at once, counting the calls the cache made.
//!
//! Run: `cargo bench --workspace --bench build` (release). Needs
//! ../shared/data/pg-essays. BUILD_BENCH_WORKERS sets the workers (default 2);
//! BUILD_BENCH_CALLS_ONLY=1 measures only the calls (any profile will do).

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use memweave_benches::archive::{PYTHON_DOCS, dir_bytes, python_docs_installed};
use memweave_llm::sim::{Sim, SimConfig};
use memweave_operators::build::{BuildConfig, Memories};
use memweave_pipeline::index::{IndexOptions, IndexSummary, run_index};

const CHILD: &str = "MEMWEAVE_BUILD_BENCH_CORPUS";

fn workers() -> usize {
    std::env::var("BUILD_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2)
}

fn build(source: &Path, memories: Memories, url: Option<&str>) -> (IndexSummary, f64) {
    let out = tempfile::tempdir().unwrap();
    let tables = out.path().join("memory");
    let options = IndexOptions {
        workers: workers(),
        build: BuildConfig {
            memories,
            ..BuildConfig::DEFAULT
        },
        llm: memweave_benches::llm_config(url),
        ..IndexOptions::new(source.display().to_string(), tables.display().to_string())
    };
    let started = Instant::now();
    let summary = run_index(&options).unwrap();
    (summary, started.elapsed().as_secs_f64())
}

/// In the child: build one corpus, print one JSON line with the figures.
fn child(source: &str) {
    let (summary, wall) = build(Path::new(source), Memories::ALL, None);
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let nodes: usize = summary.trees.values().map(|t| t.nodes).sum();
    println!(
        "{}",
        serde_json::json!({
            "wall": wall,
            "documents": summary.documents,
            "tokens": summary.tokens,
            "errors": summary.errors.len(),
            "peak_kb": peak_kb,
            "rows": summary.segments + nodes + summary.pages + summary.entities + summary.relations + summary.embeddings,
        })
    );
}

fn throughput(name: &str, source: &Path) {
    let bytes = dir_bytes(source);
    let figures = memweave_benches::json_output(
        Command::new(std::env::current_exe().unwrap()).env(CHILD, source),
    );
    let wall = figures["wall"].as_f64().unwrap();
    let mb = bytes as f64 / 1e6;
    println!(
        "{name}: {} documents, {:.2} MB, {} tokens, {} rows, {} errors: {wall:.1} s with {} workers = {:.3} MB/s/core, peak memory {:.0} MiB",
        figures["documents"],
        mb,
        figures["tokens"],
        figures["rows"],
        figures["errors"],
        workers(),
        mb / wall / workers() as f64,
        figures["peak_kb"].as_f64().unwrap() / 1024.0,
    );
}

fn calls_per_memory(essays: &Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sim = Sim::new(SimConfig {
        seed: 1,
        ..SimConfig::new(128, 1.0)
    });
    let url = memweave_llm::sim::serve_on_loopback(runtime.handle(), &sim).unwrap();
    let mut each = 0;
    for name in Memories::NAMES.into_iter().chain(["all four"]) {
        let memories = if name == "all four" {
            Memories::ALL
        } else {
            Memories::parse(name).unwrap()
        };
        let (summary, wall) = build(essays, memories, Some(&url));
        assert!(summary.errors.is_empty(), "{:?}", summary.errors);
        let calls = summary.cache.calls;
        let per_k = calls as f64 * 1000.0 / summary.tokens as f64;
        if name == "all four" {
            println!(
                "  {name:>9}: {calls} calls = {per_k:.2} per 1,000 tokens ({:.0}% of the {each} the four make alone: shared segments and cache), {wall:.1} s",
                100.0 * calls as f64 / each as f64
            );
        } else {
            each += calls;
            println!("  {name:>9}: {calls} calls = {per_k:.2} per 1,000 tokens, {wall:.1} s");
        }
    }
    println!(
        "  (GraphRAG: about 2 calls per 1,200-token chunk = 1.67 per 1,000 tokens, for its graph alone)"
    );
}

fn main() {
    if let Ok(source) = std::env::var(CHILD) {
        child(&source);
        return;
    }
    let essays = memweave_benches::shared_data("pg-essays");
    // Call counts do not depend on the build profile; throughput does.
    if std::env::var_os("BUILD_BENCH_CALLS_ONLY").is_none() {
        println!("Throughput, extractive backend, all four memories, hashing embedder:");
        throughput("pg-essays", &essays);
        if python_docs_installed() {
            throughput("python3.11-doc sources", Path::new(PYTHON_DOCS));
        }
    }
    println!("Model calls per 1,000 input tokens, pg-essays through the simulator:");
    calls_per_memory(&essays);
}
