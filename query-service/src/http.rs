//! The HTTP API. `POST /v1/ask` answers with every strategy; `GET /v1/documents`,
//! `/v1/documents/{id}/tree`, `/v1/nodes/{id}` and `/v1/entities/{id}` show the
//! memory itself; `/healthz`, `/readyz`, `/metrics` (Prometheus) and
//! `/openapi.json` serve operators and clients. Bad input is a 4xx with a JSON
//! body `{"error": …}` that says what to change; it never reaches a navigator.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use memweave_operators::embed::Embedder;
use memweave_operators::model::MemoryModel;
use memweave_schemas::{StoreError, TREE_MEMWALKER, TREE_RAPTOR, TableStore, TreeNodeRow};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::RwLock;

use crate::analytics::catalog::Catalog;
use crate::analytics::metrics::prometheus;
use crate::analytics::report::report;
use crate::cache::ReadCache;
use crate::navigate::{Models, ask};
use crate::request::{
    AskRequest, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, MAX_BUDGET, MAX_OPTION, MAX_QUESTION_CHARS,
    MAX_STEP_LIMIT, MAX_TOKEN_LIMIT, Strategy,
};
use crate::snapshot::Snapshot;

/// Largest request body, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Limits every request runs under.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall time one answer may take, model calls included.
    pub request_timeout: Duration,
    /// When set, `/v1/*` needs `Authorization: Bearer <token>`.
    pub auth_token: Option<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout: Duration::from_secs(120),
            auth_token: None,
        }
    }
}

/// What every request handler shares: where the tables are, the newest snapshot,
/// the models navigators ask, and the request counters.
#[derive(Debug)]
pub struct ServiceState {
    store: TableStore,
    cache: Arc<ReadCache>,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    model: Arc<dyn MemoryModel>,
    embedder: Arc<dyn Embedder>,
    limits: Limits,
    metrics: Mutex<Metrics>,
    /// The memory's report as Prometheus gauges, and the epoch and time it
    /// was made at ([`ServiceState::memory_report`]).
    memory_report: tokio::sync::Mutex<Option<(u64, Instant, String)>>,
}

/// Answers by strategy and status, and the seconds they took.
#[derive(Debug, Default)]
struct Metrics {
    answers: BTreeMap<(&'static str, u16), u64>,
    seconds: BTreeMap<&'static str, f64>,
}

impl ServiceState {
    pub fn new(
        store: TableStore,
        cache: Arc<ReadCache>,
        model: Arc<dyn MemoryModel>,
        embedder: Arc<dyn Embedder>,
        limits: Limits,
    ) -> Arc<Self> {
        Arc::new(ServiceState {
            store,
            cache,
            snapshot: RwLock::new(None),
            model,
            embedder,
            limits,
            metrics: Mutex::new(Metrics::default()),
            memory_report: tokio::sync::Mutex::new(None),
        })
    }

    /// Loads the newest checkpoint if it is newer than the one served; returns the
    /// epoch now served.
    pub async fn refresh(&self) -> Result<Option<u64>, StoreError> {
        let served = self.snapshot.read().await.as_ref().map(|s| s.epoch);
        let Some(checkpoint) = self.store.latest_checkpoint().await? else {
            return Ok(served);
        };
        if served == Some(checkpoint.epoch) {
            return Ok(served);
        }
        let snapshot = Snapshot::load(&self.store, &checkpoint, self.cache.clone()).await?;
        tracing::info!(epoch = checkpoint.epoch, "serving checkpoint");
        *self.snapshot.write().await = Some(Arc::new(snapshot));
        Ok(Some(checkpoint.epoch))
    }

    /// Checks for a newer checkpoint every `every`, forever.
    pub async fn keep_fresh(self: Arc<Self>, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            if let Err(err) = self.refresh().await {
                tracing::warn!(error = %err, "checking for a newer checkpoint failed");
            }
        }
    }

    fn count(&self, strategy: &'static str, status: StatusCode, seconds: f64) {
        let mut metrics = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
        *metrics
            .answers
            .entry((strategy, status.as_u16()))
            .or_default() += 1;
        *metrics.seconds.entry(strategy).or_default() += seconds;
    }
}

pub fn router(state: Arc<ServiceState>) -> Router {
    let api = Router::new()
        .route("/v1/ask", post(ask_handler))
        .route("/v1/documents", get(documents_handler))
        .route("/v1/documents/{id}/tree", get(tree_handler))
        .route("/v1/nodes/{id}", get(node_handler))
        .route("/v1/entities/{id}", get(entity_handler))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authorise,
        ));
    Router::new()
        .merge(api)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .route("/metrics", get(metrics_handler))
        .route("/openapi.json", get(|| async { Json(openapi()) }))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route; see /openapi.json") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn authorise(
    State(state): State<Arc<ServiceState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &state.limits.auth_token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            return error(
                StatusCode::UNAUTHORIZED,
                "this service needs Authorization: Bearer <token> (the --auth-token-file token)",
            );
        }
    }
    next.run(request).await
}

async fn served(state: &ServiceState) -> Result<Arc<Snapshot>, Response> {
    state.snapshot.read().await.clone().ok_or_else(not_ready)
}

async fn ask_handler(
    State(state): State<Arc<ServiceState>>,
    body: Result<Json<AskRequest>, JsonRejection>,
) -> Response {
    let started = Instant::now();
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => {
            let status = match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
                StatusCode::UNSUPPORTED_MEDIA_TYPE => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                _ => StatusCode::BAD_REQUEST,
            };
            state.count("invalid", status, 0.0);
            return error(status, &rejection.body_text());
        }
    };
    let snapshot = match served(&state).await {
        Ok(snapshot) => snapshot,
        Err(response) => return response,
    };
    let valid = match snapshot.validate(&request).await {
        Ok(valid) => valid,
        Err(failure) => return unreadable(&failure),
    };
    if let Err(message) = valid {
        state.count(request.strategy.name(), StatusCode::BAD_REQUEST, 0.0);
        return error(StatusCode::BAD_REQUEST, &message);
    }
    let models = Models {
        model: &*state.model,
        embedder: &*state.embedder,
    };
    let answered = tokio::time::timeout(
        state.limits.request_timeout,
        ask(&snapshot, &request, models),
    )
    .await;
    let seconds = started.elapsed().as_secs_f64();
    match answered {
        Ok(Ok(answer)) => {
            state.count(request.strategy.name(), StatusCode::OK, seconds);
            Json(answer).into_response()
        }
        Ok(Err(failure)) => {
            state.count(
                request.strategy.name(),
                StatusCode::SERVICE_UNAVAILABLE,
                seconds,
            );
            unreadable(&failure)
        }
        Err(_) => {
            state.count(
                request.strategy.name(),
                StatusCode::GATEWAY_TIMEOUT,
                seconds,
            );
            error(
                StatusCode::GATEWAY_TIMEOUT,
                &format!(
                    "no answer within {} s (--request-timeout-secs)",
                    state.limits.request_timeout.as_secs()
                ),
            )
        }
    }
}

/// Documents a page of `GET /v1/documents` lists, unless `?limit=` says, and
/// at most.
const DOCUMENTS_PAGE: usize = 1_000;
const MAX_DOCUMENTS_PAGE: usize = 10_000;

#[derive(Debug, Deserialize)]
struct DocumentsQuery {
    /// The `next` of the page before.
    after: Option<String>,
    limit: Option<usize>,
}

async fn documents_handler(
    State(state): State<Arc<ServiceState>>,
    query: Result<Query<DocumentsQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, &rejection.body_text()),
    };
    let limit = query.limit.unwrap_or(DOCUMENTS_PAGE);
    if !(1..=MAX_DOCUMENTS_PAGE).contains(&limit) {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("limit must be 1 to {MAX_DOCUMENTS_PAGE}, not {limit}"),
        );
    }
    let snapshot = match served(&state).await {
        Ok(snapshot) => snapshot,
        Err(response) => return response,
    };
    let page = match snapshot.documents_page(query.after.as_deref(), limit).await {
        Ok(page) => page,
        Err(failure) => return unreadable(&failure),
    };
    Json(json!({
        "epoch": snapshot.epoch,
        "total": page.total,
        "documents": page.documents,
        "next": page.next,
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
struct TreeQuery {
    tree: Option<String>,
}

async fn tree_handler(
    State(state): State<Arc<ServiceState>>,
    Path(id): Path<String>,
    Query(query): Query<TreeQuery>,
) -> Response {
    let snapshot = match served(&state).await {
        Ok(snapshot) => snapshot,
        Err(response) => return response,
    };
    match snapshot.document(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, &format!("unknown document {id:?}")),
        Err(failure) => return unreadable(&failure),
    }
    let tree = query.tree.as_deref().unwrap_or(TREE_MEMWALKER);
    if tree != TREE_MEMWALKER && tree != TREE_RAPTOR {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("unknown tree {tree:?}; expected {TREE_MEMWALKER} or {TREE_RAPTOR}"),
        );
    }
    let nodes = match snapshot.tree(&id, tree).await {
        Ok(nodes) => nodes,
        Err(failure) => return unreadable(&failure),
    };
    let nodes: Vec<Value> = nodes.iter().map(|n| node_json(n)).collect();
    Json(json!({ "doc_id": id, "tree": tree, "nodes": nodes })).into_response()
}

async fn node_handler(State(state): State<Arc<ServiceState>>, Path(id): Path<String>) -> Response {
    let snapshot = match served(&state).await {
        Ok(snapshot) => snapshot,
        Err(response) => return response,
    };
    match snapshot.node(&id).await {
        Ok(Some(node)) => Json(node_json(&node)).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, &format!("unknown node {id:?}")),
        Err(failure) => unreadable(&failure),
    }
}

async fn entity_handler(
    State(state): State<Arc<ServiceState>>,
    Path(id): Path<String>,
) -> Response {
    let snapshot = match served(&state).await {
        Ok(snapshot) => snapshot,
        Err(response) => return response,
    };
    let read = async {
        let entity = snapshot.entity(&id).await?;
        let relations = snapshot.relations_of(&id).await?;
        Ok::<_, StoreError>((entity, relations))
    };
    let (entity, relations) = match read.await {
        Ok((Some(entity), relations)) => (entity, relations),
        Ok((None, _)) => return error(StatusCode::NOT_FOUND, &format!("unknown entity {id:?}")),
        Err(failure) => return unreadable(&failure),
    };
    let relations: Vec<Value> = relations
        .iter()
        .map(|r| {
            json!({
                "relation_id": r.relation_id, "source_id": r.source_id,
                "target_id": r.target_id, "description": r.description, "seg_ids": r.seg_ids,
            })
        })
        .collect();
    Json(json!({
        "entity_id": entity.entity_id, "name": entity.name, "aliases": entity.aliases,
        "description": entity.description, "seg_ids": entity.seg_ids, "relations": relations,
    }))
    .into_response()
}

fn node_json(node: &TreeNodeRow) -> Value {
    json!({
        "node_id": node.node_id, "tree": node.tree, "doc_id": node.doc_id,
        "level": node.level, "ordinal": node.ordinal, "parent_id": node.parent_id,
        "child_ids": node.child_ids, "seg_id": node.seg_id, "summary": node.summary,
        "surprise": node.surprise, "n_tokens": node.n_tokens,
    })
}

async fn ready_handler(State(state): State<Arc<ServiceState>>) -> Response {
    match state.snapshot.read().await.as_ref() {
        Some(snapshot) => Json(json!({ "epoch": snapshot.epoch })).into_response(),
        None => not_ready(),
    }
}

/// The report's numbers for checkpoint `epoch`, as Prometheus text.
/// How often at most the memory's report is made again for a newer epoch.
const REPORT_EVERY: Duration = Duration::from_secs(60);

impl ServiceState {
    /// The report of the memory at `epoch` as Prometheus gauges: made when
    /// `/metrics` is scraped, not when a checkpoint is served, and again only
    /// for a newer epoch once [`REPORT_EVERY`] has passed. It aggregates
    /// whole tables (5.3 s and 413 MB at 100M tokens), too much for every
    /// commit of an indexer that commits every few seconds.
    async fn memory_report(&self, epoch: Option<u64>) -> String {
        let Some(epoch) = epoch else {
            return String::new();
        };
        // One scrape makes it; scrapes meanwhile wait for it.
        let mut report = self.memory_report.lock().await;
        let stale = report
            .as_ref()
            .is_none_or(|(made, at, _)| *made != epoch && at.elapsed() >= REPORT_EVERY);
        if stale {
            let text = match memory_metrics(&self.store, epoch).await {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "the memory's report failed");
                    String::new()
                }
            };
            *report = Some((epoch, Instant::now(), text));
        }
        report
            .as_ref()
            .map_or_else(String::new, |(_, _, text)| text.clone())
    }
}

async fn memory_metrics(store: &TableStore, epoch: u64) -> anyhow::Result<String> {
    let catalog = Catalog::open(store.clone(), Some(epoch)).await?;
    Ok(prometheus(&report(&catalog).await?))
}

async fn metrics_handler(State(state): State<Arc<ServiceState>>) -> Response {
    let epoch = state.snapshot.read().await.as_ref().map(|s| s.epoch);
    let memory = state.memory_report(epoch).await;
    let metrics = state.metrics.lock().unwrap_or_else(|e| e.into_inner());
    let mut text = String::from(
        "# HELP memweave_query_answers_total Ask requests by strategy and HTTP status.\n# TYPE memweave_query_answers_total counter\n",
    );
    for ((strategy, status), count) in &metrics.answers {
        text.push_str(&format!(
            "memweave_query_answers_total{{strategy=\"{strategy}\",status=\"{status}\"}} {count}\n"
        ));
    }
    text.push_str("# HELP memweave_query_answer_seconds_total Seconds spent answering, by strategy.\n# TYPE memweave_query_answer_seconds_total counter\n");
    for (strategy, seconds) in &metrics.seconds {
        text.push_str(&format!(
            "memweave_query_answer_seconds_total{{strategy=\"{strategy}\"}} {seconds}\n"
        ));
    }
    text.push_str("# HELP memweave_query_epoch The checkpoint epoch served (-1 before the first).\n# TYPE memweave_query_epoch gauge\n");
    text.push_str(&format!(
        "memweave_query_epoch {}\n",
        epoch.map_or(-1, |e| e as i64)
    ));
    let rows = state.cache.row_stats();
    for (name, kind, help, value) in [
        (
            "row_cache_hits_total",
            "counter",
            "Row look-ups answered from the row cache.",
            rows.hits,
        ),
        (
            "row_cache_misses_total",
            "counter",
            "Row look-ups that read the tables.",
            rows.misses,
        ),
        (
            "row_cache_entries",
            "gauge",
            "Look-up answers the row cache holds.",
            rows.entries,
        ),
        (
            "row_cache_bytes",
            "gauge",
            "Bytes the row cache holds (estimated).",
            rows.bytes,
        ),
    ] {
        text.push_str(&format!(
            "# HELP memweave_query_{name} {help}\n# TYPE memweave_query_{name} {kind}\nmemweave_query_{name} {value}\n"
        ));
    }
    text.push_str(&memory);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

fn not_ready() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "no checkpoint has been committed under the tables root yet",
    )
}

/// A read of the memory tables failed (storage down, a version vacuumed
/// away): the request may succeed on retry or on another replica.
fn unreadable(failure: &StoreError) -> Response {
    tracing::warn!(error = %failure, "reading the memory tables failed");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("the memory tables could not be read: {failure}"),
    )
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// The OpenAPI 3.1 description of every route.
pub fn openapi() -> Value {
    let error = json!({ "$ref": "#/components/schemas/Error" });
    let json_body =
        |schema: Value| json!({ "content": { "application/json": { "schema": schema } } });
    let failure = |what: &str| json!({ "description": what, "content": { "application/json": { "schema": error } } });
    let strategies: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
    let id_parameter = |what: &str| json!([{ "name": "id", "in": "path", "required": true, "description": what, "schema": { "type": "string" } }]);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "memweave query service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Answers questions over memweave memory tables with the navigators of MemWalker, ReadAgent, QRMeM, RAPTOR and ILM-TR; every answer carries its trace and supporting passages."
        },
        "paths": {
            "/v1/ask": { "post": {
                "summary": "Answer a question with one navigation strategy",
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/AskRequest" } } } },
                "responses": {
                    "200": { "description": "The answer, its trace and supporting passages", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Answer" } } } },
                    "400": failure("Invalid request: empty or too long question, unknown strategy or document, option out of range"),
                    "401": failure("Missing or wrong bearer token"),
                    "413": failure("Body over the size limit"),
                    "503": failure("No checkpoint committed yet"),
                    "504": failure("No answer within the request time limit")
                }
            } },
            "/v1/documents": { "get": {
                "summary": "The documents of the served checkpoint, a page at a time in id order: `next` is the `after` of the following page (null on the last); `total` counts them all",
                "parameters": [
                    { "name": "after", "in": "query", "required": false, "schema": { "type": "string" }, "description": "List the documents whose ids follow this one" },
                    { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": MAX_DOCUMENTS_PAGE, "default": DOCUMENTS_PAGE } }
                ],
                "responses": { "200": json_body(json!({ "type": "object", "required": ["epoch", "total", "documents", "next"] })), "400": failure("limit out of range"), "401": failure("Missing or wrong bearer token") }
            } },
            "/v1/documents/{id}/tree": { "get": {
                "summary": "A document's MemWalker (default) or RAPTOR tree (?tree=raptor)",
                "parameters": id_parameter("Document id"),
                "responses": { "200": json_body(json!({ "type": "object" })), "400": failure("Unknown tree"), "404": failure("Unknown document") }
            } },
            "/v1/nodes/{id}": { "get": {
                "summary": "One tree node",
                "parameters": id_parameter("Node id"),
                "responses": { "200": json_body(json!({ "type": "object" })), "404": failure("Unknown node") }
            } },
            "/v1/entities/{id}": { "get": {
                "summary": "One graph entity with its relations",
                "parameters": id_parameter("Entity id"),
                "responses": { "200": json_body(json!({ "type": "object" })), "404": failure("Unknown entity") }
            } },
            "/healthz": { "get": { "summary": "Liveness", "responses": { "200": { "description": "ok" } } } },
            "/readyz": { "get": { "summary": "Readiness: the epoch served", "responses": { "200": json_body(json!({ "type": "object" })), "503": failure("No checkpoint yet") } } },
            "/metrics": { "get": { "summary": "Prometheus metrics", "responses": { "200": { "description": "Prometheus text format" } } } },
            "/openapi.json": { "get": { "summary": "This document", "responses": { "200": json_body(json!({ "type": "object" })) } } }
        },
        "components": { "schemas": {
            "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" } } },
            "AskRequest": { "type": "object", "required": ["question"], "additionalProperties": false, "properties": {
                "question": { "type": "string", "maxLength": MAX_QUESTION_CHARS },
                "strategy": { "type": "string", "enum": strategies, "default": "memwalker" },
                "documents": { "type": "array", "items": { "type": "string" } },
                "budget": { "type": "integer", "minimum": 1, "maximum": MAX_BUDGET },
                "options": { "type": "object", "additionalProperties": false, "properties": {
                    "top_k": { "type": "integer", "minimum": 1, "maximum": MAX_OPTION },
                    "max_pages": { "type": "integer", "minimum": 1, "maximum": MAX_OPTION },
                    "max_rounds": { "type": "integer", "minimum": 1, "maximum": MAX_OPTION },
                    "max_tokens": { "type": "integer", "minimum": 1, "maximum": MAX_TOKEN_LIMIT, "default": DEFAULT_MAX_TOKENS },
                    "max_steps": { "type": "integer", "minimum": 1, "maximum": MAX_STEP_LIMIT, "default": DEFAULT_MAX_STEPS }
                } }
            } },
            "Answer": { "type": "object", "required": ["answer", "strategy", "trace", "supporting"], "properties": {
                "question": { "type": "string" }, "strategy": { "type": "string" }, "epoch": { "type": "integer" },
                "answered": { "type": "boolean" }, "answer": { "type": "string" },
                "supporting": { "type": "array", "items": { "$ref": "#/components/schemas/Passage" } },
                "trace": { "type": "array", "items": { "$ref": "#/components/schemas/Step" } },
                "usage": { "type": "object", "properties": {
                    "model_calls": { "type": "integer" }, "tokens_in": { "type": "integer" },
                    "tokens_out": { "type": "integer" }, "model_ms": { "type": "integer" }
                } }
            } },
            "Passage": { "type": "object", "properties": {
                "doc_id": { "type": "string" }, "title": { "type": "string" }, "source_uri": { "type": "string" },
                "from_id": { "type": "string" }, "start_char": { "type": "integer" }, "end_char": { "type": "integer" },
                "text": { "type": "string" }
            } },
            "Step": { "type": "object", "properties": {
                "step": { "type": "integer" }, "action": { "type": "string" }, "target": { "type": "string" },
                "level": { "type": ["integer", "null"] }, "score": { "type": "number" }, "reasoning": { "type": "string" },
                "calls": { "type": "array", "items": { "$ref": "#/components/schemas/ModelCall" } }
            } },
            "ModelCall": { "type": "object", "properties": {
                "task": { "type": "string" }, "tokens_in": { "type": "integer" }, "tokens_out": { "type": "integer" },
                "latency_ms": { "type": "integer" }, "cached": { "type": "boolean" }
            } }
        } }
    })
}
