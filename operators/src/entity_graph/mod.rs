//! QRMeM's graph memory: entities and open relations over the original segments.
//!
//! Per document ([`document_graph`]): entities of each segment (the
//! document's key words as background, where the paper's prompt has its
//! summary), relations between
//! them, names normalised and short aliases folded into the one longer name they
//! abbreviate, and a pair's relations from several segments kept together.
//! Across documents ([`resolve_entities`], [`merge_relations_across`]):
//! entities of the same normalised name are one entity where their passages'
//! vectors are near, or the model says so when the vectors cannot tell, and a
//! pair's relations from several documents are kept together again.
//!
//! What bounds the model's work ([`GraphConfig`]): a pair's descriptions are
//! concatenated (duplicates dropped) while they fit a token budget, and the
//! paper's merge prompt is asked at most once per pair, to fold the next
//! budget's worth into them, with every text it is shown capped; so a pair's
//! merges do not grow with how often its names recur.
//!
//! One module a job: [`document`] (per-document extraction), [`resolve`]
//! (cross-document resolution) and [`relations`] (relation descriptions,
//! merged within and across documents).

mod document;
mod relations;
mod resolve;
#[cfg(test)]
mod tests;

pub use document::document_graph;
pub use relations::{FoundRelation, merge_relations_across, relation_row};
pub use resolve::{
    LastResolution, Resolution, StoredEntities, assignments_from_entities, entity_rows,
    resolution_from_entities, resolve_entities, stored_groups,
};

use crate::config::BuildConfigError;
use memweave_schemas::acl;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Stage name of graph calls in `llm_calls.stage`.
pub const STAGE: &str = "qrmem";
/// Words of a segment shown as a relation's evidence, and of a document's
/// summary shown as a merge's background: a merge reads what it needs to word
/// the relation, not whole segments.
const EVIDENCE_WORDS: usize = 150;

/// When the graph asks the model: the budget past which descriptions are
/// merged, and the band of vector similarity in which two mentions of one name
/// are an open question. The band's defaults suit the default hashing
/// embedder, whose passages that share only the name come out near 0 and
/// passages that share a few words past the name above 0.1 (measured on
/// pg-essays and the scale archive); a neural embedder's cosines run higher.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GraphConfig {
    /// Longest relation description kept by concatenating what was found, in
    /// tokens; one that would be longer is merged by the model.
    pub description_budget: usize,
    /// Cosine of two mentions' passages at or above which they are one entity
    /// without asking.
    pub same_above: f32,
    /// Cosine below which they are different entities without asking.
    pub apart_below: f32,
}

impl GraphConfig {
    pub const DEFAULT: GraphConfig = GraphConfig {
        description_budget: 300,
        same_above: 0.1,
        apart_below: 0.0,
    };

    pub fn validate(&self) -> Result<(), BuildConfigError> {
        if self.description_budget == 0 {
            return Err(BuildConfigError::NoDescriptionBudget);
        }
        if !(-1.0..=1.0).contains(&self.apart_below)
            || !(-1.0..=1.0).contains(&self.same_above)
            || self.apart_below > self.same_above
        {
            return Err(BuildConfigError::SameEntityBand {
                apart_below: self.apart_below,
                same_above: self.same_above,
            });
        }
        Ok(())
    }
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// An entity as one document knows it, before disambiguation across documents.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocEntity {
    /// The normalised name: the key entities are matched by.
    pub key: String,
    pub doc_id: String,
    /// The names the document calls it, most used first.
    pub names: Vec<String>,
    /// The first sentence that mentions it: its description, and the passage the
    /// model compares when another document has an entity of the same name.
    pub context: String,
    /// The document's key words: what it is about, for the same comparison.
    #[serde(with = "shared_text")]
    pub document: Arc<str>,
    /// The segments it was found in, in document order.
    pub seg_ids: Vec<String>,
}

impl DocEntity {
    /// The entity of a document labelled `acl`: keyed by its name in that
    /// label set ([`acl::scoped`]), so it is resolved with the same set's
    /// mentions alone.
    pub fn in_scope(mut self, acl: &[String]) -> Self {
        self.key = acl::scoped(&self.key, acl);
        self
    }

    /// The passage the model is shown when this entity's name collides with
    /// another document's.
    fn passage(&self) -> String {
        if self.document.is_empty() {
            self.context.clone()
        } else {
            format!(
                "{}\n\nFrom a document about: {}",
                self.context, self.document
            )
        }
    }

    /// What its vector is made of when its name collides: the passage the
    /// model would be shown, without the words every passage has.
    fn compared_text(&self) -> String {
        format!("{}\n{}", self.context, self.document)
    }
}

/// A relation as one document knows it, merged across that document's segments.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocRelation {
    pub doc_id: String,
    pub source_key: String,
    pub target_key: String,
    pub description: String,
    pub seg_ids: Vec<String>,
    /// The head of the document's summary: the merge prompt's background.
    /// Shared by the document's relations while they are built and sent to
    /// the worker that spills them (the cross-document stages keep no texts
    /// in memory).
    #[serde(with = "shared_text")]
    pub summary: Arc<str>,
    /// The head of the first segment it came from: its evidence in a merge.
    #[serde(with = "shared_text")]
    pub evidence: Arc<str>,
}

impl DocRelation {
    /// The relation of a document labelled `acl`, between its ends' names
    /// in that label set (see [`DocEntity::in_scope`]).
    pub fn in_scope(mut self, acl: &[String]) -> Self {
        self.source_key = acl::scoped(&self.source_key, acl);
        self.target_key = acl::scoped(&self.target_key, acl);
        self
    }
}

/// Serde for a text shared by several records (`Arc<str>`), as a plain string.
mod shared_text {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(deserializer).map(Arc::from)
    }
}

/// Which entity a document's entity became.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityAssignment {
    pub doc_id: String,
    pub key: String,
    pub entity_id: String,
}

pub use memweave_schemas::text::normalise;
