//! The web explorer over a large memory, in headless Chromium: how long its
//! views take to be on screen, by the page's own clock (from navigation, or
//! from the click, to the view drawn), over loopback.
//!
//! - first view: a fresh browser opening `/` (the ask form) and
//!   `/#/documents` (the first page of documents), to `memweave:ready`;
//! - a documents search by title;
//! - a document's MemWalker tree: its root with its children, then one
//!   level more opened;
//! - an entity's neighbourhood (the busiest of the generated archive's
//!   names), drawn as a graph;
//! - the overview: the report, made once per checkpoint (the cold figure).
//!
//! EXPLORER_TABLES names the memory (default: the scale bench's 100M tables,
//! `SCALE_DIR/tables-generated-100M`; build them with `SCALE_SIZES=100M cargo
//! bench --bench scale`); EXPLORER_RUNS the times each is measured (default
//! 5: the first, on a cold service, is shown apart). The service is the
//! release `memweave-query` beside the bench (QUERY_BIN overrides):
//! `cargo build --release -p memweave-benches -p memweave-query --bins --benches`.

// A bench prints its figures and fails loudly.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

// The browser helper is the browser test's own; the test uses the helpers
// the bench does not (keys, screenshots, a phone's width).
#[allow(dead_code)]
#[path = "../../tests/src/browser.rs"]
mod browser;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use browser::Chromium;
use serde_json::Value;

fn main() {
    let work = std::env::var_os("SCALE_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-scale"),
        PathBuf::from,
    );
    let tables = std::env::var_os("EXPLORER_TABLES")
        .map_or_else(|| work.join("tables-generated-100M"), PathBuf::from);
    if !tables.join("checkpoints.lance").exists() {
        println!(
            "no memory at {}: set EXPLORER_TABLES, or build it with SCALE_SIZES=100M cargo bench --bench scale",
            tables.display()
        );
        return;
    }
    let runs: usize = std::env::var("EXPLORER_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
        .max(2);
    let binary = std::env::var_os("QUERY_BIN").map_or_else(
        || {
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().with_file_name("memweave-query")
        },
        PathBuf::from,
    );
    assert!(binary.exists(), "{} is missing", binary.display());
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut service = std::process::Command::new(&binary)
        .args(["serve", "--tables"])
        .arg(&tables)
        .args(["--listen", &address.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://{address}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let epoch = ready(&base).await;
        let documents = get(&base, "/v1/documents?limit=1").await["total"].clone();
        println!(
            "memory {} (epoch {epoch}, {documents} documents), {}",
            tables.display(),
            binary.display()
        );
        let (document, tokens) = longest_document(&base).await;
        let (entity, relations) = busiest_entity(&base, documents.as_u64().unwrap()).await;
        println!(
            "tree of the longest listed document {document} ({tokens} tokens); entity {entity} ({relations} relations, 25 drawn)"
        );
        let mut timings: Vec<(&str, Vec<f64>)> = Vec::new();
        let mut note = |view: &'static str, ms: f64| match timings.iter_mut().find(|(v, _)| *v == view) {
            Some((_, all)) => all.push(ms),
            None => timings.push((view, vec![ms])),
        };
        for _ in 0..runs {
            for (view, hash) in [
                ("first view: the ask form", "#/ask"),
                ("first view: documents", "#/documents"),
            ] {
                let browser = Chromium::open(&format!("{base}/{hash}")).await;
                browser.wait_for("document.body.dataset.ready === 'true'").await;
                let ms = browser
                    .eval("performance.getEntriesByName('memweave:ready')[0].startTime")
                    .await;
                note(view, ms.as_f64().unwrap());
                if hash == "#/ask" {
                    browser.close().await;
                    continue;
                }
                let searched = browser
                    .timed(
                        "location.hash = '#/documents?q=Harbour'",
                        "document.querySelector('.documents p:not(.loading)')?.textContent.includes('Harbour')",
                    )
                    .await;
                note("documents search (title)", searched);
                let tree = browser
                    .timed(
                        &format!("location.hash = '#/document/{document}?view=memwalker'"),
                        "document.querySelector('.tree > details > .children > details.node')",
                    )
                    .await;
                note("tree: root and its children", tree);
                let level = browser
                    .timed(
                        "document.querySelector('.tree > details > .children > details.node').open = true",
                        "document.querySelector('.tree > details > .children > details.node > .children > details')",
                    )
                    .await;
                note("tree: a level opened", level);
                let graph = browser
                    .timed(
                        &format!("location.hash = '#/entity/{entity}'"),
                        "document.querySelector('.graph[data-nodes]')",
                    )
                    .await;
                note("entity neighbourhood drawn", graph);
                let overview = browser
                    .timed(
                        "location.hash = '#/overview'",
                        "document.querySelector('.figures')",
                    )
                    .await;
                note("overview (the report)", overview);
                browser.close().await;
            }
        }
        println!();
        println!("{:<32} {:>10} {:>12} {:>10}", "view", "cold ms", "median ms", "max ms");
        for (view, all) in &timings {
            let mut warm = all[1..].to_vec();
            warm.sort_by(f64::total_cmp);
            println!(
                "{view:<32} {:>10.0} {:>12.0} {:>10.0}",
                all[0],
                warm[warm.len() / 2],
                warm[warm.len() - 1]
            );
        }
    });
    let _ = service.kill();
    let _ = service.wait();
}

async fn get(base: &str, path: &str) -> Value {
    reqwest::get(format!("{base}{path}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Waits for the service to serve a checkpoint; its epoch.
async fn ready(base: &str) -> u64 {
    let started = Instant::now();
    loop {
        if let Ok(response) = reqwest::get(format!("{base}/readyz")).await
            && response.status().is_success()
        {
            return response.json::<Value>().await.unwrap()["epoch"]
                .as_u64()
                .unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(600), "not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The longest of the first thousand documents: the deepest tree to open.
async fn longest_document(base: &str) -> (String, u64) {
    let listed = get(base, "/v1/documents?limit=1000").await;
    listed["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["doc_id"].as_str().unwrap().to_string(),
                d["n_tokens"].as_u64().unwrap(),
            )
        })
        .max_by_key(|(_, tokens)| *tokens)
        .expect("a document")
}

/// Of the first names the generated archive mentions, the entity with the
/// most relations: a hub, whose graph is paged.
async fn busiest_entity(base: &str, documents: u64) -> (String, u64) {
    let mut busiest = (String::new(), 0);
    for name in memweave_benches::archive::name_pool(documents as usize)
        .iter()
        .take(30)
    {
        let found = get(
            base,
            &format!("/v1/entities?name={}", name.replace(' ', "%20")),
        )
        .await;
        for entity in found["entities"].as_array().into_iter().flatten() {
            let id = entity["entity_id"].as_str().unwrap().to_string();
            let relations =
                get(base, &format!("/v1/entities/{id}?limit=1")).await["relations_total"]
                    .as_u64()
                    .unwrap_or(0);
            if relations > busiest.1 {
                busiest = (id, relations);
            }
        }
    }
    assert!(
        busiest.1 > 0,
        "no entity of the archive's names has relations"
    );
    busiest
}
