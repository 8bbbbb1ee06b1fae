//! What the indexer knows of each document's newest version: a re-read with
//! the same content keeps its number and first-seen time, and a commit says
//! which documents are new, changed and gone against it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use memweave_operators::build::{Document, RawDocument};

use crate::origins::{Origins, Record};
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

/// Every document's newest version, by id: the id is the copy the origins'
/// records hold, where one does (a copy apiece was 48 bytes a document).
#[derive(Debug, Default)]
pub(super) struct DocumentVersions(HashMap<Arc<str>, KnownVersion>);

impl DocumentVersions {
    /// The versions of the documents a checkpoint holds.
    pub(super) fn of<'r>(records: impl IntoIterator<Item = &'r Record>) -> Self {
        let known = records
            .into_iter()
            .map(|d| (Arc::clone(&d.doc_id), KnownVersion::of_record(d)));
        DocumentVersions(known.collect())
    }

    /// `raw` as the document of the source named `source`, versioned: the
    /// same content keeps its version and first-seen time, changed content
    /// gets the next version, first seen `now`.
    pub(super) fn versioned(&self, source: &str, raw: RawDocument, now: i64) -> (Document, i64) {
        let mut doc = Document::in_source(source, raw, 1);
        match self.0.get(doc.doc_id.as_str()) {
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
            .filter(|(id, known)| added.get(&***id) != Some(*known))
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Notes the versions of the documents a round added and removed; returns
    /// how many documents are new or changed, and how many are gone. A
    /// `replace` round (a process's first) added every document: against the
    /// last checkpoint's versions, only those whose version changed count, and
    /// the checkpoint's documents it did not add are gone. An id is kept as
    /// the copy `origins` holds.
    pub(super) fn note(
        &mut self,
        changes: &RoundChanges,
        replace: bool,
        origins: &Origins,
    ) -> (usize, usize) {
        let added = added_versions(changes);
        let (changed, deleted) = if replace {
            let changed = (added.iter())
                .filter(|(id, known)| self.0.get(**id) != Some(known))
                .count();
            let deleted = (self.0.keys())
                .filter(|id| !added.contains_key(&***id))
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
            let id = origins.shared_id(id).unwrap_or_else(|| Arc::from(id));
            self.0.insert(id, known);
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

#[cfg(test)]
mod tests {
    use memweave_operators::build::Document;

    use super::*;
    use crate::origins::Held;
    use crate::write::DocumentChange;

    /// A noted document's id is the copy its origin's record holds; one no
    /// origin here claims (another process's) keeps a copy of its own.
    #[test]
    fn a_noted_id_is_the_copy_its_record_holds() {
        let doc = Document {
            doc_id: "r1".into(),
            version: 1,
            content_hash: "h".into(),
            source_uri: "rows.jsonl".into(),
            title: String::new(),
            text: String::new(),
            sections: Vec::new(),
            acl: Vec::new(),
        };
        let record = Record::of(&doc, 0);
        let mut origins = Origins::default();
        let held = Held {
            version: None,
            records: vec![record.clone()],
            errors: Vec::new(),
        };
        origins.update("rows.jsonl", Some(held));
        let change = |id: &str| DocumentChange {
            doc_id: id.into(),
            content_hash: record.content_hash,
            version: 1,
            ingested_at: 0,
        };
        let changes = RoundChanges {
            documents_added: vec![change("r1"), change("r2")],
            ..RoundChanges::default()
        };
        let mut versions = DocumentVersions::default();
        assert_eq!(versions.note(&changes, false, &origins), (2, 0));
        let (r1, _) = versions.0.get_key_value("r1").unwrap();
        assert!(Arc::ptr_eq(r1, &record.doc_id));
        assert!(versions.0.contains_key("r2"));
    }
}
