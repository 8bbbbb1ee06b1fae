//! Answers from the CLI and from the query service, with their traces.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memweave_llm::sim::{Fault, SimConfig};
use memweave_query::{Answer, Passage, Strategy};
use memweave_tests::{
    SimServer, binary, free_port, memweave, memweave_ok, openai_flags, read_tables, stderr,
};

use super::shared::{archive_of, pg_essays};

const QUESTION: &str = "What did the author learn from painting?";

fn ask_cli(strategy: &str) -> Answer {
    ask_cli_with(strategy, &[])
}

fn ask_cli_with(strategy: &str, extra: &[String]) -> Answer {
    ask_question(QUESTION, strategy, extra)
}

fn ask_question(question: &str, strategy: &str, extra: &[String]) -> Answer {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let args = [
        "ask",
        question,
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

/// An answer without its calls' latencies and reply lengths, which no two runs
/// share (the simulator words its replies in varied formats that parse the same).
fn decisions(mut answer: Answer) -> Answer {
    (answer.usage.model_ms, answer.usage.tokens_out) = (0, 0);
    for call in answer.trace.iter_mut().flat_map(|step| &mut step.calls) {
        (call.latency_ms, call.tokens_out) = (0, 0);
    }
    answer
}

/// MemWalker asks the model at every step; through the simulator (the extractive
/// replies over HTTP, parsed back) the walk and the answer are the same, and the
/// trace accounts for every call the server answered, with its tokens and latency.
#[test]
fn memwalker_asks_the_model_the_same_over_http() {
    let server = SimServer::start(SimConfig::new(8, 25.0));
    let over_http = ask_cli_with("memwalker", &openai_flags(&server.url));
    assert_eq!(
        decisions(over_http.clone()),
        decisions(ask_cli("memwalker"))
    );
    let stats = server.stats();
    let usage = &over_http.usage;
    assert_eq!(usage.model_calls as u64, stats.completed);
    assert_eq!(
        (usage.tokens_in, usage.tokens_out),
        (stats.prompt_tokens, stats.completion_tokens)
    );
    for step in &over_http.trace {
        for call in &step.calls {
            assert!(call.latency_ms >= 25, "{step:?}");
            assert!(call.tokens_in > 0 && call.tokens_out > 0, "{step:?}");
        }
    }
    let triage_calls = over_http
        .trace
        .iter()
        .flat_map(|s| &s.calls)
        .filter(|c| c.task == "triage")
        .count();
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
    let descents = over_http
        .trace
        .iter()
        .filter(|s| s.action == "descend" && s.reasoning.starts_with("summary"))
        .count();
    assert_eq!(
        triage_calls, descents,
        "each triage is noted on its descent"
    );
}

/// `memweave ask` without `--json` prints the answer, its passages and the
/// trace indented by depth, with what chose each step and its model calls.
#[test]
fn ask_prints_a_readable_indented_trace() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let output = memweave_ok(["ask", QUESTION, "--tables", &tables]);
    let text = String::from_utf8(output.stdout).unwrap();
    let answer = ask_cli("memwalker");
    assert!(text.starts_with("Answer (memwalker"), "{text}");
    assert!(text.contains("Supporting passages:"), "{text}");
    assert!(
        text.contains(&format!("Trace ({} steps; ", answer.trace.len())),
        "{text}"
    );
    let indent_of = |action: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(action))
            .map(|l| l.len() - l[4..].trim_start().len())
            .unwrap_or_else(|| panic!("no {action} line in {text}"))
    };
    assert!(
        indent_of("descend") > indent_of("choose_document"),
        "{text}"
    );
    assert!(indent_of("read_leaf") > indent_of("descend"), "{text}");
    assert!(text.contains("model: triage "), "{text}");
    // Each step that chooses says by what: the document by its words, the
    // leaf by the model's judgement.
    let line_of = |action: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(action))
            .unwrap()
    };
    assert!(line_of("choose_document").ends_with(" by text"), "{text}");
    assert!(line_of("read_leaf").ends_with(" by model"), "{text}");
}

/// A request stops at its step limit: MemWalker's walk ends at the model call
/// after the limit, with no answer.
#[test]
fn a_request_stops_at_its_step_limit() {
    let unlimited = ask_cli("memwalker");
    assert!(unlimited.trace.len() > 3, "{unlimited:#?}");
    let limited = ask_cli_with("memwalker", &["--max-steps".into(), "2".into()]);
    assert!(!limited.answered, "{limited:#?}");
    assert_eq!(limited.trace.len(), 3, "two steps, then the refusal");
    assert_eq!(limited.trace[..2], unlimited.trace[..2]);
    let last = limited.trace.last().unwrap();
    assert_eq!(last.target, "llm_over_budget");
    assert!(
        last.reasoning.contains("2 steps spent of the 2"),
        "{last:?}"
    );
}

/// A request stops at its model-token limit: no answer, and the trace says why.
#[test]
fn a_request_stops_at_its_token_limit() {
    let unlimited = ask_strategy(Strategy::Qrmem, &[]);
    assert!(unlimited.answered);
    assert!(unlimited.usage.model_calls > 1, "{unlimited:#?}");
    // Exactly the first call's tokens: it is made, the next one is refused.
    let first = unlimited
        .trace
        .iter()
        .flat_map(|s| &s.calls)
        .next()
        .unwrap();
    let limit = first.tokens_in + first.tokens_out;
    let limited = ask_strategy(Strategy::Qrmem, &["--max-tokens".into(), limit.to_string()]);
    assert!(!limited.answered, "{limited:#?}");
    assert!(limited.supporting.is_empty());
    let last = limited.trace.last().unwrap();
    assert_eq!(
        (last.action.as_str(), last.target.as_str()),
        ("no_answer", "llm_over_budget"),
        "{limited:#?}"
    );
    assert_eq!(limited.usage.model_calls, 1, "{limited:#?}");
    assert!(
        last.reasoning
            .contains(&format!("model tokens spent of the {limit} allowed")),
        "{last:?}"
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
    assert!(answer.supporting.is_empty());
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

/// The first passage `answer` cites, after checking that it answered from one
/// of `essays` with a passage about painting.
fn cites_painting_from<'a>(answer: &'a Answer, essays: &[&str]) -> &'a Passage {
    assert!(answer.answered, "{answer:#?}");
    let passage = &answer.supporting[0];
    assert!(
        essays
            .iter()
            .any(|essay| passage.source_uri.ends_with(essay)),
        "{}",
        passage.source_uri
    );
    assert!(
        passage.text.to_lowercase().contains("paint"),
        "{}",
        passage.text
    );
    passage
}

#[test]
fn memwalker_answers_from_the_essay_about_painting_with_a_trace() {
    let answer = ask_cli("memwalker");
    let passage = cites_painting_from(&answer, &["worked.txt"]);
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
    // Two essays say what painting taught their author.
    let passage = cites_painting_from(&answer, &["worked.txt", "copy.txt"]);
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
        lookups.contains(&passage.from_id.as_str()),
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
    assert!(answer.supporting.is_empty());
    assert_eq!(answer.trace.last().unwrap().action, "no_answer");
}

/// A running `memweave-query`, stopped on drop; its log is kept for messages.
pub(crate) struct Server {
    child: Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A runtime for a test's HTTP client.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn serve(tables: &str) -> (Server, String) {
    serve_with(tables, &[])
}

/// The query service over `tables` on a free loopback port, with `extra`
/// flags; the server (stopped on drop) and its base URL.
pub(crate) fn serve_with(tables: &str, extra: &[&str]) -> (Server, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(binary("memweave-query"))
        .args(["serve", "--tables", tables, "--listen", &listen])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memweave-query starts");
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (listening, started) = std::sync::mpsc::channel();
    {
        let log = log.clone();
        // Reads the log to the end, so the service never writes to a closed pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening") {
                    let _ = listening.send(());
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
    }
    let server = Server { child, log };
    started
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("memweave-query did not start: {}", server.log()));
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
    let runtime = current_thread();
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
            assert_eq!(
                decisions(served),
                decisions(cli_answer.clone()),
                "{strategy}"
            );
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

/// Questions for every strategy: the graph strategies start from named entities.
fn question_for(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::QrmemTrial | Strategy::QrmemExpand | Strategy::Qrmem => {
            "What did the author do at Y Combinator?"
        }
        _ => QUESTION,
    }
}

fn ask_strategy(strategy: Strategy, extra: &[String]) -> Answer {
    ask_question(question_for(strategy), strategy.name(), extra)
}

/// Every strategy answers over pg-essays, cites passages that are the documents'
/// own text at the ranges named (RAPTOR summaries: the ranges of their leaves),
/// and ends its trace with the answer.
#[test]
fn every_strategy_answers_with_passages_from_the_documents() {
    let t = &pg_essays().read;
    let summaries: Vec<&str> = t
        .tree_nodes
        .iter()
        .filter(|n| n.seg_id.is_none())
        .map(|n| n.node_id.as_str())
        .collect();
    for strategy in Strategy::ALL {
        let answer = ask_strategy(strategy, &[]);
        assert_eq!(answer.strategy, strategy);
        assert!(answer.answered, "{strategy:?}: {answer:#?}");
        assert!(!answer.supporting.is_empty(), "{strategy:?}");
        assert_eq!(
            answer.trace.last().unwrap().action,
            "answer",
            "{strategy:?}"
        );
        for passage in &answer.supporting {
            let doc = t
                .documents
                .iter()
                .find(|d| d.doc_id == passage.doc_id)
                .unwrap_or_else(|| panic!("{strategy:?} cites an unknown document"));
            assert!(passage.start_char < passage.end_char, "{strategy:?}");
            assert!(passage.end_char <= doc.n_chars, "{strategy:?}");
            if summaries.contains(&passage.from_id.as_str()) {
                continue;
            }
            let text = std::fs::read_to_string(&doc.source_uri).unwrap();
            let range: String = text
                .chars()
                .skip(passage.start_char as usize)
                .take((passage.end_char - passage.start_char) as usize)
                .collect();
            let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(squeeze(&range), squeeze(&passage.text), "{strategy:?}");
        }
    }
}

/// The strategies' own decisions: ReadAgent-S stops within its page budget,
/// ILM-TR rewrites its memory until it converges, QRMeM starts from the
/// question's entities, RAPTOR keeps its context within the budget.
#[test]
fn each_strategy_takes_the_steps_of_its_paper() {
    let steps = |a: &Answer, action: &str| a.trace.iter().filter(|s| s.action == action).count();
    let sequential = ask_strategy(Strategy::ReadagentS, &["--max-pages".into(), "2".into()]);
    let lookups = steps(&sequential, "lookup");
    assert!((1..=2).contains(&lookups), "{:?}", sequential.trace);

    let ilmtr = ask_strategy(Strategy::Ilmtr, &[]);
    let rounds = steps(&ilmtr, "update_memory");
    assert!((1..=5).contains(&rounds), "{:?}", ilmtr.trace);

    let qrmem = ask_strategy(Strategy::Qrmem, &[]);
    let first = &qrmem.trace[0];
    assert_eq!(first.action, "entities");
    assert!(first.target.contains("Y Combinator"), "{first:?}");

    let raptor = ask_strategy(Strategy::Raptor, &["--budget".into(), "800".into()]);
    let used: usize = raptor
        .supporting
        .iter()
        .map(|p| memweave_operators::tokens::count_tokens(&p.text))
        .sum();
    assert!(raptor.supporting.len() == 1 || used <= 800, "{used} tokens");

    let top = ask_strategy(Strategy::Bm25, &["--top-k".into(), "2".into()]);
    assert_eq!(top.supporting.len(), 2);
}

/// Through the simulator (the extractive replies over HTTP, parsed back) every
/// strategy takes the same steps and gives the same answer.
#[test]
fn every_strategy_asks_the_model_the_same_over_http() {
    let server = SimServer::start(SimConfig::new(8, 1.0));
    for strategy in Strategy::ALL {
        let over_http = ask_strategy(strategy, &openai_flags(&server.url));
        assert_eq!(
            decisions(over_http),
            decisions(ask_strategy(strategy, &[])),
            "{strategy:?}"
        );
    }
    assert!(server.stats().completed > 0);
}

/// The API's contract: bad requests get a 4xx and a JSON body that says what is
/// wrong; the memory can be browsed; the OpenAPI document lists every route.
#[test]
fn the_api_rejects_bad_requests_and_serves_the_memory() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let t = &pg_essays().read;
    let gists = memweave_tests::read_calls(pg_essays().tables.as_path())
        .iter()
        .filter(|c| c.task == "gist_page")
        .count();
    let (_server, base) = serve(&tables);
    let runtime = current_thread();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let ask = |body: serde_json::Value| {
            let request = client.post(format!("{base}/v1/ask")).json(&body);
            async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let body: serde_json::Value = response.json().await.unwrap();
                (status, body)
            }
        };
        let long = "why ".repeat(1_001);
        for (body, expected) in [
            (serde_json::json!({ "question": "  " }), "question is empty"),
            (serde_json::json!({ "question": long }), "the limit is 4000"),
            (
                serde_json::json!({ "question": QUESTION, "strategy": "telepathy" }),
                "expected one of memwalker",
            ),
            (
                serde_json::json!({ "question": QUESTION, "documents": ["nope"] }),
                "unknown document \"nope\"",
            ),
            (
                serde_json::json!({ "question": QUESTION, "budget": 0 }),
                "budget 0",
            ),
            (
                serde_json::json!({ "question": QUESTION, "options": { "top_k": 500 } }),
                "options.top_k 500",
            ),
            (
                serde_json::json!({ "question": QUESTION, "options": { "max_tokens": 0 } }),
                "options.max_tokens 0",
            ),
            (
                serde_json::json!({ "question": QUESTION, "options": { "max_steps": 5000 } }),
                "options.max_steps 5000",
            ),
            (
                serde_json::json!({ "question": QUESTION, "colour": "blue" }),
                "unknown field",
            ),
        ] {
            let (status, reply) = ask(body.clone()).await;
            assert_eq!(status, 400, "{body} → {reply}");
            let message = reply["error"].as_str().unwrap_or_default();
            assert!(message.contains(expected), "{body} → {message}");
        }
        let malformed = client
            .post(format!("{base}/v1/ask"))
            .header("content-type", "application/json")
            .body("{\"question\": ")
            .send()
            .await
            .unwrap();
        assert_eq!(malformed.status().as_u16(), 400);
        let huge = client
            .post(format!("{base}/v1/ask"))
            .header("content-type", "application/json")
            .body(format!("{{\"question\": \"{}\"}}", "a".repeat(100_000)))
            .send()
            .await
            .unwrap();
        assert_eq!(huge.status().as_u16(), 413);

        let get = |path: String| {
            let request = client.get(format!("{base}{path}"));
            async move {
                let response = request.send().await.unwrap();
                (response.status().as_u16(), response.text().await.unwrap())
            }
        };
        let (status, body) = get("/v1/documents".into()).await;
        assert_eq!(status, 200);
        let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            listed["documents"].as_array().unwrap().len(),
            t.documents.len()
        );
        assert_eq!(listed["total"], t.documents.len());
        assert!(listed["next"].is_null(), "one page holds them all");
        // A page at a time: every document once, in id order.
        let mut paged: Vec<String> = Vec::new();
        let mut path = "/v1/documents?limit=7".to_string();
        loop {
            let (status, body) = get(path.clone()).await;
            assert_eq!(status, 200, "{body}");
            let page: serde_json::Value = serde_json::from_str(&body).unwrap();
            let documents = page["documents"].as_array().unwrap();
            assert!(documents.len() <= 7);
            paged.extend(
                documents
                    .iter()
                    .map(|d| d["doc_id"].as_str().unwrap().into()),
            );
            match page["next"].as_str() {
                Some(next) => path = format!("/v1/documents?limit=7&after={next}"),
                None => break,
            }
        }
        let mut expected: Vec<String> = t.documents.iter().map(|d| d.doc_id.clone()).collect();
        expected.sort();
        assert_eq!(paged, expected);
        for bad in ["limit=0", "limit=10001", "limit=some"] {
            let (status, body) = get(format!("/v1/documents?{bad}")).await;
            assert_eq!(status, 400, "{bad}: {body}");
        }
        let doc = &t.documents[0].doc_id;
        let (status, body) = get(format!("/v1/documents/{doc}/tree")).await;
        assert_eq!(status, 200);
        let tree: serde_json::Value = serde_json::from_str(&body).unwrap();
        let node_id = tree["nodes"][0]["node_id"].as_str().unwrap().to_string();
        assert_eq!(get(format!("/v1/nodes/{node_id}")).await.0, 200);
        assert_eq!(
            get(format!("/v1/documents/{doc}/tree?tree=raptor")).await.0,
            200
        );
        assert_eq!(
            get(format!("/v1/documents/{doc}/tree?tree=oak")).await.0,
            400
        );
        assert_eq!(get("/v1/documents/nope/tree".into()).await.0, 404);
        assert_eq!(get("/v1/nodes/nope".into()).await.0, 404);
        let entity = &t.entities[0].entity_id;
        let (status, body) = get(format!("/v1/entities/{entity}")).await;
        assert_eq!(status, 200);
        assert!(body.contains("relations"));
        assert_eq!(get("/v1/entities/nope".into()).await.0, 404);

        let (status, metrics) = get("/metrics".into()).await;
        assert_eq!(status, 200);
        assert!(
            metrics.contains("memweave_query_answers_total{strategy=\"memwalker\",status=\"400\"}"),
            "{metrics}"
        );
        assert!(metrics.contains("memweave_query_epoch 1"), "{metrics}");
        // The memory's report, as gauges: the same numbers as the tables.
        let documents = memweave_tests::metric(&metrics, "memweave_memory_documents");
        assert_eq!(documents, Some(t.documents.len() as f64), "{metrics}");
        let sample = "memweave_memory_task_calls{task=\"gist_page\"}";
        assert_eq!(memweave_tests::metric(&metrics, sample), Some(gists as f64));

        let (status, body) = get("/openapi.json".into()).await;
        assert_eq!(status, 200);
        let openapi: serde_json::Value = serde_json::from_str(&body).unwrap();
        for route in [
            "/v1/ask",
            "/v1/search",
            "/v1/documents",
            "/v1/documents/{doc_id}/tree",
            "/v1/documents/{doc_id}/pages/{page}",
            "/v1/documents/{doc_id}",
            "/v1/documents/{doc_id}/text",
            "/v1/documents/{doc_id}/pages",
            "/v1/segments/{seg_id}",
            "/mcp",
            "/v1/nodes/{node_id}",
            "/v1/entities/{entity_id}",
            "/v1/entities",
            "/v1/checkpoints",
            "/v1/overview",
            "/",
            "/healthz",
            "/readyz",
            "/metrics",
            "/openapi.json",
        ] {
            assert!(
                openapi["paths"].get(route).is_some(),
                "{route} is not in the OpenAPI document"
            );
        }
        let strategies =
            &openapi["components"]["schemas"]["AskRequest"]["properties"]["strategy"]["enum"];
        assert_eq!(strategies.as_array().unwrap().len(), Strategy::ALL.len());
    });
}

/// With --auth-token-file, /v1/* needs the bearer token; health checks and
/// the explorer's page do not. With --no-ui there is no page.
#[test]
fn the_api_can_require_a_bearer_token() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let (_server, base) = serve_with(
        &tables,
        &["--auth-token-file", token_file.to_str().unwrap()],
    );
    let runtime = current_thread();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let documents = format!("{base}/v1/documents");
        assert_eq!(
            client
                .get(&documents)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
            401
        );
        let wrong = client
            .get(&documents)
            .bearer_auth("guess")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 401);
        let right = client
            .get(&documents)
            .bearer_auth("s3cret")
            .send()
            .await
            .unwrap();
        assert_eq!(right.status().as_u16(), 200);
        let health = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(health.status().as_u16(), 200);
        // The metrics name the tables' figures: behind the token too.
        let metrics = format!("{base}/metrics");
        let refused = client.get(&metrics).send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 401);
        let scraped = client
            .get(&metrics)
            .bearer_auth("s3cret")
            .send()
            .await
            .unwrap();
        assert_eq!(scraped.status().as_u16(), 200);
        // A token of the right length but wrong is refused like any other.
        let same_length = client
            .get(&documents)
            .bearer_auth("s3creT")
            .send()
            .await
            .unwrap();
        assert_eq!(same_length.status().as_u16(), 401);
        // The explorer's page holds no data: it is served without the token,
        // under a policy that lets no inline script run.
        let page = client.get(format!("{base}/")).send().await.unwrap();
        assert_eq!(page.status().as_u16(), 200);
        let policy = page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(policy.contains("script-src 'self';"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert!(page.text().await.unwrap().contains("/ui/app.js"));
    });
    let (_plain, base) = serve_with(&tables, &["--no-ui"]);
    runtime.block_on(async {
        let page = reqwest::get(format!("{base}/")).await.unwrap();
        assert_eq!(page.status().as_u16(), 404, "--no-ui serves no page");
        let script = reqwest::get(format!("{base}/ui/app.js")).await.unwrap();
        assert_eq!(script.status().as_u16(), 404);
        let api = reqwest::get(format!("{base}/v1/documents?limit=1"))
            .await
            .unwrap();
        assert_eq!(api.status().as_u16(), 200, "the API is served either way");
    });
}

/// Without a token, only loopback's names and `--allowed-host` are answered
/// (DNS rebinding), on every route but the probes.
#[test]
fn the_service_answers_only_its_own_host_names() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    let (_server, base) = serve_with(&tables, &["--allowed-host", "memweave-query"]);
    current_thread().block_on(async {
        let client = reqwest::Client::new();
        let status = |path: &'static str, host: &'static str| {
            let request = client.get(format!("{base}{path}")).header("host", host);
            async move { request.send().await.unwrap().status().as_u16() }
        };
        for path in [
            "/v1/documents",
            "/v1/checkpoints",
            "/metrics",
            "/openapi.json",
            "/",
        ] {
            assert_eq!(status(path, "evil.example").await, 403, "{path}");
            assert_eq!(status(path, "evil.example:80").await, 403, "{path}");
        }
        assert_eq!(status("/v1/documents", "memweave-query").await, 200);
        assert_eq!(status("/v1/documents", "MEMWEAVE-QUERY:8080").await, 200);
        assert_eq!(status("/v1/documents", "localhost:1").await, 200);
        assert_eq!(status("/v1/documents", "[::1]:8080").await, 200);
        assert_eq!(status("/healthz", "10.1.2.3:8080").await, 200);
        assert_eq!(status("/readyz", "10.1.2.3:8080").await, 200);
    });
}

/// Past `--max-expensive-requests` questions in flight, more are 429 with
/// Retry-After, while cheap reads are served; every question is answered
/// or refused, none waits past the request timeout.
#[test]
fn questions_past_the_limit_are_refused_with_retry_after() {
    let tables = pg_essays().tables.to_str().unwrap().to_string();
    // Each model call takes 300 ms: a question takes seconds.
    let model = SimServer::start(SimConfig::new(8, 300.0));
    let mut flags: Vec<&str> = vec!["--max-expensive-requests", "1"];
    let openai = openai_flags(&model.url);
    flags.extend(openai.iter().map(String::as_str));
    let (_server, base) = serve_with(&tables, &flags);
    current_thread().block_on(async {
        let client = reqwest::Client::new();
        let asks = (0..4).map(|_| {
            client
                .post(format!("{base}/v1/ask"))
                .json(&serde_json::json!({"question": "What did the author paint?", "strategy": "memwalker"}))
                .send()
        });
        let cheap = client.get(format!("{base}/v1/documents?limit=1")).send();
        let (answered, cheap) = tokio::join!(futures::future::join_all(asks), cheap);
        assert_eq!(cheap.unwrap().status().as_u16(), 200, "a cheap read is never refused");
        let mut statuses = Vec::new();
        for response in answered {
            let response = response.unwrap();
            let status = response.status().as_u16();
            if status == 429 {
                assert_eq!(response.headers()["retry-after"], "1");
            }
            statuses.push(status);
        }
        statuses.sort();
        assert_eq!(statuses, [200, 429, 429, 429], "one question in flight at once");
    });
}

/// The text of the notice the writer rewrites for its `version`-th commit.
fn notice(version: u32) -> String {
    format!(
        "Harbour notice number {version}. The harbour beacon code is now BEACON{version}{version}{version}. \
         Ships entering after dark must signal it twice."
    )
}

/// Replicas answer while a writer commits: many requests at once on loopback,
/// three new checkpoints committed meanwhile. Every request succeeds, the
/// service moves to the newer checkpoints without restarting, and every answer
/// is read from one checkpoint: the notice it cites is the one that checkpoint
/// holds.
#[test]
fn answers_under_load_stay_within_one_version_while_a_writer_commits() {
    const CLIENTS: usize = 6;
    const VERSIONS: u32 = 4;
    let (dir, source) = archive_of(&["worked.txt", "founders.txt", "gap.txt"]);
    let tables = dir.path().join("memory");
    let served_tables = tables.display().to_string();
    let commit = {
        move |version: u32| -> u64 {
            std::fs::write(source.join("notice.txt"), notice(version)).unwrap();
            let output = memweave_tests::index(&source, &tables, &["--segment-tokens", "400"]);
            let summary = memweave_tests::stdout(&output);
            summary
                .split("committed epoch ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no epoch in {summary}"))
        }
    };
    let mut version_of = std::collections::HashMap::new();
    version_of.insert(commit(1), 1);
    let version_of = std::sync::Arc::new(std::sync::Mutex::new(version_of));
    let (server, base) = serve_with(&served_tables, &["--refresh-secs", "1"]);

    let writer = {
        let version_of = version_of.clone();
        std::thread::spawn(move || {
            for version in 2..=VERSIONS {
                let epoch = commit(version);
                version_of.lock().unwrap().insert(epoch, version);
            }
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let questions = [
        ("What is the harbour beacon code?", "bm25"),
        ("What is the harbour beacon code?", "memwalker"),
        (QUESTION, "readagent-p"),
        (QUESTION, "memwalker"),
    ];
    // The last epoch once the writer is done (0 before).
    let last_committed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let clients = runtime.block_on(async {
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (client, base) = (client.clone(), base.clone());
                let last_committed = last_committed.clone();
                memweave_process::task::spawn("client", async move {
                    let mut answers: Vec<(u16, String, Option<Answer>)> = Vec::new();
                    // Bounded: until a few answers from the last checkpoint, or the deadline.
                    let mut from_last = 0;
                    for i in c.. {
                        if from_last >= 4 || tokio::time::Instant::now() > deadline {
                            break;
                        }
                        let (question, strategy) = questions[i % questions.len()];
                        let response = client
                            .post(format!("{base}/v1/ask"))
                            .json(&serde_json::json!({
                                "question": question,
                                "strategy": strategy,
                                "options": { "top_k": 1 },
                            }))
                            .send()
                            .await
                            .unwrap();
                        let status = response.status().as_u16();
                        let body = response.text().await.unwrap();
                        let answer: Option<Answer> = serde_json::from_str(&body).ok();
                        let last = last_committed.load(std::sync::atomic::Ordering::SeqCst);
                        if answer.as_ref().is_some_and(|a| a.epoch == last) {
                            from_last += 1;
                        }
                        answers.push((status, strategy.to_string(), answer));
                    }
                    answers
                })
            })
            .collect();
        let waiter = tokio::task::spawn_blocking(move || writer.join());
        waiter.await.unwrap().expect("the writer commits");
        let last = *version_of.lock().unwrap().keys().max().unwrap();
        last_committed.store(last, std::sync::atomic::Ordering::SeqCst);
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });

    let version_of = version_of.lock().unwrap().clone();
    let mut epochs_seen = std::collections::BTreeSet::new();
    let mut notices_checked = 0;
    for (status, strategy, answer) in &clients {
        assert_eq!(*status, 200, "{strategy}: {answer:?}");
        let answer = answer.as_ref().expect("a 200 carries an answer");
        let version = *version_of
            .get(&answer.epoch)
            .unwrap_or_else(|| panic!("epoch {} was never committed", answer.epoch));
        epochs_seen.insert(answer.epoch);
        for passage in answer
            .supporting
            .iter()
            .filter(|p| p.source_uri.ends_with("notice.txt"))
        {
            assert!(
                passage
                    .text
                    .contains(&format!("BEACON{version}{version}{version}")),
                "epoch {} holds notice {version}, the answer cites {:?}",
                answer.epoch,
                passage.text
            );
            notices_checked += 1;
        }
    }
    let last_epoch = *version_of.keys().max().unwrap();
    assert!(
        epochs_seen.contains(&last_epoch),
        "the service never served the last checkpoint: {epochs_seen:?} of {version_of:?}, {} answers; log:\n{}",
        clients.len(),
        server.log()
    );
    assert!(epochs_seen.len() >= 2, "{epochs_seen:?}");
    assert!(
        notices_checked >= CLIENTS,
        "{notices_checked} answers cited the notice"
    );
}

/// A service whose log reader went away (`memweave-query serve | head`) still
/// moves to a newer checkpoint: logging it must not end the refresh task.
#[test]
fn a_closed_log_does_not_stop_the_service_refreshing() {
    let (dir, source) = archive_of(&["gap.txt"]);
    let tables = dir.path().join("memory");
    memweave_tests::index(&source, &tables, &[]);
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(binary("memweave-query"))
        .args([
            "serve",
            "--tables",
            tables.to_str().unwrap(),
            "--listen",
            &listen,
        ])
        .args(["--refresh-secs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memweave-query starts");
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        assert!(
            log.read_line(&mut line).unwrap() > 0,
            "memweave-query exited"
        );
    }
    drop(log);
    let server = Server {
        child,
        log: Default::default(),
    };
    std::fs::write(source.join("notice.txt"), notice(2)).unwrap();
    memweave_tests::index(&source, &tables, &[]);
    let runtime = current_thread();
    let epoch = || -> Option<u64> {
        runtime.block_on(async {
            let ready: serde_json::Value = reqwest::get(format!("http://{listen}/readyz"))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            ready["epoch"].as_u64()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while epoch() != Some(2) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(epoch(), Some(2));
    drop(server);
}

/// At the default sizes RAPTOR's chunks (600 tokens) are the finest cut, and
/// their vectors are of their summaries: `dense` still ranks segments by
/// vectors of their own text.
#[test]
fn dense_answers_at_the_default_sizes() {
    let (dir, source) = archive_of(&["worked.txt"]);
    let tables = dir.path().join("memory");
    memweave_tests::index(&source, &tables, &[]);
    let output = memweave_ok([
        "ask",
        QUESTION,
        "--tables",
        tables.to_str().unwrap(),
        "--strategy",
        "dense",
        "--json",
    ]);
    let answer: Answer = serde_json::from_slice(&output.stdout).unwrap();
    assert!(answer.answered, "{answer:#?}");
    let segments = read_tables(&tables).rows.segments;
    for passage in &answer.supporting {
        let segment = segments
            .iter()
            .find(|s| s.seg_id == passage.from_id)
            .unwrap();
        assert!(
            memweave_schemas::search::in_cut(segment.target_tokens, 1000),
            "a MemWalker segment"
        );
    }
}

/// Where vectors are recomputed (the hashing embedder's, none stored), the
/// segments, RAPTOR nodes and entities nearest a question are those an exact
/// search over the stored vectors of the owners that share a term with it
/// finds (others are near it only by a hash collision): the same essays
/// embedded by the simulator, whose vectors are the hashing embedder's, over
/// HTTP, and stored.
#[test]
fn recomputed_vectors_find_what_an_exact_search_over_stored_ones_finds() {
    use memweave_operators::embed::cosine;
    use memweave_query::snapshot::{Allowed, Probe};
    use memweave_schemas::text::terms;

    let sim = SimServer::start(SimConfig::new(16, 1.0));
    let (dir, archive) = archive_of(&["addiction.txt", "wisdom.txt"]);
    let (recomputed, stored) = (dir.path().join("recomputed"), dir.path().join("stored"));
    memweave_tests::index(&archive, &recomputed, &[]);
    let embed_flags = memweave_tests::sim_embedder_flags(&sim.url);
    memweave_tests::index(&archive, &stored, &embed_flags);
    let recomputed_tables = read_tables(&recomputed);
    assert!(recomputed_tables.embeddings.is_empty());
    let owner_terms: std::collections::HashMap<String, Vec<String>> =
        (recomputed_tables.vector_texts().into_iter())
            .map(|(owner, _, text)| (owner, terms(&text)))
            .collect();
    let vectors = read_tables(&stored).rows.embeddings;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = memweave_schemas::TableStore::local(&recomputed).unwrap();
    let cache = std::sync::Arc::new(memweave_query::cache::ReadCache::new(64));
    let snapshot = runtime
        .block_on(memweave_query::Snapshot::load_latest(&store, cache))
        .unwrap()
        .unwrap();
    const NEAREST: usize = 5;
    for question in [
        QUESTION,
        "Why is wisdom different from intelligence?",
        "What makes technology more addictive?",
    ] {
        let vector = memweave_operators::lexical::hashing_embedding(
            question,
            memweave_schemas::tables::DEFAULT_VECTOR_WIDTH,
        );
        let terms = terms(question);
        let probe = Probe {
            vector: &vector,
            terms: &terms,
        };
        let exact = |kind: &str| -> Vec<String> {
            let mut scored: Vec<(&str, f64)> = (vectors.iter())
                .filter(|e| e.owner_kind == kind)
                .filter(|e| owner_terms[&e.owner_id].iter().any(|t| terms.contains(t)))
                .map(|e| (e.owner_id.as_str(), cosine(&vector, &e.vector)))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            scored
                .iter()
                .take(NEAREST)
                .map(|(id, _)| id.to_string())
                .collect()
        };
        let ids = |found: Vec<(String, f64)>| -> Vec<String> {
            found.into_iter().map(|(id, _)| id).collect()
        };
        let (segments, nodes, entities) = runtime.block_on(async {
            let all = Allowed(None);
            let segments = snapshot
                .nearest_segment_ids(probe, all, NEAREST)
                .await
                .unwrap();
            let nodes = snapshot
                .nearest_node_ids(probe, all, NEAREST)
                .await
                .unwrap();
            let entities = snapshot.nearest_entities(probe, NEAREST).await.unwrap();
            (segments, nodes, entities)
        });
        assert_eq!(ids(segments), exact("segment"), "{question}: segments");
        assert_eq!(ids(nodes), exact("node"), "{question}: nodes");
        let entities = entities
            .into_iter()
            .map(|(e, _)| e.entity_id.clone())
            .collect::<Vec<_>>();
        assert_eq!(entities, exact("entity"), "{question}: entities");
    }
}
