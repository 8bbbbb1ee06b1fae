//! Navigators: walk a memory snapshot to answer a question, recording every step.
//!
//! Each strategy follows its paper; every decision a paper gives to the model
//! (which child, answer or revert, which pages, answerable or not, the next
//! short-term memory) is the model's, through `MemoryModel`. Every answer cites
//! the passages it rests on, with their documents and character ranges.

#[cfg(test)]
pub(crate) mod fixture;
mod memwalker;
mod qrmem;
mod readagent;
mod retrieval;

use std::collections::HashSet;
use std::sync::Arc;

use memweave_operators::embed::{Embedder, HashingEmbedder};
use memweave_operators::lexical::terms;
use memweave_operators::model::{CallContext, CallLedger, MemoryModel, ModelCall, StepError};
use memweave_schemas::{Section, SegmentRow, StoreError};
use serde::{Deserialize, Serialize};

use self::memwalker::MemWalker;
use self::qrmem::{Qrmem, QrmemSearch};
use self::readagent::{LookUp, ReadAgent};
use self::retrieval::{Baseline, CollapsedTree, Ranking, TreeSearch};
pub use self::retrieval::{Hit, search};
use crate::request::{AskRequest, DEFAULT_BUDGET, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, Strategy};
use crate::snapshot::{Allowed, Document, Snapshot};

/// Ranked rows (segments, collapsed-tree nodes) whose texts are read
/// together: enough to share reads, few enough that little is read past the
/// budget.
const ROWS_READ_TOGETHER: usize = 16;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub question: String,
    pub strategy: Strategy,
    /// The checkpoint epoch the answer was read from.
    pub epoch: u64,
    pub answered: bool,
    pub answer: String,
    /// The passages the answer rests on.
    pub supporting: Vec<Passage>,
    pub trace: Vec<Step>,
    /// What the model calls of every step cost together.
    pub usage: Usage,
}

/// The model calls of one answer, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub model_calls: usize,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// Time spent waiting on the model, summed over calls.
    pub model_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    pub doc_id: String,
    pub title: String,
    pub source_uri: String,
    /// The segment or page the passage was read from.
    pub from_id: String,
    pub start_char: u64,
    pub end_char: u64,
    pub text: String,
    /// The part of its document the passage starts in, as the source names
    /// it: a PDF's page, the heading path above it, the mail message or the
    /// dataset row (none for a plain-text document).
    pub section: Option<Section>,
}

impl Passage {
    /// A passage of `doc_id` (`document`, when the checkpoint has it, gives the
    /// title and source) read from `from_id`, spanning `chars`.
    fn of(
        document: Option<&Document>,
        doc_id: &str,
        from_id: &str,
        text: &str,
        chars: std::ops::Range<u64>,
    ) -> Passage {
        Passage {
            doc_id: doc_id.to_string(),
            title: document.map_or_else(String::new, |d| d.title.clone()),
            source_uri: document.map_or_else(String::new, |d| d.source_uri.clone()),
            from_id: from_id.to_string(),
            section: document
                .and_then(|d| Section::at(&d.sections, chars.start))
                .cloned(),
            start_char: chars.start,
            end_char: chars.end,
            text: text.to_string(),
        }
    }

    /// A segment, whose text is `text`, as a passage (`document`, when the
    /// checkpoint has it, gives the title and source).
    fn of_segment(document: Option<&Document>, segment: &SegmentRow, text: &str) -> Passage {
        Passage::of(
            document,
            &segment.doc_id,
            &segment.seg_id,
            text,
            segment.start_char..segment.end_char,
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step: usize,
    /// "choose_document", "descend", "revert", "read_leaf", "lookup", "answer", "no_answer".
    pub action: String,
    /// The node, page, segment or document the step is about.
    pub target: String,
    pub level: Option<u32>,
    pub score: f64,
    pub reasoning: String,
    /// How deep in the navigation the step is: 0 for the top-level decisions;
    /// MemWalker's steps are as deep as their node's path from the root, the
    /// look-ups and rounds' retrievals one deeper than what they serve.
    pub depth: u32,
    /// What chose the step, for a step that chooses (a document, a child,
    /// a page, an entity, a passage, whether to go on); none for one that
    /// only records where the navigation is.
    #[serde(default)]
    pub signal: Option<Signal>,
    /// The model calls that led to this step, in order.
    pub calls: Vec<ModelCall>,
}

/// What chose a step: the model's reply, the question's words (BM25 over
/// texts, a name matched), or vectors (cosine to the question's embedding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Signal {
    Model,
    Text,
    Vectors,
}

impl Signal {
    /// Its name, as the JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Model => "model",
            Signal::Text => "text",
            Signal::Vectors => "vectors",
        }
    }
}

/// What a navigator may ask: the model, and the embedder that made the tables'
/// vectors (questions are embedded by the same one).
#[derive(Debug, Clone, Copy)]
pub struct Models<'a> {
    pub model: &'a dyn MemoryModel,
    pub embedder: &'a dyn Embedder,
}

/// Why a navigation stopped short: a step the model could not take (the answer
/// then says so), or the memory could not be read (there is no answer).
#[derive(Debug)]
enum Failure {
    Step(StepError),
    Store(StoreError),
}

impl From<StepError> for Failure {
    fn from(failure: StepError) -> Self {
        Failure::Step(failure)
    }
}

impl From<StoreError> for Failure {
    fn from(failure: StoreError) -> Self {
        Failure::Store(failure)
    }
}

impl From<Failure> for SearchError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Step(step) => SearchError::Embed(step),
            Failure::Store(store) => SearchError::Store(store),
        }
    }
}

/// Why a search found nothing to return.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the query could not be embedded: {0}")]
    Embed(StepError),
    /// The tables' vectors are another embedder's: what to pass instead.
    #[error("{0}")]
    OtherEmbedder(String),
}

/// What navigating returns: `Failure::Step` ends the answer with a step that
/// says why, `Failure::Store` fails the request.
type Walked<T = ()> = Result<T, Failure>;

/// Answers `request` from `snapshot`; an error only when the memory tables
/// could not be read.
pub async fn ask(
    snapshot: &Snapshot,
    request: &AskRequest,
    models: Models<'_>,
) -> Result<Answer, StoreError> {
    let mut nav = Navigation::new(snapshot, request, models);
    let walked = {
        let nav = &mut nav;
        match request.strategy {
            Strategy::Memwalker => MemWalker::over(nav).navigate().await,
            Strategy::ReadagentP => ReadAgent::over(nav, LookUp::Parallel).navigate().await,
            Strategy::ReadagentS => ReadAgent::over(nav, LookUp::Sequential).navigate().await,
            Strategy::QrmemTrial => Qrmem::over(nav, QrmemSearch::Trial).navigate().await,
            Strategy::QrmemExpand => Qrmem::over(nav, QrmemSearch::Expand).navigate().await,
            Strategy::Qrmem => Qrmem::over(nav, QrmemSearch::Reflect).navigate().await,
            Strategy::Ilmtr => CollapsedTree::over(nav, TreeSearch::Ilmtr).navigate().await,
            Strategy::Raptor => {
                CollapsedTree::over(nav, TreeSearch::Raptor)
                    .navigate()
                    .await
            }
            Strategy::Bm25 => Baseline::over(nav, Ranking::Bm25).navigate().await,
            Strategy::Dense => Baseline::over(nav, Ranking::Dense).navigate().await,
        }
    };
    match walked {
        Ok(()) => {}
        Err(Failure::Step(failure)) => nav.give_up(&failure),
        Err(Failure::Store(failure)) => return Err(failure),
    }
    Ok(nav.finish())
}

/// One strategy's navigation: its own state over the shared [`Navigation`]
/// (which it derefs to), walked once.
trait Navigator {
    async fn navigate(&mut self) -> Walked;
}

/// A navigator's own state over the shared context (`$nav` derefs to it),
/// made with `over`.
macro_rules! navigator_over_context {
    ($nav:ident) => {
        impl<'a> std::ops::Deref for $nav<'_, 'a> {
            type Target = super::Navigation<'a>;
            fn deref(&self) -> &Self::Target {
                self.nav
            }
        }

        impl std::ops::DerefMut for $nav<'_, '_> {
            fn deref_mut(&mut self) -> &mut Self::Target {
                self.nav
            }
        }
    };
}
use navigator_over_context;

/// What every navigator records into: the trace, the depth and signal of
/// the next step, and the model calls made since the last one.
struct Recorder {
    ledger: CallLedger,
    trace: Vec<Step>,
    /// The depth the next recorded step has.
    depth: u32,
    /// What chose the next recorded step ([`Navigation::by`]); taken by it.
    signal: Option<Signal>,
}

/// What a navigation ends with.
#[derive(Default)]
struct Outcome {
    /// The passages the answer cites.
    supporting: Vec<Passage>,
    /// The model's own answer (from a leaf, or from the gathered context).
    model_answer: Option<String>,
    answered: bool,
    /// A step the model could not take: then nothing is cited.
    failed: bool,
}

/// The context every navigator shares: the snapshot, the request and its
/// question, the models, the recorder and the outcome.
struct Navigation<'a> {
    snapshot: &'a Snapshot,
    request: &'a AskRequest,
    model: &'a dyn MemoryModel,
    embedder: &'a dyn Embedder,
    /// The hashing embedder at the tables' width, when both the tables and
    /// the given embedder are hashing ones (at the same width it is the given
    /// one again): it has no weights, so the tables' model name says how to
    /// embed as the index did ([`Navigation::embedder`]).
    hashing_at_tables_width: Option<HashingEmbedder>,
    cx: CallContext,
    /// The question's terms, and each once.
    query: Vec<String>,
    distinct_terms: HashSet<String>,
    /// The question's vector once asked for (`Some(None)`: the tables' vectors
    /// are another embedder's); QRMeM needs it every round.
    question_embedding: Option<Option<Vec<f32>>>,
    recorder: Recorder,
    outcome: Outcome,
}

impl<'a> Navigation<'a> {
    fn new(snapshot: &'a Snapshot, request: &'a AskRequest, models: Models<'a>) -> Self {
        let query = terms(&request.question);
        let distinct_terms = query.iter().cloned().collect();
        let token_limit = request.options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        let step_limit = request.options.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
        let ledger = CallLedger::with_limits(token_limit as u64, step_limit as u64);
        let hashing_at_tables_width = HashingEmbedder::for_model(models.embedder.model())
            .and(snapshot.embedding_model.as_deref())
            .and_then(HashingEmbedder::for_model);
        Navigation {
            snapshot,
            request,
            model: models.model,
            embedder: models.embedder,
            hashing_at_tables_width,
            cx: CallContext::query(request.strategy.name()).noted_in(ledger.clone()),
            query,
            distinct_terms,
            question_embedding: None,
            recorder: Recorder {
                ledger,
                trace: Vec::new(),
                depth: 0,
                signal: None,
            },
            outcome: Outcome::default(),
        }
    }

    /// A step failed (three unparsable replies, the pool down, a replay miss): the
    /// navigation ends with no answer, and the trace says which step and why.
    fn give_up(&mut self, failure: &StepError) {
        self.outcome.failed = true;
        self.recorder.depth = 0;
        self.record(
            "no_answer",
            failure.kind(),
            None,
            0.0,
            format!("the model could not take a step: {failure}"),
        );
    }

    /// Says what chose the step recorded next: `self.by(Signal::Text).record(…)`.
    fn by(&mut self, signal: Signal) -> &mut Self {
        self.recorder.signal = Some(signal);
        self
    }

    fn record(
        &mut self,
        action: &str,
        target: &str,
        level: Option<u32>,
        score: f64,
        reasoning: String,
    ) {
        let recorder = &mut self.recorder;
        recorder.ledger.note_step();
        recorder.trace.push(Step {
            step: recorder.trace.len() + 1,
            action: action.to_string(),
            target: target.to_string(),
            level,
            score,
            reasoning,
            depth: recorder.depth,
            signal: recorder.signal.take(),
            calls: recorder.ledger.take(),
        });
    }

    /// The documents the request may read.
    fn documents(&self) -> Allowed<'a> {
        Allowed(self.request.documents.as_deref())
    }

    fn allowed(&self, doc_id: &str) -> bool {
        self.documents().admits(doc_id)
    }

    fn finish(self) -> Answer {
        let Recorder {
            ledger, mut trace, ..
        } = self.recorder;
        if let Some(last) = trace.last_mut() {
            last.calls.extend(ledger.take());
        }
        let mut usage = Usage::default();
        for call in trace.iter().flat_map(|step| &step.calls) {
            usage.model_calls += 1;
            usage.tokens_in += u64::from(call.tokens_in);
            usage.tokens_out += u64::from(call.tokens_out);
            usage.model_ms += u64::from(call.latency_ms);
        }
        let outcome = self.outcome;
        let supporting = if outcome.failed {
            Vec::new()
        } else {
            outcome.supporting
        };
        let answered = outcome.answered && !supporting.is_empty();
        Answer {
            question: self.request.question.clone(),
            strategy: self.request.strategy,
            epoch: self.snapshot.epoch,
            answered,
            answer: if answered {
                outcome
                    .model_answer
                    .unwrap_or_else(|| supporting[0].text.clone())
            } else {
                "no answer".to_string()
            },
            supporting,
            trace,
            usage,
        }
    }

    /// The title of a document, empty when it is unknown.
    async fn title_of(&self, doc_id: &str) -> Walked<String> {
        Ok(self
            .snapshot
            .row::<Document>(doc_id)
            .await?
            .map_or_else(String::new, |d| d.title.clone()))
    }

    async fn passage(
        &self,
        doc_id: &str,
        from_id: &str,
        text: &str,
        start_char: u64,
        end_char: u64,
    ) -> Walked<Passage> {
        let document = self.snapshot.row::<Document>(doc_id).await?;
        Ok(Passage::of(
            document.as_deref(),
            doc_id,
            from_id,
            text,
            start_char..end_char,
        ))
    }

    fn budget(&self) -> usize {
        self.request.budget.unwrap_or(DEFAULT_BUDGET)
    }

    fn max_rounds(&self) -> usize {
        self.request.options.max_rounds.unwrap_or(5).max(1)
    }

    /// The model's answer from the gathered passages; they become the citation.
    async fn answer_from(&mut self, passages: Vec<Passage>, why: &str) -> Walked {
        let context = context_of(&passages);
        self.answer_with_context(context, passages, why).await
    }

    /// The model's answer from `context`, citing `passages`.
    async fn answer_with_context(
        &mut self,
        context: String,
        passages: Vec<Passage>,
        why: &str,
    ) -> Walked {
        self.recorder.depth = 0;
        if passages.is_empty() {
            self.record("no_answer", "", None, 0.0, "nothing was gathered".into());
            return Ok(());
        }
        let answer = self
            .model
            .answer(&self.cx, &self.request.question, &context)
            .await?;
        self.by(Signal::Model).record(
            "answer",
            &passages[0].from_id,
            None,
            0.0,
            format!("{why}; answer: {answer}"),
        );
        self.outcome.model_answer = Some(answer);
        self.outcome.supporting = passages;
        self.outcome.answered = true;
        Ok(())
    }

    /// The question's vector, by the embedder that made the tables' vectors;
    /// embedded once per question.
    async fn question_vector(&mut self) -> Walked<Option<Vec<f32>>> {
        if let Some(known) = &self.question_embedding {
            return Ok(known.clone());
        }
        let vector = if self.embedder_mismatch() {
            None
        } else {
            self.embedder()
                .embed(&self.cx, &[self.request.question.as_str()])
                .await?
                .pop()
        };
        self.question_embedding = Some(vector.clone());
        Ok(vector)
    }

    /// What embeds questions: the one given, or the hashing embedder at the
    /// tables' width when both are hashing embedders (tables built with
    /// another `--hashing-dim` stay searchable without repeating it).
    fn embedder(&self) -> &dyn Embedder {
        match &self.hashing_at_tables_width {
            Some(hashing) => hashing,
            None => self.embedder,
        }
    }

    /// What is wrong when the tables' vectors are another embedder's than
    /// the one questions would be embedded by.
    fn other_embedder(&self) -> Option<String> {
        let ours = self.embedder().model();
        let theirs = self.snapshot.embedding_model.as_deref()?;
        (theirs != ours).then(|| {
            format!(
                "the tables' vectors are {theirs}'s, the question's would be {ours}'s: ask with the embedder the index used"
            )
        })
    }

    /// True (with a trace step) when the tables' vectors are another embedder's.
    fn embedder_mismatch(&mut self) -> bool {
        let Some(wrong) = self.other_embedder() else {
            return false;
        };
        self.record("no_answer", "embedder", None, 0.0, wrong);
        true
    }
}

/// Whole segments as cited passages, in their order: their documents in
/// one read.
pub(crate) async fn segment_passages(
    snapshot: &Snapshot,
    segments: &[Arc<SegmentRow>],
) -> Result<Vec<Passage>, StoreError> {
    let doc_ids: Vec<String> = segments.iter().map(|s| s.doc_id.clone()).collect();
    let documents = snapshot.rows_by_id::<Document>(&doc_ids).await?;
    let texts = snapshot.segment_texts(segments).await?;
    Ok((segments.iter().zip(texts))
        .map(|(s, text)| Passage::of_segment(documents.get(&s.doc_id).map(Arc::as_ref), s, &text))
        .collect())
}

/// Passages as the model reads them, one paragraph each.
fn context_of(passages: &[Passage]) -> String {
    passages
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::fixture::{answer, memory, memory_with_cache, memory_with_hub, request};
    use super::*;

    /// What an answer says and how it got there, without timings.
    fn said(answer: &Answer) -> Answer {
        let mut said = answer.clone();
        said.usage.model_ms = 0;
        for step in &mut said.trace {
            for call in &mut step.calls {
                call.latency_ms = 0;
            }
        }
        said
    }

    /// The read caches change where rows come from, never an answer: every
    /// strategy answers alike reading every row from the tables, and asked
    /// twice through the caches (the second time from cached rows).
    #[tokio::test]
    async fn cached_rows_give_the_answers_the_tables_give() {
        let uncached = memory_with_cache(0).await;
        let cached = memory().await;
        for question in [
            "What did painting teach the author?",
            "Why should startups grow fast?",
        ] {
            for strategy in Strategy::ALL {
                let asked = request(question, strategy);
                let read = said(&answer(&uncached, &asked).await);
                assert!(!read.trace.is_empty(), "{strategy:?} left no trace");
                let first = said(&answer(&cached, &asked).await);
                assert_eq!(first, read, "{strategy:?}, first asking of {question:?}");
                let before = cached.cache_stats();
                let again = said(&answer(&cached, &asked).await);
                assert_eq!(again, read, "{strategy:?}, second asking of {question:?}");
                let after = cached.cache_stats();
                assert_eq!(
                    after.misses, before.misses,
                    "{strategy:?} read the tables again for {question:?}"
                );
            }
        }
        assert!(cached.cache_stats().hits > 0);
        assert_eq!(uncached.cache_stats().hits, 0);
    }

    /// Documents are listed a page at a time in id order, each page starting
    /// after the last id of the one before, until a page says none follows.
    #[tokio::test]
    async fn documents_are_listed_a_page_at_a_time() {
        let memory = memory_with_hub().await;
        let first = memory.documents_page(None, 2, None).await.unwrap();
        let ids = |page: &crate::snapshot::DocumentPage| -> Vec<String> {
            page.documents.iter().map(|d| d.doc_id.clone()).collect()
        };
        assert_eq!(ids(&first), ["hub", "paint"]);
        assert_eq!(first.next.as_deref(), Some("paint"));
        assert_eq!(first.total, 3);
        let second = memory
            .documents_page(first.next.as_deref(), 2, None)
            .await
            .unwrap();
        assert_eq!(ids(&second), ["startup"]);
        assert_eq!((second.next, second.total), (None, 3));
        let whole = memory.documents_page(None, 3, None).await.unwrap();
        assert_eq!(ids(&whole), ["hub", "paint", "startup"]);
        assert_eq!(whole.next, None, "a full last page says none follows");
        assert_eq!(whole.documents[1].title, "PAINT");
        // `after` need not be an id: the page starts at the next one.
        let from_o = memory.documents_page(Some("o"), 1, None).await.unwrap();
        assert_eq!(ids(&from_o), ["paint"]);
    }

    /// A search of the list keeps the documents whose id or title holds the
    /// text in any case, pages them the same way, and counts only them.
    #[tokio::test]
    async fn documents_are_found_by_id_or_title_in_any_case() {
        let memory = memory_with_hub().await;
        let ids = |page: &crate::snapshot::DocumentPage| -> Vec<String> {
            page.documents.iter().map(|d| d.doc_id.clone()).collect()
        };
        // "paint" by its title, "startup" by its id; "hub" holds neither.
        let found = memory.documents_page(None, 1, Some("T")).await.unwrap();
        assert_eq!((ids(&found), found.total), (vec!["paint".into()], 2));
        let next = memory
            .documents_page(found.next.as_deref(), 1, Some("T"))
            .await
            .unwrap();
        assert_eq!((ids(&next), next.next), (vec!["startup".into()], None));
        let quoted = memory.documents_page(None, 5, Some("o'")).await.unwrap();
        assert_eq!(quoted.total, 0, "a quote is searched for, not SQL");
        let all = memory.documents_page(None, 5, Some("")).await.unwrap();
        assert_eq!(all.total, 3, "an empty search lists every document");
    }
}
