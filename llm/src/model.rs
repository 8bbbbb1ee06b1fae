//! The memory model both backends share: every step is rendered from its paper's
//! template, answered through the call cache, and read by the same parser; a reply
//! that does not parse is asked again at temperature 0.7, up to three tries.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use memweave_operators::model::*;
use memweave_operators::tokens::count_tokens;
use memweave_schemas::{LlmCallRow, now_micros};

use crate::cache::{CallCache, CallParams, call_key};
use crate::extractive::EXTRACTIVE_MODEL;
use crate::pool::PoolClient;
use crate::prompts::{Prompt, Prompts};
use crate::steps;

/// Temperatures of the three tries of a step (QRMeM: 0, then 0.7 on a parse failure).
const TEMPERATURES: [f32; 3] = [0.0, 0.7, 0.7];

/// Where replies come from.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Offline and deterministic: extractive replies in the papers' formats.
    Extractive,
    /// An OpenAI-compatible pool.
    OpenAi(Arc<PoolClient>),
}

/// A [`MemoryModel`] over a backend, the prompt templates and the call cache.
#[derive(Debug, Clone)]
pub struct TaskModel {
    backend: Backend,
    prompts: Arc<Prompts>,
    cache: Arc<CallCache>,
    /// Output budget of a reply, in tokens.
    max_tokens: u32,
}

/// Default output budget of a reply.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

impl TaskModel {
    pub fn new(
        backend: Backend,
        prompts: Arc<Prompts>,
        cache: Arc<CallCache>,
        max_tokens: u32,
    ) -> Self {
        TaskModel {
            backend,
            prompts,
            cache,
            max_tokens,
        }
    }

    /// The extractive backend with built-in prompts and an in-memory cache.
    pub fn extractive() -> Self {
        Self::new(
            Backend::Extractive,
            Arc::new(Prompts::default()),
            CallCache::in_memory(),
            DEFAULT_MAX_TOKENS,
        )
    }

    pub fn cache(&self) -> &Arc<CallCache> {
        &self.cache
    }

    pub fn pool(&self) -> Option<&Arc<PoolClient>> {
        match &self.backend {
            Backend::OpenAi(pool) => Some(pool),
            Backend::Extractive => None,
        }
    }

    fn model_name(&self) -> &str {
        match &self.backend {
            Backend::Extractive => EXTRACTIVE_MODEL,
            Backend::OpenAi(pool) => pool.model(),
        }
    }

    /// One call to the backend, as its ledger row.
    async fn call(
        &self,
        cx: &CallContext,
        step: &Step,
        prompt: &Prompt,
        params: CallParams,
        key: String,
    ) -> StepResult<LlmCallRow> {
        let started = Instant::now();
        let text = prompt.text();
        let (reply, tokens_in, tokens_out) = match &self.backend {
            Backend::Extractive => {
                // Answer the step as the prompt shows it (lists one item per line), so
                // the reply is the one a model reading this prompt would get from the
                // simulator.
                let shown = steps::as_shown(step);
                let reply = steps::extractive_reply(&shown);
                let tokens = (count_tokens(&text) as u32, count_tokens(&reply) as u32);
                (reply, tokens.0, tokens.1)
            }
            Backend::OpenAi(pool) => {
                let completion = pool
                    .chat(prompt, params.temperature, params.max_tokens, cx.priority)
                    .await
                    .map_err(|e| StepError::Unavailable {
                        task: step.task().name().to_string(),
                        message: e.to_string(),
                    })?;
                (
                    completion.content,
                    completion.tokens_in,
                    completion.tokens_out,
                )
            }
        };
        Ok(LlmCallRow {
            call_key: key,
            backend: self.backend().to_string(),
            model: self.model_name().to_string(),
            task: step.task().name().to_string(),
            stage: cx.stage.to_string(),
            doc_id: cx.doc_id.clone(),
            subject: cx.subject.clone(),
            inputs: Some(text),
            reply,
            tokens_in,
            tokens_out,
            latency_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32,
            created_at: now_micros(),
        })
    }
}

#[async_trait]
impl MemoryModel for TaskModel {
    fn backend(&self) -> &str {
        match self.backend {
            Backend::Extractive => "extractive",
            Backend::OpenAi(_) => "openai",
        }
    }

    fn is_remote(&self) -> bool {
        matches!(self.backend, Backend::OpenAi(_))
    }

    /// Runs `step`: up to three tries, each answered from the cache or the backend,
    /// until the step's parser accepts a reply.
    async fn reply(&self, cx: &CallContext, step: Step) -> StepResult<Reply> {
        let task = step.task().name();
        let prompt = self.prompts.render(&step);
        let mut last = String::new();
        for (attempt, temperature) in TEMPERATURES.into_iter().enumerate() {
            let params = CallParams {
                temperature,
                max_tokens: self.max_tokens,
                attempt: attempt as u32,
            };
            let key = call_key(self.backend(), self.model_name(), task, &prompt, &params);
            let reply = self
                .cache
                .reply(cx, &key, task, || {
                    self.call(cx, &step, &prompt, params, key.clone())
                })
                .await?;
            if let Some(value) = steps::parse(&step, &reply) {
                return Ok(value);
            }
            tracing::debug!(task, attempt, "unparsable reply: {reply:?}");
            last = reply;
        }
        Err(StepError::Unparsable {
            task: task.to_string(),
            last_reply: last,
        })
    }
}
