//! What access labels cost: one archive of generated short documents (the
//! mail and tickets permissions matter for) built with one label set, with
//! 10 and with 1,000 (each document labelled `set-{n mod k}` through
//! `--acl-column`, so the cross-document stages run per set), with the
//! corpus trees: build wall, peak RSS, model calls, model tokens per corpus
//! token and table bytes. Then query latency over the 10-set memory, the
//! administrator's bearer token against a reader's JSON Web Token (one
//! group of the ten): BM25 and dense search, and MemWalker and QRMeM asks.
//!
//! Run: `cargo build --release -p memweave-cli -p memweave-query && cargo
//! bench -p memweave-benches --bench labels`. LABELS_DOCUMENTS (default
//! 2,000) sizes the archive, LABELS_SETS (default `1,10,1000`) the sets,
//! LABELS_QUERIES (default 50) the questions per measure; LABELS_BIN and
//! QUERY_BIN measure other builds.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memweave_benches::archive::{Markov, dir_bytes, generate_short, memweave_binary};
use memweave_benches::measure::index_measured;
use memweave_benches::shared_data;
use memweave_benches::spend::{Cost, report};

const SECRET: &str = "a benchmark's secret of at least thirty-two bytes";
const ADMIN: &str = "the-administrator";

fn main() {
    let binary = memweave_binary("LABELS_BIN");
    let documents: usize = env_or("LABELS_DOCUMENTS", 2_000);
    let queries: usize = env_or("LABELS_QUERIES", 50);
    let sets: Vec<usize> = std::env::var("LABELS_SETS")
        .unwrap_or_else(|_| "1,10,1000".into())
        .split(',')
        .map(|k| k.trim().parse().unwrap())
        .collect();
    let work = std::env::temp_dir().join("memweave-labels");
    std::fs::create_dir_all(&work).unwrap();
    let markov = Markov::train(&shared_data("pg-essays"));
    let plain = work.join(format!("short-{documents}"));
    generate_short(&markov, &plain, documents);
    println!(
        "memweave: {}; {documents} short documents under {}",
        binary.display(),
        plain.display()
    );
    println!(
        "| label sets | wall s | peak RSS MiB | model calls | model tokens / corpus token | table bytes |"
    );
    println!("|---|---|---|---|---|---|");
    let mut ten_sets = None;
    for &k in &sets {
        let archive = labelled(&plain, &work.join(format!("labelled-{documents}-{k}")), k);
        let tables = work.join(format!("tables-{documents}-{k}"));
        let _ = std::fs::remove_dir_all(&tables);
        let flags = ["--corpus-tree", "--acl-column", "acl"];
        let (wall, _, peak) = index_measured(&binary, &archive, &tables, &flags);
        let cost = Cost::of(&report(&binary, &tables));
        println!(
            "| {k} | {:.1} | {:.0} | {} | {:.2} | {} |",
            wall.as_secs_f64(),
            peak.rss as f64 / 1_048_576.0,
            cost.all().calls,
            cost.tokens_per_token(),
            dir_bytes(&tables)
        );
        if k == 10 {
            ten_sets = Some(tables);
        }
    }
    if let Some(tables) = ten_sets {
        latency(&work, &tables, queries);
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().unwrap())
}

/// `plain`'s JSON Lines records, each given the labels `set-{n mod k}` in
/// an `acl` field, written under `to` (once).
fn labelled(plain: &Path, to: &Path, k: usize) -> PathBuf {
    if to.join(".complete").exists() {
        return to.to_path_buf();
    }
    std::fs::create_dir_all(to).unwrap();
    let mut n = 0usize;
    let mut files: Vec<PathBuf> = std::fs::read_dir(plain)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        let mut out = String::new();
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["acl"] = serde_json::json!([format!("set-{}", n % k)]);
            out.push_str(&record.to_string());
            out.push('\n');
            n += 1;
        }
        std::fs::write(to.join(file.file_name().unwrap()), out).unwrap();
    }
    std::fs::write(to.join(".complete"), "").unwrap();
    to.to_path_buf()
}

/// The service over `tables`: each measure asked `queries` times with the
/// administrator's token and with a reader's of one set, one at a time.
fn latency(work: &Path, tables: &Path, queries: usize) {
    let binary = std::env::var_os("QUERY_BIN").map_or_else(
        || memweave_binary("LABELS_BIN").with_file_name("memweave-query"),
        PathBuf::from,
    );
    let secret = work.join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let admin = work.join("admin");
    std::fs::write(&admin, ADMIN).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let mut service = std::process::Command::new(&binary)
        .args(["serve", "--no-ui", "--tables"])
        .arg(tables)
        .args(["--listen", &address.to_string(), "--auth-token-file"])
        .arg(&admin)
        .arg("--jwt-hs256-secret-file")
        .arg(&secret)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let reader = reader_token();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let base = format!("http://{address}");
        let deadline = Instant::now() + Duration::from_secs(120);
        while client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .map_or(true, |r| !r.status().is_success())
        {
            assert!(Instant::now() < deadline, "the service did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!(
            "\nquery latency over the 10-set memory, ms (p50 / p99 of {queries}), {}:",
            binary.display()
        );
        println!("| request | administrator | reader of 1 set | p50 ratio |");
        println!("|---|---|---|---|");
        let words = ["founders", "investors", "painting", "startup", "growth"];
        // (what, route, the field naming the method, the method)
        let measures = [
            ("search bm25", "/v1/search", "method", "bm25"),
            ("search dense", "/v1/search", "method", "dense"),
            ("ask memwalker", "/v1/ask", "strategy", "memwalker"),
            ("ask qrmem", "/v1/ask", "strategy", "qrmem"),
        ];
        let body = |path: &str, field: &str, method: &str, i: usize| {
            let text = format!("What about {}?", words[i % words.len()]);
            let asked = if path == "/v1/search" {
                "query"
            } else {
                "question"
            };
            serde_json::json!({ asked: text, field: method })
        };
        for (name, path, field, method) in measures {
            let mut measured = Vec::new();
            for token in [ADMIN, reader.as_str()] {
                let mut times = Vec::new();
                for i in 0..queries {
                    let started = Instant::now();
                    let answer = client
                        .post(format!("{base}{path}"))
                        .bearer_auth(token)
                        .json(&body(path, field, method, i))
                        .send()
                        .await
                        .unwrap();
                    assert!(answer.status().is_success(), "{name}: {}", answer.status());
                    answer.bytes().await.unwrap();
                    times.push(started.elapsed().as_secs_f64() * 1e3);
                }
                times.sort_by(f64::total_cmp);
                measured.push((
                    times[times.len() / 2],
                    times[(times.len() * 99 / 100).min(times.len() - 1)],
                ));
            }
            let [(a50, a99), (r50, r99)] = measured[..] else {
                unreachable!("two tokens")
            };
            println!(
                "| {name} | {a50:.1} / {a99:.1} | {r50:.1} / {r99:.1} | {:.2} |",
                r50 / a50
            );
        }
    });
    service.kill().unwrap();
    service.wait().unwrap();
}

/// A reader's token for `set-0`, an hour long, signed with [`SECRET`].
fn reader_token() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({"sub": "bench", "exp": now + 3600, "groups": ["set-0"]});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}
