//! What a client may ask of the memory: a question (the strategy that
//! navigates, its knobs and limits), a search, and the memory's own documents,
//! trees, nodes, pages and entities; with the rules a request must meet before
//! anything reads for it. The HTTP API, the MCP tools and `memweave ask` share
//! these types: the MCP tools' input schemas are generated from them.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

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

impl JsonSchema for Strategy {
    fn schema_name() -> Cow<'static, str> {
        "Strategy".into()
    }

    /// Shown where a request names it, so a reader sees the names there.
    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        json_schema!({
            "type": "string",
            "enum": names,
            "description": "How the memory is navigated: memwalker (summary tree from the root), readagent-p / readagent-s (gists, then pages looked up), qrmem-trial / qrmem-expand / qrmem (the entity graph; qrmem reflects), ilmtr and raptor (the collapsed cluster tree), bm25 and dense (baselines)"
        })
    }
}

impl TryFrom<String> for Strategy {
    type Error = RequestError;
    fn try_from(name: String) -> Result<Self, RequestError> {
        name.parse()
    }
}

impl std::str::FromStr for Strategy {
    type Err = RequestError;
    fn from_str(s: &str) -> Result<Self, RequestError> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.name() == s)
            .ok_or_else(|| RequestError::UnknownStrategy(s.to_string()))
    }
}

/// What a request gets wrong (a 400 over HTTP, exit code 2 from `memweave ask`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("unknown strategy {0:?}; expected one of {names}", names = Strategy::names())]
    UnknownStrategy(String),
    #[error("question is empty")]
    EmptyQuestion,
    #[error("question has {0} characters; the limit is {MAX_QUESTION_CHARS}")]
    QuestionTooLong(usize),
    #[error("unknown document {0:?}; GET /v1/documents lists them")]
    UnknownDocument(String),
    #[error("budget {0} is outside 1..={MAX_BUDGET} tokens")]
    Budget(usize),
    #[error("options.{name} {value} is outside 1..={limit}")]
    Option {
        name: &'static str,
        value: usize,
        limit: usize,
    },
    #[error("limit must be 1 to {most}, not {limit}")]
    Limit { limit: usize, most: usize },
    #[error("start {start} and end {end} must be in order and at most {most} characters apart")]
    Range { start: u64, end: u64, most: u64 },
}

/// The body of `POST /v1/ask`, and the MCP tool `ask`'s input.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskRequest {
    /// The question, in natural language.
    #[schemars(length(max = MAX_QUESTION_CHARS))]
    pub question: String,
    /// The navigation strategy (default memwalker).
    #[serde(default)]
    pub strategy: Strategy,
    /// Restrict the search to these documents (ids).
    #[serde(default)]
    pub documents: Option<Vec<String>>,
    /// Tokens of context the retrieval strategies gather (default 2,000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_BUDGET))]
    pub budget: Option<usize>,
    #[serde(default)]
    pub options: AskOptions,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// Per-strategy knobs; every one has the papers' default. The body's
/// `options`, the MCP tool's, and `memweave ask`'s flags (`--top-k`, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct AskOptions {
    /// Passages `bm25` and `dense` return (default 5).
    #[arg(long)]
    #[schemars(range(min = 1, max = MAX_OPTION))]
    pub top_k: Option<usize>,
    /// Pages ReadAgent may look up (default 3).
    #[arg(long)]
    #[schemars(range(min = 1, max = MAX_OPTION))]
    pub max_pages: Option<usize>,
    /// Rounds of ILM-TR's inner loop and QRMeM's reflection (default 5).
    #[arg(long)]
    #[schemars(range(min = 1, max = MAX_OPTION))]
    pub max_rounds: Option<usize>,
    /// Model tokens (prompts and replies) the request may spend before the
    /// navigation stops with no answer (default 100,000).
    #[arg(long)]
    #[schemars(range(min = 1, max = MAX_TOKEN_LIMIT), extend("default" = DEFAULT_MAX_TOKENS))]
    pub max_tokens: Option<usize>,
    /// Trace steps the navigation may take before it stops with no answer
    /// (default 200).
    #[arg(long)]
    #[schemars(range(min = 1, max = MAX_STEP_LIMIT), extend("default" = DEFAULT_MAX_STEPS))]
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

/// Largest request body, in bytes (HTTP and MCP alike).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest question accepted, in characters.
pub const MAX_QUESTION_CHARS: usize = 4_000;
/// Largest context budget a request may ask for, in tokens.
pub const MAX_BUDGET: usize = 32_000;
/// Largest `top_k`, `max_pages` and `max_rounds` a request may ask for.
pub const MAX_OPTION: usize = 50;
/// Most model tokens a request may allow itself.
pub const MAX_TOKEN_LIMIT: usize = 1_000_000;
/// Most trace steps a request may allow itself.
pub const MAX_STEP_LIMIT: usize = 1_000;

impl AskRequest {
    /// What a request must satisfy before a navigator sees it; `known_document`
    /// says whether the served memory holds a document id.
    pub fn validate(&self, known_document: impl Fn(&str) -> bool) -> Result<(), RequestError> {
        let request = self;
        let question = request.question.trim();
        if question.is_empty() {
            return Err(RequestError::EmptyQuestion);
        }
        let chars = question.chars().count();
        if chars > MAX_QUESTION_CHARS {
            return Err(RequestError::QuestionTooLong(chars));
        }
        if let Some(documents) = &request.documents
            && let Some(unknown) = documents.iter().find(|d| !known_document(d))
        {
            return Err(RequestError::UnknownDocument(unknown.clone()));
        }
        if let Some(budget) = request.budget
            && !(1..=MAX_BUDGET).contains(&budget)
        {
            return Err(RequestError::Budget(budget));
        }
        let options = &request.options;
        for (name, value, limit) in [
            ("top_k", options.top_k, MAX_OPTION),
            ("max_pages", options.max_pages, MAX_OPTION),
            ("max_rounds", options.max_rounds, MAX_OPTION),
            ("max_tokens", options.max_tokens, MAX_TOKEN_LIMIT),
            ("max_steps", options.max_steps, MAX_STEP_LIMIT),
        ] {
            if let Some(value) = value
                && !(1..=limit).contains(&value)
            {
                return Err(RequestError::Option { name, value, limit });
            }
        }
        Ok(())
    }
}

/// A list's `limit` (`default` when not given), or why it is not 1 to `most`.
fn limit_within(limit: Option<usize>, default: usize, most: usize) -> Result<usize, RequestError> {
    let limit = limit.unwrap_or(default);
    if (1..=most).contains(&limit) {
        Ok(limit)
    } else {
        Err(RequestError::Limit { limit, most })
    }
}

/// How `search` ranks passages: the two baselines, without asking the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMethod {
    /// BM25 over the segments' words.
    #[default]
    Bm25,
    /// Cosine between the query's vector and the segments'.
    Dense,
}

impl SearchMethod {
    /// The strategy whose ranking the search is.
    pub fn strategy(self) -> Strategy {
        match self {
            SearchMethod::Bm25 => Strategy::Bm25,
            SearchMethod::Dense => Strategy::Dense,
        }
    }
}

/// The body of `POST /v1/search`, and the MCP tool `search`'s input: the
/// passages a baseline ranks highest, with their scores; no model is asked.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// What to search for.
    pub query: String,
    /// bm25 (default) or dense.
    #[serde(default)]
    pub method: SearchMethod,
    /// Passages returned (default 5).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Restrict the search to these documents (ids).
    #[serde(default)]
    pub documents: Option<Vec<String>>,
    /// The checkpoint to read (default: the newest served).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

impl SearchRequest {
    /// The same ranking as a question to the baseline strategy, so the rules
    /// and the reads are the ask path's.
    pub fn as_ask(&self) -> AskRequest {
        AskRequest {
            question: self.query.clone(),
            strategy: self.method.strategy(),
            documents: self.documents.clone(),
            budget: None,
            options: AskOptions {
                top_k: self.top_k,
                ..AskOptions::default()
            },
            epoch: self.epoch,
        }
    }
}

/// Documents a page of the document list holds unless a request says, and at
/// most.
pub const DOCUMENTS_PAGE: usize = 1_000;
pub const MAX_DOCUMENTS_PAGE: usize = 10_000;

/// `GET /v1/documents`'s query, and the MCP tool `list_documents`' input.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsRequest {
    /// List the documents whose ids follow this one: the `next` of the page
    /// before.
    #[serde(default)]
    pub after: Option<String>,
    /// Documents on the page (default 1,000, at most 10,000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_DOCUMENTS_PAGE), extend("default" = DOCUMENTS_PAGE))]
    pub limit: Option<usize>,
    /// Only the documents whose id or title holds this text (any case).
    #[serde(default)]
    pub q: Option<String>,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

impl DocumentsRequest {
    /// The page's size, or what is wrong with the one asked for.
    pub fn page_size(&self) -> Result<usize, RequestError> {
        limit_within(self.limit, DOCUMENTS_PAGE, MAX_DOCUMENTS_PAGE)
    }
}

/// Which of a document's trees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TreeKind {
    /// MemWalker's summary tree.
    #[default]
    Memwalker,
    /// RAPTOR's cluster tree (ILM-TR's, with surprising facts).
    Raptor,
}

impl TreeKind {
    /// The `tree` column's value for it.
    pub fn name(self) -> &'static str {
        match self {
            TreeKind::Memwalker => memweave_schemas::TREE_MEMWALKER,
            TreeKind::Raptor => memweave_schemas::TREE_RAPTOR,
        }
    }
}

/// The MCP tool `document_tree`'s input (`GET /v1/documents/{doc_id}/tree`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TreeRequest {
    /// The document's id.
    pub doc_id: String,
    /// memwalker (default) or raptor.
    #[serde(default)]
    pub tree: TreeKind,
    /// Levels below the root to include (default all; 0: the root alone).
    #[serde(default)]
    pub depth: Option<u32>,
    /// Only the children of this node, in order (what expanding it shows).
    #[serde(default)]
    pub under: Option<String>,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// The MCP tool `node`'s input (`GET /v1/nodes/{node_id}`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeRequest {
    /// A tree node's id (from `document_tree` or an answer's trace).
    pub node_id: String,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// The MCP tool `page`'s input (`GET /v1/documents/{doc_id}/pages/{page}`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageRequest {
    /// The document's id.
    pub doc_id: String,
    /// The page's number in the document, from 0.
    pub page: u32,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// `GET /v1/documents/{doc_id}`: one document, without its text.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentRequest {
    /// The document's id.
    pub doc_id: String,
    /// The checkpoint to read (default: the newest served).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// `GET /v1/segments/{seg_id}`: one segment, as a passage.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SegmentRequest {
    /// A segment's id (a tree leaf's `seg_id`, a passage's `from_id`).
    pub seg_id: String,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// Characters of a document one text request may read at most.
pub const MAX_TEXT_CHARS: u64 = 100_000;

/// `GET /v1/documents/{doc_id}/text`: a stretch of a document's text, by
/// character (what a passage's `start_char` and `end_char` count).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextRequest {
    /// The document's id.
    pub doc_id: String,
    /// The first character (default 0).
    #[serde(default)]
    pub start: Option<u64>,
    /// The character after the last (default: 100,000 past `start`, or the
    /// document's end).
    #[serde(default)]
    pub end: Option<u64>,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

impl TextRequest {
    /// The characters asked for, or what is wrong with them.
    pub fn range(&self) -> Result<std::ops::Range<u64>, RequestError> {
        let start = self.start.unwrap_or(0);
        let end = self.end.unwrap_or(start.saturating_add(MAX_TEXT_CHARS));
        if end < start || end - start > MAX_TEXT_CHARS {
            return Err(RequestError::Range {
                start,
                end,
                most: MAX_TEXT_CHARS,
            });
        }
        Ok(start..end)
    }
}

/// `GET /v1/entities`: the graph's entities with a name or alias.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntitiesRequest {
    /// The name or alias, as the graph normalises names (case, spaces and
    /// punctuation do not matter).
    pub name: String,
    /// The checkpoint to read (default: the newest served).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// `GET /v1/documents/{doc_id}/pages`: a document's ReadAgent pages with
/// their gists (not their texts), a stretch at a time.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PagesRequest {
    /// The document's id.
    pub doc_id: String,
    /// The first page listed (default 0).
    #[serde(default)]
    pub from: Option<u32>,
    /// Pages listed (default 100, at most 1,000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_ENTITY_LIST), extend("default" = PAGES_LIST))]
    pub limit: Option<usize>,
    /// The checkpoint to read (default: the newest served).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// Pages a gist list holds unless a request says.
pub const PAGES_LIST: usize = 100;

impl PagesRequest {
    pub fn list_size(&self) -> Result<usize, RequestError> {
        limit_within(self.limit, PAGES_LIST, MAX_ENTITY_LIST)
    }
}

/// Checkpoints a page of the list holds unless a request says, and at most.
pub const CHECKPOINTS_PAGE: usize = 50;
pub const MAX_CHECKPOINTS_PAGE: usize = 1_000;

/// `GET /v1/checkpoints`: the commits under the tables root, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsRequest {
    /// List the checkpoints older than this epoch: the `next` of the page
    /// before.
    #[serde(default)]
    pub before: Option<u64>,
    /// Checkpoints on the page (default 50, at most 1,000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_CHECKPOINTS_PAGE), extend("default" = CHECKPOINTS_PAGE))]
    pub limit: Option<usize>,
}

impl CheckpointsRequest {
    pub fn page_size(&self) -> Result<usize, RequestError> {
        limit_within(self.limit, CHECKPOINTS_PAGE, MAX_CHECKPOINTS_PAGE)
    }
}

/// `GET /v1/overview`: the memory's report at a checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OverviewRequest {
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

/// Relations and segments an entity lists unless a request says, and at most.
pub const ENTITY_LIST: usize = 50;
pub const MAX_ENTITY_LIST: usize = 1_000;

/// The MCP tool `entity`'s input (`GET /v1/entities/{entity_id}`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityRequest {
    /// A graph entity's id (from an answer's trace or another entity's
    /// relations).
    pub entity_id: String,
    /// Relations and source segments listed, the first in id and source order
    /// (default 50, at most 1,000); the totals say how many there are.
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_ENTITY_LIST), extend("default" = ENTITY_LIST))]
    pub limit: Option<usize>,
    /// Relations and source segments to skip first: the next page of a hub's.
    #[serde(default)]
    pub offset: Option<usize>,
    /// The checkpoint to read (default: the newest served): an earlier
    /// epoch reads the memory as that commit left it, while its table
    /// versions are kept.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub epoch: Option<u64>,
}

impl EntityRequest {
    /// How many of each list, or what is wrong with the number asked for.
    pub fn list_size(&self) -> Result<usize, RequestError> {
        limit_within(self.limit, ENTITY_LIST, MAX_ENTITY_LIST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(question: &str) -> AskRequest {
        serde_json::from_value(serde_json::json!({ "question": question })).expect("parses")
    }

    #[test]
    fn a_request_names_what_is_wrong_with_it() {
        let known = |id: &str| id == "essay";
        let why = |request: &AskRequest| request.validate(known).map_err(|e| e.to_string());
        assert_eq!(why(&asking("Why?")), Ok(()));
        assert_eq!(why(&asking(" \n")), Err("question is empty".into()));
        let long = why(&asking(&"x".repeat(MAX_QUESTION_CHARS + 1)));
        assert!(long.unwrap_err().contains("the limit is 4000"));
        let mut request = asking("Why?");
        request.documents = Some(vec!["essay".into(), "missing".into()]);
        let unknown = why(&request).unwrap_err();
        assert!(unknown.contains("\"missing\""), "{unknown}");
        let mut request = asking("Why?");
        request.budget = Some(0);
        assert!(why(&request).unwrap_err().starts_with("budget 0"));
        let mut request = asking("Why?");
        request.options.max_pages = Some(MAX_OPTION + 1);
        assert_eq!(
            why(&request),
            Err(format!("options.max_pages 51 is outside 1..={MAX_OPTION}"))
        );
        request.options = AskOptions {
            max_steps: Some(MAX_STEP_LIMIT + 1),
            ..AskOptions::default()
        };
        assert!(why(&request).unwrap_err().contains("max_steps"));
    }

    #[test]
    fn strategies_parse_by_name_and_unknown_ones_list_the_choices() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>(), Ok(strategy));
        }
        let unknown = "graphrag".parse::<Strategy>().unwrap_err().to_string();
        assert!(unknown.contains("memwalker, readagent-p"), "{unknown}");
        let request: Result<AskRequest, _> =
            serde_json::from_value(serde_json::json!({ "question": "q", "strategy": "nope" }));
        assert!(
            request
                .unwrap_err()
                .to_string()
                .contains("unknown strategy")
        );
        let defaults = asking("q");
        assert_eq!(defaults.strategy, Strategy::Memwalker);
        let extra: Result<AskRequest, _> =
            serde_json::from_value(serde_json::json!({ "question": "q", "top_k": 3 }));
        assert!(extra.is_err(), "options belong under \"options\"");
    }
}
