//! What every indexing process runs (the store, the model behind its call
//! cache, the embedder, the dataflow workers), and what a process other than 0
//! of a cluster does with it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memweave_llm::cache::{CacheReport, CallCache};
use memweave_llm::pool::{PoolClient, PoolReport};
use memweave_operators::embed::Embedder;
use memweave_operators::model::MemoryModel;
use memweave_schemas::TableStore;

use super::{INTERRUPT_PATIENCE, IndexOptions};
use crate::async_map::Tasks;
use crate::dataflow::Services;
use crate::metrics::IndexMetrics;
use crate::progress::{Progress, StageProgress};
use crate::state;
use crate::workers::Workers;
use crate::write::RoundWriter;
use crate::{IndexError, UsageError};

/// What every indexing process runs: the tables' store, the model behind its
/// call cache, the embedder, and the dataflow workers.
pub(super) struct Engine {
    /// First, so the workers stop (dropped in field order) before the runtime
    /// their futures run on.
    pub(super) workers: Workers,
    pub(super) runtime: tokio::runtime::Runtime,
    pub(super) store: TableStore,
    pub(super) cache: Arc<CallCache>,
    pub(super) embedder: Arc<dyn Embedder>,
    pub(super) pool: Option<Arc<PoolClient>>,
    pub(super) backend: String,
    /// What this process's documents' states are built by ([`state::fingerprint`]).
    pub(super) made_by: String,
    pub(super) progress: Arc<Mutex<Arc<Progress>>>,
    /// Each stage's work in the round, reported while any is pending.
    pub(super) stages: Arc<StageProgress>,
    /// Stages this process's rows; process 0's commits the rounds.
    pub(super) writer: Arc<RoundWriter>,
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
        let made_by = state::fingerprint(&options.build, model.as_ref(), embedder.as_ref());
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
            made_by,
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
pub fn compute(options: &IndexOptions) -> Result<ComputeSummary, IndexError> {
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
