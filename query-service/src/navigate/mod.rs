//! Navigators: walk a memory snapshot to answer a question, recording every step.
//!
//! Each strategy follows its paper; every decision a paper gives to the model
//! (which child, answer or revert, which pages, answerable or not, the next
//! short-term memory) is the model's, through `MemoryModel`. Every answer cites
//! the passages it rests on, with their documents and character ranges.

mod qrmem;
mod readagent;
mod retrieval;

use std::collections::HashSet;

use memweave_operators::embed::Embedder;
use memweave_operators::lexical::terms;
use memweave_operators::model::{CallContext, CallLedger, MemoryModel, ModelCall, StepError};
use memweave_operators::text::{CharOffsets, sentences};
use memweave_schemas::SegmentRow;
use serde::{Deserialize, Serialize};

use crate::snapshot::Snapshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case", try_from = "String")]
pub enum Strategy {
    /// MemWalker: walk the summary tree from the root, reverting from leaves that
    /// cannot answer.
    #[default]
    Memwalker,
    /// ReadAgent, parallel look-up: the model picks pages from the gists, they are
    /// expanded in place, then it answers.
    ReadagentP,
    /// ReadAgent, sequential look-up: one page at a time until STOP.
    ReadagentS,
    /// QRMeM Entity Trial: the segments of the question's entities.
    QrmemTrial,
    /// QRMeM Graph Expansion Search: the entities and their neighbours.
    QrmemExpand,
    /// QRMeM's reflection loop (Algorithm 1).
    Qrmem,
    /// ILM-TR: collapsed-tree retrieval with the short-term-memory inner loop.
    Ilmtr,
    /// RAPTOR: collapsed tree, the most similar nodes within the budget.
    Raptor,
    /// Baseline: the top segments by BM25.
    Bm25,
    /// Baseline: the top segments by embedding similarity.
    Dense,
}

impl Strategy {
    pub const ALL: [Strategy; 10] = [
        Strategy::Memwalker,
        Strategy::ReadagentP,
        Strategy::ReadagentS,
        Strategy::QrmemTrial,
        Strategy::QrmemExpand,
        Strategy::Qrmem,
        Strategy::Ilmtr,
        Strategy::Raptor,
        Strategy::Bm25,
        Strategy::Dense,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Memwalker => "memwalker",
            Strategy::ReadagentP => "readagent-p",
            Strategy::ReadagentS => "readagent-s",
            Strategy::QrmemTrial => "qrmem-trial",
            Strategy::QrmemExpand => "qrmem-expand",
            Strategy::Qrmem => "qrmem",
            Strategy::Ilmtr => "ilmtr",
            Strategy::Raptor => "raptor",
            Strategy::Bm25 => "bm25",
            Strategy::Dense => "dense",
        }
    }

    /// Every strategy name, comma separated, for messages.
    pub fn names() -> String {
        Strategy::ALL.map(Strategy::name).join(", ")
    }
}

impl TryFrom<String> for Strategy {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        name.parse()
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown strategy {s:?}; expected one of {}",
                    Strategy::names()
                )
            })
    }
}

/// The body of `POST /v1/ask`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskRequest {
    pub question: String,
    #[serde(default)]
    pub strategy: Strategy,
    /// Restrict the search to these documents (ids).
    #[serde(default)]
    pub documents: Option<Vec<String>>,
    /// Tokens of context the retrieval strategies gather (default 2,000).
    #[serde(default)]
    pub budget: Option<usize>,
    #[serde(default)]
    pub options: AskOptions,
}

/// Per-strategy knobs; every one has the papers' default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskOptions {
    /// Passages `bm25` and `dense` return (default 5).
    pub top_k: Option<usize>,
    /// Pages ReadAgent may look up (default 3).
    pub max_pages: Option<usize>,
    /// Rounds of ILM-TR's inner loop and QRMeM's reflection (default 5).
    pub max_rounds: Option<usize>,
    /// Model tokens (prompts and replies) the request may spend before the
    /// navigation stops with no answer (default 100,000).
    pub max_tokens: Option<usize>,
    /// Trace steps the navigation may take before it stops with no answer
    /// (default 200).
    pub max_steps: Option<usize>,
}

/// Steps a request may take when it names no limit: far more than any default
/// navigation takes (MemWalker's 3 documents and 8 leaf reads, 5 rounds).
pub const DEFAULT_MAX_STEPS: usize = 200;

/// Model tokens a request may spend when it names no limit: several times what
/// the longest default navigation (QRMeM's five rounds over a 2,000-token
/// window) needs.
pub const DEFAULT_MAX_TOKENS: usize = 100_000;

/// Context tokens when a request names no budget (RAPTOR's collapsed tree: 2,000).
pub const DEFAULT_BUDGET: usize = 2000;

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
    /// The model calls that led to this step, in order.
    pub calls: Vec<ModelCall>,
}

/// Leaves MemWalker may read before it answers with the best passage seen.
const MAX_LEAF_READS: usize = 8;
/// Documents MemWalker may walk, best match first, before it gives up on a corpus.
const MAX_DOCUMENTS: usize = 3;
/// MemWalker's working memory: the summaries on the path, the nearest the leaf
/// kept when they are longer than this (characters, about 1000 tokens).
const WORKING_MEMORY_CHARS: usize = 4000;

/// What a navigator may ask: the model, and the embedder that made the tables'
/// vectors (questions are embedded by the same one).
#[derive(Debug, Clone, Copy)]
pub struct Models<'a> {
    pub model: &'a dyn MemoryModel,
    pub embedder: &'a dyn Embedder,
}

pub async fn ask(snapshot: &Snapshot, request: &AskRequest, models: Models<'_>) -> Answer {
    let mut nav = Navigation::new(snapshot, request, models);
    let walked = match request.strategy {
        Strategy::Memwalker => nav.memwalker().await,
        Strategy::ReadagentP => nav.readagent_parallel().await,
        Strategy::ReadagentS => nav.readagent_sequential().await,
        Strategy::QrmemTrial => nav.qrmem_trial().await,
        Strategy::QrmemExpand => nav.qrmem_expand().await,
        Strategy::Qrmem => nav.qrmem().await,
        Strategy::Ilmtr => nav.ilmtr().await,
        Strategy::Raptor => nav.raptor().await,
        Strategy::Bm25 => nav.bm25().await,
        Strategy::Dense => nav.dense().await,
    };
    if let Err(failure) = walked {
        nav.give_up(&failure);
    }
    nav.finish()
}

struct Navigation<'a> {
    snapshot: &'a Snapshot,
    request: &'a AskRequest,
    model: &'a dyn MemoryModel,
    embedder: &'a dyn Embedder,
    cx: CallContext,
    ledger: CallLedger,
    query: Vec<String>,
    distinct_terms: HashSet<String>,
    trace: Vec<Step>,
    /// The depth the next recorded step has.
    depth: u32,
    best: Option<Candidate>,
    /// Passages a retrieval strategy gathered; when empty, `best` is cited.
    supporting: Vec<Passage>,
    /// The question's vector once asked for (`Some(None)`: the tables' vectors
    /// are another embedder's); QRMeM needs it every round.
    question_embedding: Option<Option<Vec<f32>>>,
    /// The model's own answer, when a leaf answered.
    model_answer: Option<String>,
    answered: bool,
    /// A step the model could not take: MemWalker's rule is then "no answer".
    failed: bool,
}

/// A passage with how well it covers the question.
#[derive(Debug, Clone)]
struct Candidate {
    passage: Passage,
    coverage: f64,
    score: f64,
}

impl<'a> Navigation<'a> {
    fn new(snapshot: &'a Snapshot, request: &'a AskRequest, models: Models<'a>) -> Self {
        let query = terms(&request.question);
        let distinct_terms = query.iter().cloned().collect();
        let token_limit = request.options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        let step_limit = request.options.max_steps.unwrap_or(DEFAULT_MAX_STEPS);
        let ledger = CallLedger::with_limits(token_limit as u64, step_limit as u64);
        Navigation {
            snapshot,
            request,
            model: models.model,
            embedder: models.embedder,
            cx: CallContext::query(request.strategy.name()).noted_in(ledger.clone()),
            ledger,
            query,
            distinct_terms,
            trace: Vec::new(),
            depth: 0,
            best: None,
            supporting: Vec::new(),
            question_embedding: None,
            model_answer: None,
            answered: false,
            failed: false,
        }
    }

    /// A step failed (three unparsable replies, the pool down, a replay miss): the
    /// navigation ends with no answer, and the trace says which step and why.
    fn give_up(&mut self, failure: &StepError) {
        self.failed = true;
        self.depth = 0;
        self.record(
            "no_answer",
            failure.kind(),
            None,
            0.0,
            format!("the model could not take a step: {failure}"),
        );
    }

    fn record(
        &mut self,
        action: &str,
        target: &str,
        level: Option<u32>,
        score: f64,
        reasoning: String,
    ) {
        self.ledger.note_step();
        self.trace.push(Step {
            step: self.trace.len() + 1,
            action: action.to_string(),
            target: target.to_string(),
            level,
            score,
            reasoning,
            depth: self.depth,
            calls: self.ledger.take(),
        });
    }

    fn allowed(&self, doc_id: &str) -> bool {
        self.request
            .documents
            .as_ref()
            .is_none_or(|docs| docs.iter().any(|d| d == doc_id))
    }

    /// Documents ranked by the best score any of their tree nodes reaches.
    fn rank_documents_by_tree(&self) -> Vec<(String, f64, usize)> {
        let mut best: std::collections::HashMap<&str, (f64, usize)> = Default::default();
        for (i, score) in self.snapshot.node_bm25.rank(&self.query) {
            let Some(doc_id) = self.snapshot.nodes[i].doc_id.as_deref() else {
                continue;
            };
            if self.allowed(doc_id) {
                best.entry(doc_id).or_insert((score, i));
            }
        }
        let mut ranked: Vec<(String, f64, usize)> = best
            .into_iter()
            .map(|(d, (s, i))| (d.to_string(), s, i))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }

    /// MemWalker over a corpus: walk the best-matching document's tree; when the walk
    /// finds no leaf that answers, go back up to the corpus and try the next document.
    async fn memwalker(&mut self) -> Result<(), StepError> {
        let ranked: Vec<(String, f64, usize)> = self
            .rank_documents_by_tree()
            .into_iter()
            .filter(|d| d.1 > 0.0)
            .take(MAX_DOCUMENTS)
            .collect();
        if ranked.is_empty() {
            self.record(
                "no_answer",
                "",
                None,
                0.0,
                "no document's memory mentions the question's terms".into(),
            );
            return Ok(());
        }
        let mut leaf_reads = 0;
        for (rank, (doc_id, score, node)) in ranked.iter().enumerate() {
            let Some(root) = self.snapshot.root_of(doc_id) else {
                continue;
            };
            let title = self.snapshot.title_of(doc_id);
            self.depth = 0;
            let why = if rank == 0 {
                "matches the question best".to_string()
            } else {
                format!("is the next best match ({} of {})", rank + 1, ranked.len())
            };
            self.record(
                "choose_document",
                doc_id,
                None,
                *score,
                format!(
                    "\"{title}\": its node {} {why}",
                    self.snapshot.nodes[*node].node_id
                ),
            );
            if self.walk(root, &mut leaf_reads).await? {
                self.answered = true;
                return Ok(());
            }
            if leaf_reads >= MAX_LEAF_READS {
                self.answer_with_best("read the leaf budget; answering with the best passage seen");
                return Ok(());
            }
        }
        self.answer_with_best(
            "every branch was read or reverted from; answering with the best passage seen",
        );
        Ok(())
    }

    /// Walks one tree from its root; true when a leaf answered.
    async fn walk(&mut self, root: usize, leaf_reads: &mut usize) -> Result<bool, StepError> {
        let mut visited: HashSet<usize> = HashSet::new();
        let mut path = vec![root];
        self.depth = 1;
        self.record_descend(root, "start at the root".into());
        while let Some(&current) = path.last() {
            visited.insert(current);
            self.depth = path.len() as u32;
            if self.snapshot.nodes[current].child_ids.is_empty() {
                *leaf_reads += 1;
                if self.read_leaf(current, &path).await? {
                    return Ok(true);
                }
                if *leaf_reads >= MAX_LEAF_READS {
                    return Ok(false);
                }
                self.revert(
                    &mut path,
                    "the leaf cannot answer; back to its parent (action -1)",
                );
                continue;
            }
            match self.triage(current, &visited).await? {
                Some((child, reasoning)) => {
                    path.push(child);
                    self.depth = path.len() as u32;
                    self.record_descend(child, reasoning);
                }
                None => self.revert(&mut path, "every child has been read"),
            }
        }
        Ok(false)
    }

    /// MemWalker's revert: leave the current node for its parent.
    fn revert(&mut self, path: &mut Vec<usize>, reasoning: &str) {
        path.pop();
        self.depth = path.len() as u32;
        if let Some(&parent) = path.last() {
            let node = &self.snapshot.nodes[parent];
            let (id, level) = (node.node_id.clone(), node.level);
            self.record("revert", &id, Some(level), 0.0, reasoning.to_string());
        }
    }

    fn record_descend(&mut self, node: usize, reasoning: String) {
        let n = &self.snapshot.nodes[node];
        let (id, level) = (n.node_id.clone(), n.level);
        self.record("descend", &id, Some(level), 0.0, reasoning);
    }

    /// MemWalker's triage prompt over the summaries of the children not read yet
    /// (after a revert the model chooses among the others); `None` when every
    /// child has been read.
    async fn triage(
        &self,
        node: usize,
        visited: &HashSet<usize>,
    ) -> Result<Option<(usize, String)>, StepError> {
        let children: Vec<usize> = self.snapshot.nodes[node]
            .child_ids
            .iter()
            .filter_map(|id| self.snapshot.node_position(id))
            .filter(|c| !visited.contains(c))
            .collect();
        if children.is_empty() {
            return Ok(None);
        }
        let summaries: Vec<&str> = children
            .iter()
            .map(|&c| self.snapshot.nodes[c].summary.as_str())
            .collect();
        let triage = self
            .model
            .triage(&self.cx, &self.request.question, &summaries)
            .await?;
        Ok(Some((
            children[triage.choice],
            format!(
                "summary {} of {}: {}",
                triage.choice,
                children.len(),
                triage.reasoning
            ),
        )))
    }

    /// The summaries on the path to a leaf, root first, as MemWalker's working
    /// memory; the nearest the leaf are kept when they do not all fit.
    fn working_memory(&self, path: &[usize]) -> String {
        let mut kept: Vec<&str> = Vec::new();
        let mut length = 0;
        for &node in path[..path.len().saturating_sub(1)].iter().rev() {
            let summary = self.snapshot.nodes[node].summary.as_str();
            if length + summary.len() > WORKING_MEMORY_CHARS {
                break;
            }
            length += summary.len();
            kept.push(summary);
        }
        kept.reverse();
        kept.join("\n\n")
    }

    /// MemWalker's leaf prompt: the model answers from the segment and the working
    /// memory (action -2) or reverts (-1). The best matching window of the
    /// segment is kept as the passage an answer cites.
    async fn read_leaf(&mut self, leaf: usize, path: &[usize]) -> Result<bool, StepError> {
        let node = &self.snapshot.nodes[leaf];
        let (node_id, level) = (node.node_id.clone(), node.level);
        let Some(segment) = node
            .seg_id
            .as_deref()
            .and_then(|s| self.snapshot.segment(s))
        else {
            self.record(
                "read_leaf",
                &node_id,
                Some(level),
                0.0,
                "the leaf's segment is missing".into(),
            );
            return Ok(false);
        };
        let memory = self.working_memory(path);
        let judgement = self
            .model
            .read_leaf(&self.cx, &self.request.question, &memory, &segment.text)
            .await?;
        let candidate = self.best_window(
            &segment.doc_id,
            &segment.seg_id,
            &segment.text,
            segment.start_char,
        );
        let score = candidate.as_ref().map_or(0.0, |c| c.score);
        let answers = judgement.answer.is_some();
        self.record(
            "read_leaf",
            &segment.seg_id,
            Some(level),
            score,
            format!(
                "{} ({})",
                judgement.reasoning,
                if answers {
                    "answer, action -2"
                } else {
                    "revert, action -1"
                }
            ),
        );
        if answers {
            // The passage this answer cites is this segment's, whatever was seen before.
            self.best = candidate.filter(|c| c.coverage > 0.0);
            self.model_answer = judgement.answer;
            self.depth = 0;
            self.record(
                "answer",
                &segment.seg_id,
                Some(level),
                score,
                "answer from this segment".into(),
            );
        } else {
            self.offer(candidate);
        }
        Ok(answers)
    }

    fn answer_with_best(&mut self, reasoning: &str) {
        self.depth = 0;
        if let Some(best) = self.best.clone().filter(|b| b.coverage > 0.0) {
            self.answered = true;
            self.record(
                "answer",
                &best.passage.from_id,
                None,
                best.score,
                reasoning.to_string(),
            );
        } else {
            self.record(
                "no_answer",
                "",
                None,
                0.0,
                "nothing read covers the question".into(),
            );
        }
    }

    fn offer(&mut self, candidate: Option<Candidate>) {
        let Some(candidate) = candidate else { return };
        let better = self
            .best
            .as_ref()
            .is_none_or(|b| (candidate.coverage, candidate.score) > (b.coverage, b.score));
        if better {
            self.best = Some(candidate);
        }
    }

    /// The window of up to three sentences of `text` that best matches the question.
    fn best_window(
        &self,
        doc_id: &str,
        from_id: &str,
        text: &str,
        start_char: u64,
    ) -> Option<Candidate> {
        let spans = sentences(text);
        if spans.is_empty() || self.distinct_terms.is_empty() {
            return None;
        }
        // Every window of three sentences; the one covering most of the question's
        // terms wins, BM25 (with the corpus statistics) breaking ties.
        let (start, end, coverage, score) = (0..spans.len())
            .map(|center| {
                let start = spans[center.saturating_sub(1)].start;
                let end = spans[(center + 1).min(spans.len() - 1)].end;
                let window = &text[start..end];
                let window_terms: HashSet<String> = terms(window).into_iter().collect();
                let coverage = self.coverage(&window_terms);
                let score = self.snapshot.node_bm25.score_text(&self.query, window);
                (start, end, coverage, score)
            })
            .max_by(|a, b| {
                (a.2, a.3)
                    .partial_cmp(&(b.2, b.3))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(b.0.cmp(&a.0))
            })?;
        let window = &text[start..end];
        let mut chars = CharOffsets::new(text);
        let document = self.snapshot.document(doc_id);
        Some(Candidate {
            coverage,
            score,
            passage: Passage {
                doc_id: doc_id.to_string(),
                title: document.map_or_else(String::new, |d| d.title.clone()),
                source_uri: document.map_or_else(String::new, |d| d.source_uri.clone()),
                from_id: from_id.to_string(),
                start_char: start_char + chars.at(start),
                end_char: start_char + chars.at(end),
                text: window.split_whitespace().collect::<Vec<_>>().join(" "),
            },
        })
    }

    /// Share of the question's terms a passage holds, each term weighted by its
    /// rarity across the memory, so "paint" counts for more than "author".
    fn coverage(&self, passage_terms: &HashSet<String>) -> f64 {
        let bm25 = &self.snapshot.node_bm25;
        let total: f64 = self.distinct_terms.iter().map(|t| bm25.idf(t)).sum();
        let covered: f64 = self
            .distinct_terms
            .iter()
            .filter(|t| passage_terms.contains(*t))
            .map(|t| bm25.idf(t))
            .sum();
        if total > 0.0 { covered / total } else { 0.0 }
    }

    fn finish(mut self) -> Answer {
        let unattributed = self.ledger.take();
        if let Some(last) = self.trace.last_mut() {
            last.calls.extend(unattributed);
        }
        let mut usage = Usage::default();
        for call in self.trace.iter().flat_map(|step| &step.calls) {
            usage.model_calls += 1;
            usage.tokens_in += u64::from(call.tokens_in);
            usage.tokens_out += u64::from(call.tokens_out);
            usage.model_ms += u64::from(call.latency_ms);
        }
        let supporting: Vec<Passage> = if self.failed {
            Vec::new()
        } else if self.supporting.is_empty() {
            self.best
                .iter()
                .filter(|b| b.coverage > 0.0)
                .map(|b| b.passage.clone())
                .collect()
        } else {
            self.supporting
        };
        let answered = self.answered && !supporting.is_empty();
        Answer {
            question: self.request.question.clone(),
            strategy: self.request.strategy,
            epoch: self.snapshot.epoch,
            answered,
            answer: if answered {
                self.model_answer
                    .unwrap_or_else(|| supporting[0].text.clone())
            } else {
                "no answer".to_string()
            },
            supporting,
            trace: self.trace,
            usage,
        }
    }

    /// A whole segment as a cited passage.
    fn segment_passage(&self, segment: &SegmentRow) -> Passage {
        self.passage(
            &segment.doc_id,
            &segment.seg_id,
            &segment.text,
            segment.start_char,
            segment.end_char,
        )
    }

    fn passage(
        &self,
        doc_id: &str,
        from_id: &str,
        text: &str,
        start_char: u64,
        end_char: u64,
    ) -> Passage {
        let document = self.snapshot.document(doc_id);
        Passage {
            doc_id: doc_id.to_string(),
            title: document.map_or_else(String::new, |d| d.title.clone()),
            source_uri: document.map_or_else(String::new, |d| d.source_uri.clone()),
            from_id: from_id.to_string(),
            start_char,
            end_char,
            text: text.to_string(),
        }
    }

    fn budget(&self) -> usize {
        self.request.budget.unwrap_or(DEFAULT_BUDGET)
    }

    fn max_rounds(&self) -> usize {
        self.request.options.max_rounds.unwrap_or(5).max(1)
    }

    /// The model's answer from the gathered passages; they become the citation.
    async fn answer_from(&mut self, passages: Vec<Passage>, why: &str) -> Result<(), StepError> {
        let context = context_of(&passages);
        self.answer_with_context(context, passages, why).await
    }

    /// The model's answer from `context`, citing `passages`.
    async fn answer_with_context(
        &mut self,
        context: String,
        passages: Vec<Passage>,
        why: &str,
    ) -> Result<(), StepError> {
        self.depth = 0;
        if passages.is_empty() {
            self.record("no_answer", "", None, 0.0, "nothing was gathered".into());
            return Ok(());
        }
        let answer = self
            .model
            .answer(&self.cx, &self.request.question, &context)
            .await?;
        self.record(
            "answer",
            &passages[0].from_id,
            None,
            0.0,
            format!("{why}; answer: {answer}"),
        );
        self.model_answer = Some(answer);
        self.supporting = passages;
        self.answered = true;
        Ok(())
    }

    /// The question's vector, by the embedder that made the tables' vectors;
    /// embedded once per question.
    async fn question_vector(&mut self) -> Result<Option<Vec<f32>>, StepError> {
        if let Some(known) = &self.question_embedding {
            return Ok(known.clone());
        }
        let vector = if self.embedder_mismatch() {
            None
        } else {
            self.embedder
                .embed(&self.cx, &[self.request.question.as_str()])
                .await?
                .pop()
        };
        self.question_embedding = Some(vector.clone());
        Ok(vector)
    }

    /// True (with a trace step) when the tables' vectors are another embedder's.
    fn embedder_mismatch(&mut self) -> bool {
        let ours = self.embedder.model();
        match self.snapshot.embedding_model.as_deref() {
            Some(theirs) if theirs != ours => {
                self.record(
                    "no_answer",
                    "embedder",
                    None,
                    0.0,
                    format!("the tables' vectors are {theirs}'s, the question's would be {ours}'s: ask with the embedder the index used"),
                );
                true
            }
            _ => false,
        }
    }
}

/// Passages as the model reads them, one paragraph each.
fn context_of(passages: &[Passage]) -> String {
    passages
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}
