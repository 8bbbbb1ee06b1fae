//! The memory of one document, as table rows: the pure functions the dataflow
//! applies per document. Same document and configuration, same rows.

use std::collections::HashMap;

use memweave_schemas::ids::document_hash;
use memweave_schemas::search::{OWN_GIST_CUT, WHOLE_DOCUMENT_CUT};
use memweave_schemas::{
    EmbeddingRow, ErrorRow, GistMemoryRow, Labelled, PageRow, Section, Segment, SegmentRow,
    TreeNodeRow, content_id,
};
use serde::{Deserialize, Serialize};

pub use crate::config::{BuildConfigError, Memories};
use crate::embed::{Embedder, embed_all};
use crate::entity_graph::{DocEntity, DocRelation, GraphConfig, document_graph};
use crate::model::{CallContext, MemoryModel, StepError, StepResult, WithFallbacks, all_in_order};
use crate::paginate::{PageConfig, paginate_then};
use crate::raptor::{RaptorConfig, raptor_tree};
use crate::segment::{SegmentConfig, segment};
use crate::text::{CharOffsets, Span, word_count};
use crate::tree::{DEFAULT_MAX_CHILDREN, DEFAULT_PARENT_MAX_TOKENS, LeafSummaries, memwalker_tree};

/// A document as read from a source, before ids are derived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawDocument {
    /// What identifies the document across versions: its path relative to the
    /// source root, or the id of a dataset's row or a mail message.
    pub key: String,
    pub source_uri: String,
    pub title: String,
    pub text: String,
    /// Where the text's parts came from (pages, headings, the row or message).
    pub sections: Vec<Section>,
    /// Who may read it: a normalised label set ([`memweave_schemas::acl`]),
    /// its own (a row's column, a message's field) or, once read, the one
    /// the source's map or default gives it.
    pub acl: Vec<String>,
}

/// One version of one document: the record the dataflow's input collection holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Document {
    pub doc_id: String,
    pub version: u64,
    pub content_hash: String,
    pub source_uri: String,
    pub title: String,
    pub text: String,
    pub sections: Vec<Section>,
    /// Its access labels: every row derived from it carries them.
    pub acl: Vec<String>,
}

impl Document {
    /// A document of a memory's one unnamed source.
    pub fn new(raw: RawDocument, version: u64) -> Self {
        Document::in_source("", raw, version)
    }

    /// A document of the source named `source` (see [`doc_id_in`]).
    pub fn in_source(source: &str, raw: RawDocument, version: u64) -> Self {
        Document {
            doc_id: doc_id_in(source, &raw.key),
            version,
            content_hash: document_hash(&raw.text, &raw.sections, &raw.acl),
            source_uri: raw.source_uri,
            title: raw.title,
            text: raw.text,
            sections: raw.sections,
            acl: raw.acl,
        }
    }
}

/// The id of the document known by `key` (relative path or record id): stable
/// across versions, so an edit replaces the document instead of adding one.
pub fn doc_id_of(key: &str) -> String {
    content_id("doc", &[key.as_bytes()])
}

/// The id of the document known by `key` in the source named `source`
/// (`--source-name`), so that sources sharing a memory may share keys. A
/// source given no name (empty) keeps the ids of its keys alone.
pub fn doc_id_in(source: &str, key: &str) -> String {
    match source {
        "" => doc_id_of(key),
        named => content_id("doc", &[named.as_bytes(), key.as_bytes()]),
    }
}

impl Default for Memories {
    fn default() -> Self {
        Memories::ALL
    }
}

/// Sizes of everything built per document.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BuildConfig {
    pub memories: Memories,
    pub segments: SegmentConfig,
    pub pages: PageConfig,
    pub max_children: usize,
    /// Longest concatenation of child summaries kept as a parent's summary, in tokens.
    pub parent_max_tokens: usize,
    /// Also build corpus-level MemWalker and RAPTOR trees (leaves: document roots).
    pub corpus_tree: bool,
    pub raptor: RaptorConfig,
    pub graph: GraphConfig,
    /// Tokens of the finer cut the retrieval baselines rank (`bm25`: a needle
    /// in a shorter passage ranks higher), kept as segments that no model call
    /// reads; 0 keeps none. See [`BuildConfig::passages`].
    pub passage_tokens: usize,
    /// Ask the model to summarise and gist texts shorter than the smallest
    /// unit the methods cut, as the papers do for every segment and page;
    /// by default such a text stands for itself (see
    /// [`BuildConfig::own_summary_below`]).
    pub shorten_short_texts: bool,
}

impl BuildConfig {
    pub fn new(segments: SegmentConfig, pages: PageConfig, max_children: usize) -> Self {
        BuildConfig {
            segments,
            pages,
            max_children,
            ..Self::DEFAULT
        }
    }

    pub fn validate(&self) -> Result<(), BuildConfigError> {
        self.segments.validate()?;
        self.pages.validate()?;
        self.raptor.validate()?;
        self.graph.validate()?;
        self.chunks().validate()?;
        if let Some(passages) = self.passages() {
            passages.validate()?;
        }
        if self.max_children < 2 {
            return Err(BuildConfigError::MaxChildren(self.max_children));
        }
        Ok(())
    }
}

impl BuildConfig {
    pub const DEFAULT: BuildConfig = BuildConfig {
        segments: SegmentConfig::DEFAULT,
        pages: PageConfig::DEFAULT,
        max_children: DEFAULT_MAX_CHILDREN,
        parent_max_tokens: DEFAULT_PARENT_MAX_TOKENS,
        corpus_tree: false,
        memories: Memories::ALL,
        raptor: RaptorConfig::DEFAULT,
        graph: GraphConfig::DEFAULT,
        passage_tokens: DEFAULT_PASSAGE_TOKENS,
        shorten_short_texts: false,
    };

    /// Tokens under which a segment (or chunk) of `cut` is its own leaf
    /// summary, in the MemWalker and the RAPTOR tree, with no surprise: the
    /// segmenter's minimum, under which only a document's whole text or its
    /// last segment falls. The methods summarise units they cut from long
    /// texts; a text shorter than any unit they cut would be restated at
    /// about its own length (RAPTOR's summaries average 131 tokens), and
    /// the call would cost more tokens than the summary saves. 0 where every
    /// segment is summarised.
    pub fn own_summary_below(&self, cut: &SegmentConfig) -> usize {
        if self.shorten_short_texts {
            0
        } else {
            cut.min_tokens
        }
    }

    /// Words under which a page is its own gist: ReadAgent's shortest page
    /// (`--page-min-words`). Its gist memory compresses the pages it cuts
    /// from a long text so that the whole fits a context; a page shorter
    /// than any it cuts is a short document (or a document's tail), which
    /// fits as it is, and looking it up would read the same words again.
    /// 0 where every page is gisted.
    pub fn own_gist_below(&self) -> usize {
        if self.shorten_short_texts {
            0
        } else {
            self.pages.min_words
        }
    }

    /// The segmentation RAPTOR chunks with: the segments' own unless another
    /// size is set, so both memories share one segmentation (and its leaf calls).
    pub fn chunks(&self) -> SegmentConfig {
        match self.raptor.chunk_tokens {
            Some(tokens) if tokens != self.segments.target_tokens => SegmentConfig::around(tokens),
            _ => self.segments,
        }
    }

    /// The finest cut the build keeps: the passages readers rank, their BM25
    /// statistics the only cut's the lexicon counts
    /// ([`RankedCorpora`](memweave_schemas::search::RankedCorpora)).
    pub fn finest_cut(&self) -> usize {
        let chunks = self.memories.raptor.then(|| self.chunks());
        (chunks.into_iter().chain(self.passages()))
            .map(|cut| cut.target_tokens)
            .fold(self.segments.target_tokens, usize::min)
    }

    /// The cut kept for the retrieval baselines: only where it is finer than the
    /// segments and is not already there as RAPTOR's chunks.
    pub fn passages(&self) -> Option<SegmentConfig> {
        let passages = SegmentConfig::around(self.passage_tokens);
        let chunked = self.memories.raptor && self.chunks() == passages;
        (self.passage_tokens > 0 && self.passage_tokens < self.segments.target_tokens && !chunked)
            .then_some(passages)
    }
}

/// The baselines' cut by default: ILM-TR's chunk size, what they ranked when
/// RAPTOR's chunks were cut apart from the segments.
pub const DEFAULT_PASSAGE_TOKENS: usize = 600;

/// Ids of repeated texts within a document: the n-th copy of a text gets `n` in its
/// id, so ids stay unique without depending on position.
#[derive(Debug, Default)]
struct RepeatCounter(HashMap<String, u32>);

impl RepeatCounter {
    /// `scope` tells apart texts of one document cut in different ways.
    fn id(&mut self, kind: &str, doc_id: &str, scope: &[u8], text: &str) -> String {
        let n = self.0.entry(text.to_string()).or_insert(0);
        let id = content_id(
            kind,
            &[doc_id.as_bytes(), scope, text.as_bytes(), &n.to_le_bytes()],
        );
        *n += 1;
        id
    }
}

/// `doc` cut into segments of `config`'s size, each with its text.
pub fn segments_of(doc: &Document, config: &SegmentConfig) -> Vec<Segment> {
    let mut chars = CharOffsets::new(&doc.text);
    let mut ids = RepeatCounter::default();
    let target = config.target_tokens as u32;
    segment(&doc.text, config)
        .into_iter()
        .enumerate()
        .map(|(ordinal, s)| {
            let text = s.span.of(&doc.text);
            let row = SegmentRow {
                seg_id: ids.id("seg", &doc.doc_id, &target.to_le_bytes(), text),
                doc_id: doc.doc_id.clone(),
                ordinal: ordinal as u32,
                start_char: chars.at(s.span.start),
                end_char: chars.at(s.span.end),
                n_tokens: s.n_tokens as u32,
                target_tokens: target,
                terms: String::new(),
                acl: Vec::new(),
            };
            Segment::new(row, text.to_string())
        })
        .collect()
}

/// The one segment of a document that its segments and its passages both
/// leave whole (one segment each, the same characters): kept once, for both
/// cuts ([`WHOLE_DOCUMENT_CUT`]), rather than as a segment and a passage with
/// the same terms and index entries. On an archive of short documents that
/// is every document.
fn whole_document(doc_id: &str, segments: &[Segment], passages: &[Segment]) -> Option<Segment> {
    let ([segment], [passage]) = (segments, passages) else {
        return None;
    };
    let same = |s: &Segment| (s.start_char, s.end_char);
    if same(segment) != same(passage) {
        return None;
    }
    let mut row = segment.row.clone();
    row.target_tokens = WHOLE_DOCUMENT_CUT;
    row.seg_id = RepeatCounter::default().id(
        "seg",
        doc_id,
        &WHOLE_DOCUMENT_CUT.to_le_bytes(),
        &segment.text,
    );
    Some(Segment {
        row,
        text: segment.text.clone(),
    })
}

/// Whether a document's gist memory `gists` has the terms of its one
/// segment, a whole document's: that segment then stands in the gist
/// memories too ([`OWN_GIST_CUT`]), and the gist memory keeps no row. On an
/// archive of short documents (one page, its own gist) that is every
/// document, whose terms would otherwise be kept and indexed twice.
fn stands_as_own_gist(segments: &mut [Segment], gists: &GistMemoryRow) -> bool {
    match segments {
        [whole]
            if whole.row.target_tokens == WHOLE_DOCUMENT_CUT && whole.row.terms == gists.terms =>
        {
            whole.row.target_tokens = OWN_GIST_CUT;
            true
        }
        _ => false,
    }
}

/// ReadAgent's gist memory of the document of `text` from its `pages` (in
/// order).
pub fn gist_memory(doc_id: &str, text: &str, pages: &[PageRow]) -> GistMemoryRow {
    GistMemoryRow::new(doc_id, pages.iter().map(|p| p.gist_in(text)))
}

/// A page's gist: the page itself where it has fewer than `own_gist_below`
/// words ([`BuildConfig::own_gist_below`]), else the model's.
async fn gist_of(
    model: &dyn MemoryModel,
    cx: &CallContext,
    page: &str,
    own_gist_below: usize,
) -> StepResult<String> {
    if word_count(page) < own_gist_below {
        return Ok(page.to_string());
    }
    model.gist_page(cx, page).await
}

/// A document's ReadAgent pages with their gists, pages under
/// `own_gist_below` words their own.
pub async fn page_rows(
    doc: &Document,
    config: &PageConfig,
    own_gist_below: usize,
    model: &dyn MemoryModel,
) -> StepResult<Vec<PageRow>> {
    let cx = CallContext::build("readagent", &doc.doc_id);
    let mut pages = paginate_then(&doc.text, config, model, &cx, |span| {
        gist_of(model, &cx, span.of(&doc.text), own_gist_below)
    })
    .await?;
    if config.gist_word_budget > 0 {
        let budget = config.gist_word_budget;
        pages = merge_pages(&doc.text, pages, budget, own_gist_below, model, &cx).await?;
    }
    let mut chars = CharOffsets::new(&doc.text);
    let mut ids = RepeatCounter::default();
    Ok(pages
        .into_iter()
        .enumerate()
        .map(|(ordinal, (span, gist))| {
            let text = span.of(&doc.text);
            PageRow {
                page_id: ids.id("page", &doc.doc_id, &[], text),
                doc_id: doc.doc_id.clone(),
                ordinal: ordinal as u32,
                start_char: chars.at(span.start),
                end_char: chars.at(span.end),
                // A page that is its own gist keeps no copy of itself.
                gist: (gist != text).then_some(gist),
                acl: Vec::new(),
            }
        })
        .collect())
}

/// ReadAgent's context-length control (appendix I): while a document's gists
/// together exceed `budget` words, ask of each pair of neighbouring pages whether
/// the second starts a new section, merge each page the model says continues its
/// predecessor into it (a page takes in at most one neighbour a round, so pages
/// grow step by step), and gist the merged pages again. Stops when nothing merges.
async fn merge_pages(
    text: &str,
    mut pages: Vec<(Span, String)>,
    budget: usize,
    own_gist_below: usize,
    model: &dyn MemoryModel,
    cx: &CallContext,
) -> StepResult<Vec<(Span, String)>> {
    while pages.len() > 1 && pages.iter().map(|(_, g)| word_count(g)).sum::<usize>() > budget {
        let new_section = all_in_order(
            pages
                .windows(2)
                .map(|pair| model.starts_new_section(cx, pair[0].0.of(text), pair[1].0.of(text))),
        )
        .await?;
        let before = pages.len();
        // A merged page's gist is `None` until it is gisted again.
        let mut merged: Vec<(Span, Option<String>)> = Vec::with_capacity(before);
        let mut joined_last = false;
        for (i, (span, gist)) in pages.into_iter().enumerate() {
            let continues = i > 0 && new_section[i - 1] == Some(false);
            match merged.last_mut() {
                Some(last) if continues && !joined_last => {
                    last.0.end = span.end;
                    last.1 = None;
                    joined_last = true;
                }
                _ => {
                    merged.push((span, Some(gist)));
                    joined_last = false;
                }
            }
        }
        pages = all_in_order(merged.into_iter().map(|(span, gist)| async move {
            let gist = match gist {
                Some(gist) => gist,
                None => gist_of(model, cx, span.of(text), own_gist_below).await?,
            };
            Ok((span, gist))
        }))
        .await?;
        if pages.len() == before {
            break;
        }
    }
    Ok(pages)
}

/// Everything built from one document, or the step that failed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BuiltRow {
    Segment(SegmentRow),
    TreeNode(TreeNodeRow),
    Page(PageRow),
    /// The document's gist memory: its pages' gists together.
    GistMemory(GistMemoryRow),
    /// An entity of the document, before disambiguation across documents.
    Entity(DocEntity),
    /// A relation of the document, merged across its segments.
    Relation(DocRelation),
    Embedding(EmbeddingRow),
    /// The document's MemWalker root (also among its `TreeNode` rows) with
    /// its text, for the corpus tree: the row written may have forgotten it
    /// ([`TreeNodeRow::forget_own_text`]).
    MemWalkerRoot(TreeNodeRow),
    /// The document's RAPTOR root and its vector (also among its `TreeNode`
    /// and `Embedding` rows) with its text, for the corpus tree: so that
    /// stage need not hold every node's vector to find the roots'.
    RaptorRoot(TreeNodeRow, EmbeddingRow),
    Error(ErrorRow),
}

impl BuiltRow {
    /// Gives the row its document's labels, `acl`. A graph row is scoped
    /// instead ([`DocEntity::in_scope`]): the stages across documents label
    /// what they make of it.
    fn label(&mut self, acl: &[String]) {
        let labels = match self {
            BuiltRow::Segment(row) => row.acl_mut(),
            BuiltRow::TreeNode(row) | BuiltRow::MemWalkerRoot(row) => row.acl_mut(),
            BuiltRow::Page(row) => row.acl_mut(),
            BuiltRow::GistMemory(row) => row.acl_mut(),
            BuiltRow::Embedding(row) => row.acl_mut(),
            BuiltRow::RaptorRoot(row, vector) => {
                acl.clone_into(vector.acl_mut());
                row.acl_mut()
            }
            BuiltRow::Error(row) => row.acl_mut(),
            BuiltRow::Entity(_) | BuiltRow::Relation(_) => return,
        };
        acl.clone_into(labels);
    }
}

/// The memory of one document: segments (and RAPTOR chunks and the baselines'
/// passages where their sizes differ), then the chosen memories concurrently:
/// its MemWalker tree and, with its root summary as background, its graph; its
/// ReadAgent pages and gists; its RAPTOR tree. A step whose replies cannot be
/// read stands in with its fallback ([`crate::model::Step::fallback`]) and
/// an `llm_unparsable` row names it; when a model step fails otherwise (the
/// pool down, the budget spent) the document gets one `errors` row instead
/// of a partial memory, so a later run (with the pool back, or the cache
/// filled) builds it whole.
pub async fn build_document(
    doc: &Document,
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
) -> Vec<BuiltRow> {
    let fallbacks = WithFallbacks::new(model);
    let model: &dyn MemoryModel = &fallbacks;
    let memories = config.memories;
    let mut segments = segments_of(doc, &config.segments);
    let chunk_config = config.chunks();
    let chunks = if !memories.raptor || chunk_config == config.segments {
        Vec::new()
    } else {
        segments_of(doc, &chunk_config)
    };
    let leaves = if memories.raptor && chunks.is_empty() {
        LeafSummaries::SharedWithRaptor
    } else {
        LeafSummaries::Own
    };
    let mut passages = config
        .passages()
        .map_or_else(Vec::new, |cut| segments_of(doc, &cut));
    if let Some(whole) = whole_document(&doc.doc_id, &segments, &passages) {
        segments = vec![whole];
        passages = Vec::new();
    }
    let tree_and_graph = async {
        let nodes = if memories.memwalker {
            memwalker_tree(
                &doc.doc_id,
                &segments,
                model,
                leaves,
                config.own_summary_below(&config.segments),
                config.max_children,
                config.parent_max_tokens,
            )
            .await?
        } else {
            Vec::new()
        };
        let graph = if memories.graph {
            let background = nodes
                .iter()
                .find(|n| n.parent_id.is_none())
                .map_or("", TreeNodeRow::text);
            Some(document_graph(&doc.doc_id, background, &segments, model, &config.graph).await?)
        } else {
            None
        };
        Ok((nodes, graph))
    };
    let pages = async {
        if memories.readagent {
            page_rows(doc, &config.pages, config.own_gist_below(), model).await
        } else {
            Ok(Vec::new())
        }
    };
    let raptor = async {
        if !memories.raptor {
            return Ok((Vec::new(), Vec::new()));
        }
        let chunks = if chunks.is_empty() {
            &segments
        } else {
            &chunks
        };
        let cx = CallContext::build("embed", &doc.doc_id);
        let texts: Vec<&str> = segments.iter().map(|s| s.text.as_str()).collect();
        let (nodes, segment_vectors) = futures::future::join(
            raptor_tree(
                &doc.doc_id,
                chunks,
                config.own_summary_below(&chunk_config),
                model,
                embedder,
                &config.raptor,
            ),
            embed_all(embedder, &cx, &texts),
        )
        .await;
        Ok((nodes?, segment_vectors?))
    };
    let (tree_and_graph, pages, raptor) =
        futures::future::join3(tree_and_graph, pages, raptor).await;
    let built = (|| Ok((tree_and_graph?, pages?, raptor?)))();
    let mut rows = match built {
        Ok(((nodes, graph), pages, (raptor_nodes, segment_vectors))) => {
            let mut rows: Vec<BuiltRow> = Vec::new();
            let model = embedder.model();
            rows.extend(segment_vectors.into_iter().zip(&segments).map(|(v, s)| {
                BuiltRow::Embedding(EmbeddingRow::new(&s.seg_id, "segment", model, v))
            }));
            // A leaf that is its segment's own text keeps none of it.
            let texts: HashMap<&str, &str> = (segments.iter().chain(&chunks))
                .map(|s| (s.seg_id.as_str(), s.text.as_str()))
                .collect();
            let written = |mut node: TreeNodeRow| {
                if let Some(text) = node.seg_id.as_deref().and_then(|s| texts.get(s)) {
                    node.forget_own_text(text);
                }
                BuiltRow::TreeNode(node)
            };
            let mut tree_rows = Vec::new();
            for node in nodes {
                if node.parent_id.is_none() {
                    tree_rows.push(BuiltRow::MemWalkerRoot(node.as_corpus_root()));
                }
                tree_rows.push(written(node));
            }
            for node in raptor_nodes {
                let vector = EmbeddingRow::new(&node.row.node_id, "node", model, node.vector);
                if node.row.parent_id.is_none() {
                    tree_rows.push(BuiltRow::RaptorRoot(
                        node.row.as_corpus_root(),
                        vector.clone(),
                    ));
                }
                tree_rows.push(BuiltRow::Embedding(vector));
                tree_rows.push(written(node.row));
            }
            let gists = (!pages.is_empty())
                .then(|| gist_memory(&doc.doc_id, &doc.text, &pages))
                .filter(|gists| !stands_as_own_gist(&mut segments, gists));
            rows.extend(segments.into_iter().map(|s| BuiltRow::Segment(s.row)));
            rows.extend(chunks.into_iter().map(|s| BuiltRow::Segment(s.row)));
            rows.extend(passages.into_iter().map(|s| BuiltRow::Segment(s.row)));
            rows.append(&mut tree_rows);
            rows.extend(gists.map(BuiltRow::GistMemory));
            rows.extend(pages.into_iter().map(BuiltRow::Page));
            if let Some((entities, relations)) = graph {
                let acl = &doc.acl;
                rows.extend((entities.into_iter()).map(|e| BuiltRow::Entity(e.in_scope(acl))));
                rows.extend((relations.into_iter()).map(|r| BuiltRow::Relation(r.in_scope(acl))));
            }
            let fell_back = fallbacks.errors(&doc.source_uri, &doc.doc_id);
            rows.extend(fell_back.into_iter().map(BuiltRow::Error));
            rows
        }
        Err(error) => vec![BuiltRow::Error(ErrorRow::new(
            "build",
            &doc.source_uri,
            Some(doc.doc_id.clone()),
            StepError::kind(&error),
            &format!("{error}; the document's memory was not built"),
        ))],
    };
    for row in &mut rows {
        row.label(&doc.acl);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FirstSentence;

    fn doc(text: &str) -> Document {
        Document::new(
            RawDocument {
                key: "a.txt".into(),
                source_uri: "/x/a.txt".into(),
                title: "a".into(),
                text: text.into(),
                sections: Vec::new(),
                acl: Vec::new(),
            },
            1,
        )
    }

    #[test]
    fn repeated_text_gets_distinct_stable_ids() {
        let text = "Same sentence here. ".repeat(400);
        let rows = segments_of(&doc(&text), &SegmentConfig::around(60));
        let mut ids: Vec<&str> = rows.iter().map(|r| r.seg_id.as_str()).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert_eq!(rows, segments_of(&doc(&text), &SegmentConfig::around(60)));
    }

    #[test]
    fn pages_over_the_gist_budget_merge_until_each_starts_a_section() {
        let text: String = (0..60)
            .map(|i| {
                let opening = if i % 15 == 0 {
                    format!("Chapter {}.", i / 15 + 1)
                } else {
                    format!("Paragraph {i} goes on.")
                };
                format!(
                    "{opening} {}\n\n",
                    "More words of the same story. ".repeat(6)
                )
            })
            .collect();
        let model = FirstSentence::default();
        let pages_with = |budget: usize| {
            let config = PageConfig {
                min_words: 60,
                max_words: 150,
                gist_word_budget: budget,
            };
            futures::executor::block_on(page_rows(&doc(&text), &config, 0, &model))
                .expect("the stub answers")
        };
        let unmerged = pages_with(0);
        let merged = pages_with(1);
        assert!(merged.len() < unmerged.len(), "{} pages", merged.len());
        // The merged pages still tile the text, and every one after the first
        // begins a section: the rest were merged into their predecessors.
        assert_eq!(merged[0].start_char, 0);
        assert_eq!(merged.last().unwrap().end_char, text.chars().count() as u64);
        for pair in merged.windows(2) {
            assert_eq!(pair[0].end_char, pair[1].start_char);
            let next = pair[1].text_in(&text);
            assert!(next.starts_with("Chapter"), "{:?}", &next[..40]);
        }
        // A merged page is gisted anew.
        assert!((merged.iter()).all(|p| p.text_in(&text).starts_with(&p.gist_in(&text))));
        // Under the budget nothing changes.
        assert_eq!(pages_with(1_000_000), unmerged);
    }

    /// [`FirstSentence`], noting the steps it is asked, except that the
    /// replies to `unreadable` steps never follow their format.
    #[derive(Debug, Default)]
    struct Probe {
        model: FirstSentence,
        unreadable: Vec<crate::model::Task>,
        asked: std::sync::Mutex<Vec<crate::model::Task>>,
    }

    #[async_trait::async_trait]
    impl MemoryModel for Probe {
        fn backend(&self) -> &str {
            "probe"
        }
        fn is_remote(&self) -> bool {
            false
        }
        async fn reply(
            &self,
            cx: &CallContext,
            step: crate::model::Step,
        ) -> StepResult<crate::model::Reply> {
            self.asked.lock().unwrap().push(step.task());
            if self.unreadable.contains(&step.task()) {
                return Err(StepError::Unparsable {
                    task: step.task().name().to_string(),
                    last_reply: "İİİİ Same: 1".to_string(),
                });
            }
            self.model.reply(cx, step).await
        }
    }

    #[test]
    fn a_step_without_a_readable_reply_falls_back_and_the_document_is_kept() {
        use crate::model::Task;
        let text: String = (0..40)
            .map(|i| {
                format!(
                    "Paragraph {i} tells of painting and of Lisp. {}\n\n",
                    "It goes on. ".repeat(8)
                )
            })
            .collect();
        let config = BuildConfig::DEFAULT;
        let embedder = crate::embed::HashingEmbedder::new(64);
        let build = |unreadable: Vec<Task>| {
            let model = Probe {
                unreadable,
                ..Probe::default()
            };
            futures::executor::block_on(build_document(&doc(&text), &config, &model, &embedder))
        };
        let errors = |rows: &[BuiltRow]| -> Vec<ErrorRow> {
            rows.iter()
                .filter_map(|r| match r {
                    BuiltRow::Error(e) => Some(e.clone()),
                    _ => None,
                })
                .collect()
        };
        let clean = build(Vec::new());
        assert!(errors(&clean).is_empty());
        // With RAPTOR on, MemWalker's leaves share its chunk summaries.
        let unreadable = || {
            vec![
                Task::ChooseBreak,
                Task::SummarizeWithFacts,
                Task::ExtractEntities,
            ]
        };
        let rows = build(unreadable());
        let errors = errors(&rows);
        let named: Vec<&str> = errors
            .iter()
            .map(|e| e.message.split(':').next().unwrap())
            .collect();
        assert_eq!(
            named,
            ["choose_break", "extract_entities", "summarize_with_facts"]
        );
        assert!(
            errors
                .iter()
                .all(|e| e.kind == "llm_unparsable" && e.stage == "build")
        );
        // Kept: pages, leaves whose summaries are their segments' own texts,
        // and the memories the unreadable steps do not touch, as before.
        let count = |rows: &[BuiltRow], what: fn(&BuiltRow) -> bool| {
            rows.iter().filter(|r| what(r)).count()
        };
        let is_page = |r: &BuiltRow| matches!(r, BuiltRow::Page(_));
        assert!(count(&rows, is_page) > 1);
        let segments: HashMap<&str, String> = rows
            .iter()
            .filter_map(|r| match r {
                BuiltRow::Segment(s) => Some((s.seg_id.as_str(), s.text_in(&text))),
                _ => None,
            })
            .collect();
        let leaves: Vec<&TreeNodeRow> = rows
            .iter()
            .filter_map(|r| match r {
                BuiltRow::TreeNode(n) if n.tree == "memwalker" && n.level == 0 => Some(n),
                _ => None,
            })
            .collect();
        assert!(!leaves.is_empty());
        for leaf in leaves {
            let segment = leaf
                .seg_id
                .as_deref()
                .and_then(|s| segments.get(s))
                .unwrap();
            assert_eq!(leaf.summary, None, "its segment's own text, kept once");
            let searched = memweave_schemas::text::searched_terms([segment.as_str()]);
            assert_eq!(leaf.terms, searched, "found by its segment's terms");
        }
        let is_raptor = |r: &BuiltRow| matches!(r, BuiltRow::TreeNode(n) if n.tree == "raptor");
        assert!(count(&rows, is_raptor) > 0);
        // The same rows whatever order the calls end in.
        assert_eq!(format!("{rows:?}"), format!("{:?}", build(unreadable())));
    }

    /// A document shorter than a segment's and a page's minimum is its own
    /// leaf summary and its own gist; asked to shorten short texts, the
    /// build summarises and gists it as the papers do.
    #[test]
    fn a_short_document_is_its_own_summary_and_gist() {
        use crate::model::Task;
        let text = crate::testing::PAINTING;
        let embedder = crate::embed::HashingEmbedder::new(64);
        let build = |config: BuildConfig| {
            let model = Probe::default();
            let rows =
                futures::executor::block_on(build_document(&doc(text), &config, &model, &embedder));
            (rows, model.asked.into_inner().unwrap())
        };
        let (rows, asked) = build(BuildConfig::DEFAULT);
        assert!(!asked.contains(&Task::SummarizeWithFacts), "{asked:?}");
        assert!(!asked.contains(&Task::GistPage), "{asked:?}");
        assert!(asked.contains(&Task::ExtractEntities), "{asked:?}");
        let leaves: Vec<&TreeNodeRow> = rows
            .iter()
            .filter_map(|r| match r {
                BuiltRow::TreeNode(n) if n.level == 0 => Some(n),
                _ => None,
            })
            .collect();
        assert_eq!(leaves.len(), 2, "a MemWalker and a RAPTOR leaf");
        // Its segments and its passages both leave it whole: one row stands
        // in both cuts, and the leaves are over it.
        let segments: Vec<&SegmentRow> = rows
            .iter()
            .filter_map(|r| match r {
                BuiltRow::Segment(s) => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(segments.len(), 1, "{segments:?}");
        // ... and, its one page being its own gist, in the gist memories.
        assert_eq!(segments[0].target_tokens, OWN_GIST_CUT);
        assert!(
            leaves
                .iter()
                .all(|n| n.seg_id.as_ref() == Some(&segments[0].seg_id))
        );
        let searched = memweave_schemas::text::searched_terms([text]);
        assert!(
            leaves
                .iter()
                .all(|n| n.summary.is_none() && n.terms == searched && n.surprise.is_none())
        );
        // The corpus trees' copies of the roots keep the text.
        let roots: Vec<&TreeNodeRow> = rows
            .iter()
            .filter_map(|r| match r {
                BuiltRow::MemWalkerRoot(n) | BuiltRow::RaptorRoot(n, _) => Some(n),
                _ => None,
            })
            .collect();
        assert_eq!(roots.len(), 2);
        assert!(roots.iter().all(|n| n.summary.as_deref() == Some(text)));
        // ... and not their terms, so that a root restored from a state
        // (which keeps none) equals the root built again.
        assert!(roots.iter().all(|n| n.terms.is_empty()));
        let pages: Vec<&PageRow> = rows
            .iter()
            .filter_map(|r| match r {
                BuiltRow::Page(p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(pages.len(), 1);
        assert_eq!(pages[0].gist, None, "its own gist, kept once");
        assert_eq!(pages[0].gist_in(text), text);
        // Its gist memory is its segment: no row of its own.
        let memory = rows.iter().find_map(|r| match r {
            BuiltRow::GistMemory(g) => Some(g),
            _ => None,
        });
        assert_eq!(memory, None);
        let searched = memweave_schemas::text::searched_terms([text]);
        assert_eq!(segments[0].terms, searched);
        let shortened = BuildConfig {
            shorten_short_texts: true,
            ..BuildConfig::DEFAULT
        };
        let (rows, asked) = build(shortened);
        assert!(asked.contains(&Task::SummarizeWithFacts), "{asked:?}");
        assert!(asked.contains(&Task::GistPage), "{asked:?}");
        assert!(rows.iter().any(
            |r| matches!(r, BuiltRow::Page(p) if p.gist.as_deref().is_some_and(|g| g != text))
        ));
        // A gist of its own: a row of it, and the segment a whole document's.
        assert!(rows.iter().any(|r| matches!(r, BuiltRow::GistMemory(_))));
        assert!(
            rows.iter().any(
                |r| matches!(r, BuiltRow::Segment(s) if s.target_tokens == WHOLE_DOCUMENT_CUT)
            )
        );
    }

    #[test]
    fn doc_ids_follow_the_key_not_the_content() {
        let a = doc("one text");
        let b = doc("another text");
        assert_eq!(a.doc_id, b.doc_id);
        assert_ne!(a.content_hash, b.content_hash);
    }

    #[test]
    fn named_sources_may_share_keys() {
        assert_eq!(doc_id_in("", "a/b.md"), doc_id_of("a/b.md"));
        assert_ne!(doc_id_in("wiki", "a/b.md"), doc_id_in("mail", "a/b.md"));
        // The name and the key are told apart, whatever their characters.
        assert_ne!(doc_id_in("a", "b.md"), doc_id_of("a/b.md"));
        assert_ne!(doc_id_in("a", "b.md"), doc_id_in("a/", "b.md"));
    }
}
