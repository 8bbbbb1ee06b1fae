//! What a round has fed from its origins but not yet sent: the changes of a
//! file of many documents beyond an epoch's share, and the documents of
//! files read again as they are sent (datasets: their texts are never all in
//! memory). Any worker takes them: the dataflow spreads documents over
//! workers by id.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use memweave_operators::build::{Document, RawDocument};

use crate::IndexError;
use crate::dataflow::Fed;
use crate::origins::{Content, Origins};
use crate::workers::InputChange;
use crate::write::version_hash;

/// An origin's documents read again, in the order it holds them.
pub(super) type Documents<'r> = Box<dyn Iterator<Item = RawDocument> + 'r>;

#[derive(Default)]
pub(super) struct Pending<'r> {
    /// Changes whose texts are in hand, a document's side by side.
    ready: VecDeque<InputChange>,
    /// Then the origins whose documents are read as they are taken.
    later: VecDeque<ReadLater<'r>>,
}

impl<'r> Pending<'r> {
    pub(super) fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.later.is_empty()
    }

    /// Adds `ready` changes (put in document order) and origins to read.
    pub(super) fn extend(&mut self, ready: Vec<InputChange>, later: Vec<ReadLater<'r>>) {
        self.ready.extend(by_document(ready));
        self.later.extend(later);
    }

    /// The next changes, of at most `documents` documents, a document's
    /// changes never split: the ready ones first, then documents read from
    /// the origins still to read (whose records `origins` holds).
    pub(super) fn take(
        &mut self,
        documents: usize,
        origins: &Origins,
    ) -> Result<Vec<InputChange>, IndexError> {
        let (mut taken, mut count) = take_documents(&mut self.ready, documents);
        while count < documents {
            let Some(origin) = self.later.front_mut() else {
                break;
            };
            match origin.next(origins) {
                Some(changes) => {
                    taken.extend(changes?);
                    count += 1;
                }
                None => {
                    self.later.pop_front();
                }
            }
        }
        Ok(taken)
    }
}

/// The documents to insert from one origin, found as its documents are read
/// again, each with the retraction of the version it replaces.
pub(super) struct ReadLater<'r> {
    /// The name of the source its documents are keyed under.
    source_name: String,
    source_uri: String,
    documents: Documents<'r>,
    /// The origin, whose records in [`Origins`] are the versions to insert.
    origin: Arc<str>,
    /// Which of the origin's records (by place, up to the last wanted) are
    /// to be inserted and not read yet: a byte a record, where a map of
    /// copies of the records held 160 bytes a document of a one-file
    /// archive through the whole round.
    wanted: Vec<bool>,
    /// How many are.
    wanted_count: usize,
    /// The retractions of the versions they replace, by document id.
    replaced: HashMap<String, Vec<InputChange>>,
}

impl<'r> ReadLater<'r> {
    /// Reads `documents` again for those of `origin`'s records that are
    /// [`ReadLater::want`]ed.
    pub(super) fn new(
        source_name: &str,
        source_uri: String,
        documents: Documents<'r>,
        origin: Arc<str>,
    ) -> Self {
        ReadLater {
            source_name: source_name.to_string(),
            source_uri,
            documents,
            origin,
            wanted: Vec::new(),
            wanted_count: 0,
            replaced: HashMap::new(),
        }
    }

    /// Inserts the origin's record at `place` when its document is read.
    pub(super) fn want(&mut self, place: usize) {
        if self.wanted.len() <= place {
            self.wanted.resize(place + 1, false);
        }
        if !std::mem::replace(&mut self.wanted[place], true) {
            self.wanted_count += 1;
        }
    }

    /// Documents to insert from this origin.
    pub(super) fn len(&self) -> usize {
        self.wanted_count
    }

    /// Whether `doc_id` is to be inserted from this origin.
    pub(super) fn inserts(&self, doc_id: &str, origins: &Origins) -> bool {
        (origins.records_claimed_by(&self.origin, doc_id))
            .any(|(place, _)| wants(&self.wanted, place))
    }

    /// Sends `retraction` with the insertion of its document.
    pub(super) fn replaces(&mut self, doc_id: String, retraction: InputChange) {
        self.replaced.entry(doc_id).or_default().push(retraction);
    }
}

impl ReadLater<'_> {
    /// The next document's changes: its retraction (if it replaces a
    /// version) and its insertion, with the record `origins` holds for it.
    fn next(&mut self, origins: &Origins) -> Option<Result<Vec<InputChange>, IndexError>> {
        if self.wanted_count == 0 {
            return None;
        }
        for raw in self.documents.by_ref() {
            let mut doc = Document::in_source(&self.source_name, raw, 0);
            let doc_id = std::mem::take(&mut doc.doc_id);
            let Some((place, record)) = (origins.records_claimed_by(&self.origin, &doc_id))
                .find(|(place, _)| wants(&self.wanted, *place))
            else {
                continue;
            };
            self.wanted[place] = false;
            self.wanted_count -= 1;
            if (version_hash(&doc.content_hash), doc.source_uri.as_str())
                != (record.content_hash, &*record.source_uri)
            {
                break;
            }
            let mut changes = self.replaced.remove(&doc_id).unwrap_or_default();
            let (document, seen) = record.with_text(Content::of(doc));
            changes.push((Fed::Document(document, seen), 1));
            return Some(Ok(changes));
        }
        // The origin no longer holds a version the round decided to insert.
        self.wanted.fill(false);
        self.wanted_count = 0;
        Some(Err(IndexError::ChangedWhileIndexed {
            source_uri: self.source_uri.clone(),
        }))
    }
}

/// Whether the record at `place` is wanted (by [`ReadLater::wanted`]).
fn wants(wanted: &[bool], place: usize) -> bool {
    wanted.get(place).copied().unwrap_or(false)
}

/// `changes` in document id order, so that a document's retraction and
/// insertion stay side by side.
fn by_document(mut changes: Vec<InputChange>) -> Vec<InputChange> {
    changes.sort_by(|(a, da), (b, db)| fed_doc_id(a).cmp(fed_doc_id(b)).then(da.cmp(db)));
    changes
}

fn fed_doc_id(fed: &Fed) -> &str {
    match fed {
        Fed::Document(doc, _) => &doc.doc_id,
        Fed::Restored(row) => &row.doc_id,
        Fed::Entities(_) => "",
    }
}

/// The first changes of `pending` that concern at most `documents`
/// documents, a document's changes never split, and how many documents
/// they concern.
fn take_documents(
    pending: &mut VecDeque<InputChange>,
    documents: usize,
) -> (Vec<InputChange>, usize) {
    let mut taken: Vec<InputChange> = Vec::new();
    let mut count = 0;
    while let Some((next, _)) = pending.front() {
        let same = taken
            .last()
            .is_some_and(|(last, _)| fed_doc_id(last) == fed_doc_id(next));
        if !same {
            if count == documents {
                break;
            }
            count += 1;
        }
        taken.extend(pending.pop_front());
    }
    (taken, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origins::{Held, Record};

    fn raw(key: &str, text: &str) -> RawDocument {
        RawDocument {
            key: key.into(),
            source_uri: "rows.parquet".into(),
            title: key.into(),
            text: text.into(),
            sections: Vec::new(),
            acl: Vec::new(),
        }
    }

    fn change(key: &str, text: &str, diff: isize) -> InputChange {
        (Fed::Document(Document::new(raw(key, text), 1), 0), diff)
    }

    fn title(fed: &Fed) -> &str {
        match fed {
            Fed::Document(doc, _) => &doc.title,
            _ => "",
        }
    }

    fn documents_of(epoch: &[InputChange]) -> Vec<(&str, isize)> {
        epoch.iter().map(|(f, diff)| (title(f), *diff)).collect()
    }

    #[test]
    fn a_file_of_many_documents_is_sent_a_few_documents_at_a_time() {
        let mut fed: Vec<InputChange> =
            (0..5).map(|i| change(&format!("new{i}"), "n", 1)).collect();
        // An edit: the old version's retraction and the new one's insertion.
        fed.push(change("edited", "new text", 1));
        fed.push(change("edited", "old text", -1));
        let mut pending = Pending::default();
        pending.extend(fed, Vec::new());
        let epochs: Vec<Vec<InputChange>> = std::iter::from_fn(|| {
            (!pending.is_empty()).then(|| pending.take(2, &Origins::default()))
        })
        .map(|taken| taken.expect("in hand"))
        .collect();
        let documents = |epoch: &Vec<InputChange>| {
            let mut ids: Vec<&str> = epoch.iter().map(|(f, _)| fed_doc_id(f)).collect();
            ids.dedup();
            ids.len()
        };
        assert_eq!(epochs.iter().map(documents).collect::<Vec<_>>(), [2, 2, 2]);
        let edit = epochs
            .iter()
            .find(|e| e.iter().any(|(_, diff)| *diff < 0))
            .unwrap();
        let diffs: Vec<isize> = (edit.iter())
            .filter(|(f, _)| matches!(f, Fed::Document(d, _) if d.title == "edited"))
            .map(|(_, diff)| *diff)
            .collect();
        assert_eq!(diffs, [-1, 1], "the retraction first, in the same epoch");
    }

    #[test]
    fn documents_read_later_come_as_taken_with_what_they_replace() {
        let rows: Vec<RawDocument> = (0..6)
            .map(|i| raw(&format!("row{i}"), &format!("text {i}")))
            .collect();
        let read = std::cell::Cell::new(0);
        let counted = rows
            .clone()
            .into_iter()
            .inspect(|_| read.set(read.get() + 1));
        let record = |i: usize| Record::of(&Document::new(rows[i].clone(), 2), 7);
        let origins = origins_of("rows.parquet", (0..6).map(record).collect());
        let mut later = ReadLater::new(
            "",
            "rows.parquet".into(),
            Box::new(counted),
            "rows.parquet".into(),
        );
        // Rows 1 and 4 changed: 4 replaces a version, 1 is new.
        later.want(1);
        later.want(4);
        let doc_id = record(4).doc_id;
        assert!(later.inserts(&doc_id, &origins) && !later.inserts(&record(0).doc_id, &origins));
        later.replaces(doc_id.to_string(), change("row4", "old text", -1));
        let mut pending = Pending::default();
        pending.extend(vec![change("ready", "r", 1)], vec![later]);
        let first = pending.take(2, &origins).unwrap();
        assert_eq!(documents_of(&first), [("ready", 1), ("row1", 1)]);
        assert_eq!(read.get(), 2, "the file is read no further than taken");
        let second = pending.take(2, &origins).unwrap();
        assert_eq!(documents_of(&second), [("row4", -1), ("row4", 1)]);
        let Fed::Document(inserted, seen) = &second[1].0 else {
            panic!("a document")
        };
        assert_eq!(
            (inserted.text.as_str(), inserted.version, *seen),
            ("text 4", 2, 7)
        );
        assert!(pending.take(2, &origins).unwrap().is_empty() && pending.is_empty());
    }

    /// Origins that hold `origin`, with `records`.
    fn origins_of(origin: &str, records: Vec<Record>) -> Origins {
        let mut origins = Origins::default();
        let held = Held {
            records,
            ..Held::default()
        };
        origins.update(origin, Some(held));
        origins
    }

    #[test]
    fn a_document_changed_since_it_was_read_stops_the_round() {
        let as_read = Record::of(&Document::new(raw("row0", "as read"), 1), 0);
        let origins = origins_of("rows.parquet", vec![as_read]);
        let mut later = ReadLater::new(
            "",
            "rows.parquet".into(),
            Box::new(std::iter::once(raw("row0", "edited since"))),
            "rows.parquet".into(),
        );
        later.want(0);
        let mut pending = Pending::default();
        pending.extend(Vec::new(), vec![later]);
        assert!(matches!(
            pending.take(8, &origins),
            Err(IndexError::ChangedWhileIndexed { .. })
        ));
    }
}
