//! The client of a pool of OpenAI-compatible endpoints (vLLM, SGLang, TGI,
//! llama.cpp server, Ollama, hosted APIs): least-loaded routing, a concurrency
//! limit per endpoint that adapts (slow start, then additive increase;
//! multiplicative decrease on 429, 503 and timeouts), shared request and token rate
//! limits, retries with jittered exponential backoff that honour Retry-After,
//! per-request timeouts, and query traffic served before build traffic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::Either;
use memweave_operators::model::Priority;
use memweave_operators::tokens::count_tokens;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::prompts::Prompt;

/// How to reach the pool and how hard to push it.
#[derive(Clone)]
pub struct PoolConfig {
    /// Base URLs, each ending in `/v1` (e.g. `http://gpu-0:8000/v1`).
    pub endpoints: Vec<String>,
    pub model: String,
    /// Sent as `Authorization: Bearer …`; never logged.
    pub api_key: Option<String>,
    /// Longest wait for one response.
    pub timeout: Duration,
    /// Tries per request, counting the first.
    pub max_attempts: u32,
    /// Requests in flight per endpoint at the start.
    pub initial_concurrency: usize,
    /// Most requests in flight per endpoint, however well it answers.
    pub max_concurrency: usize,
    /// Requests per minute, over all endpoints.
    pub rpm: Option<u32>,
    /// Prompt + completion tokens per minute, over all endpoints.
    pub tpm: Option<u32>,
}

impl fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolConfig")
            .field("endpoints", &self.endpoints)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("initial_concurrency", &self.initial_concurrency)
            .field("max_concurrency", &self.max_concurrency)
            .field("rpm", &self.rpm)
            .field("tpm", &self.tpm)
            .finish()
    }
}

/// Longest wait for one response unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Tries per request unless told otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
/// Requests in flight per endpoint at the start unless told otherwise.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Most requests in flight per endpoint unless told otherwise.
pub const DEFAULT_MAX_CONCURRENCY: usize = 256;

impl PoolConfig {
    /// The pool at `endpoints` serving `model`, with no key and the default limits.
    pub fn new(endpoints: Vec<String>, model: &str) -> Self {
        PoolConfig {
            endpoints,
            model: model.to_string(),
            api_key: None,
            timeout: DEFAULT_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_concurrency: DEFAULT_CONCURRENCY,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            rpm: None,
            tpm: None,
        }
    }
}

/// Why a pool client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PoolSetupError {
    #[error("--llm-url {url}: {error}")]
    Endpoint { url: String, error: url::ParseError },
    #[error("HTTP client: {0}")]
    Client(reqwest::Error),
}

/// Why a request failed for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("{endpoint} refused the request: HTTP {status}: {body}")]
    Refused {
        endpoint: String,
        status: u16,
        body: String,
    },
    #[error("no answer after {attempts} attempts; last: {last}")]
    Exhausted { attempts: u32, last: String },
}

/// One completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub content: String,
    pub tokens_in: u32,
    pub tokens_out: u32,
    pub latency: Duration,
}

/// The pool's counters, named once: [`PoolStats`] (the atomics requests add
/// to) and [`PoolReport`] (a snapshot of them with the endpoints' limits).
macro_rules! pool_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Counters, for logs, metrics and tests.
        #[derive(Debug, Default)]
        pub struct PoolStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
            /// Smoothed reply time of successful requests, in microseconds.
            pub typical_latency_us: AtomicU64,
        }

        /// A snapshot of [`PoolStats`] plus the endpoints' current limits.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct PoolReport {
            $($(#[$doc])* pub $name: u64,)*
            pub limits: Vec<f64>,
        }

        impl PoolStats {
            fn report(&self, limits: Vec<f64>) -> PoolReport {
                PoolReport {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    limits,
                }
            }
        }
    };
}

pool_counters!(
    requests,
    succeeded,
    rate_limited,
    server_errors,
    timeouts,
    connect_errors,
    malformed,
    truncated,
    tokens_in,
    tokens_out,
    peak_in_flight,
    /// Requests sent a second time because the first was slow to answer.
    hedged,
);

#[derive(Debug)]
struct Endpoint {
    in_flight: usize,
    limit: f64,
    /// Slow start doubles the limit each round trip until it reaches this.
    threshold: f64,
    /// Replies in the current window (about one round trip's worth), and how many
    /// of them said the endpoint is overloaded.
    window_replies: u32,
    window_congested: u32,
}

#[derive(Debug)]
struct Scheduler {
    endpoints: Vec<Endpoint>,
    /// Requests waiting for a slot, highest priority first, then first come.
    waiting: BinaryHeap<Waiter>,
    /// Arrival counter, for first come first served within a priority.
    arrivals: u64,
    max_concurrency: f64,
}

#[derive(Debug)]
struct Waiter {
    priority: Priority,
    arrival: u64,
    slot: oneshot::Sender<usize>,
}

impl Waiter {
    fn rank(&self) -> (Priority, Reverse<u64>) {
        (self.priority, Reverse(self.arrival))
    }
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl Scheduler {
    /// The endpoint with room and the lowest load relative to its limit.
    fn pick(&self) -> Option<usize> {
        self.endpoints
            .iter()
            .enumerate()
            .filter(|(_, e)| (e.in_flight as f64) < e.limit.floor().max(1.0))
            .min_by(|(_, a), (_, b)| {
                (a.in_flight as f64 / a.limit).total_cmp(&(b.in_flight as f64 / b.limit))
            })
            .map(|(i, _)| i)
    }

    fn in_flight(&self) -> usize {
        self.endpoints.iter().map(|e| e.in_flight).sum()
    }

    /// Hands free slots to waiting requests, highest priority first.
    fn dispatch(&mut self) {
        while let Some(endpoint) = self.pick() {
            let Some(waiter) = self.waiting.pop() else {
                return;
            };
            self.endpoints[endpoint].in_flight += 1;
            if waiter.slot.send(endpoint).is_err() {
                // The request gave up while waiting.
                self.endpoints[endpoint].in_flight -= 1;
            }
        }
    }
}

/// What became of one attempt, for the concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Success,
    /// 429, 503, a timeout: the endpoint is past its capacity.
    Congestion,
    /// Anything else that failed: says nothing about capacity.
    Failure,
}

#[derive(Debug)]
struct Buckets {
    requests: f64,
    tokens: f64,
    refilled: Instant,
}

/// The pool client. One per process, shared by every worker, so the rate limits
/// hold for the process as a whole.
#[derive(Debug)]
pub struct PoolClient {
    http: reqwest::Client,
    config: PoolConfig,
    scheduler: Mutex<Scheduler>,
    buckets: Mutex<Buckets>,
    stats: PoolStats,
}

/// Typical reply times after which a request is hedged while others wait for a
/// slot (a copy would take one from them), and while none does.
const BUSY_HEDGE_AFTER: u32 = 4;
const IDLE_HEDGE_AFTER: u32 = 2;

/// Base of the exponential backoff.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Longest wait between attempts, whatever the server asks.
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// Share of a window's replies that must signal overload before the limit halves.
const CONGESTED_SHARE: f64 = 0.2;
/// Fewest replies a window judges by.
const MIN_WINDOW: f64 = 8.0;
/// Largest output budget a truncated reply may be retried with.
const MAX_OUTPUT_TOKENS: u32 = 8192;

impl PoolClient {
    pub fn new(config: PoolConfig) -> Result<Self, PoolSetupError> {
        for url in &config.endpoints {
            reqwest::Url::parse(url).map_err(|error| PoolSetupError::Endpoint {
                url: url.clone(),
                error,
            })?;
        }
        let initial = config
            .initial_concurrency
            .clamp(1, config.max_concurrency.max(1)) as f64;
        let now = Instant::now();
        let endpoints = config
            .endpoints
            .iter()
            .map(|_| Endpoint {
                in_flight: 0,
                limit: initial,
                threshold: config.max_concurrency as f64,
                window_replies: 0,
                window_congested: 0,
            })
            .collect();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(config.max_concurrency)
            .build()
            .map_err(PoolSetupError::Client)?;
        Ok(PoolClient {
            http,
            buckets: Mutex::new(Buckets {
                requests: f64::from(config.rpm.unwrap_or(0)),
                tokens: f64::from(config.tpm.unwrap_or(0)),
                refilled: now,
            }),
            scheduler: Mutex::new(Scheduler {
                endpoints,
                waiting: BinaryHeap::new(),
                arrivals: 0,
                max_concurrency: config.max_concurrency.max(1) as f64,
            }),
            config,
            stats: PoolStats::default(),
        })
    }

    pub fn model(&self) -> &str {
        &self.config.model
    }

    pub fn report(&self) -> PoolReport {
        let limits = self.lock().endpoints.iter().map(|e| e.limit).collect();
        self.stats.report(limits)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Scheduler> {
        self.scheduler.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A chat completion of `prompt`. A reply cut off by the output budget
    /// (`finish_reason: length`) is asked again with twice the budget.
    pub async fn chat(
        &self,
        prompt: &Prompt,
        temperature: f32,
        max_tokens: u32,
        priority: Priority,
    ) -> Result<Completion, PoolError> {
        let mut messages = Vec::new();
        if let Some(system) = &prompt.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": prompt.user}));
        let prompt_tokens = count_tokens(&prompt.text()) as u32;
        let mut budget = max_tokens;
        let started = Instant::now();
        loop {
            let body = json!({
                "model": self.config.model,
                "messages": messages,
                // As written (0.7, not 0.699999988 from f32).
                "temperature": (f64::from(temperature) * 100.0).round() / 100.0,
                "max_tokens": budget,
            });
            let value = self
                .request("chat/completions", &body, prompt_tokens + budget, priority)
                .await?;
            let reply: ChatReply =
                serde_json::from_value(value).map_err(|e| PoolError::Exhausted {
                    attempts: 1,
                    last: format!("a reply without choices: {e}"),
                })?;
            let choice = reply.choices.into_iter().next();
            let finish = choice.as_ref().and_then(|c| c.finish_reason.clone());
            let content = choice.and_then(|c| c.message.content).unwrap_or_default();
            let (tokens_in, tokens_out) = match reply.usage {
                Some(u) => (u.prompt_tokens, u.completion_tokens),
                None => (prompt_tokens, count_tokens(&content) as u32),
            };
            self.stats
                .tokens_in
                .fetch_add(u64::from(tokens_in), Ordering::Relaxed);
            self.stats
                .tokens_out
                .fetch_add(u64::from(tokens_out), Ordering::Relaxed);
            if finish.as_deref() == Some("length") && budget < MAX_OUTPUT_TOKENS {
                self.stats.truncated.fetch_add(1, Ordering::Relaxed);
                budget = (budget * 2).min(MAX_OUTPUT_TOKENS);
                continue;
            }
            return Ok(Completion {
                content,
                tokens_in,
                tokens_out,
                latency: started.elapsed(),
            });
        }
    }

    /// Embeddings of `inputs`, in order.
    pub async fn embed(
        &self,
        inputs: &[String],
        priority: Priority,
    ) -> Result<Vec<Vec<f32>>, PoolError> {
        let tokens: usize = inputs.iter().map(|i| count_tokens(i)).sum();
        let body = json!({"model": self.config.model, "input": inputs});
        let value = self
            .request("embeddings", &body, tokens as u32, priority)
            .await?;
        let reply: EmbeddingReply =
            serde_json::from_value(value).map_err(|e| PoolError::Exhausted {
                attempts: 1,
                last: format!("an embeddings reply without data: {e}"),
            })?;
        let mut data = reply.data;
        data.sort_by_key(|d| d.index);
        Ok(data.into_iter().map(|d| d.embedding).collect())
    }

    /// POSTs `body` to `path` on the least-loaded endpoint, retrying what can be
    /// retried; returns the JSON reply.
    async fn request(
        &self,
        path: &str,
        body: &Value,
        tokens: u32,
        priority: Priority,
    ) -> Result<Value, PoolError> {
        let attempts = self.config.max_attempts.max(1);
        if self.config.endpoints.is_empty() {
            return Err(PoolError::Exhausted {
                attempts: 0,
                last: "no endpoint to call (--llm-url)".to_string(),
            });
        }
        let mut last = String::new();
        for attempt in 0..attempts {
            let result = self.hedged(path, body, tokens, priority).await;
            let retry_after = match result {
                Attempt::Done(value) => {
                    self.stats.succeeded.fetch_add(1, Ordering::Relaxed);
                    return Ok(value);
                }
                Attempt::Fatal(error) => return Err(error),
                Attempt::Retry {
                    reason,
                    retry_after,
                } => {
                    tracing::debug!(attempt, reason, "retrying a model request");
                    last = reason;
                    retry_after
                }
            };
            if attempt + 1 < attempts {
                tokio::time::sleep(
                    retry_after
                        .unwrap_or_else(|| backoff(attempt))
                        .min(BACKOFF_CAP),
                )
                .await;
            }
        }
        Err(PoolError::Exhausted { attempts, last })
    }

    /// One attempt; if it has not answered after a few typical reply times (a hung
    /// connection, a stuck replica), a second copy goes out and the first answer
    /// wins, instead of waiting out the whole timeout. The copy goes out sooner when
    /// no request waits for a slot (at the end of a build): it then costs only
    /// capacity that would idle.
    async fn hedged(&self, path: &str, body: &Value, tokens: u32, priority: Priority) -> Attempt {
        // The clock starts when the request goes out, not while it waits its turn.
        self.take_rate(tokens).await;
        let slot = self.acquire(priority).await;
        let mut primary = Box::pin(self.send_on(slot, path, body));
        let Some(typical) = self.typical_latency() else {
            return primary.await;
        };
        let sent = Instant::now();
        let mut delay = self.hedge_delay(typical, IDLE_HEDGE_AFTER);
        loop {
            let timer = Box::pin(tokio::time::sleep_until((sent + delay).into()));
            primary = match futures::future::select(primary, timer).await {
                Either::Left((result, _)) => return result,
                Either::Right(((), primary)) => primary,
            };
            let busy_delay = self.hedge_delay(typical, BUSY_HEDGE_AFTER);
            if delay >= busy_delay || self.lock().waiting.is_empty() {
                break;
            }
            delay = busy_delay;
        }
        self.stats.hedged.fetch_add(1, Ordering::Relaxed);
        let backup = Box::pin(self.attempt(path, body, tokens, priority));
        // The first to finish decides; if it failed, the retry loop takes over
        // rather than waiting on a copy that is probably hung.
        match futures::future::select(primary, backup).await {
            Either::Left((result, _)) | Either::Right((result, _)) => result,
        }
    }

    /// The smoothed reply time; `None` before the first reply says what typical is.
    fn typical_latency(&self) -> Option<Duration> {
        let typical = self.stats.typical_latency_us.load(Ordering::Relaxed);
        (typical > 0).then(|| Duration::from_micros(typical))
    }

    /// How long a request may take before it is hedged: `times` the typical reply
    /// time, but never before an eighth of the timeout (a server that is merely
    /// queueing must not be sent more copies).
    fn hedge_delay(&self, typical: Duration, times: u32) -> Duration {
        (typical * times)
            .max(self.config.timeout / 8)
            .min(self.config.timeout)
    }

    async fn attempt(&self, path: &str, body: &Value, tokens: u32, priority: Priority) -> Attempt {
        self.take_rate(tokens).await;
        let slot = self.acquire(priority).await;
        self.send_on(slot, path, body).await
    }

    /// Sends on a slot already taken; learns the typical reply time from successes.
    async fn send_on(&self, mut slot: Slot<'_>, path: &str, body: &Value) -> Attempt {
        let url = format!(
            "{}/{path}",
            self.config.endpoints[slot.endpoint].trim_end_matches('/')
        );
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let (outcome, result) = self.send(&url, body).await;
        slot.finish(outcome);
        if outcome == Outcome::Success {
            // Exponentially smoothed, one eighth per reply.
            let micros = sent.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
            let _ = self.stats.typical_latency_us.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |old| {
                    Some(if old == 0 {
                        micros
                    } else {
                        old - old / 8 + micros / 8
                    })
                },
            );
        }
        result
    }

    async fn send(&self, url: &str, body: &Value) -> (Outcome, Attempt) {
        let mut request = self.http.post(url).timeout(self.config.timeout).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return self.transport_error(&e),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let text = match response.text().await {
            Ok(text) => text,
            Err(e) => return self.transport_error(&e),
        };
        if status.is_success() {
            return match serde_json::from_str::<Value>(&text) {
                Ok(value) => (Outcome::Success, Attempt::Done(value)),
                Err(e) => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    (
                        Outcome::Failure,
                        Attempt::retry(format!("malformed JSON from {url}: {e}"), None),
                    )
                }
            };
        }
        let snippet: String = text.chars().take(300).collect();
        match status.as_u16() {
            429 | 503 => {
                let counter = if status.as_u16() == 429 {
                    &self.stats.rate_limited
                } else {
                    &self.stats.server_errors
                };
                counter.fetch_add(1, Ordering::Relaxed);
                (
                    Outcome::Congestion,
                    Attempt::retry(format!("HTTP {status} from {url}"), retry_after),
                )
            }
            502 | 504 => {
                self.stats.server_errors.fetch_add(1, Ordering::Relaxed);
                (
                    Outcome::Congestion,
                    Attempt::retry(format!("HTTP {status} from {url}"), retry_after),
                )
            }
            408 | 409 | 500..=599 => {
                self.stats.server_errors.fetch_add(1, Ordering::Relaxed);
                (
                    Outcome::Failure,
                    Attempt::retry(format!("HTTP {status} from {url}: {snippet}"), retry_after),
                )
            }
            code => (
                Outcome::Failure,
                Attempt::Fatal(PoolError::Refused {
                    endpoint: url.to_string(),
                    status: code,
                    body: snippet,
                }),
            ),
        }
    }

    fn transport_error(&self, error: &reqwest::Error) -> (Outcome, Attempt) {
        if error.is_timeout() {
            self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
            return (
                Outcome::Congestion,
                Attempt::retry(format!("timed out after {:?}", self.config.timeout), None),
            );
        }
        if error.is_connect() {
            self.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
            // An endpoint that is down sheds its share to the others.
            return (
                Outcome::Congestion,
                Attempt::retry(format!("cannot connect: {error}"), None),
            );
        }
        self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        (
            Outcome::Failure,
            Attempt::retry(format!("broken response: {error}"), None),
        )
    }

    /// Waits for a slot on some endpoint.
    async fn acquire(&self, priority: Priority) -> Slot<'_> {
        let receiver = {
            let mut scheduler = self.lock();
            let queued_ahead = scheduler
                .waiting
                .peek()
                .is_some_and(|w| w.priority >= priority);
            if !queued_ahead && let Some(endpoint) = scheduler.pick() {
                scheduler.endpoints[endpoint].in_flight += 1;
                self.note_in_flight(scheduler.in_flight());
                return Slot::new(self, endpoint);
            }
            let (sender, receiver) = oneshot::channel();
            scheduler.arrivals += 1;
            let arrival = scheduler.arrivals;
            scheduler.waiting.push(Waiter {
                priority,
                arrival,
                slot: sender,
            });
            receiver
        };
        let mut waiting = Waiting {
            client: self,
            receiver: Some(receiver),
        };
        let receiver = waiting.receiver.as_mut().expect("set above");
        let endpoint = receiver
            .await
            .expect("the scheduler answers every waiter it keeps");
        waiting.receiver = None;
        self.note_in_flight(self.lock().in_flight());
        Slot::new(self, endpoint)
    }

    fn note_in_flight(&self, in_flight: usize) {
        self.stats
            .peak_in_flight
            .fetch_max(in_flight as u64, Ordering::Relaxed);
    }

    /// Frees the slot and adapts the endpoint's limit to how the attempt went:
    /// each success raises it (by one while in slow start, so it doubles per round
    /// trip; by 1/limit after, one per round trip); when more than
    /// `CONGESTED_SHARE` of a round trip's replies are 429s, 503s or timeouts it
    /// halves. Isolated ones (a flaky replica, a hung connection) are only retried:
    /// halving on every one would collapse a busy pool under random faults.
    fn release(&self, endpoint: usize, outcome: Outcome) {
        let mut scheduler = self.lock();
        let max = scheduler.max_concurrency;
        let e = &mut scheduler.endpoints[endpoint];
        e.in_flight -= 1;
        match outcome {
            Outcome::Success if e.limit < e.threshold => e.limit = (e.limit + 1.0).min(max),
            Outcome::Success => e.limit = (e.limit + 1.0 / e.limit).min(max),
            Outcome::Congestion => e.window_congested += 1,
            Outcome::Failure => {}
        }
        e.window_replies += 1;
        if f64::from(e.window_replies) >= e.limit.max(MIN_WINDOW) {
            if f64::from(e.window_congested) > CONGESTED_SHARE * f64::from(e.window_replies) {
                e.threshold = (e.limit / 2.0).max(1.0);
                e.limit = e.threshold;
            }
            e.window_replies = 0;
            e.window_congested = 0;
        }
        scheduler.dispatch();
    }

    /// Waits until the request and token budgets allow one more request.
    async fn take_rate(&self, tokens: u32) {
        let (rpm, tpm) = (self.config.rpm, self.config.tpm);
        if rpm.is_none() && tpm.is_none() {
            return;
        }
        loop {
            let wait = {
                let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
                let elapsed = b.refilled.elapsed().as_secs_f64();
                b.refilled = Instant::now();
                if let Some(rpm) = rpm {
                    b.requests = (b.requests + elapsed * f64::from(rpm) / 60.0).min(f64::from(rpm));
                }
                if let Some(tpm) = tpm {
                    b.tokens = (b.tokens + elapsed * f64::from(tpm) / 60.0).min(f64::from(tpm));
                }
                // A request larger than the whole token budget waits for a full bucket.
                let need_tokens = tpm.map(|t| f64::from(tokens.min(t)));
                let short_requests = rpm.map_or(0.0, |_| (1.0 - b.requests).max(0.0));
                let short_tokens = need_tokens.map_or(0.0, |n| (n - b.tokens).max(0.0));
                if short_requests == 0.0 && short_tokens == 0.0 {
                    if rpm.is_some() {
                        b.requests -= 1.0;
                    }
                    if let Some(n) = need_tokens {
                        b.tokens -= n;
                    }
                    return;
                }
                let by_requests = rpm.map_or(0.0, |r| short_requests * 60.0 / f64::from(r));
                let by_tokens = tpm.map_or(0.0, |t| short_tokens * 60.0 / f64::from(t));
                Duration::from_secs_f64(by_requests.max(by_tokens))
            };
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }
}

/// A slot taken on an endpoint. A request dropped mid-way (its caller gave up)
/// gives its slot back too.
struct Slot<'a> {
    client: &'a PoolClient,
    endpoint: usize,
    finished: bool,
}

impl<'a> Slot<'a> {
    fn new(client: &'a PoolClient, endpoint: usize) -> Self {
        Slot {
            client,
            endpoint,
            finished: false,
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.finished = true;
        self.client.release(self.endpoint, outcome);
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.client.release(self.endpoint, Outcome::Failure);
        }
    }
}

/// A request waiting for a slot; if it is dropped after the scheduler handed it
/// one, the slot goes back.
struct Waiting<'a> {
    client: &'a PoolClient,
    receiver: Option<oneshot::Receiver<usize>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(mut receiver) = self.receiver.take() {
            receiver.close();
            if let Ok(endpoint) = receiver.try_recv() {
                self.client.release(endpoint, Outcome::Failure);
            }
        }
    }
}

enum Attempt {
    Done(Value),
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    Fatal(PoolError),
}

impl Attempt {
    fn retry(reason: String, retry_after: Option<Duration>) -> Self {
        Attempt::Retry {
            reason,
            retry_after,
        }
    }
}

/// Full-jitter exponential backoff: uniform in [0, base · 2^attempt].
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1 << attempt.min(16))
        .min(BACKOFF_CAP);
    ceiling.mul_f64(fastrand::f64())
}

/// The server's requested wait: `retry-after-ms` (OpenAI) or `Retry-After` seconds.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    header("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| Duration::from_secs_f64(s.max(0.0)))
}

#[derive(Debug, Deserialize)]
struct ChatReply {
    choices: Vec<ChatChoice>,
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct ChatChoice {
    message: ChatMessage,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Usage {
    prompt_tokens: u32,
    completion_tokens: u32,
}

#[derive(Debug, Deserialize)]
struct EmbeddingReply {
    data: Vec<EmbeddingData>,
}

#[derive(Debug, Deserialize)]
struct EmbeddingData {
    index: usize,
    embedding: Vec<f32>,
}
