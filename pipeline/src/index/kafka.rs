//! A Kafka topic as a source. Each message is one JSON change to one document:
//!
//! ```json
//! {"doc_id": "handbook/intro", "op": "upsert", "text": "…", "metadata": {"title": "Intro"}}
//! {"doc_id": "handbook/intro", "op": "upsert", "uri": "s3://bucket/handbook/intro.md"}
//! {"doc_id": "handbook/intro", "op": "delete"}
//! ```
//!
//! An upsert carries the text, or a `uri` (any source `memweave index` reads:
//! a path, s3://, gs://, az://, file://) whose object holds it; `metadata.title`
//! titles the document. Produce with `doc_id` as the message key, so one
//! document's changes stay in one partition, in order. Messages are consumed in
//! rounds; each round's changes flow through the running dataflow and are
//! committed to the tables with the partitions' next offsets in the checkpoint.
//! Only then are the offsets committed to the consumer group too (for lag
//! monitoring): a restart resumes from the checkpoint, never from the group.

use std::num::NonZeroUsize;

#[cfg(feature = "kafka")]
mod consumer;
#[cfg(feature = "kafka")]
pub use consumer::index_kafka;

/// Most messages one round absorbs unless told otherwise: a bound on a round's
/// memory and on the work a crash makes a restart repeat (model calls
/// excepted: they are cached).
pub const DEFAULT_ROUND_MESSAGES: NonZeroUsize = NonZeroUsize::new(1000).unwrap();

/// How to consume the topic.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// The consumer group the committed offsets are reported under.
    pub group: String,
    /// Keep consuming; otherwise stop at the end offsets seen at the start.
    pub follow: bool,
    /// Most messages a round absorbs before it commits.
    pub round_messages: NonZeroUsize,
}

/// A build without the `kafka` feature (the default of a plain `cargo build`,
/// which then compiles no librdkafka) says how to get one.
#[cfg(not(feature = "kafka"))]
pub fn index_kafka(
    options: &super::IndexOptions,
    _: &KafkaOptions,
    _: impl FnMut(&super::IndexSummary),
) -> Result<(), crate::IndexError> {
    Err(crate::UsageError(format!(
        "{}: this build has no Kafka source; build with `--features kafka` (e.g. cargo build --release --features kafka)",
        options.source
    ))
    .into())
}
