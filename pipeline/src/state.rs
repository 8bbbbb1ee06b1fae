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

use memweave_operators::build::{BuildConfig, BuiltRow};
use memweave_operators::embed::Embedder;
use memweave_operators::graph::{DocEntity, DocRelation};
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
