//! Reading the memory tables for analysis, for the `memweave` command and the
//! services' `/metrics`: every table of one checkpoint in a DataFusion session
//! ([`catalog`]); one query's rows as a table, CSV, JSON or Parquet ([`sql`]);
//! every table as Parquet on any object store ([`export`]); and the cost and
//! coverage report defined by SQL over the catalog ([`report`]), as text, an
//! HTML page ([`html`]) or Prometheus gauges ([`metrics`]).
//!
//! It depends on the table schemas alone, so the indexer and the query
//! service share it without depending on each other.

pub mod catalog;
pub mod export;
pub mod html;
pub mod metrics;
pub mod report;
pub mod sql;
