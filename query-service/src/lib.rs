//! The memweave query service: navigators over one consistent snapshot of the
//! memory tables, served over HTTP and as MCP tools. It holds nothing but caches of immutable
//! table versions, so any replica answers any request the same way.
//!
//! This crate must not depend on the pipeline or on timely: its image stays small.

#[cfg(feature = "server")]
pub mod auth;
pub mod cache;
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
pub mod mcp;
pub mod navigate;
pub mod reader;
pub mod request;
#[cfg(feature = "server")]
pub mod service;
pub mod snapshot;
#[cfg(feature = "server")]
pub mod ui;

pub use navigate::{Answer, Models, Passage, Signal, Step, ask};
pub use request::{AskOptions, AskRequest, Strategy};
pub use snapshot::Snapshot;
