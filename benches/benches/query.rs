//! The query service's benchmarks.
//!
//! (a) Multi-needle retrieval in the style of ILM-TR's M-NIAH: the paper's three
//! pizza needles go into haystacks of pg-essays (repeated past its 149k tokens
//! for the longer ones), either together at one depth or spread over the text;
//! each haystack is indexed as one document (all four memories, extractive
//! backend) and every strategy answers the paper's question. Reported per
//! strategy: the needles present in the answer's supporting passages, as the
//! paper's score levels (none 1, one 3, two 7, all three 10).
//!
//! (b) Latency: a 10,000-document store (windows of pg-essays sentences, each
//! document its own), every strategy asked in process one request at a time
//! (p50/p99: navigation without model time, the extractive backend answering
//! in microseconds), then over HTTP on loopback with 8 requests in flight
//! against a service on 2 worker threads (requests per second, p50/p99).
//!
//! (c) Scale: the service over the scale benchmark's memories (SCALE_DIR, as
//! `benches/scale` leaves them; sizes in QUERY_SCALE_SIZES, default 1M,10M).
//! Each memory is copied (all but the call cache) and served by the
//! `memweave-query` binary (QUERY_BIN, else the release build beside the bench)
//! with its default caches: seconds to ready, requests/s and p50/p99 over HTTP
//! per strategy as in (b) but over 212 questions (the 12, then 200 made of
//! sentences spread over pg-essays, the generated archives' source), so rows
//! are cached because questions share them, not because one repeats; the
//! service's peak RSS; then a commit that appends one essay's memory (built
//! apart, its rows added to every table, a new checkpoint naming the versions)
//! and the seconds until the service serves that epoch. Last, 48 of those
//! questions in process, one at a time: each one's first asking, then again.
//!
//! (d) Question sets with known answer passages (`benches/src/questions.rs`):
//! pg-essays (16 questions), Debian's python3.11-doc sources (15, installed
//! when missing and possible), and the same sources as an archive of short
//! documents (passages of about 100 tokens, `archive::write_passages`), each
//! indexed whole: model calls a document, model tokens a corpus token and
//! table bytes a character of text, then per strategy the questions whose
//! answer passage the answer cites. QUERY_QUESTION_SETS (names, comma
//! separated) picks sets; QUERY_SHORTEN_SHORT_TEXTS=1 builds as the papers
//! do (`--shorten-short-texts`), the way before short texts stood for
//! themselves.
//!
//! Run: `cargo bench --workspace --bench query` (release). Needs
//! ../shared/data/pg-essays. QUERY_BENCH=niah, questions, latency or scale
//! runs one part;
//! NIAH_TOKENS (default 16000,64000,150000,500000) sets the haystack lengths;
//! LATENCY_DOCS (default 10000) the store's size, LATENCY_SECONDS (default 10)
//! the HTTP run per strategy, QUERY_STRATEGIES (names, comma separated) the
//! strategies the latency parts ask. QUERY_BENCH_EMBEDDER=minilm embeds with
//! all-MiniLM-L6-v2 from MEMWEAVE_MINILM_DIR instead of the hashing embedder,
//! and hashing-N with the hashing embedder N wide (1,024 by default).
//! The 10,000-document store is built once and kept under the target directory.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memweave_benches::archive::{PYTHON_DOCS, dir_bytes, python_docs_installed, write_passages};
use memweave_benches::questions;
use memweave_llm::{CallCache, EmbedConfig, TaskModel};
use memweave_operators::embed::Embedder;
use memweave_operators::text::sentences;
use memweave_operators::tokens::count_tokens;
use memweave_pipeline::index::{IndexOptions, IndexSummary, run_index};
use memweave_query::cache::{DEFAULT_CACHE_MIB, ReadCache};
use memweave_query::http::router;
use memweave_query::mcp::AllowedHosts;
use memweave_query::service::{Limits, ServiceState};
use memweave_query::{Answer, AskOptions, AskRequest, Models, Snapshot, Strategy};
use memweave_schemas::TableStore;
use memweave_schemas::search::in_cut;

/// The paper's needles, each with the word that shows it was found.
const NEEDLES: [(&str, &str); 3] = [
    (
        "figs",
        "Figs are one of the secret ingredients needed to build the perfect pizza.",
    ),
    (
        "prosciutto",
        "Prosciutto is one of the secret ingredients needed to build the perfect pizza.",
    ),
    (
        "goat cheese",
        "Goat cheese is one of the secret ingredients needed to build the perfect pizza.",
    ),
];
const NEEDLE_QUESTION: &str =
    "What is the first letter of each secret ingredient needed to build the perfect pizza?";

/// Where the needles go, as fractions of the haystack.
const PLACEMENTS: [(&str, [f64; 3]); 4] = [
    ("10%", [0.10, 0.11, 0.12]),
    ("50%", [0.50, 0.51, 0.52]),
    ("90%", [0.90, 0.91, 0.92]),
    ("spread", [0.10, 0.50, 0.90]),
];

const QUESTIONS: [&str; 12] = [
    "What did the author learn from painting?",
    "Why should startups grow fast?",
    "How do investors decide whether to fund a startup?",
    "What makes a programming language popular?",
    "Why is Lisp more powerful than other languages?",
    "What did the author do at Y Combinator?",
    "Why are cities important for ambitious people?",
    "How should founders deal with competitors?",
    "What is the difference between wealth and money?",
    "Why do big companies acquire startups?",
    "How can you tell if an idea is good?",
    "What is wrong with the way schools teach writing?",
];

fn main() {
    let part = std::env::var("QUERY_BENCH").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if part.is_empty() || part == "niah" {
        multi_needle(&runtime);
    }
    if part.is_empty() || part == "questions" {
        question_sets(&runtime);
    }
    if part.is_empty() || part == "latency" {
        latency(&runtime);
    }
    if part.is_empty() || part == "scale" {
        scale(&runtime);
    }
}

/// The pg-essays sentences, in file order.
fn essay_sentences() -> Vec<String> {
    let dir = memweave_benches::shared_data("pg-essays");
    memweave_benches::files_in(&dir)
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            sentences(&text)
                .into_iter()
                .map(|s| {
                    text[s.start..s.end]
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The embedder QUERY_BENCH_EMBEDDER names: hashing (the default), hashing-N
/// (N wide) or minilm.
fn embed_config() -> EmbedConfig {
    let chosen = std::env::var("QUERY_BENCH_EMBEDDER").unwrap_or_default();
    if let Some(width) = chosen.strip_prefix("hashing-") {
        let width = width
            .parse()
            .expect("QUERY_BENCH_EMBEDDER=hashing-N: N a width");
        return EmbedConfig::Hashing { width };
    }
    match chosen.as_str() {
        "minilm" => EmbedConfig::MiniLm {
            dir: std::env::var_os("MEMWEAVE_MINILM_DIR")
                .expect("QUERY_BENCH_EMBEDDER=minilm needs MEMWEAVE_MINILM_DIR")
                .into(),
        },
        _ => EmbedConfig::default(),
    }
}

fn embedder_name() -> &'static str {
    match embed_config() {
        EmbedConfig::MiniLm { .. } => "all-MiniLM-L6-v2 embedder",
        _ => "hashing embedder",
    }
}

fn index(source: &Path, tables: &Path) -> IndexSummary {
    let mut options = IndexOptions {
        workers: 2,
        embed: embed_config(),
        ..IndexOptions::new(source.display().to_string(), tables.display().to_string())
    };
    // The papers' way: every segment summarised and every page gisted.
    options.build.shorten_short_texts = std::env::var_os("QUERY_SHORTEN_SHORT_TEXTS").is_some();
    let summary = run_index(&options).unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    summary
}

struct Navigator {
    model: TaskModel,
    embedder: Arc<dyn Embedder>,
}

impl Navigator {
    fn new(runtime: &tokio::runtime::Runtime) -> Self {
        let embedder = runtime
            .block_on(embed_config().embedder(CallCache::transient()))
            .unwrap();
        Navigator {
            model: TaskModel::extractive(),
            embedder,
        }
    }

    fn ask(
        &self,
        runtime: &tokio::runtime::Runtime,
        snapshot: &Snapshot,
        question: &str,
        strategy: Strategy,
    ) -> Answer {
        let request = AskRequest {
            question: question.to_string(),
            strategy,
            documents: None,
            budget: None,
            options: AskOptions::default(),
            epoch: None,
        };
        let models = Models {
            model: &self.model,
            embedder: &*self.embedder,
        };
        runtime
            .block_on(memweave_query::ask(snapshot, &request, models))
            .unwrap()
    }
}

fn load(runtime: &tokio::runtime::Runtime, tables: &Path) -> Snapshot {
    let store = TableStore::new(&tables.display().to_string(), HashMap::new()).unwrap();
    runtime
        .block_on(Snapshot::load_latest(
            &store,
            Arc::new(ReadCache::new(DEFAULT_CACHE_MIB)),
        ))
        .unwrap()
        .expect("a checkpoint")
}

/// The snapshot of `tables`, and how long it took to load and the memory it
/// holds, in words.
fn load_timed(runtime: &tokio::runtime::Runtime, tables: &Path) -> (Snapshot, String) {
    let before = resident_mib();
    let started = Instant::now();
    let snapshot = load(runtime, tables);
    let loaded = format!(
        "snapshot loaded in {:.1} s, {:.0} MiB resident for it",
        started.elapsed().as_secs_f64(),
        resident_mib() - before
    );
    (snapshot, loaded)
}

/// The strategies latency is measured for: QUERY_STRATEGIES (names, comma
/// separated), default all.
fn strategies() -> Vec<Strategy> {
    match std::env::var("QUERY_STRATEGIES") {
        Ok(names) => names
            .split(',')
            .map(|n| n.trim().parse().unwrap())
            .collect(),
        Err(_) => Strategy::ALL.to_vec(),
    }
}

/// Seconds each strategy is asked over HTTP: LATENCY_SECONDS, default 10.
fn latency_seconds() -> u64 {
    std::env::var("LATENCY_SECONDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}

/// Sentences from the start of pg-essays, repeated, until `tokens` tokens.
fn haystack(sentences: &[String], tokens: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut total = 0;
    for sentence in sentences.iter().cycle() {
        if total >= tokens {
            break;
        }
        total += count_tokens(sentence) + 1;
        out.push(sentence.clone());
    }
    out
}

/// The haystack's text with each needle after the sentence at its depth.
fn with_needles(haystack: &[String], depths: [f64; 3]) -> String {
    let mut sentences: Vec<&str> = haystack.iter().map(String::as_str).collect();
    // Deepest first, so the earlier positions stay where they were.
    for (needle, depth) in NEEDLES.iter().zip(depths).rev() {
        let at = ((haystack.len() as f64 * depth) as usize).min(sentences.len());
        sentences.insert(at, needle.1);
    }
    sentences.join(" ")
}

fn score(found: usize) -> u32 {
    [1, 3, 7, 10][found]
}

fn multi_needle(runtime: &tokio::runtime::Runtime) {
    let lengths: Vec<usize> = std::env::var("NIAH_TOKENS")
        .unwrap_or_else(|_| "16000,64000,150000,500000".into())
        .split(',')
        .map(|n| n.trim().parse().unwrap())
        .collect();
    let sentences = essay_sentences();
    let navigator = Navigator::new(runtime);
    println!(
        "M-NIAH: 3 needles, question {NEEDLE_QUESTION:?}; extractive backend, {}, default sizes",
        embedder_name()
    );
    // scores[strategy][length][placement]
    let mut scores: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); lengths.len()]; Strategy::ALL.len()];
    let mut found_total = vec![0usize; Strategy::ALL.len()];
    let mut cases = 0;
    for (l, &tokens) in lengths.iter().enumerate() {
        let hay = haystack(&sentences, tokens);
        for (placement, depths) in PLACEMENTS {
            let dir = tempfile::tempdir().unwrap();
            let source = dir.path().join("haystack");
            std::fs::create_dir(&source).unwrap();
            std::fs::write(source.join("haystack.txt"), with_needles(&hay, depths)).unwrap();
            let started = Instant::now();
            let summary = index(&source, &dir.path().join("memory"));
            let built = started.elapsed().as_secs_f64();
            let snapshot = load(runtime, &dir.path().join("memory"));
            cases += 1;
            let mut line = Vec::new();
            for (s, strategy) in Strategy::ALL.into_iter().enumerate() {
                let answer = navigator.ask(runtime, &snapshot, NEEDLE_QUESTION, strategy);
                let found = NEEDLES
                    .iter()
                    .filter(|(word, _)| cites(&answer, &[word]))
                    .count();
                found_total[s] += found;
                scores[s][l].push(score(found));
                line.push(format!("{} {found}", strategy.name()));
            }
            println!(
                "  {} tokens, needles at {placement}: built in {built:.1} s; found: {}",
                summary.tokens,
                line.join(", ")
            );
        }
    }
    let placements: Vec<&str> = PLACEMENTS.iter().map(|p| p.0).collect();
    println!(
        "Score per haystack (columns: tokens, then needles at {}); 10 = all three cited, 7 = two, 3 = one, 1 = none",
        placements.join(" / ")
    );
    let header: Vec<String> = lengths
        .iter()
        .map(|t| format!("{:>13}", format!("{}k", t / 1000)))
        .collect();
    println!("  {:<13}{}   needles found", "", header.join(" "));
    for (s, strategy) in Strategy::ALL.into_iter().enumerate() {
        let cells: Vec<String> = scores[s]
            .iter()
            .map(|row| {
                format!(
                    "{:>13}",
                    row.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join("/")
                )
            })
            .collect();
        println!(
            "  {:<13}{}   {:.0}%",
            strategy.name(),
            cells.join(" "),
            100.0 * found_total[s] as f64 / (3 * cases) as f64
        );
    }
}

/// Whether `answer` cites a passage holding one of `phrases`.
fn cites(answer: &Answer, phrases: &[&str]) -> bool {
    questions::cites(answer.supporting.iter().map(|p| p.text.as_str()), phrases)
}

/// (d) The question sets with known answer passages: each corpus indexed
/// whole, every strategy asked every question; a question is found when a
/// passage the answer cites holds its answer.
fn question_sets(runtime: &tokio::runtime::Runtime) {
    let mut sets = vec![(
        "pg-essays",
        memweave_benches::shared_data("pg-essays"),
        questions::PG_ESSAYS,
    )];
    let passages = tempfile::tempdir().unwrap();
    if python_docs_installed() {
        sets.push((
            "python3.11-doc",
            PathBuf::from(PYTHON_DOCS),
            questions::PYTHON_DOCS,
        ));
        let (count, bytes) = write_passages(
            Path::new(PYTHON_DOCS),
            &passages.path().join("passages.jsonl"),
        );
        println!("  python passages: {count} short documents, {bytes} bytes of text");
        sets.push((
            "python passages",
            passages.path().to_path_buf(),
            questions::PYTHON_DOCS,
        ));
    }
    if let Ok(chosen) = std::env::var("QUERY_QUESTION_SETS") {
        sets.retain(|(name, _, _)| chosen.split(',').any(|c| c.trim() == *name));
    }
    let navigator = Navigator::new(runtime);
    println!(
        "Question sets with known answer passages; extractive backend, {}, default sizes",
        embedder_name()
    );
    let mut table: Vec<Vec<String>> = vec![Vec::new(); Strategy::ALL.len()];
    for (name, source, set) in &sets {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let summary = index(source, &dir.path().join("memory"));
        let text_bytes = summary.chars.max(1) as f64;
        println!(
            "  {name}: {} documents, {} tokens, built in {:.0} s; {:.2} model calls a document, \
             {:.2} model tokens a corpus token, tables {:.1} bytes a character of text; {} questions",
            summary.documents,
            summary.tokens,
            started.elapsed().as_secs_f64(),
            summary.cache.calls as f64 / summary.documents.max(1) as f64,
            summary.cache.tokens as f64 / summary.tokens.max(1) as f64,
            dir_bytes(&dir.path().join("memory")) as f64 / text_bytes,
            set.len()
        );
        let snapshot = load(runtime, &dir.path().join("memory"));
        vector_recall(runtime, &snapshot, &dir.path().join("memory"), set);
        for (s, strategy) in Strategy::ALL.into_iter().enumerate() {
            let missed: Vec<String> = set
                .iter()
                .enumerate()
                .filter(|(_, q)| {
                    let answer = navigator.ask(runtime, &snapshot, q.question, strategy);
                    !cites(&answer, q.answer_phrases)
                })
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            println!(
                "    {:<13} found {:>2} of {}; missed: {}",
                strategy.name(),
                set.len() - missed.len(),
                set.len(),
                if missed.is_empty() {
                    "none".to_string()
                } else {
                    missed.join(" ")
                }
            );
            table[s].push(format!("{:>2}/{}", set.len() - missed.len(), set.len()));
        }
    }
    let names: Vec<String> = sets.iter().map(|s| format!("{:>15}", s.0)).collect();
    println!("  {:<13}{}", "found", names.join(""));
    for (s, strategy) in Strategy::ALL.into_iter().enumerate() {
        let cells: Vec<String> = table[s].iter().map(|c| format!("{c:>15}")).collect();
        println!("  {:<13}{}", strategy.name(), cells.join(""));
    }
}

/// Where vectors are recomputed (the hashing embedder's), the share of the
/// exact 10 nearest segments, RAPTOR nodes and entities of each of `set`'s
/// questions that the service's search finds: exact, over every owner's
/// single-float vector, each made as the build makes it.
fn vector_recall(
    runtime: &tokio::runtime::Runtime,
    snapshot: &Snapshot,
    tables: &Path,
    set: &[questions::Question],
) {
    use memweave_operators::embed::cosine;
    use memweave_operators::lexical::hashing_embedding;
    use memweave_operators::raptor::node_text;
    use memweave_query::snapshot::{Allowed, Probe};
    use memweave_schemas::{EntityRow, SegmentRow, TREE_RAPTOR, TREE_RAPTOR_CORPUS, TreeNodeRow};
    const NEAREST: usize = 10;
    let store = TableStore::new(&tables.display().to_string(), HashMap::new()).unwrap();
    let (checkpoint, segments, nodes, entities) = runtime.block_on(async {
        let checkpoint = store.latest_checkpoint().await.unwrap().unwrap();
        let segments: Vec<SegmentRow> = store.read_at(&checkpoint).await.unwrap();
        let nodes: Vec<TreeNodeRow> = store.read_at(&checkpoint).await.unwrap();
        let entities: Vec<EntityRow> = store.read_at(&checkpoint).await.unwrap();
        (checkpoint, segments, nodes, entities)
    });
    let Some(spec) = checkpoint.vectors() else {
        return;
    };
    let Some(width) = memweave_operators::embed::HashingEmbedder::for_model(&spec.model)
        .map(|h| Embedder::dim(&h))
    else {
        return;
    };
    let embed = |terms: &str| {
        memweave_operators::lexical::hashing_embedding_of_terms(terms.split_whitespace(), width)
    };
    let chunk_terms: HashMap<&str, &str> = (segments.iter())
        .map(|s| (s.seg_id.as_str(), s.terms.as_str()))
        .collect();
    // Per owner kind, every owner's id and vector.
    type Owners = Vec<(String, Vec<f32>)>;
    let exact: [(&str, Owners); 3] = [
        (
            "segments",
            (segments.iter())
                .filter(|s| in_cut(s.target_tokens, spec.segment_tokens))
                .map(|s| (s.seg_id.clone(), embed(&s.terms)))
                .collect(),
        ),
        (
            "nodes",
            (nodes.iter())
                .filter(|n| n.tree == TREE_RAPTOR || n.tree == TREE_RAPTOR_CORPUS)
                .map(|n| {
                    let vector = match &n.seg_id {
                        Some(seg_id) => embed(chunk_terms[seg_id.as_str()]),
                        None => hashing_embedding(&node_text(n), width),
                    };
                    (n.node_id.clone(), vector)
                })
                .collect(),
        ),
        (
            "entities",
            (entities.iter())
                .map(|e| {
                    (
                        e.entity_id.clone(),
                        hashing_embedding(&e.embedded_text(), width),
                    )
                })
                .collect(),
        ),
    ];
    let mut recall = [0.0f64; 3];
    // Exact neighbours missed that share no term with the question: near it
    // only where their terms and its hash to the same component.
    let (mut missed, mut collisions) = (0, 0);
    let terms_of: HashMap<&str, std::collections::HashSet<String>> = (segments.iter())
        .map(|s| {
            (
                s.seg_id.as_str(),
                s.terms.split_whitespace().map(str::to_string).collect(),
            )
        })
        .chain(nodes.iter().map(|n| {
            let text = match &n.seg_id {
                Some(seg_id) => chunk_terms[seg_id.as_str()].to_string(),
                None => node_text(n),
            };
            (
                n.node_id.as_str(),
                memweave_schemas::text::terms(&text).into_iter().collect(),
            )
        }))
        .chain(entities.iter().map(|e| {
            let terms = memweave_schemas::text::terms(&e.embedded_text());
            (e.entity_id.as_str(), terms.into_iter().collect())
        }))
        .collect();
    for question in set {
        let vector = hashing_embedding(question.question, width);
        let terms = memweave_schemas::text::terms(question.question);
        let probe = Probe {
            vector: &vector,
            terms: &terms,
        };
        let found: [Vec<String>; 3] = runtime.block_on(async {
            let all = Allowed(None);
            let ids = |found: Vec<(String, f64)>| found.into_iter().map(|(id, _)| id).collect();
            [
                ids(snapshot
                    .nearest_segment_ids(probe, all, NEAREST)
                    .await
                    .unwrap()),
                ids(snapshot
                    .nearest_node_ids(probe, all, NEAREST)
                    .await
                    .unwrap()),
                (snapshot.nearest_entities(probe, NEAREST).await.unwrap())
                    .into_iter()
                    .map(|(e, _)| e.entity_id.clone())
                    .collect(),
            ]
        });
        for (k, (_, owners)) in exact.iter().enumerate() {
            let mut scored: Vec<(&str, f64)> = (owners.iter())
                .map(|(id, v)| (id.as_str(), cosine(&vector, v)))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            let best: Vec<&str> = scored.iter().take(NEAREST).map(|(id, _)| *id).collect();
            let kept = best
                .iter()
                .filter(|id| found[k].iter().any(|f| f == *id))
                .count();
            for id in best.iter().filter(|id| !found[k].iter().any(|f| f == *id)) {
                missed += 1;
                let shares = terms.iter().any(|t| terms_of[id].contains(t));
                collisions += usize::from(!shares);
            }
            recall[k] += kept as f64 / best.len().max(1) as f64;
        }
    }
    let per_question: Vec<String> = (exact.iter().zip(recall))
        .map(|((name, _), sum)| format!("{name} {:.3}", sum / set.len().max(1) as f64))
        .collect();
    println!(
        "    recomputed vectors, recall@{NEAREST} against exact single-float search: {}; \
         of the {missed} missed, {collisions} share no term with the question",
        per_question.join(", ")
    );
}

/// The latency store: `count` documents of 8 consecutive pg-essays sentences
/// each, the windows stepping through the corpus, each headed by its number so
/// no two are the same text.
fn write_store_documents(dir: &Path, count: usize) {
    let sentences = essay_sentences();
    for i in 0..count {
        let start = (i * 8) % sentences.len();
        let window: Vec<&str> = (0..8)
            .map(|k| sentences[(start + k) % sentences.len()].as_str())
            .collect();
        let text = format!("Archive record {i}.\n\n{}\n", window.join(" "));
        let shard = dir.join(format!("{:03}", i / 100));
        std::fs::create_dir_all(&shard).unwrap();
        std::fs::write(shard.join(format!("record-{i:05}.txt")), text).unwrap();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn resident_mib() -> f64 {
    status_mib("self", "VmRSS:")
}

/// A memory figure of `/proc/{process}/status` (`VmRSS:`, `VmHWM:`), in MiB.
fn status_mib(process: &str, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn latency(runtime: &tokio::runtime::Runtime) {
    let count: usize = std::env::var("LATENCY_DOCS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let seconds = latency_seconds();
    // Kept between runs: building the store takes minutes.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::current_exe()
                .unwrap()
                .ancestors()
                .nth(3)
                .unwrap()
                .to_path_buf()
        });
    let root = target.join("memweave-bench").join(format!(
        "latency-{count}-{}",
        embedder_name().split(' ').next().unwrap()
    ));
    let tables = root.join("memory");
    if !tables.join("checkpoints.lance").exists() {
        let source = root.join("documents");
        let _ = std::fs::remove_dir_all(&root);
        write_store_documents(&source, count);
        let started = Instant::now();
        let summary = index(&source, &tables);
        println!(
            "Built the {count}-document store ({} tokens) in {:.0} s",
            summary.tokens,
            started.elapsed().as_secs_f64()
        );
    }
    let (snapshot, loaded) = load_timed(runtime, &tables);
    println!("Latency, {count} documents: {loaded}");
    let navigator = Navigator::new(runtime);
    let questions: Vec<String> = QUESTIONS.iter().map(|q| q.to_string()).collect();
    in_process(runtime, &navigator, &snapshot, &questions);
    drop(snapshot);

    let store = TableStore::new(&tables.display().to_string(), HashMap::new()).unwrap();
    let state = ServiceState::new(
        store,
        Arc::new(ReadCache::new(DEFAULT_CACHE_MIB)),
        Arc::new(TaskModel::extractive()),
        navigator.embedder.clone(),
        Limits::default(),
    );
    runtime.block_on(state.refresh()).unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let address = listener.local_addr().unwrap();
    memweave_process::task::spawn_on(runtime.handle(), "query_service", async move {
        axum::serve(
            listener,
            router(state, AllowedHosts::loopback_and([]), false),
        )
        .await
    });
    http_latency(address, seconds, &questions);
}

/// Every strategy asked the questions in process, one request at a time:
/// each question's first asking (the rows it reads are mostly not cached
/// yet), then all of them asked again.
fn in_process(
    runtime: &tokio::runtime::Runtime,
    navigator: &Navigator,
    snapshot: &Snapshot,
    questions: &[String],
) {
    println!(
        "  In process, one request at a time ({} questions, each strategy; first asking, then asked again):",
        questions.len()
    );
    for strategy in strategies() {
        let mut answered = 0;
        let mut passes = [Vec::new(), Vec::new()];
        for times in &mut passes {
            for question in questions {
                let started = Instant::now();
                let answer = navigator.ask(runtime, snapshot, question, strategy);
                times.push(started.elapsed().as_secs_f64() * 1000.0);
                answered += usize::from(answer.answered);
            }
            times.sort_by(f64::total_cmp);
        }
        let [first, again] = passes;
        println!(
            "    {:<13} first p50 {:>7.2} ms  p99 {:>7.2} ms; again p50 {:>7.2} ms  p99 {:>7.2} ms  ({answered} of {} answered)",
            strategy.name(),
            percentile(&first, 0.5),
            percentile(&first, 0.99),
            percentile(&again, 0.5),
            percentile(&again, 0.99),
            2 * questions.len()
        );
    }
}

/// Every strategy asked over HTTP for `seconds`, 8 requests in flight.
fn http_latency(address: std::net::SocketAddr, seconds: u64, questions: &[String]) {
    println!(
        "  Over HTTP on loopback, 8 requests in flight, {seconds} s per strategy, {} questions in turn:",
        questions.len()
    );
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for strategy in strategies() {
        let (times, failures) =
            client_runtime.block_on(load_test(address, strategy, seconds, questions));
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "    {:<13} {:>7.1} requests/s  p50 {:>7.2} ms  p99 {:>7.2} ms  ({failures} failed)",
            strategy.name(),
            times.len() as f64 / seconds as f64,
            percentile(&sorted, 0.5),
            percentile(&sorted, 0.99),
        );
    }
}

/// Eight clients asking `strategy` the questions in turn for `seconds`; the
/// latency of every answer, in milliseconds, and the count of failures.
async fn load_test(
    address: std::net::SocketAddr,
    strategy: Strategy,
    seconds: u64,
    questions: &[String],
) -> (Vec<f64>, usize) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let clients = (0..8).map(|c| {
        let client = client.clone();
        async move {
            let mut times = Vec::new();
            let mut failures = 0;
            let mut i = c;
            while Instant::now() < deadline {
                let started = Instant::now();
                let response = client
                    .post(format!("http://{address}/v1/ask"))
                    .json(&serde_json::json!({
                        "question": questions[i % questions.len()],
                        "strategy": strategy.name(),
                    }))
                    .send()
                    .await;
                let ok = match response {
                    Ok(response) => {
                        response.status().is_success() && response.bytes().await.is_ok()
                    }
                    Err(_) => false,
                };
                if ok {
                    times.push(started.elapsed().as_secs_f64() * 1000.0);
                } else {
                    failures += 1;
                }
                i += 1;
            }
            (times, failures)
        }
    });
    let mut times = Vec::new();
    let mut failures = 0;
    for (t, f) in futures::future::join_all(clients).await {
        times.extend(t);
        failures += f;
    }
    (times, failures)
}

/// The service over the scale benchmark's memories, as a separate process.
fn scale(runtime: &tokio::runtime::Runtime) {
    let binary = std::env::var_os("QUERY_BIN").map_or_else(
        || {
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().with_file_name("memweave-query")
        },
        PathBuf::from,
    );
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build --release -p memweave-query` first, or set QUERY_BIN",
        binary.display()
    );
    let work = std::env::var_os("SCALE_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-scale"),
        PathBuf::from,
    );
    let seconds = latency_seconds();
    let sizes = std::env::var("QUERY_SCALE_SIZES").unwrap_or_else(|_| "1M,10M".into());
    let navigator = Navigator::new(runtime);
    let questions = broad_questions();
    for size in sizes.split(',') {
        let built = work.join(format!("tables-generated-{size}"));
        if !built.join("checkpoints.lance").exists() {
            println!(
                "Scale {size}: no memory at {}; build it with SCALE_SIZES={size} cargo bench --bench scale",
                built.display()
            );
            continue;
        }
        let tables = work.join(format!("query-{size}"));
        copy_memory(&built, &tables);
        println!(
            "Scale {size}: {} ({:.0} MB of tables, the call cache left out), {}",
            tables.display(),
            dir_bytes(&tables) as f64 / 1e6,
            binary.display()
        );
        let address = free_address();
        let log = std::fs::File::create(work.join(format!("query-{size}.log"))).unwrap();
        let started = Instant::now();
        let mut service = std::process::Command::new(&binary)
            .args(["serve", "--tables"])
            .arg(&tables)
            .args(["--listen", &address.to_string(), "--refresh-secs", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let epoch = runtime.block_on(served_epoch(address, 0));
        println!(
            "  ready in {:.2} s (epoch {epoch}), peak RSS {:.0} MiB",
            started.elapsed().as_secs_f64(),
            peak_mib(service.id())
        );
        http_latency(address, seconds, &questions);
        println!("  service's peak RSS {:.0} MiB", peak_mib(service.id()));
        let committed = runtime.block_on(append_essay(&work, &tables));
        let started = Instant::now();
        runtime.block_on(served_epoch(address, committed));
        println!(
            "  a commit appending one essay's memory (epoch {committed}) served {:.2} s after it, peak RSS {:.0} MiB",
            started.elapsed().as_secs_f64(),
            peak_mib(service.id())
        );
        service.kill().unwrap();
        service.wait().unwrap();
        let (snapshot, loaded) = load_timed(runtime, &tables);
        println!("  in process: {loaded}");
        // Fewer in process: each is asked twice, one at a time, per strategy.
        in_process(runtime, &navigator, &snapshot, &questions[..48]);
    }
}

/// Questions over the whole archive rather than a few asked again and again,
/// so a cached row is a row many questions share, not the same question's:
/// the benchmark's questions, then the first words of sentences spread over
/// pg-essays (the generated archives' source), as questions.
fn broad_questions() -> Vec<String> {
    const ASKED: usize = 200;
    let sentences = essay_sentences();
    let step = (sentences.len() / ASKED).max(1);
    let asked = sentences.iter().step_by(step).filter_map(|sentence| {
        let words: Vec<&str> = sentence.split_whitespace().take(12).collect();
        (words.len() >= 6).then(|| format!("What about {}?", words.join(" ")))
    });
    QUESTIONS
        .iter()
        .map(|q| q.to_string())
        .chain(asked)
        .take(QUESTIONS.len() + ASKED)
        .collect()
}

/// A copy of every table of `from` but the call cache (the service never
/// reads it), fresh at `to`.
fn copy_memory(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "llm_calls.lance") {
            continue;
        }
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(&path)
            .arg(to)
            .status()
            .unwrap();
        assert!(status.success(), "copying {}", path.display());
    }
}

fn free_address() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Polls `/readyz` until the service serves an epoch of at least `epoch`;
/// returns it.
async fn served_epoch(address: std::net::SocketAddr, epoch: u64) -> u64 {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(1800);
    while Instant::now() < deadline {
        if let Ok(response) = client.get(format!("http://{address}/readyz")).send().await
            && response.status().is_success()
            && let Ok(body) = response.json::<serde_json::Value>().await
            && let Some(served) = body["epoch"].as_u64()
            && served >= epoch
        {
            return served;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the service at {address} did not serve epoch {epoch} within 30 minutes");
}

/// The peak resident memory of process `pid` so far (VmHWM), in MiB.
fn peak_mib(pid: u32) -> f64 {
    status_mib(&pid.to_string(), "VmHWM:")
}

/// Commits one essay's memory into `tables` as the indexer commits a round:
/// its rows staged into every table, the tables' new versions named by a new
/// checkpoint. The essay is indexed apart (same build settings) so the big
/// memory's call cache is not needed. Returns the new epoch.
async fn append_essay(work: &Path, tables: &Path) -> u64 {
    let essay_dir = work.join("query-essay");
    let essay_tables = work.join("query-essay-tables");
    if !essay_tables.join("checkpoints.lance").exists() {
        let _ = std::fs::remove_dir_all(&essay_dir);
        std::fs::create_dir_all(&essay_dir).unwrap();
        let essays = memweave_benches::shared_data("pg-essays");
        let first = &memweave_benches::files_in(&essays)[0];
        std::fs::copy(first, essay_dir.join("appended-essay.txt")).unwrap();
        let (dir, out) = (essay_dir.clone(), essay_tables.clone());
        tokio::task::spawn_blocking(move || index(&dir, &out))
            .await
            .unwrap();
    }
    let essay = TableStore::new(&essay_tables.display().to_string(), HashMap::new()).unwrap();
    let checkpoint = essay.latest_checkpoint().await.unwrap().unwrap();
    let rows = memweave_schemas::MemoryTables::read_at(&essay, &checkpoint)
        .await
        .unwrap();
    let store = TableStore::new(&tables.display().to_string(), HashMap::new()).unwrap();
    store.commit_memory(&rows, false).await.unwrap().epoch
}
