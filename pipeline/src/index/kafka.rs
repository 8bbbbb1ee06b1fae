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

use crate::UsageError;

#[cfg(feature = "kafka")]
mod consumer;
#[cfg(feature = "kafka")]
pub use consumer::index_kafka;

/// Most messages one round absorbs unless told otherwise: a bound on a round's
/// memory and on the work a crash makes a restart repeat (model calls
/// excepted: they are cached).
pub const DEFAULT_ROUND_MESSAGES: NonZeroUsize = NonZeroUsize::new(1000).unwrap();

/// `kafka://BROKERS/TOPIC`, BROKERS being `host:port[,host:port…]`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopicUrl {
    pub(crate) brokers: String,
    pub(crate) topic: String,
}

impl TopicUrl {
    pub(crate) fn parse(url: &str) -> Result<TopicUrl, UsageError> {
        let usage = || {
            UsageError(format!(
                "{url} is not a Kafka source: expected kafka://HOST:PORT[,HOST:PORT…]/TOPIC"
            ))
        };
        let rest = url.strip_prefix("kafka://").ok_or_else(usage)?;
        let (brokers, topic) = rest
            .trim_end_matches('/')
            .split_once('/')
            .ok_or_else(usage)?;
        if brokers.is_empty() || topic.is_empty() || topic.contains('/') {
            return Err(usage());
        }
        Ok(TopicUrl {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
        })
    }

    /// The source as checkpoints name it: the topic, wherever its brokers are.
    pub(crate) fn name(&self) -> String {
        format!("kafka:{}", self.topic)
    }

    /// Where one message came from, as documents and errors cite it.
    #[cfg_attr(
        not(feature = "kafka"),
        allow(dead_code, reason = "only consumed messages cite it")
    )]
    pub(crate) fn position(&self, partition: i32, offset: i64) -> String {
        format!("kafka:{}/{partition}/{offset}", self.topic)
    }
}

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
    Err(UsageError(format!(
        "{}: this build has no Kafka source; build with `--features kafka` (e.g. cargo build --release --features kafka)",
        options.source
    ))
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_brokers_and_one_topic() {
        let url = TopicUrl::parse("kafka://a:9092,b:9092/docs").unwrap();
        assert_eq!(url.brokers, "a:9092,b:9092");
        assert_eq!(url.topic, "docs");
        assert_eq!(url.position(2, 17), "kafka:docs/2/17");
        for bad in [
            "kafka://a:9092",
            "kafka:///docs",
            "kafka://a/b/c",
            "s3://a/b",
        ] {
            assert!(TopicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
