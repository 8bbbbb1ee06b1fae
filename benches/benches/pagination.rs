//! Speculative pagination: how long the chain of page breaks of each pg-essay is
//! when every call takes one round and the pool is unlimited, and how many calls
//! speculation adds. The longest chain bounds how early a build can finish.
//!
//! Run: `cargo bench --workspace --profile dev --bench pagination`.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use memweave_llm::model::TaskModel;
use memweave_operators::model::*;
use memweave_operators::paginate::{PageConfig, paginate};

const ROUND: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct Remote {
    inner: TaskModel,
    calls: AtomicUsize,
    /// When the reply for each window is back.
    asked: Mutex<HashMap<String, tokio::time::Instant>>,
    disagree_percent: u64,
    /// Whether pagination may speculate.
    remote: bool,
    /// How long a call takes.
    round: Duration,
}

#[async_trait]
impl MemoryModel for Remote {
    fn backend(&self) -> &str {
        self.inner.backend()
    }
    fn is_remote(&self) -> bool {
        self.remote
    }
    async fn summarize_segment(&self, cx: &CallContext, s: &str) -> StepResult<String> {
        self.inner.summarize_segment(cx, s).await
    }
    async fn compress_summaries(&self, cx: &CallContext, s: &[&str]) -> StepResult<String> {
        self.inner.compress_summaries(cx, s).await
    }
    async fn triage(&self, cx: &CallContext, q: &str, s: &[&str]) -> StepResult<Triage> {
        self.inner.triage(cx, q, s).await
    }
    async fn read_leaf(
        &self,
        cx: &CallContext,
        q: &str,
        m: &str,
        s: &str,
    ) -> StepResult<Judgement> {
        self.inner.read_leaf(cx, q, m, s).await
    }
    async fn choose_break(
        &self,
        cx: &CallContext,
        units: &[&str],
        candidates: &[usize],
        first_label: usize,
    ) -> StepResult<usize> {
        // Asked once per window: the call cache sends a call once and every caller
        // gets its reply.
        let ready = *self
            .asked
            .lock()
            .unwrap()
            .entry(units.join("\n"))
            .or_insert_with(|| {
                self.calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::Instant::now() + self.round
            });
        tokio::time::sleep_until(ready).await;
        // A model that parts from the lexical draft on a share of the pages: a fixed
        // pseudo-random candidate, the same for the same window.
        let hash = blake3::hash(format!("{first_label}{}", units[0]).as_bytes());
        let roll = u64::from_le_bytes(hash.as_bytes()[..8].try_into().unwrap());
        if roll % 100 < self.disagree_percent {
            return Ok(candidates[(roll / 100) as usize % candidates.len()]);
        }
        self.inner
            .choose_break(cx, units, candidates, first_label)
            .await
    }
    async fn gist_page(&self, cx: &CallContext, p: &str) -> StepResult<String> {
        self.inner.gist_page(cx, p).await
    }
    async fn starts_new_section(
        &self,
        cx: &CallContext,
        previous: &str,
        current: &str,
    ) -> StepResult<Option<bool>> {
        self.inner.starts_new_section(cx, previous, current).await
    }
    async fn same_entity(
        &self,
        cx: &CallContext,
        name: &str,
        first: &str,
        others: &[&str],
    ) -> StepResult<Vec<bool>> {
        self.inner.same_entity(cx, name, first, others).await
    }
    async fn lookup_pages(
        &self,
        cx: &CallContext,
        q: &str,
        m: &[PageView<'_>],
        k: usize,
    ) -> StepResult<Vec<u32>> {
        self.inner.lookup_pages(cx, q, m, k).await
    }
    async fn lookup_next_page(
        &self,
        cx: &CallContext,
        q: &str,
        m: &[PageView<'_>],
        read: &[u32],
    ) -> StepResult<Option<u32>> {
        self.inner.lookup_next_page(cx, q, m, read).await
    }
    async fn extract_entities(
        &self,
        cx: &CallContext,
        b: &str,
        s: &str,
    ) -> StepResult<Vec<String>> {
        self.inner.extract_entities(cx, b, s).await
    }
    async fn extract_relations(
        &self,
        cx: &CallContext,
        s: &str,
        e: &[&str],
    ) -> StepResult<Vec<Relation>> {
        self.inner.extract_relations(cx, s, e).await
    }
    async fn merge_relations(
        &self,
        cx: &CallContext,
        s: &str,
        a: RelationEvidence<'_>,
        b: RelationEvidence<'_>,
    ) -> StepResult<String> {
        self.inner.merge_relations(cx, s, a, b).await
    }
    async fn judge_answerable(&self, cx: &CallContext, q: &str, c: &str) -> StepResult<Judgement> {
        self.inner.judge_answerable(cx, q, c).await
    }
    async fn summarize_with_facts(&self, cx: &CallContext, c: &str) -> StepResult<FactSummary> {
        self.inner.summarize_with_facts(cx, c).await
    }
    async fn update_memory(
        &self,
        cx: &CallContext,
        q: &str,
        r: &str,
        m: &str,
    ) -> StepResult<String> {
        self.inner.update_memory(cx, q, r, m).await
    }
    async fn answer(&self, cx: &CallContext, q: &str, c: &str) -> StepResult<String> {
        self.inner.answer(cx, q, c).await
    }
}

#[tokio::main]
async fn main() {
    let dir = memweave_benches::shared_data("pg-essays");
    let files = memweave_benches::files_in(&dir);
    let texts: Vec<Arc<String>> = files
        .iter()
        .map(|f| Arc::new(std::fs::read_to_string(f).unwrap()))
        .collect();
    for disagree_percent in [0, 30, 60, 100] {
        // Each document on its own task, so one document's draft and replies (CPU)
        // do not hold up another's round.
        let runs = texts.iter().map(|text| {
            let text = Arc::clone(text);
            tokio::spawn(async move {
                let cx = CallContext::build("readagent", "bench");
                let paginate_with = |remote: bool, round: Duration| Remote {
                    inner: TaskModel::extractive(),
                    calls: AtomicUsize::new(0),
                    asked: Mutex::default(),
                    disagree_percent,
                    remote,
                    round,
                };
                // Sequentially: one round per break call, by definition.
                let sequential = paginate_with(false, Duration::ZERO);
                let pages = paginate(&text, &PageConfig::DEFAULT, &sequential, &cx)
                    .await
                    .unwrap();
                let speculative = paginate_with(true, ROUND);
                let started = Instant::now();
                let same = paginate(&text, &PageConfig::DEFAULT, &speculative, &cx)
                    .await
                    .unwrap();
                let rounds = started.elapsed().as_secs_f64() / ROUND.as_secs_f64();
                assert_eq!(pages, same, "speculation changed the pages");
                let sequential_calls = sequential.calls.into_inner();
                (
                    pages.len(),
                    sequential_calls,
                    rounds,
                    speculative.calls.into_inner(),
                )
            })
        });
        let results: Vec<_> = futures::future::join_all(runs)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let longest = results.iter().max_by_key(|r| r.0).unwrap();
        let calls =
            |f: fn(&(usize, usize, f64, usize)) -> usize| results.iter().map(f).sum::<usize>();
        let (sequential_calls, speculative_calls) = (calls(|r| r.1), calls(|r| r.3));
        println!(
            "model parts from the draft on {disagree_percent:>3}% of breaks: longest chain {} → {:.1} rounds, break calls {} → {} (+{:.0}%); longest document ({} pages) {} → {:.1} rounds",
            results.iter().map(|r| r.1).max().unwrap(),
            results.iter().map(|r| r.2).fold(0.0, f64::max),
            sequential_calls,
            speculative_calls,
            100.0 * (speculative_calls as f64 / sequential_calls as f64 - 1.0),
            longest.0,
            longest.1,
            longest.2,
        );
    }
}
