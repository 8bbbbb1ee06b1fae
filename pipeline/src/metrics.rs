//! The indexer's `/metrics` (Prometheus), with `--metrics-listen ADDR`: the
//! round in progress (files or messages done and waiting, documents built),
//! the model calls (in flight, made, answered from the cache, tokens per stage
//! and task), the last commit (epoch, seconds since), and the committed
//! memory's report as `memweave_memory_*` gauges (what the query service's
//! `/metrics` shows too).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use memweave_analytics::metrics::by_direction;
use memweave_llm::cache::CallCache;
use memweave_schemas::prometheus::{CONTENT_TYPE, Exposition, Kind, labels};

use crate::UsageError;
use crate::progress::Progress;

/// What the endpoint reads: shared with the indexer, which updates it.
#[derive(Debug)]
pub struct IndexMetrics {
    cache: Arc<CallCache>,
    progress: Arc<Mutex<Arc<Progress>>>,
    epoch: AtomicU64,
    committed_at: Mutex<Option<Instant>>,
    /// The committed checkpoint's report, as `memweave_memory_*` gauges.
    memory: RwLock<String>,
}

impl IndexMetrics {
    pub fn new(cache: Arc<CallCache>, progress: Arc<Mutex<Arc<Progress>>>) -> Arc<Self> {
        Arc::new(IndexMetrics {
            cache,
            progress,
            epoch: AtomicU64::new(0),
            committed_at: Mutex::new(None),
            memory: RwLock::new(String::new()),
        })
    }

    /// Checkpoint `epoch` is committed; `memory` is its report's gauges.
    pub fn committed(&self, epoch: u64, memory: String) {
        self.epoch.store(epoch, Ordering::Relaxed);
        *self.committed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        *self.memory.write().unwrap_or_else(|e| e.into_inner()) = memory;
    }

    fn render(&self) -> String {
        let mut metrics = Exposition::new();
        let mut metric = |name: &str, kind: Kind, help: &str, samples: Vec<(String, f64)>| {
            let samples = samples
                .into_iter()
                .map(|(labels, value)| (labels, Some(value)));
            metrics.metric(name, kind, help, samples);
        };
        let plain = |value: f64| vec![(String::new(), value)];
        let progress = Arc::clone(&self.progress.lock().unwrap_or_else(|e| e.into_inner()));
        let (done, total, documents) = progress.counts();
        metric(
            "memweave_index_round_inputs",
            Kind::Gauge,
            "Files or messages of the round in progress.",
            plain(total as f64),
        );
        metric(
            "memweave_index_round_inputs_done",
            Kind::Gauge,
            "Files or messages of the round whose memories are built.",
            plain(done as f64),
        );
        metric(
            "memweave_index_queue_depth",
            Kind::Gauge,
            "Files or messages of the round fed or waiting, not yet built.",
            plain(total.saturating_sub(done) as f64),
        );
        metric(
            "memweave_index_round_documents_built",
            Kind::Gauge,
            "Documents of the round whose memories are built.",
            plain(documents as f64),
        );
        metric(
            "memweave_index_epoch",
            Kind::Gauge,
            "Last committed checkpoint (0 before the first).",
            plain(self.epoch.load(Ordering::Relaxed) as f64),
        );
        let since = self
            .committed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(-1.0, |at| at.elapsed().as_secs_f64());
        metric(
            "memweave_index_epoch_lag_seconds",
            Kind::Gauge,
            "Seconds since the last commit (-1 before the first): how far the tables trail the source.",
            plain(since),
        );
        let report = self.cache.report();
        metric(
            "memweave_llm_calls_in_flight",
            Kind::Gauge,
            "Model calls started and not answered.",
            plain(self.cache.in_flight() as f64),
        );
        let stats = self.cache.stats_total();
        let by = |pick: fn(&memweave_llm::cache::TaskStats) -> u64| -> Vec<(String, f64)> {
            stats
                .iter()
                .map(|((stage, task), s)| {
                    (labels(&[("stage", stage), ("task", task)]), pick(s) as f64)
                })
                .collect()
        };
        metric(
            "memweave_llm_calls_total",
            Kind::Counter,
            "Model calls made by this process, per stage and task.",
            by(|s| s.calls),
        );
        metric(
            "memweave_llm_cache_hits_total",
            Kind::Counter,
            "Model calls answered from the cache, per stage and task.",
            by(|s| s.cache_hits),
        );
        metric(
            "memweave_llm_tokens_total",
            Kind::Counter,
            "Model tokens of the calls made, per stage, task and direction.",
            by_direction(by(|s| s.tokens_in), by(|s| s.tokens_out)),
        );
        metric(
            "memweave_llm_calls_saved_total",
            Kind::Counter,
            "Model calls appended to llm_calls.",
            plain(report.flushed as f64),
        );
        metrics.extend(&self.memory.read().unwrap_or_else(|e| e.into_inner()));
        metrics.into_text()
    }
}

/// Serves `/metrics` on `address` from the current runtime until the process ends.
pub async fn serve(address: SocketAddr, metrics: Arc<IndexMetrics>) -> Result<(), UsageError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| UsageError(format!("--metrics-listen {address}: {e}")))?;
    tracing::info!(%address, "serving /metrics");
    let app = Router::new()
        .route("/metrics", get(handler))
        .with_state(metrics);
    memweave_process::task::spawn("metrics", async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the /metrics endpoint stopped: {e}");
        }
    });
    Ok(())
}

async fn handler(State(metrics): State<Arc<IndexMetrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render())
}
