//! The memweave query service: navigators over one consistent snapshot of the
//! memory tables, served over HTTP and as MCP tools. It holds nothing but caches of immutable
//! table versions, so any replica answers any request the same way.
//!
//! This crate must not depend on the pipeline or on timely: its image stays small.

pub mod analytics;
pub mod cache;
pub mod http;
pub mod mcp;
pub mod navigate;
pub mod request;
pub mod service;
pub mod snapshot;

pub use navigate::{Answer, Models, Passage, Step, ask};
pub use request::{AskOptions, AskRequest, Strategy};
pub use snapshot::Snapshot;

/// Log filter unless RUST_LOG says otherwise: Lance logs every scan at info.
pub const DEFAULT_LOG_FILTER: &str = "info,lance=warn,lance_core=warn,lance_io=warn,lance_file=warn,lance_encoding=warn,lance_table=warn";

/// Parses `KEY=VALUE` object-store settings given on a command line.
pub fn parse_storage_option(option: &str) -> Result<(String, String), String> {
    option
        .split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {option:?}"))
}
