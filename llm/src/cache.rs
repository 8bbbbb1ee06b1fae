//! The content-addressed call cache, persisted as the `llm_calls` table (which is
//! also the cost ledger). A call's key is the blake3 of everything that decides its
//! reply; a key is called at most once per process (concurrent askers share the
//! call) and, once flushed, never again by any run over the same tables.
//!
//! A Bloom filter of the table's keys (read once, from the `call_key` column
//! alone) answers most misses without touching the table; the rest are looked up
//! in batches, reading only the `call_key` and `reply` columns of the keys asked
//! for, through a B-tree index on `call_key` once the table is large enough for
//! one ([`memweave_schemas::store::IndexFloor`]). The table is never loaded whole.
//! New rows are appended every [`FLUSH_INTERVAL`], so a run that is killed loses at
//! most that much finished work, and sooner by the call that brings the rows
//! waiting past [`PENDING_BYTES`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memweave_operators::model::{CallContext, ModelCall, StepError};
use memweave_schemas::{
    LlmCallRow, StoreError, Table, TableStore, content_id, hash128, now_micros,
};
use tokio::sync::{OnceCell, mpsc, oneshot};

use crate::config::LlmConfig;
use crate::prompts::Prompt;

/// How often new calls are appended to `llm_calls`.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Bytes of prompts and replies waiting to be appended at which the call that
/// adds more appends them itself, and a call that finds them there appends
/// them before adding its own. The flush task
/// shares the runtime with the calls; when they keep it busy (a round's end
/// makes tens of thousands of merges ready at once) the rows waiting would
/// otherwise grow with the archive. Appending holds the rows about three times
/// over (rows, Arrow batch, Lance's compressed pages), so this is kept small.
pub const PENDING_BYTES: u64 = 8 << 20;
/// Most keys looked up in one scan.
const LOOKUP_BATCH: usize = 512;
/// Rows appended since the `call_key` index was last brought up to date at
/// which an append indexes them. Indexing holds its rows' keys several times
/// over while it sorts them: all of a 10M-token build's at its commit was the
/// largest allocation of the commit (+31 MiB), growing with the archive. In
/// slices of this size it stays a few MiB at any size, and a 100M-token
/// build's index has about 26 segments, which a look-up searches in turn.
const INDEX_EVERY_ROWS: u64 = 65_536;
/// Documents' and subjects' calls answered without a call (as 8-byte
/// hashes), and subjects asked about, remembered between evictions: a round
/// that answers more (a restart replaying a large build) evicts nothing.
const MAX_ANSWERED: usize = 1 << 20;

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
    /// Model tokens (prompt and reply) of the calls made.
    pub tokens: u64,
    /// Calls not made because the build's token budget was spent.
    pub refused: u64,
}

#[derive(Debug)]
pub struct CallCache {
    store: Option<TableStore>,
    cache_only: bool,
    /// Keep the prompts of the rows appended (`LlmConfig::keep_prompts`).
    keep_prompts: bool,
    /// False for a long-running server: replies are shared only among identical
    /// calls in flight at once, and nothing is kept after.
    retain: bool,
    /// This process's calls: in flight, or done and not yet flushed.
    cells: Mutex<HashMap<String, Arc<OnceCell<String>>>>,
    pending: Mutex<Vec<LlmCallRow>>,
    /// Bytes of prompts and replies in `pending`, and the most that may wait
    /// ([`PENDING_BYTES`]).
    pending_bytes: AtomicU64,
    pending_limit: u64,
    lookups: Option<mpsc::UnboundedSender<Lookup>>,
    /// Keys that may be in the table: a miss here needs no look-up.
    stored: Mutex<BloomFilter>,
    /// Serialises flushes, so rows are appended once and in order.
    flushing: tokio::sync::Mutex<()>,
    hits: AtomicU64,
    calls: AtomicU64,
    flushed: AtomicU64,
    /// Model tokens of the calls made, the most they may reach before no
    /// call is made ([`CallCache::limit_tokens`]), and the calls refused since.
    tokens: AtomicU64,
    token_budget: AtomicU64,
    refused: AtomicU64,
    /// `flushed` when the `call_key` index last covered every appended row,
    /// and the rows appended since at which an append indexes them
    /// ([`INDEX_EVERY_ROWS`]).
    indexed: AtomicU64,
    index_every: u64,
    /// Set when the process is stopping: no new calls start.
    closing: std::sync::atomic::AtomicBool,
    in_flight: AtomicU64,
    /// Calls made and answered from the cache, by (stage, task), since the
    /// process started; and what [`CallCache::take_stats`] last returned up to.
    stats: Mutex<BTreeMap<(String, String), TaskStats>>,
    taken: Mutex<BTreeMap<(String, String), TaskStats>>,
    /// Documents' and subjects' calls answered without a call, and the
    /// subjects asked about, since the last eviction.
    answered: Mutex<Answered>,
    /// When the last eviction ran (microseconds since the Unix epoch): rows
    /// made since are calls of this round.
    evicted_at: AtomicI64,
}

/// Hashes of the keys of documents' and subjects' calls answered from the
/// cache, and the subjects asked about (made or answered).
#[derive(Debug, Default)]
struct Answered {
    keys: HashSet<u64>,
    subjects: BTreeSet<String>,
    /// More than [`MAX_ANSWERED`] keys or subjects were: the sets are
    /// incomplete.
    overflowed: bool,
}

/// What one stage's task asked of the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Calls made (paid for).
    pub calls: u64,
    /// Calls answered from `llm_calls` or by an identical call of this process.
    pub cache_hits: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

impl CallCache {
    /// A cache that lives only in memory (tests, `memweave ask`).
    pub fn in_memory() -> Arc<Self> {
        Arc::new(Self::with(None, false, None, BloomFilter::new(0)))
    }

    /// A cache that keeps nothing (the query service: its memory must not grow
    /// with the questions it has answered); identical calls in flight at the
    /// same time are still made once.
    pub fn transient() -> Arc<Self> {
        Arc::new(CallCache {
            retain: false,
            ..Self::with(None, false, None, BloomFilter::new(0))
        })
    }

    fn with(
        store: Option<TableStore>,
        cache_only: bool,
        lookups: Option<mpsc::UnboundedSender<Lookup>>,
        stored: BloomFilter,
    ) -> Self {
        CallCache {
            store,
            cache_only,
            keep_prompts: false,
            retain: true,
            stored: Mutex::new(stored),
            cells: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            pending_bytes: AtomicU64::new(0),
            pending_limit: PENDING_BYTES,
            lookups,
            flushing: tokio::sync::Mutex::new(()),
            hits: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            token_budget: AtomicU64::new(u64::MAX),
            refused: AtomicU64::new(0),
            indexed: AtomicU64::new(0),
            index_every: INDEX_EVERY_ROWS,
            closing: std::sync::atomic::AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            stats: Mutex::new(BTreeMap::new()),
            taken: Mutex::new(BTreeMap::new()),
            answered: Mutex::new(Answered::default()),
            evicted_at: AtomicI64::new(now_micros()),
        }
    }

    /// The cache persisted under `store`; reads the keys it holds into a Bloom
    /// filter and spawns its lookup and flush tasks on the current tokio runtime.
    /// With `config.cache_only`, a call not in the cache fails with
    /// `StepError::CacheMiss` instead of reaching a backend.
    pub async fn persistent(
        store: TableStore,
        config: &LlmConfig,
    ) -> Result<Arc<Self>, CacheError> {
        store.upgrade_columns(Table::LlmCalls).await?;
        let mut keys = Vec::new();
        store
            .for_each_value(Table::LlmCalls, "call_key", |k| {
                keys.push(BloomFilter::hash(k))
            })
            .await?;
        let mut stored = BloomFilter::new(keys.len());
        keys.iter().for_each(|&h| stored.insert(h));
        let (sender, receiver) = mpsc::unbounded_channel();
        let cache = Arc::new(CallCache {
            keep_prompts: config.keep_prompts,
            ..Self::with(Some(store.clone()), config.cache_only, Some(sender), stored)
        });
        memweave_process::task::spawn("call_cache_lookups", serve_lookups(store, receiver));
        let weak = Arc::downgrade(&cache);
        memweave_process::task::spawn("call_cache_flush", async move {
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
        Ok(cache)
    }

    pub fn report(&self) -> CacheReport {
        CacheReport {
            hits: self.hits.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            flushed: self.flushed.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    /// No call is made once the calls made have spent `budget` model tokens
    /// (prompt and reply): it fails with `StepError::OverBudget`, and replies
    /// in the cache are still used. Calls in flight when the budget is reached
    /// finish, so the spend can pass it by what they cost.
    pub fn limit_tokens(&self, budget: u64) {
        self.token_budget.store(budget, Ordering::SeqCst);
    }

    /// The reply of the call `key`: from this process's calls, from `llm_calls`, or
    /// by making the call with `call` (once, however many ask at the same time).
    /// The call is noted in the context's ledger, which may refuse it.
    pub async fn reply<F, Fut>(
        &self,
        cx: &CallContext,
        key: &str,
        task: &str,
        call: F,
    ) -> Result<String, StepError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<LlmCallRow, StepError>>,
    {
        if let Some(ledger) = &cx.ledger {
            ledger.admit(task)?;
        }
        let started = Instant::now();
        let made: Mutex<Option<ModelCall>> = Mutex::new(None);
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
                let (spent, budget) = (
                    self.tokens.load(Ordering::SeqCst),
                    self.token_budget.load(Ordering::SeqCst),
                );
                if spent >= budget {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(StepError::OverBudget {
                        task: task.to_string(),
                        spent,
                        limit: budget,
                        unit: "model tokens",
                    });
                }
                // Counted before the check, so `close` never misses a call that
                // passed it; uncounted only once its row is pending.
                self.in_flight.fetch_add(1, Ordering::SeqCst);
                if self.closing.load(Ordering::SeqCst) {
                    self.in_flight.fetch_sub(1, Ordering::SeqCst);
                    return Err(StepError::Unavailable {
                        task: task.to_string(),
                        message: "the build is stopping".to_string(),
                    });
                }
                let row = call().await;
                let reply = row
                    .as_ref()
                    .map(|row| row.reply.clone())
                    .map_err(Clone::clone);
                if let Ok(mut row) = row {
                    if !self.keep_prompts {
                        row.inputs = None;
                    }
                    self.calls.fetch_add(1, Ordering::Relaxed);
                    self.tokens.fetch_add(
                        u64::from(row.tokens_in) + u64::from(row.tokens_out),
                        Ordering::SeqCst,
                    );
                    *made.lock().unwrap_or_else(|e| e.into_inner()) = Some(ModelCall {
                        task: row.task.clone(),
                        tokens_in: row.tokens_in,
                        tokens_out: row.tokens_out,
                        latency_ms: row.latency_ms,
                        cached: false,
                    });
                    if self.retain {
                        // Room first, then the row: a round's end finishes
                        // thousands of calls at once, and every one that came
                        // back while an append ran added its row behind it.
                        if self.pending_bytes.load(Ordering::SeqCst) >= self.pending_limit {
                            self.relieve().await;
                        }
                        let bytes = row_bytes(&row);
                        self.pending
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(row);
                        let waiting = self.pending_bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
                        if waiting >= self.pending_limit {
                            self.relieve().await;
                        }
                    }
                }
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                reply
            })
            .await?
            .clone();
        let made = made.into_inner().unwrap_or_else(|e| e.into_inner());
        {
            let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            let counts = stats
                .entry((cx.stage.to_string(), task.to_string()))
                .or_default();
            match &made {
                Some(call) => {
                    counts.calls += 1;
                    counts.tokens_in += u64::from(call.tokens_in);
                    counts.tokens_out += u64::from(call.tokens_out);
                }
                None => counts.cache_hits += 1,
            }
        }
        if self.store.is_some() && (cx.doc_id.is_some() || cx.subject.is_some()) {
            self.note_asked(key, made.is_none(), cx.subject.as_deref());
        }
        if let Some(ledger) = &cx.ledger {
            ledger.note(made.unwrap_or_else(|| ModelCall {
                task: task.to_string(),
                tokens_in: 0,
                tokens_out: 0,
                latency_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32,
                cached: true,
            }));
        }
        if found_in_table.load(Ordering::Relaxed) || !self.retain {
            // The table has it (or nothing is kept); holding it here would only
            // cost memory.
            self.cells
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
        }
        Ok(reply)
    }

    async fn lookup(&self, key: &str) -> Option<String> {
        let lookups = self.lookups.as_ref()?;
        if !self.lock_stored().may_contain(BloomFilter::hash(key)) {
            return None;
        }
        let (sender, receiver) = oneshot::channel();
        lookups.send((key.to_string(), sender)).ok()?;
        receiver.await.ok().flatten()
    }

    /// The calls made and answered per (stage, task) since the last time.
    pub fn take_stats(&self) -> BTreeMap<(String, String), TaskStats> {
        let total = self.stats_total();
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let since = total
            .iter()
            .map(|(key, now)| {
                let before = taken.get(key).copied().unwrap_or_default();
                let delta = TaskStats {
                    calls: now.calls - before.calls,
                    cache_hits: now.cache_hits - before.cache_hits,
                    tokens_in: now.tokens_in - before.tokens_in,
                    tokens_out: now.tokens_out - before.tokens_out,
                };
                (key.clone(), delta)
            })
            .filter(|(_, delta)| *delta != TaskStats::default())
            .collect();
        *taken = total;
        since
    }

    /// The calls made and answered per (stage, task) since the process started.
    pub fn stats_total(&self) -> BTreeMap<(String, String), TaskStats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Calls started and not yet answered.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Appends the calls made since the last flush to `llm_calls`; returns the
    /// table's version afterwards (`None` when it does not exist).
    pub async fn flush(&self) -> Result<Option<u64>, CacheError> {
        let _one_at_a_time = self.flushing.lock().await;
        self.flush_locked().await
    }

    /// Flushes unless a flush this call waited for has already brought the
    /// rows waiting under the limit.
    async fn relieve(&self) {
        let _one_at_a_time = self.flushing.lock().await;
        if self.pending_bytes.load(Ordering::SeqCst) < self.pending_limit {
            return;
        }
        if let Err(e) = self.flush_locked().await {
            tracing::warn!("appending model calls to llm_calls: {e:#}");
        }
    }

    async fn flush_locked(&self) -> Result<Option<u64>, CacheError> {
        let Some(store) = &self.store else {
            return Ok(None);
        };
        let rows = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if rows.is_empty() {
            return Ok(store.table_version(Table::LlmCalls).await?);
        }
        let bytes: u64 = rows.iter().map(row_bytes).sum();
        self.pending_bytes.fetch_sub(bytes, Ordering::SeqCst);
        match store.append_rows(&rows).await {
            Ok(version) => {
                let flushed =
                    self.flushed.fetch_add(rows.len() as u64, Ordering::SeqCst) + rows.len() as u64;
                self.note_stored(&rows);
                if flushed - self.indexed.load(Ordering::SeqCst) < self.index_every {
                    return Ok(Some(version));
                }
                self.index_appended(store).await
            }
            Err(e) => {
                // Keep them for the next flush.
                self.pending_bytes.fetch_add(bytes, Ordering::SeqCst);
                let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let newer = std::mem::replace(&mut *pending, rows);
                pending.extend(newer);
                Err(e.into())
            }
        }
    }

    /// True once `close` has been called: the run is stopping.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// For a stopping process: starts no new calls, waits (up to `patience`) for
    /// the calls in flight, and saves everything answered, so a restart pays for
    /// nothing twice.
    pub async fn close(&self, patience: Duration) -> Result<(), CacheError> {
        self.closing.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + patience;
        while self.in_flight.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.flush().await.map(|_| ())
    }

    /// Flushes, then brings the `call_key` index up to date; returns the version of
    /// `llm_calls` to name in the checkpoint.
    pub async fn finish(&self) -> Result<Option<u64>, CacheError> {
        let _one_at_a_time = self.flushing.lock().await;
        self.flush_locked().await?;
        let Some(store) = &self.store else {
            return Ok(None);
        };
        self.index_appended(store).await
    }

    /// Notes a document's or a subject's call `key`, answered from the cache
    /// or made.
    fn note_asked(&self, key: &str, answered_from_cache: bool, subject: Option<&str>) {
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        if answered.keys.len() >= MAX_ANSWERED || answered.subjects.len() >= MAX_ANSWERED {
            answered.overflowed = true;
            return;
        }
        if answered_from_cache {
            answered.keys.insert(hash128(key.as_bytes()) as u64);
        }
        if let Some(subject) = subject
            && !answered.subjects.contains(subject)
        {
            answered.subjects.insert(subject.to_string());
        }
    }

    /// Removes the calls of `superseded` documents (changed or gone since
    /// the last eviction), and of the subjects asked about since, that were
    /// not asked for since: made for a text they no longer hold, no build of
    /// the memory as it is asks for them again. A document's calls are all
    /// asked for when it is built, and a subject's whenever its stage asks
    /// about it, each made anew or answered from the cache (and noted), so
    /// what is left unasked is dead. A subject no stage asks about any more
    /// (a name gone from every document) keeps its calls. The caller flushed
    /// first (`finish`). One process's notes only: a cluster's other
    /// processes answer calls this one does not see, so the caller evicts
    /// only when it is alone. A reply two documents share (the same text in
    /// both) is kept under the first to ask; when that one changes, the
    /// other asks again when it next changes. Returns the rows removed.
    pub async fn evict_superseded(&self, superseded: &[String]) -> Result<usize, CacheError> {
        let answered =
            std::mem::take(&mut *self.answered.lock().unwrap_or_else(|e| e.into_inner()));
        let round_began = self.evicted_at.swap(now_micros(), Ordering::SeqCst);
        let Some(store) = &self.store else {
            return Ok(0);
        };
        if (superseded.is_empty() && answered.subjects.is_empty()) || answered.overflowed {
            return Ok(0);
        }
        let Some(version) = store.table_version(Table::LlmCalls).await? else {
            return Ok(0);
        };
        let mut rows: Vec<LlmCallRow> = store.rows_where_in(version, "doc_id", superseded).await?;
        let subjects: Vec<String> = answered.subjects.into_iter().collect();
        rows.extend(
            store
                .rows_where_in::<LlmCallRow>(version, "subject", &subjects)
                .await?,
        );
        let dead: Vec<String> = rows
            .into_iter()
            .filter(|row| {
                row.created_at < round_began
                    && !answered
                        .keys
                        .contains(&(hash128(row.call_key.as_bytes()) as u64))
            })
            .map(|row| row.call_key)
            .collect();
        if !dead.is_empty() {
            store
                .commit_staged(Table::LlmCalls, &dead, false, Vec::new())
                .await?;
        }
        Ok(dead.len())
    }

    /// Flushed replies are found in the table from now on.
    fn note_stored(&self, rows: &[LlmCallRow]) {
        let mut stored = self.lock_stored();
        for row in rows {
            stored.insert(BloomFilter::hash(&row.call_key));
        }
        drop(stored);
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        for row in rows {
            cells.remove(&row.call_key);
        }
    }

    /// Brings the `call_key` index over every row appended so far (a new
    /// segment for the rows since the last time); returns the table's version.
    /// The caller holds `flushing`.
    async fn index_appended(&self, store: &TableStore) -> Result<Option<u64>, CacheError> {
        let flushed = self.flushed.load(Ordering::SeqCst);
        let version = store
            .index_lookups(Table::LlmCalls)
            .await
            .map_err(CacheError::Index)?;
        self.indexed.store(flushed, Ordering::SeqCst);
        Ok(version)
    }
}

/// Why the cache could not read or write `llm_calls`.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("indexing llm_calls by call_key: {0}")]
    Index(StoreError),
}

/// What a pending row holds that grows with the call: its prompt and reply.
fn row_bytes(row: &LlmCallRow) -> u64 {
    (row.inputs.as_ref().map_or(0, String::len) + row.reply.len()) as u64
}

impl CallCache {
    fn lock_stored(&self) -> std::sync::MutexGuard<'_, BloomFilter> {
        self.stored.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A Bloom filter over call keys that grows with them: layers of ten bits a
/// key (about 1% false positives each when full), each four times the last.
/// A fixed size filled past its capacity: a 100M-token build appends 1.7M
/// calls, which would turn nearly every new call into a scan of `llm_calls`.
#[derive(Debug)]
struct BloomFilter {
    layers: Vec<BloomLayer>,
}

#[derive(Debug)]
struct BloomLayer {
    bits: Vec<u64>,
    capacity: usize,
    keys: usize,
}

/// Bit positions set per key.
const BLOOM_HASHES: u64 = 7;
/// Bits per key a layer is sized for.
const BLOOM_BITS_PER_KEY: usize = 10;
/// How much larger each new layer is than the last.
const BLOOM_GROWTH: usize = 4;

impl BloomFilter {
    fn new(keys: usize) -> Self {
        // Room for the keys there are and as many again from this run.
        BloomFilter {
            layers: vec![BloomLayer::new(keys.max(50_000) * 2)],
        }
    }

    /// Keys are blake3 hex digests: their leading 128 bits are already uniform.
    fn hash(key: &str) -> u128 {
        let hex = key.get(..32).unwrap_or(key);
        u128::from_str_radix(hex, 16).unwrap_or_else(|_| hash128(key.as_bytes()))
    }

    fn insert(&mut self, hash: u128) {
        let last = self.layers.last().expect("a filter has a layer");
        if last.keys >= last.capacity {
            let capacity = last.capacity * BLOOM_GROWTH;
            self.layers.push(BloomLayer::new(capacity));
        }
        self.layers
            .last_mut()
            .expect("a filter has a layer")
            .insert(hash);
    }

    fn may_contain(&self, hash: u128) -> bool {
        self.layers.iter().any(|layer| layer.may_contain(hash))
    }
}

impl BloomLayer {
    fn new(capacity: usize) -> Self {
        let bits = (capacity * BLOOM_BITS_PER_KEY).next_power_of_two();
        BloomLayer {
            bits: vec![0; bits / 64],
            capacity,
            keys: 0,
        }
    }

    fn positions(&self, hash: u128) -> impl Iterator<Item = usize> + '_ {
        let (a, b) = ((hash >> 64) as u64, hash as u64 | 1);
        let mask = (self.bits.len() * 64 - 1) as u64;
        (0..BLOOM_HASHES).map(move |i| (a.wrapping_add(i.wrapping_mul(b)) & mask) as usize)
    }

    fn insert(&mut self, hash: u128) {
        let positions: Vec<usize> = self.positions(hash).collect();
        for p in positions {
            self.bits[p / 64] |= 1 << (p % 64);
        }
        self.keys += 1;
    }

    fn may_contain(&self, hash: u128) -> bool {
        self.positions(hash)
            .all(|p| self.bits[p / 64] & (1 << (p % 64)) != 0)
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

#[cfg(test)]
mod tests {
    use memweave_operators::model::CallLedger;

    use super::*;

    fn row(task: &str, reply: &str) -> LlmCallRow {
        LlmCallRow {
            call_key: String::new(),
            backend: "test".into(),
            model: "test".into(),
            task: task.into(),
            stage: "test".into(),
            doc_id: None,
            inputs: Some("prompt".into()),
            reply: reply.into(),
            tokens_in: 40,
            tokens_out: 10,
            latency_ms: 7,
            created_at: 0,
            subject: None,
        }
    }

    /// The reply to an "answer" call whose reply is its key, made through `cache`.
    async fn ask(
        cache: &CallCache,
        cx: &CallContext,
        key: &'static str,
    ) -> Result<String, StepError> {
        cache
            .reply(cx, key, "answer", || async { Ok(row("answer", key)) })
            .await
    }

    /// The ledger notes each call with its tokens, a reply from a call already
    /// made as cached (it spent nothing), and refuses calls past its limit.
    #[tokio::test]
    async fn a_ledger_notes_calls_and_refuses_them_past_its_limit() {
        let cache = CallCache::in_memory();
        let ledger = CallLedger::with_limits(100, 1000);
        let cx = CallContext::query("test").noted_in(ledger.clone());
        let ask = |key: &'static str| ask(&cache, &cx, key);
        assert_eq!(ask("a").await.unwrap(), "a");
        assert_eq!(ask("a").await.unwrap(), "a");
        let noted = ledger.take();
        assert_eq!(noted.len(), 2);
        assert_eq!(
            (noted[0].tokens_in, noted[0].latency_ms, noted[0].cached),
            (40, 7, false)
        );
        assert_eq!((noted[1].tokens_in, noted[1].cached), (0, true));
        assert_eq!(ledger.tokens_spent(), 50);
        assert_eq!(ask("b").await.unwrap(), "b");
        let refused = ask("c").await.unwrap_err();
        assert_eq!(refused.kind(), "llm_over_budget");
        assert_eq!(ledger.take().len(), 1, "the refused call is not noted");
    }

    /// Past its token budget a cache makes no call, but still answers what it
    /// holds; the report counts the tokens spent and the calls refused.
    #[tokio::test]
    async fn a_token_budget_stops_new_calls_and_keeps_cached_replies() {
        let cache = CallCache::in_memory();
        cache.limit_tokens(100);
        let cx = CallContext::corpus("test");
        let ask = |key: &'static str| ask(&cache, &cx, key);
        assert_eq!(ask("a").await.unwrap(), "a");
        assert_eq!(ask("b").await.unwrap(), "b");
        let refused = ask("c").await.unwrap_err();
        assert_eq!(refused.kind(), "llm_over_budget");
        assert!(
            refused
                .to_string()
                .contains("100 model tokens spent of the 100")
        );
        assert_eq!(ask("a").await.unwrap(), "a", "a cached reply costs nothing");
        let report = cache.report();
        assert_eq!((report.calls, report.tokens, report.refused), (2, 100, 1));
    }

    /// A transient cache makes every call anew and keeps no rows.
    #[tokio::test]
    async fn a_transient_cache_keeps_nothing() {
        let cache = CallCache::transient();
        let cx = CallContext::query("test");
        for _ in 0..3 {
            let reply = cache
                .reply(&cx, "k", "answer", || async { Ok(row("answer", "r")) })
                .await;
            assert_eq!(reply.unwrap(), "r");
        }
        assert_eq!(cache.report().calls, 3);
        assert!(cache.cells.lock().unwrap().is_empty());
        assert!(cache.pending.lock().unwrap().is_empty());
    }

    /// A cache over a fresh local store, with no flush or look-up tasks: the
    /// tests drive its appends themselves.
    fn stored_cache(dir: &std::path::Path) -> (TableStore, CallCache) {
        let store = TableStore::local(dir).unwrap();
        // Its key's index from the first row, as a large table has it.
        let store = store.with_index_floor(memweave_schemas::store::IndexFloor::none());
        let cache = CallCache::with(Some(store.clone()), false, None, BloomFilter::new(0));
        (store, cache)
    }

    /// A document's call as a build makes it: keyed, dated, its document named.
    async fn build_call(cache: &CallCache, doc: &str, key: &str) -> String {
        call_as(cache, &CallContext::build("test", doc), key).await
    }

    /// A call across documents about `subject`, as a corpus stage makes it.
    async fn corpus_call(cache: &CallCache, subject: &str, key: &str) -> String {
        let cx = CallContext::corpus("test").about(subject.to_string());
        call_as(cache, &cx, key).await
    }

    async fn call_as(cache: &CallCache, cx: &CallContext, key: &str) -> String {
        let made = || async move {
            let mut made = row("answer", key);
            made.call_key = key.to_string();
            made.doc_id = cx.doc_id.clone();
            made.subject = cx.subject.clone();
            made.created_at = now_micros();
            Ok(made)
        };
        cache.reply(cx, key, "answer", made).await.unwrap()
    }

    /// The table keeps a made call's prompt only when asked to, and its
    /// reply either way: the next process finds the call by its key alone.
    #[tokio::test]
    async fn a_calls_prompt_is_kept_only_when_asked() {
        for keep_prompts in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let store = TableStore::local(dir.path()).unwrap();
            let config = LlmConfig {
                keep_prompts,
                ..LlmConfig::default()
            };
            let first = CallCache::persistent(store.clone(), &config).await.unwrap();
            build_call(&first, "a", "k1").await;
            first.finish().await.unwrap();
            let rows: Vec<LlmCallRow> = store.read_rows(None).await.unwrap();
            let kept: Vec<Option<&str>> = rows.iter().map(|r| r.inputs.as_deref()).collect();
            assert_eq!(kept, [keep_prompts.then_some("prompt")]);
            let second = CallCache::persistent(store.clone(), &config).await.unwrap();
            assert_eq!(build_call(&second, "a", "k1").await, "k1");
            assert_eq!((second.report().hits, second.report().calls), (1, 0));
        }
    }

    /// A subject asked about again keeps what it asked for and loses the
    /// rest; a subject not asked about keeps everything, with no document
    /// named for either.
    #[tokio::test]
    async fn a_subject_asked_again_loses_its_calls_left_unasked() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let first = CallCache::persistent(store.clone(), &LlmConfig::default())
            .await
            .unwrap();
        for (subject, key) in [("tree", "t1"), ("tree", "t2"), ("relation", "r1")] {
            corpus_call(&first, subject, key).await;
        }
        first.finish().await.unwrap();
        assert_eq!(first.evict_superseded(&[]).await.unwrap(), 0);
        let second = CallCache::persistent(store.clone(), &LlmConfig::default())
            .await
            .unwrap();
        corpus_call(&second, "tree", "t1").await;
        corpus_call(&second, "tree", "t3").await;
        second.finish().await.unwrap();
        assert_eq!(second.evict_superseded(&[]).await.unwrap(), 1);
        let rows: Vec<LlmCallRow> = store.read_rows(None).await.unwrap();
        let mut keys: Vec<String> = rows.into_iter().map(|r| r.call_key).collect();
        keys.sort();
        assert_eq!(keys, ["r1", "t1", "t3"]);
    }

    /// What a changed document's new build did not ask for is removed; what it
    /// asked for (answered from the table), what it made anew and the other
    /// documents' calls stay; a document gone loses every call.
    #[tokio::test]
    async fn a_changed_documents_calls_left_unasked_are_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let first = CallCache::persistent(store.clone(), &LlmConfig::default())
            .await
            .unwrap();
        for (doc, key) in [("a", "k1"), ("a", "k2"), ("b", "k3")] {
            build_call(&first, doc, key).await;
        }
        first.finish().await.unwrap();
        // The next process: `a` changed, and asks for k1 again and for k4.
        let second = CallCache::persistent(store.clone(), &LlmConfig::default())
            .await
            .unwrap();
        build_call(&second, "a", "k1").await;
        build_call(&second, "a", "k4").await;
        assert_eq!(second.report().hits, 1);
        second.finish().await.unwrap();
        let keys = || async {
            let rows: Vec<LlmCallRow> = store.read_rows(None).await.unwrap();
            let mut keys: Vec<String> = rows.into_iter().map(|r| r.call_key).collect();
            keys.sort();
            keys
        };
        assert_eq!(second.evict_superseded(&["a".into()]).await.unwrap(), 1);
        assert_eq!(keys().await, ["k1", "k3", "k4"]);
        // Then `b` is gone: nothing of it was asked for since.
        assert_eq!(second.evict_superseded(&["b".into()]).await.unwrap(), 1);
        assert_eq!(keys().await, ["k1", "k4"]);
        // Evicting `a` again (nothing asked since the last eviction, its rows
        // older than it): both go, as they would for a document gone.
        assert_eq!(second.evict_superseded(&["a".into()]).await.unwrap(), 2);
    }

    /// Rows waiting past the limit are appended by the call that brought
    /// them there, without the flush task (which a busy runtime starves).
    #[tokio::test]
    async fn a_call_past_the_pending_limit_appends_the_rows_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut cache) = stored_cache(dir.path());
        cache.pending_limit = 1_000;
        let cache = Arc::new(cache);
        let cx = CallContext::query("test");
        let ask = |key: String| {
            let cache = Arc::clone(&cache);
            let cx = cx.clone();
            async move {
                let reply = "x".repeat(400);
                let mut made = row("answer", &reply);
                made.call_key = key.clone();
                cache
                    .reply(&cx, &key, "answer", || async { Ok(made) })
                    .await
            }
        };
        ask("a".into()).await.unwrap();
        ask("b".into()).await.unwrap();
        assert_eq!(cache.report().flushed, 0, "800 bytes wait");
        ask("c".into()).await.unwrap();
        assert_eq!(cache.report().flushed, 3, "1,200 bytes are appended");
        assert!(cache.pending.lock().unwrap().is_empty());
        assert_eq!(cache.pending_bytes.load(Ordering::SeqCst), 0);
        let stored: Vec<LlmCallRow> = store.read_rows(None).await.unwrap();
        let mut keys: Vec<String> = stored.into_iter().map(|r| r.call_key).collect();
        keys.sort();
        assert_eq!(keys, ["a", "b", "c"]);
    }

    /// Appends index their rows by `call_key` as the table grows, not all at
    /// the round's end: once `index_every` rows are appended, the index covers
    /// them before `finish`; fewer wait for the next append or for `finish`.
    #[tokio::test]
    async fn appends_index_their_keys_as_the_table_grows() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut cache) = stored_cache(dir.path());
        cache.index_every = 3;
        let append = |keys: &[&str]| {
            let rows = keys.iter().map(|key| {
                let mut made = row("answer", "reply");
                made.call_key = key.to_string();
                made
            });
            cache.pending.lock().unwrap().extend(rows);
        };
        let outside = || store.rows_outside_index(Table::LlmCalls, "call_key_btree");
        append(&["a", "b"]);
        cache.flush().await.unwrap();
        assert_eq!(outside().await.unwrap(), None, "two rows: no index yet");
        append(&["c"]);
        cache.flush().await.unwrap();
        assert_eq!(outside().await.unwrap(), Some(0), "three rows: all indexed");
        append(&["d"]);
        cache.flush().await.unwrap();
        assert_eq!(outside().await.unwrap(), Some(1), "one row waits");
        cache.finish().await.unwrap();
        assert_eq!(outside().await.unwrap(), Some(0), "finish indexes the rest");
    }

    /// A call that finds the rows waiting past the limit (calls that came
    /// back while an append ran) appends them before it adds its own.
    #[tokio::test]
    async fn a_call_that_finds_the_limit_passed_makes_room_before_adding() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut cache) = stored_cache(dir.path());
        cache.pending_limit = 1_000;
        let mut waiting = row("answer", &"x".repeat(1_200));
        waiting.call_key = "waiting".into();
        cache
            .pending_bytes
            .store(row_bytes(&waiting), Ordering::SeqCst);
        cache.pending.lock().unwrap().push(waiting);
        let mut made = row("answer", "y");
        made.call_key = "new".into();
        cache
            .reply(&CallContext::query("test"), "new", "answer", || async {
                Ok(made)
            })
            .await
            .unwrap();
        assert_eq!(cache.report().flushed, 1, "the waiting row alone");
        let pending: Vec<String> = cache
            .pending
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.call_key.clone())
            .collect();
        assert_eq!(pending, ["new"]);
        assert_eq!(cache.pending_bytes.load(Ordering::SeqCst), 1);
    }

    /// Twenty times its first capacity (a build that appends far more calls
    /// than the table held), the filter still turns away most strangers.
    #[test]
    fn the_filter_grows_with_its_keys() {
        let mut filter = BloomFilter::new(0);
        let key = |i: u32| content_id("call", &[&i.to_le_bytes()]);
        let keys = 2_000_000;
        for i in 0..keys {
            filter.insert(BloomFilter::hash(&key(i)));
        }
        assert!(filter.layers.len() > 1);
        assert!(
            (0..keys)
                .step_by(97)
                .all(|i| filter.may_contain(BloomFilter::hash(&key(i))))
        );
        let strangers = (keys..keys + 10_000)
            .filter(|&i| filter.may_contain(BloomFilter::hash(&key(i))))
            .count();
        assert!(strangers < 500, "{strangers} false positives in 10,000");
    }

    #[test]
    fn the_filter_keeps_every_key_and_few_strangers() {
        let mut filter = BloomFilter::new(10_000);
        let key = |i: u32| content_id("call", &[&i.to_le_bytes()]);
        for i in 0..10_000 {
            filter.insert(BloomFilter::hash(&key(i)));
        }
        assert!((0..10_000).all(|i| filter.may_contain(BloomFilter::hash(&key(i)))));
        let strangers = (10_000..20_000)
            .filter(|&i| filter.may_contain(BloomFilter::hash(&key(i))))
            .count();
        assert!(strangers < 200, "{strangers} false positives in 10,000");
    }
}
