//! Embedders that need more than the operators crate: any OpenAI-compatible
//! `/v1/embeddings` endpoint, answered through the call cache like every model
//! call, so a re-run or a replay embeds nothing twice.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use memweave_operators::embed::Embedder;
use memweave_operators::model::{CallContext, StepError, StepResult};
use memweave_operators::tokens::count_tokens;
use memweave_schemas::{LlmCallRow, content_id, now_micros};

use crate::cache::CallCache;
use crate::pool::PoolClient;

const TASK: &str = "embed";

/// Vectors from an OpenAI-compatible server (vLLM `--task embed`, TEI, Ollama,
/// llama.cpp `--embeddings`, hosted APIs).
#[derive(Debug)]
pub struct OpenAiEmbedder {
    pool: Arc<PoolClient>,
    cache: Arc<CallCache>,
    name: String,
    dim: usize,
}

/// Why an embeddings server was not usable: its answer to a first text.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("the embedding server did not embed a probe text: {0}")]
    NotEmbedded(StepError),
    #[error("the embedding server returned an empty vector")]
    Empty,
}

impl OpenAiEmbedder {
    /// Asks the server for one vector to learn their width (the `embeddings`
    /// table holds vectors of one width).
    pub async fn connect(pool: Arc<PoolClient>, cache: Arc<CallCache>) -> Result<Self, ProbeError> {
        let mut embedder = OpenAiEmbedder {
            name: format!("openai:{}", pool.model()),
            pool,
            cache,
            dim: 0,
        };
        let probe = embedder
            .embed(&CallContext::query("embed"), &["memweave"])
            .await
            .map_err(ProbeError::NotEmbedded)?;
        embedder.dim = probe.first().map_or(0, Vec::len);
        if embedder.dim == 0 {
            return Err(ProbeError::Empty);
        }
        Ok(embedder)
    }

    async fn call(&self, cx: &CallContext, texts: &[&str], key: String) -> StepResult<LlmCallRow> {
        let started = Instant::now();
        let inputs: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let vectors =
            self.pool
                .embed(&inputs, cx.priority)
                .await
                .map_err(|e| StepError::Unavailable {
                    task: TASK.to_string(),
                    message: e.to_string(),
                })?;
        Ok(LlmCallRow {
            call_key: key,
            backend: "openai".to_string(),
            model: self.pool.model().to_string(),
            task: TASK.to_string(),
            stage: cx.stage.to_string(),
            doc_id: cx.doc_id.clone(),
            subject: cx.subject.clone(),
            inputs: Some(serde_json::to_string(&inputs).unwrap_or_default()),
            reply: serde_json::to_string(&vectors).unwrap_or_default(),
            tokens_in: texts.iter().map(|t| count_tokens(t) as u32).sum(),
            tokens_out: 0,
            latency_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32,
            created_at: now_micros(),
        })
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn dim(&self) -> usize {
        self.dim
    }

    async fn embed(&self, cx: &CallContext, texts: &[&str]) -> StepResult<Vec<Vec<f32>>> {
        let mut parts: Vec<&[u8]> = vec![b"openai", self.pool.model().as_bytes(), TASK.as_bytes()];
        parts.extend(texts.iter().map(|t| t.as_bytes()));
        let key = content_id("call", &parts);
        let reply = self
            .cache
            .reply(cx, &key, TASK, || self.call(cx, texts, key.clone()))
            .await?;
        let vectors: Vec<Vec<f32>> = serde_json::from_str(&reply).unwrap_or_default();
        let well_formed = vectors.len() == texts.len()
            && vectors
                .iter()
                .all(|v| !v.is_empty() && (self.dim == 0 || v.len() == self.dim));
        if !well_formed {
            return Err(StepError::Unparsable {
                task: TASK.to_string(),
                last_reply: format!(
                    "{} vectors for {} texts, expected width {}",
                    vectors.len(),
                    texts.len(),
                    self.dim
                ),
            });
        }
        Ok(vectors)
    }
}
