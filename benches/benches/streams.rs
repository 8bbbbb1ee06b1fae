//! Streams and scale: (a) the cost of an edit, (b) throughput from one to two
//! worker processes, (c) recovery after a kill.
//!
//! (a) 1,000 documents (pg-essays cut into pieces of about 8 sentences, in a
//! temporary folder), built once; then one sentence of one document is edited
//! and a live indexer absorbs it (`--watch`'s path), and a new process re-runs
//! over the tables (a cron re-run's path). Prints model calls and wall time of
//! each against the full build, the ratio, and the edit's calls by task.
//! (b) pg-essays built by one process of one worker pinned to one core, then by
//! two processes of one worker each, pinned to a core each (timely's cluster
//! mode over loopback), fresh tables each.
//! (c) the 1,000-document build killed (SIGKILL) half-way, then restarted:
//! time from restart to committed, against the uninterrupted build.
//!
//! Run: `cargo bench --workspace --bench streams` (release). Needs
//! ../shared/data/pg-essays. STREAMS_BENCH=a,b,c picks parts.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use memweave_llm::EmbedArgs;
use memweave_operators::build::BuildConfig;
use memweave_pipeline::cluster::Cluster;
use memweave_pipeline::index::{IndexOptions, Indexer, run_index};
use memweave_pipeline::source::{Source, SourceOptions};
use memweave_schemas::{LlmCallRow, TableStore};

/// Set in a child process: build SOURCE into TABLES (with the cluster given).
const CHILD: &str = "MEMWEAVE_STREAMS_BENCH_CHILD";

fn options(source: &Path, tables: &Path, cluster: Cluster) -> IndexOptions {
    IndexOptions {
        source: source.display().to_string(),
        source_options: SourceOptions::default(),
        tables: tables.display().to_string(),
        storage_options: Default::default(),
        workers: if cluster.addresses.is_empty() { 2 } else { 1 },
        build: BuildConfig::DEFAULT,
        llm: memweave_benches::llm_args(None),
        embed: EmbedArgs::default(),
        interactive: false,
        cluster,
    }
}

/// pg-essays cut into `count` documents of consecutive sentences.
fn thousand_documents(dir: &Path, count: usize) {
    let essays = memweave_benches::shared_data("pg-essays");
    let mut names: Vec<_> = std::fs::read_dir(&essays)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
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
    let options = options(&source, &tables, Cluster::default());
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

/// Starts a build in a child process (so a cluster's processes are separate).
fn child(
    source: &Path,
    tables: &Path,
    process: usize,
    addresses: &[String],
) -> std::process::Child {
    pinned(None, source, tables, process, addresses)
}

/// [`child`], on one core (`taskset`) when `core` is given: one core per
/// process, so the comparison is of processes, not of threads on shared cores.
fn pinned(
    core: Option<usize>,
    source: &Path,
    tables: &Path,
    process: usize,
    addresses: &[String],
) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = match core {
        Some(core) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &core.to_string()]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    command
        .env(CHILD, "1")
        .env("SOURCE", source)
        .env("TABLES", tables)
        .env("PROCESS", process.to_string())
        .env("ADDRESSES", addresses.join(","))
        .spawn()
        .unwrap()
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
    let options = options(
        Path::new(&var("SOURCE")),
        Path::new(&var("TABLES")),
        cluster,
    );
    run_index(&IndexOptions {
        workers: 1,
        ..options
    })
    .unwrap();
}

fn scaling(dir: &Path) {
    let essays = memweave_benches::shared_data("pg-essays");
    let time = |tables: &Path, addresses: Vec<String>| -> Duration {
        let started = Instant::now();
        let processes: Vec<_> = (0..addresses.len().max(1))
            .map(|p| pinned(Some(p), &essays, tables, p, &addresses))
            .collect();
        for mut p in processes {
            assert!(p.wait().unwrap().success());
        }
        started.elapsed()
    };
    let one = time(&dir.join("one"), Vec::new());
    let port = |_| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let two = time(&dir.join("two"), (0..2).map(port).collect());
    println!(
        "(b) pg-essays, 1 process x 1 worker on 1 core: {:.2} s; 2 processes x 1 worker, a core each: {:.2} s; speed-up {:.2}x ({} cores here)",
        one.as_secs_f64(),
        two.as_secs_f64(),
        one.as_secs_f64() / two.as_secs_f64(),
        std::thread::available_parallelism().map_or(1, usize::from)
    );
}

fn recovery(dir: &Path) {
    let source = dir.join("corpus");
    if !source.exists() {
        std::fs::create_dir_all(&source).unwrap();
        thousand_documents(&source, 1000);
    }
    let reference = dir.join("recovery-reference");
    let started = Instant::now();
    assert!(child(&source, &reference, 0, &[]).wait().unwrap().success());
    let full = started.elapsed();
    let tables = dir.join("recovery");
    let mut killed = child(&source, &tables, 0, &[]);
    std::thread::sleep(full / 2);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let started = Instant::now();
    assert!(child(&source, &tables, 0, &[]).wait().unwrap().success());
    let recovered = started.elapsed();
    println!(
        "(c) recovery, 1,000 documents: uninterrupted {:.2} s; killed at {:.2} s, restart to committed {:.2} s ({:.2} of a full build)",
        full.as_secs_f64(),
        (full / 2).as_secs_f64(),
        recovered.as_secs_f64(),
        recovered.as_secs_f64() / full.as_secs_f64()
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
