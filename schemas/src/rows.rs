//! One row type per table. Field names and order match [`crate::Table::fields`].

use serde::{Deserialize, Serialize};

use crate::Table;

/// A row of one memory table.
pub trait TableRow: Serialize + for<'de> Deserialize<'de> + Clone + Send + Sync + 'static {
    const TABLE: Table;

    /// The value of the table's key column; rows are written sorted by it, which makes
    /// a table's bytes independent of how many workers produced it.
    fn key(&self) -> String;
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocumentRow {
    pub doc_id: String,
    pub source_uri: String,
    pub content_hash: String,
    pub version: u64,
    pub title: String,
    pub n_chars: u64,
    pub n_tokens: u64,
    /// Microseconds since the Unix epoch, UTC.
    pub ingested_at: i64,
    pub deleted: bool,
    /// The text the memories were built from: a later run rebuilds an unchanged
    /// document from it without reading its source (or a Kafka message long gone).
    pub text: String,
    /// Where each part of the text came from in its source, in text order:
    /// what a citation names beside its character range.
    pub sections: Vec<Section>,
    /// Its access labels ([`crate::acl`]): the groups that may read it.
    /// Null in a memory built before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

/// Serde for an `acl` column: null in a memory built before labels, read
/// as none. Written as an option too, so that formats that keep no field
/// names (bincode: the spill, the exchange between processes) read back
/// what they wrote.
mod nullable_labels {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(acl: &[String], serializer: S) -> Result<S::Ok, S::Error> {
        Some(acl).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<String>, D::Error> {
        Ok(Option::<Vec<String>>::deserialize(deserializer)?.unwrap_or_default())
    }
}

/// A part of a document's text as its source names it: from `start_char` up
/// to the next section's start (or the end of the text).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Section {
    /// Character (Unicode scalar value) offset into the document's text.
    pub start_char: u64,
    /// What names it: `page` (a PDF's page number), `heading` (the path of
    /// headings above it, outermost first, joined by " › "), `message` (a
    /// mail's Message-ID) or `row` (a dataset row's id).
    pub kind: String,
    pub label: String,
}

impl Section {
    /// The section `char` falls in: the last that starts at or before it.
    pub fn at(sections: &[Section], char: u64) -> Option<&Section> {
        let after = sections.partition_point(|s| s.start_char <= char);
        after.checked_sub(1).map(|i| &sections[i])
    }

    /// How a citation names it: "page 12", "section Guide › Setup",
    /// "message <id@host>", "row 42".
    pub fn cited(&self) -> String {
        let kind = if self.kind == "heading" {
            "section"
        } else {
            &self.kind
        };
        format!("{kind} {}", self.label)
    }
}

/// A segment of a document: the characters `start_char..end_char` of its
/// text (kept once, in `documents`: a document's segments of one size tile
/// it, and it is cut two or three ways), and the terms it is searched by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SegmentRow {
    pub seg_id: String,
    pub doc_id: String,
    pub ordinal: u32,
    /// Character (Unicode scalar value) offsets into the document's text, end exclusive.
    pub start_char: u64,
    pub end_char: u64,
    pub n_tokens: u32,
    /// The segmentation's target size: a document is segmented once per size its
    /// memories ask for (MemWalker segments, RAPTOR chunks), once when they agree.
    pub target_tokens: u32,
    /// The text's [`crate::text::searched_terms`]: what its full-text
    /// index and the lexicon count, kept with the row so that a row read
    /// back (to retract it) counts out what it counted in.
    pub terms: String,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

/// A segment and its text, cut out of its document's: what the stages that
/// read segments (summaries, extraction, retrieval) work on. It dereferences
/// to its row, which is what the table keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub row: SegmentRow,
    pub text: String,
}

impl Segment {
    /// The segment of `text` described by `row` (whose `terms` it fills).
    pub fn new(mut row: SegmentRow, text: String) -> Self {
        row.terms = crate::text::searched_terms([text.as_str()]);
        Segment { row, text }
    }
}

impl SegmentRow {
    /// The segment's text, out of its document's `text`.
    pub fn text_in(&self, text: &str) -> String {
        chars_of(text, self.start_char, self.end_char)
    }

    /// A segment of document "d" as the lexicon counts one: its id, cut
    /// and terms alone.
    #[cfg(test)]
    pub(crate) fn counted(seg_id: &str, target_tokens: u32, terms: String) -> Self {
        SegmentRow {
            seg_id: seg_id.into(),
            doc_id: "d".into(),
            ordinal: 0,
            start_char: 0,
            end_char: 0,
            n_tokens: 0,
            target_tokens,
            terms,
            acl: Vec::new(),
        }
    }
}

impl std::ops::Deref for Segment {
    type Target = SegmentRow;

    fn deref(&self) -> &SegmentRow {
        &self.row
    }
}

/// Name of the MemWalker summary tree in `tree_nodes.tree`.
pub const TREE_MEMWALKER: &str = "memwalker";
/// The optional MemWalker tree over a whole corpus: its leaves stand for the
/// documents' roots (each leaf's only child), its parents summarise them.
pub const TREE_MEMWALKER_CORPUS: &str = "memwalker-corpus";
/// Name of the RAPTOR / ILM-TR cluster tree in `tree_nodes.tree`.
pub const TREE_RAPTOR: &str = "raptor";
/// The optional RAPTOR tree over a whole corpus: its leaves stand for the
/// documents' RAPTOR roots (each leaf's only child), clustered level by level.
pub const TREE_RAPTOR_CORPUS: &str = "raptor-corpus";

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TreeNodeRow {
    pub node_id: String,
    pub tree: String,
    /// Null for nodes of a corpus-level tree.
    pub doc_id: Option<String>,
    /// 0 for leaves.
    pub level: u32,
    /// Position among the nodes of the same tree and level, left to right.
    pub ordinal: u32,
    /// Null at a root.
    pub parent_id: Option<String>,
    pub child_ids: Vec<String>,
    /// The segment a leaf summarises; null above the leaves.
    pub seg_id: Option<String>,
    /// `None` for a leaf that is its segment's own text (a segment shorter
    /// than the summary the tree would ask for: every leaf of a short
    /// document), whose text is kept once, in `documents`; a reader fills it
    /// in from the segment ([`TreeNodeRow::text`]). On an archive of short
    /// documents a copy here was a second and third copy of the archive.
    pub summary: Option<String>,
    /// ILM-TR's "surprising facts"; null where the tree keeps none.
    pub surprise: Option<String>,
    pub n_tokens: u32,
    /// The summary's terms (the search column, [`crate::search`]), which
    /// the lexicon counts. A leaf that is its segment's own text carries
    /// its segment's while it is built, and the table keeps none for it
    /// (its segment's row has them: [`TreeNodeRow::fill_own_text_terms`]).
    /// Empty in a document's state, whose roots only the corpus trees read.
    #[serde(default)]
    pub terms: String,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

impl TreeNodeRow {
    /// The node's text: its summary, or, for a leaf that is its segment's
    /// own text, that text once a reader has filled it in (empty before).
    pub fn text(&self) -> &str {
        self.summary.as_deref().unwrap_or_default()
    }

    /// `self` with its summary's terms (where it is made: a leaf keeps
    /// them when it forgets its text, as its segment's row has them).
    pub fn with_terms(mut self) -> Self {
        self.terms = crate::text::searched_terms([self.text()]);
        self
    }

    /// The node as the corpus trees take a document's root: its text
    /// without its terms (their leaves count their own). A root in a
    /// document's state and the same root built again must be equal, or a
    /// restored process's corpus trees would keep both.
    pub fn as_corpus_root(&self) -> Self {
        TreeNodeRow {
            terms: String::new(),
            ..self.clone()
        }
    }

    /// Whether the node is a leaf that is its segment's own text (it keeps
    /// no summary: [`TreeNodeRow::forget_own_text`]).
    pub fn is_own_text(&self) -> bool {
        self.seg_id.is_some() && self.summary.is_none()
    }

    /// Gives each own-text leaf of `nodes` read back from the table the
    /// terms it was counted with, its segment's (the table keeps them once,
    /// on the segment): so that a row read back counts out what it counted
    /// in. A leaf whose segment is not among `segments` keeps none.
    pub fn fill_own_text_terms(nodes: &mut [TreeNodeRow], segments: &[SegmentRow]) {
        let terms: std::collections::HashMap<&str, &str> = (segments.iter())
            .map(|s| (s.seg_id.as_str(), s.terms.as_str()))
            .collect();
        for node in nodes.iter_mut().filter(|n| n.is_own_text()) {
            if let Some(found) = node.seg_id.as_deref().and_then(|s| terms.get(s)) {
                node.terms = found.to_string();
            }
        }
    }

    /// Forgets the summary of a leaf whose summary is `segment_text`, its
    /// segment's own text (its terms stay): the table keeps that text once.
    pub fn forget_own_text(&mut self, segment_text: &str) {
        if self.seg_id.is_some() && self.summary.as_deref() == Some(segment_text) {
            self.summary = None;
        }
    }
}

/// One of ReadAgent's pages: the characters `start_char..end_char` of its
/// document's text (a document's pages tile it, so the text is kept once,
/// in `documents`: [`PageRow::text_in`]), and its gist.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PageRow {
    pub page_id: String,
    pub doc_id: String,
    pub ordinal: u32,
    pub start_char: u64,
    pub end_char: u64,
    /// `None` where the page is its own gist (one shorter than the shortest
    /// page ReadAgent cuts: a short document, or a document's tail), whose
    /// text is kept once, in `documents`: [`PageRow::gist_in`]. On an archive
    /// of short documents a copy here was a second copy of the archive.
    pub gist: Option<String>,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

impl PageRow {
    /// The page's text, out of its document's `text`.
    pub fn text_in(&self, text: &str) -> String {
        chars_of(text, self.start_char, self.end_char)
    }

    /// The page's gist: the model's, or the page's text (out of its
    /// document's `text`) where it is its own.
    pub fn gist_in(&self, text: &str) -> String {
        match &self.gist {
            Some(gist) => gist.clone(),
            None => self.text_in(text),
        }
    }
}

/// The characters `start..end` of `text`.
fn chars_of(text: &str, start: u64, end: u64) -> String {
    let length = end.saturating_sub(start) as usize;
    text.chars().skip(start as usize).take(length).collect()
}

/// What one document gives the stages that see many documents at once
/// (entity resolution, relation merging, the corpus trees), kept so that a new
/// process restores their state from the tables instead of rebuilding every
/// document. Rows come and go with their document's version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocStateRow {
    pub doc_id: String,
    /// What built it (the build's sizes and memories, the model's kind, the
    /// embedder, hashed): a memory continued with another is rebuilt.
    pub build: String,
    /// The pipeline's own encoding (JSON) of what the document gave those stages.
    pub state: String,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

/// ReadAgent's gist memory of one document as it is searched: the terms of
/// its pages' gists, by which ReadAgent's document choice finds it. The
/// gists themselves are the pages' ([`PageRow::gist_in`]), read in page
/// order where the method reads the memory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GistMemoryRow {
    pub doc_id: String,
    /// The gists' [`crate::text::searched_terms`]: what the full-text index
    /// and the lexicon count (as a segment's `terms`).
    pub terms: String,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

impl GistMemoryRow {
    /// The gist memory of the document `doc_id` whose pages' gists are `gists`
    /// (terms never span two texts, so each gist's are its own).
    pub fn new(doc_id: &str, gists: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        GistMemoryRow {
            doc_id: doc_id.to_string(),
            terms: crate::text::searched_terms(gists),
            acl: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityRow {
    pub entity_id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub entity_type: String,
    pub description: String,
    pub aliases: Vec<String>,
    pub seg_ids: Vec<String>,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

impl EntityRow {
    /// What an entity's vector is embedded from, and its searched terms
    /// ([`crate::search`]) are of.
    pub fn embedded_text(&self) -> String {
        entity_text(&self.name, &self.description)
    }
}

/// [`EntityRow::embedded_text`] of an entity of `name` and `description`.
pub fn entity_text(name: &str, description: &str) -> String {
    format!("{name}: {description}")
}

/// How a normalised name's entities were resolved, past what their rows
/// tell: for each of its entities (in the order of their first mentions),
/// how many of the name's other mentions still unplaced were put to the
/// model against that entity's first mention. A changed name is resolved
/// again from it, comparing only what changed. A name whose resolution
/// met an error has none.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NameStateRow {
    pub name: String,
    pub asked: Vec<u32>,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RelationRow {
    pub relation_id: String,
    pub source_id: String,
    pub target_id: String,
    pub description: String,
    pub seg_ids: Vec<String>,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

/// Rows equal, order and hash by their vectors' bits (an `f32` does none of
/// the three), so that the dataflow can carry them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmbeddingRow {
    pub owner_id: String,
    pub model: String,
    /// What the owner is: "segment", "node", "page", "entity".
    pub owner_kind: String,
    pub vector: Vec<f32>,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

impl EmbeddingRow {
    /// The row of `owner_id`'s `vector`, its components rounded to the half
    /// floats the table stores them as: so the row a build carries is the
    /// row a restart reads back, and two builds write the same bits.
    pub fn new(owner_id: &str, owner_kind: &str, model: &str, vector: Vec<f32>) -> Self {
        EmbeddingRow {
            owner_id: owner_id.to_string(),
            model: model.to_string(),
            owner_kind: owner_kind.to_string(),
            vector: stored_components(vector),
            acl: Vec::new(),
        }
    }

    fn names(&self) -> (&str, &str, &str, &[String]) {
        (&self.owner_id, &self.model, &self.owner_kind, &self.acl)
    }

    fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        self.vector.iter().map(|v| v.to_bits())
    }
}

/// `vector`'s components rounded to the half floats the embeddings table
/// holds: a vector recomputed instead of read is the one that was stored.
pub fn stored_components(vector: Vec<f32>) -> Vec<f32> {
    vector
        .into_iter()
        .map(|v| half::f16::from_f32(v).to_f32())
        .collect()
}

impl PartialEq for EmbeddingRow {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for EmbeddingRow {}

impl PartialOrd for EmbeddingRow {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EmbeddingRow {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.names()
            .cmp(&other.names())
            .then_with(|| self.bits().cmp(other.bits()))
    }
}

impl std::hash::Hash for EmbeddingRow {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.names().hash(state);
        for b in self.bits() {
            b.hash(state);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LlmCallRow {
    pub call_key: String,
    pub backend: String,
    pub model: String,
    pub task: String,
    pub stage: String,
    pub doc_id: Option<String>,
    /// The prompt as sent (system message, then the user message), kept
    /// only with `--keep-prompts`: `call_key` is its hash, which is all the
    /// cache looks up by, and the prompts repeat the text the other tables
    /// hold (they were six sevenths of its text). Null otherwise.
    pub inputs: Option<String>,
    pub reply: String,
    pub tokens_in: u32,
    pub tokens_out: u32,
    pub latency_ms: u32,
    /// When the reply arrived, microseconds since the Unix epoch.
    pub created_at: i64,
    /// What a call across documents is about (a corpus tree, a relation, a
    /// name's comparison batch): whenever its stage asks about the subject
    /// again, it asks every call the subject still needs, so its older calls
    /// left unasked are replaced. `None` for a document's calls (`doc_id`
    /// says whose) and a question's. A column later than the others: tables
    /// written before it read it as null.
    #[serde(default)]
    pub subject: Option<String>,
}

/// What one round asked the model for, by stage (memory kind) and task: calls
/// made, calls answered from the cache, and the made calls' tokens.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CallStatRow {
    /// `EPOCH/STAGE/TASK`.
    pub stat_id: String,
    /// The checkpoint that committed the round.
    pub epoch: u64,
    pub stage: String,
    pub task: String,
    pub calls: u64,
    pub cache_hits: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ErrorRow {
    pub error_id: String,
    /// The pipeline stage that met the error, e.g. "ingest".
    pub stage: String,
    /// Where the bad input came from: a path, a URI, `path:line`, or topic/partition/offset.
    pub source: String,
    pub doc_id: Option<String>,
    /// A short machine-readable class, e.g. "not_utf8", "binary", "empty", "unreadable".
    pub kind: String,
    pub message: String,
    /// The access labels of the documents it was derived from (one set:
    /// no row is written from two), [`crate::acl`]; null in a memory built
    /// before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

impl ErrorRow {
    /// An error row whose id is derived from everything it says, so a re-run that
    /// meets the same bad input writes the same row once.
    pub fn new(
        stage: &str,
        source: &str,
        doc_id: Option<String>,
        kind: &str,
        message: &str,
    ) -> Self {
        let error_id = crate::content_id(
            "error",
            &[
                stage.as_bytes(),
                source.as_bytes(),
                kind.as_bytes(),
                message.as_bytes(),
            ],
        );
        ErrorRow {
            error_id,
            stage: stage.to_string(),
            source: source.to_string(),
            doc_id,
            kind: kind.to_string(),
            message: message.to_string(),
            acl: Vec::new(),
        }
    }
}

/// One term of one searched corpus ([`crate::search`]): how many of the
/// corpus's texts hold it and how often it occurs in them. The term
/// [`crate::search::TOTALS`] stands for the corpus itself: its texts, and
/// their terms in all.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LexiconRow {
    pub corpus: String,
    pub term: String,
    pub rows: u64,
    pub occurrences: u64,
    /// The label set of the texts counted ([`crate::acl`]): each set's are
    /// counted apart. Null in a memory built before labels, read as none.
    #[serde(default, with = "nullable_labels")]
    pub acl: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TableVersion {
    pub table: String,
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRow {
    pub epoch: u64,
    pub created_at: i64,
    /// Source positions (file listing, Kafka offsets) as JSON.
    pub source_positions: String,
    pub table_versions: Vec<TableVersion>,
    /// The embedder's model that made the memory's vectors: stored in
    /// `embeddings`, or for the hashing embedder recomputed from the rows'
    /// text where needed. None in a checkpoint written before vectors could
    /// be recomputed (its vectors are all stored).
    pub vector_model: Option<String>,
    /// The cut (`target_tokens`) of the segments that have vectors.
    pub vector_segment_tokens: Option<u32>,
}

/// What made a memory's vectors ([`CheckpointRow::vector_model`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorSpec {
    pub model: String,
    pub segment_tokens: u32,
}

impl CheckpointRow {
    /// What made this checkpoint's vectors, if it says.
    pub fn vectors(&self) -> Option<VectorSpec> {
        Some(VectorSpec {
            model: self.vector_model.clone()?,
            segment_tokens: self.vector_segment_tokens?,
        })
    }

    /// The version of `table` this checkpoint names.
    pub fn version_of(&self, table: Table) -> Option<u64> {
        self.table_versions
            .iter()
            .find(|tv| tv.table == table.name())
            .map(|tv| tv.version)
    }
}

/// Microseconds since the Unix epoch, now.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
