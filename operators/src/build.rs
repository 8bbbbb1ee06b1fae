//! The memory of one document, as table rows: the pure functions the dataflow
//! applies per document. Same document and configuration, same rows.

use std::collections::HashMap;

use memweave_schemas::ids::content_hash;
use memweave_schemas::{PageRow, SegmentRow, TreeNodeRow, content_id};
use serde::{Deserialize, Serialize};

use crate::ingest::RawDocument;
use crate::model::MemoryModel;
use crate::paginate::{PageConfig, paginate};
use crate::segment::{SegmentConfig, segment};
use crate::text::CharOffsets;
use crate::tree::{DEFAULT_MAX_CHILDREN, memwalker_tree};

/// One version of one document: the record the dataflow's input collection holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Document {
    pub doc_id: String,
    pub version: u64,
    pub content_hash: String,
    pub source_uri: String,
    pub title: String,
    pub text: String,
}

impl Document {
    pub fn new(raw: RawDocument, version: u64) -> Self {
        Document {
            doc_id: doc_id_of(&raw.key),
            version,
            content_hash: content_hash(&raw.text),
            source_uri: raw.source_uri,
            title: raw.title,
            text: raw.text,
        }
    }
}

/// The id of the document known by `key` (relative path or record id): stable
/// across versions, so an edit replaces the document instead of adding one.
pub fn doc_id_of(key: &str) -> String {
    content_id("doc", &[key.as_bytes()])
}

/// Sizes of everything built per document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BuildConfig {
    pub segments: SegmentConfig,
    pub pages: PageConfig,
    pub max_children: usize,
}

impl BuildConfig {
    pub fn new(segments: SegmentConfig, pages: PageConfig, max_children: usize) -> Self {
        BuildConfig {
            segments,
            pages,
            max_children,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.segments.validate()?;
        self.pages.validate()?;
        if self.max_children < 2 {
            return Err(format!(
                "a tree node needs at least 2 children, not {}",
                self.max_children
            ));
        }
        Ok(())
    }
}

impl BuildConfig {
    pub const DEFAULT: BuildConfig = BuildConfig {
        segments: SegmentConfig::DEFAULT,
        pages: PageConfig::DEFAULT,
        max_children: DEFAULT_MAX_CHILDREN,
    };
}

/// Ids of repeated texts within a document: the n-th copy of a text gets `n` in its
/// id, so ids stay unique without depending on position.
#[derive(Debug, Default)]
struct RepeatCounter(HashMap<String, u32>);

impl RepeatCounter {
    fn id(&mut self, kind: &str, doc_id: &str, text: &str) -> String {
        let n = self.0.entry(text.to_string()).or_insert(0);
        let id = content_id(
            kind,
            &[doc_id.as_bytes(), text.as_bytes(), &n.to_le_bytes()],
        );
        *n += 1;
        id
    }
}

pub fn segment_rows(doc: &Document, config: &SegmentConfig) -> Vec<SegmentRow> {
    let mut chars = CharOffsets::new(&doc.text);
    let mut ids = RepeatCounter::default();
    segment(&doc.text, config)
        .into_iter()
        .enumerate()
        .map(|(ordinal, s)| {
            let text = s.span.of(&doc.text);
            SegmentRow {
                seg_id: ids.id("seg", &doc.doc_id, text),
                doc_id: doc.doc_id.clone(),
                ordinal: ordinal as u32,
                start_char: chars.at(s.span.start),
                end_char: chars.at(s.span.end),
                text: text.to_string(),
                n_tokens: s.n_tokens as u32,
            }
        })
        .collect()
}

pub fn page_rows(doc: &Document, config: &PageConfig, model: &dyn MemoryModel) -> Vec<PageRow> {
    let mut chars = CharOffsets::new(&doc.text);
    let mut ids = RepeatCounter::default();
    paginate(&doc.text, config, model)
        .into_iter()
        .enumerate()
        .map(|(ordinal, span)| {
            let text = span.of(&doc.text);
            PageRow {
                page_id: ids.id("page", &doc.doc_id, text),
                doc_id: doc.doc_id.clone(),
                ordinal: ordinal as u32,
                start_char: chars.at(span.start),
                end_char: chars.at(span.end),
                gist: model.gist_page(text),
                text: text.to_string(),
            }
        })
        .collect()
}

/// The MemWalker tree over a document's segments, given in any order.
pub fn tree_rows(
    doc_id: &str,
    segments: &[SegmentRow],
    model: &dyn MemoryModel,
    max_children: usize,
) -> Vec<TreeNodeRow> {
    let mut ordered = segments.to_vec();
    ordered.sort_by_key(|s| s.ordinal);
    memwalker_tree(doc_id, &ordered, model, max_children)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Document {
        Document::new(
            RawDocument {
                key: "a.txt".into(),
                source_uri: "/x/a.txt".into(),
                title: "a".into(),
                text: text.into(),
            },
            1,
        )
    }

    #[test]
    fn repeated_text_gets_distinct_stable_ids() {
        let text = "Same sentence here. ".repeat(400);
        let rows = segment_rows(&doc(&text), &SegmentConfig::around(60));
        let mut ids: Vec<&str> = rows.iter().map(|r| r.seg_id.as_str()).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert_eq!(rows, segment_rows(&doc(&text), &SegmentConfig::around(60)));
    }

    #[test]
    fn doc_ids_follow_the_key_not_the_content() {
        let a = doc("one text");
        let b = doc("another text");
        assert_eq!(a.doc_id, b.doc_id);
        assert_ne!(a.content_hash, b.content_hash);
    }
}
