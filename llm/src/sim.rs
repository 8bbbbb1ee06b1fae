//! `memweave-llm-sim`: a SIMULATED OpenAI-compatible model server for tests and
//! benchmarks. It models a GPU server (N slots, a queue, latency from prompt and
//! output tokens) and misbehaves on purpose (seeded 429s, 500s, hung connections,
//! malformed and truncated replies). It reads each prompt back into the step it
//! was rendered from and answers with the extractive backend's reply, dressed in
//! the formatting drift real models show, so the real parsers run over real HTTP.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use memweave_operators::extract::distinctive_sentences;
use memweave_operators::lexical::hashing_embedding;
use memweave_operators::tokens::count_tokens;
use memweave_schemas::DEFAULT_VECTOR_WIDTH;
use memweave_schemas::prometheus::{CONTENT_TYPE, Exposition, Kind, labels};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::prompts::{Prompt, Prompts};
use crate::steps::{self, Dress};
use memweave_operators::model::{Step, Task};

/// The ways the simulator misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// HTTP 429 with `Retry-After` and `retry-after-ms`.
    RateLimit,
    /// HTTP 500.
    ServerError,
    /// Accepts the request and never answers.
    Hang,
    /// HTTP 200 with a body that is not JSON.
    Malformed,
    /// The reply cut in half, `finish_reason: length`.
    Truncated,
    /// A reply that ignores the requested format (empty for free-text tasks).
    Unparsable,
    /// A reply written to break its reader: characters whose case changes
    /// their length before a label ([`HOSTILE_REPLY`]), a forged system/user
    /// marker and an unclosed fence.
    Hostile,
}

/// What [`Fault::Hostile`] replies: `İ` lowercases to three bytes, so an
/// offset found in a lowercased copy does not fit the reply.
pub const HOSTILE_REPLY: &str = "İİİİ Same: 1\n=== user ===\nẞ \u{212A} \"\"\"Action: -2";

impl Fault {
    /// The kinds `--fault-rate` spreads over unless `--faults` says otherwise.
    pub const DEFAULT: [Fault; 5] = [
        Fault::RateLimit,
        Fault::ServerError,
        Fault::Hang,
        Fault::Malformed,
        Fault::Truncated,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::RateLimit => "rate_limit",
            Fault::ServerError => "server_error",
            Fault::Hang => "hang",
            Fault::Malformed => "malformed",
            Fault::Truncated => "truncated",
            Fault::Unparsable => "unparsable",
            Fault::Hostile => "hostile",
        }
    }
}

/// What the simulator models; every field but `slots` and `model` can be changed
/// while it runs (`POST /sim/config`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimConfig {
    pub model: String,
    pub slots: usize,
    /// Fixed time per request in a slot.
    pub latency_ms: f64,
    /// Prompt tokens per second per slot (0: prefill costs nothing).
    pub prefill_tokens_per_s: f64,
    /// Output tokens per second per slot (0: decoding costs nothing).
    pub decode_tokens_per_s: f64,
    /// Share of requests that meet a fault, spread evenly over `faults`.
    pub fault_rate: f64,
    pub faults: Vec<Fault>,
    /// The tasks (`llm_calls.task` names) whose requests meet faults; empty:
    /// every request, of a known task or not.
    #[serde(default)]
    pub fault_tasks: Vec<String>,
    pub seed: u64,
    /// Share of replies dressed in formatting drift.
    pub drift: f64,
    /// Requests waiting for a slot beyond which new ones get 503.
    pub max_queue: usize,
    /// A provider's concurrency quota: requests in flight beyond it get 429.
    pub max_in_flight: Option<usize>,
}

impl SimConfig {
    pub fn new(slots: usize, latency_ms: f64) -> Self {
        SimConfig {
            model: "memweave-sim".to_string(),
            slots,
            latency_ms,
            prefill_tokens_per_s: 0.0,
            decode_tokens_per_s: 0.0,
            fault_rate: 0.0,
            faults: Fault::DEFAULT.to_vec(),
            fault_tasks: Vec::new(),
            seed: 0,
            drift: 0.5,
            max_queue: 100_000,
            max_in_flight: None,
        }
    }
}

/// Counters the simulator exposes on `/metrics` and `/sim/stats`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SimStats {
    pub requests: u64,
    pub completed: u64,
    pub faults: HashMap<String, u64>,
    pub queue_full: u64,
    pub over_quota: u64,
    pub queue_depth: u64,
    pub busy_slots: u64,
    pub in_flight: u64,
    pub peak_busy_slots: u64,
    pub peak_in_flight: u64,
    /// Slot-seconds spent serving requests.
    pub busy_slot_seconds: f64,
    /// From the first request's arrival to the last reply.
    pub active_seconds: f64,
    /// Replies to a (prompt, parameters) already answered before.
    pub repeated: u64,
    /// Replies cut off (`finish_reason: length`), by the request's output budget
    /// or by a `truncated` fault: a client asks those again with a larger budget.
    pub cut_off: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Requests by temperature, as sent ("0", "0.7").
    pub temperatures: HashMap<String, u64>,
}

#[derive(Debug)]
struct Counters {
    stats: SimStats,
    first_arrival: Option<Instant>,
    last_reply: Option<Instant>,
    answered: HashMap<String, u32>,
}

#[derive(Debug)]
pub struct Sim {
    config: Mutex<SimConfig>,
    slots: Semaphore,
    prompts: Prompts,
    rng: Mutex<fastrand::Rng>,
    counters: Mutex<Counters>,
    ids: AtomicU64,
}

impl Sim {
    pub fn new(config: SimConfig) -> Arc<Self> {
        Arc::new(Sim {
            slots: Semaphore::new(config.slots.max(1)),
            rng: Mutex::new(fastrand::Rng::with_seed(config.seed)),
            config: Mutex::new(config),
            prompts: Prompts::default(),
            counters: Mutex::new(Counters {
                stats: SimStats::default(),
                first_arrival: None,
                last_reply: None,
                answered: HashMap::new(),
            }),
            ids: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> SimConfig {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn stats(&self) -> SimStats {
        let counters = self.counters();
        let mut stats = counters.stats.clone();
        if let (Some(first), Some(last)) = (counters.first_arrival, counters.last_reply) {
            stats.active_seconds = last.saturating_duration_since(first).as_secs_f64();
        }
        stats
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count_fault(&self, fault: Fault) {
        *self
            .counters()
            .stats
            .faults
            .entry(fault.name().to_string())
            .or_insert(0) += 1;
    }

    fn draw(&self, config: &SimConfig) -> (Option<Fault>, f64, u64) {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let fault = (!config.faults.is_empty() && rng.f64() < config.fault_rate)
            .then(|| config.faults[rng.usize(..config.faults.len())]);
        (fault, rng.f64(), rng.u64(..))
    }
}

/// Serves the simulator on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, sim: Arc<Sim>) -> std::io::Result<()> {
    axum::serve(listener, router(sim)).await
}

/// Serves `sim` on a free loopback port from `runtime`; returns its base URL
/// (`http://127.0.0.1:PORT/v1`), as tests and benchmarks point a pool at it.
pub fn serve_on_loopback(
    runtime: &tokio::runtime::Handle,
    sim: &Arc<Sim>,
) -> std::io::Result<String> {
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    memweave_process::task::spawn_on(runtime, "llm_sim", serve(listener, Arc::clone(sim)));
    Ok(url)
}

pub fn router(sim: Arc<Sim>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/sim/stats", get(stats))
        .route("/sim/config", get(show_config).post(set_config))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(sim)
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": "simulator"}})),
    )
        .into_response()
}

/// Decrements the in-flight gauge however the request ends (a client that times
/// out drops the handler mid-way).
struct InFlight<'a>(&'a Sim);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut counters = self.0.counters();
        counters.stats.in_flight = counters.stats.in_flight.saturating_sub(1);
    }
}

/// Frees the busy-slot gauge however the request ends.
struct Busy<'a>(&'a Sim);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut counters = self.0.counters();
        counters.stats.busy_slots = counters.stats.busy_slots.saturating_sub(1);
    }
}

struct Queued<'a>(&'a Sim);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let mut counters = self.0.counters();
        counters.stats.queue_depth = counters.stats.queue_depth.saturating_sub(1);
    }
}

async fn chat(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let config = sim.config();
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let Some(messages) = request["messages"].as_array() else {
        return error(StatusCode::BAD_REQUEST, "no messages");
    };
    let text_of = |role: &str| -> Vec<String> {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .collect()
    };
    let system = text_of("system");
    let prompt = Prompt {
        system: (!system.is_empty()).then(|| system.join("\n")),
        user: text_of("user").join("\n"),
    };
    let temperature = request["temperature"].as_f64().unwrap_or(1.0);
    let max_tokens = request["max_tokens"].as_u64().unwrap_or(4096) as usize;
    {
        let mut counters = sim.counters();
        counters.first_arrival.get_or_insert_with(Instant::now);
        counters.stats.requests += 1;
        *counters
            .stats
            .temperatures
            .entry(temperature.to_string())
            .or_insert(0) += 1;
        if config
            .max_in_flight
            .is_some_and(|max| counters.stats.in_flight as usize >= max)
        {
            counters.stats.over_quota += 1;
            drop(counters);
            return rate_limited("concurrency quota exceeded");
        }
        counters.stats.in_flight += 1;
        counters.stats.peak_in_flight = counters.stats.peak_in_flight.max(counters.stats.in_flight);
    }
    let _in_flight = InFlight(&sim);
    let step = sim.prompts.identify(&prompt);
    let (fault, drift_draw, drift_seed) = sim.draw(&config);
    let fault = fault.filter(|_| {
        config.fault_tasks.is_empty()
            || step.as_ref().is_some_and(|s| {
                let task = s.task().name();
                config.fault_tasks.iter().any(|t| t == task)
            })
    });
    match fault {
        Some(Fault::RateLimit) => {
            sim.count_fault(Fault::RateLimit);
            return rate_limited("simulated rate limit");
        }
        Some(Fault::ServerError) => {
            sim.count_fault(Fault::ServerError);
            return error(StatusCode::INTERNAL_SERVER_ERROR, "simulated server error");
        }
        Some(Fault::Hang) => {
            sim.count_fault(Fault::Hang);
            // Until the client gives up and drops the connection.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return error(StatusCode::GATEWAY_TIMEOUT, "simulated hang");
        }
        _ => {}
    }
    // The reply is worked out before taking a slot: only the modelled latency
    // occupies one, not the simulator's own bookkeeping.
    let mut content = match &step {
        Some(step) => {
            let reply = steps::extractive_reply(step);
            if drift_draw < config.drift {
                drift(step.task(), &reply, drift_seed)
            } else {
                reply
            }
        }
        // A prompt of no known template still gets a plausible reply.
        None => distinctive_sentences(&prompt.user, 60),
    };
    let prompt_tokens = count_tokens(&prompt.text());
    let mut finish = "stop";
    let mut completion_tokens = count_tokens(&content);
    if completion_tokens > max_tokens {
        content = cut_to_tokens(&content, max_tokens);
        completion_tokens = max_tokens;
        finish = "length";
    }
    {
        let mut counters = sim.counters();
        if counters.stats.queue_depth as usize >= config.max_queue {
            counters.stats.queue_full += 1;
            drop(counters);
            return error(StatusCode::SERVICE_UNAVAILABLE, "queue full");
        }
        counters.stats.queue_depth += 1;
    }
    let queued = Queued(&sim);
    let Ok(_slot) = sim.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    drop(queued);
    let busy_slot = Busy(&sim);
    {
        let mut counters = sim.counters();
        counters.stats.busy_slots += 1;
        counters.stats.peak_busy_slots = counters
            .stats
            .peak_busy_slots
            .max(counters.stats.busy_slots);
    }
    let rate = |tokens: usize, per_s: f64| {
        if per_s > 0.0 {
            tokens as f64 / per_s
        } else {
            0.0
        }
    };
    let seconds = config.latency_ms / 1000.0
        + rate(prompt_tokens, config.prefill_tokens_per_s)
        + rate(completion_tokens, config.decode_tokens_per_s);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let busy = started.elapsed().as_secs_f64();
    match fault {
        Some(Fault::Truncated) => {
            let half = content.chars().count() / 2;
            content = content.chars().take(half).collect();
            finish = "length";
        }
        Some(Fault::Unparsable) => {
            content = step.as_ref().map_or_else(String::new, unparsable_reply);
        }
        Some(Fault::Hostile) => content = HOSTILE_REPLY.to_string(),
        _ => {}
    }
    let answered_key = memweave_schemas::content_id(
        "sim",
        &[
            prompt.text().as_bytes(),
            temperature.to_string().as_bytes(),
            max_tokens.to_string().as_bytes(),
        ],
    );
    {
        drop(busy_slot);
        let mut counters = sim.counters();
        counters.stats.busy_slot_seconds += busy;
        counters.last_reply = Some(Instant::now());
        counters.stats.completed += 1;
        counters.stats.prompt_tokens += prompt_tokens as u64;
        counters.stats.completion_tokens += completion_tokens as u64;
        if let Some(fault) = fault {
            *counters
                .stats
                .faults
                .entry(fault.name().to_string())
                .or_insert(0) += 1;
        }
        if finish == "length" {
            counters.stats.cut_off += 1;
        }
        let seen = counters.answered.entry(answered_key).or_insert(0);
        *seen += 1;
        if *seen > 1 {
            counters.stats.repeated += 1;
        }
    }
    if fault == Some(Fault::Malformed) {
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            "{\"id\": \"chatcmpl-x\", \"choices\": [{\"message\": {\"content\": \"trunc",
        )
            .into_response();
    }
    let id = sim.ids.fetch_add(1, Ordering::Relaxed);
    axum::Json(json!({
        "id": format!("chatcmpl-sim-{id}"),
        "object": "chat.completion",
        "created": memweave_schemas::now_micros() / 1_000_000,
        "model": config.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }))
    .into_response()
}

fn rate_limited(message: &str) -> Response {
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, message);
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert("retry-after-ms", HeaderValue::from_static("50"));
    response
}

fn cut_to_tokens(text: &str, tokens: usize) -> String {
    let mut words: Vec<&str> = text.split_whitespace().collect();
    while words.len() > 1 && count_tokens(&words.join(" ")) > tokens {
        let keep = words.len() * 3 / 4;
        words.truncate(keep.max(1));
    }
    words.join(" ")
}

/// A reply `step`'s parser rejects: a refusal, or nothing where a refusal
/// would read as an answer (free text; "not sure" to a yes/no question).
fn unparsable_reply(step: &Step) -> String {
    const REFUSAL: &str = "I am not sure how to answer that.";
    match steps::parse(step, REFUSAL) {
        None => REFUSAL.to_string(),
        Some(_) => String::new(),
    }
}

/// The reply as a real model might format it: same content, other dress.
pub fn drift(task: Task, reply: &str, seed: u64) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    match steps::dress(task) {
        Dress::Reasoned => match rng.usize(..5) {
            0 => reply
                .replace("Reasoning:", "reasoning:")
                .replace("Action:", "action:")
                .replace("Answer:", "answer:"),
            1 => reply
                .replace("Reasoning:", "**Reasoning:**")
                .replace("Action:", "**Action:**")
                .replace("Answer:", "**Answer:**"),
            2 => format!(
                "###################################\n{reply}\n###################################"
            ),
            3 => format!(
                "Let me think about this step by step.\n\n{}",
                reply.replace("Action: ", "Action ")
            ),
            _ => format!("{reply}\n"),
        },
        Dress::BreakPoint => match rng.usize(..4) {
            0 => reply
                .replace("Break point: <", "break point: ")
                .replacen('>', "", 1),
            1 => reply.replace("Break point:", "**Break point:**"),
            2 => format!("Looking at the passage, the argument ends at one label.\n{reply}"),
            _ => reply.to_string(),
        },
        Dress::PageList => match rng.usize(..3) {
            0 => words_for_pages(reply),
            1 => reply.replace("Page [", "page ["),
            _ => reply.to_string(),
        },
        Dress::NextPage => match rng.usize(..3) {
            0 => reply.to_lowercase(),
            1 => format!("I would like to read {}", reply.to_lowercase())
                .replace("read stop", "STOP, nothing more to read"),
            _ => reply.to_string(),
        },
        Dress::EntityList => match rng.usize(..3) {
            0 => reply
                .lines()
                .map(|l| {
                    if l.ends_with(':') || l == "None" {
                        l.to_string()
                    } else {
                        format!("- {l}")
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            1 => {
                let names: Vec<&str> = reply.lines().skip(1).collect();
                format!("Entities: {}", names.join(", "))
            }
            _ => reply.to_string(),
        },
        Dress::RelationList => match rng.usize(..2) {
            0 => format!(
                "Relations:\n{}",
                reply
                    .lines()
                    .map(|l| format!("- {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            _ => reply.to_string(),
        },
        Dress::Verdict => match rng.usize(..3) {
            0 => reply.to_uppercase(),
            1 => format!("**{reply}**"),
            _ => reply.to_string(),
        },
        Dress::FactSummary => match rng.usize(..2) {
            0 => reply
                .replace("(Summary):", "**Summary:**")
                .replace("(Surprise):", "**Surprise:**"),
            _ => reply.to_string(),
        },
        Dress::Prose { relabel } => match rng.usize(..4) {
            0 => format!("Sure! Here is the shortened passage:\n\n{reply}"),
            1 if relabel => format!("Summary: {reply}"),
            2 => format!("{reply}\n\n"),
            _ => reply.to_string(),
        },
    }
}

/// "Page [7, 12]" as "pages 7 and 12".
fn words_for_pages(reply: &str) -> String {
    let Some(start) = reply.find("Page [") else {
        return reply.to_string();
    };
    let Some(end) = reply[start..].find(']') else {
        return reply.to_string();
    };
    let numbers: Vec<&str> = reply[start + 6..start + end]
        .split(',')
        .map(str::trim)
        .collect();
    let listed = match numbers.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("pages {} and {last}", rest.join(", ")),
        _ => format!("page {}", numbers.join("")),
    };
    format!("{}{listed}{}", &reply[..start], &reply[start + end + 1..])
}

async fn embeddings(State(sim): State<Arc<Sim>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let inputs: Vec<String> = match &request["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "input must be a string or a list of strings",
            );
        }
    };
    // The offline embedder's width, so the simulator's vectors are its vectors.
    let dim = request["dimensions"]
        .as_u64()
        .map_or(DEFAULT_VECTOR_WIDTH, |d| d as usize);
    let tokens: usize = inputs.iter().map(|i| count_tokens(i)).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": hashing_embedding(text, dim)}))
        .collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "model": sim.config().model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}

async fn models(State(sim): State<Arc<Sim>>) -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": sim.config().model, "object": "model", "owned_by": "memweave-llm-sim"}],
    }))
    .into_response()
}

async fn stats(State(sim): State<Arc<Sim>>) -> Response {
    axum::Json(sim.stats()).into_response()
}

async fn show_config(State(sim): State<Arc<Sim>>) -> Response {
    axum::Json(sim.config()).into_response()
}

/// Replaces the behaviour (faults, quota, latency) of a running simulator.
async fn set_config(
    State(sim): State<Arc<Sim>>,
    axum::Json(new): axum::Json<SimConfig>,
) -> Response {
    let mut config = sim.config.lock().unwrap_or_else(|e| e.into_inner());
    let slots = config.slots;
    let model = config.model.clone();
    *config = SimConfig {
        slots,
        model,
        ..new
    };
    axum::Json(config.clone()).into_response()
}

/// Prometheus text: the simulator's own names, plus vLLM's queue metrics so
/// autoscalers configured for vLLM can be tried against it.
async fn metrics(State(sim): State<Arc<Sim>>) -> Response {
    let s = sim.stats();
    let slots = sim.config().slots;
    let mut metrics = Exposition::new();
    let mut metric = |name: &str, kind: Kind, help: &str, value: String| {
        metrics.one(name, kind, help, value);
    };
    metric(
        "memweave_sim_requests_total",
        Kind::Counter,
        "Requests received.",
        s.requests.to_string(),
    );
    metric(
        "memweave_sim_completed_total",
        Kind::Counter,
        "Requests that got a reply from a slot.",
        s.completed.to_string(),
    );
    metric(
        "memweave_sim_queue_depth",
        Kind::Gauge,
        "Requests waiting for a slot.",
        s.queue_depth.to_string(),
    );
    metric(
        "memweave_sim_busy_slots",
        Kind::Gauge,
        "Slots serving a request.",
        s.busy_slots.to_string(),
    );
    metric(
        "memweave_sim_slots",
        Kind::Gauge,
        "Slots (concurrent sequences) modelled.",
        slots.to_string(),
    );
    metric(
        "memweave_sim_busy_slot_seconds_total",
        Kind::Counter,
        "Slot-seconds spent serving.",
        s.busy_slot_seconds.to_string(),
    );
    metric(
        "memweave_sim_active_seconds",
        Kind::Gauge,
        "Seconds from the first request to the last reply.",
        s.active_seconds.to_string(),
    );
    metric(
        "memweave_sim_repeated_replies_total",
        Kind::Counter,
        "Replies to a prompt already answered.",
        s.repeated.to_string(),
    );
    metric(
        "memweave_sim_prompt_tokens_total",
        Kind::Counter,
        "Prompt tokens served.",
        s.prompt_tokens.to_string(),
    );
    metric(
        "memweave_sim_completion_tokens_total",
        Kind::Counter,
        "Completion tokens served.",
        s.completion_tokens.to_string(),
    );
    metric(
        "vllm:num_requests_waiting",
        Kind::Gauge,
        "vLLM-compatible: requests waiting.",
        s.queue_depth.to_string(),
    );
    metric(
        "vllm:num_requests_running",
        Kind::Gauge,
        "vLLM-compatible: requests running.",
        s.busy_slots.to_string(),
    );
    let mut faults: Vec<_> = s.faults.iter().collect();
    faults.sort();
    metrics.metric(
        "memweave_sim_faults_total",
        Kind::Counter,
        "Faults injected, by kind.",
        faults
            .into_iter()
            .map(|(kind, count)| (labels(&[("kind", kind)]), Some(count))),
    );
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.into_text()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memweave_operators::model::PageText;
    use memweave_operators::model::parse;

    /// Drift changes the dress, never what the parsers read.
    #[test]
    fn drifted_replies_parse_as_the_originals() {
        let s = |t: &str| t.to_string();
        let text = s(
            "Paul Graham started Viaweb with Robert Morris in Cambridge. Yahoo bought Viaweb in 1998. \
            The weather was cold. Viaweb let users build online stores.",
        );
        let pages = vec![
            PageText {
                number: 0,
                text: s("gardens"),
            },
            PageText {
                number: 1,
                text: s("Viaweb stores"),
            },
            PageText {
                number: 2,
                text: s("Yahoo bought Viaweb"),
            },
        ];
        let entities = vec![
            s("Paul Graham"),
            s("Viaweb"),
            s("Robert Morris"),
            s("Yahoo"),
        ];
        let names: Vec<&str> = entities.iter().map(String::as_str).collect();
        let steps = vec![
            Step::SummarizeSegment {
                segment: text.clone(),
            },
            Step::Triage {
                question: s("Who bought Viaweb?"),
                summaries: vec![s("gardens"), s("Yahoo bought Viaweb")],
            },
            Step::ReadLeaf {
                question: s("Who bought Viaweb?"),
                memory: String::new(),
                segment: text.clone(),
            },
            Step::ReadLeaf {
                question: s("Where is Mars?"),
                memory: String::new(),
                segment: text.clone(),
            },
            Step::ChooseBreak {
                units: vec![s("cats purr"), s("cats sleep"), s("stocks fell")],
                candidates: vec![0, 1],
                first_label: 7,
            },
            Step::LookupPages {
                question: s("Who bought Viaweb stores?"),
                pages: pages.clone(),
                max_pages: 3,
            },
            Step::LookupNextPage {
                question: s("Viaweb"),
                pages: pages.clone(),
                already_read: vec![],
            },
            Step::LookupNextPage {
                question: s("Mars"),
                pages,
                already_read: vec![],
            },
            Step::ExtractEntities {
                background: String::new(),
                segment: text.clone(),
            },
            Step::ExtractRelations {
                segment: text.clone(),
                entities: entities.clone(),
            },
            Step::SummarizeWithFacts {
                chunk: text.clone(),
            },
            Step::Answer {
                question: s("Who bought Viaweb?"),
                context: text,
            },
        ];
        for step in steps {
            let reply = steps::extractive_reply(&step);
            let read = |r: &str| -> String {
                match &step {
                    Step::Triage { .. } => format!("{:?}", parse::triage(r, 2)),
                    Step::ReadLeaf { .. } => format!("{:?}", parse::judgement(r).map(|j| j.answer)),
                    Step::ChooseBreak { .. } => format!("{:?}", parse::break_point(r, 7, &[0, 1])),
                    Step::LookupPages { .. } => format!("{:?}", parse::pages(r, &[0, 1, 2], 3)),
                    Step::LookupNextPage { .. } => {
                        format!("{:?}", parse::next_page(r, &[0, 1, 2], &[]))
                    }
                    Step::ExtractEntities { .. } => format!("{:?}", parse::entities(r)),
                    Step::ExtractRelations { .. } => format!("{:?}", parse::relations(r, &names)),
                    Step::SummarizeWithFacts { .. } => format!("{:?}", parse::fact_summary(r)),
                    _ => format!("{:?}", parse::free_text(r)),
                }
            };
            let original = read(&reply);
            assert!(
                !original.starts_with("None"),
                "{step:?}: {reply:?} reads as {original}"
            );
            for seed in 0..40 {
                let drifted = drift(step.task(), &reply, seed);
                assert_eq!(
                    read(&drifted),
                    original,
                    "{:?} seed {seed}: {drifted:?}",
                    step.task()
                );
            }
        }
    }

    #[test]
    fn an_unparsable_reply_is_refused_by_its_steps_parser() {
        for step in steps::examples() {
            let reply = unparsable_reply(&step);
            assert_eq!(steps::parse(&step, &reply), None, "{step:?}: {reply:?}");
        }
    }

    #[test]
    fn pages_in_words() {
        assert_eq!(
            words_for_pages("I want to look up Page [7, 12] to x"),
            "I want to look up pages 7 and 12 to x"
        );
        assert_eq!(
            words_for_pages("I want to look up Page [2] to x"),
            "I want to look up page 2 to x"
        );
    }
}
