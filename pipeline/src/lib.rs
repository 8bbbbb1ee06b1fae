//! The memweave indexing pipeline: a timely + differential dataflow that builds
//! every memory from a source (the `memweave` command around it is `cli/`).

pub mod async_map;
pub mod cluster;
pub mod dataflow;
mod error;
pub mod index;
pub mod metrics;
mod origins;
mod positions;
pub mod progress;
pub mod source;
mod spill;
mod state;
pub mod supervise;
mod workers;
mod write;

pub use error::{IndexError, StagingError, UsageError};
