//! The indexing dataflow: documents in as a differential collection, every memory
//! table's rows out as collections derived from it.
//!
//! Documents are a collection of (doc_id, version, text) records from the start, so
//! an update (retract the old version, insert the new) or a delete (retract) flows
//! through every derived table and recomputes only what depends on it.

use std::cell::RefCell;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

use differential_dataflow::input::{Input, InputSession};
use differential_dataflow::{AsCollection, Hashable};
use memweave_operators::build::{BuildConfig, BuiltRow, Document, build_document};
use memweave_operators::embed::{Embedder, HashingEmbedder};
use memweave_operators::model::MemoryModel;
use memweave_operators::tokens::count_tokens;
use memweave_schemas::{DocStateRow, DocumentRow, Labelled, MemoryRow};
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::{Exchange, Inspect, Probe};
use timely::worker::Worker;

use crate::async_map::{InFlight, MapAsync, Tasks};
use crate::error::StagingError;
use crate::spill::Spill;
use crate::state::{self, DocState, StoredEntity};
use crate::supervise::Flights;
use crate::write::{RoundWriter, StagedPart, gather_staged};

mod corpus;
mod graph;
mod spilled;
mod split;
mod stage;
mod time;

use corpus::corpus_trees;
use graph::graph_stages;
use split::split_built;
use stage::write_rows;
use time::phase_end;
pub use time::{restore_time, round_start, round_time};

/// What the input collection holds: documents, each with the time it was
/// first seen, and (at a restore time only) what a new process restores: the
/// documents' states, and the entities their names became.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Fed {
    Document(Document, i64),
    Restored(DocStateRow),
    Entities(Vec<StoredEntity>),
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

/// What the dataflow's stages call on, one value handed to every worker: the
/// model, the embedder, where their futures run, the writer that stages
/// the rows, and what the supervisor is told of the documents' builds.
#[derive(Clone)]
pub struct Services {
    pub model: Arc<dyn MemoryModel>,
    pub embedder: Arc<dyn Embedder>,
    pub tasks: Tasks,
    pub writer: Arc<RoundWriter>,
    pub flights: Flights,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("embedder", &self.embedder.model())
            .field("tasks", &self.tasks)
            .field("flights", &self.flights)
            .finish_non_exhaustive()
    }
}

/// Builds the indexing dataflow in `worker`; returns its handles. The stages
/// that see many documents at once (entity resolution, relation merging,
/// corpus trees) see all of a round's epochs at the round's end: a bulk build
/// resolves each name once, instead of once per epoch that added a document
/// mentioning it (each time with a different prompt, which the cache cannot
/// answer). Every worker stages its own output rows with `writer`; what it
/// staged goes to worker 0.
pub fn build(worker: &mut Worker, services: &Services, config: BuildConfig) -> Handles {
    let Services {
        model,
        embedder,
        tasks,
        writer,
        flights,
    } = services;
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
                Fed::Restored(_) | Fed::Entities(_) => None,
            })
            .inner
            .exchange(|((doc, _), _, _)| doc.doc_id.hashed())
            .as_collection();
        // A restored state stands for the rows its document's build gave the
        // cross-document stages.
        let restored = fed.clone().flat_map(|fed| match fed {
            Fed::Restored(row) => restored_rows(&row),
            Fed::Document(..) | Fed::Entities(_) => Vec::new(),
        });
        let stored_entities = fed.flat_map(|fed| match fed {
            Fed::Entities(entities) => entities,
            Fed::Document(..) | Fed::Restored(_) => Vec::new(),
        });

        let document_rows = documents
            .clone()
            .map(|(doc, seen)| document_row(&doc, seen));
        let docs = documents.map(|(doc, _)| doc);

        // The memory of each document, built asynchronously: the document's model
        // calls run concurrently on the runtime, and many documents are in flight.
        let doc_embedder = Arc::clone(embedder);
        let doc_model = Arc::clone(model);
        let doc_flights = flights.clone();
        let built = docs.map_async(
            tasks,
            "BuildMemory",
            InFlight::futures(),
            move |doc: Document| {
                let model = Arc::clone(&doc_model);
                let embedder = Arc::clone(&doc_embedder);
                let made_by = made_by.clone();
                let flights = doc_flights.clone();
                async move {
                    let (model, embedder) = (model.as_ref(), embedder.as_ref());
                    let rows = built_or_set_aside(&doc, &config, model, embedder, &flights).await;
                    let state =
                        DocState::row(&doc.doc_id, &made_by, &rows, config.corpus_tree, &doc.text)
                            .labelled(&doc.acl);
                    rows.into_iter()
                        .map(Built::Row)
                        .chain([Built::State(state)])
                        .collect::<Vec<_>>()
                }
            },
        );
        let parts = split_built(built.concat(restored.map(Built::Row)), config.corpus_tree);
        let corpus = config.corpus_tree.then(|| {
            corpus_trees(
                parts.memwalker_roots.delay(at),
                parts.raptor_roots.delay(at),
                services,
                &spill,
                config,
            )
        });
        let graph = graph_stages(
            parts.entities.delay(at),
            parts.relations.delay(at),
            stored_entities,
            services,
            &spill,
            config.graph,
        );

        // Per document, then across documents (at the round's end).
        let mut rows = document_rows
            .map(MemoryRow::Document)
            .concat(parts.rows)
            .probe_with(&probe)
            .concat(graph);
        if let Some(corpus) = corpus {
            rows = rows.concat(corpus);
        }
        // The hashing embedder's vectors are recomputed where they are
        // needed ([`HashingEmbedder::for_model`]), not stored.
        if HashingEmbedder::for_model(embedder.model()).is_some() {
            rows = rows.filter(|row| !matches!(row, MemoryRow::Embedding(_)));
        }
        let collected = Rc::clone(&staged);
        write_rows(rows, Arc::clone(writer), tasks.runtime.clone())
            .exchange(|_| 0)
            .inspect(move |part| gather_staged(&mut collected.borrow_mut(), part.clone()))
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
        sections: doc.sections.clone(),
        acl: doc.acl.clone(),
    }
}

/// `doc`'s memory; or, when building it panics (a bug that this document's
/// text or its model replies reach) or killed a process before (see
/// [`crate::supervise`]), the document set aside: one `quarantined` row
/// saying why, no memory, and the run goes on. Any later build of the same
/// text meets the same panic and sets it aside the same way, so a poison
/// input never takes a start down.
async fn built_or_set_aside(
    doc: &Document,
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    flights: &Flights,
) -> Vec<BuiltRow> {
    let set_aside = |why: &str| {
        let error = memweave_schemas::ErrorRow::new(
            "build",
            &doc.source_uri,
            Some(doc.doc_id.clone()),
            memweave_ingest::kind::QUARANTINED,
            &format!("{why}; set aside until its text changes"),
        );
        vec![BuiltRow::Error(error.labelled(&doc.acl))]
    };
    if let Some(why) = flights.quarantined(doc) {
        return set_aside(why);
    }
    let build =
        memweave_process::panics::caught_async(build_document(doc, config, model, embedder));
    flights
        .recorded(doc, build)
        .await
        .unwrap_or_else(|panic| set_aside(&format!("building its memory panicked ({panic})")))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use memweave_llm::TaskModel;
    use memweave_operators::build::RawDocument;
    use memweave_operators::build::segments_of;
    use memweave_operators::embed::HashingEmbedder;
    use memweave_operators::paginate::PageConfig;
    use memweave_operators::segment::SegmentConfig;
    use memweave_schemas::search::RankedCorpora;
    use memweave_schemas::store::Compaction;
    use memweave_schemas::{ErrorRow, PageRow, SegmentRow, TableStore, TreeNodeRow};

    use super::*;
    use crate::progress::StageProgress;

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
                sections: Vec::new(),
                acl: Vec::new(),
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
        errors: Vec<ErrorRow>,
    }

    /// Runs `rounds` of input changes through the dataflow on one worker,
    /// committing each round's staged rows to tables in a temporary folder,
    /// and reads the tables after the last.
    fn run(rounds: Vec<Vec<((Document, i64), isize)>>) -> Output {
        run_with(Arc::new(TaskModel::extractive()), rounds)
    }

    fn run_with(model: Arc<dyn MemoryModel>, rounds: Vec<Vec<((Document, i64), isize)>>) -> Output {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = TableStore::local(dir.path()).expect("a store");
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let handle = runtime.handle().clone();
        let stages = StageProgress::new();
        let ranked = RankedCorpora::finest_cut(config().finest_cut() as u32);
        let writer = RoundWriter::new(store.clone(), 32, Arc::clone(&stages), 64, ranked);
        let writer = Arc::new(writer);
        let services = Services {
            model,
            embedder: Arc::new(HashingEmbedder::new(32)),
            tasks: Tasks {
                runtime: handle.clone(),
                stages,
            },
            writer: Arc::clone(&writer),
            flights: Flights::default(),
        };
        let guards = timely::execute(timely::Config::thread(), move |worker| {
            let handles = build(worker, &services, config());
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
                    .block_on(writer.commit(round == 0, parts, Compaction::Tiered, None))
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
                errors: store.read_rows(None).await.expect("errors"),
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
        let expected: HashSet<SegmentRow> = segments_of(&new, &config().segments)
            .into_iter()
            .chain(segments_of(&new, &config().chunks()))
            .map(|s| s.row)
            .collect();
        let got: HashSet<SegmentRow> = output.segments.iter().cloned().collect();
        assert_eq!(got, expected);
        assert_eq!(output.segments.len(), expected.len(), "each row once");
        assert_eq!(output.documents.len(), 1);
        let row = &output.documents[0];
        assert_eq!((row.version, row.ingested_at), (2, 5));
        // A node keeps its summary, or, a leaf that is its segment's text,
        // that text's terms (on the segment's row).
        let mut nodes = output.tree_nodes.clone();
        TreeNodeRow::fill_own_text_terms(&mut nodes, &output.segments);
        assert!(nodes.iter().all(|n| {
            n.terms.split_whitespace().any(|t| t == "lighthouse")
                && n.summary
                    .as_deref()
                    .is_none_or(|s| s.contains("lighthouses"))
        }));
        // Every sentence names its topic: a page or gist of the old version
        // would name harbours.
        assert!(output.pages.iter().all(|p| {
            p.text_in(&new.text).contains("lighthouses")
                && !p.gist_in(&new.text).contains("harbours")
        }));
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

    /// The extractive model, except that any step over text naming the
    /// lighthouse panics: a bug that one document reaches.
    #[derive(Debug)]
    struct PanicsOnLighthouses(TaskModel);

    #[async_trait::async_trait]
    impl MemoryModel for PanicsOnLighthouses {
        fn backend(&self) -> &str {
            "panics-on-lighthouses"
        }
        fn is_remote(&self) -> bool {
            false
        }
        async fn reply(
            &self,
            cx: &memweave_operators::model::CallContext,
            step: memweave_operators::model::Step,
        ) -> memweave_operators::model::StepResult<memweave_operators::model::Reply> {
            assert!(
                !format!("{step:?}").contains("lighthouse"),
                "a bug met a lighthouse"
            );
            self.0.reply(cx, step).await
        }
    }

    #[test]
    fn a_document_whose_build_panics_is_set_aside_and_the_others_are_built() {
        let harbours = document("a.txt", "a.txt", &prose("harbours"), 1);
        let lighthouses = document("b.txt", "b.txt", &prose("lighthouses"), 1);
        let (built, set_aside) = (harbours.doc_id.clone(), lighthouses.doc_id.clone());
        let model = Arc::new(PanicsOnLighthouses(TaskModel::extractive()));
        let output = run_with(model, vec![vec![((harbours, 0), 1), ((lighthouses, 0), 1)]]);
        let [error] = output.errors.as_slice() else {
            panic!("{:?}", output.errors);
        };
        assert_eq!(
            (
                error.kind.as_str(),
                error.doc_id.as_deref(),
                error.source.as_str()
            ),
            ("quarantined", Some(set_aside.as_str()), "b.txt")
        );
        assert!(
            error.message.contains("a bug met a lighthouse"),
            "{error:?}"
        );
        assert_eq!(output.documents.len(), 2, "both documents are listed");
        assert!(output.segments.iter().all(|s| s.doc_id == built));
        assert!(!output.tree_nodes.is_empty());
        let node_docs: HashSet<Option<&str>> = output
            .tree_nodes
            .iter()
            .map(|n| n.doc_id.as_deref())
            .collect();
        assert_eq!(node_docs, HashSet::from([Some(built.as_str())]));
    }
}
