//! `memweave index`: discover the source, run the dataflow, write the tables, commit.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use memweave_llm::cache::{CacheReport, CallCache};
use memweave_llm::pool::PoolReport;
use memweave_llm::{EmbedArgs, LlmArgs};
use memweave_operators::build::{BuildConfig, Document};
use memweave_operators::embed::Embedder;
use memweave_operators::ingest::{self, IngestError, SourceFile};
use memweave_operators::model::MemoryModel;
use memweave_schemas::{
    DocumentRow, EmbeddingRow, ErrorRow, LlmCallRow, Table, TableRow, TableStore, TableVersion,
    TreeNodeRow, now_micros,
};

use crate::dataflow::{self, WorkerOutput};
use crate::progress::Progress;
use crate::source::{Listing, Source, SourceOptions};
use crate::{Interrupted, UsageError};

/// Files each worker reads per input epoch: small enough that progress is smooth
/// and memory stays bounded, large enough that epochs are cheap.
const FILES_PER_EPOCH: usize = 8;
/// Epochs a worker may have in flight (read, memory not yet built): enough
/// documents to keep a model pool busy, few enough to bound memory.
const EPOCHS_IN_FLIGHT: usize = 8;
/// Longest an interrupted build waits for the model calls in flight.
const INTERRUPT_PATIENCE: Duration = Duration::from_secs(30);
/// Longest a worker sleeps waiting for model replies before checking again.
const PARK: Duration = Duration::from_millis(20);

#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// A path, or an object-store URL (s3://, gs://, az://, file://).
    pub source: String,
    pub source_options: SourceOptions,
    pub tables: String,
    pub storage_options: HashMap<String, String>,
    pub workers: usize,
    pub build: BuildConfig,
    /// The model backend and how to reach it.
    pub llm: LlmArgs,
    /// How texts become vectors.
    pub embed: EmbedArgs,
    /// Draw a progress bar when stderr is a terminal.
    pub interactive: bool,
}

/// What a run did, for the closing summary.
#[derive(Debug, Clone)]
pub struct IndexSummary {
    pub source: String,
    pub tables: String,
    pub epoch: u64,
    pub files: usize,
    pub documents: usize,
    /// Documents new or changed since the previous checkpoint.
    pub changed: usize,
    /// Documents of the previous checkpoint the source no longer holds.
    pub deleted: usize,
    /// The version of every file the run read, by key (`--watch` compares them).
    pub versions: BTreeMap<String, String>,
    pub tokens: u64,
    pub segments: usize,
    /// Per tree (memwalker, raptor, …): nodes, roots, depth.
    pub trees: BTreeMap<String, TreeShape>,
    pub pages: usize,
    pub entities: usize,
    pub relations: usize,
    pub embeddings: usize,
    /// Name and width of the embedder's vectors.
    pub embedder: (String, usize),
    pub errors: Vec<ErrorRow>,
    pub wall: Duration,
    pub backend: String,
    pub cache: CacheReport,
    /// The pool's counters, with the openai backend.
    pub pool: Option<PoolReport>,
}

/// How big one kind of tree came out.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeShape {
    pub nodes: usize,
    pub roots: usize,
    pub depth: u32,
}

pub fn run_index(options: &IndexOptions) -> anyhow::Result<IndexSummary> {
    let started = Instant::now();
    options.build.validate().map_err(UsageError)?;
    let source = Source::open(&options.source, &options.source_options)?;
    let store = TableStore::new(&options.tables, options.storage_options.clone())
        .map_err(|e| UsageError(e.to_string()))?;
    store
        .check_writable()
        .map_err(|e| UsageError(e.to_string()))?;
    // Model calls (and, for the extractive backend, the work itself) run here.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.workers.max(2))
        .enable_all()
        .build()?;
    let cache = runtime
        .block_on(CallCache::persistent(store.clone(), options.llm.cache_only))
        .with_context(|| format!("reading the call cache under {}", store.root()))?;
    let task_model = options.llm.model(Arc::clone(&cache)).map_err(UsageError)?;
    let pool = task_model.pool().cloned();
    let backend = task_model.backend().to_string();
    let model: Arc<dyn MemoryModel> = Arc::new(task_model);
    let embedder = runtime
        .block_on(options.embed.embedder(&options.llm, Arc::clone(&cache)))
        .map_err(UsageError)?;
    runtime.spawn(save_calls_when_interrupted(Arc::clone(&cache)));
    let previous = runtime
        .block_on(previous_documents(&store))
        .with_context(|| format!("reading the previous checkpoint under {}", store.root()))?;

    let discovery = runtime
        .block_on(source.discover())
        .with_context(|| format!("listing {}", source.name()))?;
    let listing = Arc::new(Listing {
        source,
        files: discovery.files,
    });
    let (source, files) = (&listing.source, &listing.files);
    tracing::info!(source = %source.name(), files = files.len(), workers = options.workers, "indexing");
    let progress = Progress::new(files.len() as u64, options.interactive);
    let outputs = run_dataflow(
        options,
        model,
        Arc::clone(&embedder),
        runtime.handle(),
        &listing,
        &previous,
        &progress,
    )?;
    progress.finish();
    if cache.is_closing() {
        // Interrupted: documents whose calls were refused are not built, so this
        // state must not be committed. Save the calls and stop.
        runtime.block_on(cache.close(INTERRUPT_PATIENCE))?;
        return Err(Interrupted.into());
    }

    let mut errors: Vec<ErrorRow> = discovery.rejected.iter().map(error_row).collect();
    let mut merged = WorkerOutput::default();
    for (output, ingest_errors) in outputs {
        errors.extend(ingest_errors.iter().map(error_row));
        merge(&mut merged.documents, output.documents);
        merge(&mut merged.segments, output.segments);
        merge(&mut merged.tree_nodes, output.tree_nodes);
        merge(&mut merged.pages, output.pages);
        merge(&mut merged.entities, output.entities);
        merge(&mut merged.relations, output.relations);
        merge(&mut merged.embeddings, output.embeddings);
        merge(&mut merged.errors, output.errors);
    }
    errors.extend(rows(merged.errors));
    errors.sort_by(|a, b| a.source.cmp(&b.source));
    for error in &errors {
        tracing::warn!(source = %error.source, kind = %error.kind, "{}", error.message);
    }

    let documents = rows(merged.documents);
    let segments = rows(merged.segments);
    let tree_nodes = rows(merged.tree_nodes);
    let pages = rows(merged.pages);
    let entities = rows(merged.entities);
    let relations = rows(merged.relations);
    let embeddings: Vec<EmbeddingRow> = rows(merged.embeddings)
        .iter()
        .map(|e| e.row(embedder.model()))
        .collect();
    let changed = documents
        .iter()
        .filter(|d| {
            previous
                .get(&d.doc_id)
                .is_none_or(|p| p.content_hash != d.content_hash)
        })
        .count();
    let current: HashSet<&str> = documents.iter().map(|d| d.doc_id.as_str()).collect();
    let deleted = previous
        .keys()
        .filter(|id| !current.contains(id.as_str()))
        .count();
    let source_versions = Source::versions(files);
    let source_positions = serde_json::json!({
        "source": source.name(),
        "files": files.len(),
        "versions": &source_versions,
    })
    .to_string();
    let epoch = runtime
        .block_on(async {
            let versions = vec![
                write_table(&store, &documents).await?,
                write_table(&store, &segments).await?,
                write_table(&store, &tree_nodes).await?,
                write_table(&store, &pages).await?,
                write_table(&store, &entities).await?,
                write_table(&store, &relations).await?,
                TableVersion {
                    table: Table::Embeddings.name().to_string(),
                    version: store.write_embeddings(&embeddings, embedder.dim()).await?,
                },
                match cache.finish().await? {
                    Some(version) => TableVersion {
                        table: Table::LlmCalls.name().to_string(),
                        version,
                    },
                    None => write_table::<LlmCallRow>(&store, &[]).await?,
                },
                write_table(&store, &errors).await?,
            ];
            let checkpoint = store.commit_checkpoint(source_positions, versions).await?;
            anyhow::Ok(checkpoint.epoch)
        })
        .with_context(|| format!("writing the tables under {}", store.root()))?;

    Ok(IndexSummary {
        source: source.name(),
        tables: store.root().to_string(),
        epoch,
        files: files.len(),
        tokens: documents.iter().map(|d| d.n_tokens).sum(),
        documents: documents.len(),
        changed,
        deleted,
        versions: source_versions,
        segments: segments.len(),
        trees: tree_shapes(&tree_nodes),
        pages: pages.len(),
        entities: entities.len(),
        relations: relations.len(),
        embeddings: embeddings.len(),
        embedder: (embedder.model().to_string(), embedder.dim()),
        errors,
        wall: started.elapsed(),
        backend,
        cache: cache.report(),
        pool: pool.map(|p| p.report()),
    })
}

/// On Ctrl-C or SIGTERM: start no new model calls, let those in flight finish (up
/// to 30 s), append them all to `llm_calls` so a restarted build pays for none of
/// them again, then exit with 130.
async fn save_calls_when_interrupted(cache: Arc<CallCache>) {
    let interrupted = async {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("a SIGTERM handler can be installed");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    };
    interrupted.await;
    tracing::warn!("interrupted: finishing the model calls in flight, saving them, then stopping");
    match cache.close(INTERRUPT_PATIENCE).await {
        Ok(()) => tracing::warn!(
            saved = cache.report().flushed,
            "model calls saved; re-run to resume"
        ),
        Err(e) => tracing::error!("could not save the model calls: {e:#}"),
    }
    std::process::exit(130);
}

fn tree_shapes(nodes: &[TreeNodeRow]) -> BTreeMap<String, TreeShape> {
    let mut shapes: BTreeMap<String, TreeShape> = BTreeMap::new();
    for node in nodes {
        let shape = shapes.entry(node.tree.clone()).or_default();
        shape.nodes += 1;
        shape.roots += usize::from(node.parent_id.is_none());
        shape.depth = shape.depth.max(node.level);
    }
    shapes
}

async fn write_table<R: TableRow>(store: &TableStore, rows: &[R]) -> anyhow::Result<TableVersion> {
    Ok(TableVersion {
        table: R::TABLE.name().to_string(),
        version: store.write_rows(rows).await?,
    })
}

/// The documents of the newest checkpoint, by id: an unchanged document keeps its
/// version and ingestion time, a changed one gets the next version.
async fn previous_documents(store: &TableStore) -> anyhow::Result<HashMap<String, DocumentRow>> {
    let Some(checkpoint) = store.latest_checkpoint().await? else {
        return Ok(HashMap::new());
    };
    let documents: Vec<DocumentRow> = store.read_at(&checkpoint).await?;
    Ok(documents
        .into_iter()
        .map(|d| (d.doc_id.clone(), d))
        .collect())
}

type WorkerResult = (WorkerOutput, Vec<IngestError>);

fn run_dataflow(
    options: &IndexOptions,
    model: Arc<dyn MemoryModel>,
    embedder: Arc<dyn Embedder>,
    runtime: &tokio::runtime::Handle,
    listing: &Arc<Listing>,
    previous: &HashMap<String, DocumentRow>,
    progress: &Arc<Progress>,
) -> anyhow::Result<Vec<WorkerResult>> {
    let listing = Arc::clone(listing);
    let previous = Arc::new(previous.clone());
    let progress = Arc::clone(progress);
    let config = options.build;
    let now = now_micros();
    let runtime = runtime.clone();
    let guards = timely::execute(
        timely::Config::process(options.workers.max(1)),
        move |worker| {
            let (index, peers) = (worker.index(), worker.peers());
            let files = &listing.files;
            let mine: Vec<&SourceFile> = files.iter().skip(index).step_by(peers).collect();
            // The last input epoch of any worker: cross-document stages run there once.
            let last_epoch =
                (files.len().div_ceil(peers).div_ceil(FILES_PER_EPOCH) as u64).saturating_sub(1);
            let (handles, output) = dataflow::build(
                worker,
                &model,
                &embedder,
                config,
                Some(last_epoch),
                &runtime,
            );
            let (mut input, probe) = (handles.input, handles.documents);
            let mut failures = Vec::new();
            // Epochs fed but not yet built: (epoch, files, documents).
            let mut in_flight: VecDeque<(u64, usize, usize)> = VecDeque::new();
            let report_built = |in_flight: &mut VecDeque<(u64, usize, usize)>| {
                while let Some(&(epoch, files, documents)) = in_flight.front() {
                    if probe.less_than(&epoch) {
                        break;
                    }
                    progress.advance(files as u64, documents as u64);
                    in_flight.pop_front();
                }
            };
            for (epoch, batch) in mine.chunks(FILES_PER_EPOCH).enumerate() {
                let mut documents = 0;
                for file in batch {
                    for loaded in ingest::parse(file, listing.source.read(file, &runtime)) {
                        match loaded {
                            Ok(raw) => {
                                input.insert(versioned(raw, &previous, now));
                                documents += 1;
                            }
                            Err(error) => failures.push(error),
                        }
                    }
                }
                let next = epoch as u64 + 1;
                input.advance_to(next);
                input.flush();
                in_flight.push_back((next, batch.len(), documents));
                worker.step();
                report_built(&mut in_flight);
                while in_flight.len() >= EPOCHS_IN_FLIGHT {
                    worker.step_or_park(Some(PARK));
                    report_built(&mut in_flight);
                }
            }
            input.close();
            while worker.step_or_park(Some(PARK)) {
                report_built(&mut in_flight);
            }
            report_built(&mut in_flight);
            let output = std::mem::take(&mut *output.borrow_mut());
            (output, failures)
        },
    )
    .map_err(|e| anyhow::anyhow!("starting the dataflow: {e}"))?;
    guards
        .join()
        .into_iter()
        .map(|r| r.map_err(|e| anyhow::anyhow!("a dataflow worker failed: {e}")))
        .collect()
}

fn versioned(
    raw: ingest::RawDocument,
    previous: &HashMap<String, DocumentRow>,
    now: i64,
) -> (Document, i64) {
    let mut doc = Document::new(raw, 1);
    match previous.get(&doc.doc_id) {
        Some(prev) if prev.content_hash == doc.content_hash => {
            doc.version = prev.version;
            (doc, prev.ingested_at)
        }
        Some(prev) => {
            doc.version = prev.version + 1;
            (doc, now)
        }
        None => (doc, now),
    }
}

fn merge<D: Eq + std::hash::Hash>(into: &mut HashMap<D, isize>, from: HashMap<D, isize>) {
    for (row, count) in from {
        *into.entry(row).or_insert(0) += count;
    }
}

/// The rows present in a collection (positive multiplicity), each once.
fn rows<D: Eq + std::hash::Hash>(counts: HashMap<D, isize>) -> Vec<D> {
    counts
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(row, _)| row)
        .collect()
}

fn error_row(error: &IngestError) -> ErrorRow {
    ErrorRow::new("ingest", &error.source, None, error.kind, &error.message)
}

/// Error counts by kind, in name order.
pub fn error_kinds(errors: &[ErrorRow]) -> BTreeMap<&str, usize> {
    let mut kinds = BTreeMap::new();
    for error in errors {
        *kinds.entry(error.kind.as_str()).or_insert(0) += 1;
    }
    kinds
}
