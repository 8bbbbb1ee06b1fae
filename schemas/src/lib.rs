//! Plain data of memweave: the Arrow schema and row type of every memory table,
//! content-derived ids, and the [`store::TableStore`] that reads and writes the
//! tables as Lance datasets under one root URL.
//!
//! This crate is a leaf: it knows nothing of dataflow, models or HTTP.

pub mod acl;
pub mod ids;
pub mod prometheus;
pub mod rows;
pub mod search;
#[cfg(feature = "store")]
pub mod store;
pub mod tables;
pub mod text;

pub use ids::{content_id, hash128};
pub use rows::*;
#[cfg(feature = "store")]
pub use store::{StoreError, TableStore, to_batch};
pub use tables::{ColumnIndex, DEFAULT_VECTOR_WIDTH, Labelled, MemoryRow, MemoryTables, Table};
