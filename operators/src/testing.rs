//! A stand-in model for the unit tests of tree grouping and pagination: answers
//! every step from the text's first sentence, so structure can be tested without a
//! backend (the real ones live in `memweave-llm`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::extract::{capitalised_names, co_mentions, sentence_list};
use crate::lexical::{TermVector, sharpest_shift};
use crate::model::*;

/// A paragraph the text operators' and the extractive backend's tests read:
/// sentences on one theme, one that stands apart ("The weather was cold.").
pub const PAINTING: &str = "Painting taught me to look. I painted still lifes every day. \
    Looking at paint on canvas taught me patience. The weather was cold. \
    Still lifes are paintings of objects that do not move.";

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

impl FirstSentence {
    /// Depends on the window, like a model's choice would.
    async fn choose_break(
        &self,
        units: &[String],
        candidates: &[usize],
        first_label: usize,
    ) -> usize {
        self.breaks_asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((units.to_vec(), first_label));
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
            return sharpest_shift(&vectors, candidates)
                .unwrap_or(candidates[candidates.len() - 1]);
        }
        *candidates
            .iter()
            .max_by_key(|&&c| (units[c].len(), std::cmp::Reverse(c)))
            .expect("at least one candidate")
    }
}

#[async_trait]
impl MemoryModel for FirstSentence {
    fn backend(&self) -> &str {
        "first-sentence"
    }
    fn is_remote(&self) -> bool {
        self.remote
    }
    async fn reply(&self, _: &CallContext, step: Step) -> StepResult<Reply> {
        Ok(match step {
            Step::SummarizeSegment { segment: text } | Step::GistPage { page: text } => {
                Reply::Text(first(&text))
            }
            Step::CompressSummaries { summaries } => {
                Reply::Text(format!("compressed: {}", first(&summaries[0])))
            }
            Step::ChooseBreak {
                units,
                candidates,
                first_label,
            } => Reply::Break(self.choose_break(&units, &candidates, first_label).await),
            // A page whose first sentence names a chapter starts a new section.
            Step::StartsNewSection { current, .. } => {
                Reply::SectionStart(Some(first(&current).contains("Chapter")))
            }
            Step::ExtractEntities { segment, .. } => {
                Reply::Entities(capitalised_names(&segment, 20))
            }
            Step::ExtractRelations { segment, entities } => {
                let entities: Vec<&str> = entities.iter().map(String::as_str).collect();
                Reply::Relations(
                    co_mentions(&segment, &entities)
                        .into_iter()
                        .map(|(a, b, sentence)| Relation {
                            source: a.to_string(),
                            target: b.to_string(),
                            description: sentence,
                        })
                        .collect(),
                )
            }
            Step::MergeRelations { relations, .. } => {
                self.merges.fetch_add(1, Ordering::SeqCst);
                let [first, _] = relations;
                Reply::Text(first)
            }
            Step::SameEntity { name, others, .. } => {
                self.compared.fetch_add(others.len(), Ordering::SeqCst);
                let same = !self.distinct_names.contains(&name);
                Reply::SameEntity(vec![same; others.len()])
            }
            Step::SummarizeWithFacts { chunk } => Reply::FactSummary(FactSummary {
                summary: first(&chunk),
                surprise: String::new(),
            }),
            other => return navigation_reply(other),
        })
    }
}

/// The navigators' steps: no answer, no page, the first sentence. A step this
/// stand-in was not taught is refused, so adding a step asks nothing of it.
fn navigation_reply(step: Step) -> StepResult<Reply> {
    let no_answer = || Judgement {
        reasoning: String::new(),
        answer: None,
    };
    Ok(match step {
        Step::UpdateMemory {
            retrieved: text, ..
        }
        | Step::Answer { context: text, .. } => Reply::Text(first(&text)),
        Step::Triage { .. } => Reply::Triage(Triage {
            reasoning: String::new(),
            choice: 0,
        }),
        Step::ReadLeaf { .. } | Step::JudgeAnswerable { .. } => Reply::Judgement(no_answer()),
        Step::LookupPages { pages, .. } => {
            Reply::Pages(pages.iter().take(1).map(|p| p.number).collect())
        }
        Step::LookupNextPage { .. } => Reply::NextPage(None),
        other => {
            return Err(StepError::Unavailable {
                task: other.task().name().to_string(),
                message: "the first-sentence stand-in does not answer this step".to_string(),
            });
        }
    })
}
