//! `memweave index`: keeps the memory tables equal to what the source holds, one
//! round at a time. A round finds what changed since the last one (or, for a
//! process's first round, since the last checkpoint), feeds only that to the
//! dataflow, applies the rows it changed to the tables (deletes, then appends)
//! and commits a checkpoint naming every table's version.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use memweave_llm::cache::{CacheReport, CallCache};
use memweave_llm::pool::{PoolClient, PoolReport};
use memweave_llm::{EmbedArgs, LlmArgs};
use memweave_operators::build::{BuildConfig, Document};
use memweave_operators::embed::{Embedder, EmbeddingRecord};
use memweave_operators::ingest::{self, IngestError, RawDocument, SourceFile};
use memweave_operators::model::MemoryModel;
use memweave_schemas::{
    CallStatRow, CheckpointRow, DocumentRow, EmbeddingRow, EntityRow, ErrorRow, LlmCallRow,
    PageRow, RelationRow, SegmentRow, Table, TableRow, TableStore, TableVersion, TreeNodeRow,
    now_micros,
};

use memweave_query::analytics::catalog::Catalog;
use memweave_query::analytics::metrics::prometheus;
use memweave_query::analytics::report::report;

use crate::cluster::Cluster;
use crate::metrics::IndexMetrics;
use crate::progress::Progress;
use crate::source::{Source, SourceOptions};
use crate::state::{PreviousTables, RowChanges, TableChanges, TableState};
use crate::workers::{InputChange, Workers};
use crate::{Interrupted, UsageError};

/// Files (or messages) each worker gets per input epoch: small enough that
/// progress is smooth and memory stays bounded, large enough that epochs are cheap.
const ORIGINS_PER_EPOCH: usize = 8;
/// Files read at once.
const READS_IN_FLIGHT: usize = 16;
/// Longest an interrupted build waits for the model calls in flight.
const INTERRUPT_PATIENCE: Duration = Duration::from_secs(30);

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
    /// This process's place among the run's processes.
    pub cluster: Cluster,
    /// Serve Prometheus metrics on this address while indexing.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// What a run did, for the closing summary.
#[derive(Debug, Clone)]
pub struct IndexSummary {
    pub source: String,
    pub tables: String,
    pub epoch: u64,
    /// Files (or messages) the run read.
    pub files: usize,
    /// What `files` counts: "files" or "messages".
    pub input_unit: &'static str,
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
    /// Where `wall` went.
    pub stages: Stages,
    pub backend: String,
    pub cache: CacheReport,
    /// The pool's counters, with the openai backend.
    pub pool: Option<PoolReport>,
}

/// A round's wall time by stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stages {
    /// Listing and reading files (or consuming messages), parsing, diffing.
    pub read: Duration,
    /// The dataflow: every memory built (model calls, embeddings, clustering).
    pub build: Duration,
    /// Merging the rows and writing the tables and the checkpoint.
    pub write: Duration,
}

/// How big one kind of tree came out.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeShape {
    pub nodes: usize,
    pub roots: usize,
    pub depth: u32,
}

/// One origin's share of the input (a file, or a streamed document): the
/// document versions it holds, each with the time it was first seen, and the
/// ingestion errors it caused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OriginInput {
    /// The file's version (ETag, size@mtime) when it was read.
    pub version: Option<String>,
    pub records: Vec<(Document, i64)>,
    pub errors: Vec<ErrorRow>,
}

/// What a round changes: each origin's new input and the worker that holds
/// it, or `None` where the origin is gone.
pub type Updates = BTreeMap<String, Option<(usize, OriginInput)>>;

/// A document's known version: content hash, version number, first seen.
type KnownVersion = (String, u64, i64);

/// What the last checkpoint held, until the process's first round has used it.
#[derive(Debug)]
struct Previous {
    checkpoint: CheckpointRow,
    tables: PreviousTables,
    /// Owners whose vectors another embedder made: replaced in the first round.
    stale_vectors: Vec<String>,
}

/// An indexing process: the model, the running dataflow workers, and what the
/// tables hold.
pub struct Indexer {
    engine: Engine,
    /// What `/metrics` shows, with `--metrics-listen`.
    metrics: Option<Arc<IndexMetrics>>,
    options: IndexOptions,
    state: TableState,
    /// What the dataflow holds, by origin.
    inputs: BTreeMap<String, OriginInput>,
    /// Errors of the listing itself (files skipped for their type).
    listing_errors: Vec<ErrorRow>,
    previous: Option<Previous>,
    /// Whether any checkpoint exists: the first commit writes whole tables.
    committed: bool,
    round: u64,
    versions: HashMap<String, KnownVersion>,
}

impl std::fmt::Debug for Indexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexer")
            .field("tables", &self.engine.store.root())
            .field("round", &self.round)
            .finish_non_exhaustive()
    }
}

/// Indexes `options.source` once: the tables end equal to what it holds now.
pub fn run_index(options: &IndexOptions) -> anyhow::Result<IndexSummary> {
    let source = Source::open(&options.source, &options.source_options)?;
    Indexer::open(options)?.index_files(&source)
}

/// Indexes, then looks at the source every `every` and indexes what changed;
/// the dataflow stays up between rounds, so a round costs what changed.
/// Returns only on an error or a signal.
pub fn watch(
    options: &IndexOptions,
    every: Duration,
    mut report: impl FnMut(&IndexSummary),
    mut interrupted_within: impl FnMut(Duration) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let source = Source::open(&options.source, &options.source_options)?;
    let mut indexer = Indexer::open(options)?;
    let mut versions = {
        let summary = indexer.index_files(&source)?;
        report(&summary);
        summary.versions
    };
    loop {
        tracing::info!(seconds = every.as_secs(), "watching the source for changes");
        if interrupted_within(every)? {
            return Err(Interrupted.into());
        }
        let listed = indexer.engine.runtime.block_on(source.discover())?;
        if Source::versions(&listed.files) != versions {
            let summary = indexer.index_files(&source)?;
            report(&summary);
            versions = summary.versions;
        }
    }
}

/// What every indexing process runs: the tables' store, the model behind its
/// call cache, the embedder, and the dataflow workers.
struct Engine {
    /// First, so the workers stop (dropped in field order) before the runtime
    /// their futures run on.
    workers: Workers,
    runtime: tokio::runtime::Runtime,
    store: TableStore,
    cache: Arc<CallCache>,
    embedder: Arc<dyn Embedder>,
    pool: Option<Arc<PoolClient>>,
    backend: String,
    progress: Arc<Mutex<Arc<Progress>>>,
}

impl Engine {
    /// Opens the store and the call cache, the model and the embedder, and
    /// starts this process's workers (which, in a cluster, wait for the others).
    fn start(options: &IndexOptions) -> anyhow::Result<Engine> {
        options.build.validate().map_err(UsageError)?;
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
        // A cluster's process 0 must close the dataflow the others compute in,
        // so it stops through its main thread rather than exiting from here.
        let exit = options.cluster.processes() == 1 || options.cluster.process != 0;
        runtime.spawn(save_calls_when_interrupted(Arc::clone(&cache), exit));
        let progress = Arc::new(Mutex::new(Progress::new(0, false)));
        let workers = Workers::start(
            &options.cluster,
            options.workers.max(1),
            model,
            Arc::clone(&embedder),
            options.build,
            runtime.handle(),
            Arc::clone(&progress),
        )?;
        Ok(Engine {
            workers,
            runtime,
            store,
            cache,
            embedder,
            pool,
            backend,
            progress,
        })
    }
}

/// What a process other than 0 of a cluster did.
#[derive(Debug, Clone)]
pub struct ComputeSummary {
    pub process: usize,
    pub processes: usize,
    /// Rounds this process saw end (a round ending as process 0 stops may go
    /// unseen).
    pub rounds: usize,
    pub wall: Duration,
    pub backend: String,
    pub cache: CacheReport,
    pub pool: Option<PoolReport>,
}

/// A process other than 0 of a cluster: its workers build the memories of the
/// documents the dataflow hashes to them, whatever the source (process 0 reads
/// it, gathers the rows and commits), until process 0 stops. Model calls are
/// saved to the shared `llm_calls` table at the end of every round.
pub fn compute(options: &IndexOptions) -> anyhow::Result<ComputeSummary> {
    let started = Instant::now();
    let mut engine = Engine::start(options)?;
    tracing::info!(
        process = options.cluster.process,
        processes = options.cluster.processes(),
        "computing this process's share; process 0 reads the source and commits"
    );
    // This process's model calls; the round and the memory are process 0's.
    if let Some(address) = options.metrics_listen {
        let metrics = IndexMetrics::new(Arc::clone(&engine.cache), Arc::clone(&engine.progress));
        engine
            .runtime
            .block_on(crate::metrics::serve(address, metrics))?;
    }
    let (runtime, cache) = (&engine.runtime, &engine.cache);
    let mut rounds = 0;
    let mut saved = Ok(());
    engine.workers.follow_rounds(|| {
        rounds += 1;
        if saved.is_ok() {
            saved = runtime.block_on(cache.flush()).map(drop);
        }
    })?;
    saved?;
    runtime.block_on(cache.finish())?;
    Ok(ComputeSummary {
        process: options.cluster.process,
        processes: options.cluster.processes(),
        rounds,
        wall: started.elapsed(),
        backend: engine.backend.clone(),
        cache: engine.cache.report(),
        pool: engine.pool.as_ref().map(|p| p.report()),
    })
}

impl Indexer {
    /// Opens the tables (rolling back what a crashed run wrote after its last
    /// checkpoint), the model and the embedder, and starts the workers. In a
    /// cluster, this is process 0; the others run [`compute`].
    pub fn open(options: &IndexOptions) -> anyhow::Result<Indexer> {
        anyhow::ensure!(
            options.cluster.process == 0,
            "process {} of a cluster computes; process 0 indexes",
            options.cluster.process
        );
        let engine = Engine::start(options)?;
        let previous = engine
            .runtime
            .block_on(previous_tables(&engine.store, engine.embedder.model()))
            .with_context(|| {
                format!("reading the last checkpoint under {}", engine.store.root())
            })?;
        let versions = previous
            .iter()
            .flat_map(|p| &p.tables.documents)
            .map(|d| {
                let known = (d.content_hash.clone(), d.version, d.ingested_at);
                (d.doc_id.clone(), known)
            })
            .collect();
        let metrics = match options.metrics_listen {
            Some(address) => {
                let metrics =
                    IndexMetrics::new(Arc::clone(&engine.cache), Arc::clone(&engine.progress));
                let served = Arc::clone(&metrics);
                engine
                    .runtime
                    .block_on(crate::metrics::serve(address, served))?;
                Some(metrics)
            }
            None => None,
        };
        Ok(Indexer {
            metrics,
            options: options.clone(),
            committed: previous.is_some(),
            previous,
            engine,
            state: TableState::default(),
            inputs: BTreeMap::new(),
            listing_errors: Vec::new(),
            round: 0,
            versions,
        })
    }

    /// One round over a file or object-store source: files whose version is the
    /// one last indexed are not read again; changed and new files are read and
    /// their documents replace the old; removed files' documents are retracted.
    pub fn index_files(&mut self, source: &Source) -> anyhow::Result<IndexSummary> {
        let started = Instant::now();
        let discovery = self
            .engine
            .runtime
            .block_on(source.discover())
            .with_context(|| format!("listing {}", source.name()))?;
        let files = discovery.files;
        // A process's first round carries the checkpoint's unchanged files over
        // from the tables; later rounds hold them in the dataflow already.
        let mut carried = match &self.previous {
            Some(previous) => carried_over(previous, &source.name(), &files),
            None => HashMap::new(),
        };
        let held = |file: &SourceFile| {
            let input = carried
                .get(&file.key)
                .or_else(|| self.inputs.get(&file.key));
            input.is_some_and(|i| i.version.is_some() && i.version == file.version)
        };
        let to_read: Vec<&SourceFile> = files.iter().filter(|f| !held(f)).collect();
        tracing::info!(
            source = %source.name(),
            files = files.len(),
            changed = to_read.len(),
            workers = self.engine.workers.feeds(),
            "indexing"
        );
        let read: Vec<(&SourceFile, Result<Vec<u8>, String>)> = self.engine.runtime.block_on(
            futures::stream::iter(to_read)
                .map(|file| async move { (file, source.read(file).await) })
                .buffered(READS_IN_FLIGHT)
                .collect(),
        );
        let now = now_micros();
        let mut read_inputs: HashMap<String, OriginInput> = HashMap::new();
        for (file, bytes) in read {
            let mut input = OriginInput {
                version: file.version.clone(),
                ..OriginInput::default()
            };
            for parsed in ingest::parse(file, bytes) {
                match parsed {
                    Ok(raw) => input.records.push(self.versioned(raw, now)),
                    Err(error) => input.errors.push(error_row(&error)),
                }
            }
            read_inputs.insert(file.key.clone(), input);
        }
        // Keys are sharded across workers by their place in the listing; files
        // held and unchanged are not updates, files gone are (`None`).
        let mut updates: Updates = Updates::new();
        for (index, file) in files.iter().enumerate() {
            let input = read_inputs
                .remove(&file.key)
                .or_else(|| carried.remove(&file.key));
            if let Some(input) = input {
                let peer = index % self.engine.workers.feeds();
                updates.insert(file.key.clone(), Some((peer, input)));
            }
        }
        let listed: HashSet<&str> = files.iter().map(|f| f.key.as_str()).collect();
        for key in self.inputs.keys() {
            if !listed.contains(key.as_str()) {
                updates.insert(key.clone(), None);
            }
        }
        let listing_errors: Vec<ErrorRow> = discovery.rejected.iter().map(error_row).collect();
        let positions = serde_json::json!({
            "source": source.name(),
            "files": files.len(),
            "versions": Source::versions(&files),
        });
        let mut summary = self.round_of(
            updates,
            Some(listing_errors),
            positions.to_string(),
            started,
        )?;
        summary.source = source.name();
        summary.files = files.len();
        summary.versions = Source::versions(&files);
        Ok(summary)
    }

    /// Whether Ctrl-C or SIGTERM came: the run must stop without committing more.
    pub fn interrupted(&self) -> bool {
        self.engine.cache.is_closing()
    }

    /// Workers that take input: this process's.
    pub fn feeds(&self) -> usize {
        self.engine.workers.feeds()
    }

    /// Runs `future` on the indexer's runtime.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.engine.runtime.block_on(future)
    }

    /// The last checkpoint's source positions, until the first round.
    pub(crate) fn previous_positions(&self) -> Option<serde_json::Value> {
        let previous = self.previous.as_ref()?;
        serde_json::from_str(&previous.checkpoint.source_positions).ok()
    }

    /// For a stream's first round: the last checkpoint's documents (by id) and
    /// ingestion errors (by the position they cite) as updates, each held by
    /// the worker `peer_of` its source position.
    pub(crate) fn carried_stream(&self, peer_of: impl Fn(&str) -> usize) -> Updates {
        let Some(previous) = &self.previous else {
            return Updates::new();
        };
        let mut updates = Updates::new();
        for d in &previous.tables.documents {
            let input = OriginInput {
                records: vec![(document_of(d), d.ingested_at)],
                ..OriginInput::default()
            };
            updates.insert(d.doc_id.clone(), Some((peer_of(&d.source_uri), input)));
        }
        for e in previous
            .tables
            .errors
            .iter()
            .filter(|e| e.stage == "ingest")
        {
            let input = OriginInput {
                errors: vec![e.clone()],
                ..OriginInput::default()
            };
            updates.insert(e.source.clone(), Some((peer_of(&e.source), input)));
        }
        updates
    }

    /// One round of a stream: `updates` name only the origins that changed.
    pub(crate) fn stream_round(
        &mut self,
        updates: Updates,
        positions: String,
        started: Instant,
    ) -> anyhow::Result<IndexSummary> {
        self.round_of(updates, None, positions, started)
    }

    /// A re-read document keeps its version and first-seen time when its content
    /// is unchanged, and gets the next version when it changed.
    pub(crate) fn versioned(&self, raw: RawDocument, now: i64) -> (Document, i64) {
        let mut doc = Document::new(raw, 1);
        match self.versions.get(&doc.doc_id) {
            Some((hash, version, seen)) if *hash == doc.content_hash => {
                doc.version = *version;
                (doc, *seen)
            }
            Some((_, version, _)) => {
                doc.version = version + 1;
                (doc, now)
            }
            None => (doc, now),
        }
    }

    /// Runs one round. `updates` gives the new inputs of the origins that
    /// changed (and the worker that holds each), `None` for an origin gone;
    /// origins not in it are unchanged. `listing_errors`, when given, replace
    /// the errors of the last listing.
    fn round_of(
        &mut self,
        updates: Updates,
        listing_errors: Option<Vec<ErrorRow>>,
        positions: String,
        started: Instant,
    ) -> anyhow::Result<IndexSummary> {
        let round = self.round;
        let read = started.elapsed();
        let mut held = std::mem::take(&mut self.inputs);
        let mut ingest_errors: HashMap<ErrorRow, isize> = HashMap::new();
        let mut count = |errors: &[ErrorRow], diff: isize| {
            for error in errors {
                *ingest_errors.entry(error.clone()).or_insert(0) += diff;
            }
        };
        if let Some(listing_errors) = listing_errors {
            count(&self.listing_errors, -1);
            count(&listing_errors, 1);
            self.listing_errors = listing_errors;
        }
        // Each worker's changes, one entry per changed origin; retractions of
        // origins gone go to the first.
        let mut changes: Vec<Vec<Vec<InputChange>>> = vec![Vec::new(); self.engine.workers.feeds()];
        let mut kept = BTreeMap::new();
        let mut gone = Vec::new();
        for (key, update) in updates {
            let old = held.remove(&key).unwrap_or_default();
            match update {
                Some((peer, input)) => {
                    if old != input {
                        count(&old.errors, -1);
                        count(&input.errors, 1);
                        changes[peer].push(record_changes(old.records, &input.records));
                    }
                    kept.insert(key, input);
                }
                None => gone.push(old),
            }
        }
        for old in gone {
            count(&old.errors, -1);
            changes[0].push(record_changes(old.records, &[]));
        }
        kept.append(&mut held);
        self.inputs = kept;
        let total: usize = changes.iter().map(Vec::len).sum();
        let progress = Progress::new(total as u64, self.options.interactive);
        *self
            .engine
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Arc::clone(&progress);
        // Epoch by epoch, every worker: one left behind would hold back
        // everyone's progress, and with it their flow control.
        let batches: Vec<Vec<&[Vec<InputChange>]>> = changes
            .iter()
            .map(|c| c.chunks(ORIGINS_PER_EPOCH).collect())
            .collect();
        let epochs = batches.iter().map(Vec::len).max().unwrap_or(0);
        for epoch in 0..epochs {
            for (peer, peer_batches) in batches.iter().enumerate() {
                let batch = peer_batches.get(epoch).copied().unwrap_or_default();
                let records: Vec<InputChange> = batch.iter().flatten().cloned().collect();
                self.engine
                    .workers
                    .send(round, epoch as u64, peer, batch.len(), records)?;
            }
        }
        let outputs = self.engine.workers.finish_round(round)?;
        let build = started.elapsed() - read;
        progress.finish();
        if self.engine.cache.is_closing() {
            // Interrupted: documents whose calls were refused are not built, so
            // this state must not be committed. Save the calls and stop.
            self.engine
                .runtime
                .block_on(self.engine.cache.close(INTERRUPT_PATIENCE))?;
            return Err(Interrupted.into());
        }
        let mut table_changes = self.state.apply(outputs, ingest_errors);
        let mut stale_vectors = Vec::new();
        if let Some(previous) = self.previous.take() {
            table_changes.relative_to(previous.tables, &self.state);
            stale_vectors = previous.stale_vectors;
        }
        for error in &table_changes.errors.added {
            tracing::warn!(source = %error.source, kind = %error.kind, "{}", error.message);
        }
        for removed in &table_changes.documents.removed {
            self.versions.remove(&removed.doc_id);
        }
        for added in &table_changes.documents.added {
            let known = (added.content_hash.clone(), added.version, added.ingested_at);
            self.versions.insert(added.doc_id.clone(), known);
        }
        self.round += 1;
        let epoch = self
            .engine
            .runtime
            .block_on(self.commit(&table_changes, stale_vectors, positions))
            .with_context(|| format!("writing the tables under {}", self.engine.store.root()))?;
        self.committed = true;
        if let Some(metrics) = &self.metrics {
            let memory = self.engine.runtime.block_on(async {
                let catalog = Catalog::open(self.engine.store.clone(), Some(epoch)).await?;
                anyhow::Ok(prometheus(&report(&catalog).await?))
            });
            match memory {
                Ok(memory) => metrics.committed(epoch, memory),
                Err(e) => tracing::warn!("the memory's report for /metrics failed: {e:#}"),
            }
        }
        let mut summary = self.summary(&table_changes, epoch, started);
        summary.stages = Stages {
            read,
            build,
            write: summary.wall - read - build,
        };
        Ok(summary)
    }

    /// Applies one round's changes to the tables, then commits a checkpoint
    /// naming every table's version; returns its epoch. The first commit under a
    /// root writes whole tables (over whatever a crashed first run left).
    async fn commit(
        &self,
        changes: &TableChanges,
        stale_vectors: Vec<String>,
        positions: String,
    ) -> anyhow::Result<u64> {
        let store = &self.engine.store;
        let whole = !self.committed;
        let state = &self.state;
        let model = self.engine.embedder.model();
        let mut vector_keys = keys(&changes.embeddings.removed, |e| e.owner_id.clone());
        vector_keys.extend(stale_vectors);
        let added_vectors: Vec<EmbeddingRow> = changes
            .embeddings
            .added
            .iter()
            .map(|e| e.row(model))
            .collect();
        let embeddings = if whole {
            let rows: Vec<EmbeddingRow> = state.embeddings.rows().map(|e| e.row(model)).collect();
            store
                .write_embeddings(&rows, self.engine.embedder.dim())
                .await?
        } else {
            store
                .apply_embedding_changes(&vector_keys, &added_vectors, self.engine.embedder.dim())
                .await?
        };
        let mut versions = vec![
            write(
                store,
                &changes.documents,
                whole.then(|| state.documents.rows()),
            )
            .await?,
            write(
                store,
                &changes.segments,
                whole.then(|| state.segments.rows()),
            )
            .await?,
            write(
                store,
                &changes.tree_nodes,
                whole.then(|| state.tree_nodes.rows()),
            )
            .await?,
            write(store, &changes.pages, whole.then(|| state.pages.rows())).await?,
            write(
                store,
                &changes.entities,
                whole.then(|| state.entities.rows()),
            )
            .await?,
            write(
                store,
                &changes.relations,
                whole.then(|| state.relations.rows()),
            )
            .await?,
            write(store, &changes.errors, whole.then(|| state.errors.rows())).await?,
            TableVersion {
                table: Table::Embeddings.name().to_string(),
                version: embeddings,
            },
        ];
        versions.push(match self.engine.cache.finish().await? {
            Some(version) => TableVersion {
                table: Table::LlmCalls.name().to_string(),
                version,
            },
            None => TableVersion {
                table: Table::LlmCalls.name().to_string(),
                version: store.write_rows::<LlmCallRow>(&[]).await?,
            },
        });
        versions.push(self.write_call_stats(whole).await?);
        let checkpoint = store.commit_checkpoint(positions, versions).await?;
        Ok(checkpoint.epoch)
    }

    /// Appends what this round asked of the model, per stage and task, under the
    /// epoch the round's checkpoint will have (process 0 alone commits); the
    /// first commit under a root (`whole`) replaces what a crashed run left.
    async fn write_call_stats(&self, whole: bool) -> anyhow::Result<TableVersion> {
        let store = &self.engine.store;
        let epoch = store.latest_checkpoint().await?.map_or(1, |c| c.epoch + 1);
        let rows: Vec<CallStatRow> = self
            .engine
            .cache
            .take_stats()
            .into_iter()
            .map(|((stage, task), stats)| CallStatRow {
                stat_id: format!("{epoch}/{stage}/{task}"),
                epoch,
                stage,
                task,
                calls: stats.calls,
                cache_hits: stats.cache_hits,
                tokens_in: stats.tokens_in,
                tokens_out: stats.tokens_out,
            })
            .collect();
        let version = match store.table_version(Table::CallStats).await? {
            Some(_) if whole => store.write_rows(&rows).await?,
            Some(version) if rows.is_empty() => version,
            Some(_) => store.append_rows(&rows).await?,
            None => store.write_rows(&rows).await?,
        };
        Ok(TableVersion {
            table: Table::CallStats.name().to_string(),
            version,
        })
    }

    fn summary(&self, changes: &TableChanges, epoch: u64, started: Instant) -> IndexSummary {
        let state = &self.state;
        let added: HashSet<&str> = changes
            .documents
            .added
            .iter()
            .map(|d| d.doc_id.as_str())
            .collect();
        let mut errors: Vec<ErrorRow> = state.errors.rows().cloned().collect();
        errors.sort_by(|a, b| (&a.source, &a.error_id).cmp(&(&b.source, &b.error_id)));
        let nodes: Vec<&TreeNodeRow> = state.tree_nodes.rows().collect();
        IndexSummary {
            source: String::new(),
            tables: self.engine.store.root().to_string(),
            epoch,
            files: 0,
            input_unit: "files",
            documents: state.documents.len(),
            changed: changes.documents.added.len(),
            deleted: changes
                .documents
                .removed
                .iter()
                .filter(|d| !added.contains(d.doc_id.as_str()))
                .count(),
            versions: BTreeMap::new(),
            tokens: state.documents.rows().map(|d| d.n_tokens).sum(),
            segments: state.segments.len(),
            trees: tree_shapes(&nodes),
            pages: state.pages.len(),
            entities: state.entities.len(),
            relations: state.relations.len(),
            embeddings: state.embeddings.len(),
            embedder: (
                self.engine.embedder.model().to_string(),
                self.engine.embedder.dim(),
            ),
            errors,
            wall: started.elapsed(),
            stages: Stages::default(),
            backend: self.engine.backend.clone(),
            cache: self.engine.cache.report(),
            pool: self.engine.pool.as_ref().map(|p| p.report()),
        }
    }
}

/// Retract the records of `old` that `new` lacks; insert those of `new` that
/// `old` lacks. An unchanged document (same content, version and first-seen
/// time) is neither.
fn record_changes(old: Vec<(Document, i64)>, new: &[(Document, i64)]) -> Vec<InputChange> {
    let had: HashSet<&(Document, i64)> = old.iter().collect();
    let inserted: Vec<InputChange> = new
        .iter()
        .filter(|r| !had.contains(r))
        .map(|r| (r.clone(), 1))
        .collect();
    let kept: HashSet<&(Document, i64)> = new.iter().collect();
    old.into_iter()
        .filter(|r| !kept.contains(r))
        .map(|r| (r, -1))
        .chain(inserted)
        .collect()
}

/// Writes one table: its changes, or (`whole`) every row.
async fn write<'a, R: TableRow + 'a>(
    store: &TableStore,
    changes: &RowChanges<R>,
    whole: Option<impl Iterator<Item = &'a R>>,
) -> anyhow::Result<TableVersion> {
    let version = match whole {
        Some(rows) => {
            let rows: Vec<R> = rows.cloned().collect();
            store.write_rows(&rows).await?
        }
        None => {
            let removed = keys(&changes.removed, TableRow::key);
            store.apply_changes(&removed, &changes.added).await?
        }
    };
    Ok(TableVersion {
        table: R::TABLE.name().to_string(),
        version,
    })
}

/// The distinct keys of `rows`, sorted.
fn keys<R>(rows: &[R], key: impl Fn(&R) -> String) -> Vec<String> {
    let mut keys: Vec<String> = rows.iter().map(key).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The newest checkpoint's tables, after rolling back table versions written
/// after it by a run that did not commit.
async fn previous_tables(store: &TableStore, model: &str) -> anyhow::Result<Option<Previous>> {
    let Some(checkpoint) = store.latest_checkpoint().await? else {
        return Ok(None);
    };
    let rolled_back = store.roll_back_to(&checkpoint).await?;
    if !rolled_back.is_empty() {
        let names: Vec<&str> = rolled_back.iter().map(|t| t.name()).collect();
        tracing::warn!(
            epoch = checkpoint.epoch,
            tables = %names.join(", "),
            "rolled back table versions a stopped run wrote after the last checkpoint"
        );
    }
    let documents: Vec<DocumentRow> = store.read_at(&checkpoint).await.context(
        "the tables may be from an older memweave; index into a new --out to rebuild them",
    )?;
    let vectors: Vec<EmbeddingRow> = store.read_at(&checkpoint).await?;
    let (current, stale): (Vec<EmbeddingRow>, Vec<EmbeddingRow>) =
        vectors.into_iter().partition(|e| e.model == model);
    let tables = PreviousTables {
        documents,
        segments: store.read_at::<SegmentRow>(&checkpoint).await?,
        tree_nodes: store.read_at::<TreeNodeRow>(&checkpoint).await?,
        pages: store.read_at::<PageRow>(&checkpoint).await?,
        entities: store.read_at::<EntityRow>(&checkpoint).await?,
        relations: store.read_at::<RelationRow>(&checkpoint).await?,
        embeddings: current
            .iter()
            .map(|e| EmbeddingRecord::new(&e.owner_id, &e.owner_kind, &e.vector))
            .collect(),
        errors: store.read_at::<ErrorRow>(&checkpoint).await?,
    };
    Ok(Some(Previous {
        checkpoint,
        tables,
        stale_vectors: stale.into_iter().map(|e| e.owner_id).collect(),
    }))
}

/// The inputs of the files whose version is the one the checkpoint recorded
/// for this same source: their documents (text from the `documents` table) and
/// ingestion errors, so they need not be read again.
fn carried_over(
    previous: &Previous,
    source: &str,
    files: &[SourceFile],
) -> HashMap<String, OriginInput> {
    let positions: serde_json::Value =
        serde_json::from_str(&previous.checkpoint.source_positions).unwrap_or_default();
    if positions["source"].as_str() != Some(source) {
        return HashMap::new();
    }
    let versions = &positions["versions"];
    let by_uri: HashMap<&str, &SourceFile> = files
        .iter()
        .filter(|f| f.version.is_some() && versions[&f.key].as_str() == f.version.as_deref())
        .map(|f| (f.uri.as_str(), f))
        .collect();
    let mut carried: HashMap<String, OriginInput> = HashMap::new();
    for d in &previous.tables.documents {
        let Some(file) = file_of(&d.source_uri, &by_uri) else {
            continue;
        };
        input_of(&mut carried, file)
            .records
            .push((document_of(d), d.ingested_at));
    }
    for e in &previous.tables.errors {
        if e.stage == "ingest"
            && let Some(file) = file_of(&e.source, &by_uri)
        {
            input_of(&mut carried, file).errors.push(e.clone());
        }
    }
    carried
}

/// The dataflow's record of a document the tables hold.
fn document_of(row: &DocumentRow) -> Document {
    Document {
        doc_id: row.doc_id.clone(),
        version: row.version,
        content_hash: row.content_hash.clone(),
        source_uri: row.source_uri.clone(),
        title: row.title.clone(),
        text: row.text.clone(),
    }
}

fn input_of<'m>(
    inputs: &'m mut HashMap<String, OriginInput>,
    file: &SourceFile,
) -> &'m mut OriginInput {
    inputs
        .entry(file.key.clone())
        .or_insert_with(|| OriginInput {
            version: file.version.clone(),
            ..OriginInput::default()
        })
}

/// The file a document or error came from: its URI, or `URI:LINE` for a record
/// of a JSON Lines file.
fn file_of<'a>(uri: &str, files: &HashMap<&str, &'a SourceFile>) -> Option<&'a SourceFile> {
    files.get(uri).copied().or_else(|| {
        let (file, line) = uri.rsplit_once(':')?;
        line.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| files.get(file).copied())
            .flatten()
    })
}

/// On Ctrl-C or SIGTERM: start no new model calls, let those in flight finish (up
/// to 30 s), append them all to `llm_calls` so a restarted build pays for none of
/// them again, then (`exit`) exit with 130; else the main thread, seeing the
/// cache closed, stops.
async fn save_calls_when_interrupted(cache: Arc<CallCache>, exit: bool) {
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
    if exit {
        std::process::exit(130);
    }
}

fn tree_shapes(nodes: &[&TreeNodeRow]) -> BTreeMap<String, TreeShape> {
    let mut shapes: BTreeMap<String, TreeShape> = BTreeMap::new();
    for node in nodes {
        let shape = shapes.entry(node.tree.clone()).or_default();
        shape.nodes += 1;
        shape.roots += usize::from(node.parent_id.is_none());
        shape.depth = shape.depth.max(node.level);
    }
    shapes
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
