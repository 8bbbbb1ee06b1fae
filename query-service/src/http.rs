//! The HTTP API: `POST /v1/ask`, `GET /healthz`, `GET /readyz`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use memweave_operators::model::MemoryModel;
use memweave_schemas::TableStore;
use tokio::sync::RwLock;

use crate::navigate::{AskRequest, ask};
use crate::snapshot::Snapshot;

/// What every request handler shares: where the tables are, the newest snapshot,
/// and the model navigators ask.
#[derive(Debug)]
pub struct ServiceState {
    store: TableStore,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    model: Arc<dyn MemoryModel>,
}

impl ServiceState {
    pub fn new(store: TableStore, model: Arc<dyn MemoryModel>) -> Arc<Self> {
        Arc::new(ServiceState {
            store,
            snapshot: RwLock::new(None),
            model,
        })
    }

    /// Loads the newest checkpoint if it is newer than the one served; returns the
    /// epoch now served.
    pub async fn refresh(&self) -> Result<Option<u64>, memweave_schemas::StoreError> {
        let served = self.snapshot.read().await.as_ref().map(|s| s.epoch);
        let Some(checkpoint) = self.store.latest_checkpoint().await? else {
            return Ok(served);
        };
        if served == Some(checkpoint.epoch) {
            return Ok(served);
        }
        let snapshot = Snapshot::load(&self.store, &checkpoint).await?;
        tracing::info!(
            epoch = checkpoint.epoch,
            documents = snapshot.documents.len(),
            "serving checkpoint"
        );
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
}

pub fn router(state: Arc<ServiceState>) -> Router {
    Router::new()
        .route("/v1/ask", post(ask_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(state)
}

async fn ask_handler(
    State(state): State<Arc<ServiceState>>,
    Json(request): Json<AskRequest>,
) -> Response {
    let Some(snapshot) = state.snapshot.read().await.clone() else {
        return not_ready();
    };
    if request.question.trim().is_empty() {
        return error(StatusCode::BAD_REQUEST, "question is empty");
    }
    Json(ask(&snapshot, &request, &*state.model).await).into_response()
}

async fn ready_handler(State(state): State<Arc<ServiceState>>) -> Response {
    match state.snapshot.read().await.as_ref() {
        Some(snapshot) => Json(serde_json::json!({ "epoch": snapshot.epoch })).into_response(),
        None => not_ready(),
    }
}

fn not_ready() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "no checkpoint has been committed under the tables root yet",
    )
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}
