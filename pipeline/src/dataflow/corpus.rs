//! The corpus-level trees, over every document's roots.

use std::sync::Arc;

use differential_dataflow::VecCollection;
use differential_dataflow::{ExchangeData, Hashable};
use memweave_operators::build::BuildConfig;

use memweave_operators::model::StepError;
use memweave_operators::raptor::{RaptorNode, raptor_corpus_tree};
use memweave_operators::tree::corpus_tree;
use memweave_schemas::{EmbeddingRow, ErrorRow, Labelled, MemoryRow, TreeNodeRow};

use super::Services;
use super::spilled::{read_in_doc_order, reduce_in_spill, spill_group, spill_where_used};
use super::time::changes_only;
use crate::async_map::{InFlight, MapAsync};
use crate::spill::{Spill, SpilledGroup};

/// The corpus-level trees, one of each per label set, rebuilt over the set's
/// document roots whenever one changes (unchanged groups and clusters are
/// answered by the call cache): a MemWalker tree over the MemWalker roots, a
/// RAPTOR tree over the RAPTOR roots and their vectors. No node is written
/// from documents of two label sets. Like the graph's mentions, the roots
/// are spilled by the worker that builds the set's trees, a set's group is a
/// list of their spill keys in the spill ([`reduce_in_spill`]), and the
/// roots are read back when a tree is rebuilt.
pub(super) fn corpus_trees<'scope>(
    memwalker_roots: VecCollection<'scope, u64, TreeNodeRow, isize>,
    raptor_roots: VecCollection<'scope, u64, (TreeNodeRow, EmbeddingRow), isize>,
    services: &Services,
    spill: &Arc<Spill>,
    config: BuildConfig,
) -> VecCollection<'scope, u64, MemoryRow, isize> {
    let Services {
        model,
        embedder,
        tasks,
        ..
    } = services;
    let memwalker_roots = changes_only(corpus_roots(
        memwalker_roots,
        spill,
        "MemWalkerCorpusRoots",
        |root: &TreeNodeRow| &root.acl,
    ));
    let (memwalker_model, memwalker_spill) = (Arc::clone(model), Arc::clone(spill));
    let memwalker = memwalker_roots.map_async(
        tasks,
        "MemWalkerCorpusTree",
        InFlight::futures(),
        move |(acl, roots): (Vec<String>, SpilledGroup)| {
            let (model, spill) = (Arc::clone(&memwalker_model), Arc::clone(&memwalker_spill));
            async move {
                let roots: Vec<TreeNodeRow> = read_in_doc_order(&spill, roots, root_doc);
                match corpus_tree(
                    &roots,
                    model.as_ref(),
                    config.max_children,
                    config.parent_max_tokens,
                )
                .await
                {
                    Ok(nodes) => (nodes.into_iter())
                        .map(|node| MemoryRow::TreeNode(node.labelled(&acl)))
                        .collect(),
                    Err(error) => vec![corpus_error(&error, "memwalker", &acl)],
                }
            }
        },
    );
    let raptor_roots = changes_only(corpus_roots(
        raptor_roots,
        spill,
        "RaptorCorpusRoots",
        |(root, _): &(TreeNodeRow, EmbeddingRow)| &root.acl,
    ));
    let (raptor_model, raptor_embedder) = (Arc::clone(model), Arc::clone(embedder));
    let raptor_spill = Arc::clone(spill);
    let raptor = raptor_roots.map_async(
        tasks,
        "RaptorCorpusTree",
        InFlight::futures(),
        move |(acl, roots): (Vec<String>, SpilledGroup)| {
            let (model, embedder) = (Arc::clone(&raptor_model), Arc::clone(&raptor_embedder));
            let spill = Arc::clone(&raptor_spill);
            async move {
                let roots: Vec<RaptorNode> =
                    read_in_doc_order(&spill, roots, |(root, _): &(TreeNodeRow, EmbeddingRow)| {
                        root_doc(root)
                    })
                    .into_iter()
                    .map(|(row, vector)| RaptorNode {
                        row,
                        vector: vector.vector,
                    })
                    .collect();
                match raptor_corpus_tree(&roots, model.as_ref(), embedder.as_ref(), &config.raptor)
                    .await
                {
                    Ok(nodes) => nodes
                        .into_iter()
                        .flat_map(|n| {
                            let model = embedder.model();
                            let vector = EmbeddingRow::new(&n.row.node_id, "node", model, n.vector);
                            [
                                MemoryRow::Embedding(vector.labelled(&acl)),
                                MemoryRow::TreeNode(n.row.labelled(&acl)),
                            ]
                        })
                        .collect(),
                    Err(error) => vec![corpus_error(&error, "raptor", &acl)],
                }
            }
        },
    );
    memwalker.concat(raptor)
}

/// Every document root of one label set's corpus tree, gathered (as spill
/// keys) on the worker that builds that tree: a group per set, rebuilt
/// whenever one of its roots changes. A root names its document, so no two
/// documents' roots share a key.
fn corpus_roots<'scope, R: ExchangeData + serde::Serialize>(
    roots: VecCollection<'scope, u64, R, isize>,
    spill: &Arc<Spill>,
    name: &'static str,
    labels: fn(&R) -> &Vec<String>,
) -> VecCollection<'scope, u64, (Vec<String>, SpilledGroup), isize> {
    let group_spill = Arc::clone(spill);
    let roots = spill_where_used(
        roots,
        spill,
        name,
        move |root| labels(root).hashed(),
        Spill::put,
        move |root, text, _| (labels(root).clone(), text),
    );
    reduce_in_spill(roots, spill, name, move |_, roots| {
        vec![spill_group(&group_spill, roots)]
    })
}

/// The document a document tree's root belongs to (every one has one).
fn root_doc(root: &TreeNodeRow) -> &str {
    root.doc_id.as_deref().unwrap_or_default()
}

/// The error of the corpus `tree` of the label set `acl`: named by the set,
/// so that two sets' trees failing alike are two rows.
fn corpus_error(error: &StepError, tree: &str, acl: &[String]) -> MemoryRow {
    let source = match acl {
        [] => "corpus".to_string(),
        labels => format!("corpus {}", labels.join(",")),
    };
    let row = ErrorRow::new(
        "build",
        &source,
        None,
        error.kind(),
        &format!("{error}; the corpus {tree} tree was not built"),
    );
    MemoryRow::Error(row.labelled(acl))
}
