//! The content-addressed call cache, persisted as the `llm_calls` table (which is
//! also the cost ledger). A call's key is the blake3 of everything that decides its
//! reply; a key is called at most once per process (concurrent askers share the
//! call) and, once flushed, never again by any run over the same tables.
//!
//! Lookups read only the `call_key` and `reply` columns of the keys asked for,
//! batched, through a B-tree index on `call_key`; the table is never loaded whole.
//! New rows are appended every [`FLUSH_INTERVAL`], so a run that is killed loses at
//! most that much finished work.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memweave_operators::model::StepError;
use memweave_schemas::{LlmCallRow, Table, TableStore, content_id};
use tokio::sync::{OnceCell, mpsc, oneshot};

use crate::prompts::Prompt;

/// How often new calls are appended to `llm_calls`.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Most keys looked up in one scan.
const LOOKUP_BATCH: usize = 512;

/// Everything besides the prompt that decides a reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallParams {
    pub temperature: f32,
    pub max_tokens: u32,
    /// Which try this is: a re-ask after an unparsable reply is a different call.
    pub attempt: u32,
}

/// The cache key of a call.
pub fn call_key(
    backend: &str,
    model: &str,
    task: &str,
    prompt: &Prompt,
    params: &CallParams,
) -> String {
    let params = format!(
        "temperature={};max_tokens={};attempt={}",
        params.temperature, params.max_tokens, params.attempt
    );
    content_id(
        "call",
        &[
            backend.as_bytes(),
            model.as_bytes(),
            task.as_bytes(),
            prompt.text().as_bytes(),
            params.as_bytes(),
        ],
    )
}

type Lookup = (String, oneshot::Sender<Option<String>>);

/// Counters of a run's cache use.
#[derive(Debug, Default, serde::Serialize, Clone, Copy, PartialEq, Eq)]
pub struct CacheReport {
    /// Replies found in `llm_calls` (or already asked by this process).
    pub hits: u64,
    /// Calls made.
    pub calls: u64,
    /// Rows appended to `llm_calls` so far.
    pub flushed: u64,
}

#[derive(Debug)]
pub struct CallCache {
    store: Option<TableStore>,
    cache_only: bool,
    /// This process's calls: in flight, or done and not yet flushed.
    cells: Mutex<HashMap<String, Arc<OnceCell<String>>>>,
    pending: Mutex<Vec<LlmCallRow>>,
    lookups: Option<mpsc::UnboundedSender<Lookup>>,
    /// Serialises flushes, so rows are appended once and in order.
    flushing: tokio::sync::Mutex<()>,
    hits: AtomicU64,
    calls: AtomicU64,
    flushed: AtomicU64,
}

impl CallCache {
    /// A cache that lives only in memory (tests, `memweave ask`).
    pub fn in_memory() -> Arc<Self> {
        Arc::new(Self::with(None, false, None))
    }

    fn with(
        store: Option<TableStore>,
        cache_only: bool,
        lookups: Option<mpsc::UnboundedSender<Lookup>>,
    ) -> Self {
        CallCache {
            store,
            cache_only,
            cells: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            lookups,
            flushing: tokio::sync::Mutex::new(()),
            hits: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
        }
    }

    /// The cache persisted under `store`; spawns its lookup and flush tasks on the
    /// current tokio runtime. With `cache_only`, a call not in the cache fails with
    /// `StepError::CacheMiss` instead of reaching a backend.
    pub fn persistent(store: TableStore, cache_only: bool) -> Arc<Self> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let cache = Arc::new(Self::with(Some(store.clone()), cache_only, Some(sender)));
        tokio::spawn(serve_lookups(store, receiver));
        let weak = Arc::downgrade(&cache);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(FLUSH_INTERVAL);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(cache) = weak.upgrade() else { return };
                if let Err(e) = cache.flush().await {
                    tracing::warn!("appending model calls to llm_calls: {e:#}");
                }
            }
        });
        cache
    }

    pub fn report(&self) -> CacheReport {
        CacheReport {
            hits: self.hits.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            flushed: self.flushed.load(Ordering::Relaxed),
        }
    }

    /// The reply of the call `key`: from this process's calls, from `llm_calls`, or
    /// by making the call with `call` (once, however many ask at the same time).
    pub async fn reply<F, Fut>(&self, key: &str, task: &str, call: F) -> Result<String, StepError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<LlmCallRow, StepError>>,
    {
        let cell = {
            let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(cells.entry(key.to_string()).or_default())
        };
        let found_in_table = std::sync::atomic::AtomicBool::new(false);
        let reply = cell
            .get_or_try_init(|| async {
                if let Some(reply) = self.lookup(key).await {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    found_in_table.store(true, Ordering::Relaxed);
                    return Ok(reply);
                }
                if self.cache_only {
                    return Err(StepError::CacheMiss {
                        task: task.to_string(),
                    });
                }
                let row = call().await?;
                self.calls.fetch_add(1, Ordering::Relaxed);
                let reply = row.reply.clone();
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(row);
                Ok(reply)
            })
            .await?
            .clone();
        if found_in_table.load(Ordering::Relaxed) {
            // The table has it; holding it here too would only cost memory.
            self.cells
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
        }
        Ok(reply)
    }

    async fn lookup(&self, key: &str) -> Option<String> {
        let lookups = self.lookups.as_ref()?;
        let (sender, receiver) = oneshot::channel();
        lookups.send((key.to_string(), sender)).ok()?;
        receiver.await.ok().flatten()
    }

    /// Appends the calls made since the last flush to `llm_calls`; returns the
    /// table's version afterwards (`None` when it does not exist).
    pub async fn flush(&self) -> anyhow::Result<Option<u64>> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let _one_at_a_time = self.flushing.lock().await;
        let rows = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if rows.is_empty() {
            return Ok(store.table_version(Table::LlmCalls).await?);
        }
        match store.append_rows(&rows).await {
            Ok(version) => {
                self.flushed.fetch_add(rows.len() as u64, Ordering::Relaxed);
                // Flushed replies are found in the table from now on.
                let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
                for row in &rows {
                    cells.remove(&row.call_key);
                }
                Ok(Some(version))
            }
            Err(e) => {
                // Keep them for the next flush.
                let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let newer = std::mem::replace(&mut *pending, rows);
                pending.extend(newer);
                Err(e.into())
            }
        }
    }

    /// Flushes, then brings the `call_key` index up to date; returns the version of
    /// `llm_calls` to name in the checkpoint.
    pub async fn finish(&self) -> anyhow::Result<Option<u64>> {
        self.flush().await?;
        let Some(store) = &self.store else {
            return Ok(None);
        };
        store.index_key(Table::LlmCalls, "call_key").await?;
        Ok(store.table_version(Table::LlmCalls).await?)
    }
}

/// Answers lookups in batches: whatever has queued up while the last scan ran.
async fn serve_lookups(store: TableStore, mut receiver: mpsc::UnboundedReceiver<Lookup>) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        while batch.len() < LOOKUP_BATCH {
            match receiver.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let keys: Vec<String> = batch.iter().map(|(k, _)| k.clone()).collect();
        let found = match store
            .lookup(Table::LlmCalls, "call_key", "reply", &keys)
            .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!("looking up cached model calls: {e}");
                HashMap::new()
            }
        };
        for (key, answer) in batch {
            let _ = answer.send(found.get(&key).cloned());
        }
    }
}
