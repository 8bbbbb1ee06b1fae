//! A stand-in model for the unit tests of tree grouping and pagination: answers
//! every step from the text's first sentence, so structure can be tested without a
//! backend (the real ones live in `memweave-llm`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::extract::{capitalised_names, co_mentions, sentence_list};
use crate::lexical::{TermVector, sharpest_shift};
use crate::model::*;

#[derive(Debug, Default)]
pub struct FirstSentence {
    remote: bool,
    /// Breaks where the vocabulary shifts most, as pagination's draft predicts;
    /// otherwise after the longest candidate unit, which the draft does not foresee.
    agrees_with_draft: bool,
    /// Every window `choose_break` was shown (its paragraphs and first label),
    /// in order.
    breaks_asked: Mutex<Vec<(Vec<String>, usize)>>,
    breaks_in_flight: AtomicUsize,
    peak_breaks_in_flight: AtomicUsize,
    /// Names `same_entity` says are different entities in every two passages.
    distinct_names: Vec<String>,
    /// Calls of `merge_relations`, and passages `same_entity` was asked about.
    merges: AtomicUsize,
    compared: AtomicUsize,
}

impl FirstSentence {
    pub fn remote(remote: bool) -> Self {
        FirstSentence {
            remote,
            ..Self::default()
        }
    }

    pub fn agreeing_with_draft(remote: bool) -> Self {
        FirstSentence {
            remote,
            agrees_with_draft: true,
            ..Self::default()
        }
    }

    /// A model that keeps entities called any of `names` apart across documents.
    pub fn separating(names: &[&str]) -> Self {
        FirstSentence {
            distinct_names: names.iter().map(|n| n.to_string()).collect(),
            ..Self::default()
        }
    }

    /// Calls of `merge_relations` so far.
    pub fn merges(&self) -> usize {
        self.merges.load(Ordering::SeqCst)
    }

    /// Passages `same_entity` was asked about so far.
    pub fn compared(&self) -> usize {
        self.compared.load(Ordering::SeqCst)
    }

    /// The most `choose_break` calls that were waiting for their reply at once.
    pub fn peak_breaks_in_flight(&self) -> usize {
        self.peak_breaks_in_flight.load(Ordering::SeqCst)
    }

    pub fn breaks_asked(&self) -> Vec<(Vec<String>, usize)> {
        self.breaks_asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Pending once, so that every other ready future runs before this one goes on.
async fn yield_once() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

fn first(text: &str) -> String {
    sentence_list(text)
        .first()
        .map_or_else(String::new, |s| s.to_string())
}

#[async_trait]
impl MemoryModel for FirstSentence {
    fn backend(&self) -> &str {
        "first-sentence"
    }
    fn is_remote(&self) -> bool {
        self.remote
    }
    async fn summarize_segment(&self, _: &CallContext, segment: &str) -> StepResult<String> {
        Ok(first(segment))
    }
    async fn compress_summaries(&self, _: &CallContext, s: &[&str]) -> StepResult<String> {
        Ok(format!("compressed: {}", first(s[0])))
    }
    async fn triage(&self, _: &CallContext, _: &str, _: &[&str]) -> StepResult<Triage> {
        Ok(Triage {
            reasoning: String::new(),
            choice: 0,
        })
    }
    async fn read_leaf(&self, _: &CallContext, _: &str, _: &str, _: &str) -> StepResult<Judgement> {
        Ok(Judgement {
            reasoning: String::new(),
            answer: None,
        })
    }
    /// Depends on the window, like a model's choice would.
    async fn choose_break(
        &self,
        _: &CallContext,
        units: &[&str],
        candidates: &[usize],
        first_label: usize,
    ) -> StepResult<usize> {
        self.breaks_asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((units.iter().map(|u| u.to_string()).collect(), first_label));
        if self.remote {
            // A remote reply takes a while: let the other walks ask in the meantime.
            let in_flight = self.breaks_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak_breaks_in_flight
                .fetch_max(in_flight, Ordering::SeqCst);
            yield_once().await;
            self.breaks_in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if self.agrees_with_draft {
            let vectors: Vec<TermVector> = units.iter().map(|u| TermVector::of(u)).collect();
            return Ok(
                sharpest_shift(&vectors, candidates).unwrap_or(candidates[candidates.len() - 1])
            );
        }
        Ok(*candidates
            .iter()
            .max_by_key(|&&c| (units[c].len(), std::cmp::Reverse(c)))
            .expect("at least one candidate"))
    }
    async fn gist_page(&self, _: &CallContext, page: &str) -> StepResult<String> {
        Ok(first(page))
    }
    /// A page whose first sentence names a chapter starts a new section.
    async fn starts_new_section(
        &self,
        _: &CallContext,
        _: &str,
        current: &str,
    ) -> StepResult<Option<bool>> {
        Ok(Some(first(current).contains("Chapter")))
    }
    async fn lookup_pages(
        &self,
        _: &CallContext,
        _: &str,
        m: &[PageView<'_>],
        _: usize,
    ) -> StepResult<Vec<u32>> {
        Ok(m.iter().take(1).map(|p| p.number).collect())
    }
    async fn lookup_next_page(
        &self,
        _: &CallContext,
        _: &str,
        _: &[PageView<'_>],
        _: &[u32],
    ) -> StepResult<Option<u32>> {
        Ok(None)
    }
    async fn extract_entities(
        &self,
        _: &CallContext,
        _: &str,
        segment: &str,
    ) -> StepResult<Vec<String>> {
        Ok(capitalised_names(segment, 20))
    }
    async fn extract_relations(
        &self,
        _: &CallContext,
        segment: &str,
        entities: &[&str],
    ) -> StepResult<Vec<Relation>> {
        Ok(co_mentions(segment, entities)
            .into_iter()
            .map(|(a, b, sentence)| Relation {
                source: a.to_string(),
                target: b.to_string(),
                description: sentence,
            })
            .collect())
    }
    async fn merge_relations(
        &self,
        _: &CallContext,
        _: &str,
        a: RelationEvidence<'_>,
        _: RelationEvidence<'_>,
    ) -> StepResult<String> {
        self.merges.fetch_add(1, Ordering::SeqCst);
        Ok(a.relation.to_string())
    }
    async fn same_entity(
        &self,
        _: &CallContext,
        name: &str,
        _: &str,
        others: &[&str],
    ) -> StepResult<Vec<bool>> {
        self.compared.fetch_add(others.len(), Ordering::SeqCst);
        let same = !self.distinct_names.iter().any(|n| n == name);
        Ok(vec![same; others.len()])
    }
    async fn judge_answerable(&self, _: &CallContext, _: &str, _: &str) -> StepResult<Judgement> {
        Ok(Judgement {
            reasoning: String::new(),
            answer: None,
        })
    }
    async fn summarize_with_facts(&self, _: &CallContext, chunk: &str) -> StepResult<FactSummary> {
        Ok(FactSummary {
            summary: first(chunk),
            surprise: String::new(),
        })
    }
    async fn update_memory(
        &self,
        _: &CallContext,
        _: &str,
        r: &str,
        _: &str,
    ) -> StepResult<String> {
        Ok(first(r))
    }
    async fn answer(&self, _: &CallContext, _: &str, context: &str) -> StepResult<String> {
        Ok(first(context))
    }
}
