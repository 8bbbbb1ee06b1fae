//! The consumer behind [`super::index_kafka`]: librdkafka, compiled with the
//! `kafka` feature.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use memweave_ingest::{self as ingest, Format, SourceFile};
use memweave_operators::build::RawDocument;
use memweave_operators::build::doc_id_in;
use memweave_schemas::{ErrorRow, now_micros};
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{KafkaOptions, TopicUrl};
use crate::index::{
    Carried, Fresh, IndexOptions, IndexSummary, Indexer, RoundInput, RoundSource, Routed,
    SourceContext, Update, Updates,
};
use crate::origins::Body;
use crate::positions::Positions;
use crate::source::Source;
use crate::{IndexError, UsageError};

/// How long a round waits for another message before committing what it has.
const IDLE: Duration = Duration::from_millis(500);
/// Longest a metadata or offset request to the brokers may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Change {
    doc_id: String,
    op: Op,
    text: Option<String>,
    uri: Option<String>,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
    /// Who may read it: a list of labels or one comma-separated string;
    /// without, `--acl-default`'s.
    acl: Option<serde_json::Value>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Upsert,
    Delete,
}

/// Consumes the topic in rounds until its end offsets at the start (or, with
/// `follow`, until stopped), reporting each round.
pub fn index_kafka(
    options: &IndexOptions,
    kafka: &KafkaOptions,
    report: impl FnMut(&IndexSummary),
) -> Result<(), IndexError> {
    let url = TopicUrl::parse(&options.source)?;
    let mut indexer = Indexer::open(options)?;
    let mut rounds = KafkaRounds::assign(url, options, kafka, &indexer.source_context())?;
    indexer.run(&mut rounds, report)?;
    Ok(())
}

/// A topic, round by round: each round absorbs up to
/// [`KafkaOptions::round_messages`] messages, each partition's fed by the
/// worker it maps to.
struct KafkaRounds<'o> {
    url: TopicUrl,
    options: &'o IndexOptions,
    follow: bool,
    round_messages: NonZeroUsize,
    consumer: BaseConsumer,
    /// Per partition, the next offset to consume.
    next: BTreeMap<i32, i64>,
    /// Without `follow`, where to stop: every partition's end at the start.
    ends: BTreeMap<i32, i64>,
    /// Workers that take input.
    peers: usize,
    /// The next round's updates.
    updates: Updates,
    /// What the last checkpoint of this topic holds, for the process's first
    /// round.
    carried: Carried,
    /// Messages the round in progress consumed.
    consumed: usize,
    rounds: usize,
}

impl<'o> KafkaRounds<'o> {
    /// Assigns every partition of the topic to a consumer, from the offsets
    /// the last checkpoint of this topic recorded (else from the beginning).
    fn assign(
        url: TopicUrl,
        options: &'o IndexOptions,
        kafka: &KafkaOptions,
        cx: &SourceContext<'_>,
    ) -> Result<Self, IndexError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &url.brokers)
            .set("group.id", &kafka.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .map_err(|e| UsageError(format!("{}: {e}", options.source)))?;
        let metadata = consumer
            .fetch_metadata(Some(&url.topic), BROKER_TIMEOUT)
            .map_err(|e| {
                UsageError(format!("{}: cannot reach the brokers: {e}", options.source))
            })?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == url.topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            return Err(UsageError(format!(
                "topic {} does not exist on {} (memweave does not create topics)",
                url.topic, url.brokers
            ))
            .into());
        }
        // A topic's documents are keyed by their messages' ids, which may be
        // gone from it: they cannot be keyed anew under a name.
        let holds_documents = cx.previous.is_some_and(|p| !p.documents.is_empty());
        if !cx.source_name.is_empty() && cx.positions.is_none() && holds_documents {
            return Err(UsageError(format!(
                "{}: the memory holds this topic's documents, indexed under another source \
                 name or none; index it as before (its documents' ids follow the name), or \
                 into a new memory",
                options.source
            ))
            .into());
        }
        // Positions come from the last checkpoint written from this topic.
        let previous = match cx.positions {
            Some(Positions::Kafka { source, offsets }) if *source == url.name() => {
                Some(offsets.clone())
            }
            _ => None,
        };
        let mut next: BTreeMap<i32, i64> = partitions
            .iter()
            .filter_map(|p| Some((*p, *previous.as_ref()?.get(p)?)))
            .collect();
        let mut assignment = TopicPartitionList::new();
        for p in &partitions {
            let offset = next
                .get(p)
                .map_or(Offset::Beginning, |&o| Offset::Offset(o));
            assignment.add_partition_offset(&url.topic, *p, offset)?;
        }
        consumer.assign(&assignment)?;
        let mut ends = BTreeMap::new();
        if !kafka.follow {
            for p in &partitions {
                let (low, high) = consumer.fetch_watermarks(&url.topic, *p, BROKER_TIMEOUT)?;
                ends.insert(*p, high);
                next.entry(*p).or_insert(low);
            }
        }
        let peers = cx.feeds;
        let carried = match previous {
            Some(_) => cx.carried_stream(|position| {
                let partition = position.rsplit('/').nth(1).and_then(|p| p.parse().ok());
                peer_of(partition.unwrap_or(0), peers)
            }),
            None => Carried::new(),
        };
        Ok(KafkaRounds {
            url,
            options,
            follow: kafka.follow,
            round_messages: kafka.round_messages,
            consumer,
            next,
            ends,
            peers,
            updates: Updates::new(),
            carried,
            consumed: 0,
            rounds: 0,
        })
    }

    /// Whether every partition is consumed to its end (never, with `follow`).
    fn caught_up(&self) -> bool {
        !self.follow
            && self
                .ends
                .iter()
                .all(|(p, end)| self.next.get(p).is_some_and(|n| n >= end))
    }
}

/// The worker that feeds a partition's messages.
fn peer_of(partition: i32, peers: usize) -> usize {
    partition.unsigned_abs() as usize % peers
}

impl RoundSource for KafkaRounds<'_> {
    fn next_round(&mut self, cx: &SourceContext<'_>) -> Result<Option<RoundInput<'_>>, IndexError> {
        if self.rounds > 0 && self.caught_up() {
            return Ok(None);
        }
        loop {
            let started = Instant::now();
            self.consumed = 0;
            while self.consumed < self.round_messages.get() && !self.caught_up() {
                if cx.interrupted() {
                    return Err(IndexError::Interrupted);
                }
                match self.consumer.poll(IDLE) {
                    None if self.follow && self.consumed > 0 => break,
                    None => continue,
                    Some(Err(e)) => tracing::warn!("consuming {}: {e}", self.options.source),
                    Some(Ok(message)) => {
                        let (partition, offset) = (message.partition(), message.offset());
                        let (origin, update) = read_message(&self.url, &message, cx, self.options);
                        let peer = peer_of(partition, self.peers);
                        self.updates.insert(origin, Routed::to(peer, update));
                        self.next.insert(partition, offset + 1);
                        self.consumed += 1;
                    }
                }
            }
            if self.consumed > 0 || self.rounds == 0 {
                return Ok(Some(RoundInput {
                    updates: std::mem::take(&mut self.updates),
                    carried: std::mem::take(&mut self.carried),
                    positions: Positions::Kafka {
                        source: self.url.name(),
                        offsets: self.next.clone(),
                    },
                    source_errors: None,
                    reader: None,
                    started,
                }));
            }
            if self.caught_up() {
                return Ok(None);
            }
        }
    }

    fn committed(&mut self, summary: &mut IndexSummary) {
        summary.source = self.options.source.clone();
        summary.files = self.consumed;
        summary.input_unit = "messages";
        self.rounds += 1;
        commit_offsets(&self.consumer, &self.url.topic, &self.next);
    }
}

/// Reports the committed positions to the consumer group; a failure costs only
/// lag monitoring (the checkpoint is what a restart reads), so it is logged.
fn commit_offsets(consumer: &BaseConsumer, topic: &str, next: &BTreeMap<i32, i64>) {
    let mut offsets = TopicPartitionList::new();
    for (p, o) in next {
        if let Err(e) = offsets.add_partition_offset(topic, *p, Offset::Offset(*o)) {
            tracing::warn!("offset {o} of partition {p}: {e}");
        }
    }
    if let Err(e) = consumer.commit(&offsets, CommitMode::Sync) {
        tracing::warn!("committing offsets to the consumer group: {e}");
    }
}

/// One message as an update: its document's new input (`None` to delete it), or
/// an errors row for a message that is not a valid change, keyed by position.
fn read_message(
    url: &TopicUrl,
    message: &BorrowedMessage<'_>,
    cx: &SourceContext<'_>,
    options: &IndexOptions,
) -> (String, Update) {
    let position = url.position(message.partition(), message.offset());
    let failed = |kind: &str, detail: String, doc_id: Option<String>| {
        let error = ErrorRow::new("ingest", &position, doc_id, kind, &detail);
        tracing::warn!(source = %position, kind, "{detail}");
        let input = Fresh {
            errors: vec![error],
            ..Fresh::default()
        };
        (position.clone(), Update::Ready(input))
    };
    let change: Change = match serde_json::from_slice(message.payload().unwrap_or_default()) {
        Ok(change) => change,
        Err(e) => {
            return failed(
                "bad_message",
                format!(
                    "expected {{\"doc_id\", \"op\", \"text\" | \"uri\", \"metadata\", \"acl\"}}: {e}"
                ),
                None,
            );
        }
    };
    let doc_id = doc_id_in(cx.source_name, &change.doc_id);
    let own_labels = match ingest::json_labels(change.acl) {
        Ok(labels) => labels,
        Err(e) => return failed("bad_message", format!("\"acl\" {e}"), Some(doc_id)),
    };
    let text = match (change.op, change.text, change.uri) {
        (Op::Delete, None, None) => return (doc_id, Update::Gone),
        (Op::Delete, ..) => {
            let detail = "a delete carries no text or uri".to_string();
            return failed("bad_message", detail, Some(doc_id));
        }
        (Op::Upsert, Some(text), None) => Ok((text, Vec::new())),
        (Op::Upsert, None, Some(uri)) => read_uri(&uri, &change.doc_id, cx, options),
        (Op::Upsert, ..) => Err((
            "bad_message",
            "an upsert carries exactly one of text and uri".to_string(),
        )),
    };
    let body = match text {
        Ok((text, _)) if text.trim().is_empty() => Err(("empty", "no text".to_string())),
        other => other,
    };
    match body {
        Ok((text, sections)) => {
            let title = change
                .metadata
                .get("title")
                .and_then(|t| t.as_str())
                .unwrap_or(&change.doc_id)
                .to_string();
            let raw = RawDocument {
                key: change.doc_id,
                source_uri: position,
                title,
                text,
                sections,
                acl: (options.source_options.read.access).labels_of(None, own_labels),
            };
            let input = Fresh {
                records: vec![cx.versioned(raw, now_micros())],
                ..Fresh::default()
            };
            (doc_id, Update::Ready(input))
        }
        Err((kind, detail)) => failed(kind, detail, Some(doc_id)),
    }
}

/// The text (and sections) of the object an upsert points at, read like a
/// file of its type: its first document.
fn read_uri(
    uri: &str,
    key: &str,
    cx: &SourceContext<'_>,
    options: &IndexOptions,
) -> Result<Body, (&'static str, String)> {
    let sources = &options.source_options;
    sources
        .allowed_uris
        .check(uri)
        .map_err(|why| (ingest::kind::FORBIDDEN, why))?;
    let unreadable = |e: String| (ingest::kind::UNREADABLE, format!("{uri}: {e}"));
    let source = Source::open(uri, sources).map_err(|e| unreadable(e.0))?;
    let bytes = cx
        .block_on(source.read_whole())
        .map_err(|e| e.for_file(uri));
    let file = SourceFile {
        uri: uri.to_string(),
        key: key.to_string(),
        format: Format::of(std::path::Path::new(uri)).unwrap_or(Format::Text),
        version: None,
    };
    match ingest::parse(&file, bytes, &sources.read)
        .into_iter()
        .next()
    {
        Some(Ok(raw)) => Ok((raw.text, raw.sections)),
        Some(Err(e)) => Err((e.kind, format!("{uri}: {}", e.message))),
        None => Err(("empty", format!("{uri}: no text"))),
    }
}
