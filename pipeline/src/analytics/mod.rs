//! Analytics over the memory tables, as of one checkpoint: SQL (DataFusion
//! over the Lance datasets), Parquet export, and the cost and coverage report.

pub mod catalog;
pub mod export;
pub mod html;
pub mod report;
pub mod sql;
