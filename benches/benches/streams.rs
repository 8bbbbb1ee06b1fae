//! Streams and scale: (a) the cost of an edit, (b) throughput from one to two
//! worker processes, (c) recovery after a kill.
//!
//! (a) 1,000 documents (pg-essays cut into pieces of about 8 sentences, in a
//! temporary folder), built once; then one sentence of one document is edited
//! and a live indexer absorbs it (`--watch`'s path), and a new process re-runs
//! over the tables (a cron re-run's path). Prints model calls and wall time of
//! each against the full build, the ratio, and the edit's calls by task.
//! (b) A build by one process of one worker pinned to one core, then by two
//! processes of one worker each, pinned to a core each (timely's cluster mode
//! over loopback), fresh tables each: the speed-up of the dataflow (the
//! CPU-bound stages: segmenting, summarising, embedding, clustering) and of the
//! whole run (with process 0's reading and table writes). Throughput over
//! pg-essays cut into 250 documents; then the 49 whole essays, where one essay
//! of 13,600 words (12% of the text, more of the work: clustering grows faster
//! than the text) bounds how evenly two workers can share.
//! (c) a build of 300 documents against the OpenAI-compatible simulator (32
//! slots, 200 ms a request, over loopback HTTP) killed (SIGKILL) half-way, then
//! restarted: time from restart to committed against the uninterrupted build,
//! and the model calls the restart repeated (those in flight or not yet saved
//! when it was killed).
//!
//! Run: `cargo bench --workspace --bench streams` (release). Needs
//! ../shared/data/pg-essays. STREAMS_BENCH=a,b,c picks parts.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use memweave_llm::sim::{Sim, SimConfig, serve_on_loopback};
use memweave_pipeline::cluster::Cluster;
use memweave_pipeline::index::{IndexOptions, Indexer, compute, run_index};
use memweave_pipeline::source::{Source, SourceOptions};
use memweave_schemas::{LlmCallRow, TableStore};

/// Set in a child process: build SOURCE into TABLES (with the cluster given).
const CHILD: &str = "MEMWEAVE_STREAMS_BENCH_CHILD";

fn options(source: &Path, tables: &Path, cluster: Cluster, llm: Option<&str>) -> IndexOptions {
    IndexOptions {
        workers: if cluster.addresses.is_empty() { 2 } else { 1 },
        llm: memweave_benches::llm_config(llm),
        cluster,
        ..IndexOptions::new(source.display().to_string(), tables.display().to_string())
    }
}

/// pg-essays cut into `count` documents of consecutive sentences.
fn thousand_documents(dir: &Path, count: usize) {
    let essays = memweave_benches::shared_data("pg-essays");
    let names = memweave_benches::files_in(&essays);
    let text: String = names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap().replace('\n', " "))
        .collect::<Vec<_>>()
        .join(" ");
    let sentences: Vec<&str> = text.split_inclusive(". ").collect();
    let per = sentences.len() / count;
    for (i, chunk) in sentences.chunks(per).take(count).enumerate() {
        std::fs::write(dir.join(format!("doc{i:04}.txt")), chunk.concat()).unwrap();
    }
}

fn calls(tables: &Path) -> Vec<LlmCallRow> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = TableStore::local(tables).unwrap();
    runtime.block_on(store.read_rows(None)).unwrap()
}

fn edit_cost(dir: &Path) {
    let source = dir.join("corpus");
    std::fs::create_dir_all(&source).unwrap();
    thousand_documents(&source, 1000);
    let tables = dir.join("edit-tables");
    let options = options(&source, &tables, Cluster::default(), None);
    let files = Source::open(&options.source, &SourceOptions::default()).unwrap();
    let mut indexer = Indexer::open(&options).unwrap();
    let started = Instant::now();
    let full = indexer.index_files(&files).unwrap();
    let full_wall = started.elapsed();
    let built: HashSet<String> = calls(&tables).into_iter().map(|c| c.call_key).collect();

    let edited = source.join("doc0500.txt");
    let text = std::fs::read_to_string(&edited).unwrap();
    let at = text.find(". ").unwrap();
    let edit = format!("{} (as it turned out){}", &text[..at], &text[at..]);
    std::fs::write(&edited, &edit).unwrap();
    let started = Instant::now();
    indexer.index_files(&files).unwrap();
    let live_wall = started.elapsed();
    let after_live: Vec<LlmCallRow> = calls(&tables);
    let mut by_task: BTreeMap<String, usize> = BTreeMap::new();
    for call in after_live.iter().filter(|c| !built.contains(&c.call_key)) {
        let scope = if call.doc_id.is_some() {
            "document"
        } else {
            "corpus"
        };
        *by_task
            .entry(format!("{} ({scope})", call.task))
            .or_default() += 1;
    }
    let live_calls = after_live.len() - built.len();
    drop(indexer);

    // The same edit absorbed by a new process: undo it (a re-run over the
    // original), then redo it in a process of its own.
    std::fs::write(&edited, &text).unwrap();
    run_index(&options).unwrap();
    std::fs::write(&edited, &edit).unwrap();
    let before_rerun = calls(&tables).len();
    let started = Instant::now();
    run_index(&options).unwrap();
    let rerun_wall = started.elapsed();
    let rerun_calls = calls(&tables).len() - before_rerun;

    let ratio = |a: f64, b: f64| a / b;
    println!(
        "(a) edit cost: one sentence of one of {} documents ({} tokens)",
        full.documents, full.tokens
    );
    println!(
        "    full build:        {:>6} model calls  {:>8.3} s",
        built.len(),
        full_wall.as_secs_f64()
    );
    println!(
        "    edit, live:        {:>6} model calls  {:>8.3} s   calls {:.5} of the build's, time {:.4}",
        live_calls,
        live_wall.as_secs_f64(),
        ratio(live_calls as f64, built.len() as f64),
        ratio(live_wall.as_secs_f64(), full_wall.as_secs_f64())
    );
    println!(
        "    edit, new process: {:>6} model calls  {:>8.3} s   time {:.4} of the build's",
        rerun_calls,
        rerun_wall.as_secs_f64(),
        ratio(rerun_wall.as_secs_f64(), full_wall.as_secs_f64())
    );
    println!("    the live edit's calls by task: {by_task:?}");
}

/// A child build: its source and tables, its place in a cluster, the model
/// server it calls (the extractive backend without one), and the core it is
/// pinned to (`taskset`): one core per process, so a comparison is of
/// processes, not of threads on shared cores.
struct Child<'a> {
    source: &'a Path,
    tables: &'a Path,
    process: usize,
    addresses: &'a [String],
    llm: Option<&'a str>,
    core: Option<usize>,
}

impl Child<'_> {
    /// Starts it; process 0 prints its summary's stage times as JSON.
    fn spawn(&self) -> std::process::Child {
        let exe = std::env::current_exe().unwrap();
        let mut command = match self.core {
            Some(core) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &core.to_string()]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        command
            .env(CHILD, "1")
            .env("SOURCE", self.source)
            .env("TABLES", self.tables)
            .env("PROCESS", self.process.to_string())
            .env("ADDRESSES", self.addresses.join(","))
            .env("LLM_URL", self.llm.unwrap_or_default())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

fn run_child() {
    let var = |k: &str| std::env::var(k).unwrap();
    let addresses: Vec<String> = var("ADDRESSES")
        .split(',')
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    let cluster = Cluster {
        process: var("PROCESS").parse().unwrap(),
        addresses,
    };
    let llm = var("LLM_URL");
    let options = IndexOptions {
        workers: 1,
        ..options(
            Path::new(&var("SOURCE")),
            Path::new(&var("TABLES")),
            cluster,
            (!llm.is_empty()).then_some(llm.as_str()),
        )
    };
    if options.cluster.process != 0 {
        compute(&options).unwrap();
        return;
    }
    let summary = run_index(&options).unwrap();
    let stages = serde_json::json!({
        "read": summary.stages.read.as_secs_f64(),
        "build": summary.stages.build.as_secs_f64(),
        "write": summary.stages.write.as_secs_f64(),
    });
    println!("{stages}");
}

/// Waits for a child; process 0's stage times (its last line: timely prints
/// its own lines to stdout while connecting).
fn stages(child: std::process::Child) -> serde_json::Value {
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_default()
}

fn scaling(dir: &Path) {
    println!(
        "(b) 1 process x 1 worker on 1 core vs 2 processes x 1 worker, a core each ({} cores here):",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    let pieces = dir.join("corpus-250");
    std::fs::create_dir_all(&pieces).unwrap();
    thousand_documents(&pieces, 250);
    scale(dir, "pg-essays cut into 250 documents", &pieces);
    let essays = memweave_benches::shared_data("pg-essays");
    scale(dir, "pg-essays, 49 whole essays", &essays);
}

/// Builds `source` with one process, then two; prints the speed-ups.
fn scale(dir: &Path, name: &str, source: &Path) {
    // Wall time, and the dataflow's share of it.
    let time = |tables: &Path, addresses: Vec<String>| -> (f64, f64) {
        let started = Instant::now();
        let processes: Vec<_> = (0..addresses.len().max(1))
            .map(|p| {
                let child = Child {
                    source,
                    tables,
                    process: p,
                    addresses: &addresses,
                    llm: None,
                    core: Some(p),
                };
                child.spawn()
            })
            .collect();
        let build: Vec<f64> = processes
            .into_iter()
            .map(|p| stages(p)["build"].as_f64().unwrap_or(0.0))
            .collect();
        (started.elapsed().as_secs_f64(), build[0])
    };
    let one = time(&dir.join(format!("{name}-one")), Vec::new());
    let port = |_| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let two = time(&dir.join(format!("{name}-two")), (0..2).map(port).collect());
    println!("    {name}:");
    println!(
        "      dataflow (CPU-bound stages): {:.2} s vs {:.2} s, speed-up {:.2}x",
        one.1,
        two.1,
        one.1 / two.1
    );
    println!(
        "      whole run (with process 0's reading and table writes): {:.2} s vs {:.2} s, speed-up {:.2}x",
        one.0,
        two.0,
        one.0 / two.0
    );
}

fn recovery(dir: &Path) {
    let source = dir.join("recovery-corpus");
    std::fs::create_dir_all(&source).unwrap();
    thousand_documents(&source, 300);
    // A simulator per build, so its count of repeated prompts is the restart's.
    let server = tokio::runtime::Runtime::new().unwrap();
    let simulator = || {
        let sim = Sim::new(SimConfig {
            fault_rate: 0.0,
            ..SimConfig::new(32, 200.0)
        });
        let url = serve_on_loopback(server.handle(), &sim).unwrap();
        (sim, url)
    };
    let run = |tables: &Path, url: &str| {
        Child {
            source: &source,
            tables,
            process: 0,
            addresses: &[],
            llm: Some(url),
            core: None,
        }
        .spawn()
    };
    let (reference, url) = simulator();
    let started = Instant::now();
    stages(run(&dir.join("recovery-reference"), &url));
    let full = started.elapsed();
    let requests = reference.stats().requests;
    let (sim, url) = simulator();
    let tables = dir.join("recovery");
    let mut killed = run(&tables, &url);
    std::thread::sleep(full / 2);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let before_restart = sim.stats();
    let started = Instant::now();
    stages(run(&tables, &url));
    let recovered = started.elapsed();
    let after = sim.stats();
    println!(
        "(c) recovery, 300 documents, simulator with 32 slots at 200 ms a request: uninterrupted {:.2} s ({} requests); killed at {:.2} s after {} requests, restart to committed {:.2} s ({:.2} of a full build) with {} requests, {} of them repeats of calls made before the kill",
        full.as_secs_f64(),
        requests,
        (full / 2).as_secs_f64(),
        before_restart.requests,
        recovered.as_secs_f64(),
        recovered.as_secs_f64() / full.as_secs_f64(),
        after.requests - before_restart.requests,
        after.repeated - before_restart.repeated,
    );
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        run_child();
        return;
    }
    let parts = std::env::var("STREAMS_BENCH").unwrap_or_else(|_| "a,b,c".into());
    let dir = tempfile::tempdir().unwrap();
    if parts.contains('a') {
        edit_cost(dir.path());
    }
    if parts.contains('b') {
        scaling(dir.path());
    }
    if parts.contains('c') {
        recovery(dir.path());
    }
}
