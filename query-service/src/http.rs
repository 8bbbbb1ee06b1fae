//! The HTTP API. `POST /v1/ask` answers with every strategy, `POST /v1/search`
//! ranks passages without the model; `GET /v1/documents`,
//! `/v1/documents/{id}/tree`, `/v1/documents/{id}/pages/{page}`,
//! `/v1/nodes/{id}` and `/v1/entities/{id}` show the memory itself; `/mcp`
//! serves the same as MCP tools; `/healthz`, `/readyz`, `/metrics`
//! (Prometheus) and `/openapi.json` serve operators and clients. Bad input is
//! a 4xx with a JSON body `{"error": …}` that says what to change; it never
//! reaches a navigator.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use memweave_analytics::metrics::prometheus;
use memweave_schemas::prometheus::{CONTENT_TYPE, Exposition, Kind, labels};
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::request::{
    AskRequest, CHECKPOINTS_PAGE, CheckpointsRequest, DOCUMENTS_PAGE, DocumentRequest,
    DocumentsRequest, ENTITY_LIST, EntitiesRequest, EntityRequest, MAX_BODY_BYTES,
    MAX_CHECKPOINTS_PAGE, MAX_DOCUMENTS_PAGE, MAX_ENTITY_LIST, MAX_TEXT_CHARS, NodeRequest,
    OverviewRequest, PAGES_LIST, PageRequest, PagesRequest, SearchRequest, SegmentRequest,
    TextRequest, TreeKind, TreeRequest,
};
use crate::service::{ApiError, ServiceState};
use crate::{mcp, ui};

/// The routes; only requests whose `Host` is one of `hosts` are answered
/// (the probes excepted), so a web page cannot reach the service through DNS
/// rebinding; with `explorer`, the web explorer at `/`. Every request has
/// the request timeout, and expensive ones share
/// [`crate::service::Limits::expensive_in_flight`] permits.
pub fn router(state: Arc<ServiceState>, hosts: mcp::AllowedHosts, explorer: bool) -> Router {
    let api = Router::new()
        .route("/v1/ask", post(ask_handler))
        .route("/v1/search", post(search_handler))
        .route("/v1/documents", get(documents_handler))
        .route("/v1/documents/{id}", get(document_handler))
        .route("/v1/documents/{id}/tree", get(tree_handler))
        .route("/v1/documents/{id}/pages/{page}", get(page_handler))
        .route("/v1/documents/{id}/text", get(text_handler))
        .route("/v1/documents/{id}/pages", get(pages_handler))
        .route("/v1/entities", get(entities_handler))
        .route("/v1/segments/{id}", get(segment_handler))
        .route("/v1/nodes/{id}", get(node_handler))
        .route("/v1/entities/{id}", get(entity_handler))
        .route("/v1/checkpoints", get(checkpoints_handler))
        .route("/v1/overview", get(overview_handler))
        .route("/metrics", get(metrics_handler))
        .nest_service("/mcp", mcp::http_service(state.clone(), hosts.clone()))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authorise,
        ));
    let routes = if explorer {
        Router::new().merge(ui::routes())
    } else {
        Router::new()
    };
    routes
        .merge(api)
        .route("/openapi.json", get(|| async { Json(openapi()) }))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route; see /openapi.json") })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            limit_expensive,
        ))
        .layer(middleware::from_fn_with_state(Arc::new(hosts), check_host))
        // Probes come with the pod's address as their Host, and tell nothing.
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), in_time))
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
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Constant time: how long a refusal takes tells nothing of the token.
        let matches: bool =
            subtle::ConstantTimeEq::ct_eq(presented.as_bytes(), token.as_bytes()).into();
        if !matches {
            return error(
                StatusCode::UNAUTHORIZED,
                "this service needs Authorization: Bearer <token> (the --auth-token-file token)",
            );
        }
    }
    next.run(request).await
}

/// 403 unless the request names an allowed host (its `Host` header, or the
/// URI's authority over HTTP/2).
async fn check_host(
    State(hosts): State<Arc<mcp::AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host.is_some_and(|host| hosts.permits(host)) {
        return error(
            StatusCode::FORBIDDEN,
            "this Host is not served; the service answers loopback and its --allowed-host names",
        );
    }
    next.run(request).await
}

/// Every request within the request timeout: past it, 504.
async fn in_time(State(state): State<Arc<ServiceState>>, request: Request, next: Next) -> Response {
    let limit = state.limits.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => reply::<()>(Err(ApiError::TimedOut(limit.as_secs()))),
    }
}

/// Requests that cost a replica real work: questions, searches, the
/// overview's report, MCP calls, and any read at an earlier epoch (which
/// opens that checkpoint). Past the permits they are 429, with Retry-After.
fn is_expensive(request: &Request) -> bool {
    let path = request.uri().path();
    let earlier = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|pair| pair.starts_with("epoch=")));
    earlier || matches!(path, "/v1/ask" | "/v1/search" | "/v1/overview") || path.starts_with("/mcp")
}

async fn limit_expensive(
    State(state): State<Arc<ServiceState>>,
    request: Request,
    next: Next,
) -> Response {
    if !is_expensive(&request) {
        return next.run(request).await;
    }
    match state.expensive.try_acquire() {
        Ok(_permit) => next.run(request).await,
        Err(_) => reply::<()>(Err(ApiError::Busy)),
    }
}

/// A served result as JSON, or its error with its status (and when to come
/// back, for a busy service).
fn reply<T: Serialize>(served: Result<T, ApiError>) -> Response {
    match served {
        Ok(value) => Json(value).into_response(),
        Err(failure) => {
            let mut response = error(failure.status(), &failure.to_string());
            if matches!(failure, ApiError::Busy) {
                let again = header::HeaderValue::from_static("1");
                response.headers_mut().insert(header::RETRY_AFTER, again);
            }
            response
        }
    }
}

/// A part of a request (`Query`, `Path` or `Json`) as a handler asked for it;
/// one it cannot parse is answered before the handler runs, as bad input:
/// 400 with a JSON error (413 and 415 as they are).
struct Asked<T>(T);

/// What axum's extractors say when a part does not parse.
trait Unparsed {
    fn status(&self) -> StatusCode;
    fn body_text(&self) -> String;
}

macro_rules! unparsed {
    ($($rejection:ty),*) => {$(
        impl Unparsed for $rejection {
            fn status(&self) -> StatusCode {
                self.status()
            }
            fn body_text(&self) -> String {
                self.body_text()
            }
        }
    )*};
}
unparsed!(QueryRejection, PathRejection, JsonRejection);

fn rejected(rejection: &impl Unparsed) -> Response {
    let status = match rejection.status() {
        status @ (StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE) => status,
        _ => StatusCode::BAD_REQUEST,
    };
    error(status, &rejection.body_text())
}

impl<S: Send + Sync, T> FromRequestParts<S> for Asked<T>
where
    T: FromRequestParts<S, Rejection: Unparsed>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        T::from_request_parts(parts, state)
            .await
            .map(Asked)
            .map_err(|rejection| rejected(&rejection))
    }
}

impl<S: Send + Sync, T> FromRequest<S> for Asked<Json<T>>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        Json::<T>::from_request(request, state)
            .await
            .map(Asked)
            .map_err(|rejection| rejected(&rejection))
    }
}

async fn ask_handler(
    State(state): State<Arc<ServiceState>>,
    body: Result<Asked<Json<AskRequest>>, Response>,
) -> Response {
    match body {
        Ok(Asked(Json(request))) => reply(state.ask(&request).await),
        Err(response) => {
            state.count("invalid", response.status(), 0.0);
            response
        }
    }
}

async fn search_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Json(request)): Asked<Json<SearchRequest>>,
) -> Response {
    reply(state.search(&request).await)
}

async fn documents_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Query(request)): Asked<Query<DocumentsRequest>>,
) -> Response {
    reply(state.documents(&request).await)
}

/// `/v1/documents/{id}/tree`'s query: the rest of a [`TreeRequest`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeQuery {
    #[serde(default)]
    tree: TreeKind,
    depth: Option<u32>,
    under: Option<String>,
    epoch: Option<u64>,
}

async fn tree_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(doc_id)): Asked<Path<String>>,
    Asked(Query(TreeQuery {
        tree,
        depth,
        under,
        epoch,
    })): Asked<Query<TreeQuery>>,
) -> Response {
    reply(
        state
            .tree(&TreeRequest {
                doc_id,
                tree,
                depth,
                under,
                epoch,
            })
            .await,
    )
}

/// The query of a route that takes nothing but the checkpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AtQuery {
    epoch: Option<u64>,
}

async fn page_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path((doc_id, page))): Asked<Path<(String, u32)>>,
    Asked(Query(AtQuery { epoch })): Asked<Query<AtQuery>>,
) -> Response {
    reply(
        state
            .page(&PageRequest {
                doc_id,
                page,
                epoch,
            })
            .await,
    )
}

async fn node_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(node_id)): Asked<Path<String>>,
    Asked(Query(AtQuery { epoch })): Asked<Query<AtQuery>>,
) -> Response {
    reply(state.node(&NodeRequest { node_id, epoch }).await)
}

async fn document_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(doc_id)): Asked<Path<String>>,
    Asked(Query(AtQuery { epoch })): Asked<Query<AtQuery>>,
) -> Response {
    reply(state.document(&DocumentRequest { doc_id, epoch }).await)
}

async fn segment_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(seg_id)): Asked<Path<String>>,
    Asked(Query(AtQuery { epoch })): Asked<Query<AtQuery>>,
) -> Response {
    reply(state.segment(&SegmentRequest { seg_id, epoch }).await)
}

/// `/v1/documents/{id}/text`'s query: the rest of a [`TextRequest`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TextQuery {
    start: Option<u64>,
    end: Option<u64>,
    epoch: Option<u64>,
}

async fn text_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(doc_id)): Asked<Path<String>>,
    Asked(Query(TextQuery { start, end, epoch })): Asked<Query<TextQuery>>,
) -> Response {
    reply(
        state
            .text(&TextRequest {
                doc_id,
                start,
                end,
                epoch,
            })
            .await,
    )
}

/// `/v1/documents/{id}/pages`'s query: the rest of a [`PagesRequest`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PagesQuery {
    from: Option<u32>,
    limit: Option<usize>,
    epoch: Option<u64>,
}

async fn pages_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(doc_id)): Asked<Path<String>>,
    Asked(Query(PagesQuery { from, limit, epoch })): Asked<Query<PagesQuery>>,
) -> Response {
    reply(
        state
            .pages(&PagesRequest {
                doc_id,
                from,
                limit,
                epoch,
            })
            .await,
    )
}

async fn entities_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Query(request)): Asked<Query<EntitiesRequest>>,
) -> Response {
    reply(state.entities(&request).await)
}

async fn checkpoints_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Query(request)): Asked<Query<CheckpointsRequest>>,
) -> Response {
    reply(state.checkpoints(&request).await)
}

async fn overview_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Query(request)): Asked<Query<OverviewRequest>>,
) -> Response {
    reply(state.overview(&request).await)
}

/// `/v1/entities/{id}`'s query: the rest of an [`EntityRequest`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntityQuery {
    limit: Option<usize>,
    offset: Option<usize>,
    epoch: Option<u64>,
}

async fn entity_handler(
    State(state): State<Arc<ServiceState>>,
    Asked(Path(entity_id)): Asked<Path<String>>,
    Asked(Query(EntityQuery {
        limit,
        offset,
        epoch,
    })): Asked<Query<EntityQuery>>,
) -> Response {
    reply(
        state
            .entity(&EntityRequest {
                entity_id,
                limit,
                offset,
                epoch,
            })
            .await,
    )
}

async fn ready_handler(State(state): State<Arc<ServiceState>>) -> Response {
    match state.epoch().await {
        Some(epoch) => Json(json!({ "epoch": epoch })).into_response(),
        None => reply::<()>(Err(ApiError::NotReady)),
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
            let text = match self.report(epoch).await {
                Ok(made) => prometheus(&made),
                Err(e) => {
                    tracing::warn!(error = %e, "the memory's report failed");
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

async fn metrics_handler(State(state): State<Arc<ServiceState>>) -> Response {
    let epoch = state.epoch().await;
    let memory = state.memory_report(epoch).await;
    let counted = state.metrics.lock().unwrap_or_else(|e| e.into_inner());
    let mut metrics = Exposition::new();
    metrics
        .metric(
            "memweave_query_answers_total",
            Kind::Counter,
            "Ask requests by strategy and HTTP status.",
            counted.answers.iter().map(|((strategy, status), count)| {
                let status = status.to_string();
                (
                    labels(&[("strategy", strategy), ("status", &status)]),
                    Some(count),
                )
            }),
        )
        .metric(
            "memweave_query_answer_seconds_total",
            Kind::Counter,
            "Seconds spent answering, by strategy.",
            counted
                .seconds
                .iter()
                .map(|(strategy, seconds)| (labels(&[("strategy", strategy)]), Some(seconds))),
        )
        .one(
            "memweave_query_epoch",
            Kind::Gauge,
            "The checkpoint epoch served (-1 before the first).",
            epoch.map_or(-1, |e| e as i64),
        );
    let rows = state.cache.row_stats();
    for (name, kind, help, value) in [
        (
            "memweave_query_row_cache_hits_total",
            Kind::Counter,
            "Row look-ups answered from the row cache.",
            rows.hits,
        ),
        (
            "memweave_query_row_cache_misses_total",
            Kind::Counter,
            "Row look-ups that read the tables.",
            rows.misses,
        ),
        (
            "memweave_query_row_cache_entries",
            Kind::Gauge,
            "Look-up answers the row cache holds.",
            rows.entries,
        ),
        (
            "memweave_query_row_cache_bytes",
            Kind::Gauge,
            "Bytes the row cache holds (estimated).",
            rows.bytes,
        ),
    ] {
        metrics.one(name, kind, help, value);
    }
    metrics.extend(&memory);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.into_text()).into_response()
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
    // The request bodies' schemas, generated from the types the service
    // reads (as the MCP tools' are), their limits with them.
    let mut requests = SchemaGenerator::new(SchemaSettings::draft2020_12().with(|settings| {
        settings.definitions_path = "/components/schemas".into();
    }));
    let (ask, search) = (
        requests.subschema_for::<AskRequest>(),
        requests.subschema_for::<SearchRequest>(),
    );
    let id = |what: &str| json!({ "name": "id", "in": "path", "required": true, "description": what, "schema": { "type": "string" } });
    let at = json!({ "name": "epoch", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1 },
        "description": "The checkpoint to read (default: the newest served); an earlier one reads the memory as that commit left it, while the tables keep its versions" });
    let object = || json_body(json!({ "type": "object" }));
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "memweave query service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Answers questions over memweave memory tables with the navigators of MemWalker, ReadAgent, QRMeM, RAPTOR and ILM-TR; every answer carries its trace and supporting passages."
        },
        "paths": {
            "/v1/ask": { "post": {
                "summary": "Answer a question with one navigation strategy",
                "requestBody": { "required": true, "content": { "application/json": { "schema": ask } } },
                "responses": {
                    "200": { "description": "The answer, its trace and supporting passages", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Answer" } } } },
                    "400": failure("Invalid request: empty or too long question, unknown strategy or document, option out of range"),
                    "401": failure("Missing or wrong bearer token"),
                    "413": failure("Body over the size limit"),
                    "503": failure("No checkpoint committed yet"),
                    "504": failure("No answer within the request time limit")
                }
            } },
            "/v1/search": { "post": {
                "summary": "The passages BM25 or the dense baseline ranks highest for a query, with their scores; no model is asked",
                "requestBody": { "required": true, "content": { "application/json": { "schema": search } } },
                "responses": { "200": json_body(json!({ "type": "object", "required": ["epoch", "method", "passages"] })), "400": failure("Invalid request"), "401": failure("Missing or wrong bearer token"), "503": failure("No checkpoint committed yet, or the query could not be embedded") }
            } },
            "/v1/documents": { "get": {
                "summary": "The documents of the served checkpoint, a page at a time in id order: `next` is the `after` of the following page (null on the last); `total` counts them all",
                "parameters": [
                    { "name": "after", "in": "query", "required": false, "schema": { "type": "string" }, "description": "List the documents whose ids follow this one" },
                    { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": MAX_DOCUMENTS_PAGE, "default": DOCUMENTS_PAGE } },
                    { "name": "q", "in": "query", "required": false, "schema": { "type": "string" }, "description": "Only the documents whose id or title holds this text, in any case (`total` counts them)" },
                    at
                ],
                "responses": { "200": json_body(json!({ "type": "object", "required": ["epoch", "total", "documents", "next"] })), "400": failure("limit out of range"), "401": failure("Missing or wrong bearer token") }
            } },
            "/v1/documents/{id}/tree": { "get": {
                "summary": "A document's MemWalker (default) or RAPTOR tree (?tree=raptor), its top levels only with ?depth= (0: the root)",
                "parameters": [
                    { "name": "id", "in": "path", "required": true, "description": "Document id", "schema": { "type": "string" } },
                    { "name": "tree", "in": "query", "required": false, "schema": { "type": "string", "enum": ["memwalker", "raptor"], "default": "memwalker" } },
                    { "name": "depth", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0 }, "description": "Levels below the root" },
                    { "name": "under", "in": "query", "required": false, "schema": { "type": "string" }, "description": "Only this node's children, in order (what expanding it shows)" },
                    at
                ],
                "responses": { "200": object(), "400": failure("Unknown tree"), "404": failure("Unknown document or node") }
            } },
            "/v1/documents/{id}": { "get": {
                "summary": "One document: title, source, tokens, version and the sections citations name",
                "parameters": [id("Document id"), at],
                "responses": { "200": object(), "404": failure("Unknown document") }
            } },
            "/v1/documents/{id}/text": { "get": {
                "summary": "A stretch of a document's text by character (what passages' start_char and end_char count), read from its pages",
                "parameters": [
                    id("Document id"),
                    { "name": "start", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0, "default": 0 } },
                    { "name": "end", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0 }, "description": format!("The character after the last; at most {MAX_TEXT_CHARS} past start") },
                    at
                ],
                "responses": { "200": object(), "400": failure("start and end out of order or too far apart"), "404": failure("Unknown document") }
            } },
            "/v1/documents/{id}/pages": { "get": {
                "summary": "A document's ReadAgent pages with their gists (not their texts), a stretch at a time; `total` counts them",
                "parameters": [
                    id("Document id"),
                    { "name": "from", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0, "default": 0 } },
                    { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": MAX_ENTITY_LIST, "default": PAGES_LIST } },
                    at
                ],
                "responses": { "200": object(), "404": failure("Unknown document") }
            } },
            "/v1/documents/{id}/pages/{page}": { "get": {
                "summary": "A ReadAgent page of a document (from 0): its text and its gist",
                "parameters": [
                    { "name": "id", "in": "path", "required": true, "description": "Document id", "schema": { "type": "string" } },
                    { "name": "page", "in": "path", "required": true, "description": "Page number, from 0", "schema": { "type": "integer", "minimum": 0 } },
                    at
                ],
                "responses": { "200": json_body(json!({ "type": "object" })), "400": failure("Page not a number"), "404": failure("Unknown document or page") }
            } },
            "/v1/nodes/{id}": { "get": {
                "summary": "One tree node",
                "parameters": [id("Node id"), at],
                "responses": { "200": json_body(json!({ "type": "object" })), "404": failure("Unknown node") }
            } },
            "/v1/entities/{id}": { "get": {
                "summary": "One graph entity with its first relations (id order) and source segments, and how many there are of each",
                "parameters": [
                    { "name": "id", "in": "path", "required": true, "description": "Entity id", "schema": { "type": "string" } },
                    { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": MAX_ENTITY_LIST, "default": ENTITY_LIST } },
                    { "name": "offset", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 0, "default": 0 }, "description": "Relations and segments to skip: a hub's next page" },
                    at
                ],
                "responses": { "200": object(), "400": failure("limit out of range"), "404": failure("Unknown entity") }
            } },
            "/v1/entities": { "get": {
                "summary": "The graph's entities with a name or alias (normalised as the graph names them)",
                "parameters": [{ "name": "name", "in": "query", "required": true, "schema": { "type": "string" } }, at],
                "responses": { "200": object(), "400": failure("No name") }
            } },
            "/v1/segments/{id}": { "get": {
                "summary": "One segment as a passage: its document, characters, section and text",
                "parameters": [id("Segment id"), at],
                "responses": { "200": json_body(json!({ "$ref": "#/components/schemas/Passage" })), "404": failure("Unknown segment") }
            } },
            "/v1/checkpoints": { "get": {
                "summary": "The checkpoints under the tables root, newest first, and the one served; `next` is the following page's `before`",
                "parameters": [
                    { "name": "before", "in": "query", "required": false, "schema": { "type": "integer" }, "description": "List the checkpoints older than this epoch" },
                    { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": MAX_CHECKPOINTS_PAGE, "default": CHECKPOINTS_PAGE } }
                ],
                "responses": { "200": object(), "400": failure("limit out of range"), "503": failure("No checkpoint yet") }
            } },
            "/v1/overview": { "get": {
                "summary": "The memory's report at a checkpoint (what `memweave report --json` prints): documents, tokens, model tokens per corpus token, calls per task, tree shapes and depths, errors; made once per checkpoint",
                "parameters": [at],
                "responses": { "200": object(), "503": failure("No checkpoint yet, or the report could not be made") }
            } },
            "/mcp": { "post": {
                "summary": "The same as MCP tools (Model Context Protocol, streamable HTTP, stateless): ask, search, list_documents, document_tree, node, page, entity",
                "responses": { "200": { "description": "A JSON-RPC response" }, "401": failure("Missing or wrong bearer token") }
            } },
            "/": { "get": { "summary": "The web explorer (not served with --no-ui): asks and shows answers with their traces, the documents, trees, pages and graph, the report and earlier checkpoints, through this API", "responses": { "200": { "description": "An HTML page" } } } },
            "/healthz": { "get": { "summary": "Liveness", "responses": { "200": { "description": "ok" } } } },
            "/readyz": { "get": { "summary": "Readiness: the epoch served", "responses": { "200": json_body(json!({ "type": "object" })), "503": failure("No checkpoint yet") } } },
            "/metrics": { "get": { "summary": "Prometheus metrics", "responses": { "200": { "description": "Prometheus text format" } } } },
            "/openapi.json": { "get": { "summary": "This document", "responses": { "200": json_body(json!({ "type": "object" })) } } }
        },
        "components": { "schemas": {
            "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" } } },
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
                "text": { "type": "string" },
                "section": { "description": "The part of the document the passage starts in: a PDF page, the heading path above it, the mail message or dataset row; null for plain text.",
                    "oneOf": [{ "type": "null" }, { "$ref": "#/components/schemas/Section" }] }
            } },
            "Section": { "type": "object", "properties": {
                "start_char": { "type": "integer" },
                "kind": { "type": "string", "enum": ["page", "heading", "message", "row"] },
                "label": { "type": "string" }
            } },
            "Step": { "type": "object", "properties": {
                "step": { "type": "integer" }, "action": { "type": "string" }, "target": { "type": "string" },
                "depth": { "type": "integer" },
                "signal": { "description": "What chose the step: the model, the question's words (text) or vectors; null for a step that chooses nothing",
                    "oneOf": [{ "type": "null" }, { "type": "string", "enum": ["model", "text", "vectors"] }] },
                "level": { "type": ["integer", "null"] }, "score": { "type": "number" }, "reasoning": { "type": "string" },
                "calls": { "type": "array", "items": { "$ref": "#/components/schemas/ModelCall" } }
            } },
            "ModelCall": { "type": "object", "properties": {
                "task": { "type": "string" }, "tokens_in": { "type": "integer" }, "tokens_out": { "type": "integer" },
                "latency_ms": { "type": "integer" }, "cached": { "type": "boolean" }
            } }
        } }
    });
    let schemas = &mut document["components"]["schemas"];
    for (name, schema) in requests.take_definitions(true) {
        schemas[name] = schema;
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{
        DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, MAX_BUDGET, MAX_OPTION, MAX_QUESTION_CHARS,
        MAX_STEP_LIMIT, MAX_TOKEN_LIMIT,
    };

    /// Every `$ref` in `value`, wherever it is.
    fn references(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(reference)) = object.get("$ref") {
                    found.push(reference.clone());
                }
                object.values().for_each(|v| references(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| references(v, found)),
            _ => {}
        }
    }

    /// The request bodies' schemas are generated from the request types: the
    /// limits `validate` enforces are the ones documented, and every
    /// reference names a schema the document has.
    #[test]
    fn the_request_schemas_carry_the_limits_requests_are_held_to() {
        let document = openapi();
        let schemas = &document["components"]["schemas"];
        let ask = &schemas["AskRequest"];
        assert_eq!(
            ask["properties"]["question"]["maxLength"],
            MAX_QUESTION_CHARS
        );
        assert_eq!(ask["properties"]["budget"]["maximum"], MAX_BUDGET);
        assert_eq!(ask["properties"]["strategy"]["default"], "memwalker");
        assert_eq!(ask["additionalProperties"], false);
        let options = &schemas["AskOptions"]["properties"];
        for (option, most) in [
            ("top_k", MAX_OPTION),
            ("max_pages", MAX_OPTION),
            ("max_rounds", MAX_OPTION),
            ("max_tokens", MAX_TOKEN_LIMIT),
            ("max_steps", MAX_STEP_LIMIT),
        ] {
            assert_eq!(options[option]["minimum"], 1, "{option}");
            assert_eq!(options[option]["maximum"], most, "{option}");
        }
        assert_eq!(options["max_tokens"]["default"], DEFAULT_MAX_TOKENS);
        assert_eq!(options["max_steps"]["default"], DEFAULT_MAX_STEPS);
        let mut found = Vec::new();
        references(&document, &mut found);
        assert!(found.contains(&"#/components/schemas/SearchRequest".to_string()));
        for reference in found {
            let name = reference
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{reference} is outside the components"));
            assert!(schemas.get(name).is_some(), "{reference} names no schema");
        }
    }
}
