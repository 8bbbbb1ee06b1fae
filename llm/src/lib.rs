//! The memweave model layer. Every step of the four methods is one prompt of its
//! paper (`prompts/`, overridable), answered by a backend (`extractive`, offline;
//! or an OpenAI-compatible pool through [`pool::PoolClient`]), through a
//! content-addressed [`cache::CallCache`] persisted in `llm_calls`, and read by a
//! tolerant parser ([`parse`]), each step declared once in [`steps`]. `sim` (the
//! `sim` feature) is a simulated pool for tests and benches.

pub mod args;
pub mod cache;
pub mod config;
pub mod embed;
pub mod extractive;
pub mod model;
mod placeholders;
pub mod pool;
pub mod prompts;
#[cfg(feature = "sim")]
pub mod sim;
pub mod steps;

pub use args::{BackendKind, EmbedArgs, EmbedderKind, LlmArgs, ModelArgs};
pub use cache::CallCache;
pub use config::{ConfigError, EmbedConfig, LlmBackend, LlmConfig};
pub use model::{Backend, TaskModel};
pub use pool::{PoolClient, PoolConfig};
pub use prompts::Prompts;
