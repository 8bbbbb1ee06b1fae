//! The memory model: the steps of the four methods (MemWalker, ReadAgent,
//! QRMeM, ILM-TR) as data ([`Step`], [`Reply`]), one trait whose backends
//! answer a step ([`MemoryModel::reply`]) and whose typed calls builders and
//! navigators make, so they never know which backend answers. Backends live
//! in `memweave-llm`.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

mod fallback;
pub mod parse;
mod step;
pub use fallback::WithFallbacks;
pub use step::{FromReply, PageText, Reply, Step, Task};

/// Who is asking, in the order the model pool serves them: questions first, then
/// build calls that later calls of the same document wait on (a page break, a
/// parent summary; the more work still waits behind one, the sooner it goes),
/// then the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Priority {
    Build,
    /// With how much work waits behind the call (e.g. kilobytes of text left).
    BuildChain(u32),
    Query,
}

/// Where a call comes from, for the cost ledger (`llm_calls.stage`, `llm_calls.doc_id`)
/// and for scheduling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallContext {
    /// The memory or navigator the call serves: "memwalker", "readagent", "qrmem", "ilmtr".
    pub stage: &'static str,
    pub doc_id: Option<String>,
    /// What a build call across documents is about (`llm_calls.subject`):
    /// see [`CallContext::about`].
    pub subject: Option<String>,
    pub priority: Priority,
    /// Where a question's calls are noted for its trace; builds note none.
    pub ledger: Option<CallLedger>,
}

impl CallContext {
    pub fn build(stage: &'static str, doc_id: &str) -> Self {
        CallContext {
            stage,
            doc_id: Some(doc_id.to_string()),
            subject: None,
            priority: Priority::Build,
            ledger: None,
        }
    }

    /// A build call about no one document: a corpus tree, or the graph across
    /// documents.
    pub fn corpus(stage: &'static str) -> Self {
        CallContext {
            stage,
            doc_id: None,
            subject: None,
            priority: Priority::Build,
            ledger: None,
        }
    }

    /// The same corpus caller, its calls about `subject`: each time the
    /// stage asks about a subject it asks every call the subject needs, so
    /// the cache may drop the subject's older calls left unasked. The
    /// subject names the stage's unit of work (a tree, a relation, a batch
    /// of a name's comparisons), never its content, which the call key holds.
    pub fn about(&self, subject: String) -> Self {
        CallContext {
            subject: Some(subject),
            ..self.clone()
        }
    }

    /// The same caller, for a call that later calls of the same document wait
    /// on, with `waiting` work behind it.
    pub fn chained(&self, waiting: u32) -> Self {
        CallContext {
            priority: self.priority.max(Priority::BuildChain(waiting)),
            ..self.clone()
        }
    }

    pub fn query(stage: &'static str) -> Self {
        CallContext {
            stage,
            doc_id: None,
            subject: None,
            priority: Priority::Query,
            ledger: None,
        }
    }

    /// The same caller, noting its calls in `ledger`.
    pub fn noted_in(self, ledger: CallLedger) -> Self {
        CallContext {
            ledger: Some(ledger),
            ..self
        }
    }
}

/// One model or embedding call as a question's trace shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCall {
    /// The step of the methods ("triage", "answer", "embed", ...).
    pub task: String,
    pub tokens_in: u32,
    pub tokens_out: u32,
    pub latency_ms: u32,
    /// Answered by an identical call already made (no tokens spent).
    pub cached: bool,
}

/// The calls one request made, in order, and what it may spend: model tokens,
/// and steps of its navigation. Clones share one ledger.
#[derive(Debug, Clone)]
pub struct CallLedger {
    calls: Arc<Mutex<LedgerState>>,
    token_limit: u64,
    step_limit: u64,
}

#[derive(Debug, Default)]
struct LedgerState {
    unread: Vec<ModelCall>,
    tokens_spent: u64,
    steps: u64,
}

impl PartialEq for CallLedger {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.calls, &other.calls)
    }
}

impl Eq for CallLedger {}

impl CallLedger {
    /// A ledger that refuses calls once `token_limit` tokens (prompt and reply)
    /// have been spent or `step_limit` steps taken.
    pub fn with_limits(token_limit: u64, step_limit: u64) -> Self {
        CallLedger {
            calls: Arc::default(),
            token_limit,
            step_limit,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Err` when the request has spent its tokens or steps: no further call is
    /// made, which ends every navigation (each of their loops asks the model).
    pub fn admit(&self, task: &str) -> StepResult<()> {
        let state = self.state();
        let over = |spent: u64, limit: u64, unit: &'static str| StepError::OverBudget {
            task: task.to_string(),
            spent,
            limit,
            unit,
        };
        if state.tokens_spent >= self.token_limit {
            return Err(over(state.tokens_spent, self.token_limit, "model tokens"));
        }
        if state.steps >= self.step_limit {
            return Err(over(state.steps, self.step_limit, "steps"));
        }
        Ok(())
    }

    /// The navigation took a step.
    pub fn note_step(&self) {
        self.state().steps += 1;
    }

    pub fn note(&self, call: ModelCall) {
        let mut state = self.state();
        if !call.cached {
            state.tokens_spent += u64::from(call.tokens_in) + u64::from(call.tokens_out);
        }
        state.unread.push(call);
    }

    /// The calls noted since the last take.
    pub fn take(&self) -> Vec<ModelCall> {
        std::mem::take(&mut self.state().unread)
    }

    pub fn tokens_spent(&self) -> u64 {
        self.state().tokens_spent
    }
}

/// Why a step produced no result. Every kind maps to an `errors` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepError {
    /// Three replies in a row did not follow the format the step asks for.
    Unparsable { task: String, last_reply: String },
    /// The backend replied with another kind of reply than the step asks for
    /// (a backend's bug, not a model's drift: asking again would not help).
    WrongReply { task: String, reply: String },
    /// The pool did not answer (every retry failed, or the request was refused).
    Unavailable { task: String, message: String },
    /// Replay mode (`--cache-only`) and the call is not in the cache.
    CacheMiss { task: String },
    /// The request spent the model tokens or took the steps it was allowed.
    OverBudget {
        task: String,
        spent: u64,
        limit: u64,
        /// "model tokens" or "steps".
        unit: &'static str,
    },
}

impl StepError {
    /// The `errors.kind`s of the failures a later run may not meet (the pool
    /// answers, the cache holds the reply, the budget is larger): a build
    /// that met one is not final.
    pub const TRANSIENT_KINDS: [&'static str; 3] = [UNAVAILABLE, CACHE_MISS, OVER_BUDGET];

    /// The `errors.kind` of this failure.
    pub fn kind(&self) -> &'static str {
        match self {
            StepError::Unparsable { .. } => UNPARSABLE,
            StepError::WrongReply { .. } => "llm_wrong_reply",
            StepError::Unavailable { .. } => UNAVAILABLE,
            StepError::CacheMiss { .. } => CACHE_MISS,
            StepError::OverBudget { .. } => OVER_BUDGET,
        }
    }
}

/// The `errors.kind` of replies that could not be read after their retries.
pub const UNPARSABLE: &str = "llm_unparsable";
const UNAVAILABLE: &str = "llm_unavailable";
const CACHE_MISS: &str = "llm_cache_miss";
const OVER_BUDGET: &str = "llm_over_budget";

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Unparsable { task, last_reply } => {
                let shown: String = last_reply.chars().take(160).collect();
                write!(
                    f,
                    "{task}: three replies could not be parsed; last: {shown:?}"
                )
            }
            StepError::WrongReply { task, reply } => {
                write!(
                    f,
                    "{task}: the backend replied {reply}, not what the step asks for"
                )
            }
            StepError::Unavailable { task, message } => {
                write!(f, "{task}: the model pool did not answer: {message}")
            }
            StepError::CacheMiss { task } => {
                write!(
                    f,
                    "{task}: not in the call cache and --cache-only forbids calling the pool"
                )
            }
            StepError::OverBudget {
                task,
                spent,
                limit,
                unit,
            } => {
                write!(
                    f,
                    "{task}: not asked: {spent} {unit} spent of the {limit} allowed"
                )
            }
        }
    }
}

impl std::error::Error for StepError {}

pub type StepResult<T> = Result<T, StepError>;

/// Runs every step to the end, at most [`STEPS_IN_FLIGHT`] at once, and returns
/// their results in order, or the error of the first (in order, not in time) that
/// failed: which error a build reports must not depend on which reply came back
/// first.
pub fn all_in_order<T, Step: Future<Output = StepResult<T>>>(
    steps: impl IntoIterator<Item = Step>,
) -> impl Future<Output = StepResult<Vec<T>>> {
    use futures::StreamExt;
    // Made here, not in the future: a closure that makes the steps, held
    // across an await, makes the future's `Send` depend on its lifetimes.
    let steps: Vec<Step> = steps.into_iter().collect();
    async move {
        futures::stream::iter(steps)
            .buffered(STEPS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }
}

/// Steps of one [`all_in_order`] running at once. A step holds its prompt and
/// reply until it ends, and the largest groups grow with the archive: merging
/// the most frequent pair's mentions started 400 calls at once at 10M tokens
/// and 4,000 at 100M. Many documents and groups are built side by side, so
/// this still keeps a GPU pool's queues full.
pub const STEPS_IN_FLIGHT: usize = 64;

/// MemWalker triage: which child to descend into, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triage {
    pub reasoning: String,
    pub choice: usize,
}

/// MemWalker at a leaf (action -2 answers, -1 reverts to the parent); also QRMeM's
/// "can the question be answered from these segments, and if not why".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub reasoning: String,
    /// `Some` when the model answered (action -2).
    pub answer: Option<String>,
}

/// A QRMeM open relation between two entities of one segment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Relation {
    pub source: String,
    pub target: String,
    pub description: String,
}

/// One side of a QRMeM relation merge: a segment and the relation it gave.
#[derive(Debug, Clone, Copy)]
pub struct RelationEvidence<'a> {
    pub segment: &'a str,
    pub relation: &'a str,
}

/// ILM-TR's summary of a chunk with the facts that stand out from the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactSummary {
    pub summary: String,
    pub surprise: String,
}

/// A ReadAgent page as the look-up prompts show it: its number and either its gist
/// or, once looked up, its full text.
#[derive(Debug, Clone, Copy)]
pub struct PageView<'a> {
    pub number: u32,
    pub text: &'a str,
}

/// The steps of the four methods that need a model. Every step is one prompt of
/// its paper; a reply that does not follow the format is asked again (temperature
/// 0, then 0.7) and after three failures the step returns `StepError::Unparsable`.
///
/// A backend answers one method, [`MemoryModel::reply`]; the typed calls the
/// builders and navigators make are provided on top of it.
#[async_trait]
pub trait MemoryModel: Send + Sync + fmt::Debug {
    /// Backend name, as recorded in `llm_calls.backend`.
    fn backend(&self) -> &str;

    /// True when calls cost wall time (a remote pool): builders then speculate to
    /// keep the pool busy; a local backend is better served by doing no extra work.
    fn is_remote(&self) -> bool;

    /// The reply to `step`, of the kind the step asks for (a `Reply::Triage`
    /// for `Step::Triage`, and so on).
    async fn reply(&self, cx: &CallContext, step: Step) -> StepResult<Reply>;

    // MemWalker construction.
    async fn summarize_segment(&self, cx: &CallContext, segment: &str) -> StepResult<String> {
        let segment = segment.to_string();
        ask(self, cx, Step::SummarizeSegment { segment }).await
    }
    async fn compress_summaries(&self, cx: &CallContext, summaries: &[&str]) -> StepResult<String> {
        let summaries = owned(summaries);
        ask(self, cx, Step::CompressSummaries { summaries }).await
    }

    // MemWalker navigation.
    async fn triage(
        &self,
        cx: &CallContext,
        question: &str,
        summaries: &[&str],
    ) -> StepResult<Triage> {
        let (question, summaries) = (question.to_string(), owned(summaries));
        ask(
            self,
            cx,
            Step::Triage {
                question,
                summaries,
            },
        )
        .await
    }
    async fn read_leaf(
        &self,
        cx: &CallContext,
        question: &str,
        memory: &str,
        segment: &str,
    ) -> StepResult<Judgement> {
        let step = Step::ReadLeaf {
            question: question.to_string(),
            memory: memory.to_string(),
            segment: segment.to_string(),
        };
        ask(self, cx, step).await
    }

    // ReadAgent.
    /// Returns the chosen index into `units`.
    async fn choose_break(
        &self,
        cx: &CallContext,
        units: &[&str],
        candidates: &[usize],
        first_label: usize,
    ) -> StepResult<usize> {
        let step = Step::ChooseBreak {
            units: owned(units),
            candidates: candidates.to_vec(),
            first_label,
        };
        ask(self, cx, step).await
    }
    async fn gist_page(&self, cx: &CallContext, page: &str) -> StepResult<String> {
        let page = page.to_string();
        ask(self, cx, Step::GistPage { page }).await
    }
    async fn starts_new_section(
        &self,
        cx: &CallContext,
        previous: &str,
        current: &str,
    ) -> StepResult<Option<bool>> {
        let (previous, current) = (previous.to_string(), current.to_string());
        ask(self, cx, Step::StartsNewSection { previous, current }).await
    }
    async fn lookup_pages(
        &self,
        cx: &CallContext,
        question: &str,
        memory: &[PageView<'_>],
        max_pages: usize,
    ) -> StepResult<Vec<u32>> {
        let step = Step::LookupPages {
            question: question.to_string(),
            pages: page_texts(memory),
            max_pages,
        };
        ask(self, cx, step).await
    }
    async fn lookup_next_page(
        &self,
        cx: &CallContext,
        question: &str,
        memory: &[PageView<'_>],
        already_read: &[u32],
    ) -> StepResult<Option<u32>> {
        let step = Step::LookupNextPage {
            question: question.to_string(),
            pages: page_texts(memory),
            already_read: already_read.to_vec(),
        };
        ask(self, cx, step).await
    }

    // QRMeM.
    async fn extract_entities(
        &self,
        cx: &CallContext,
        background: &str,
        segment: &str,
    ) -> StepResult<Vec<String>> {
        let (background, segment) = (background.to_string(), segment.to_string());
        ask(
            self,
            cx,
            Step::ExtractEntities {
                background,
                segment,
            },
        )
        .await
    }
    async fn extract_relations(
        &self,
        cx: &CallContext,
        segment: &str,
        entities: &[&str],
    ) -> StepResult<Vec<Relation>> {
        let (segment, entities) = (segment.to_string(), owned(entities));
        ask(self, cx, Step::ExtractRelations { segment, entities }).await
    }
    async fn merge_relations(
        &self,
        cx: &CallContext,
        summary: &str,
        first: RelationEvidence<'_>,
        second: RelationEvidence<'_>,
    ) -> StepResult<String> {
        let step = Step::MergeRelations {
            summary: summary.to_string(),
            segments: [first.segment.to_string(), second.segment.to_string()],
            relations: [first.relation.to_string(), second.relation.to_string()],
        };
        ask(self, cx, step).await
    }
    async fn same_entity(
        &self,
        cx: &CallContext,
        name: &str,
        first: &str,
        others: &[&str],
    ) -> StepResult<Vec<bool>> {
        let step = Step::SameEntity {
            name: name.to_string(),
            first: first.to_string(),
            others: owned(others),
        };
        ask(self, cx, step).await
    }
    async fn judge_answerable(
        &self,
        cx: &CallContext,
        question: &str,
        context: &str,
    ) -> StepResult<Judgement> {
        let (question, context) = (question.to_string(), context.to_string());
        ask(self, cx, Step::JudgeAnswerable { question, context }).await
    }

    // ILM-TR.
    async fn summarize_with_facts(&self, cx: &CallContext, chunk: &str) -> StepResult<FactSummary> {
        let chunk = chunk.to_string();
        ask(self, cx, Step::SummarizeWithFacts { chunk }).await
    }
    async fn update_memory(
        &self,
        cx: &CallContext,
        question: &str,
        retrieved: &str,
        memory: &str,
    ) -> StepResult<String> {
        let step = Step::UpdateMemory {
            question: question.to_string(),
            retrieved: retrieved.to_string(),
            memory: memory.to_string(),
        };
        ask(self, cx, step).await
    }

    // All navigators.
    async fn answer(&self, cx: &CallContext, question: &str, context: &str) -> StepResult<String> {
        let (question, context) = (question.to_string(), context.to_string());
        ask(self, cx, Step::Answer { question, context }).await
    }
}

/// Runs `step` and takes its value out of the reply: what each typed call
/// above does, for any step (a new one needs no typed call to be used).
pub async fn ask<M: MemoryModel + ?Sized, T: FromReply>(
    model: &M,
    cx: &CallContext,
    step: Step,
) -> StepResult<T> {
    let task = step.task();
    let reply = model.reply(cx, step).await?;
    // Shown only when it is of another kind: a reply can be a whole summary.
    T::from_reply(reply).map_err(|other| StepError::WrongReply {
        task: task.name().to_string(),
        reply: format!("{other:?}"),
    })
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn page_texts(memory: &[PageView<'_>]) -> Vec<PageText> {
    memory
        .iter()
        .map(|p| PageText {
            number: p.number,
            text: p.text.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A backend that replies to every step with text, whatever it asks for.
    #[derive(Debug)]
    struct TextOnly;

    #[async_trait]
    impl MemoryModel for TextOnly {
        fn backend(&self) -> &str {
            "text-only"
        }
        fn is_remote(&self) -> bool {
            false
        }
        async fn reply(&self, _: &CallContext, step: Step) -> StepResult<Reply> {
            Ok(Reply::Text(step.task().name().to_string()))
        }
    }

    #[test]
    fn a_typed_call_takes_its_value_from_the_reply_and_refuses_another_kind() {
        let cx = CallContext::query("test");
        assert_eq!(
            futures::executor::block_on(TextOnly.gist_page(&cx, "A page.")),
            Ok("gist_page".to_string())
        );
        let refused =
            futures::executor::block_on(TextOnly.triage(&cx, "Who?", &["a", "b"])).unwrap_err();
        assert_eq!(refused.kind(), "llm_wrong_reply");
        assert_eq!(
            refused.to_string(),
            "triage: the backend replied Text(\"triage\"), not what the step asks for"
        );
    }

    #[test]
    fn all_in_order_runs_a_bounded_number_of_steps_at_once_and_keeps_their_order() {
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let steps = (0..STEPS_IN_FLIGHT * 3).map(|i| {
            let (running, most) = (&running, &most);
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Every step waits once, so all that were started are running.
                let mut waited = false;
                futures::future::poll_fn(|cx| {
                    if std::mem::replace(&mut waited, true) {
                        std::task::Poll::Ready(())
                    } else {
                        cx.waker().wake_by_ref();
                        std::task::Poll::Pending
                    }
                })
                .await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(i)
            }
        });
        let done = futures::executor::block_on(all_in_order(steps)).unwrap();
        assert_eq!(done, (0..STEPS_IN_FLIGHT * 3).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), STEPS_IN_FLIGHT);
    }
}
