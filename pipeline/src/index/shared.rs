//! A memory that named sources share (`--source-name`): a run of one source
//! holds the other sources' documents as the last checkpoint left them, and
//! never retracts them.

use std::collections::{BTreeSet, HashSet};

use memweave_schemas::hash128;

use super::checkpoint::Previous;
use super::kafka::TopicUrl;
use super::{Carried, IndexOptions, Routed};
use crate::IndexError;
use crate::origins::Held;
use crate::positions::{SourcePositions, file_uri};
use crate::source::Source;

/// What a run holds of the sources other than its own.
#[derive(Debug, Default)]
pub(super) struct OtherSources {
    /// Their documents and ingestion errors, for the run's first round to
    /// carry over; each held under its file's URI (its origin in this run).
    pub(super) carried: Carried,
    /// Those origins, which the run's own source never names: none is gone
    /// because a listing of it lacks them.
    pub(super) origins: HashSet<String>,
}

impl OtherSources {
    /// Takes the documents and ingestion errors that sources other than
    /// `name`, read from `root`, own (see [`SourcePositions::other_owner`])
    /// out of `previous`, each routed to one of `feeds` workers by its
    /// origin; `positions` keeps only the sources that still own one.
    pub(super) fn take(
        previous: &mut Previous,
        positions: &mut SourcePositions,
        name: &str,
        root: &str,
        feeds: usize,
    ) -> OtherSources {
        let mut others = OtherSources::default();
        let mut owners = BTreeSet::new();
        let mut owned = |uri: &str| {
            let owner = positions.other_owner(name, root, uri)?;
            owners.insert(owner.to_string());
            Some(file_uri(uri).to_string())
        };
        let documents = std::mem::take(&mut previous.documents);
        for document in documents {
            match owned(&document.source_uri) {
                Some(origin) => others.hold(origin, feeds).records.push(document),
                None => previous.documents.push(document),
            }
        }
        let errors = std::mem::take(&mut previous.ingest_errors);
        for error in errors {
            match owned(&error.source) {
                Some(origin) => others.hold(origin, feeds).errors.push(error),
                None => previous.ingest_errors.push(error),
            }
        }
        positions.retain_others(name, |source| owners.contains(source));
        others
    }

    /// What `origin` holds, routed to one of `feeds` workers by its hash.
    fn hold(&mut self, origin: String, feeds: usize) -> &mut Held {
        self.origins.insert(origin.clone());
        let peer = (hash128(origin.as_bytes()) % feeds.max(1) as u128) as usize;
        let held = self.carried.entry(origin);
        &mut held
            .or_insert_with(|| Routed::to(peer, Held::default()))
            .input
    }
}

/// Where the documents of the source `options` names are, as they cite it:
/// a folder's or file's canonical path, an object-store URL, `kafka:TOPIC`.
pub(super) fn source_root(options: &IndexOptions) -> Result<String, IndexError> {
    if options.source.starts_with("kafka://") {
        return Ok(TopicUrl::parse(&options.source)?.name());
    }
    Ok(Source::open(&options.source, &options.source_options)?.name())
}
