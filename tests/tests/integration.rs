//! memweave's end-to-end tests: one binary, real components, real text.

// Test helpers fail loudly by design.
#![allow(clippy::unwrap_used)]

mod integration {
    pub mod agents;
    pub mod analytics;
    pub mod bad_input;
    pub mod cluster;
    pub mod crash;
    pub mod deploy;
    pub mod explorer;
    pub mod external_readers;
    pub mod formats;
    pub mod hostile;
    pub mod incremental;
    pub mod indexing;
    pub mod kafka;
    pub mod memories;
    pub mod model_pool;
    pub mod permissions;
    pub mod query;
    pub mod segmentation;
    pub mod shared;
    pub mod sources;
}
