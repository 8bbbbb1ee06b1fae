//! What every transport serves: the newest snapshot, the models navigators
//! ask, and one operation per thing a client may ask for (an answer, a
//! search, the documents, a tree, a node, a page, an entity), each with the
//! errors it answers with. The HTTP API (`http`) and the MCP tools (`mcp`)
//! are thin over these, so both say the same things in the same words.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use memweave_analytics::catalog::{Catalog, kept_checkpoints};
use memweave_analytics::report::{Report, report};
use memweave_operators::embed::Embedder;
use memweave_operators::model::MemoryModel;
use memweave_schemas::{CheckpointRow, EntityRow, SegmentRow, StoreError, TableStore, TreeNodeRow};
use serde_json::{Value, json};
use tokio::sync::RwLock;

use crate::auth::TokenRules;
use crate::cache::ReadCache;
use crate::navigate::{Answer, Hit, Models, SearchError, ask, search, segment_passages};
use crate::reader::Reader;
use crate::request::{
    AskRequest, CheckpointsRequest, DocumentRequest, DocumentsRequest, EntitiesRequest,
    EntityRequest, NodeRequest, OverviewRequest, PageRequest, PagesRequest, RequestError,
    SearchRequest, SegmentRequest, TextRequest, TreeRequest,
};
use crate::snapshot::{Document, Snapshot};

/// Limits every request runs under.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall time one request may take, model calls included.
    pub request_timeout: Duration,
    /// When set, `/v1/*`, `/mcp` and `/metrics` need `Authorization: Bearer
    /// <token>` (the administrator's) or a JSON Web Token `tokens` verifies.
    pub auth_token: Option<String>,
    /// How principals' JSON Web Tokens are verified, when they are taken.
    pub tokens: Option<Arc<TokenRules>>,
    /// Expensive requests (ask, search, the overview, MCP calls, anything at
    /// an earlier epoch) served at once; more are answered 429.
    pub expensive_in_flight: usize,
}

/// Expensive requests at once unless told otherwise: enough to keep a GPU
/// pool busy, few enough that a flood of questions cannot exhaust a replica.
pub const DEFAULT_EXPENSIVE_IN_FLIGHT: usize = 64;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_timeout: Duration::from_secs(120),
            auth_token: None,
            tokens: None,
            expensive_in_flight: DEFAULT_EXPENSIVE_IN_FLIGHT,
        }
    }
}

/// Why a request got no result: what an HTTP status and an MCP tool error
/// both say.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request asks for something it may not: what to change.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("no checkpoint has been committed under the tables root yet")]
    NotReady,
    /// A read of the memory tables failed (storage down, a version vacuumed
    /// away): the request may succeed on retry or on another replica.
    #[error("the memory tables could not be read: {0}")]
    Unreadable(StoreError),
    /// The embedder could not embed a search's query.
    #[error("{0}")]
    Unavailable(String),
    #[error("no answer within {0} s (--request-timeout-secs)")]
    TimedOut(u64),
    /// As many expensive requests as allowed are in flight.
    #[error("too many requests in flight (--max-expensive-requests); retry shortly")]
    Busy,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::NotReady | ApiError::Unreadable(_) | ApiError::Unavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Busy => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(failure: StoreError) -> Self {
        tracing::warn!(error = %failure, "reading the memory tables failed");
        ApiError::Unreadable(failure)
    }
}

impl From<RequestError> for ApiError {
    fn from(wrong: RequestError) -> Self {
        ApiError::Invalid(wrong.to_string())
    }
}

impl From<SearchError> for ApiError {
    fn from(failure: SearchError) -> Self {
        match failure {
            SearchError::Store(store) => store.into(),
            SearchError::Embed(_) => ApiError::Unavailable(failure.to_string()),
            SearchError::OtherEmbedder(wrong) => ApiError::Invalid(wrong),
        }
    }
}

type Served<T = Value> = Result<T, ApiError>;

/// What every request handler shares: where the tables are, the newest snapshot,
/// the models navigators ask, and the request counters.
#[derive(Debug)]
pub struct ServiceState {
    pub(crate) store: TableStore,
    pub(crate) cache: Arc<ReadCache>,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    model: Arc<dyn MemoryModel>,
    embedder: Arc<dyn Embedder>,
    pub(crate) limits: Limits,
    pub(crate) metrics: Mutex<Metrics>,
    /// The memory's report as Prometheus gauges, and the epoch and time it
    /// was made at (`http`'s `/metrics`).
    pub(crate) memory_report: tokio::sync::Mutex<Option<(u64, Instant, String)>>,
    /// Snapshots of earlier checkpoints a request asked for, the most
    /// recently asked last: time travel opens a checkpoint once.
    earlier: tokio::sync::Mutex<Vec<Arc<Snapshot>>>,
    /// The reports made or being made, by epoch and reader, the most recently asked
    /// last ([`ServiceState::report`]).
    reports: Mutex<Vec<((u64, Reader), ReportCell)>>,
    /// Permits for expensive requests ([`Limits::expensive_in_flight`]).
    pub(crate) expensive: tokio::sync::Semaphore,
}

/// One epoch's report, made once by whichever request asks first.
type ReportCell = Arc<tokio::sync::OnceCell<Arc<Report>>>;

/// Earlier checkpoints' snapshots kept open, and reports kept.
const EARLIER_KEPT: usize = 4;
const REPORTS_KEPT: usize = 16;

/// Answers by strategy and status, and the seconds they took.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) answers: BTreeMap<(&'static str, u16), u64>,
    pub(crate) seconds: BTreeMap<&'static str, f64>,
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
            metrics: Mutex::new(Metrics::default()),
            memory_report: tokio::sync::Mutex::new(None),
            earlier: tokio::sync::Mutex::new(Vec::new()),
            reports: Mutex::new(Vec::new()),
            expensive: tokio::sync::Semaphore::new(limits.expensive_in_flight.max(1)),
            limits,
        })
    }

    /// Loads the newest checkpoint if it is newer than the one served; returns the
    /// epoch now served.
    pub async fn refresh(&self) -> Result<Option<u64>, StoreError> {
        let served = self.epoch().await;
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

    /// The checkpoint epoch served, if any.
    pub async fn epoch(&self) -> Option<u64> {
        self.snapshot.read().await.as_ref().map(|s| s.epoch)
    }

    pub(crate) fn count(&self, strategy: &'static str, status: StatusCode, seconds: f64) {
        let mut metrics = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
        *metrics
            .answers
            .entry((strategy, status.as_u16()))
            .or_default() += 1;
        *metrics.seconds.entry(strategy).or_default() += seconds;
    }

    async fn served(&self) -> Served<Arc<Snapshot>> {
        self.snapshot.read().await.clone().ok_or(ApiError::NotReady)
    }

    /// The snapshot at `epoch` (the newest served without one) as `reader`
    /// reads it.
    async fn at(&self, reader: &Reader, epoch: Option<u64>) -> Served<Arc<Snapshot>> {
        let snapshot = self.opened(epoch).await?;
        Ok(match reader {
            Reader::Everything => snapshot,
            Reader::Groups(_) => Arc::new(snapshot.read_as(reader.clone())),
        })
    }

    /// The snapshot at `epoch`, or the newest served without one. An earlier
    /// checkpoint is opened at the table versions it names (while the tables
    /// keep them) and kept open for the next requests that ask for it.
    async fn opened(&self, epoch: Option<u64>) -> Served<Arc<Snapshot>> {
        let newest = self.served().await?;
        let Some(epoch) = epoch.filter(|e| *e != newest.epoch) else {
            return Ok(newest);
        };
        // One opening at a time: requests for the same epoch wait for it.
        let mut earlier = self.earlier.lock().await;
        if let Some(at) = earlier.iter().position(|s| s.epoch == epoch) {
            let snapshot = earlier.remove(at);
            earlier.push(snapshot.clone());
            return Ok(snapshot);
        }
        let checkpoints: Vec<CheckpointRow> = self.store.read_rows(None).await?;
        let Some(checkpoint) = checkpoints.iter().find(|c| c.epoch == epoch) else {
            let epochs = || checkpoints.iter().map(|c| c.epoch);
            let (oldest, newest) = (epochs().min().unwrap_or(1), epochs().max().unwrap_or(0));
            return Err(ApiError::NotFound(format!(
                "no checkpoint {epoch}: {}",
                kept_checkpoints(oldest, newest)
            )));
        };
        let snapshot = Arc::new(Snapshot::load(&self.store, checkpoint, self.cache.clone()).await?);
        if earlier.len() == EARLIER_KEPT {
            earlier.remove(0);
        }
        earlier.push(snapshot.clone());
        Ok(snapshot)
    }

    /// The memory's report at `epoch` as `reader` reads it: made once per
    /// epoch and reader (it aggregates whole tables: seconds at 100M tokens)
    /// and kept for the next asks. No lock is held while it is made: a
    /// report never waits for another's (an old epoch's overview does not
    /// hold up `/metrics`).
    pub(crate) async fn report(&self, reader: &Reader, epoch: u64) -> Served<Arc<Report>> {
        let cell = {
            let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
            let asked = |(e, r): &(u64, Reader)| *e == epoch && r == reader;
            let cell = match reports.iter().position(|(made, _)| asked(made)) {
                Some(at) => reports.remove(at).1,
                None => ReportCell::default(),
            };
            if reports.len() == REPORTS_KEPT {
                reports.remove(0);
            }
            reports.push(((epoch, reader.clone()), cell.clone()));
            cell
        };
        let failed = |e: &dyn std::fmt::Display| {
            ApiError::Unavailable(format!("the memory's report failed: {e}"))
        };
        let groups = reader.group_names();
        let made = cell
            .get_or_try_init(|| async {
                let catalog = Catalog::open_as(self.store.clone(), Some(epoch), groups)
                    .await
                    .map_err(|e| failed(&e))?;
                Ok::<_, ApiError>(Arc::new(report(&catalog).await.map_err(|e| failed(&e))?))
            })
            .await?;
        Ok(made.clone())
    }

    fn models(&self) -> Models<'_> {
        Models {
            model: &*self.model,
            embedder: &*self.embedder,
        }
    }

    /// `request` answered from one snapshot within the time limit; counted by
    /// strategy and status.
    pub async fn ask(&self, reader: &Reader, request: &AskRequest) -> Served<Answer> {
        let started = Instant::now();
        let answered = self.answer(reader, request).await;
        let status = answered
            .as_ref()
            .map_or_else(ApiError::status, |_| StatusCode::OK);
        self.count(
            request.strategy.name(),
            status,
            started.elapsed().as_secs_f64(),
        );
        answered
    }

    async fn answer(&self, reader: &Reader, request: &AskRequest) -> Served<Answer> {
        let snapshot = self.at(reader, request.epoch).await?;
        snapshot.validate(request).await??;
        let timeout = self.limits.request_timeout;
        match tokio::time::timeout(timeout, ask(&snapshot, request, self.models())).await {
            Ok(answered) => Ok(answered?),
            Err(_) => Err(ApiError::TimedOut(timeout.as_secs())),
        }
    }

    /// The passages `request`'s method ranks highest, with their scores.
    pub async fn search(&self, reader: &Reader, request: &SearchRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        let asked = request.as_ask();
        snapshot.validate(&asked).await??;
        let hits: Vec<Hit> = search(&snapshot, &asked, self.models()).await?;
        Ok(json!({ "epoch": snapshot.epoch, "method": request.method, "passages": hits }))
    }

    /// A page of the documents, in id order.
    pub async fn documents(&self, reader: &Reader, request: &DocumentsRequest) -> Served {
        let limit = request.page_size()?;
        let snapshot = self.at(reader, request.epoch).await?;
        let page = snapshot
            .documents_page(request.after.as_deref(), limit, request.q.as_deref())
            .await?;
        Ok(json!({
            "epoch": snapshot.epoch,
            "total": page.total,
            "documents": page.documents,
            "next": page.next,
        }))
    }

    /// A document's tree, its top `depth` levels below the root.
    pub async fn tree(&self, reader: &Reader, request: &TreeRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        known_document(&snapshot, &request.doc_id).await?;
        let nodes = snapshot.tree(&request.doc_id, request.tree.name()).await?;
        let top = nodes.iter().map(|n| n.level).max().unwrap_or(0);
        let lowest = request.depth.map_or(0, |depth| top.saturating_sub(depth));
        let nodes: Vec<Value> = match &request.under {
            Some(parent) => {
                let Some(parent) = nodes.iter().find(|n| &n.node_id == parent) else {
                    return Err(ApiError::NotFound(format!(
                        "the {} tree of {:?} has no node {parent:?}",
                        request.tree.name(),
                        request.doc_id
                    )));
                };
                let by_id: HashMap<&str, &TreeNodeRow> =
                    nodes.iter().map(|n| (n.node_id.as_str(), &**n)).collect();
                parent
                    .child_ids
                    .iter()
                    .filter_map(|id| by_id.get(id.as_str()))
                    .map(|n| node_json(n))
                    .collect()
            }
            None => nodes
                .iter()
                .filter(|n| n.level >= lowest)
                .map(|n| node_json(n))
                .collect(),
        };
        Ok(json!({ "doc_id": request.doc_id, "tree": request.tree, "nodes": nodes }))
    }

    pub async fn node(&self, reader: &Reader, request: &NodeRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        match snapshot.row::<TreeNodeRow>(&request.node_id).await? {
            Some(node) => Ok(node_json(&node)),
            None => Err(ApiError::NotFound(format!(
                "unknown node {:?}",
                request.node_id
            ))),
        }
    }

    /// A ReadAgent page of a document: its text and its gist.
    pub async fn page(&self, reader: &Reader, request: &PageRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        let document = known_document(&snapshot, &request.doc_id).await?;
        let pages = snapshot.pages_of(&request.doc_id).await?;
        let Some(found) = pages.iter().find(|p| p.row.ordinal == request.page) else {
            return Err(ApiError::NotFound(format!(
                "document {:?} has no page {}; it has {} (0 to {})",
                request.doc_id,
                request.page,
                pages.len(),
                pages.len().saturating_sub(1)
            )));
        };
        let page = &found.row;
        Ok(json!({
            "doc_id": page.doc_id, "title": document.title, "page": page.ordinal,
            "pages": pages.len(), "page_id": page.page_id, "start_char": page.start_char,
            "end_char": page.end_char, "gist": found.gist(), "text": found.text,
        }))
    }

    /// An entity, its first relations (in id order) and its first source
    /// segments as passages, with how many there are of each.
    pub async fn entity(&self, reader: &Reader, request: &EntityRequest) -> Served {
        let limit = request.list_size()?;
        let snapshot = self.at(reader, request.epoch).await?;
        let id = &request.entity_id;
        let Some(entity) = snapshot.row::<EntityRow>(id).await? else {
            return Err(ApiError::NotFound(format!("unknown entity {id:?}")));
        };
        let offset = request.offset.unwrap_or(0);
        let seg_ids: Vec<String> = entity
            .seg_ids
            .iter()
            .skip(offset)
            .take(limit)
            .cloned()
            .collect();
        let sources = async {
            let segments = snapshot.rows::<SegmentRow>(&seg_ids).await?;
            segment_passages(&snapshot, &segments).await
        };
        let ((relations, relations_total), sources) =
            futures::try_join!(snapshot.relations_page(id, offset, limit), sources)?;
        // The other end of each relation listed, named: what a graph draws.
        let mut ends: Vec<String> = relations
            .iter()
            .flat_map(|r| [r.source_id.clone(), r.target_id.clone()])
            .filter(|end| end != id)
            .collect();
        ends.sort();
        ends.dedup();
        let neighbours: Vec<Value> = snapshot
            .rows::<EntityRow>(&ends)
            .await?
            .iter()
            .map(|e| json!({ "entity_id": e.entity_id, "name": e.name, "type": e.entity_type }))
            .collect();
        Ok(json!({
            "entity_id": entity.entity_id, "name": entity.name, "type": entity.entity_type,
            "aliases": entity.aliases, "description": entity.description,
            "offset": offset, "relations": relations, "relations_total": relations_total,
            "neighbours": neighbours,
            "segments": sources, "segments_total": entity.seg_ids.len(),
        }))
    }
}

impl ServiceState {
    /// One document: its title, source, size and sections.
    pub async fn document(&self, reader: &Reader, request: &DocumentRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        let document = known_document(&snapshot, &request.doc_id).await?;
        Ok(json!(*document))
    }

    /// One segment as a passage: its document, its characters, its text.
    pub async fn segment(&self, reader: &Reader, request: &SegmentRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        let Some(segment) = snapshot.row::<SegmentRow>(&request.seg_id).await? else {
            return Err(ApiError::NotFound(format!(
                "unknown segment {:?}",
                request.seg_id
            )));
        };
        let passages = segment_passages(&snapshot, &[segment]).await?;
        Ok(json!(passages.first()))
    }

    /// The entities with a name or alias, in id order.
    pub async fn entities(&self, reader: &Reader, request: &EntitiesRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        let found: Vec<Value> = snapshot
            .entities_named(&request.name)
            .await?
            .iter()
            .map(|e| {
                json!({
                    "entity_id": e.entity_id, "name": e.name, "type": e.entity_type,
                    "aliases": e.aliases, "description": e.description,
                    "segments_total": e.seg_ids.len(),
                })
            })
            .collect();
        Ok(json!({ "epoch": snapshot.epoch, "name": request.name, "entities": found }))
    }

    /// A document's pages with their gists, a stretch at a time.
    pub async fn pages(&self, reader: &Reader, request: &PagesRequest) -> Served {
        let limit = request.list_size()?;
        let snapshot = self.at(reader, request.epoch).await?;
        known_document(&snapshot, &request.doc_id).await?;
        let pages = snapshot.pages_of(&request.doc_id).await?;
        let from = request.from.unwrap_or(0) as usize;
        let listed: Vec<Value> = pages
            .iter()
            .skip(from)
            .take(limit)
            .map(|page| {
                let p = &page.row;
                json!({
                    "page": p.ordinal, "page_id": p.page_id, "start_char": p.start_char,
                    "end_char": p.end_char, "gist": page.gist(),
                })
            })
            .collect();
        Ok(json!({ "doc_id": request.doc_id, "total": pages.len(), "from": from, "pages": listed }))
    }

    /// A stretch of a document's text by character.
    pub async fn text(&self, reader: &Reader, request: &TextRequest) -> Served {
        let chars = request.range()?;
        let snapshot = self.at(reader, request.epoch).await?;
        let document = known_document(&snapshot, &request.doc_id).await?;
        let Some((start, text)) = snapshot.text_of(&request.doc_id, chars).await? else {
            return Err(ApiError::NotFound(format!(
                "unknown document {:?}",
                request.doc_id
            )));
        };
        let end = start + text.chars().count() as u64;
        Ok(json!({
            "doc_id": document.doc_id, "title": document.title, "source_uri": document.source_uri,
            "start_char": start, "end_char": end, "text": text,
            "sections": document.sections,
        }))
    }

    /// The checkpoints under the tables root, newest first, a page at a time;
    /// which one is served.
    ///
    /// The same for every reader: a commit's time and epoch say that the
    /// memory changed, not what changed.
    pub async fn checkpoints(&self, _reader: &Reader, request: &CheckpointsRequest) -> Served {
        let limit = request.page_size()?;
        let served = self.served().await?.epoch;
        let mut checkpoints: Vec<CheckpointRow> = self.store.read_rows(None).await?;
        checkpoints.retain(|c| request.before.is_none_or(|before| c.epoch < before));
        checkpoints.sort_by_key(|c| std::cmp::Reverse(c.epoch));
        let more = checkpoints.len() > limit;
        checkpoints.truncate(limit);
        let next = more.then(|| checkpoints.last().map(|c| c.epoch)).flatten();
        let listed: Vec<Value> = checkpoints
            .iter()
            .map(|c| json!({ "epoch": c.epoch, "created_at_micros": c.created_at }))
            .collect();
        Ok(json!({ "served": served, "checkpoints": listed, "next": next }))
    }

    /// The memory's report (documents, tokens, model cost, calls per task,
    /// tree shapes, errors) at a checkpoint.
    pub async fn overview(&self, reader: &Reader, request: &OverviewRequest) -> Served {
        let snapshot = self.at(reader, request.epoch).await?;
        let report = self.report(reader, snapshot.epoch).await?;
        Ok(json!(*report))
    }
}

/// The document `doc_id`, or why not.
async fn known_document(snapshot: &Snapshot, doc_id: &str) -> Served<Arc<Document>> {
    snapshot
        .row::<Document>(doc_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown document {doc_id:?}")))
}

fn node_json(node: &TreeNodeRow) -> Value {
    json!({
        "node_id": node.node_id, "tree": node.tree, "doc_id": node.doc_id,
        "level": node.level, "ordinal": node.ordinal, "parent_id": node.parent_id,
        "child_ids": node.child_ids, "seg_id": node.seg_id, "summary": node.text(),
        "surprise": node.surprise, "n_tokens": node.n_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::navigate::fixture::{HUB_RELATIONS, HUB_SEGMENTS, cited, served_with_hub};
    use crate::request::SearchMethod;

    fn ids<'a>(listed: &'a Value, key: &str) -> Vec<&'a str> {
        listed
            .as_array()
            .expect("a list")
            .iter()
            .map(|v| v[key].as_str().expect("an id"))
            .collect()
    }

    #[tokio::test]
    async fn nothing_is_served_before_the_first_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let (model, embedder) = crate::navigate::fixture::models();
        let state = ServiceState::new(
            store,
            Arc::new(ReadCache::new(1)),
            Arc::new(model),
            Arc::new(embedder),
            Limits::default(),
        );
        assert_eq!(state.refresh().await.unwrap(), None);
        let asked = AskRequest {
            question: "Why?".into(),
            strategy: Default::default(),
            documents: None,
            budget: None,
            options: Default::default(),
            epoch: None,
        };
        let refused = state.ask(&Reader::Everything, &asked).await.unwrap_err();
        assert!(matches!(refused, ApiError::NotReady), "{refused}");
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        let counted = state.metrics.lock().unwrap().answers.clone();
        assert_eq!(counted.get(&("memwalker", 503)), Some(&1));
    }

    /// A search is its baseline's ranking: the passages the strategy's
    /// answer cites, in its order, with their scores best first.
    #[tokio::test]
    async fn a_search_ranks_as_its_baseline_answers() {
        let (state, _dir) = served_with_hub().await;
        for method in [SearchMethod::Bm25, SearchMethod::Dense] {
            let request = SearchRequest {
                query: "murals of lighthouses painted by the guild".into(),
                method,
                top_k: Some(3),
                documents: None,
                epoch: None,
            };
            let found = state.search(&Reader::Everything, &request).await.unwrap();
            let answer = state
                .ask(&Reader::Everything, &request.as_ask())
                .await
                .unwrap();
            let hits = &found["passages"];
            assert_eq!(ids(hits, "from_id"), cited(&answer), "{method:?}");
            assert_eq!(hits.as_array().unwrap().len(), 3);
            let scores: Vec<f64> = hits
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["score"].as_f64().unwrap())
                .collect();
            assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
            assert!(scores[0] > 0.0);
        }
        let empty = SearchRequest {
            query: " ".into(),
            method: SearchMethod::Bm25,
            top_k: None,
            documents: None,
            epoch: None,
        };
        let refused = state.search(&Reader::Everything, &empty).await.unwrap_err();
        assert_eq!(refused.to_string(), "question is empty");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }

    /// A hub lists its first relations (id order) and source segments, with
    /// how many it has of each.
    #[tokio::test]
    async fn an_entity_lists_its_first_relations_and_sources_with_their_totals() {
        let (state, _dir) = served_with_hub().await;
        let request = EntityRequest {
            entity_id: "e-guild".into(),
            limit: Some(3),
            offset: None,
            epoch: None,
        };
        let entity = state.entity(&Reader::Everything, &request).await.unwrap();
        assert_eq!(entity["name"], "Harbour Guild");
        assert_eq!(
            ids(&entity["relations"], "relation_id"),
            ["r-guild-000", "r-guild-001", "r-guild-002"]
        );
        assert_eq!(entity["relations_total"], HUB_RELATIONS);
        assert_eq!(
            ids(&entity["segments"], "from_id"),
            ["s-h000", "s-h001", "s-h002"]
        );
        assert_eq!(entity["segments"][0]["title"], "HUB");
        assert_eq!(entity["segments_total"], HUB_SEGMENTS);
        assert_eq!(ids(&entity["neighbours"], "entity_id"), ["e-studio"]);
        // The next page of a hub: what a graph shows when asked for more.
        let next = EntityRequest {
            offset: Some(3),
            ..request.clone()
        };
        let next = state.entity(&Reader::Everything, &next).await.unwrap();
        assert_eq!(
            ids(&next["relations"], "relation_id"),
            ["r-guild-003", "r-guild-004", "r-guild-005"]
        );
        assert_eq!(
            ids(&next["segments"], "from_id"),
            ["s-h003", "s-h004", "s-h005"]
        );
        for (limit, refused) in [(Some(0), "limit must be 1 to 1000, not 0")] {
            let asked = EntityRequest {
                limit,
                ..request.clone()
            };
            assert_eq!(
                state
                    .entity(&Reader::Everything, &asked)
                    .await
                    .unwrap_err()
                    .to_string(),
                refused
            );
        }
        let unknown = EntityRequest {
            entity_id: "e-none".into(),
            ..request.clone()
        };
        let missing = state
            .entity(&Reader::Everything, &unknown)
            .await
            .unwrap_err();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_tree_to_a_depth_keeps_its_top_levels_and_a_page_its_gist() {
        let (state, _dir) = served_with_hub().await;
        let whole = TreeRequest {
            doc_id: "paint".into(),
            tree: Default::default(),
            depth: None,
            under: None,
            epoch: None,
        };
        let all = state.tree(&Reader::Everything, &whole).await.unwrap();
        let root = state
            .tree(
                &Reader::Everything,
                &TreeRequest {
                    depth: Some(0),
                    ..whole.clone()
                },
            )
            .await
            .unwrap();
        let root_nodes = root["nodes"].as_array().unwrap();
        assert_eq!(root_nodes.len(), 1);
        assert!(all["nodes"].as_array().unwrap().len() > 1);
        assert!(root_nodes[0]["parent_id"].is_null());
        // Expanding the root lists its children, in its order.
        let children = state
            .tree(
                &Reader::Everything,
                &TreeRequest {
                    under: root_nodes[0]["node_id"].as_str().map(String::from),
                    ..whole.clone()
                },
            )
            .await
            .unwrap();
        let listed: Vec<&Value> = children["nodes"].as_array().unwrap().iter().collect();
        assert_eq!(
            listed.iter().map(|n| &n["node_id"]).collect::<Vec<_>>(),
            root_nodes[0]["child_ids"]
                .as_array()
                .unwrap()
                .iter()
                .collect::<Vec<_>>()
        );
        assert!(
            listed
                .iter()
                .all(|n| n["parent_id"] == root_nodes[0]["node_id"])
        );
        let page = state
            .page(
                &Reader::Everything,
                &PageRequest {
                    doc_id: "paint".into(),
                    page: 1,
                    epoch: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(page["pages"], 2);
        assert_eq!(page["title"], "PAINT");
        let snapshot = state.served().await.unwrap();
        let stored = &snapshot.pages_of("paint").await.unwrap()[1];
        assert_eq!(
            (page["text"].as_str(), page["gist"].as_str()),
            (Some(stored.text.as_str()), Some(stored.gist()))
        );
        let past = PageRequest {
            doc_id: "paint".into(),
            page: 2,
            epoch: None,
        };
        let missing = state.page(&Reader::Everything, &past).await.unwrap_err();
        assert_eq!(
            missing.to_string(),
            "document \"paint\" has no page 2; it has 2 (0 to 1)"
        );
    }
}
