//! Retention: what a memory that follows an archive for many rounds weighs
//! against a fresh build of the same files, with and without a policy.
//!
//! pg-essays (49 files) is copied and built; then each round appends one
//! sentence to one essay (in turn) and runs `memweave index` over the copy
//! into memories kept under each `--keep-checkpoints` of RETENTION_KEEP
//! (default `1,3`; `--serving-grace 0s`: no replica reads them), and, for
//! the first RETENTION_KEEP_ALL_ROUNDS
//! rounds, one that keeps its whole history. Every RETENTION_EVERY rounds
//! each memory's bytes are printed beside a fresh build of the files as they
//! are then (the ratio the retention target is stated in), and the wall of
//! the policy's rounds so far.
//!
//! Run: `cargo build --release -p memweave-cli && cargo bench -p
//! memweave-benches --bench retention` (RETENTION_ROUNDS, default 100;
//! RETENTION_EVERY, default 25; RETENTION_KEEP_ALL_ROUNDS, default 30;
//! RETENTION_BIN=PATH for another build of `memweave`). Needs
//! ../shared/data/pg-essays.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use memweave_benches::archive::{dir_bytes, memweave_binary};
use memweave_benches::measure::index_measured;
use memweave_benches::{files_in, shared_data};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().unwrap())
}

/// The wall of `memweave index` into `tables` (it fails the bench if the
/// run fails).
fn index(binary: &Path, source: &Path, tables: &Path, extra: &[String]) -> Duration {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    index_measured(binary, source, tables, &extra).0
}

fn main() {
    let binary = memweave_binary("RETENTION_BIN");
    let rounds = env_number("RETENTION_ROUNDS", 100);
    let every = env_number("RETENTION_EVERY", 25).max(1);
    let keep_all_rounds = env_number("RETENTION_KEEP_ALL_ROUNDS", 30);
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("essays");
    std::fs::create_dir(&source).unwrap();
    for file in files_in(&shared_data("pg-essays")) {
        std::fs::copy(&file, source.join(file.file_name().unwrap())).unwrap();
    }
    let essays = files_in(&source);
    let policies: Vec<(String, Vec<String>)> = std::env::var("RETENTION_KEEP")
        .unwrap_or_else(|_| "1,3".into())
        .split(',')
        .map(|n| {
            let flags = ["--keep-checkpoints", n.trim(), "--serving-grace", "0s"];
            (
                format!("keep {}", n.trim()),
                flags.map(String::from).to_vec(),
            )
        })
        .collect();
    let every_version = work.path().join("every-version");
    let mut walls = vec![Duration::ZERO; policies.len()];
    for (at, (name, flags)) in policies.iter().enumerate() {
        walls[at] += index(&binary, &source, &work.path().join(name), flags);
    }
    index(&binary, &source, &every_version, &[]);
    println!(
        "memweave: {}; {rounds} rounds over {} essays",
        binary.display(),
        essays.len()
    );
    for round in 1..=rounds {
        let essay = &essays[round % essays.len()];
        let mut text = std::fs::read_to_string(essay).unwrap();
        text.push_str(&format!(
            "\nRound {round} adds this sentence about its edit.\n"
        ));
        std::fs::write(essay, text).unwrap();
        for (at, (name, flags)) in policies.iter().enumerate() {
            walls[at] += index(&binary, &source, &work.path().join(name), flags);
        }
        if round <= keep_all_rounds {
            index(&binary, &source, &every_version, &[]);
        }
        if round % every == 0 || round == rounds {
            let fresh = work.path().join(format!("fresh-{round}"));
            index(&binary, &source, &fresh, &[]);
            let fresh_bytes = dir_bytes(&fresh) as f64;
            let mut line = format!("round {round}: fresh build {:.1} MB", fresh_bytes / 1e6);
            for (at, (name, _)) in policies.iter().enumerate() {
                let bytes = dir_bytes(&work.path().join(name)) as f64;
                line += &format!(
                    "; {name} {:.1} MB ({:.2}×, {:.1} s a round)",
                    bytes / 1e6,
                    bytes / fresh_bytes,
                    walls[at].as_secs_f64() / (round + 1) as f64
                );
            }
            if round <= keep_all_rounds {
                let bytes = dir_bytes(&every_version) as f64;
                line += &format!(
                    "; keep all {:.1} MB ({:.2}×)",
                    bytes / 1e6,
                    bytes / fresh_bytes
                );
            }
            println!("{line}");
            std::fs::remove_dir_all(&fresh).unwrap();
        }
    }
}
