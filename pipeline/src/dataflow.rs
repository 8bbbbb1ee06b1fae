//! The indexing dataflow: documents in as a differential collection, every memory
//! table's rows out as collections derived from it.
//!
//! Documents are a collection of (doc_id, version, text) records from the start, so
//! an update (retract the old version, insert the new) or a delete (retract) flows
//! through every derived table and recomputes only what depends on it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

use differential_dataflow::VecCollection;
use differential_dataflow::input::{Input, InputSession};
use differential_dataflow::{AsCollection, Data, ExchangeData, Hashable};
use memweave_operators::build::{BuildConfig, BuiltRow, Document, build_document};
use memweave_operators::embed::{Embedder, embed_all};
use memweave_operators::graph::{
    DocEntity, DocRelation, GraphConfig, entity_rows, merge_relations_across, relation_row,
    resolve_entities,
};
use memweave_operators::model::{CallContext, MemoryModel, StepError};
use memweave_operators::raptor::{RaptorNode, raptor_corpus_tree};
use memweave_operators::tokens::count_tokens;
use memweave_operators::tree::corpus_tree;
use memweave_schemas::{
    DocStateRow, DocumentRow, EmbeddingRow, EntityRow, ErrorRow, MemoryRow, RelationRow,
    TreeNodeRow, hash128,
};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::{Exchange as ExchangePact, Pipeline};
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::vec::Filter;
use timely::dataflow::operators::{Capability, Exchange, Inspect, Probe};

use crate::async_map::{InFlight, map_async};
use crate::error::StagingError;
use crate::progress::StageProgress;
use crate::spill::{Spill, SpillKey, SpilledGroup};
use crate::state::{self, DocState};
use crate::write::{Batch, RoundWriter, StagedPart};
use timely::worker::Worker;

/// What the cross-document graph stages produce.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum GraphRow {
    Entity(EntityRow),
    /// On its way to a target name's group (see [`graph_stages`]), not a row.
    ToTarget(Tag, TargetMention),
    Relation(RelationRow),
    Embedding(EmbeddingRow),
    Error(ErrorRow),
}

/// What the input collection holds: documents, each with the time it was
/// first seen, and (at a restore time only) the states a new process restores.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Fed {
    Document(Document, i64),
    Restored(DocStateRow),
}

pub type DocumentInput = InputSession<u64, Fed, isize>;

/// What building a document gives: its memory's rows, and its state. (Nearly
/// every value is a row: boxing them to even the variants would allocate once
/// per row.)
#[allow(clippy::large_enum_variant)]
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum Built {
    Row(BuiltRow),
    State(DocStateRow),
}

/// The dataflow's handles: its input; probes that tell when an input epoch
/// has been fully processed per document (`documents`) and when a round's
/// rows are all staged, every stage of every worker (`everything`); and, at
/// worker 0, what every worker staged.
pub struct Handles {
    pub input: DocumentInput,
    pub documents: ProbeHandle<u64>,
    pub everything: ProbeHandle<u64>,
    pub staged: Rc<RefCell<Vec<Result<StagedPart, StagingError>>>>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles")
            .field("documents", &self.documents)
            .field("everything", &self.everything)
            .finish_non_exhaustive()
    }
}

/// Bits of a timestamp that number the input epochs within one phase of a
/// round.
const EPOCH_BITS: u32 = 32;
/// The bit above them: set in a round's changes, clear in its restore.
const CHANGES: u64 = 1 << EPOCH_BITS;

/// The first time of round `round`: its restore's first epoch. A round is one
/// batch of changes committed together (a bulk build, one `--watch` poll, one
/// batch of Kafka messages).
pub fn round_start(round: u64) -> u64 {
    round << (EPOCH_BITS + 1)
}

/// The time of input epoch `epoch` of round `round`'s changes; the epochs
/// pace the per-document stages.
pub fn round_time(round: u64, epoch: u64) -> u64 {
    round_start(round) | CHANGES | epoch
}

/// The time of epoch `epoch` of round `round`'s restore: a new process feeds
/// the documents' states there, before the round's changes, so that the
/// cross-document stages hold what the last process held. What the restore
/// makes is what the tables hold already: it is not written.
pub fn restore_time(round: u64, epoch: u64) -> u64 {
    round_start(round) | epoch
}

fn is_restore(time: &u64) -> bool {
    time & CHANGES == 0
}

/// The last time of the phase (restore or changes) of the round `time`
/// belongs to: where the cross-document stages see it.
fn phase_end(time: &u64) -> u64 {
    time | (CHANGES - 1)
}

/// `collection` without its updates at restore times: a stage that only
/// makes rows (a merge, a corpus tree) has nothing to do there.
fn changes_only<'scope, D: Data>(
    collection: VecCollection<'scope, u64, D, isize>,
) -> VecCollection<'scope, u64, D, isize> {
    collection
        .inner
        .filter(|(_, time, _)| !is_restore(time))
        .as_collection()
}

/// Builds the indexing dataflow in `worker`; returns its handles. The stages
/// that see many documents at once (entity resolution, relation merging,
/// corpus trees) see all of a round's epochs at the round's end: a bulk build
/// resolves each name once, instead of once per epoch that added a document
/// mentioning it (each time with a different prompt, which the cache cannot
/// answer). Every worker stages its own output rows with `writer`; what it
/// staged goes to worker 0.
pub fn build(
    worker: &mut Worker,
    model: &Arc<dyn MemoryModel>,
    embedder: &Arc<dyn Embedder>,
    config: BuildConfig,
    writer: &Arc<RoundWriter>,
    runtime: &tokio::runtime::Handle,
    stages: &Arc<StageProgress>,
) -> Handles {
    let staged = Rc::new(RefCell::new(Vec::new()));
    let probe = ProbeHandle::new();
    let settled = ProbeHandle::new();
    let at = phase_end;
    let made_by = state::fingerprint(&config, model.as_ref(), embedder.as_ref());
    // Each worker's spill of the texts its cross-document stages read back.
    let spill = Arc::new(
        Spill::new()
            .unwrap_or_else(|error| panic!("creating the spill file under TMPDIR: {error}")),
    );
    let input = worker.dataflow::<u64, _, _>(|scope| {
        let (input, fed) = scope.new_collection::<Fed, isize>();

        // Input carries one version per document id (the main thread settles
        // claims); documents spread over every worker of every process by id.
        // No stage arranges them: a text lives in the dataflow only while its
        // memory is built.
        let documents = fed
            .clone()
            .flat_map(|fed| match fed {
                Fed::Document(doc, seen) => Some((doc, seen)),
                Fed::Restored(_) => None,
            })
            .inner
            .exchange(|((doc, _), _, _)| doc.doc_id.hashed())
            .as_collection();
        // A restored state stands for the rows its document's build gave the
        // cross-document stages.
        let restored = fed.flat_map(|fed| match fed {
            Fed::Restored(row) => restored_rows(&row),
            Fed::Document(..) => Vec::new(),
        });

        let document_rows = documents
            .clone()
            .map(|(doc, seen)| document_row(&doc, seen));
        let docs = documents.map(|(doc, _)| doc);

        // The memory of each document, built asynchronously: the document's model
        // calls run concurrently on the runtime, and many documents are in flight.
        let corpus_model = Arc::clone(model);
        let graph_model = Arc::clone(model);
        let doc_embedder = Arc::clone(embedder);
        let doc_model = Arc::clone(model);
        let built = map_async(
            docs,
            runtime.clone(),
            "BuildMemory",
            stages,
            InFlight::futures(),
            move |doc: Document| {
                let model = Arc::clone(&doc_model);
                let embedder = Arc::clone(&doc_embedder);
                let made_by = made_by.clone();
                async move {
                    let rows =
                        build_document(&doc, &config, model.as_ref(), embedder.as_ref()).await;
                    let state = DocState::row(&doc.doc_id, &made_by, &rows, config.corpus_tree);
                    rows.into_iter()
                        .map(Built::Row)
                        .chain([Built::State(state)])
                        .collect::<Vec<_>>()
                }
            },
        );
        let doc_states = built.clone().flat_map(|built| match built {
            Built::State(state) => Some(state),
            Built::Row(_) => None,
        });
        let memory = built
            .flat_map(|built| match built {
                Built::Row(row) => Some(row),
                Built::State(_) => None,
            })
            .concat(restored);
        let segments = memory.clone().flat_map(|row| match row {
            BuiltRow::Segment(s) => Some(s),
            _ => None,
        });
        let document_tree_nodes = memory.clone().flat_map(|row| match row {
            BuiltRow::TreeNode(n) => Some(n),
            _ => None,
        });
        let pages = memory.clone().flat_map(|row| match row {
            BuiltRow::Page(p) => Some(p),
            _ => None,
        });
        let gist_memories = memory.clone().flat_map(|row| match row {
            BuiltRow::GistMemory(g) => Some(g),
            _ => None,
        });
        let doc_entities = memory.clone().flat_map(|row| match row {
            BuiltRow::Entity(e) => Some(e),
            _ => None,
        });
        let doc_relations = memory.clone().flat_map(|row| match row {
            BuiltRow::Relation(r) => Some(r),
            _ => None,
        });
        let doc_embeddings = memory.clone().flat_map(|row| match row {
            BuiltRow::Embedding(e) => Some(e),
            _ => None,
        });
        let corpus = config.corpus_tree.then(|| {
            // Only the roots (and the RAPTOR roots' vectors) reach the corpus trees.
            let memwalker_roots = document_tree_nodes
                .clone()
                .filter(state::is_memwalker_root)
                .delay(at);
            let raptor_roots = memory
                .clone()
                .flat_map(|row| match row {
                    BuiltRow::RaptorRoot(root, vector) => Some((root, vector)),
                    _ => None,
                })
                .delay(at);
            corpus_trees(
                memwalker_roots,
                raptor_roots,
                &spill,
                &corpus_model,
                embedder,
                config,
                runtime,
                stages,
            )
        });
        let build_errors = memory.flat_map(|row| match row {
            BuiltRow::Error(e) => Some(e),
            _ => None,
        });
        let graph = graph_stages(
            doc_entities.delay(at),
            doc_relations.delay(at),
            &spill,
            &graph_model,
            embedder,
            config.graph,
            runtime,
            stages,
        );
        let entities = graph.clone().flat_map(|row| match row {
            GraphRow::Entity(e) => Some(e),
            _ => None,
        });
        let relations = graph.clone().flat_map(|row| match row {
            GraphRow::Relation(r) => Some(r),
            _ => None,
        });
        let embeddings = graph.clone().flat_map(|row| match row {
            GraphRow::Embedding(e) => Some(e),
            _ => None,
        });
        let errors = graph.flat_map(|row| match row {
            GraphRow::Error(e) => Some(e),
            _ => None,
        });

        // Per document, then across documents (at the round's end).
        let mut rows = document_rows
            .map(MemoryRow::Document)
            .concat(segments.map(MemoryRow::Segment))
            .concat(pages.map(MemoryRow::Page))
            .concat(gist_memories.map(MemoryRow::GistMemory))
            .concat(document_tree_nodes.map(MemoryRow::TreeNode))
            .concat(doc_embeddings.map(MemoryRow::Embedding))
            .concat(build_errors.map(MemoryRow::Error))
            .concat(doc_states.map(MemoryRow::DocState))
            .probe_with(&probe)
            .concat(entities.map(MemoryRow::Entity))
            .concat(relations.map(MemoryRow::Relation));
        if let Some(corpus) = corpus {
            rows = rows.concat(corpus);
        }
        let rows = rows
            .concat(embeddings.map(MemoryRow::Embedding))
            .concat(errors.map(MemoryRow::Error));
        let collected = Rc::clone(&staged);
        write_rows(rows, Arc::clone(writer), runtime.clone())
            .exchange(|_| 0)
            .inspect(move |part| collected.borrow_mut().push(part.clone()))
            .probe_with(&settled);
        input
    });
    Handles {
        input,
        documents: probe,
        everything: settled,
        staged,
    }
}

/// The corpus-level trees, rebuilt over every document root whenever one
/// changes (unchanged groups and clusters are answered by the call cache): a
/// MemWalker tree over the MemWalker roots, a RAPTOR tree over the RAPTOR roots
/// and their vectors. Like the graph's mentions, the roots are spilled by the
/// one worker that builds the trees: the arrangements hold a spill key per
/// root, and the roots are read back when a tree is rebuilt.
#[allow(clippy::too_many_arguments)]
fn corpus_trees<'scope>(
    memwalker_roots: VecCollection<'scope, u64, TreeNodeRow, isize>,
    raptor_roots: VecCollection<'scope, u64, (TreeNodeRow, EmbeddingRow), isize>,
    spill: &Arc<Spill>,
    model: &Arc<dyn MemoryModel>,
    embedder: &Arc<dyn Embedder>,
    config: BuildConfig,
    runtime: &tokio::runtime::Handle,
    stages: &Arc<StageProgress>,
) -> VecCollection<'scope, u64, MemoryRow, isize> {
    let memwalker_roots =
        changes_only(corpus_roots(memwalker_roots, spill, "MemWalkerCorpusRoots"));
    let (memwalker_model, memwalker_spill) = (Arc::clone(model), Arc::clone(spill));
    let memwalker = map_async(
        memwalker_roots,
        runtime.clone(),
        "MemWalkerCorpusTree",
        stages,
        InFlight::futures(),
        move |roots: SpilledGroup| {
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
                    Ok(nodes) => nodes.into_iter().map(MemoryRow::TreeNode).collect(),
                    Err(error) => vec![corpus_error(&error, "memwalker")],
                }
            }
        },
    );
    let raptor_roots = changes_only(corpus_roots(raptor_roots, spill, "RaptorCorpusRoots"));
    let (raptor_model, raptor_embedder) = (Arc::clone(model), Arc::clone(embedder));
    let raptor_spill = Arc::clone(spill);
    let raptor = map_async(
        raptor_roots,
        runtime.clone(),
        "RaptorCorpusTree",
        stages,
        InFlight::futures(),
        move |roots: SpilledGroup| {
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
                            [MemoryRow::Embedding(vector), MemoryRow::TreeNode(n.row)]
                        })
                        .collect(),
                    Err(error) => vec![corpus_error(&error, "raptor")],
                }
            }
        },
    );
    memwalker.concat(raptor)
}

/// Every document root of one corpus tree, gathered (as spill keys) on the
/// worker that builds the tree: one group, rebuilt whenever a root changes. A
/// root names its document, so no two documents' roots share a key.
fn corpus_roots<'scope, R: ExchangeData + serde::Serialize>(
    roots: VecCollection<'scope, u64, R, isize>,
    spill: &Arc<Spill>,
    name: &'static str,
) -> VecCollection<'scope, u64, SpilledGroup, isize> {
    let group_spill = Arc::clone(spill);
    spill_where_used(roots, spill, name, |_| ().hashed(), |_, text| ((), text))
        .reduce_named(name, move |(), roots, out| {
            out.push((spill_group(&group_spill, roots), 1));
        })
        .map(|((), roots)| roots)
}

/// The document a document tree's root belongs to (every one has one).
fn root_doc(root: &TreeNodeRow) -> &str {
    root.doc_id.as_deref().unwrap_or_default()
}

fn corpus_error(error: &StepError, tree: &str) -> MemoryRow {
    MemoryRow::Error(ErrorRow::new(
        "build",
        "corpus",
        None,
        error.kind(),
        &format!("{error}; the corpus {tree} tree was not built"),
    ))
}

/// The graph across documents: each normalised name's entities, one per
/// document, resolved into entities (and embedded); relations re-keyed by the
/// entities their ends became, and one pair's relations from several documents
/// merged. A step the model fails falls back to the name alone (one entity per
/// name; relation descriptions joined) and reports an error: nothing is lost.
///
/// The mentions' texts are spilled (see [`crate::spill`]) by the worker that
/// resolves their name or merges their pair; the arrangements hold ids, names
/// and spill keys, and a group's texts are read back when its future runs.
///
/// A relation takes its ends' entities on its way through the names: it is
/// grouped with its source's name, whose resolution gives it the source's
/// entity in its document, then with its target's name beside that name's
/// entities, which gives it the target's and so its pair; every relation of
/// a pair ends at that name, so the name's group hands on whole pairs. Each of
/// the two arrangements holds a relation as a name and a spill key.
#[allow(clippy::too_many_arguments)] // the graph's inputs and its services; issue 23 groups them
fn graph_stages<'scope>(
    doc_entities: VecCollection<'scope, u64, DocEntity, isize>,
    doc_relations: VecCollection<'scope, u64, DocRelation, isize>,
    spill: &Arc<Spill>,
    model: &Arc<dyn MemoryModel>,
    embedder: &Arc<dyn Embedder>,
    config: GraphConfig,
    runtime: &tokio::runtime::Handle,
    stages: &Arc<StageProgress>,
) -> VecCollection<'scope, u64, GraphRow, isize> {
    let (name_spill, target_spill) = (Arc::clone(spill), Arc::clone(spill));
    // A relation's text is spilled where its pair is merged: on the worker
    // of its target's name, whose group pairs it. Its source's name carries
    // only where that is.
    let relation_refs = spill_where_used(
        doc_relations,
        spill,
        "SpillRelations",
        relation_route,
        |r, text| {
            let (source, target) = (tag(&r.source_key), tag(&r.target_key));
            NameMention::Relation(RelationRef {
                doc: tag(&r.doc_id),
                source,
                target,
                text,
            })
        },
    );
    let by_name = spill_where_used(
        doc_entities.map(NameMention::Entity).concat(relation_refs),
        spill,
        "SpillNames",
        |m| name_route(m.name()),
        |m, text| (m.name(), text),
    )
    .reduce_named("MentionsByName", move |_name, mentions, out| {
        out.push((spill_group(&name_spill, mentions), 1));
    })
    .map(|(_name, mentions)| mentions);
    let (model_e, embedder_e, spill_e) =
        (Arc::clone(model), Arc::clone(embedder), Arc::clone(spill));
    let resolved = map_async(
        by_name,
        runtime.clone(),
        "ResolveEntities",
        stages,
        InFlight {
            weight: |group| group.len,
            budget: MENTIONS_IN_FLIGHT,
        },
        move |group: SpilledGroup| {
            let (model, embedder) = (Arc::clone(&model_e), Arc::clone(&embedder_e));
            let spill = Arc::clone(&spill_e);
            async move {
                let (mut mentions, relations): (Vec<DocEntity>, Vec<RelationRef>) =
                    split_name_mentions(read_group(&spill, group));
                let mut out = Vec::new();
                // A relation's source is one of its document's entities, so a
                // group with relations has mentions; the check keeps a bad
                // extraction from panicking the worker.
                if mentions.is_empty() {
                    return out;
                }
                mentions.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
                let resolved =
                    resolve_entities(&mentions, model.as_ref(), embedder.as_ref(), &config).await;
                let (rows, assignments) = match resolved {
                    Ok(resolved) => resolved,
                    Err(error) => {
                        out.push(GraphRow::Error(graph_error(
                            &mentions[0].key,
                            &error,
                            "its documents' entities were merged by name alone",
                        )));
                        entity_rows(&[mentions.iter().collect()])
                    }
                };
                let texts: Vec<String> = rows
                    .iter()
                    .map(|r| format!("{}: {}", r.name, r.description))
                    .collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match embed_all(embedder.as_ref(), &CallContext::corpus("embed"), &refs).await {
                    Ok(vectors) => out.extend(rows.iter().zip(vectors).map(|(r, v)| {
                        GraphRow::Embedding(EmbeddingRow::new(
                            &r.entity_id,
                            "entity",
                            embedder.model(),
                            v,
                        ))
                    })),
                    Err(error) => out.push(GraphRow::Error(graph_error(
                        &mentions[0].key,
                        &error,
                        "its entities have no vectors",
                    ))),
                }
                out.extend(rows.into_iter().map(GraphRow::Entity));
                // Which entity the name became in each document: for the
                // relations it starts, and those it ends (at its own name).
                let entity_in: BTreeMap<Tag, Tag> = assignments
                    .iter()
                    .map(|a| (tag(&a.doc_id), entity_tag(&a.entity_id)))
                    .collect();
                out.extend(relations.into_iter().filter_map(|r| {
                    let source_id = *entity_in.get(&r.doc)?;
                    let mention = TargetMention::Relation {
                        doc: r.doc,
                        source_id,
                        text: r.text,
                    };
                    Some(GraphRow::ToTarget(r.target, mention))
                }));
                let name = tag(&mentions[0].key);
                out.extend(entity_in.into_iter().map(|(doc, entity_id)| {
                    GraphRow::ToTarget(name, TargetMention::Entity { doc, entity_id })
                }));
                out
            }
        },
    );
    let to_targets = resolved.clone().flat_map(|row| match row {
        GraphRow::ToTarget(name, mention) => Some((name, mention)),
        _ => None,
    });
    // Every relation of a pair ends at the pair's target's name (an entity
    // has one name), so the name's group holds whole pairs: no model call,
    // the target's entity in the relation's document, read from the spill.
    let pairs = spill_where_used(
        to_targets,
        spill,
        "SpillTargets",
        |(name, _)| name_route(*name),
        |(name, _), text| (*name, text),
    )
    .reduce_named("PairsByTarget", move |_name, found, out| {
        let found: Vec<(Tag, TargetMention)> = found
            .iter()
            .map(|(key, _)| target_spill.get(**key))
            .collect();
        for (pair, relations) in target_pairs(found) {
            out.push(((pair, SpilledGroup::put(&target_spill, &relations)), 1));
        }
    })
    .map(|(_name, pair)| pair);
    let (model_r, spill_r) = (Arc::clone(model), Arc::clone(spill));
    let relations = map_async(
        changes_only(pairs),
        runtime.clone(),
        "MergeRelations",
        stages,
        InFlight {
            weight: |(_, group)| group.len,
            budget: MENTIONS_IN_FLIGHT,
        },
        move |(pair, group): (PairKey, SpilledGroup)| {
            let model = Arc::clone(&model_r);
            let spill = Arc::clone(&spill_r);
            async move {
                let found: Vec<DocRelation> =
                    read_in_doc_order(&spill, group, |r: &DocRelation| &r.doc_id);
                let (source_id, target_id) =
                    (&entity_id(pair.source_id), &entity_id(pair.target_id));
                let merged =
                    merge_relations_across(source_id, target_id, &found, model.as_ref(), &config)
                        .await;
                match merged {
                    Ok(row) => vec![GraphRow::Relation(row)],
                    Err(error) => {
                        let joined = found
                            .iter()
                            .map(|r| r.description.as_str())
                            .collect::<Vec<_>>()
                            .join(" ");
                        vec![
                            GraphRow::Error(graph_error(
                                &format!("{source_id} -> {target_id}"),
                                &error,
                                "its descriptions were joined unmerged",
                            )),
                            GraphRow::Relation(relation_row(source_id, target_id, &found, joined)),
                        ]
                    }
                }
            }
        },
    );
    resolved
        .filter(|row| !matches!(row, GraphRow::ToTarget(..)))
        .concat(relations)
}

/// Mentions one worker resolves or merges at once: a name's or a pair's
/// mentions are read back from the spill while its future runs, and a popular
/// name has thousands. A relation mention carries its evidence segment, and
/// its merges' prompts and replies are held until the group is merged: about
/// 15 KiB a mention at a round's end (jemalloc's heap profile at 10M tokens).
/// Still enough for hundreds of model calls in flight.
const MENTIONS_IN_FLIGHT: usize = 2_048;

/// A string (a document id, a name key) as the graph's arrangements hold it:
/// 128 bits of its hash, where the string cost a heap block in every copy of
/// every arrangement.
type Tag = u128;

fn tag(text: &str) -> Tag {
    hash128(text.as_bytes())
}

/// An entity id (32 hex digits, a [`memweave_schemas::content_id`]) as 128
/// bits, and back: the arrangements hold the number, the rows the text.
fn entity_tag(entity_id: &str) -> Tag {
    Tag::from_str_radix(entity_id, 16)
        .unwrap_or_else(|_| panic!("entity id {entity_id:?} is 32 hex digits"))
}

fn entity_id(tag: Tag) -> String {
    format!("{tag:032x}")
}

/// A reduce's group: its values' spill keys (in key order), spilled as one list.
fn spill_group<K>(spill: &Spill, values: &[(&SpillKey, K)]) -> SpilledGroup {
    let keys: Vec<SpillKey> = values.iter().map(|(key, _)| **key).collect();
    SpilledGroup::put(spill, &keys)
}

/// The spilled values of `group`, in its keys' order.
fn read_group<T: serde::de::DeserializeOwned>(spill: &Spill, group: SpilledGroup) -> Vec<T> {
    group
        .keys(spill)
        .into_iter()
        .map(|text| spill.get(text))
        .collect()
}

/// The spilled values of `group`, in the order of their documents' ids (ties
/// in key order): the order resolution and merging expect.
fn read_in_doc_order<T: serde::de::DeserializeOwned, K: Ord + ?Sized>(
    spill: &Spill,
    group: SpilledGroup,
    doc_id: impl Fn(&T) -> &K,
) -> Vec<T> {
    let mut values: Vec<T> = read_group(spill, group);
    values.sort_by(|a, b| doc_id(a).cmp(doc_id(b)));
    values
}

/// What a name's group holds: the documents' mentions of the name, and the
/// relations whose source it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
enum NameMention {
    Entity(DocEntity),
    Relation(RelationRef),
}

impl NameMention {
    /// The name it is grouped by.
    fn name(&self) -> Tag {
        match self {
            NameMention::Entity(e) => tag(&e.key),
            NameMention::Relation(r) => r.source,
        }
    }
}

/// A relation as the names at its ends see it; its text stays spilled on its
/// target name's worker ([`relation_route`]), which merges its pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct RelationRef {
    doc: Tag,
    source: Tag,
    target: Tag,
    text: SpillKey,
}

/// A name's group's mentions (in key order) and relations.
fn split_name_mentions(found: Vec<NameMention>) -> (Vec<DocEntity>, Vec<RelationRef>) {
    let (mut mentions, mut relations) = (Vec::new(), Vec::new());
    for mention in found {
        match mention {
            NameMention::Entity(e) => mentions.push(e),
            NameMention::Relation(r) => relations.push(r),
        }
    }
    (mentions, relations)
}

/// What a name's group sends to a target name's group: the entity the name
/// became in one document, or a relation ending at the name, with the entity
/// its source became.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum TargetMention {
    Entity {
        doc: Tag,
        entity_id: Tag,
    },
    Relation {
        doc: Tag,
        source_id: Tag,
        text: SpillKey,
    },
}

/// A target name's relations by pair, each pair's in key order (the order its
/// group is spilled in): the target is the entity the name became in the
/// relation's document. A relation whose document has no entity of that name
/// has no pair (the extraction keeps only relations between the document's
/// entities).
fn target_pairs(found: Vec<(Tag, TargetMention)>) -> BTreeMap<PairKey, Vec<SpillKey>> {
    let entity_in: BTreeMap<Tag, Tag> = found
        .iter()
        .filter_map(|(_, m)| match m {
            TargetMention::Entity { doc, entity_id } => Some((*doc, *entity_id)),
            TargetMention::Relation { .. } => None,
        })
        .collect();
    let mut pairs: BTreeMap<PairKey, Vec<SpillKey>> = BTreeMap::new();
    for (_, mention) in found {
        if let TargetMention::Relation {
            doc,
            source_id,
            text,
        } = mention
            && let Some(&target_id) = entity_in.get(&doc)
        {
            let pair = PairKey {
                source_id,
                target_id,
            };
            pairs.entry(pair).or_default().push(text);
        }
    }
    for relations in pairs.values_mut() {
        relations.sort_unstable();
        relations.dedup();
    }
    pairs
}

/// The worker that groups a name's mentions (and spills them).
fn name_route(name: Tag) -> u64 {
    name.hashed()
}

/// The worker a relation's text is spilled on: its target name's, whose group
/// pairs it and whose worker merges the pair.
fn relation_route(relation: &DocRelation) -> u64 {
    name_route(tag(&relation.target_key))
}

/// What relations are merged by: the entities at their ends.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
struct PairKey {
    source_id: Tag,
    target_id: Tag,
}

/// Sends each update to the worker `route` names, spills it there, and passes
/// on `slim(update, its spill key)` in its place.
fn spill_where_used<'scope, D, O>(
    collection: VecCollection<'scope, u64, D, isize>,
    spill: &Arc<Spill>,
    name: &str,
    route: impl Fn(&D) -> u64 + 'static,
    slim: impl Fn(&D, SpillKey) -> O + 'static,
) -> VecCollection<'scope, u64, O, isize>
where
    D: ExchangeData,
    O: Data,
{
    let spill = Arc::clone(spill);
    collection
        .inner
        .unary::<CapacityContainerBuilder<Vec<(O, u64, isize)>>, _, _, _>(
            ExchangePact::new(move |(update, _, _): &(D, u64, isize)| route(update)),
            name,
            move |_, _| {
                move |input, output| {
                    input.for_each(|capability, updates| {
                        let mut session = output.session(&capability);
                        for (update, time, diff) in updates.drain(..) {
                            let text = spill.put(&update);
                            session.give((slim(&update, text), time, diff));
                        }
                    });
                }
            },
        )
        .as_collection()
}

fn graph_error(subject: &str, error: &StepError, fallback: &str) -> ErrorRow {
    ErrorRow::new(
        "graph",
        subject,
        None,
        error.kind(),
        &format!("{error}; {fallback}"),
    )
}

/// Stages output rows where they are produced (see [`crate::write`]): each
/// round's rows are buffered and written as a batch whenever
/// [`RoundWriter::batch_rows`] have gathered, and the rest once the round's
/// input is complete. What each batch staged is emitted at the round's end
/// time, so the output's frontier passes a round only when every row of it is
/// staged.
fn write_rows<'scope>(
    rows: VecCollection<'scope, u64, MemoryRow, isize>,
    writer: Arc<RoundWriter>,
    runtime: tokio::runtime::Handle,
) -> Stream<'scope, u64, Vec<Result<StagedPart, StagingError>>> {
    let worker = rows.inner.scope().worker();
    rows.inner
        .unary_frontier::<CapacityContainerBuilder<Vec<Result<StagedPart, StagingError>>>, _, _, _>(
            Pipeline,
            "StageRows",
            move |_initial, info| {
                let activator = worker.sync_activator_for(info.address.to_vec());
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                // Per round (by its end time): the capability to emit at it, the
                // rows not yet written and the batches being written.
                let mut rounds: BTreeMap<u64, PendingRound> = BTreeMap::new();
                move |(input, frontier), output| {
                    let mut full = Vec::new();
                    input.for_each(|capability, updates| {
                        for (row, time, diff) in updates.drain(..) {
                            if is_restore(&time) {
                                continue;
                            }
                            let end = phase_end(&time);
                            let round = rounds.entry(end).or_insert_with(|| PendingRound {
                                capability: capability.delayed(&end, output.output_index()),
                                rows: Batch::new(),
                                writing: 0,
                            });
                            let count = round.rows.entry(row).or_insert(0);
                            *count += diff;
                            if round.rows.len() >= writer.batch_rows() {
                                full.push(end);
                            }
                        }
                    });
                    let complete: Vec<u64> = rounds
                        .keys()
                        .copied()
                        .filter(|end| !frontier.less_equal(end))
                        .collect();
                    for end in full.into_iter().chain(complete.iter().copied()) {
                        let Some(round) = rounds.get_mut(&end) else {
                            continue;
                        };
                        round.rows.retain(|_, diff| *diff != 0);
                        if round.rows.is_empty() {
                            continue;
                        }
                        let batch = std::mem::take(&mut round.rows);
                        round.writing += 1;
                        // Waiting here for a free write holds the worker, and so
                        // its input, back until the disk catches up.
                        let permit = runtime.block_on(writer.permit());
                        let (writer, done, activator) =
                            (Arc::clone(&writer), done_tx.clone(), activator.clone());
                        runtime.spawn(async move {
                            let staged = writer.stage(batch).await.map_err(StagingError::from);
                            drop(permit);
                            // The operator is gone only when the dataflow is.
                            let _ = done.send((end, staged));
                            let _ = activator.activate();
                        });
                    }
                    while let Ok((end, staged)) = done_rx.try_recv() {
                        let round = rounds.get_mut(&end).expect("a round writing is pending");
                        output.session(&round.capability).give(staged);
                        round.writing -= 1;
                    }
                    for end in complete {
                        if rounds
                            .get(&end)
                            .is_some_and(|r| r.writing == 0 && r.rows.is_empty())
                        {
                            rounds.remove(&end);
                        }
                    }
                }
            },
        )
}

/// A round's rows at one worker's [`write_rows`], until all are staged.
struct PendingRound {
    capability: Capability<u64>,
    rows: Batch,
    writing: usize,
}

/// The rows a document's build gave the cross-document stages, as its state
/// row keeps them.
fn restored_rows(row: &DocStateRow) -> Vec<BuiltRow> {
    let state = DocState::of_row(row).unwrap_or_else(|e| {
        panic!(
            "document {}: its doc_states row does not read: {e}",
            row.doc_id
        )
    });
    state.into_built_rows()
}

fn document_row(doc: &Document, seen: i64) -> DocumentRow {
    DocumentRow {
        doc_id: doc.doc_id.clone(),
        source_uri: doc.source_uri.clone(),
        content_hash: doc.content_hash.clone(),
        version: doc.version,
        title: doc.title.clone(),
        n_chars: doc.text.chars().count() as u64,
        n_tokens: count_tokens(&doc.text) as u64,
        ingested_at: seen,
        deleted: false,
        text: doc.text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use memweave_llm::TaskModel;
    use memweave_operators::build::segment_rows;
    use memweave_operators::embed::HashingEmbedder;
    use memweave_operators::ingest::RawDocument;
    use memweave_operators::paginate::PageConfig;
    use memweave_operators::segment::SegmentConfig;
    use memweave_schemas::{PageRow, SegmentRow, TableStore};

    use super::*;

    fn config() -> BuildConfig {
        BuildConfig::new(
            SegmentConfig::around(40),
            PageConfig {
                min_words: 20,
                max_words: 60,
                gist_word_budget: 0,
            },
            4,
        )
    }

    fn document(key: &str, source: &str, text: &str, version: u64) -> Document {
        Document::new(
            RawDocument {
                key: key.into(),
                source_uri: source.into(),
                title: key.into(),
                text: text.into(),
            },
            version,
        )
    }

    fn prose(topic: &str) -> String {
        (0..40)
            .map(|i| format!("Sentence {i} says something about {topic} and its many sides."))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The memory tables' rows after the last round.
    struct Output {
        documents: Vec<DocumentRow>,
        segments: Vec<SegmentRow>,
        tree_nodes: Vec<TreeNodeRow>,
        pages: Vec<PageRow>,
    }

    /// Runs `rounds` of input changes through the dataflow on one worker,
    /// committing each round's staged rows to tables in a temporary folder,
    /// and reads the tables after the last.
    fn run(rounds: Vec<Vec<((Document, i64), isize)>>) -> Output {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = TableStore::local(dir.path()).expect("a store");
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let handle = runtime.handle().clone();
        let stages = StageProgress::new();
        let writer = Arc::new(RoundWriter::new(store.clone(), 32, stages, 64));
        let guards = timely::execute(timely::Config::thread(), move |worker| {
            let model: Arc<dyn MemoryModel> = Arc::new(TaskModel::extractive());
            let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::new(32));
            let stages = StageProgress::new();
            let handles = build(
                worker,
                &model,
                &embedder,
                config(),
                &writer,
                &handle,
                &stages,
            );
            let Handles {
                mut input,
                documents,
                everything,
                staged,
            } = handles;
            for (round, changes) in rounds.iter().enumerate() {
                handle.block_on(writer.prepare()).expect("tables");
                input.advance_to(round_time(round as u64, 0));
                for ((doc, seen), diff) in changes {
                    input.update(Fed::Document(doc.clone(), *seen), *diff);
                }
                input.advance_to(round_start(round as u64 + 1));
                input.flush();
                while documents.less_than(input.time()) || everything.less_than(input.time()) {
                    worker.step_or_park(Some(std::time::Duration::from_millis(5)));
                }
                let parts: Vec<StagedPart> = std::mem::take(&mut *staged.borrow_mut())
                    .into_iter()
                    .collect::<Result<_, _>>()
                    .expect("rows staged");
                handle
                    .block_on(writer.commit(round == 0, parts))
                    .expect("a commit");
            }
        })
        .expect("the dataflow starts");
        guards
            .join()
            .pop()
            .expect("one worker")
            .expect("the worker succeeds");
        runtime.block_on(async {
            Output {
                documents: store.read_rows(None).await.expect("documents"),
                segments: store.read_rows(None).await.expect("segments"),
                tree_nodes: store.read_rows(None).await.expect("tree_nodes"),
                pages: store.read_rows(None).await.expect("pages"),
            }
        })
    }

    #[test]
    fn an_update_leaves_exactly_the_rows_of_the_new_version() {
        let old = document("a.txt", "a.txt", &prose("harbours"), 1);
        let new = document("a.txt", "a.txt", &prose("lighthouses"), 2);
        let output = run(vec![
            vec![((old.clone(), 0), 1)],
            vec![((old, 0), -1), ((new.clone(), 5), 1)],
        ]);
        // The MemWalker segments and the RAPTOR chunks, both of the new version.
        let expected: HashSet<SegmentRow> = segment_rows(&new, &config().segments)
            .into_iter()
            .chain(segment_rows(&new, &config().chunks()))
            .collect();
        let got: HashSet<SegmentRow> = output.segments.iter().cloned().collect();
        assert_eq!(got, expected);
        assert_eq!(output.segments.len(), expected.len(), "each row once");
        assert_eq!(output.documents.len(), 1);
        let row = &output.documents[0];
        assert_eq!((row.version, row.ingested_at), (2, 5));
        assert!(
            output
                .tree_nodes
                .iter()
                .all(|n| n.summary.contains("lighthouses"))
        );
        assert!(output.pages.iter().all(|p| p.text.contains("lighthouses")));
    }

    #[test]
    fn a_delete_retracts_everything_the_document_produced() {
        let doc = document("a.txt", "a.txt", &prose("harbours"), 1);
        let output = run(vec![vec![((doc.clone(), 0), 1)], vec![((doc, 0), -1)]]);
        assert!(output.documents.is_empty());
        assert!(output.segments.is_empty());
        assert!(output.tree_nodes.is_empty());
        assert!(output.pages.is_empty());
    }

    /// A relation's text is spilled where its pair is merged: on the worker of
    /// its target's name, whose group pairs it, not its source's.
    #[test]
    fn a_relation_is_spilled_where_its_target_name_is_grouped() {
        let relation = DocRelation {
            doc_id: "a.txt".to_string(),
            source_key: "ada lovelace".to_string(),
            target_key: "charles babbage".to_string(),
            description: "worked with".to_string(),
            seg_ids: vec!["s1".to_string()],
            summary: "".into(),
            evidence: "".into(),
        };
        let (source, target) = (tag("ada lovelace"), tag("charles babbage"));
        assert_eq!(relation_route(&relation), target.hashed());
        assert_ne!(relation_route(&relation), name_route(source));
    }

    /// A relation's pair is the entity its source became (given by the
    /// source's name) and the entity the target's name became in the same
    /// document; a document without that entity gives it no pair.
    #[test]
    fn a_target_group_pairs_each_relation_with_its_documents_entity() {
        let target = tag("charles babbage");
        let relation = |doc: &str, source_id: Tag, text: SpillKey| {
            let mention = TargetMention::Relation {
                doc: tag(doc),
                source_id,
                text,
            };
            (target, mention)
        };
        let entity = |doc: &str, entity_id: Tag| {
            let mention = TargetMention::Entity {
                doc: tag(doc),
                entity_id,
            };
            (target, mention)
        };
        let pairs = target_pairs(vec![
            relation("a.txt", 1, 150),
            entity("b.txt", 21),
            relation("b.txt", 1, 200),
            entity("a.txt", 20),
            relation("c.txt", 1, 300),
            relation("a.txt", 1, 100),
            relation("a.txt", 2, 400),
        ]);
        let pair = |source_id: Tag, target_id: Tag| PairKey {
            source_id,
            target_id,
        };
        let expected = BTreeMap::from([
            (pair(1, 20), vec![100, 150]),
            (pair(1, 21), vec![200]),
            (pair(2, 20), vec![400]),
        ]);
        assert_eq!(pairs, expected);
    }
}
