//! A model call as data: the step of the four methods with everything its
//! prompt is made of ([`Step`]), and the reply read back in the step's type
//! ([`Reply`]). Backends answer a `Step` (`MemoryModel::reply`); rendering a
//! step into its paper's prompt is the model layer's (`memweave-llm`).

use std::fmt;

use super::{FactSummary, Judgement, Relation, Triage};

/// `Task`, `Step` and their names from one list: a step is declared once, by
/// its variant, its `llm_calls.task` name (also its template's file name) and
/// its inputs. How it is rendered, parsed and answered offline is its entry in
/// `memweave-llm`'s `steps.rs`.
macro_rules! steps {
    ($($(#[$doc:meta])* $variant:ident = $name:literal { $($field:ident: $type:ty),* $(,)? },)*) => {
        /// The steps of the four methods, one prompt template each.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Task {
            $($(#[$doc])* $variant,)*
        }

        impl Task {
            pub const ALL: [Task; [$(Task::$variant),*].len()] = [$(Task::$variant),*];

            /// The task's name: `llm_calls.task` and the template's file name (`NAME.txt`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Task::$variant => $name,)*
                }
            }
        }

        /// A call: the task and everything its prompt is made of.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Step {
            $($(#[$doc])* $variant { $($field: $type),* },)*
        }

        impl Step {
            pub fn task(&self) -> Task {
                match self {
                    $(Step::$variant { .. } => Task::$variant,)*
                }
            }
        }
    };
}

steps!(
    /// MemWalker: a leaf summary of one segment.
    SummarizeSegment = "summarize_segment" { segment: String },
    /// MemWalker: a parent summary when its children's summaries, concatenated,
    /// are too long.
    CompressSummaries = "compress_summaries" { summaries: Vec<String> },
    /// MemWalker: which child summary most likely leads to the answer.
    Triage = "triage" {
        question: String,
        summaries: Vec<String>,
    },
    /// MemWalker at a leaf: answer from the segment (with the working memory
    /// of the path), or revert.
    ReadLeaf = "read_leaf" {
        question: String,
        memory: String,
        segment: String,
    },
    /// ReadAgent's pagination: `units` are consecutive paragraphs numbered from
    /// `first_label`; a page may end after any unit in `candidates` (indices
    /// into `units`).
    ChooseBreak = "choose_break" {
        units: Vec<String>,
        candidates: Vec<usize>,
        first_label: usize,
    },
    /// ReadAgent: a gist, the page shortened.
    GistPage = "gist_page" { page: String },
    /// ReadAgent's page merging (appendix I): does `current` start a new
    /// chapter or section after `previous`?
    StartsNewSection = "starts_new_section" { previous: String, current: String },
    /// ReadAgent-P: the pages (1 to `max_pages`) to read again before answering.
    LookupPages = "lookup_pages" {
        question: String,
        pages: Vec<PageText>,
        max_pages: usize,
    },
    /// ReadAgent-S: the next single page to read again, or STOP.
    LookupNextPage = "lookup_next_page" {
        question: String,
        pages: Vec<PageText>,
        already_read: Vec<u32>,
    },
    /// QRMeM: key entities of a segment, with the document's summary as background.
    ExtractEntities = "extract_entities" { background: String, segment: String },
    /// QRMeM: open relations between the given entities of a segment.
    ExtractRelations = "extract_relations" {
        segment: String,
        entities: Vec<String>,
    },
    /// QRMeM: one description for a relation seen in two segments.
    MergeRelations = "merge_relations" {
        summary: String,
        segments: [String; 2],
        relations: [String; 2],
    },
    /// Entity disambiguation: which of `others` (passages from other
    /// documents, each mentioning `name`) refer to the same entity as `first`.
    SameEntity = "same_entity" {
        name: String,
        first: String,
        others: Vec<String>,
    },
    /// QRMeM's reflection: can the question be answered from `context`; if
    /// not, why not.
    JudgeAnswerable = "judge_answerable" { question: String, context: String },
    /// ILM-TR: a chunk's summary plus its surprising facts.
    SummarizeWithFacts = "summarize_with_facts" { chunk: String },
    /// ILM-TR's inner loop: the next short-term memory from retrieved text and
    /// the last memory.
    UpdateMemory = "update_memory" {
        question: String,
        retrieved: String,
        memory: String,
    },
    /// All navigators: the final, short answer from the gathered context.
    Answer = "answer" { question: String, context: String },
);

impl Step {
    /// What a build step's result is when no reply to it could be read after
    /// its retries, and how an `errors` row says so: deterministic, and
    /// never more than the step's own input says. `None` for the steps of a
    /// question, whose navigators end the walk instead.
    pub fn fallback(&self) -> Option<(Reply, &'static str)> {
        Some(match self {
            Step::SummarizeSegment { segment } => {
                (Reply::Text(segment.clone()), "the segment's own text")
            }
            Step::CompressSummaries { summaries } => (
                Reply::Text(summaries.join("\n")),
                "its children's summaries, joined",
            ),
            Step::ChooseBreak { candidates, .. } => (
                Reply::Break(*candidates.last()?),
                "the last offered page break",
            ),
            Step::GistPage { page } => (Reply::Text(page.clone()), "the page's own text"),
            Step::StartsNewSection { .. } => (
                Reply::SectionStart(None),
                "not sure, so the pages are not merged",
            ),
            Step::ExtractEntities { .. } => {
                (Reply::Entities(Vec::new()), "no entities for the segment")
            }
            Step::ExtractRelations { .. } => {
                (Reply::Relations(Vec::new()), "no relations for the segment")
            }
            Step::MergeRelations { relations, .. } => (
                Reply::Text(relations[0].clone()),
                "the first relation's description",
            ),
            Step::SameEntity { others, .. } => (
                Reply::SameEntity(vec![false; others.len()]),
                "every passage kept apart",
            ),
            Step::SummarizeWithFacts { chunk } => (
                Reply::FactSummary(FactSummary {
                    summary: chunk.clone(),
                    surprise: String::new(),
                }),
                "the chunk's own text, with no surprising facts",
            ),
            Step::Triage { .. }
            | Step::ReadLeaf { .. }
            | Step::LookupPages { .. }
            | Step::LookupNextPage { .. }
            | Step::JudgeAnswerable { .. }
            | Step::UpdateMemory { .. }
            | Step::Answer { .. } => return None,
        })
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A ReadAgent page as a look-up step shows it: its number and either its
/// gist or, once looked up, its full text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageText {
    pub number: u32,
    pub text: String,
}

/// The value a typed call takes out of its step's [`Reply`].
pub trait FromReply: Sized {
    /// The reply itself when it is of another kind.
    fn from_reply(reply: Reply) -> Result<Self, Reply>;
}

/// `Reply` and the [`FromReply`] of each type it holds: every step replies
/// with a type of its own, so the type names the variant.
macro_rules! replies {
    ($($(#[$doc:meta])* $variant:ident($type:ty),)*) => {
        /// A step's reply, read into the step's type.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Reply {
            $($(#[$doc])* $variant($type),)*
        }

        $(impl FromReply for $type {
            fn from_reply(reply: Reply) -> Result<Self, Reply> {
                match reply {
                    Reply::$variant(value) => Ok(value),
                    other => Err(other),
                }
            }
        })*
    };
}

replies!(
    /// Summaries, gists, merged relations, short-term memory, answers.
    Text(String),
    Triage(Triage),
    /// A leaf read or a reflection.
    Judgement(Judgement),
    /// The chosen page break, an index into the step's units.
    Break(usize),
    /// Whether a page starts a new section; `None` when the model is not sure.
    SectionStart(Option<bool>),
    Pages(Vec<u32>),
    /// The next page to read, or `None` for STOP.
    NextPage(Option<u32>),
    Entities(Vec<String>),
    Relations(Vec<Relation>),
    /// One answer per passage, in order.
    SameEntity(Vec<bool>),
    FactSummary(FactSummary),
);
