//! The model layer over real HTTP: builds against the pool simulator, with and
//! without faults, the call cache across runs, replay with the pool down, and
//! the pool client's concurrency control.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memweave_llm::pool::{PoolClient, PoolConfig};
use memweave_llm::prompts::Prompt;
use memweave_llm::sim::{Fault, SimConfig};
use memweave_operators::model::Priority;
use memweave_tests::{
    SimServer, Tables, binary, free_port, index, memweave, openai_flags, read_calls, read_tables,
    shared_data, stderr,
};

use super::indexing::comparable;

/// Four essays of pg-essays in a temp dir (a small corpus that still pages and
/// builds trees several levels deep).
fn corpus() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = dir.path().join("essays");
    std::fs::create_dir(&source).expect("mkdir");
    for name in ["addiction.txt", "gh.txt", "worked.txt", "wisdom.txt"] {
        let from = shared_data("pg-essays").join(name);
        std::fs::copy(&from, source.join(name)).expect("copy an essay");
    }
    (dir, source)
}

fn build(source: &Path, tables: &Path, extra: &[String]) -> String {
    let mut args: Vec<&str> = vec!["--segment-tokens", "300"];
    args.extend(extra.iter().map(String::as_str));
    String::from_utf8_lossy(&index(source, tables, &args).stdout).into_owned()
}

fn fast_sim() -> SimConfig {
    SimConfig {
        seed: 11,
        ..SimConfig::new(32, 2.0)
    }
}

fn assert_same_memory(a: &Tables, b: &Tables) {
    for (x, y) in [
        (a.documents.len(), b.documents.len()),
        (a.segments.len(), b.segments.len()),
        (a.tree_nodes.len(), b.tree_nodes.len()),
        (a.pages.len(), b.pages.len()),
        (a.entities.len(), b.entities.len()),
        (a.relations.len(), b.relations.len()),
        (a.embeddings.len(), b.embeddings.len()),
    ] {
        assert_eq!(x, y);
    }
    let sorted = |t: &Tables| {
        let mut t = t.clone();
        t.documents.iter_mut().for_each(|d| d.ingested_at = 0);
        t.documents.sort_by(|x, y| x.doc_id.cmp(&y.doc_id));
        t.segments.sort_by(|x, y| x.seg_id.cmp(&y.seg_id));
        t.tree_nodes.sort_by(|x, y| x.node_id.cmp(&y.node_id));
        t.pages.sort_by(|x, y| x.page_id.cmp(&y.page_id));
        t
    };
    let (a, b) = (sorted(a), sorted(b));
    assert_eq!(a.documents, b.documents);
    assert_eq!(a.segments, b.segments);
    assert_eq!(a.tree_nodes, b.tree_nodes);
    assert_eq!(a.pages, b.pages);
    // Tables are written sorted by key: equal tables are equal row for row.
    assert_eq!(a.entities, b.entities);
    assert_eq!(a.relations, b.relations);
    assert_eq!(a.embeddings, b.embeddings);
    assert_eq!(a.errors, b.errors);
}

/// All of pg-essays, all four memories, through the pool: the extractive
/// build's tables, and every table's invariants.
#[test]
fn the_full_pg_essays_build_through_the_pool_equals_the_extractive_one() {
    let server = SimServer::start(SimConfig {
        seed: 5,
        ..SimConfig::new(64, 1.0)
    });
    let dir = tempfile::tempdir().expect("a temp dir");
    let tables = dir.path().join("openai");
    let mut flags = openai_flags(&server.url);
    flags.extend(super::shared::PG_ESSAYS_FLAGS.map(String::from));
    index(
        &shared_data("pg-essays"),
        &tables,
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let t = read_tables(&tables);
    super::memories::assert_invariants(&t);
    assert_same_memory(&t, &super::shared::pg_essays().read);
    let tasks: std::collections::HashSet<String> =
        read_calls(&tables).into_iter().map(|c| c.task).collect();
    for task in [
        "summarize_segment",
        "gist_page",
        "extract_entities",
        "extract_relations",
        "merge_relations",
        "same_entity",
        "summarize_with_facts",
    ] {
        assert!(tasks.contains(task), "no {task} call went through the pool");
    }
}

/// The corpus tree: one leaf per document standing for its root, parents above
/// them up to one corpus root; the same through the pool as offline.
#[test]
fn the_corpus_tree_stands_over_every_document_root() {
    let (dir, source) = corpus();
    let flag = [
        "--corpus-tree".to_string(),
        "--max-children".to_string(),
        "2".to_string(),
    ];
    let extractive = dir.path().join("extractive");
    build(&source, &extractive, &flag);
    let t = read_tables(&extractive);
    let (corpus, documents): (Vec<_>, Vec<_>) = t
        .tree_nodes
        .iter()
        .partition(|n| n.tree == "memwalker-corpus");
    let document_roots: Vec<_> = documents
        .iter()
        .filter(|n| n.tree == "memwalker" && n.parent_id.is_none())
        .collect();
    assert_eq!(document_roots.len(), t.documents.len());
    let leaves: Vec<_> = corpus.iter().filter(|n| n.level == 0).collect();
    assert_eq!(leaves.len(), t.documents.len());
    for leaf in &leaves {
        let root = document_roots
            .iter()
            .find(|r| r.node_id == leaf.child_ids[0])
            .expect("a corpus leaf stands for a document root");
        assert_eq!(
            (&leaf.doc_id, t.node_text(leaf)),
            (&root.doc_id, t.node_text(root))
        );
    }
    let tops: Vec<_> = corpus.iter().filter(|n| n.parent_id.is_none()).collect();
    assert_eq!(tops.len(), 1, "one corpus root");
    assert!(tops[0].level >= 1 && tops[0].doc_id.is_none());
    // Every parent link of the corpus tree is answered by the parent's children.
    for node in corpus.iter().filter(|n| n.parent_id.is_some()) {
        let parent = corpus
            .iter()
            .find(|p| Some(&p.node_id) == node.parent_id.as_ref())
            .expect("the parent exists");
        assert!(parent.child_ids.contains(&node.node_id));
    }

    // RAPTOR's corpus tree: one leaf per document's RAPTOR root, one corpus root.
    super::memories::assert_invariants(&t);
    let raptor_leaves = t
        .tree_nodes
        .iter()
        .filter(|n| n.tree == "raptor-corpus" && n.level == 0)
        .count();
    assert_eq!(raptor_leaves, t.documents.len());

    let server = SimServer::start(fast_sim());
    let tables = dir.path().join("openai");
    let flags: Vec<String> = openai_flags(&server.url).into_iter().chain(flag).collect();
    build(&source, &tables, &flags);
    assert_same_memory(&read_tables(&tables), &t);
}

/// Page merging (ReadAgent appendix I) asks the model whether pages start new
/// sections; through the pool it merges exactly as the extractive backend does.
#[test]
fn page_merging_over_the_pool_equals_the_extractive_build() {
    let (dir, source) = corpus();
    let budget = ["--gist-word-budget".to_string(), "300".to_string()];
    let unmerged = dir.path().join("unmerged");
    build(&source, &unmerged, &[]);
    let extractive = dir.path().join("extractive");
    build(&source, &extractive, &budget);
    let expected = read_tables(&extractive);
    assert!(
        expected.pages.len() < read_tables(&unmerged).pages.len(),
        "{} pages",
        expected.pages.len()
    );

    let server = SimServer::start(fast_sim());
    let tables = dir.path().join("openai");
    let flags: Vec<String> = openai_flags(&server.url)
        .into_iter()
        .chain(budget)
        .collect();
    build(&source, &tables, &flags);
    assert_same_memory(&read_tables(&tables), &expected);
    assert!(
        read_calls(&tables)
            .iter()
            .any(|c| c.task == "starts_new_section")
    );
}

/// The simulator answers with the extractive backend's replies dressed in drift,
/// so a build through it, parsed by the real parsers, is the extractive build.
#[test]
fn a_build_through_the_pool_equals_the_extractive_build_and_reruns_are_free() {
    let (dir, source) = corpus();
    let extractive = dir.path().join("extractive");
    build(&source, &extractive, &[]);
    let expected = read_tables(&extractive);
    assert!(expected.pages.len() > 20 && expected.tree_nodes.len() > 20);

    let server = SimServer::start(fast_sim());
    let tables = dir.path().join("openai");
    let summary = build(&source, &tables, &openai_flags(&server.url));
    let first = server.stats();
    assert!(first.completed > 50, "{first:?}");
    assert!(summary.contains("model       openai"), "{summary}");
    assert_same_memory(&read_tables(&tables), &expected);

    let calls = read_calls(&tables);
    // One ledger row per call; replies beyond those went to hedged copies, or
    // were cut off by the output budget and asked again with a larger one.
    assert_eq!(
        calls.len() as u64,
        first.completed - first.repeated - first.cut_off
    );
    assert!(summary.contains(&format!("{} cut off by the output budget", first.cut_off)));
    assert!(
        calls
            .iter()
            .all(|c| c.backend == "openai" && c.model == "memweave-sim")
    );
    assert!(calls.iter().all(|c| c.tokens_in > 0));
    // Calls about one document name it; only the graph's cross-document steps do not.
    assert!(calls.iter().all(
        |c| c.doc_id.is_some() || matches!(c.task.as_str(), "same_entity" | "merge_relations")
    ));
    assert!(calls.iter().any(|c| c.task == "choose_break"));
    assert!(
        calls
            .iter()
            .any(|c| c.task == "gist_page" && c.stage == "readagent")
    );

    // Same input, same cache: not one request reaches the pool.
    build(&source, &tables, &openai_flags(&server.url));
    assert_eq!(server.stats().requests, first.requests);
    assert_same_memory(&read_tables(&tables), &expected);
    assert_eq!(read_calls(&tables).len(), calls.len());

    // Replay with the pool gone: everything comes from llm_calls.
    drop(server);
    let mut replay = openai_flags("http://127.0.0.1:9/v1");
    replay.push("--cache-only".into());
    build(&source, &tables, &replay);
    assert_same_memory(&read_tables(&tables), &expected);

    // A new document in replay mode cannot be built: one errors row, the rest stays.
    std::fs::write(
        source.join("new.txt"),
        "A new essay arrives. It has a few sentences about painting. \
         Nobody has summarised it yet, so the cache knows nothing of it.",
    )
    .expect("write");
    build(&source, &tables, &replay);
    let after = read_tables(&tables);
    let missing: Vec<_> = after
        .errors
        .iter()
        .filter(|e| e.kind == "llm_cache_miss")
        .collect();
    assert_eq!(missing.len(), 1, "{:?}", after.errors);
    assert!(missing[0].source.ends_with("new.txt"));
    assert_eq!(after.documents.len(), expected.documents.len() + 1);
    assert_eq!(after.tree_nodes.len(), expected.tree_nodes.len());
}

/// One request in five meets a fault (429 with Retry-After, 500, a hung
/// connection, a broken body, a truncated reply): the build still completes with
/// exactly the tables of a fault-free build.
#[test]
fn faults_at_twenty_percent_change_nothing_in_the_tables() {
    let (dir, source) = corpus();
    let clean = dir.path().join("clean");
    build(&source, &clean, &[]);

    let server = SimServer::start(SimConfig {
        fault_rate: 0.2,
        ..fast_sim()
    });
    let tables = dir.path().join("faulty");
    let mut flags = openai_flags(&server.url);
    flags.extend(["--llm-timeout-s".into(), "1".into()]);
    let summary = build(&source, &tables, &flags);
    let stats = server.stats();
    for kind in Fault::DEFAULT {
        let name = serde_json::to_value(kind).expect("a name");
        let name = name.as_str().expect("a string");
        assert!(
            stats.faults.get(name).copied().unwrap_or(0) > 0,
            "no {name} in {stats:?}"
        );
    }
    assert!(summary.contains("rate-limited"), "{summary}");
    assert_same_memory(&read_tables(&tables), &read_tables(&clean));
    assert!(read_tables(&tables).errors.is_empty());
}

/// A reply that never follows the format is asked three times (temperature 0,
/// then 0.7), then the step stands in with its fallback (the segment's or
/// page's own text, the last offered break, no entities), an errors row
/// names it, and the document is kept.
#[test]
fn unparsable_replies_are_asked_again_then_recorded() {
    let (dir, source) = corpus();
    let server = SimServer::start(SimConfig {
        fault_rate: 1.0,
        faults: vec![Fault::Unparsable],
        ..fast_sim()
    });
    let tables = dir.path().join("unparsable");
    let output = memweave(
        [
            "index",
            source.to_str().expect("utf-8"),
            "--out",
            tables.to_str().expect("utf-8"),
        ]
        .into_iter()
        .map(String::from)
        .chain(openai_flags(&server.url))
        .chain(["--keep-prompts".to_string()]),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let read = read_tables(&tables);
    assert_eq!(read.documents.len(), 4);
    assert!(!read.tree_nodes.is_empty() && !read.pages.is_empty());
    // Every leaf summary and every gist is its own text.
    let segments: std::collections::HashMap<&str, String> = read
        .segments
        .iter()
        .map(|s| (s.seg_id.as_str(), read.segment_text(s)))
        .collect();
    for leaf in read
        .tree_nodes
        .iter()
        .filter(|n| n.tree == "memwalker" && n.level == 0)
    {
        assert_eq!(leaf.summary, None, "its segment's own text, kept once");
        assert_eq!(
            Some(&read.node_text(leaf)),
            leaf.seg_id.as_deref().and_then(|s| segments.get(s))
        );
    }
    // Each page fell back to being its own gist, kept as no copy.
    assert!(read.pages.iter().all(|p| p.gist.is_none()));
    let build_errors: Vec<_> = read.errors.iter().filter(|e| e.stage == "build").collect();
    assert!(
        read.errors.iter().all(|e| e.kind == "llm_unparsable"),
        "{:?}",
        read.errors
    );
    for doc in &read.documents {
        let named: Vec<&str> = build_errors
            .iter()
            .filter(|e| e.doc_id.as_deref() == Some(doc.doc_id.as_str()))
            .map(|e| e.message.split(':').next().unwrap_or_default())
            .collect();
        // Leaf summaries come from RAPTOR's chunk summaries (the same cut).
        assert!(
            named.contains(&"summarize_with_facts"),
            "{}: {named:?}",
            doc.doc_id
        );
    }
    let stats = server.stats();
    let at = |t: &str| stats.temperatures.get(t).copied().unwrap_or(0);
    assert!(at("0") > 0 && at("0.7") > 0, "{:?}", stats.temperatures);
    // Each prompt was asked at most three times, and the ledger keeps every try.
    let mut tries: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for call in read_calls(&tables) {
        let prompt = call.inputs.expect("--keep-prompts keeps every prompt");
        *tries.entry(prompt).or_insert(0) += 1;
    }
    assert!(tries.values().all(|&n| n <= 3), "{:?}", tries.values());
    assert!(tries.values().any(|&n| n == 3));
    // A re-run meets the same replies (from the cache) and records the same errors.
    build(&source, &tables, &openai_flags(&server.url));
    assert_eq!(read_tables(&tables).errors, read.errors);
}

/// Killed half-way (SIGTERM), a build saves the calls it finished; the restart
/// asks the pool only for the rest.
#[test]
fn an_interrupted_build_resumes_without_paying_twice() {
    let (dir, source) = corpus();
    let server = SimServer::start(SimConfig {
        seed: 3,
        ..SimConfig::new(4, 40.0)
    });
    let tables = dir.path().join("interrupted");
    let mut child = Command::new(binary("memweave"))
        .args(["--log-format", "json", "index"])
        .arg(&source)
        .arg("--out")
        .arg(&tables)
        .args(["--segment-tokens", "300", "--llm-max-concurrency", "8"])
        .args(openai_flags(&server.url))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memweave starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.stats().completed < 60 {
        assert!(Instant::now() < deadline, "the build never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = child.wait().expect("memweave exits");
    assert_eq!(status.code(), Some(130));
    let saved = read_calls(&tables).len();
    let before = server.stats();
    // Calls in flight at the signal were let finish: every reply was saved (the
    // only replies not in the ledger are to hedged second copies and replies cut
    // off by the output budget, asked again).
    assert_eq!(
        saved as u64 + before.repeated + before.cut_off,
        before.completed
    );
    assert!(
        !tables.join("checkpoints.lance").exists(),
        "an interrupted build commits nothing"
    );

    build(&source, &tables, &openai_flags(&server.url));
    let after = server.stats();
    // Nothing saved was asked again: a re-asked call would add its key twice.
    let calls = read_calls(&tables);
    let keys: std::collections::HashSet<&str> = calls.iter().map(|c| c.call_key.as_str()).collect();
    assert_eq!(keys.len(), calls.len(), "a call was paid for twice");
    let clean = dir.path().join("clean");
    build(&source, &clean, &[]);
    assert_same_memory(&read_tables(&tables), &read_tables(&clean));
    assert_eq!(
        calls.len() as u64,
        after.completed - after.repeated - after.cut_off
    );
}

/// Changes a running simulator's behaviour through its HTTP API.
fn set_sim(server: &SimServer, config: &SimConfig) {
    server.runtime().block_on(async {
        reqwest::Client::new()
            .post(server.url.replace("/v1", "/sim/config"))
            .json(config)
            .send()
            .await
            .expect("reconfigured")
    });
}

fn prompt(i: usize) -> Prompt {
    Prompt {
        system: None,
        user: format!(
            "Please shorten the following passage.\nJust give me a shortened version. DO NOT explain your reason.\n\nPassage:\nSentence number {i} is here. It is short."
        ),
    }
}

fn client(url: &str, initial: usize, max: usize, timeout: Duration) -> Arc<PoolClient> {
    let config = PoolConfig {
        initial_concurrency: initial,
        max_concurrency: max,
        timeout,
        ..PoolConfig::new(vec![url.to_string()], "memweave-sim")
    };
    Arc::new(PoolClient::new(config).expect("a client"))
}

/// Fires `n` requests at once; returns when all have answered.
fn burst(server: &SimServer, client: &Arc<PoolClient>, n: usize, offset: usize) {
    server.runtime().block_on(async {
        let calls = (0..n).map(|i| {
            let client = Arc::clone(client);
            async move {
                client
                    .chat(&prompt(offset + i), 0.0, 64, Priority::Build)
                    .await
                    .expect("answered")
            }
        });
        let replies = futures::future::join_all(calls).await;
        assert!(
            replies
                .iter()
                .all(|r| r.content.contains("Sentence number"))
        );
    });
}

#[test]
fn the_client_fills_every_slot_and_queues_beyond() {
    let server = SimServer::start(SimConfig::new(8, 30.0));
    let client = client(&server.url, 1, 64, Duration::from_secs(10));
    burst(&server, &client, 200, 0);
    let stats = server.stats();
    assert_eq!(stats.peak_busy_slots, 8, "{stats:?}");
    assert!(
        stats.peak_in_flight > 8,
        "the client kept a queue at the server: {stats:?}"
    );
    let report = client.report();
    assert!(
        report.limits[0] > 8.0,
        "slow start grew the limit: {report:?}"
    );
    // Busy slot-seconds against slots × active time: the pool was kept full.
    let utilisation = stats.busy_slot_seconds / (8.0 * stats.active_seconds);
    assert!(utilisation > 0.6, "utilisation {utilisation:.2}");
}

#[test]
fn concurrency_backs_off_under_429s_and_recovers() {
    let server = SimServer::start(SimConfig {
        max_in_flight: Some(4),
        ..SimConfig::new(16, 20.0)
    });
    let client = client(&server.url, 32, 64, Duration::from_secs(10));
    burst(&server, &client, 150, 0);
    let backed_off = client.report();
    assert!(backed_off.rate_limited > 0, "{backed_off:?}");
    assert!(
        backed_off.limits[0] < 32.0,
        "the limit came down: {backed_off:?}"
    );
    assert_eq!(backed_off.succeeded, 150);

    set_sim(
        &server,
        &SimConfig {
            max_in_flight: None,
            ..server.sim.config()
        },
    );
    let rate_limited = client.report().rate_limited;
    burst(&server, &client, 400, 1000);
    let recovered = client.report();
    assert_eq!(recovered.rate_limited, rate_limited);
    assert!(
        recovered.limits[0] > backed_off.limits[0] + 1.0,
        "{backed_off:?} → {recovered:?}"
    );
}

#[test]
fn hung_connections_are_hedged_or_time_out_and_broken_replies_are_retried() {
    let server = SimServer::start(SimConfig {
        seed: 5,
        ..SimConfig::new(64, 5.0)
    });
    // Room for every request and its second copy at once.
    let client = client(&server.url, 128, 128, Duration::from_secs(5));
    // The client learns what a typical reply time is, then the faults begin.
    burst(&server, &client, 16, 0);
    set_sim(
        &server,
        &SimConfig {
            fault_rate: 0.3,
            faults: vec![Fault::Hang, Fault::Malformed],
            ..server.sim.config()
        },
    );
    burst(&server, &client, 60, 100);
    let report = client.report();
    assert_eq!(report.succeeded, 76);
    assert!(report.malformed > 0, "{report:?}");
    // Hung requests are sent again after a few typical reply times: most hangs
    // are answered by the second copy instead of waiting out the 5 s timeout.
    let hangs = server.stats().faults["hang"];
    assert!(
        report.hedged > 0 && report.timeouts * 3 < hangs,
        "{hangs} hangs, {report:?}"
    );

    // When every copy hangs, each attempt ends at the timeout and the request
    // fails with the reason, after its attempts.
    set_sim(
        &server,
        &SimConfig {
            fault_rate: 1.0,
            faults: vec![Fault::Hang],
            ..server.sim.config()
        },
    );
    let patient = Arc::new(
        PoolClient::new(PoolConfig {
            timeout: Duration::from_millis(300),
            max_attempts: 2,
            ..PoolConfig::new(vec![server.url.clone()], "memweave-sim")
        })
        .expect("a client"),
    );
    let error = server.runtime().block_on(async {
        patient
            .chat(&prompt(7), 0.0, 64, Priority::Build)
            .await
            .expect_err("nothing answers")
    });
    assert!(error.to_string().contains("timed out"), "{error}");
    assert_eq!(patient.report().timeouts, 2);
}

#[test]
fn query_traffic_goes_ahead_of_build_traffic() {
    let server = SimServer::start(SimConfig::new(1, 40.0));
    let client = client(&server.url, 1, 1, Duration::from_secs(10));
    let order = Arc::new(Mutex::new(Vec::new()));
    server.runtime().block_on(async {
        let mut tasks = Vec::new();
        for i in 0..6 {
            let (client, order) = (Arc::clone(&client), Arc::clone(&order));
            tasks.push(memweave_process::task::spawn("build_call", async move {
                client
                    .chat(&prompt(i), 0.0, 64, Priority::Build)
                    .await
                    .expect("answered");
                order.lock().expect("lock").push(format!("build {i}"));
            }));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (query_client, query_order) = (Arc::clone(&client), Arc::clone(&order));
        tasks.push(memweave_process::task::spawn("query_call", async move {
            query_client
                .chat(&prompt(99), 0.0, 64, Priority::Query)
                .await
                .expect("answered");
            query_order.lock().expect("lock").push("query".to_string());
        }));
        for task in tasks {
            task.await.expect("joined");
        }
    });
    let order = order.lock().expect("lock").clone();
    let query_at = order
        .iter()
        .position(|o| o == "query")
        .expect("the query ran");
    assert!(
        query_at <= 2,
        "the query waited behind build traffic: {order:?}"
    );
}

#[test]
fn the_simulator_binary_says_what_it_is_and_serves_models() {
    let help = Command::new(binary("memweave-llm-sim"))
        .arg("--help")
        .output()
        .expect("runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("SIMULATOR") && help.contains("not a language"),
        "{help}"
    );
    let mut child = Command::new(binary("memweave-llm-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--slots",
            "2",
            "--latency-ms",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("reads");
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .expect("an address")
        .to_string();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (models, metrics) = runtime.block_on(async {
        let http = reqwest::Client::new();
        let models: serde_json::Value = http
            .get(format!("http://{address}/v1/models"))
            .send()
            .await
            .expect("models")
            .json()
            .await
            .expect("json");
        let metrics = http
            .get(format!("http://{address}/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        (models, metrics)
    });
    child.kill().expect("stops");
    let _ = child.wait();
    assert_eq!(models["data"][0]["id"], "memweave-sim");
    assert!(metrics.contains("memweave_sim_queue_depth 0"), "{metrics}");
    assert!(metrics.contains("vllm:num_requests_waiting"), "{metrics}");
}

#[test]
fn the_openai_backend_needs_a_model_name_and_never_shows_the_key() {
    let config = PoolConfig {
        api_key: Some("sk-secret-123".into()),
        ..PoolConfig::new(vec!["http://127.0.0.1:9/v1".into()], "m")
    };
    assert!(!format!("{config:?}").contains("sk-secret-123"));

    let (dir, source) = corpus();
    let tables = dir.path().join("t");
    let output = memweave([
        "index",
        source.to_str().expect("utf-8"),
        "--out",
        tables.to_str().expect("utf-8"),
        "--backend",
        "openai",
        "--llm-url",
        "http://127.0.0.1:9/v1",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--llm-model"),
        "{}",
        stderr(&output)
    );

    // With the pool unreachable every document fails, each with an errors row,
    // and the key appears nowhere in what the run prints.
    let output = Command::new(binary("memweave"))
        .env("MEMWEAVE_LLM_API_KEY", "sk-secret-123")
        .args(["index"])
        .arg(&source)
        .arg("--out")
        .arg(&tables)
        .args(openai_flags("http://127.0.0.1:9/v1"))
        .args(["--llm-max-attempts", "2"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    assert!(!printed.contains("sk-secret-123"));
    let read = read_tables(&tables);
    assert_eq!(read.errors.len(), 4);
    assert!(
        read.errors.iter().all(|e| e.kind == "llm_unavailable"),
        "{:?}",
        read.errors
    );
}

/// A build the pool failed is not final: once the pool answers, the next
/// process builds again the documents that met the failure, restores the
/// others, and ends with the tables of a build that never failed.
#[test]
fn documents_the_pool_failed_are_built_again_by_the_next_process() {
    let (dir, source) = corpus();
    let server = SimServer::start(fast_sim());
    let answering = openai_flags(&server.url);
    let reference = dir.path().join("reference");
    build(&source, &reference, &answering);

    // Two essays built while the pool answers, two added while it is down.
    let aside = dir.path().join("aside");
    std::fs::create_dir(&aside).unwrap();
    let later = ["gh.txt", "wisdom.txt"];
    for name in later {
        std::fs::rename(source.join(name), aside.join(name)).unwrap();
    }
    let tables = dir.path().join("tables");
    build(&source, &tables, &answering);
    for name in later {
        std::fs::rename(aside.join(name), source.join(name)).unwrap();
    }
    let down = format!("http://127.0.0.1:{}/v1", free_port());
    let mut unreachable = openai_flags(&down);
    unreachable.extend(["--llm-max-attempts".to_string(), "1".to_string()]);
    build(&source, &tables, &unreachable);
    let failed = read_tables(&tables).errors.clone();
    let failed_docs: std::collections::BTreeSet<String> =
        failed.iter().filter_map(|e| e.doc_id.clone()).collect();
    assert!(
        !failed.is_empty() && failed.iter().all(|e| e.kind == "llm_unavailable"),
        "{failed:?}"
    );
    assert_eq!(failed_docs.len(), later.len(), "{failed:?}");

    let resumed = build(&source, &tables, &answering);
    assert!(resumed.contains("restored"), "{resumed}");
    assert!(resumed.contains("2 new or changed"), "{resumed}");
    let (got, want) = (read_tables(&tables), read_tables(&reference));
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    assert_eq!(comparable(&got), comparable(&want));
}
