//! What every indexing process runs (the store, the model behind its call
//! cache, the embedder, the dataflow workers), and what a process other than 0
//! of a cluster does with it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memweave_llm::cache::{CacheReport, CallCache};
use memweave_llm::pool::{PoolClient, PoolReport};
use memweave_operators::embed::Embedder;
use memweave_operators::model::MemoryModel;
use memweave_schemas::search::RankedCorpora;
use memweave_schemas::{CheckpointRow, TableStore, VectorSpec};

use memweave_schemas::TableVersion;
use memweave_schemas::store::Compaction;

use super::{EmbedderName, INTERRUPT_PATIENCE, IndexOptions};
use crate::async_map::Tasks;
use crate::dataflow::{Fed, Services};
use crate::metrics::IndexMetrics;
use crate::progress::{Progress, StageProgress};
use crate::state;
use crate::workers::{InputChange, Workers};
use crate::write::{Batch, RoundChanges, RoundWriter, StagedPart};
use crate::{IndexError, UsageError};

/// What every indexing process runs: the tables' store, the model behind its
/// call cache, the embedder, and the dataflow workers. The indexer reaches
/// them through what a round does with them (begin, send, stage, finish),
/// never through its parts.
pub(super) struct Engine {
    /// First, so the workers stop (dropped in field order) before the runtime
    /// their futures run on.
    workers: Workers,
    runtime: tokio::runtime::Runtime,
    store: TableStore,
    cache: Arc<CallCache>,
    embedder: Arc<dyn Embedder>,
    pool: Option<Arc<PoolClient>>,
    backend: String,
    /// The builds whose documents' states this process restores
    /// ([`state::fingerprints_read`]).
    reads_states_of: Vec<String>,
    /// What its vectors are made by, as its checkpoints record it.
    vectors: VectorSpec,
    progress: Arc<Mutex<Arc<Progress>>>,
    /// Each stage's work in the round, reported while any is pending.
    stages: Arc<StageProgress>,
    /// Stages this process's rows; process 0's commits the rounds.
    writer: Arc<RoundWriter>,
}

/// What a process's model and embedder did and are, for its summary.
pub(super) struct ModelReport {
    pub(super) backend: String,
    pub(super) cache: CacheReport,
    pub(super) pool: Option<PoolReport>,
    pub(super) embedder: EmbedderName,
}

impl Engine {
    /// Opens the store and the call cache, the model and the embedder, and
    /// starts this process's workers (which, in a cluster, wait for the others).
    pub(super) fn start(options: &IndexOptions) -> Result<Engine, IndexError> {
        options.build.validate().map_err(UsageError::of)?;
        let store = TableStore::new(&options.tables, options.storage_options.clone())
            .map_err(UsageError::of)?;
        store.check_writable().map_err(UsageError::of)?;
        // Model calls (and, for the extractive backend, the work itself) run here.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.workers.max(2))
            .enable_all()
            .build()?;
        let cache = runtime
            .block_on(CallCache::persistent(store.clone(), &options.llm))
            .map_err(|source| IndexError::CallCache {
                root: store.root().to_string(),
                source,
            })?;
        if let Some(budget) = options.max_model_tokens {
            cache.limit_tokens(budget);
        }
        let task_model = options
            .llm
            .model(Arc::clone(&cache))
            .map_err(UsageError::of)?;
        let pool = task_model.pool().cloned();
        let backend = task_model.backend().to_string();
        let model: Arc<dyn MemoryModel> = Arc::new(task_model);
        let embedder = runtime
            .block_on(options.embed.embedder(Arc::clone(&cache)))
            .map_err(UsageError::of)?;
        let reads_states_of =
            state::fingerprints_read(&options.build, model.as_ref(), embedder.as_ref());
        let vectors = VectorSpec {
            model: embedder.model().to_string(),
            segment_tokens: options.build.segments.target_tokens as u32,
        };
        // A cluster's process 0 must close the dataflow the others compute in,
        // so it stops through its main thread rather than exiting from here.
        let exit = options.cluster.processes() == 1 || options.cluster.process != 0;
        let save = save_calls_when_interrupted(Arc::clone(&cache), exit);
        memweave_process::task::spawn_on(runtime.handle(), "save_calls_on_stop", save);
        let progress = Arc::new(Mutex::new(Progress::new(0, false)));
        let stages = StageProgress::new();
        stages.spawn_reporter(runtime.handle());
        let writer = Arc::new(RoundWriter::new(
            store.clone(),
            embedder.dim(),
            Arc::clone(&stages),
            options.write_batch_rows.max(1),
            RankedCorpora::finest_cut(options.build.finest_cut() as u32),
        ));
        let services = Services {
            model,
            embedder: Arc::clone(&embedder),
            tasks: Tasks {
                runtime: runtime.handle().clone(),
                stages: Arc::clone(&stages),
            },
            writer: Arc::clone(&writer),
            flights: options.flights.clone(),
        };
        let workers = Workers::start(
            &options.cluster,
            options.workers.max(1),
            services,
            options.build,
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
            reads_states_of,
            vectors,
            progress,
            stages,
            writer,
        })
    }

    /// Runs `future` on the process's runtime.
    pub(super) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    pub(super) fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    pub(super) fn store(&self) -> &TableStore {
        &self.store
    }

    pub(super) fn cache(&self) -> &CallCache {
        &self.cache
    }

    /// The builds whose documents' states this process restores.
    pub(super) fn reads_states_of(&self) -> &[String] {
        &self.reads_states_of
    }

    /// What its vectors are made by.
    pub(super) fn vectors(&self) -> &VectorSpec {
        &self.vectors
    }

    /// Workers that take input: this process's, in process 0.
    pub(super) fn feeds(&self) -> usize {
        self.workers.feeds()
    }

    /// Serves `/metrics` on `address`: this process's model calls and its
    /// round's progress; the memory's figures are the caller's to add.
    pub(super) fn serve_metrics(
        &self,
        address: std::net::SocketAddr,
    ) -> Result<Arc<IndexMetrics>, IndexError> {
        let metrics = IndexMetrics::new(Arc::clone(&self.cache), Arc::clone(&self.progress));
        let served = Arc::clone(&metrics);
        self.block_on(crate::metrics::serve(address, served))?;
        Ok(metrics)
    }

    /// A round begins: its progress is the one shown, each stage's work is
    /// counted from nothing, and the writer knows the tables it stages into.
    pub(super) fn begin_round(&self, progress: Arc<Progress>) -> Result<(), IndexError> {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = progress;
        self.stages.reset();
        Ok(self.block_on(self.writer.prepare())?)
    }

    /// Sends one epoch of a round's changes to `worker` (see [`Workers::send`]).
    pub(super) fn send(
        &self,
        round: u64,
        epoch: u64,
        worker: usize,
        origins: usize,
        changes: Vec<InputChange>,
    ) -> Result<(), IndexError> {
        self.workers.send(round, epoch, worker, origins, changes)
    }

    /// Sends one epoch of a round's restore to `worker` (see [`Workers::restore`]).
    pub(super) fn restore(
        &self,
        round: u64,
        epoch: u64,
        worker: usize,
        restored: Vec<Fed>,
    ) -> Result<(), IndexError> {
        self.workers.restore(round, epoch, worker, restored)
    }

    /// Seals `round` and returns what every worker staged.
    pub(super) fn finish_round(&self, round: u64) -> Result<Vec<StagedPart>, IndexError> {
        self.workers.finish_round(round)
    }

    /// Stages rows of the round that no worker built (ingestion errors,
    /// retractions of what the tables hold).
    pub(super) fn stage(&self, batch: Batch) -> Result<StagedPart, IndexError> {
        self.block_on(self.writer.stage(batch))
    }

    /// Commits what the round staged into every memory table (see
    /// [`RoundWriter::commit`]).
    pub(super) async fn commit_rows(
        &self,
        replace: bool,
        parts: Vec<StagedPart>,
        compaction: Compaction,
        checkpointed: Option<&CheckpointRow>,
    ) -> Result<(Vec<TableVersion>, RoundChanges), IndexError> {
        Ok(self
            .writer
            .commit(replace, parts, compaction, checkpointed)
            .await?)
    }

    /// What this process's model and embedder did and are.
    pub(super) fn model_report(&self) -> ModelReport {
        ModelReport {
            backend: self.backend.clone(),
            cache: self.cache.report(),
            pool: self.pool.as_ref().map(|p| p.report()),
            embedder: EmbedderName {
                model: self.embedder.model().to_string(),
                width: self.embedder.dim(),
            },
        }
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
pub fn compute(options: &IndexOptions) -> Result<ComputeSummary, IndexError> {
    let started = Instant::now();
    let engine = Engine::start(options)?;
    tracing::info!(
        process = options.cluster.process,
        processes = options.cluster.processes(),
        "computing this process's share; process 0 reads the source and commits"
    );
    // This process's model calls; the round and the memory are process 0's.
    if let Some(address) = options.metrics_listen {
        engine.serve_metrics(address)?;
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

/// On Ctrl-C or SIGTERM: start no new model calls, let those in flight finish (up
/// to 30 s), append them all to `llm_calls` so a restarted build pays for none of
/// them again, then (`exit`) exit with 130; else the main thread, seeing the
/// cache closed, stops.
async fn save_calls_when_interrupted(cache: Arc<CallCache>, exit: bool) {
    memweave_process::stop_requested().await;
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
