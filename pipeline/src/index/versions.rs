//! What the indexer knows of each document's newest version: a re-read with
//! the same content keeps its number and first-seen time, and a commit says
//! which documents are new, changed and gone against it.

use std::collections::{HashMap, HashSet};

use memweave_operators::build::{Document, RawDocument};

use crate::origins::Record;
use crate::write::{DocumentChange, RoundChanges, version_hash};

/// A document's newest version as the memory holds it: its content hash
/// as 16 bytes of that hash's hash, all a comparison needs (one of these is
/// kept per document of the archive).
#[derive(Debug, Clone, PartialEq, Eq)]
struct KnownVersion {
    content_hash: u128,
    version: u64,
    /// When this version was first seen (µs since the epoch).
    seen: i64,
}

impl KnownVersion {
    fn of_record(record: &Record) -> Self {
        KnownVersion {
            content_hash: record.content_hash,
            version: record.version,
            seen: record.seen,
        }
    }

    fn of_change(change: &DocumentChange) -> Self {
        KnownVersion {
            content_hash: change.content_hash,
            version: change.version,
            seen: change.ingested_at,
        }
    }
}

/// Every document's newest version, by id.
#[derive(Debug, Default)]
pub(super) struct DocumentVersions(HashMap<String, KnownVersion>);

impl DocumentVersions {
    /// The versions of the documents a checkpoint holds.
    pub(super) fn of<'r>(records: impl IntoIterator<Item = &'r Record>) -> Self {
        let known = records
            .into_iter()
            .map(|d| (d.doc_id.to_string(), KnownVersion::of_record(d)));
        DocumentVersions(known.collect())
    }

    /// `raw` as the document of the source named `source`, versioned: the
    /// same content keeps its version and first-seen time, changed content
    /// gets the next version, first seen `now`.
    pub(super) fn versioned(&self, source: &str, raw: RawDocument, now: i64) -> (Document, i64) {
        let mut doc = Document::in_source(source, raw, 1);
        match self.0.get(&doc.doc_id) {
            Some(known) if known.content_hash == version_hash(&doc.content_hash) => {
                doc.version = known.version;
                (doc, known.seen)
            }
            Some(known) => {
                doc.version = known.version + 1;
                (doc, now)
            }
            None => (doc, now),
        }
    }

    /// The documents whose earlier text the round replaced or removed: what
    /// [`DocumentVersions::note`] counts as changed and gone, but new ones.
    pub(super) fn superseded(&self, changes: &RoundChanges, replace: bool) -> Vec<String> {
        if !replace {
            return changes.documents_removed.clone();
        }
        let added = added_versions(changes);
        (self.0.iter())
            .filter(|(id, known)| added.get(id.as_str()) != Some(*known))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Notes the versions of the documents a round added and removed; returns
    /// how many documents are new or changed, and how many are gone. A
    /// `replace` round (a process's first) added every document: against the
    /// last checkpoint's versions, only those whose version changed count, and
    /// the checkpoint's documents it did not add are gone.
    pub(super) fn note(&mut self, changes: &RoundChanges, replace: bool) -> (usize, usize) {
        let added = added_versions(changes);
        let (changed, deleted) = if replace {
            let changed = (added.iter())
                .filter(|(id, known)| self.0.get(**id) != Some(known))
                .count();
            let deleted = (self.0.keys())
                .filter(|id| !added.contains_key(id.as_str()))
                .count();
            self.0.clear();
            (changed, deleted)
        } else {
            let removed: HashSet<&str> = (changes.documents_removed.iter())
                .map(String::as_str)
                .filter(|id| !added.contains_key(id))
                .collect();
            for id in &removed {
                self.0.remove(*id);
            }
            (added.len(), removed.len())
        };
        for (id, known) in added {
            self.0.insert(id.to_string(), known);
        }
        (changed, deleted)
    }
}

/// The versions of the documents a round added, by id.
fn added_versions(changes: &RoundChanges) -> HashMap<&str, KnownVersion> {
    (changes.documents_added.iter())
        .map(|d| (d.doc_id.as_str(), KnownVersion::of_change(d)))
        .collect()
}
