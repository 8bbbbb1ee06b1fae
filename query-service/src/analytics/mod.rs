//! Reading the memory tables for analysis: every table of one checkpoint in a
//! DataFusion session ([`catalog`]), and the cost and coverage report defined
//! by SQL over it ([`report`]), also as Prometheus gauges ([`metrics`]).

pub mod catalog;
pub mod metrics;
pub mod report;
