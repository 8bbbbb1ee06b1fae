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
use memweave_operators::model::*;
use memweave_operators::paginate::{PageConfig, paginate};
use memweave_operators::testing::FirstSentence;

const ROUND: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct Remote {
    /// Breaks where the vocabulary shifts most, as the extractive backend does.
    inner: FirstSentence,
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
    async fn reply(&self, cx: &CallContext, step: Step) -> StepResult<Reply> {
        let Step::ChooseBreak {
            units,
            candidates,
            first_label,
        } = &step
        else {
            return self.inner.reply(cx, step).await;
        };
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
            return Ok(Reply::Break(
                candidates[(roll / 100) as usize % candidates.len()],
            ));
        }
        self.inner.reply(cx, step).await
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
            memweave_process::task::spawn("paginate", async move {
                let cx = CallContext::build("readagent", "bench");
                let paginate_with = |remote: bool, round: Duration| Remote {
                    inner: FirstSentence::agreeing_with_draft(false),
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
