//! The indexing dataflow: documents in as a differential collection, every memory
//! table's rows out as collections derived from it.
//!
//! Documents are a collection of (doc_id, version, text) records from the start, so
//! an update (retract the old version, insert the new) or a delete (retract) flows
//! through every derived table and recomputes only what depends on it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

use differential_dataflow::AsCollection;
use differential_dataflow::VecCollection;
use differential_dataflow::input::{Input, InputSession};
use memweave_operators::build::{BuildConfig, Document, MemoryRow, build_document};
use memweave_operators::embed::{Embedder, EmbeddingRecord, embed_all};
use memweave_operators::graph::{
    DocEntity, DocRelation, EntityAssignment, entity_rows, merge_relations_across, relation_row,
    resolve_entities,
};
use memweave_operators::model::{CallContext, MemoryModel, StepError};
use memweave_operators::raptor::{RaptorNode, raptor_corpus_tree};
use memweave_operators::tokens::count_tokens;
use memweave_operators::tree::corpus_tree;
use memweave_schemas::{
    DocumentRow, EntityRow, ErrorRow, PageRow, RelationRow, SegmentRow, TREE_MEMWALKER,
    TREE_RAPTOR, TreeNodeRow,
};
use timely::dataflow::operators::Exchange;
use timely::dataflow::operators::probe::Handle as ProbeHandle;

use crate::async_map::map_async;
use timely::worker::Worker;

/// The rows one worker's share of the dataflow produced, with their multiplicities.
#[derive(Debug, Default)]
pub struct WorkerOutput {
    pub documents: HashMap<DocumentRow, isize>,
    pub segments: HashMap<SegmentRow, isize>,
    pub tree_nodes: HashMap<TreeNodeRow, isize>,
    pub pages: HashMap<PageRow, isize>,
    pub entities: HashMap<EntityRow, isize>,
    pub relations: HashMap<RelationRow, isize>,
    pub embeddings: HashMap<EmbeddingRecord, isize>,
    pub errors: HashMap<ErrorRow, isize>,
}

/// What the cross-document graph stages produce.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum GraphRow {
    Entity(EntityRow),
    Assignment(EntityAssignment),
    Relation(RelationRow),
    Embedding(EmbeddingRecord),
    Error(ErrorRow),
}

/// A document as the input collection holds it, with the time it was first seen.
pub type DocumentInput = InputSession<u64, (Document, i64), isize>;

/// The dataflow's handles: its input, and probes that tell when an input epoch
/// has been fully processed per document (`documents`) and across documents
/// (`everything`: the graph and the corpus trees too).
pub struct Handles {
    pub input: DocumentInput,
    pub documents: ProbeHandle<u64>,
    pub everything: ProbeHandle<u64>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles")
            .field("documents", &self.documents)
            .field("everything", &self.everything)
            .finish_non_exhaustive()
    }
}

/// Bits of a timestamp that number the input epochs within one round.
const EPOCH_BITS: u32 = 32;

/// The time of input epoch `epoch` of round `round`. A round is one batch of
/// changes committed together (a bulk build, one `--watch` poll, one batch of
/// Kafka messages); its epochs pace the per-document stages.
pub fn round_time(round: u64, epoch: u64) -> u64 {
    (round << EPOCH_BITS) | epoch
}

/// The last time of the round `time` belongs to: where the cross-document
/// stages see it.
fn round_end(time: &u64) -> u64 {
    time | ((1 << EPOCH_BITS) - 1)
}

/// Builds the indexing dataflow in `worker`; returns its handles and the shared
/// output. The stages that see many documents at once (entity resolution,
/// relation merging, corpus trees) see all of a round's epochs at the round's
/// end: a bulk build resolves each name once, instead of once per epoch that
/// added a document mentioning it (each time with a different prompt, which the
/// cache cannot answer). With `gather`, every output row goes to worker 0.
pub fn build(
    worker: &mut Worker,
    model: &Arc<dyn MemoryModel>,
    embedder: &Arc<dyn Embedder>,
    config: BuildConfig,
    gather: bool,
    runtime: &tokio::runtime::Handle,
) -> (Handles, Rc<RefCell<WorkerOutput>>) {
    let output = Rc::new(RefCell::new(WorkerOutput::default()));
    let sink = Sink {
        output: Rc::clone(&output),
        gather,
    };
    let mut probe = ProbeHandle::new();
    let mut settled = ProbeHandle::new();
    let at = round_end;
    let input = worker.dataflow::<u64, _, _>(|scope| {
        let (input, raw) = scope.new_collection::<(Document, i64), isize>();

        // One version per doc_id: two sources claiming one id keep the first (by
        // source), and the others become errors rather than vanish.
        let claimed = raw
            .map(|(doc, seen)| (doc.doc_id.clone(), (doc, seen)))
            .reduce_named("ClaimDocId", |_doc_id, claims, out| {
                let mut claims: Vec<&(Document, i64)> = claims.iter().map(|(d, _)| *d).collect();
                claims.sort_by(|a, b| a.0.source_uri.cmp(&b.0.source_uri));
                let (winner, rest) = claims.split_first().expect("reduce groups are never empty");
                out.push((Ok((*winner).clone()), 1));
                for (loser, _) in rest {
                    out.push((Err(duplicate_error(loser, &winner.0)), 1));
                }
            });
        let documents = claimed.clone().flat_map(|(_, claim)| claim.ok());
        let duplicates = claimed.flat_map(|(_, claim)| claim.err());

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
        let memory = map_async(
            docs,
            runtime.clone(),
            "BuildMemory",
            move |doc: Document| {
                let model = Arc::clone(&doc_model);
                let embedder = Arc::clone(&doc_embedder);
                async move { build_document(&doc, &config, model.as_ref(), embedder.as_ref()).await }
            },
        );
        let segments = memory.clone().flat_map(|row| match row {
            MemoryRow::Segment(s) => Some(s),
            _ => None,
        });
        let document_tree_nodes = memory.clone().flat_map(|row| match row {
            MemoryRow::TreeNode(n) => Some(n),
            _ => None,
        });
        let pages = memory.clone().flat_map(|row| match row {
            MemoryRow::Page(p) => Some(p),
            _ => None,
        });
        let doc_entities = memory.clone().flat_map(|row| match row {
            MemoryRow::Entity(e) => Some(e),
            _ => None,
        });
        let doc_relations = memory.clone().flat_map(|row| match row {
            MemoryRow::Relation(r) => Some(r),
            _ => None,
        });
        let doc_embeddings = memory.clone().flat_map(|row| match row {
            MemoryRow::Embedding(e) => Some(e),
            _ => None,
        });
        let corpus = config.corpus_tree.then(|| {
            // Only the roots and their vectors reach the corpus trees.
            let roots = document_tree_nodes
                .clone()
                .filter(|n| n.parent_id.is_none())
                .delay(at);
            let node_vectors = doc_embeddings
                .clone()
                .filter(|e| e.owner_kind == "node")
                .delay(at);
            corpus_trees(
                &roots,
                node_vectors,
                &corpus_model,
                embedder,
                config,
                runtime,
            )
        });
        let build_errors = memory.flat_map(|row| match row {
            MemoryRow::Error(e) => Some(e),
            _ => None,
        });
        let graph = graph_stages(
            doc_entities.delay(at),
            doc_relations.delay(at),
            &graph_model,
            embedder,
            runtime,
        );
        let entities = graph.clone().flat_map(|row| match row {
            GraphRow::Entity(e) => Some(e),
            _ => None,
        });
        let relations = graph.clone().flat_map(|row| match row {
            GraphRow::Relation(r) => Some(r),
            _ => None,
        });
        let mut embeddings = graph.clone().flat_map(|row| match row {
            GraphRow::Embedding(e) => Some(e),
            _ => None,
        });
        let mut errors = graph.flat_map(|row| match row {
            GraphRow::Error(e) => Some(e),
            _ => None,
        });

        sink.collect(document_rows, |o| &mut o.documents, &mut probe);
        sink.collect(segments, |o| &mut o.segments, &mut probe);
        sink.collect(pages, |o| &mut o.pages, &mut probe);
        sink.collect(document_tree_nodes, |o| &mut o.tree_nodes, &mut probe);
        sink.collect(doc_embeddings, |o| &mut o.embeddings, &mut probe);
        sink.collect(duplicates.concat(build_errors), |o| &mut o.errors, &mut probe);
        // Across documents.
        sink.collect(entities, |o| &mut o.entities, &mut settled);
        sink.collect(relations, |o| &mut o.relations, &mut settled);
        if let Some(corpus) = corpus {
            let nodes = corpus.clone().flat_map(|row| match row {
                MemoryRow::TreeNode(n) => Some(n),
                _ => None,
            });
            sink.collect(nodes, |o| &mut o.tree_nodes, &mut settled);
            embeddings = embeddings.concat(corpus.clone().flat_map(|row| match row {
                MemoryRow::Embedding(e) => Some(e),
                _ => None,
            }));
            errors = errors.concat(corpus.flat_map(|row| match row {
                MemoryRow::Error(e) => Some(e),
                _ => None,
            }));
        }
        sink.collect(embeddings, |o| &mut o.embeddings, &mut settled);
        sink.collect(errors, |o| &mut o.errors, &mut settled);
        input
    });
    let handles = Handles {
        input,
        documents: probe,
        everything: settled,
    };
    (handles, output)
}

/// The corpus-level trees, rebuilt over every document root whenever one
/// changes (unchanged groups and clusters are answered by the call cache): a
/// MemWalker tree over the MemWalker roots, a RAPTOR tree over the RAPTOR roots
/// and their vectors.
fn corpus_trees<'scope>(
    document_roots: &VecCollection<'scope, u64, TreeNodeRow, isize>,
    node_vectors: VecCollection<'scope, u64, EmbeddingRecord, isize>,
    model: &Arc<dyn MemoryModel>,
    embedder: &Arc<dyn Embedder>,
    config: BuildConfig,
    runtime: &tokio::runtime::Handle,
) -> VecCollection<'scope, u64, MemoryRow, isize> {
    let roots = |tree: &'static str| document_roots.clone().filter(move |n| n.tree == tree);
    let memwalker_roots = roots(TREE_MEMWALKER)
        .map(|root| ((), root))
        .reduce_named("MemWalkerCorpusRoots", |(), roots, out| {
            let mut roots: Vec<TreeNodeRow> = roots.iter().map(|(r, _)| (*r).clone()).collect();
            roots.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
            out.push((roots, 1));
        })
        .map(|((), roots)| roots);
    let memwalker_model = Arc::clone(model);
    let memwalker = map_async(
        memwalker_roots,
        runtime.clone(),
        "MemWalkerCorpusTree",
        move |roots| {
            let model = Arc::clone(&memwalker_model);
            async move {
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
    let vectors = node_vectors.map(|e| (e.owner_id.clone(), e));
    let raptor_roots = roots(TREE_RAPTOR)
        .map(|root| (root.node_id.clone(), root))
        .join_map(vectors, |_, root, vector| {
            ((), (root.clone(), vector.clone()))
        })
        .reduce_named("RaptorCorpusRoots", |(), roots, out| {
            let mut roots: Vec<(TreeNodeRow, EmbeddingRecord)> =
                roots.iter().map(|(r, _)| (*r).clone()).collect();
            roots.sort_by(|a, b| a.0.doc_id.cmp(&b.0.doc_id));
            out.push((roots, 1));
        })
        .map(|((), roots)| roots);
    let (raptor_model, raptor_embedder) = (Arc::clone(model), Arc::clone(embedder));
    let raptor = map_async(
        raptor_roots,
        runtime.clone(),
        "RaptorCorpusTree",
        move |roots: Vec<(TreeNodeRow, EmbeddingRecord)>| {
            let (model, embedder) = (Arc::clone(&raptor_model), Arc::clone(&raptor_embedder));
            async move {
                let roots: Vec<RaptorNode> = roots
                    .into_iter()
                    .map(|(row, vector)| RaptorNode {
                        row,
                        vector: vector.vector(),
                    })
                    .collect();
                match raptor_corpus_tree(&roots, model.as_ref(), embedder.as_ref(), &config.raptor)
                    .await
                {
                    Ok(nodes) => nodes
                        .into_iter()
                        .flat_map(|n| {
                            let vector = EmbeddingRecord::new(&n.row.node_id, "node", &n.vector);
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
fn graph_stages<'scope>(
    doc_entities: VecCollection<'scope, u64, DocEntity, isize>,
    doc_relations: VecCollection<'scope, u64, DocRelation, isize>,
    model: &Arc<dyn MemoryModel>,
    embedder: &Arc<dyn Embedder>,
    runtime: &tokio::runtime::Handle,
) -> VecCollection<'scope, u64, GraphRow, isize> {
    let by_name = doc_entities
        .map(|e| (e.key.clone(), e))
        .reduce_named("EntitiesByName", |_key, mentions, out| {
            // Values come sorted, and a name's entities differ in doc_id alone.
            let mentions: Vec<DocEntity> = mentions.iter().map(|(m, _)| (*m).clone()).collect();
            out.push((mentions, 1));
        })
        .map(|(_key, mentions)| mentions);
    let (model_e, embedder_e) = (Arc::clone(model), Arc::clone(embedder));
    let resolved = map_async(
        by_name,
        runtime.clone(),
        "ResolveEntities",
        move |mentions: Vec<DocEntity>| {
            let (model, embedder) = (Arc::clone(&model_e), Arc::clone(&embedder_e));
            async move {
                let mut out = Vec::new();
                let (rows, assignments) = match resolve_entities(&mentions, model.as_ref()).await {
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
                        GraphRow::Embedding(EmbeddingRecord::new(&r.entity_id, "entity", &v))
                    })),
                    Err(error) => out.push(GraphRow::Error(graph_error(
                        &mentions[0].key,
                        &error,
                        "its entities have no vectors",
                    ))),
                }
                out.extend(rows.into_iter().map(GraphRow::Entity));
                out.extend(assignments.into_iter().map(GraphRow::Assignment));
                out
            }
        },
    );
    let assigned = resolved.clone().flat_map(|row| match row {
        GraphRow::Assignment(a) => Some(((a.doc_id, a.key), a.entity_id)),
        _ => None,
    });
    let by_pair = doc_relations
        .map(|r| ((r.doc_id.clone(), r.source_key.clone()), r))
        .join_map(assigned.clone(), |_, r, source_id| {
            (
                (r.doc_id.clone(), r.target_key.clone()),
                (source_id.clone(), r.clone()),
            )
        })
        .join_map(assigned, |_, (source_id, r), target_id| {
            ((source_id.clone(), target_id.clone()), r.clone())
        })
        .reduce_named("RelationsByPair", |_pair, found, out| {
            let found: Vec<DocRelation> = found.iter().map(|(r, _)| (*r).clone()).collect();
            out.push((found, 1));
        });
    let model_r = Arc::clone(model);
    let relations = map_async(
        by_pair,
        runtime.clone(),
        "MergeRelations",
        move |((source_id, target_id), found): ((String, String), Vec<DocRelation>)| {
            let model = Arc::clone(&model_r);
            async move {
                match merge_relations_across(&source_id, &target_id, &found, model.as_ref()).await {
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
                            GraphRow::Relation(relation_row(
                                &source_id, &target_id, &found, joined,
                            )),
                        ]
                    }
                }
            }
        },
    );
    resolved
        .filter(|row| !matches!(row, GraphRow::Assignment(_)))
        .concat(relations)
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

/// Where output updates go: this worker's output maps, or (`gather`, when the
/// workers span processes) worker 0's, so one process holds every row to write.
struct Sink {
    output: Rc<RefCell<WorkerOutput>>,
    gather: bool,
}

impl Sink {
    /// Accumulates a collection's updates into one map of the output.
    fn collect<'scope, D>(
        &self,
        collection: VecCollection<'scope, u64, D, isize>,
        field: fn(&mut WorkerOutput) -> &mut HashMap<D, isize>,
        probe: &mut ProbeHandle<u64>,
    ) where
        D: differential_dataflow::ExchangeData + Hash,
    {
        let collection = if self.gather {
            collection.inner.exchange(|_| 0).as_collection()
        } else {
            collection
        };
        let output = Rc::clone(&self.output);
        collection
            .inspect(move |(row, _time, diff)| {
                let mut output = output.borrow_mut();
                let map = field(&mut output);
                let count = map.entry(row.clone()).or_insert(0);
                *count += diff;
                if *count == 0 {
                    map.remove(row);
                }
            })
            .probe_with(probe);
    }
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

fn duplicate_error(loser: &Document, winner: &Document) -> ErrorRow {
    ErrorRow::new(
        "ingest",
        &loser.source_uri,
        Some(loser.doc_id.clone()),
        "duplicate_id",
        &format!(
            "document id already taken by {}; this copy was not indexed",
            winner.source_uri
        ),
    )
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

    /// Runs `rounds` of input changes through the dataflow on one worker and
    /// returns the accumulated output after the last round.
    fn run(rounds: Vec<Vec<((Document, i64), isize)>>) -> WorkerOutput {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let handle = runtime.handle().clone();
        let guards = timely::execute(timely::Config::thread(), move |worker| {
            let model: Arc<dyn MemoryModel> = Arc::new(TaskModel::extractive());
            let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::new(32));
            let (handles, output) = build(worker, &model, &embedder, config(), false, &handle);
            let Handles {
                mut input,
                documents,
                everything,
            } = handles;
            for (round, changes) in rounds.iter().enumerate() {
                input.advance_to(round_time(round as u64, 0));
                for (record, diff) in changes {
                    input.update(record.clone(), *diff);
                }
                input.advance_to(round_time(round as u64 + 1, 0));
                input.flush();
                while documents.less_than(input.time()) || everything.less_than(input.time()) {
                    worker.step_or_park(Some(std::time::Duration::from_millis(5)));
                }
            }
            std::mem::take(&mut *output.borrow_mut())
        })
        .expect("the dataflow starts");
        guards
            .join()
            .pop()
            .expect("one worker")
            .expect("the worker succeeds")
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
        let got: HashSet<SegmentRow> = output.segments.keys().cloned().collect();
        assert_eq!(got, expected);
        assert!(output.segments.values().all(|&m| m == 1));
        assert_eq!(output.documents.len(), 1);
        let row = output.documents.keys().next().expect("one document");
        assert_eq!((row.version, row.ingested_at), (2, 5));
        assert!(
            output
                .tree_nodes
                .keys()
                .all(|n| n.summary.contains("lighthouses"))
        );
        assert!(output.pages.keys().all(|p| p.text.contains("lighthouses")));
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

    #[test]
    fn two_sources_claiming_one_id_keep_the_first_and_report_the_other() {
        let first = document("same", "a.jsonl:1", &prose("tides"), 1);
        let second = document("same", "b.jsonl:1", &prose("ships"), 1);
        let output = run(vec![vec![((second, 0), 1), ((first, 0), 1)]]);
        assert_eq!(output.documents.len(), 1);
        assert_eq!(
            output.documents.keys().next().expect("a row").source_uri,
            "a.jsonl:1"
        );
        let errors: Vec<&ErrorRow> = output.errors.keys().collect();
        assert_eq!(errors.len(), 1);
        assert_eq!(
            (errors[0].kind.as_str(), errors[0].source.as_str()),
            ("duplicate_id", "b.jsonl:1")
        );
        assert!(output.segments.keys().all(|s| s.text.contains("tides")));
    }
}
