//! `memweave index`: keeps the memory tables equal to what the source holds, one
//! round at a time. A round finds what changed since the last one (or, for a
//! process's first round, since the last checkpoint), feeds only that to the
//! dataflow, applies the rows it changed to the tables (deletes, then appends)
//! and commits a checkpoint naming every table's version.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{TimestampMicrosecondType, UInt32Type, UInt64Type};
use futures::StreamExt;
use memweave_llm::cache::{CacheReport, CallCache};
use memweave_llm::pool::{PoolClient, PoolReport};
use memweave_llm::{EmbedArgs, LlmArgs};
use memweave_operators::build::{BuildConfig, Document};
use memweave_operators::embed::Embedder;
use memweave_operators::ingest::{self, IngestError, RawDocument, SourceFile};
use memweave_operators::model::MemoryModel;
use memweave_schemas::{
    CallStatRow, CheckpointRow, DocumentRow, ErrorRow, LlmCallRow, Table, TableStore, TableVersion,
    now_micros,
};

use memweave_query::analytics::catalog::Catalog;
use memweave_query::analytics::metrics::prometheus;
use memweave_query::analytics::report::report;

use crate::cluster::Cluster;
use crate::metrics::IndexMetrics;
use crate::origins::{Held, Origins, Record};
use crate::positions::Positions;
use crate::progress::{Progress, StageProgress};
use crate::source::{Source, SourceOptions};

use crate::workers::{InputChange, Workers};
use crate::write::{OutRow, RoundChanges, RoundWriter, StagedPart};
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
    /// Output rows a worker gathers before writing them as data files.
    pub write_batch_rows: usize,
}

/// Rows per written batch unless told otherwise. A worker holds a batch of
/// whole rows (texts, vectors) until it is written: at 10M tokens 32,768 rows
/// held about 280 MiB more at peak than 4,096, for the same write time; the
/// smaller files this makes are merged by the commit's compaction.
pub const DEFAULT_WRITE_BATCH_ROWS: usize = 4_096;

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
    /// Rows the round wrote, all tables together.
    pub rows_written: u64,
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
    /// After the dataflow: the last rows' writes, the deletes, the commit of
    /// every table and the checkpoint. (Rows are written while the dataflow
    /// builds; that time is in `build`.)
    pub write: Duration,
}

/// How big one kind of tree came out.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeShape {
    pub nodes: usize,
    pub roots: usize,
    pub depth: u32,
}

/// What a round is told about one origin (a file, or a streamed document).
#[derive(Debug)]
pub(crate) enum Update {
    /// Its new input, texts included (a streamed message).
    Ready(Fresh),
    /// A file to read when its epoch is fed.
    Read(SourceFile),
    /// Its input as the last checkpoint left it, for a new process's first
    /// round: texts are read from the `documents` table when fed.
    Carried(Held),
    /// The origin is gone.
    Gone,
}

/// An origin's input as just read: its documents with their texts, each with
/// the time it was first seen, and the ingestion errors it caused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fresh {
    /// The file's version (ETag, size@mtime) when it was read.
    pub version: Option<String>,
    pub records: Vec<(Document, i64)>,
    pub errors: Vec<ErrorRow>,
}

/// What a round changes, by origin: the worker that feeds it and its update.
/// Origins not named are unchanged.
pub(crate) type Updates = BTreeMap<String, (usize, Update)>;

/// A document's known version: content hash, version number, first seen.
type KnownVersion = (String, u64, i64);

/// What the last checkpoint held, until the process's first round has used it:
/// the documents (without their texts) and ingestion errors the source's
/// unchanged files carry over.
#[derive(Debug)]
struct Previous {
    checkpoint: CheckpointRow,
    documents: Vec<Record>,
    ingest_errors: Vec<ErrorRow>,
}

/// An indexing process: the model, the running dataflow workers, and what the
/// tables hold.
pub struct Indexer {
    engine: Engine,
    /// What `/metrics` shows, with `--metrics-listen`.
    metrics: Option<Arc<IndexMetrics>>,
    options: IndexOptions,
    /// What the dataflow holds, by origin.
    origins: Origins,
    /// The `documents` table's version at the last checkpoint: where texts to
    /// retract or carry over are read.
    documents_version: Option<u64>,
    /// Errors of the listing itself (files skipped for their type).
    listing_errors: Vec<ErrorRow>,
    previous: Option<Previous>,
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
    /// Each stage's work in the round, reported while any is pending.
    stages: Arc<StageProgress>,
    /// Stages this process's rows; process 0's commits the rounds.
    writer: Arc<RoundWriter>,
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
        let stages = StageProgress::new();
        stages.spawn_reporter(runtime.handle());
        let writer = Arc::new(RoundWriter::new(
            store.clone(),
            (embedder.model().to_string(), embedder.dim()),
            Arc::clone(&stages),
            options.write_batch_rows.max(1),
        ));
        let workers = Workers::start(
            &options.cluster,
            options.workers.max(1),
            model,
            Arc::clone(&embedder),
            options.build,
            runtime.handle(),
            Arc::clone(&progress),
            Arc::clone(&stages),
            Arc::clone(&writer),
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
            stages,
            writer,
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
            .block_on(previous_tables(&engine.store))
            .with_context(|| {
                format!("reading the last checkpoint under {}", engine.store.root())
            })?;
        let versions = previous
            .iter()
            .flat_map(|p| &p.documents)
            .map(|d| {
                let known = (d.content_hash.clone(), d.version, d.seen);
                (d.doc_id.clone(), known)
            })
            .collect();
        let documents_version = previous
            .as_ref()
            .and_then(|p| p.checkpoint.version_of(Table::Documents));
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
            previous,
            engine,
            origins: Origins::default(),
            documents_version,
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
        let unchanged = |file: &SourceFile| {
            self.origins
                .get(&file.key)
                .is_some_and(|held| held.version.is_some() && held.version == file.version)
        };
        // Keys are sharded across workers by their place in the listing; files
        // held and unchanged are not updates, files gone are.
        let mut updates = Updates::new();
        for (index, file) in files.iter().enumerate() {
            let peer = index % self.engine.workers.feeds();
            let update = match carried.remove(&file.key) {
                Some(held) => Update::Carried(held),
                None if unchanged(file) => continue,
                None => Update::Read(file.clone()),
            };
            updates.insert(file.key.clone(), (peer, update));
        }
        let listed: HashSet<&str> = files.iter().map(|f| f.key.as_str()).collect();
        for key in self.origins.keys() {
            if !listed.contains(key.as_str()) {
                updates.insert(key.clone(), (0, Update::Gone));
            }
        }
        let reading = updates
            .values()
            .filter(|(_, u)| matches!(u, Update::Read(_)))
            .count();
        tracing::info!(
            source = %source.name(),
            files = files.len(),
            changed = reading,
            workers = self.engine.workers.feeds(),
            "indexing"
        );
        let listing_errors: Vec<ErrorRow> = discovery.rejected.iter().map(error_row).collect();
        let positions = Positions::Files {
            source: source.name(),
            files: files.len(),
            versions: Source::versions(&files),
        };
        let listing = Listing {
            source,
            files: files.iter().map(|f| (f.key.clone(), f)).collect(),
        };
        let mut summary = self.round_of(
            updates,
            Some(listing_errors),
            &positions,
            started,
            Some(&listing),
        )?;
        summary.source = source.name();
        summary.files = files.len();
        summary.versions = Source::versions(&files);
        Ok(summary)
    }

    /// Reads `files` (at most [`READS_IN_FLIGHT`] at once) into their inputs.
    fn read_files(&self, source: &Source, files: Vec<&SourceFile>) -> HashMap<String, Fresh> {
        let read: Vec<(&SourceFile, Result<Vec<u8>, String>)> = self.engine.runtime.block_on(
            futures::stream::iter(files)
                .map(|file| async move { (file, source.read(file).await) })
                .buffered(READS_IN_FLIGHT)
                .collect(),
        );
        let now = now_micros();
        let mut inputs = HashMap::new();
        for (file, bytes) in read {
            let mut input = Fresh {
                version: file.version.clone(),
                ..Fresh::default()
            };
            for parsed in ingest::parse(file, bytes) {
                match parsed {
                    Ok(raw) => input.records.push(self.versioned(raw, now)),
                    Err(error) => input.errors.push(error_row(&error)),
                }
            }
            inputs.insert(file.key.clone(), input);
        }
        inputs
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
    pub(crate) fn previous_positions(&self) -> Option<Positions> {
        let previous = self.previous.as_ref()?;
        Positions::parse(&previous.checkpoint.source_positions)
    }

    /// For a stream's first round: the last checkpoint's documents (by id) and
    /// ingestion errors (by the position they cite) as updates, each held by
    /// the worker `peer_of` its source position.
    pub(crate) fn carried_stream(&self, peer_of: impl Fn(&str) -> usize) -> Updates {
        let Some(previous) = &self.previous else {
            return Updates::new();
        };
        let mut updates = Updates::new();
        for d in &previous.documents {
            let held = Held {
                records: vec![d.clone()],
                ..Held::default()
            };
            updates.insert(
                d.doc_id.clone(),
                (peer_of(&d.source_uri), Update::Carried(held)),
            );
        }
        for e in &previous.ingest_errors {
            let held = Held {
                errors: vec![e.clone()],
                ..Held::default()
            };
            updates.insert(
                e.source.clone(),
                (peer_of(&e.source), Update::Carried(held)),
            );
        }
        updates
    }

    /// One round of a stream: `updates` name only the origins that changed.
    pub(crate) fn stream_round(
        &mut self,
        updates: Updates,
        positions: &Positions,
        started: Instant,
    ) -> anyhow::Result<IndexSummary> {
        self.round_of(updates, None, positions, started, None)
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

    /// Runs one round. `updates` names the origins that changed (and the
    /// worker that feeds each); `listing_errors`, when given, replace the
    /// errors of the last listing; `listing` is where files are read.
    fn round_of(
        &mut self,
        updates: Updates,
        listing_errors: Option<Vec<ErrorRow>>,
        positions: &Positions,
        started: Instant,
        listing: Option<&Listing<'_>>,
    ) -> anyhow::Result<IndexSummary> {
        let round = self.round;
        let read = started.elapsed();
        let mut ingest_errors: HashMap<ErrorRow, isize> = HashMap::new();
        if let Some(listing_errors) = listing_errors {
            count(&mut ingest_errors, &self.listing_errors, -1);
            count(&mut ingest_errors, &listing_errors, 1);
            self.listing_errors = listing_errors;
        }
        let progress = Progress::new(updates.len() as u64, self.options.interactive);
        *self
            .engine
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Arc::clone(&progress);
        // The dataflow of a process's first round starts empty and is fed every
        // document: its rows replace the tables' rather than change them.
        let replace = round == 0;
        self.engine.stages.reset();
        self.engine.runtime.block_on(self.engine.writer.prepare())?;
        // Epoch by epoch, every worker: one left behind would hold back
        // everyone's progress, and with it their flow control. Each epoch's
        // files are read as it is fed, so texts are held only while in flight.
        let feeds = self.engine.workers.feeds();
        let mut queues: Vec<Vec<(String, Update)>> = (0..feeds).map(|_| Vec::new()).collect();
        for (key, (peer, update)) in updates {
            queues[peer].push((key, update));
        }
        let epochs = queues
            .iter()
            .map(|q| q.len().div_ceil(ORIGINS_PER_EPOCH))
            .max()
            .unwrap_or(0);
        let mut queues: Vec<_> = queues.into_iter().map(Vec::into_iter).collect();
        for epoch in 0..epochs {
            for (peer, queue) in queues.iter_mut().enumerate() {
                let batch: Vec<(String, Update)> = queue.take(ORIGINS_PER_EPOCH).collect();
                let origins = batch.len();
                let changes = self.feed(batch, &mut ingest_errors, listing)?;
                self.engine
                    .workers
                    .send(round, epoch as u64, peer, origins, changes)?;
            }
        }
        let mut parts = self.engine.workers.finish_round(round)?;
        let build = started.elapsed() - read;
        progress.finish();
        if self.engine.cache.is_closing() {
            // Interrupted: documents whose calls were refused are not built, so
            // this round must not be committed. Save the calls and stop.
            self.engine
                .runtime
                .block_on(self.engine.cache.close(INTERRUPT_PATIENCE))?;
            return Err(Interrupted.into());
        }
        ingest_errors.retain(|_, diff| *diff != 0);
        if !ingest_errors.is_empty() {
            let batch = ingest_errors
                .into_iter()
                .map(|(row, diff)| (OutRow::Error(row), diff))
                .collect();
            parts.push(
                self.engine
                    .runtime
                    .block_on(self.engine.writer.stage(batch))?,
            );
        }
        self.previous = None;
        tracing::info!(round, "committing the round");
        let (checkpoint, changes) = self
            .engine
            .runtime
            .block_on(self.commit(replace, parts, positions))
            .with_context(|| format!("writing the tables under {}", self.engine.store.root()))?;
        self.round += 1;
        self.documents_version = checkpoint.version_of(Table::Documents);
        for error in &changes.errors_added {
            tracing::warn!(source = %error.source, kind = %error.kind, "{}", error.message);
        }
        let (changed, deleted) = self.note_versions(&changes, replace);
        if let Some(metrics) = &self.metrics {
            let memory = self.engine.runtime.block_on(async {
                let catalog =
                    Catalog::open(self.engine.store.clone(), Some(checkpoint.epoch)).await?;
                anyhow::Ok(prometheus(&report(&catalog).await?))
            });
            match memory {
                Ok(memory) => metrics.committed(checkpoint.epoch, memory),
                Err(e) => tracing::warn!("the memory's report for /metrics failed: {e:#}"),
            }
        }
        let mut summary = self.summary(&checkpoint, started)?;
        summary.changed = changed;
        summary.deleted = deleted;
        summary.rows_written = changes.rows_written;
        summary.stages = Stages {
            read,
            build,
            write: summary.wall - read - build,
        };
        Ok(summary)
    }

    /// One epoch's share of a round: reads its files, updates the origins, and
    /// returns the dataflow's input changes. Texts not read now come from the
    /// `documents` table as last committed (documents carried over, and every
    /// version retracted) or, for a claim that has just become its id's
    /// document, from its file read again.
    fn feed(
        &mut self,
        batch: Vec<(String, Update)>,
        errors: &mut HashMap<ErrorRow, isize>,
        listing: Option<&Listing<'_>>,
    ) -> anyhow::Result<Vec<InputChange>> {
        let files: Vec<&SourceFile> = batch
            .iter()
            .filter_map(|(_, update)| match update {
                Update::Read(file) => Some(file),
                _ => None,
            })
            .collect();
        let mut read = match (files.is_empty(), listing) {
            (true, _) => HashMap::new(),
            (false, Some(listing)) => self.read_files(listing.source, files),
            (false, None) => anyhow::bail!("a stream's round has no files to read"),
        };
        // Texts read now, by document id and source.
        let mut texts: HashMap<(String, String), String> = HashMap::new();
        let (mut retract, mut insert) = (Vec::new(), Vec::new());
        for (key, update) in batch {
            let held = match update {
                Update::Gone => None,
                Update::Carried(held) => Some(held),
                Update::Ready(fresh) => Some(hold(fresh, &mut texts)),
                Update::Read(_) => read.remove(&key).map(|fresh| hold(fresh, &mut texts)),
            };
            let moves = self.origins.update(&key, held);
            for (row, diff) in moves.errors {
                *errors.entry(row).or_insert(0) += diff;
            }
            retract.extend(moves.retract);
            insert.extend(moves.insert);
        }
        let wanted: Vec<String> = retract
            .iter()
            .chain(
                insert
                    .iter()
                    .filter(|r| !texts.contains_key(&(r.doc_id.clone(), r.source_uri.clone()))),
            )
            .map(|r| r.doc_id.clone())
            .collect();
        let stored: HashMap<String, DocumentRow> = match (wanted.is_empty(), self.documents_version)
        {
            (false, Some(version)) => self
                .engine
                .runtime
                .block_on(
                    self.engine
                        .store
                        .rows_with_keys::<DocumentRow>(version, &wanted),
                )?
                .into_iter()
                .map(|row| (row.doc_id.clone(), row))
                .collect(),
            _ => HashMap::new(),
        };
        let stored_text = |record: &Record| {
            stored
                .get(&record.doc_id)
                .filter(|row| Record::of_row(row) == *record)
                .map(|row| row.text.clone())
        };
        let mut changes = Vec::with_capacity(retract.len() + insert.len());
        for record in retract {
            let text = stored_text(&record).with_context(|| {
                format!(
                    "the documents table does not hold version {} of {} ({}) to retract",
                    record.version, record.doc_id, record.source_uri
                )
            })?;
            changes.push((record.with_text(text), -1));
        }
        for record in insert {
            let key = (record.doc_id.clone(), record.source_uri.clone());
            let text = match texts.remove(&key).or_else(|| stored_text(&record)) {
                Some(text) => text,
                None => self.read_again(&record, listing)?,
            };
            changes.push((record.with_text(text), 1));
        }
        Ok(changes)
    }

    /// The text of a claim that has become its id's document (the claim that
    /// held the id is gone): read from its file again.
    fn read_again(&self, record: &Record, listing: Option<&Listing<'_>>) -> anyhow::Result<String> {
        let origin = self.origins.origin_of(record);
        let file = origin
            .zip(listing)
            .and_then(|(o, l)| Some((l.files.get(o)?, l)));
        let Some((file, listing)) = file else {
            anyhow::bail!(
                "no text to index for {} ({})",
                record.doc_id,
                record.source_uri
            );
        };
        let fresh = self.read_files(listing.source, vec![file]);
        fresh
            .into_values()
            .flat_map(|f| f.records)
            .find(|(doc, _)| doc.doc_id == record.doc_id && doc.source_uri == record.source_uri)
            .filter(|(doc, _)| doc.content_hash == record.content_hash)
            .map(|(doc, _)| doc.text)
            .with_context(|| {
                format!(
                    "{} changed while it was indexed; run again",
                    record.source_uri
                )
            })
    }

    /// Commits the round: every memory table's staged rows and deletes (see
    /// [`RoundWriter::commit`]; `replace` replaces each table's rows), the
    /// model's calls and their counts, then a checkpoint naming every table's
    /// version; returns its epoch and what changed.
    async fn commit(
        &self,
        replace: bool,
        parts: Vec<StagedPart>,
        positions: &Positions,
    ) -> anyhow::Result<(CheckpointRow, RoundChanges)> {
        let store = &self.engine.store;
        let (mut versions, changes) = self.engine.writer.commit(replace, parts).await?;
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
        // No checkpoint yet is no documents version yet.
        let first = self.documents_version.is_none();
        versions.push(self.write_call_stats(first).await?);
        let checkpoint = store
            .commit_checkpoint(positions.record(), versions)
            .await?;
        Ok((checkpoint, changes))
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

    /// Notes the versions of the documents a round added and removed; returns
    /// how many documents are new or changed, and how many are gone. A
    /// `replace` round (a process's first) added every document: against the
    /// last checkpoint's versions, only those whose version changed count, and
    /// the checkpoint's documents it did not add are gone.
    fn note_versions(&mut self, changes: &RoundChanges, replace: bool) -> (usize, usize) {
        let added: HashMap<&str, KnownVersion> = changes
            .documents_added
            .iter()
            .map(|d| {
                let known = (d.content_hash.clone(), d.version, d.ingested_at);
                (d.doc_id.as_str(), known)
            })
            .collect();
        let (changed, deleted) = if replace {
            let changed = added
                .iter()
                .filter(|(id, known)| self.versions.get(**id) != Some(known))
                .count();
            let deleted = self
                .versions
                .keys()
                .filter(|id| !added.contains_key(id.as_str()))
                .count();
            self.versions.clear();
            (changed, deleted)
        } else {
            let removed: HashSet<&str> = changes
                .documents_removed
                .iter()
                .map(String::as_str)
                .filter(|id| !added.contains_key(id))
                .collect();
            for id in &removed {
                self.versions.remove(*id);
            }
            (added.len(), removed.len())
        };
        for (id, known) in added {
            self.versions.insert(id.to_string(), known);
        }
        (changed, deleted)
    }

    /// The summary of the memory at `checkpoint`, from its tables (row counts
    /// from Lance's metadata; tokens and tree shapes from a scan of three
    /// small columns). What the round changed is the caller's to fill in.
    fn summary(
        &self,
        checkpoint: &CheckpointRow,
        started: Instant,
    ) -> anyhow::Result<IndexSummary> {
        let store = &self.engine.store;
        let (counts, tokens, trees, mut errors) = self.engine.runtime.block_on(async {
            let mut counts = HashMap::new();
            for table in Table::memory_tables() {
                counts.insert(table, store.count_at(table, checkpoint).await? as usize);
            }
            let mut tokens = 0;
            store
                .scan_at(Table::Documents, checkpoint, &["n_tokens"], |batch| {
                    tokens += u64_column(batch, "n_tokens").iter().flatten().sum::<u64>();
                })
                .await?;
            let trees = tree_shapes(store, checkpoint).await?;
            let errors: Vec<ErrorRow> = store.read_at(checkpoint).await?;
            anyhow::Ok((counts, tokens, trees, errors))
        })?;
        errors.sort_by(|a, b| (&a.source, &a.error_id).cmp(&(&b.source, &b.error_id)));
        let count = |table| counts.get(&table).copied().unwrap_or(0);
        Ok(IndexSummary {
            source: String::new(),
            tables: store.root().to_string(),
            epoch: checkpoint.epoch,
            files: 0,
            input_unit: "files",
            documents: count(Table::Documents),
            changed: 0,
            deleted: 0,
            versions: BTreeMap::new(),
            tokens,
            segments: count(Table::Segments),
            trees,
            pages: count(Table::Pages),
            entities: count(Table::Entities),
            relations: count(Table::Relations),
            embeddings: count(Table::Embeddings),
            embedder: (
                self.engine.embedder.model().to_string(),
                self.engine.embedder.dim(),
            ),
            errors,
            wall: started.elapsed(),
            stages: Stages::default(),
            rows_written: 0,
            backend: self.engine.backend.clone(),
            cache: self.engine.cache.report(),
            pool: self.engine.pool.as_ref().map(|p| p.report()),
        })
    }
}

/// An origin's input as held: its documents without their texts, which go to
/// `texts` by document id and source.
fn hold(fresh: Fresh, texts: &mut HashMap<(String, String), String>) -> Held {
    let records = fresh
        .records
        .into_iter()
        .map(|(doc, seen)| {
            let record = Record::of(&doc, seen);
            texts.insert((doc.doc_id, doc.source_uri), doc.text);
            record
        })
        .collect();
    Held {
        version: fresh.version,
        records,
        errors: fresh.errors,
    }
}

fn count(errors: &mut HashMap<ErrorRow, isize>, rows: &[ErrorRow], diff: isize) {
    for row in rows {
        *errors.entry(row.clone()).or_insert(0) += diff;
    }
}

/// Where a round reads files: the source, and its listing by key.
pub(crate) struct Listing<'a> {
    source: &'a Source,
    files: HashMap<String, &'a SourceFile>,
}

/// The newest checkpoint's documents and ingestion errors, after rolling back
/// table versions written after it by a run that did not commit.
async fn previous_tables(store: &TableStore) -> anyhow::Result<Option<Previous>> {
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
    let documents = document_records(store, &checkpoint).await.context(
        "the tables may be from an older memweave; index into a new --out to rebuild them",
    )?;
    let errors: Vec<ErrorRow> = store.read_at(&checkpoint).await?;
    // Duplicate ids are the origins' claims' to report, not a file's.
    let ingest_errors = errors
        .into_iter()
        .filter(|e| e.stage == "ingest" && e.kind != "duplicate_id")
        .collect();
    Ok(Some(Previous {
        checkpoint,
        documents,
        ingest_errors,
    }))
}

/// Every document at `checkpoint`, without its text (the one column read
/// again only when a document is fed or retracted).
async fn document_records(
    store: &TableStore,
    checkpoint: &CheckpointRow,
) -> anyhow::Result<Vec<Record>> {
    let columns = [
        "doc_id",
        "version",
        "content_hash",
        "source_uri",
        "title",
        "ingested_at",
    ];
    let mut records = Vec::new();
    let mut failed = None;
    store
        .scan_at(Table::Documents, checkpoint, &columns, |batch| {
            let strings = |name: &str| {
                batch
                    .column_by_name(name)
                    .and_then(|c| c.as_string_opt::<i32>())
            };
            let (Some(ids), Some(hashes), Some(uris), Some(titles), Some(versions), Some(seen)) = (
                strings("doc_id"),
                strings("content_hash"),
                strings("source_uri"),
                strings("title"),
                batch
                    .column_by_name("version")
                    .and_then(|c| c.as_primitive_opt::<UInt64Type>()),
                batch
                    .column_by_name("ingested_at")
                    .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>()),
            ) else {
                failed = Some(batch.schema());
                return;
            };
            records.extend((0..batch.num_rows()).map(|row| Record {
                doc_id: ids.value(row).to_string(),
                version: versions.value(row),
                content_hash: hashes.value(row).to_string(),
                source_uri: uris.value(row).to_string(),
                title: titles.value(row).to_string(),
                seen: seen.value(row),
            }));
        })
        .await?;
    if let Some(schema) = failed {
        anyhow::bail!("the documents table's columns are not memweave's: {schema:?}");
    }
    Ok(records)
}

/// The inputs of the files whose version is the one the checkpoint recorded
/// for this same source: their documents (without texts) and ingestion
/// errors, so they need not be read again.
fn carried_over(previous: &Previous, source: &str, files: &[SourceFile]) -> HashMap<String, Held> {
    let Some(Positions::Files {
        source: recorded,
        versions,
        ..
    }) = Positions::parse(&previous.checkpoint.source_positions)
    else {
        return HashMap::new();
    };
    if recorded != source {
        return HashMap::new();
    }
    let by_uri: HashMap<&str, &SourceFile> = files
        .iter()
        .filter(|f| f.version.is_some() && versions.get(&f.key) == f.version.as_ref())
        .map(|f| (f.uri.as_str(), f))
        .collect();
    let mut carried: HashMap<String, Held> = HashMap::new();
    for d in &previous.documents {
        if let Some(file) = file_of(&d.source_uri, &by_uri) {
            carried_input(&mut carried, file).records.push(d.clone());
        }
    }
    for e in &previous.ingest_errors {
        if let Some(file) = file_of(&e.source, &by_uri) {
            carried_input(&mut carried, file).errors.push(e.clone());
        }
    }
    carried
}

fn carried_input<'m>(carried: &'m mut HashMap<String, Held>, file: &SourceFile) -> &'m mut Held {
    carried.entry(file.key.clone()).or_insert_with(|| Held {
        version: file.version.clone(),
        ..Held::default()
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

/// Nodes, roots and depth of each kind of tree at `checkpoint`.
async fn tree_shapes(
    store: &TableStore,
    checkpoint: &CheckpointRow,
) -> anyhow::Result<BTreeMap<String, TreeShape>> {
    let mut shapes: BTreeMap<String, TreeShape> = BTreeMap::new();
    let columns = ["tree", "parent_id", "level"];
    store
        .scan_at(Table::TreeNodes, checkpoint, &columns, |batch| {
            let (Some(trees), Some(parents), Some(levels)) = (
                batch
                    .column_by_name("tree")
                    .and_then(|c| c.as_string_opt::<i32>()),
                batch
                    .column_by_name("parent_id")
                    .and_then(|c| c.as_string_opt::<i32>()),
                batch
                    .column_by_name("level")
                    .and_then(|c| c.as_primitive_opt::<UInt32Type>()),
            ) else {
                return;
            };
            for row in 0..batch.num_rows() {
                let shape = shapes.entry(trees.value(row).to_string()).or_default();
                shape.nodes += 1;
                shape.roots += usize::from(parents.is_null(row));
                shape.depth = shape.depth.max(levels.value(row));
            }
        })
        .await?;
    Ok(shapes)
}

/// The values of the `UInt64` column `name` of `batch` (none if it has no
/// such column).
fn u64_column(batch: &RecordBatch, name: &str) -> Vec<Option<u64>> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        .map(|c| c.iter().collect())
        .unwrap_or_default()
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
