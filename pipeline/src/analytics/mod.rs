//! Analytics commands over the memory tables, as of one checkpoint (the catalog
//! and the report live in `memweave_query::analytics`): SQL output, Parquet
//! export, and the report as an HTML page.

pub mod export;
pub mod html;
pub mod sql;
