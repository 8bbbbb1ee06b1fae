//! Pure building blocks of memweave, free of any dataflow engine: documents,
//! segmentation, pagination, tree grouping, the memory-model trait and its
//! backends, and lexical scoring. The pipeline wires them into a dataflow; the
//! query service uses them to navigate.

pub mod build;
pub mod config;
pub mod embed;
pub mod entity_graph;
pub mod extract;
pub mod lexical;
pub mod mixture;
pub mod model;
pub mod paginate;
pub mod raptor;
pub mod reduce;
pub mod segment;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod tokens;
pub mod tree;

pub use build::{BuildConfig, BuildConfigError, Document};
pub use model::{CallContext, MemoryModel, Priority, StepError, StepResult};
