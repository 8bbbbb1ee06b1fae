//! Scale: what a build costs as the archive grows, measured on the `memweave`
//! binary a user runs (release, embedded default: local files in, Lance tables
//! out, extractive backend, hashing embedder).
//!
//! Archives:
//! - generated, at the sizes in SCALE_SIZES (default `1M,10M`; `100M` too for
//!   the full run): documents of 400 to 6,000 words written by a word-level
//!   Markov chain over pg-essays, each seeded by its number, with people and
//!   places drawn from a pool that grows with the archive (names recur across
//!   documents, as in a real one). No two documents repeat, so the call cache
//!   answers nothing a build has not paid for. Written once under SCALE_DIR and
//!   reused by later runs.
//! - real: the reStructuredText sources of the Python 3.11 documentation (497
//!   files, 12 MB; Debian's `python3.11-doc`, installed here when missing and
//!   run as root). SCALE_REAL=0 skips it.
//!
//! For each archive, one build into fresh tables (three under 10 MB of text:
//! the one of median peak RSS, with all three peaks listed): wall, corpus
//! tokens per second, peak RSS of each process (VmHWM, polled) and its
//! anonymous part (RssAnon: RSS less the executable's pages), bytes of the
//! tables, the write stage's share of the wall (from the summary's `time`
//! line), rows in the tables and rows per second of wall. Then the slope,
//! bytes of peak RSS per byte of text, and RSS at each size against the
//! smallest. SCALE_TWO=SIZE (default 10M) also builds that size with two
//! processes of one worker each (timely's cluster mode over loopback) against
//! one process of two workers. SCALE_RESTART=SIZE (default: the largest size)
//! then changes 0.1% of that archive's documents and runs a new process over
//! its tables: wall to commit and peak RSS.
//!
//! Run: `cargo build --release -p memweave-pipeline && cargo bench --workspace
//! --bench scale`. SCALE_BIN=PATH measures another build of `memweave` (the
//! commit a change started from, say) with the same archives. Needs
//! ../shared/data/pg-essays.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where a real corpus the project did not write lives once installed.
const PYTHON_DOCS: &str = "/usr/share/doc/python3.11/html/_sources";
/// cl100k tokens per word of the generated English, measured on pg-essays.
const TOKENS_PER_WORD: f64 = 1.3;
/// Builds of an archive under 10 MB of text, of which the median is reported.
const SMALL_REPEATS: usize = 3;

fn main() {
    // `cargo bench` passes `--bench`; this harness takes its knobs from the
    // environment, like the other benches.
    let binary = memweave_binary();
    let work = std::env::var_os("SCALE_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-scale"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&work).unwrap();
    let sizes: Vec<(String, u64)> = std::env::var("SCALE_SIZES")
        .unwrap_or_else(|_| "1M,10M".into())
        .split(',')
        .map(|s| (s.trim().to_string(), parse_size(s.trim())))
        .collect();
    println!("memweave: {}", binary.display());
    println!("archives and tables under {}", work.display());

    let mut archives: Vec<(String, PathBuf)> = Vec::new();
    let model = Markov::train(&memweave_benches::shared_data("pg-essays"));
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
        let text = text_bytes(dir);
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
        let changed = change_one_in_a_thousand(&model, &dir);
        let run = index(&binary, &dir, &tables, &[]);
        println!(
            "restart over generated {size} with {changed} documents changed (0.1%): wall to commit {:.1} s, peak RSS {}, write {:.0}%",
            run.wall.as_secs_f64(),
            mib(run.peak_rss()),
            run.write_share() * 100.0
        );
        // Put the archive back, so the next run of the bench builds the same one.
        generate_again(&model, &dir);
    }
}

/// The `memweave` binary: SCALE_BIN, else the release build beside this bench.
fn memweave_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SCALE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let release = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("memweave");
    assert!(
        release.exists(),
        "{} is missing: run `cargo build --release -p memweave-pipeline` first, or set SCALE_BIN",
        release.display()
    );
    release
}

fn parse_size(size: &str) -> u64 {
    let (number, unit) = size.split_at(size.len() - 1);
    let scale = match unit {
        "M" => 1_000_000,
        "k" => 1_000,
        _ => panic!("SCALE_SIZES takes sizes like 1M, 10M, 100M, 500k; got {size}"),
    };
    number.parse::<u64>().unwrap() * scale
}

fn python_docs_installed() -> bool {
    if Path::new(PYTHON_DOCS).exists() {
        return true;
    }
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-qq", "python3.11-doc"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        println!("python3.11-doc is not installed (apt-get install python3.11-doc); skipping it");
    }
    installed && Path::new(PYTHON_DOCS).exists()
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

/// A process's peak memory, in bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Peak {
    /// Resident set (VmHWM): its own memory and the pages of the `memweave`
    /// executable it has mapped: 60 to 110 MiB, depending on how much of
    /// the code a run has reached by its peak (at 10M tokens more of it than
    /// at 1M).
    rss: u64,
    /// Anonymous resident memory (RssAnon, polled): the process's own.
    anon: u64,
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
        .unwrap();
    let (output, peak) = wait_measuring(child);
    finish(started, &output, vec![peak], tables)
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
    finish(started, &output, vec![peak_zero, peak_one], tables)
}

fn finish(started: Instant, output: &str, peaks: Vec<Peak>, tables: &Path) -> Run {
    let summary = parse_summary(output);
    assert!(
        summary.contains_key("tokens"),
        "memweave index printed no summary:\n{output}"
    );
    Run {
        wall: started.elapsed(),
        peaks,
        summary,
        tables_bytes: dir_bytes(tables),
    }
}

/// Waits for `child`, polling its peak RSS; returns its stdout and the peak.
fn wait_measuring(mut child: Child) -> (String, Peak) {
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let status = format!("/proc/{}/status", child.id());
    let mut peak = Peak::default();
    loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            let bytes = |field: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                    .map_or(0, |kb| kb * 1024)
            };
            peak.rss = peak.rss.max(bytes("VmHWM:"));
            peak.anon = peak.anon.max(bytes("RssAnon:"));
        }
        if let Some(exit) = child.try_wait().unwrap() {
            let output = reader.join().unwrap();
            assert!(exit.success(), "memweave index failed ({exit}):\n{output}");
            return (output, peak);
        }
        std::thread::sleep(Duration::from_millis(50));
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
        ] {
            if let Some(rest) = line.strip_prefix(name)
                && let Some(n) = first_number(rest)
            {
                numbers.insert(name.to_string(), n);
            }
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

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                dir_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

fn text_bytes(dir: &Path) -> u64 {
    dir_bytes(dir)
}

/// A word-level Markov chain of order two: enough to write prose whose
/// vocabulary, sentence lengths and paragraphing look like essays, never the
/// same twice.
struct Markov {
    words: Vec<String>,
    /// (word, word) → the indices of the words that followed that pair.
    next: HashMap<(u32, u32), Vec<u32>>,
    starts: Vec<(u32, u32)>,
}

impl Markov {
    fn train(essays: &Path) -> Markov {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(essays)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut words: Vec<String> = Vec::new();
        let mut next: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        let mut starts = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(path).unwrap();
            let ids: Vec<u32> = text
                .split_whitespace()
                .map(|w| {
                    *index.entry(w.to_string()).or_insert_with(|| {
                        words.push(w.to_string());
                        (words.len() - 1) as u32
                    })
                })
                .collect();
            for w in ids.windows(3) {
                next.entry((w[0], w[1])).or_default().push(w[2]);
                if words[w[0] as usize].ends_with('.') {
                    starts.push((w[1], w[2]));
                }
            }
        }
        Markov {
            words,
            next,
            starts,
        }
    }

    /// About `words` words of prose, with `names` mixed in as subjects.
    fn write(&self, rng: &mut fastrand::Rng, words: usize, names: &[String]) -> String {
        let mut out = String::new();
        let mut written = 0;
        let mut pair = self.starts[rng.usize(..self.starts.len())];
        let mut sentence_words = 0;
        let mut sentences_in_paragraph = 0;
        while written < words {
            let word = &self.words[pair.1 as usize];
            out.push_str(word);
            written += 1;
            sentence_words += 1;
            let followers = self.next.get(&pair);
            let ends_sentence = word.ends_with('.') || word.ends_with('?');
            match followers {
                Some(f) if !(ends_sentence && sentence_words > 8) || rng.u8(..4) == 0 => {
                    pair = (pair.1, f[rng.usize(..f.len())]);
                    out.push(' ');
                    if ends_sentence {
                        sentence_words = 0;
                    }
                }
                _ => {
                    if !ends_sentence {
                        out.push('.');
                    }
                    sentences_in_paragraph += 1;
                    sentence_words = 0;
                    if sentences_in_paragraph > 3 + rng.usize(..5) {
                        out.push_str("\n\n");
                        sentences_in_paragraph = 0;
                    } else {
                        out.push(' ');
                    }
                    // A new sentence, often about one of the document's names.
                    if !names.is_empty() && rng.u8(..3) == 0 {
                        let name = &names[rng.usize(..names.len())];
                        let verb = ["said", "wrote", "argued", "noticed", "found"][rng.usize(..5)];
                        let _ = write!(out, "{name} {verb} that ");
                        written += 3;
                    }
                    pair = self.starts[rng.usize(..self.starts.len())];
                }
            }
        }
        out
    }
}

/// The pool of people and places a generated archive of `documents` mentions:
/// it grows with the archive, so names recur across documents at every size.
fn name_pool(documents: usize) -> Vec<String> {
    const FIRST: &[&str] = &[
        "Ada", "Bram", "Cleo", "Dmitri", "Esme", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri",
        "Lars", "Mira", "Nils", "Oona", "Pavel", "Quinn", "Rosa", "Soren", "Tamsin",
    ];
    const SYLLABLES: &[&str] = &[
        "ber", "cal", "dor", "fen", "gar", "hol", "kes", "lin", "mor", "nav", "pel", "quon", "ras",
        "sel", "tav", "ul", "vor", "wen", "yar", "zel",
    ];
    let size = (documents * 4).max(40);
    (0..size)
        .map(|i| {
            let a = SYLLABLES[i % SYLLABLES.len()];
            let b = SYLLABLES[(i / SYLLABLES.len()) % SYLLABLES.len()];
            let c = SYLLABLES[(i / 400) % SYLLABLES.len()];
            let mut surname = format!("{a}{b}{c}");
            surname[..1].make_ascii_uppercase();
            if i % 3 == 0 {
                format!("{surname} Harbour")
            } else {
                format!("{} {surname}", FIRST[(i / 7) % FIRST.len()])
            }
        })
        .collect()
}

/// Document `n` of a generated archive: its words and names follow from `n`.
fn document(model: &Markov, pool: &[String], n: usize, edit: u32) -> String {
    let mut rng = fastrand::Rng::with_seed(n as u64 * 7919 + u64::from(edit));
    // Sizes log-uniform from 400 to 6,000 words.
    let words = (400.0 * 15f64.powf(rng.f64())) as usize;
    // A few names per document, skewed towards the front of the pool.
    let names: Vec<String> = (0..2 + rng.usize(..5))
        .map(|_| {
            let skew = rng.f64() * rng.f64();
            pool[(skew * pool.len() as f64) as usize].clone()
        })
        .collect();
    let title = model.write(&mut rng, 6, &[]);
    let body = model.write(&mut rng, words, &names);
    format!("{}\n\n{body}\n", title.trim_end_matches('.'))
}

/// Average words of a generated document (log-uniform from 400 to 6,000).
fn mean_words() -> f64 {
    (6000.0 - 400.0) / 15f64.ln()
}

/// Writes the generated archive of about `tokens` tokens into `dir`, unless a
/// complete one is there.
fn generate(model: &Markov, dir: &Path, tokens: u64) {
    let documents = (tokens as f64 / TOKENS_PER_WORD / mean_words()).ceil() as usize;
    let done = dir.join(".complete");
    if done.exists() {
        return;
    }
    println!(
        "writing {documents} generated documents into {}",
        dir.display()
    );
    std::fs::create_dir_all(dir).unwrap();
    let pool = name_pool(documents);
    for n in 0..documents {
        // A hundred documents a folder, as archives are organised.
        let folder = dir.join(format!("{:05}", n / 100));
        if n % 100 == 0 {
            std::fs::create_dir_all(&folder).unwrap();
        }
        std::fs::write(
            folder.join(format!("doc{n:07}.txt")),
            document(model, &pool, n, 0),
        )
        .unwrap();
    }
    std::fs::write(&done, documents.to_string()).unwrap();
}

fn documents_in(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join(".complete"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Rewrites one document in a thousand (at least one) with new text; returns
/// how many.
fn change_one_in_a_thousand(model: &Markov, dir: &Path) -> usize {
    let documents = documents_in(dir);
    let pool = name_pool(documents);
    let changed: Vec<usize> = (0..documents).step_by(1000).collect();
    for &n in &changed {
        let path = dir
            .join(format!("{:05}", n / 100))
            .join(format!("doc{n:07}.txt"));
        std::fs::write(path, document(model, &pool, n, 1)).unwrap();
    }
    changed.len()
}

/// Undoes [`change_one_in_a_thousand`].
fn generate_again(model: &Markov, dir: &Path) {
    let documents = documents_in(dir);
    let pool = name_pool(documents);
    for n in (0..documents).step_by(1000) {
        let path = dir
            .join(format!("{:05}", n / 100))
            .join(format!("doc{n:07}.txt"));
        std::fs::write(path, document(model, &pool, n, 0)).unwrap();
    }
}
