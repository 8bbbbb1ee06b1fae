//! Scale: what a build costs as the archive grows, measured on the `memweave`
//! binary a user runs (release, embedded default: local files in, Lance tables
//! out, extractive backend, hashing embedder).
//!
//! Archives, on two axes:
//! - tokens axis, generated, at the sizes in SCALE_SIZES (default `1M,10M`; `100M` too for
//!   the full run): documents of 400 to 6,000 words written by a word-level
//!   Markov chain over pg-essays, each seeded by its number, with people and
//!   places drawn from a pool that grows with the archive (names recur across
//!   documents, as in a real one). No two documents repeat, so the call cache
//!   answers nothing a build has not paid for. Written once under SCALE_DIR and
//!   reused by later runs.
//! - real: the reStructuredText sources of the Python 3.11 documentation (497
//!   files, 12 MB; Debian's `python3.11-doc`, installed here when missing and
//!   run as root). SCALE_REAL=0 skips it, and the real archive below.
//! - documents axis: archives of short documents (a mail, a ticket, a forum
//!   post), generated at the counts in SCALE_DOCS (default `100k,1M`;
//!   `100k,1M,3M` for the full run): a subject line and 75 to 230 words each
//!   by the same Markov chain, naming people from a pool a tenth of the count,
//!   as JSON Lines files of 100,000 records; and real, the Python 3.11
//!   documentation's paragraphs joined into passages of about 100 tokens
//!   (14,633 documents). One build each: wall, documents/s, peak RSS and per
//!   document, its anonymous part (in a debug build about 200 MB of the RSS
//!   is the executable's pages, the same at every count), model calls per
//!   document and model tokens per corpus token (from `memweave report`),
//!   and the memory folder's bytes per byte of text;
//!   then between generated counts the peak's growth per added document and
//!   the documents/s ratio, and 10M documents on paper from that slope.
//!   SCALE_SIZES= (empty) runs this axis alone, SCALE_DOCS= skips it.
//!
//! For each archive of the tokens axis, one build into fresh tables (three
//! under 10 MB of text: the one of median peak RSS, with all three peaks
//! listed): wall, corpus
//! tokens per second, peak RSS of each process (VmHWM, polled) and its
//! anonymous part (RssAnon: RSS less the executable's pages), bytes of the
//! tables, the write stage's share of the wall (from the summary's `time`
//! line), rows in the tables and rows per second of wall. Then the slope,
//! bytes of peak RSS per byte of text, and RSS at each size against the
//! smallest. SCALE_TWO=SIZE (default 10M) also builds that size with two
//! processes of one worker each (timely's cluster mode over loopback) against
//! one process of two workers. SCALE_RESTART=SIZE (default: the largest size)
//! then runs new processes over that archive's tables, each to its commit:
//! one with nothing changed, one after 0.1% of the documents changed, and two
//! processes of one worker after the same documents changed back (a memory
//! built by one process continued by two): wall, peak RSS, rows written, and
//! bytes of the documents' states restored per character of text.
//!
//! Run: `cargo build --release -p memweave-cli && cargo bench --workspace
//! --bench scale`. SCALE_BIN=PATH measures another build of `memweave` (the
//! commit a change started from, say) with the same archives. Needs
//! ../shared/data/pg-essays.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memweave_benches::archive::{
    Markov, PYTHON_DOCS, change_one_in_a_thousand, dir_bytes, generate, generate_again,
    generate_short, memweave_binary, parse_size, python_docs_installed, write_passages,
};
use memweave_benches::measure::{Peak, index_measured, wait_measuring};
use memweave_benches::spend::{Cost, report};

/// Builds of an archive under 10 MB of text, of which the median is reported.
const SMALL_REPEATS: usize = 3;

fn main() {
    // `cargo bench` passes `--bench`; this harness takes its knobs from the
    // environment, like the other benches.
    let binary = memweave_binary("SCALE_BIN");
    let work = std::env::var_os("SCALE_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-scale"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&work).unwrap();
    let sizes = sizes_in("SCALE_SIZES", "1M,10M");
    let counts = sizes_in("SCALE_DOCS", "100k,1M");
    println!("memweave: {}", binary.display());
    println!("archives and tables under {}", work.display());

    let model = Markov::train(&memweave_benches::shared_data("pg-essays"));
    documents_axis(&binary, &work, &model, &counts);
    if sizes.is_empty() {
        return;
    }

    let mut archives: Vec<(String, PathBuf)> = Vec::new();
    for (name, tokens) in &sizes {
        let dir = work.join(format!("generated-{name}"));
        generate(&model, &dir, *tokens);
        archives.push((format!("generated {name}"), dir));
    }
    if std::env::var("SCALE_REAL").as_deref() != Ok("0") && python_docs_installed() {
        archives.push(("python3.11-doc".into(), PathBuf::from(PYTHON_DOCS)));
    }

    println!();
    println!(
        "{:<16} {:>6} {:>11} {:>8} {:>9} {:>10} {:>9} {:>8} {:>8} {:>10} {:>9} {:>8}",
        "archive",
        "docs",
        "tokens",
        "text MB",
        "wall s",
        "tokens/s",
        "peak RSS",
        "anon",
        "RSS/text",
        "tables MB",
        "write %",
        "rows/s"
    );
    let mut runs: Vec<(String, u64, Run)> = Vec::new();
    for (name, dir) in &archives {
        let text = dir_bytes(dir);
        let tables = work.join(format!("tables-{}", name.replace(' ', "-")));
        // A small build's peak moves by ~10% between identical runs (what is in
        // flight when the index build starts), as much as separates the ratios
        // worth telling apart: under 10 MB of text, take the median of three.
        let repeats = if text < 10_000_000 { SMALL_REPEATS } else { 1 };
        let mut tries: Vec<Run> = (0..repeats)
            .map(|_| {
                let _ = std::fs::remove_dir_all(&tables);
                index(&binary, dir, &tables, &[])
            })
            .collect();
        tries.sort_by_key(Run::peak_rss);
        let peaks: Vec<String> = tries.iter().map(|r| mib(r.peak_rss())).collect();
        let run = tries.swap_remove(repeats / 2);
        print_row(name, text, &run);
        if repeats > 1 {
            println!(
                "{:<16} peak RSS of {repeats} runs: {}; the median above",
                "",
                peaks.join(", ")
            );
        }
        runs.push((name.clone(), text, run));
    }

    println!();
    let generated: Vec<&(String, u64, Run)> = runs
        .iter()
        .filter(|(n, _, _)| n.starts_with("generated"))
        .collect();
    if let Some((first, _, base)) = generated.first() {
        for (name, _, run) in &generated[1..] {
            println!(
                "peak RSS {name} / {first}: {:.2}x ({} / {}); anonymous only: {:.2}x ({} / {})",
                run.peak_rss() as f64 / base.peak_rss() as f64,
                mib(run.peak_rss()),
                mib(base.peak_rss()),
                run.peak_anon() as f64 / base.peak_anon() as f64,
                mib(run.peak_anon()),
                mib(base.peak_anon())
            );
        }
    }
    for (name, text, run) in &runs {
        println!(
            "slope {name}: {:.1} bytes of peak RSS per byte of text",
            run.peak_rss() as f64 / *text as f64
        );
    }

    let two = std::env::var("SCALE_TWO").unwrap_or_else(|_| "10M".into());
    if let Some(dir) = archive_named(&archives, &format!("generated {two}")) {
        println!();
        let tables = work.join("tables-two-processes");
        let _ = std::fs::remove_dir_all(&tables);
        let run = cluster(&binary, &dir, &tables, &work);
        let one = runs
            .iter()
            .find(|(n, _, _)| n == &format!("generated {two}"))
            .map(|(_, _, r)| r)
            .unwrap();
        println!(
            "generated {two}, 1 process x 2 workers: wall {:.1} s, peak RSS {}; 2 processes x 1 worker: wall {:.1} s (speed-up {:.2}x), peak RSS {} (process 0) and {} (process 1), write {:.0}%",
            one.wall.as_secs_f64(),
            mib(one.peak_rss()),
            run.wall.as_secs_f64(),
            one.wall.as_secs_f64() / run.wall.as_secs_f64(),
            mib(run.peaks[0].rss),
            mib(run.peaks[1].rss),
            run.write_share() * 100.0
        );
    }

    let restart = std::env::var("SCALE_RESTART")
        .ok()
        .or_else(|| sizes.last().map(|(n, _)| n.clone()));
    if let Some(size) = restart
        && let Some(dir) = archive_named(&archives, &format!("generated {size}"))
    {
        println!();
        let tables = work.join(format!("tables-generated-{size}"));
        let build = runs
            .iter()
            .find(|(n, _, _)| n == &format!("generated {size}"))
            .map(|(_, _, r)| r);
        if let Some(build) = build {
            println!(
                "generated {size} from scratch: wall {:.1} s, peak RSS {}, {} rows written",
                build.wall.as_secs_f64(),
                mib(build.peak_rss()),
                build.written()
            );
        }
        let unchanged = index(&binary, &dir, &tables, &[]);
        print_restart(
            &format!("restart over generated {size}, nothing changed"),
            &unchanged,
        );
        let changed = change_one_in_a_thousand(&model, &dir);
        let edited = index(&binary, &dir, &tables, &[]);
        print_restart(
            &format!("restart over generated {size}, {changed} documents changed (0.1%)"),
            &edited,
        );
        // Put the archive back, so the next run of the bench builds the same
        // one: the same documents change again, now under two processes.
        generate_again(&model, &dir);
        let rescaled = cluster(&binary, &dir, &tables, &work);
        print_restart(
            &format!("1 -> 2 processes over generated {size}, {changed} documents changed back"),
            &rescaled,
        );
    }
}

/// The sizes in the variable `name` (`default` when unset; none when empty).
fn sizes_in(name: &str, default: &str) -> Vec<(String, u64)> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| (s.to_string(), parse_size(s)))
        .collect()
}

/// The documents axis: one build of each archive of short documents
/// (generated at `counts`, and the Python documentation's passages), then
/// how peak memory and throughput move with the count.
fn documents_axis(binary: &Path, work: &Path, model: &Markov, counts: &[(String, u64)]) {
    let mut archives: Vec<(String, PathBuf, u64)> = Vec::new();
    for (name, count) in counts {
        let dir = work.join(format!("short-{name}"));
        let text = generate_short(model, &dir, *count as usize);
        archives.push((format!("short {name}"), dir, text));
    }
    if std::env::var("SCALE_REAL").as_deref() != Ok("0") && python_docs_installed() {
        let dir = work.join("python-passages");
        std::fs::create_dir_all(&dir).unwrap();
        let (_, text) = write_passages(Path::new(PYTHON_DOCS), &dir.join("passages.jsonl"));
        archives.push(("python passages".into(), dir, text));
    }
    if archives.is_empty() {
        return;
    }
    println!();
    println!("documents axis: archives of short documents, one build each");
    println!(
        "{:<16} {:>9} {:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11}",
        "archive",
        "docs",
        "text MB",
        "wall s",
        "docs/s",
        "peak RSS",
        "RSS/doc",
        "anon",
        "calls/doc",
        "tok/token",
        "tables/text"
    );
    let mut generated: Vec<(String, f64, Run)> = Vec::new();
    for (name, dir, text) in archives {
        let tables = work.join(format!("tables-{}", name.replace(' ', "-")));
        let _ = std::fs::remove_dir_all(&tables);
        let run = index(binary, &dir, &tables, &[]);
        let cost = Cost::of(&report(binary, &tables));
        let documents = run.summary.get("documents").copied().unwrap_or(0.0);
        let wall = run.wall.as_secs_f64();
        println!(
            "{:<16} {:>9.0} {:>8.1} {:>9.1} {:>8.0} {:>9} {:>7.0} B {:>9} {:>9.2} {:>10.2} {:>10.1}x",
            name,
            documents,
            text as f64 / 1e6,
            wall,
            documents / wall,
            mib(run.peak_rss()),
            run.peak_rss() as f64 / documents,
            mib(run.peak_anon()),
            cost.all().calls / documents,
            cost.tokens_per_token(),
            run.tables_bytes as f64 / text as f64
        );
        if name.starts_with("short") {
            generated.push((name, documents, run));
        }
    }
    for pair in generated.windows(2) {
        let [
            (small, small_docs, small_run),
            (large, large_docs, large_run),
        ] = pair
        else {
            continue;
        };
        let added = large_docs - small_docs;
        println!(
            "{small} -> {large}: peak RSS {:+.0} bytes per added document (anonymous {:+.0}); documents/s {:.2}x",
            (large_run.peak_rss() as f64 - small_run.peak_rss() as f64) / added,
            (large_run.peak_anon() as f64 - small_run.peak_anon() as f64) / added,
            (large_docs / large_run.wall.as_secs_f64())
                / (small_docs / small_run.wall.as_secs_f64())
        );
    }
    if let [
        (small, small_docs, small_run),
        ..,
        (large, large_docs, large_run),
    ] = generated.as_slice()
    {
        let slope =
            (large_run.peak_rss() as f64 - small_run.peak_rss() as f64) / (large_docs - small_docs);
        let on_paper = large_run.peak_rss() as f64 + slope * (1e7 - large_docs);
        println!(
            "10M short documents on paper, from the slope {small} -> {large}: peak RSS {}",
            mib(on_paper.max(0.0) as u64)
        );
    }
}

fn print_restart(what: &str, run: &Run) {
    println!(
        "{what}: wall to commit {:.1} s, peak RSS {}, {} rows written, write {:.0}%, states restored {:.3} bytes per character of text",
        run.wall.as_secs_f64(),
        mib(run.peak_rss()),
        run.written(),
        run.write_share() * 100.0,
        run.summary.get("restored per char").copied().unwrap_or(0.0)
    );
}

fn archive_named(archives: &[(String, PathBuf)], name: &str) -> Option<PathBuf> {
    archives
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, d)| d.clone())
}

/// One measured run of `memweave index`.
#[derive(Debug)]
struct Run {
    wall: Duration,
    /// Peaks of each process.
    peaks: Vec<Peak>,
    /// The summary's numbers: documents, tokens, rows per table, stage seconds.
    summary: HashMap<String, f64>,
    tables_bytes: u64,
}

impl Run {
    fn peak_rss(&self) -> u64 {
        self.peaks.iter().map(|p| p.rss).max().unwrap_or(0)
    }

    fn peak_anon(&self) -> u64 {
        self.peaks.iter().map(|p| p.anon).max().unwrap_or(0)
    }

    /// Rows the run wrote, all tables together.
    fn written(&self) -> u64 {
        self.summary.get("written").copied().unwrap_or(0.0) as u64
    }

    fn write_share(&self) -> f64 {
        self.summary.get("write").copied().unwrap_or(0.0) / self.wall.as_secs_f64()
    }

    fn rows(&self) -> f64 {
        [
            "documents",
            "segments",
            "tree nodes",
            "pages",
            "entities",
            "relations",
            "embeddings",
        ]
        .iter()
        .filter_map(|k| self.summary.get(*k))
        .sum()
    }
}

fn print_row(name: &str, text: u64, run: &Run) {
    let tokens = run.summary.get("tokens").copied().unwrap_or(0.0);
    let wall = run.wall.as_secs_f64();
    println!(
        "{:<16} {:>6} {:>11} {:>8.1} {:>9.1} {:>10.0} {:>9} {:>8} {:>8.1} {:>10.1} {:>8.1}% {:>8.0}",
        name,
        run.summary.get("documents").copied().unwrap_or(0.0),
        tokens,
        text as f64 / 1e6,
        wall,
        tokens / wall,
        mib(run.peak_rss()),
        mib(run.peak_anon()),
        run.peak_rss() as f64 / text as f64,
        run.tables_bytes as f64 / 1e6,
        run.write_share() * 100.0,
        run.rows() / wall
    );
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1 << 20) as f64)
}

/// `memweave index SOURCE --out TABLES` with `extra` flags, measured.
fn index(binary: &Path, source: &Path, tables: &Path, extra: &[&str]) -> Run {
    let (wall, output, peak) = index_measured(binary, source, tables, extra);
    finish(wall, &output, vec![peak], tables)
}

/// The same build by two processes of one worker each, over loopback.
fn cluster(binary: &Path, source: &Path, tables: &Path, work: &Path) -> Run {
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let hostfile = work.join("hosts");
    let hosts: String = ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect();
    std::fs::write(&hostfile, hosts).unwrap();
    let started = Instant::now();
    let spawn = |process: usize| {
        Command::new(binary)
            .arg("index")
            .arg(source)
            .arg("--out")
            .arg(tables)
            .args(["-w", "1", "-n", "2", "-p", &process.to_string(), "-h"])
            .arg(&hostfile)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (zero, one) = (spawn(0), spawn(1));
    let other = std::thread::spawn(move || wait_measuring(one).1);
    let (output, peak_zero) = wait_measuring(zero);
    let peak_one = other.join().unwrap();
    finish(
        started.elapsed(),
        &output,
        vec![peak_zero, peak_one],
        tables,
    )
}

fn finish(wall: Duration, output: &str, peaks: Vec<Peak>, tables: &Path) -> Run {
    let summary = parse_summary(output);
    assert!(
        summary.contains_key("tokens"),
        "memweave index printed no summary:\n{output}"
    );
    Run {
        wall,
        peaks,
        summary,
        tables_bytes: dir_bytes(tables),
    }
}

/// The numbers of `memweave index`'s summary, by the word before them.
fn parse_summary(output: &str) -> HashMap<String, f64> {
    let mut numbers = HashMap::new();
    for line in output.lines() {
        let line = line.trim();
        for name in [
            "documents",
            "tokens",
            "segments",
            "pages",
            "entities",
            "relations",
            "embeddings",
            "written",
        ] {
            if let Some(rest) = line.strip_prefix(name)
                && let Some(n) = first_number(rest)
            {
                numbers.insert(name.to_string(), n);
            }
        }
        // "restored 1.2 MB of the documents' states (0.05 bytes per character ...".
        if let Some(rest) = line.strip_prefix("restored")
            && let Some(per_char) = rest.split_once('(').and_then(|(_, r)| first_number(r))
        {
            numbers.insert("restored per char".to_string(), per_char);
        }
        if let Some(rest) = line.strip_prefix("tree nodes")
            && let Some(n) = first_number(rest)
        {
            *numbers.entry("tree nodes".to_string()).or_insert(0.0) += n;
        }
        if let Some(rest) = line.strip_prefix("time") {
            for part in rest.split(',') {
                let mut words = part.split_whitespace();
                if let (Some(stage), Some(secs)) = (words.next(), words.next()) {
                    let secs = secs.trim_end_matches('s').parse::<f64>().unwrap_or(0.0);
                    numbers.insert(stage.to_string(), secs);
                }
            }
        }
    }
    numbers
}

fn first_number(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}
