//! What the cross-document stages hold, kept in the tables so that a new
//! process restores it instead of rebuilding every document.
//!
//! Every input of those stages (entity resolution, relation merging, the
//! corpus trees) is a per-document output of `build_document`: the document's
//! entity mentions and relations, and its trees' roots. Each document's are
//! written as its `doc_states` row, in the same commit as its other rows, so a
//! checkpoint names them, time travel reads them and a stopped run's are rolled
//! back with the rest. A new process feeds every row at its first round's
//! restore time (see [`crate::dataflow`]): the stages' arrangements become what
//! the last process held, and only what changed since is built.
//!
//! What the stages made of those inputs is in the tables already; where a
//! later stage needs it, the restore reads it back from them rather than
//! doing the work again: which entity each name became is read from the
//! checkpoint's entities ([`StoredEntity`]) instead of resolving every name.

use memweave_operators::build::{BuildConfig, BuiltRow};
use memweave_operators::embed::Embedder;
use std::collections::HashMap;

use memweave_operators::graph::{DocEntity, DocRelation, StoredEntities};
use memweave_operators::model::MemoryModel;
use memweave_schemas::{DocStateRow, EmbeddingRow, TREE_MEMWALKER, TreeNodeRow, hash128};
use serde::{Deserialize, Serialize};

/// One document's share of the cross-document stages' inputs.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DocState {
    pub entities: Vec<DocEntity>,
    pub relations: Vec<DocRelation>,
    /// The document's MemWalker root (the corpus MemWalker tree's input).
    pub memwalker_roots: Vec<TreeNodeRow>,
    /// The document's RAPTOR root and its vector (the corpus RAPTOR tree's).
    pub raptor_roots: Vec<(TreeNodeRow, EmbeddingRow)>,
}

impl DocState {
    /// The state `rows` (one document's memory) give the cross-document
    /// stages, as that document's row; its roots only where the corpus trees
    /// are built (`corpus_tree`).
    pub fn row(doc_id: &str, build: &str, rows: &[BuiltRow], corpus_tree: bool) -> DocStateRow {
        let mut state = DocState::default();
        for row in rows {
            match row {
                BuiltRow::Entity(e) => state.entities.push(e.clone()),
                BuiltRow::Relation(r) => state.relations.push(r.clone()),
                BuiltRow::TreeNode(n) if corpus_tree && is_memwalker_root(n) => {
                    state.memwalker_roots.push(n.clone());
                }
                BuiltRow::RaptorRoot(root, vector) if corpus_tree => {
                    state.raptor_roots.push((root.clone(), vector.clone()));
                }
                _ => {}
            }
        }
        DocStateRow {
            doc_id: doc_id.to_string(),
            build: build.to_string(),
            state: serde_json::to_string(&state).expect("a document's state serialises"),
        }
    }

    /// The state a row holds.
    pub fn of_row(row: &DocStateRow) -> Result<DocState, serde_json::Error> {
        serde_json::from_str(&row.state)
    }

    /// The rows of the document's build that the state keeps.
    pub fn into_built_rows(self) -> Vec<BuiltRow> {
        let entities = self.entities.into_iter().map(BuiltRow::Entity);
        let relations = self.relations.into_iter().map(BuiltRow::Relation);
        let memwalker_roots = self.memwalker_roots.into_iter().map(BuiltRow::TreeNode);
        let raptor_roots = (self.raptor_roots.into_iter())
            .map(|(root, vector)| BuiltRow::RaptorRoot(root, vector));
        entities
            .chain(relations)
            .chain(memwalker_roots)
            .chain(raptor_roots)
            .collect()
    }
}

/// A document's MemWalker root: what the corpus MemWalker tree is built over.
pub fn is_memwalker_root(node: &TreeNodeRow) -> bool {
    node.parent_id.is_none() && node.tree == TREE_MEMWALKER
}

/// What makes a document's state: the build's sizes and memories, the kind
/// of model and the embedder. A memory continued with another restores
/// nothing and is rebuilt, as a from-scratch build would be.
pub fn fingerprint(
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
) -> String {
    let made_by = serde_json::json!({
        "build": config,
        "backend": model.backend(),
        "embedder": embedder.model(),
        "width": embedder.dim(),
    });
    format!("{:032x}", hash128(made_by.to_string().as_bytes()))
}

/// An entity of the checkpoint a new process restores from, as much of it as
/// tells which entity each of a name's mentions became (see
/// [`memweave_operators::graph::assignments_from_entities`]): its id, and the
/// segments it was found in, both as hashes.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct StoredEntity {
    entity: u128,
    /// Sorted.
    segments: Vec<u64>,
}

impl StoredEntity {
    /// The stored entity of a row's `entity_id` and `seg_ids`.
    pub fn new(entity_id: &str, seg_ids: &[String]) -> StoredEntity {
        let mut segments: Vec<u64> = seg_ids.iter().map(|s| segment_hash(s)).collect();
        segments.sort_unstable();
        StoredEntity {
            entity: entity_hash(entity_id),
            segments,
        }
    }
}

/// The checkpoint's entities, by id: what the restore reads each name's
/// resolution back from.
#[derive(Debug, Default)]
pub struct EntitiesByHash(HashMap<u128, Vec<u64>>);

impl EntitiesByHash {
    pub fn insert(&mut self, entity: StoredEntity) {
        self.0.insert(entity.entity, entity.segments);
    }
}

impl StoredEntities for EntitiesByHash {
    fn holds(&self, entity_id: &str) -> bool {
        self.0.contains_key(&entity_hash(entity_id))
    }

    fn found_in(&self, entity_id: &str, seg_id: &str) -> bool {
        (self.0.get(&entity_hash(entity_id)))
            .is_some_and(|segments| segments.binary_search(&segment_hash(seg_id)).is_ok())
    }
}

fn entity_hash(entity_id: &str) -> u128 {
    hash128(entity_id.as_bytes())
}

fn segment_hash(seg_id: &str) -> u64 {
    hash128(seg_id.as_bytes()) as u64
}
