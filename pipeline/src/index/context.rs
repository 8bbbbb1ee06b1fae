//! What a source sees of the indexing process while it makes a round.

use std::collections::HashSet;

use memweave_llm::cache::CallCache;
use memweave_operators::build::{Document, RawDocument};

use super::checkpoint::Previous;
use super::versions::DocumentVersions;
use super::{Carried, Routed};
use crate::origins::{Held, Origins};
use crate::positions::Positions;

/// What a source sees of the indexing process while it makes a round: what
/// the last checkpoint and the rounds since left (origins, document
/// versions), the runtime to wait on, the workers to route to, and whether
/// to stop. Sources are handed this, not the indexer.
pub(super) struct SourceContext<'a> {
    pub(super) runtime: &'a tokio::runtime::Runtime,
    #[cfg_attr(
        not(feature = "kafka"),
        allow(dead_code, reason = "only the Kafka source streams")
    )]
    pub(super) cache: &'a CallCache,
    /// Workers that take input: this process's.
    pub(super) feeds: usize,
    /// The source's name in a memory sources share (empty: its only source).
    pub(super) source_name: &'a str,
    pub(super) previous: Option<&'a Previous>,
    /// Where the source stood at the last checkpoint, until the first round.
    pub(super) positions: Option<&'a Positions>,
    /// The origins of other sources' documents, which this source never names.
    pub(super) other_origins: &'a HashSet<String>,
    pub(super) origins: &'a Origins,
    pub(super) versions: &'a DocumentVersions,
}

impl SourceContext<'_> {
    #[cfg_attr(
        not(feature = "kafka"),
        allow(dead_code, reason = "only the Kafka source streams")
    )]
    /// Whether Ctrl-C or SIGTERM came: the run must stop without committing more.
    pub(super) fn interrupted(&self) -> bool {
        self.cache.is_closing()
    }

    /// Runs `future` on the indexer's runtime.
    pub(super) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    #[cfg_attr(
        not(feature = "kafka"),
        allow(dead_code, reason = "only the Kafka source streams")
    )]
    /// For a stream's first round: the last checkpoint's documents (by id) and
    /// ingestion errors (by the position they cite), each held by the worker
    /// `peer_of` its source position.
    pub(super) fn carried_stream(&self, peer_of: impl Fn(&str) -> usize) -> Carried {
        let Some(previous) = self.previous else {
            return Carried::new();
        };
        let documents = previous.documents.iter().map(|d| {
            let held = Held {
                records: vec![d.clone()],
                ..Held::default()
            };
            (&*d.doc_id, &*d.source_uri, held)
        });
        let errors = previous.ingest_errors.iter().map(|e| {
            let held = Held {
                errors: vec![e.clone()],
                ..Held::default()
            };
            (e.source.as_str(), e.source.as_str(), held)
        });
        documents
            .chain(errors)
            .map(|(origin, position, held)| {
                (origin.to_string(), Routed::to(peer_of(position), held))
            })
            .collect()
    }

    /// `raw` as this source's document, versioned against what the process
    /// has seen (see [`DocumentVersions::versioned`]).
    pub(super) fn versioned(&self, raw: RawDocument, now: i64) -> (Document, i64) {
        self.versions.versioned(self.source_name, raw, now)
    }
}
