//! Answers from the CLI and from the query service, with their traces.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memweave_llm::sim::{Fault, SimConfig};
use memweave_query::Answer;
use memweave_tests::{SimServer, binary, memweave, memweave_ok, openai_flags, stderr};

use super::shared::pg_essays;

const QUESTION: &str = "What did the author learn from painting?";

fn ask_cli(strategy: &str) -> Answer {
    ask_cli_with(strategy, &[])
}

fn ask_cli_with(strategy: &str, extra: &[String]) -> Answer {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let args = [
        "ask",
        QUESTION,
        "--tables",
        &tables,
        "--strategy",
        strategy,
        "--json",
    ]
    .map(String::from)
    .into_iter()
    .chain(extra.iter().cloned());
    let output = memweave_ok(args);
    serde_json::from_slice(&output.stdout).expect("ask --json prints an answer")
}

/// MemWalker asks the model at every step; through the simulator (the extractive
/// replies over HTTP, parsed back) the walk and the answer are the same.
#[test]
fn memwalker_asks_the_model_the_same_over_http() {
    let server = SimServer::start(SimConfig::new(8, 1.0));
    let over_http = ask_cli_with("memwalker", &openai_flags(&server.url));
    assert_eq!(over_http, ask_cli("memwalker"));
    let stats = server.stats();
    let steps = over_http
        .trace
        .iter()
        .filter(|s| {
            s.action == "read_leaf" || (s.action == "descend" && s.reasoning.starts_with("summary"))
        })
        .count();
    assert_eq!(
        stats.completed as usize, steps,
        "one call per triage and leaf"
    );
}

/// Questions are not kept in the tables, so replay mode has nothing to answer from:
/// a usage error, not a navigation that fails at every step.
#[test]
fn asking_in_replay_mode_is_a_usage_error() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let output = memweave(["ask", QUESTION, "--tables", &tables, "--cache-only"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--cache-only"),
        "{}",
        stderr(&output)
    );
}

/// Three unparsable replies to a step (temperature 0, 0.7, 0.7) end the walk with
/// "no answer", MemWalker's rule; the trace names the failure.
#[test]
fn three_unparsable_replies_end_the_walk_with_no_answer() {
    let server = SimServer::start(SimConfig {
        fault_rate: 1.0,
        faults: vec![Fault::Unparsable],
        ..SimConfig::new(8, 1.0)
    });
    let answer = ask_cli_with("memwalker", &openai_flags(&server.url));
    assert!(!answer.answered, "{answer:#?}");
    assert_eq!(answer.answer, "no answer");
    assert!(answer.passages.is_empty());
    let last = answer.trace.last().unwrap();
    assert_eq!(
        (last.action.as_str(), last.target.as_str()),
        ("no_answer", "llm_unparsable")
    );
    let stats = server.stats();
    assert_eq!(stats.requests, 3, "the first step, asked three times");
    let at = |t: &str| stats.temperatures.get(t).copied().unwrap_or(0);
    assert_eq!((at("0"), at("0.7")), (1, 2), "{:?}", stats.temperatures);
}

#[test]
fn memwalker_answers_from_the_essay_about_painting_with_a_trace() {
    let answer = ask_cli("memwalker");
    assert!(answer.answered, "{answer:#?}");
    let passage = &answer.passages[0];
    assert!(
        passage.source_uri.ends_with("worked.txt"),
        "{}",
        passage.source_uri
    );
    assert!(
        passage.text.to_lowercase().contains("paint"),
        "{}",
        passage.text
    );
    let actions: Vec<&str> = answer.trace.iter().map(|s| s.action.as_str()).collect();
    assert_eq!(actions[0], "choose_document");
    assert!(
        actions.contains(&"descend") && actions.contains(&"read_leaf"),
        "{actions:?}"
    );
    assert_eq!(*actions.last().unwrap(), "answer");

    // The passage is the document's own text at the range it names.
    let t = &pg_essays().read;
    let doc = t
        .documents
        .iter()
        .find(|d| d.doc_id == passage.doc_id)
        .unwrap();
    let text = std::fs::read_to_string(&doc.source_uri).unwrap();
    let range: String = text
        .chars()
        .skip(passage.start_char as usize)
        .take((passage.end_char - passage.start_char) as usize)
        .collect();
    assert_eq!(
        range.split_whitespace().collect::<Vec<_>>().join(" "),
        passage.text
    );
    // The leaf that answered is one the walk descended to.
    let answered_from = &answer.trace.last().unwrap().target;
    assert!(
        t.segments
            .iter()
            .any(|s| &s.seg_id == answered_from && s.doc_id == passage.doc_id)
    );
}

#[test]
fn readagent_looks_up_pages_and_answers() {
    let answer = ask_cli("readagent-p");
    assert!(answer.answered, "{answer:#?}");
    assert!(answer.passages[0].source_uri.ends_with("worked.txt"));
    let lookups: Vec<&str> = answer
        .trace
        .iter()
        .filter(|s| s.action == "lookup")
        .map(|s| s.target.as_str())
        .collect();
    assert!(!lookups.is_empty());
    let pages = &pg_essays().read.pages;
    assert!(
        lookups
            .iter()
            .all(|id| pages.iter().any(|p| p.page_id == *id))
    );
    assert!(
        lookups.contains(&answer.passages[0].from_id.as_str()),
        "answers from a page it looked up"
    );
}

#[test]
fn a_question_nothing_mentions_gets_no_answer() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let output = memweave_ok(["ask", "zyzzyva quux?", "--tables", &tables, "--json"]);
    let answer: Answer = serde_json::from_slice(&output.stdout).unwrap();
    assert!(!answer.answered);
    assert_eq!(answer.answer, "no answer");
    assert!(answer.passages.is_empty());
    assert_eq!(answer.trace.last().unwrap().action, "no_answer");
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(tables: &str) -> (Server, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(binary("memweave-query"))
        .args(["serve", "--tables", tables, "--listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memweave-query starts");
    let stderr = child.stderr.take().unwrap();
    let server = Server(child);
    // Ready once it logs that it listens; give up after a bound.
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.contains("listening") {
            break;
        }
        assert!(Instant::now() < deadline, "memweave-query did not start");
    }
    (server, format!("http://{listen}"))
}

#[test]
fn the_query_service_answers_like_the_cli() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let expected: Vec<(&str, Answer)> = ["memwalker", "readagent-p"]
        .into_iter()
        .map(|strategy| (strategy, ask_cli(strategy)))
        .collect();
    let (_server, base) = serve(&tables);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let health = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert!(health.status().is_success());
        let ready: serde_json::Value = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(ready["epoch"], 1);
        for (strategy, cli_answer) in &expected {
            let response = client
                .post(format!("{base}/v1/ask"))
                .json(&serde_json::json!({ "question": QUESTION, "strategy": strategy }))
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success());
            let served: Answer = response.json().await.unwrap();
            assert_eq!(&served, cli_answer, "{strategy}");
        }
        let bad = client
            .post(format!("{base}/v1/ask"))
            .json(&serde_json::json!({ "question": QUESTION, "strategy": "telepathy" }))
            .send()
            .await
            .unwrap();
        assert!(bad.status().is_client_error());
    });
}
