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

use axum::extract::{
    DefaultBodyLimit, FromRequest, FromRequestParts, RawPathParams, Request, State,
};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use memweave_analytics::metrics::prometheus;
use memweave_schemas::prometheus::{CONTENT_TYPE, Exposition, Kind, labels};
use schemars::JsonSchema;
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::reader::Reader;
use crate::request::{
    AskRequest, CheckpointsRequest, DocumentRequest, DocumentsRequest, EntitiesRequest,
    EntityRequest, MAX_BODY_BYTES, NodeRequest, OverviewRequest, PageRequest, PagesRequest,
    SearchRequest, SegmentRequest, TextRequest, TreeRequest,
};
use crate::service::{ApiError, ServiceState};
use crate::{mcp, ui};

/// The routes; only requests whose `Host` is one of `hosts` are answered
/// (the probes excepted), so a web page cannot reach the service through DNS
/// rebinding; with `explorer`, the web explorer at `/`. Every request has
/// the request timeout, and expensive ones share
/// [`crate::service::Limits::expensive_in_flight`] permits.
pub fn router(state: Arc<ServiceState>, hosts: mcp::AllowedHosts, explorer: bool) -> Router {
    let api = api_router()
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

/// Who the request is ([`crate::auth`]), put in its extensions for the
/// handlers: the administrator on an open service or with the bearer
/// token, a principal with a token the rules verify; 401 otherwise.
async fn authorise(
    State(state): State<Arc<ServiceState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let limits = &state.limits;
    let reader = if limits.auth_token.is_none() && limits.tokens.is_none() {
        Reader::Everything
    } else {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        // Constant time: how long a refusal takes tells nothing of the token.
        let administrator = limits.auth_token.as_ref().is_some_and(|token| {
            subtle::ConstantTimeEq::ct_eq(presented.as_bytes(), token.as_bytes()).into()
        });
        match (administrator, &limits.tokens) {
            (true, _) => Reader::Everything,
            (false, Some(rules)) if !presented.is_empty() => match rules.verify(presented) {
                Ok(principal) => principal,
                Err(refused) => return error(StatusCode::UNAUTHORIZED, &refused.to_string()),
            },
            _ => {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "this service needs Authorization: Bearer <token>: the --auth-token-file \
                     token, or a JSON Web Token its --jwt-hs256-secret-file or --jwks-file verifies",
                );
            }
        }
    };
    request.extensions_mut().insert(reader);
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

/// The API's routes, each named once: method and path, the request type
/// its path and query (GET) or JSON body (POST) are read into, the service
/// call that answers it, what it does, and the errors it may answer beside
/// those every route may ([`Operation`]). The router's routes and the
/// OpenAPI document's paths are both made from this list.
macro_rules! api_routes {
    ($($method:ident $path:literal => $call:ident($request:ty) $(-> $answer:literal)? $(via $handler:ident)?:
        $summary:literal $(, $status:literal $failure:literal)*;)*) => {
        fn api_router() -> Router<Arc<ServiceState>> {
            Router::new()$(.route($path, $method(api_routes!(@handler $call, $request $(, $handler)?))))*
        }

        /// Each route's path, method and OpenAPI operation.
        fn api_operations(generator: &mut SchemaGenerator) -> Vec<(&'static str, &'static str, Value)> {
            vec![$((
                $path,
                stringify!($method),
                Operation {
                    path: $path,
                    method: stringify!($method),
                    summary: $summary,
                    answer: [$($answer)?].first().copied(),
                    failures: &[$(($status, $failure)),*],
                }
                .document::<$request>(generator),
            )),*]
        }
    };
    (@handler $call:ident, $request:ty, $handler:ident) => { $handler };
    (@handler $call:ident, $request:ty) => {
        |State(state): State<Arc<ServiceState>>, Extension(reader): Extension<Reader>, Asked(request): Asked<$request>| async move {
            reply(state.$call(&reader, &request).await)
        }
    };
}

api_routes! {
    post "/v1/ask" => ask(AskRequest) -> "Answer" via ask_handler:
        "Answer a question with one navigation strategy: the answer, its trace and supporting passages",
        "400" "Invalid request: empty or too long question, unknown strategy or document, option out of range",
        "413" "Body over the size limit";
    post "/v1/search" => search(SearchRequest):
        "The passages BM25 or the dense baseline ranks highest for a query, with their scores; no model is asked",
        "400" "Invalid request", "413" "Body over the size limit";
    get "/v1/documents" => documents(DocumentsRequest):
        "The documents of the served checkpoint, a page at a time in id order: `next` is the `after` of the following page (null on the last); `total` counts them all",
        "400" "limit out of range";
    get "/v1/documents/{doc_id}" => document(DocumentRequest):
        "One document: title, source, tokens, version and the sections citations name",
        "404" "Unknown document";
    get "/v1/documents/{doc_id}/tree" => tree(TreeRequest):
        "A document's MemWalker (default) or RAPTOR tree (?tree=raptor), its top levels only with ?depth= (0: the root)",
        "400" "Unknown tree", "404" "Unknown document or node";
    get "/v1/documents/{doc_id}/pages/{page}" => page(PageRequest):
        "A ReadAgent page of a document (from 0): its text and its gist",
        "400" "Page not a number", "404" "Unknown document or page";
    get "/v1/documents/{doc_id}/text" => text(TextRequest):
        "A stretch of a document's text by character (what passages' start_char and end_char count), read from its pages",
        "400" "start and end out of order or too far apart", "404" "Unknown document";
    get "/v1/documents/{doc_id}/pages" => pages(PagesRequest):
        "A document's ReadAgent pages with their gists (not their texts), a stretch at a time; `total` counts them",
        "400" "limit out of range", "404" "Unknown document";
    get "/v1/entities" => entities(EntitiesRequest):
        "The graph's entities with a name or alias (normalised as the graph names them)",
        "400" "No name";
    get "/v1/segments/{seg_id}" => segment(SegmentRequest) -> "Passage":
        "One segment as a passage: its document, characters, section and text",
        "404" "Unknown segment";
    get "/v1/nodes/{node_id}" => node(NodeRequest):
        "One tree node",
        "404" "Unknown node";
    get "/v1/entities/{entity_id}" => entity(EntityRequest):
        "One graph entity with its first relations (id order) and source segments, and how many there are of each",
        "400" "limit out of range", "404" "Unknown entity";
    get "/v1/checkpoints" => checkpoints(CheckpointsRequest):
        "The checkpoints under the tables root, newest first, and the one served; `next` is the following page's `before`",
        "400" "limit out of range";
    get "/v1/overview" => overview(OverviewRequest):
        "The memory's report at a checkpoint (what `memweave report --json` prints): documents, tokens, model tokens per corpus token, calls per task, tree shapes and depths, errors; made once per checkpoint";
}

/// What a handler asked for: its request, read from the path and the query
/// of a GET (path parameters named as the request's fields), or from the
/// JSON body of a POST. One that does not parse is answered before the
/// handler runs, as bad input: 400 with a JSON error (413 and 415 as they
/// are).
struct Asked<T>(T);

impl<T: DeserializeOwned> FromRequest<Arc<ServiceState>> for Asked<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &Arc<ServiceState>) -> Result<Self, Response> {
        if request.method() != Method::GET {
            return match Json::<T>::from_request(request, state).await {
                Ok(Json(asked)) => Ok(Asked(asked)),
                Err(rejection) => Err(rejected(rejection.status(), &rejection.body_text())),
            };
        }
        let (mut parts, _) = request.into_parts();
        let path = RawPathParams::from_request_parts(&mut parts, state)
            .await
            .map_err(|rejection| rejected(rejection.status(), &rejection.body_text()))?;
        // The path's parameters as query pairs before the query's own: one
        // parser reads both, and a field given twice is refused.
        let mut pairs = form_urlencoded::Serializer::new(String::new());
        pairs.extend_pairs(&path);
        let mut query = pairs.finish();
        if let Some(own) = parts.uri.query().filter(|q| !q.is_empty()) {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str(own);
        }
        serde_urlencoded::from_str(&query).map(Asked).map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                &format!("Failed to deserialize query string: {e}"),
            )
        })
    }
}

/// A body, path or query axum could not parse: 400 (413 and 415 as they are).
fn rejected(status: StatusCode, text: &str) -> Response {
    let status = match status {
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE => status,
        _ => StatusCode::BAD_REQUEST,
    };
    error(status, text)
}

/// Questions are counted by strategy, and the ones that do not parse as
/// `invalid`.
async fn ask_handler(
    State(state): State<Arc<ServiceState>>,
    Extension(reader): Extension<Reader>,
    asked: Result<Asked<AskRequest>, Response>,
) -> Response {
    match asked {
        Ok(Asked(request)) => reply(state.ask(&reader, &request).await),
        Err(response) => {
            state.count("invalid", response.status(), 0.0);
            response
        }
    }
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
    async fn memory_report(&self, reader: &Reader, epoch: Option<u64>) -> String {
        let Some(epoch) = epoch else {
            return String::new();
        };
        // A principal's figures are its own rows' ([`ServiceState::report`]).
        if let Reader::Groups(_) = reader {
            return self.report_gauges(reader, epoch).await;
        }
        // One scrape makes it; scrapes meanwhile wait for it.
        let mut report = self.memory_report.lock().await;
        let stale = report
            .as_ref()
            .is_none_or(|(made, at, _)| *made != epoch && at.elapsed() >= REPORT_EVERY);
        if stale {
            let text = self.report_gauges(reader, epoch).await;
            *report = Some((epoch, Instant::now(), text));
        }
        report
            .as_ref()
            .map_or_else(String::new, |(_, _, text)| text.clone())
    }

    /// `reader`'s report at `epoch` as Prometheus text; none if it failed.
    async fn report_gauges(&self, reader: &Reader, epoch: u64) -> String {
        match self.report(reader, epoch).await {
            Ok(made) => prometheus(&made),
            Err(e) => {
                tracing::warn!(error = %e, "the memory's report failed");
                String::new()
            }
        }
    }
}

async fn metrics_handler(
    State(state): State<Arc<ServiceState>>,
    Extension(reader): Extension<Reader>,
) -> Response {
    let epoch = state.epoch().await;
    let memory = state.memory_report(&reader, epoch).await;
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

/// The routes served beside the API's, and what they answer: made by hand
/// in [`router`], so listed here by hand.
const SERVICE_ROUTES: [(&str, &str, &str, &str); 6] = [
    (
        "/mcp",
        "post",
        "The same as MCP tools (Model Context Protocol, streamable HTTP, stateless): ask, search, list_documents, document_tree, node, page, entity",
        "A JSON-RPC response",
    ),
    (
        "/",
        "get",
        "The web explorer (not served with --no-ui): asks and shows answers with their traces, the documents, trees, pages and graph, the report and earlier checkpoints, through this API",
        "An HTML page",
    ),
    ("/healthz", "get", "Liveness", "ok"),
    (
        "/readyz",
        "get",
        "Readiness: the epoch served (503 before the first checkpoint)",
        "The epoch, as JSON",
    ),
    (
        "/metrics",
        "get",
        "Prometheus metrics (behind the bearer token when one is set)",
        "Prometheus text format",
    ),
    (
        "/openapi.json",
        "get",
        "This document",
        "This document, as JSON",
    ),
];

/// What any API route may answer beside its own errors.
const EVERY_ROUTE_FAILS: [(&str, &str); 5] = [
    ("401", "Missing or wrong bearer token"),
    ("403", "A Host the service does not answer"),
    (
        "429",
        "Too many expensive requests at once (questions, searches, the overview, earlier epochs); Retry-After says when to come back",
    ),
    ("503", "No checkpoint committed yet"),
    ("504", "No answer within the request time limit"),
];

/// One API route as the OpenAPI document describes it.
struct Operation {
    path: &'static str,
    method: &'static str,
    summary: &'static str,
    /// The component schema of what it answers (else an object).
    answer: Option<&'static str>,
    failures: &'static [(&'static str, &'static str)],
}

impl Operation {
    /// The operation, its request type `T` read as [`Asked`] reads it: each
    /// field a path parameter (named in the path) or a query parameter of a
    /// GET, with its description and limits; the JSON body of a POST.
    fn document<T: JsonSchema>(&self, generator: &mut SchemaGenerator) -> Value {
        let reference = generator.subschema_for::<T>();
        let mut operation = json!({ "summary": self.summary });
        if self.method == "get" {
            let fields = generator.definitions()[T::schema_name().as_ref()].clone();
            let required = fields["required"].as_array().cloned().unwrap_or_default();
            let parameters: Vec<Value> = (fields["properties"].as_object().into_iter().flatten())
                .map(|(name, schema)| {
                    let in_path = self.path.contains(&format!("{{{name}}}"));
                    let mut schema = schema.clone();
                    let description = schema.as_object_mut().and_then(|s| s.remove("description"));
                    json!({
                        "name": name,
                        "in": if in_path { "path" } else { "query" },
                        "required": in_path || required.contains(&json!(name)),
                        "description": description,
                        "schema": schema,
                    })
                })
                .collect();
            operation["parameters"] = Value::Array(parameters);
        } else {
            operation["requestBody"] = json!({ "required": true, "content": { "application/json": { "schema": reference } } });
        }
        let answer = self.answer.map_or_else(
            || json!({ "type": "object" }),
            |name| json!({ "$ref": format!("#/components/schemas/{name}") }),
        );
        let mut responses = json!({ "200": { "description": "The result", "content": { "application/json": { "schema": answer } } } });
        for (status, description) in self.failures.iter().chain(&EVERY_ROUTE_FAILS) {
            responses[*status] = json!({ "description": description, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
        }
        operation["responses"] = responses;
        operation
    }
}

/// The OpenAPI 3.1 description of every route: the API's made from
/// [`api_routes!`]'s list and the request types (their limits with them,
/// as the MCP tools' schemas are), the service's from [`SERVICE_ROUTES`].
pub fn openapi() -> Value {
    let mut generator = SchemaGenerator::new(SchemaSettings::draft2020_12().with(|settings| {
        settings.definitions_path = "/components/schemas".into();
    }));
    let mut paths = serde_json::Map::new();
    for (path, method, operation) in api_operations(&mut generator) {
        paths.entry(path).or_insert_with(|| json!({}))[method] = operation;
    }
    for (path, method, summary, answer) in SERVICE_ROUTES {
        let operation =
            json!({ "summary": summary, "responses": { "200": { "description": answer } } });
        paths.entry(path).or_insert_with(|| json!({}))[method] = operation;
    }
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "memweave query service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Answers questions over memweave memory tables with the navigators of MemWalker, ReadAgent, QRMeM, RAPTOR and ILM-TR; every answer carries its trace and supporting passages."
        },
        "paths": paths,
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
    for (name, schema) in generator.take_definitions(true) {
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

    /// A GET route's parameters are its request type's fields, each a path
    /// parameter where the path names it: every name in a path is a field
    /// (else the request could never be read), and the fields' limits and
    /// descriptions are the parameters'.
    #[test]
    fn get_parameters_are_the_request_types_fields() {
        let document = openapi();
        for (path, operations) in document["paths"].as_object().unwrap() {
            let Some(get) = operations.get("get") else {
                continue;
            };
            let parameters = get["parameters"].as_array().cloned().unwrap_or_default();
            for name in path.split('{').skip(1).map(|s| &s[..s.find('}').unwrap()]) {
                let parameter = parameters.iter().find(|p| p["name"] == name);
                let parameter = parameter.unwrap_or_else(|| panic!("{path}: no field {name}"));
                assert_eq!(
                    (&parameter["in"], &parameter["required"]),
                    (&json!("path"), &json!(true))
                );
            }
        }
        let tree = &document["paths"]["/v1/documents/{doc_id}/tree"]["get"]["parameters"];
        let names: Vec<&str> = tree
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["depth", "doc_id", "epoch", "tree", "under"]);
        let documents = &document["paths"]["/v1/documents"]["get"]["parameters"];
        let limit = documents
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(
            limit["schema"]["maximum"],
            crate::request::MAX_DOCUMENTS_PAGE
        );
        assert_eq!(limit["in"], "query");
        assert!(
            limit["description"]
                .as_str()
                .unwrap()
                .contains("Documents on the page")
        );
        let epoch = documents
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "epoch")
            .unwrap();
        assert_eq!(epoch["schema"]["minimum"], 1);
    }
}
