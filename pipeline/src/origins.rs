//! What the dataflow holds, origin by origin (a file, or a streamed
//! document), and which version each document id stands for: the main
//! thread's record of the input in ids, hashes and metadata. Texts are not
//! kept here: a document's text is read when it is fed and, to retract it, read
//! back from the `documents` table.
//!
//! Several origins may claim one document id (two JSON Lines records with the
//! same id); the claim with the first source (by URI) is the document, the
//! others are `duplicate_id` errors. Deciding that here, rather than in the
//! dataflow, keeps texts out of the dataflow's arrangements.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use memweave_ingest::kind::DUPLICATE_ID;
use memweave_operators::build::Document;
use memweave_schemas::{DocumentRow, ErrorRow, Section, hash128};

use crate::write::version_hash;

/// One version of one document, as held: everything but its text. Its
/// strings are shared: the origin's record, its claim and the claim's key
/// are one copy of each, not three (on an archive of millions of short
/// documents these records are most of what the main thread keeps).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub doc_id: Arc<str>,
    pub version: u64,
    /// Its content hash's [`version_hash`]: the 64 hex digits were a heap
    /// block of 80 bytes a document, and the text it is fed with brings
    /// them along.
    pub content_hash: u128,
    pub source_uri: Arc<str>,
    /// Its title's [`hash128`]: a retitled document is a changed record,
    /// and the title itself comes with the text (a short document's title,
    /// its subject line, was a heap block of 64 to 80 bytes a document).
    pub title: u128,
    /// Its access labels, shared by an origin's records that carry the same.
    pub acl: Arc<[String]>,
    /// When this content was first seen.
    pub seen: i64,
}

impl Record {
    /// The record of `doc`.
    pub fn of(doc: &Document, seen: i64) -> Record {
        Record {
            doc_id: doc.doc_id.as_str().into(),
            version: doc.version,
            content_hash: version_hash(&doc.content_hash),
            source_uri: doc.source_uri.as_str().into(),
            title: hash128(doc.title.as_bytes()),
            acl: doc.acl.as_slice().into(),
            seen,
        }
    }

    /// Makes each record's source and labels the copies its predecessor
    /// holds where they are the same: an origin's records (a file's rows)
    /// share one source, which was a copy a document, most of a short
    /// document's record, and mostly a few label sets.
    pub fn share_sources(records: &mut [Record]) {
        let mut previous: Option<(Arc<str>, Arc<[String]>)> = None;
        for record in records {
            if let Some((source, acl)) = &previous {
                if *source == record.source_uri {
                    record.source_uri = Arc::clone(source);
                }
                if *acl == record.acl {
                    record.acl = Arc::clone(acl);
                }
            }
            previous = Some((Arc::clone(&record.source_uri), Arc::clone(&record.acl)));
        }
    }

    /// The record of a document the tables hold.
    pub fn of_row(row: &DocumentRow) -> Record {
        Record {
            doc_id: row.doc_id.as_str().into(),
            version: row.version,
            content_hash: version_hash(&row.content_hash),
            source_uri: row.source_uri.as_str().into(),
            title: hash128(row.title.as_bytes()),
            acl: row.acl.as_slice().into(),
            seen: row.ingested_at,
        }
    }

    /// The dataflow's input record, given the document's content (of which
    /// this record keeps hashes).
    pub fn with_text(&self, content: Content) -> (Document, i64) {
        let doc = Document {
            doc_id: self.doc_id.to_string(),
            version: self.version,
            content_hash: content.content_hash,
            source_uri: self.source_uri.to_string(),
            title: content.title,
            text: content.body.0,
            sections: content.body.1,
            acl: self.acl.to_vec(),
        };
        (doc, self.seen)
    }
}

/// A document's text and its sections.
pub type Body = (String, Vec<Section>);

/// What a record leaves out of its document, read when it is fed and read
/// back from the `documents` table to retract it.
#[derive(Debug)]
pub struct Content {
    pub content_hash: String,
    pub title: String,
    pub body: Body,
}

impl Content {
    /// `doc`'s content (its id, source and labels dropped: its record keeps
    /// them).
    pub fn of(doc: Document) -> Content {
        Content {
            content_hash: doc.content_hash,
            title: doc.title,
            body: (doc.text, doc.sections),
        }
    }

    /// The content of the document `row` holds.
    pub fn of_row(row: &DocumentRow) -> Content {
        Content {
            content_hash: row.content_hash.clone(),
            title: row.title.clone(),
            body: (row.text.clone(), row.sections.clone()),
        }
    }
}

/// One origin's share of the input: the document versions it holds and the
/// ingestion errors it caused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Held {
    /// The file's version (ETag, size@mtime) when it was read.
    pub version: Option<String>,
    pub records: Vec<Record>,
    pub errors: Vec<ErrorRow>,
}

/// How one origin's change moves the dataflow's input and the errors table.
#[derive(Debug, Default, PartialEq)]
pub struct Moves {
    /// Versions the dataflow holds and must let go of.
    pub retract: Vec<Record>,
    /// Versions the dataflow must take.
    pub insert: Vec<Record>,
    /// Rows of the errors table that come (+1) and go (-1): ingestion errors
    /// and duplicate ids.
    pub errors: HashMap<ErrorRow, isize>,
}

/// Every origin's input, and the claims on each document id.
#[derive(Debug, Default)]
pub struct Origins {
    held: BTreeMap<Arc<str>, Held>,
    /// By document id and source URI: the origin that claims it, and the
    /// version. One map for all ids: a map per id cost a B-tree node (room
    /// for eleven claims) for each document of the archive, ~2 KB apiece.
    claims: BTreeMap<ClaimKey, Claim>,
}

/// The origin that claims a version, and the version's place among that
/// origin's records: a copy of the record here cost 96 bytes a document
/// beside the origin's own.
type Claim = (Arc<str>, usize);

impl Origins {
    pub fn get(&self, origin: &str) -> Option<&Held> {
        self.held.get(origin)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.held.keys().map(|origin| &**origin)
    }

    /// Replaces `origin`'s input with `new` (`None`: the origin is gone).
    pub fn update(&mut self, origin: &str, new: Option<Held>) -> Moves {
        let (origin, old) = match self.held.remove_entry(origin) {
            Some((origin, old)) => (origin, old),
            None => (Arc::from(origin), Held::default()),
        };
        let mut moves = Moves::default();
        if new.as_ref() == Some(&old) {
            self.held.insert(origin, old);
            return moves;
        }
        let new = new.unwrap_or_default();
        count(&mut moves.errors, &old.errors, -1);
        count(&mut moves.errors, &new.errors, 1);
        let affected: BTreeSet<Arc<str>> = old
            .records
            .iter()
            .chain(&new.records)
            .map(|r| Arc::clone(&r.doc_id))
            .collect();
        let before: Vec<(Option<Record>, Vec<ErrorRow>)> = (affected.iter())
            .map(|id| self.claimed(id, (&origin, &old.records)))
            .collect();
        for record in &old.records {
            let key = claim_key(record);
            if self.claims.get(&key).is_some_and(|(by, _)| *by == origin) {
                self.claims.remove(&key);
            }
        }
        for (place, record) in new.records.iter().enumerate() {
            self.claims
                .insert(claim_key(record), (Arc::clone(&origin), place));
        }
        for (id, (was, was_errors)) in affected.iter().zip(before) {
            let (now, now_errors) = self.claimed(id, (&origin, &new.records));
            count(&mut moves.errors, &was_errors, -1);
            count(&mut moves.errors, &now_errors, 1);
            if was != now {
                moves.retract.extend(was);
                moves.insert.extend(now);
            }
        }
        moves.errors.retain(|_, diff| *diff != 0);
        if new != Held::default() {
            self.held.insert(origin, new);
        }
        moves
    }

    /// The version `doc_id` stands for and the errors of the claims that lost.
    /// `updating` is the origin being updated, out of `held` meanwhile, with
    /// the records its claims point into.
    fn claimed(
        &self,
        doc_id: &str,
        updating: (&str, &[Record]),
    ) -> (Option<Record>, Vec<ErrorRow>) {
        let records_of = |origin: &str| -> &[Record] {
            if origin == updating.0 {
                updating.1
            } else {
                self.held.get(origin).map_or(&[], |held| &held.records)
            }
        };
        let mut claims =
            (self.claims_on(doc_id)).filter_map(|(origin, place)| records_of(origin).get(place));
        let winner = claims.next().cloned();
        let errors = claims
            .map(|loser| duplicate_error(loser, winner.as_ref().map_or("", |w| &w.source_uri)))
            .collect();
        (winner, errors)
    }

    /// The origin whose claim `record` is, and the record's place among
    /// that origin's records.
    pub fn claim_of(&self, record: &Record) -> Option<(&Arc<str>, usize)> {
        self.claims
            .get(&claim_key(record))
            .map(|(origin, place)| (origin, *place))
    }

    /// The records of `doc_id` that `origin` claims (one, unless it has the
    /// id under several sources), with their places among its records.
    pub fn records_claimed_by<'a>(
        &'a self,
        origin: &'a str,
        doc_id: &'a str,
    ) -> impl Iterator<Item = (usize, &'a Record)> + 'a {
        let records = self.held.get(origin).map_or(&[][..], |held| &held.records);
        (self.claims_on(doc_id))
            .filter(move |(by, _)| &***by == origin)
            .filter_map(|(_, place)| Some((place, records.get(place)?)))
    }

    /// The copy of `doc_id` the records claiming it hold, if any do.
    pub fn shared_id(&self, doc_id: &str) -> Option<Arc<str>> {
        let ((id, _), _) = (self.claims.range(claims_from(doc_id)..)).next()?;
        (**id == *doc_id).then(|| Arc::clone(id))
    }

    /// The claims on `doc_id`, by source: the origin of each and its
    /// record's place among that origin's records.
    fn claims_on<'a>(&'a self, doc_id: &'a str) -> impl Iterator<Item = (&'a Arc<str>, usize)> {
        self.claims
            .range(claims_from(doc_id)..)
            .take_while(move |((id, _), _)| **id == *doc_id)
            .map(|(_, (origin, place))| (origin, *place))
    }
}

/// Where a claim is kept: its id, then its source (the first source by URI
/// wins an id).
type ClaimKey = (Arc<str>, Arc<str>);

fn claim_key(record: &Record) -> ClaimKey {
    (Arc::clone(&record.doc_id), Arc::clone(&record.source_uri))
}

/// The first key a claim on `doc_id` may have.
fn claims_from(doc_id: &str) -> ClaimKey {
    (Arc::from(doc_id), Arc::from(""))
}

fn count(errors: &mut HashMap<ErrorRow, isize>, rows: &[ErrorRow], diff: isize) {
    for row in rows {
        *errors.entry(row.clone()).or_insert(0) += diff;
    }
}

fn duplicate_error(loser: &Record, winner_uri: &str) -> ErrorRow {
    ErrorRow::new(
        "ingest",
        &loser.source_uri,
        Some(loser.doc_id.to_string()),
        DUPLICATE_ID,
        &format!("document id already taken by {winner_uri}; this copy was not indexed"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(doc_id: &str, uri: &str, hash: &str) -> Record {
        Record {
            doc_id: doc_id.into(),
            version: 1,
            content_hash: version_hash(hash),
            source_uri: uri.into(),
            title: hash128(doc_id.as_bytes()),
            acl: Arc::from([]),
            seen: 0,
        }
    }

    fn held(records: Vec<Record>) -> Held {
        Held {
            version: Some("v1".into()),
            records,
            errors: Vec::new(),
        }
    }

    /// A file's rows hold one copy of its URI, and a row titled by its id
    /// one string for both; the records compare as they did.
    #[test]
    fn records_of_one_origin_share_its_source() {
        let doc = |id: &str, uri: &str, title: &str| Document {
            doc_id: id.into(),
            version: 1,
            content_hash: "h".into(),
            source_uri: uri.into(),
            title: title.into(),
            text: String::new(),
            sections: Vec::new(),
            acl: vec!["staff".into()],
        };
        let mut records = vec![
            Record::of(&doc("r1", "rows.jsonl", "r1"), 0),
            Record::of(&doc("r2", "rows.jsonl", "Second"), 0),
            Record::of(&doc("r3", "other.jsonl", "r3"), 0),
            Record::of(&doc("r4", "other.jsonl", "r4"), 0),
        ];
        let before = records.clone();
        Record::share_sources(&mut records);
        assert_eq!(records, before);
        let shared = |a: &Record, b: &Record| Arc::ptr_eq(&a.source_uri, &b.source_uri);
        assert!(shared(&records[0], &records[1]));
        assert!(!shared(&records[1], &records[2]));
        assert!(shared(&records[2], &records[3]));
        assert!(Arc::ptr_eq(&records[0].acl, &records[3].acl));
    }

    /// A record holds its title as a hash, so a document retitled (its text
    /// the same) is a changed record, and the title comes back with the text.
    #[test]
    fn a_retitled_document_is_a_changed_record_and_its_title_comes_with_its_text() {
        let doc = |title: &str| Document {
            doc_id: "r1".into(),
            version: 1,
            content_hash: "h".into(),
            source_uri: "rows.jsonl".into(),
            title: title.into(),
            text: "the text".into(),
            sections: Vec::new(),
            acl: Vec::new(),
        };
        let (first, second) = (Record::of(&doc("First"), 0), Record::of(&doc("Second"), 0));
        assert_ne!(first, second);
        assert_eq!(Record::of(&doc("First"), 0), first);
        let (fed, _) = second.with_text(Content::of(doc("Second")));
        assert_eq!(fed, doc("Second"));
    }

    #[test]
    fn an_edit_retracts_the_old_version_and_inserts_the_new() {
        let mut origins = Origins::default();
        let first = origins.update("a.txt", Some(held(vec![record("d", "a.txt", "h1")])));
        assert_eq!(first.insert, vec![record("d", "a.txt", "h1")]);
        assert!(first.retract.is_empty());
        let unchanged = origins.update("a.txt", Some(held(vec![record("d", "a.txt", "h1")])));
        assert_eq!(unchanged, Moves::default());
        let edit = origins.update("a.txt", Some(held(vec![record("d", "a.txt", "h2")])));
        assert_eq!(edit.retract, vec![record("d", "a.txt", "h1")]);
        assert_eq!(edit.insert, vec![record("d", "a.txt", "h2")]);
        let gone = origins.update("a.txt", None);
        assert_eq!(gone.retract, vec![record("d", "a.txt", "h2")]);
        assert!(origins.get("a.txt").is_none());
        assert_eq!(origins.update("a.txt", None), Moves::default());
    }

    #[test]
    fn the_first_source_keeps_a_shared_id_and_the_others_are_errors() {
        let mut origins = Origins::default();
        let b = origins.update(
            "b.jsonl",
            Some(held(vec![record("same", "b.jsonl:1", "hb")])),
        );
        assert_eq!(b.insert.len(), 1);
        // a.jsonl sorts first: it takes the id; b's copy becomes an error.
        let a = origins.update(
            "a.jsonl",
            Some(held(vec![record("same", "a.jsonl:1", "ha")])),
        );
        assert_eq!(a.retract, vec![record("same", "b.jsonl:1", "hb")]);
        assert_eq!(a.insert, vec![record("same", "a.jsonl:1", "ha")]);
        let errors: Vec<(&str, &str, isize)> = a
            .errors
            .iter()
            .map(|(e, d)| (e.kind.as_str(), e.source.as_str(), *d))
            .collect();
        assert_eq!(errors, vec![("duplicate_id", "b.jsonl:1", 1)]);
        assert_eq!(
            (origins.claim_of(&record("same", "b.jsonl:1", "hb"))).map(|(o, at)| (&**o, at)),
            Some(("b.jsonl", 0))
        );
        // a goes: b's copy is the document again, and its error goes.
        let gone = origins.update("a.jsonl", None);
        assert_eq!(gone.insert, vec![record("same", "b.jsonl:1", "hb")]);
        assert_eq!(gone.errors.values().copied().collect::<Vec<_>>(), vec![-1]);
    }

    /// A claim points at its record's place among its origin's records:
    /// when an edit moves the record, the claim follows it.
    #[test]
    fn a_claim_follows_its_record_when_the_origin_changes() {
        let mut origins = Origins::default();
        let a = |records| Some(held(records));
        origins.update(
            "a.jsonl",
            a(vec![
                record("x", "a.jsonl", "hx"),
                record("y", "a.jsonl", "ha"),
            ]),
        );
        let b = origins.update("b.jsonl", a(vec![record("y", "b.jsonl", "hb")]));
        assert!(b.insert.is_empty());
        assert_eq!(b.errors.len(), 1);
        // x goes: a's y moves to the first place and keeps the id.
        let edit = origins.update("a.jsonl", a(vec![record("y", "a.jsonl", "ha")]));
        assert_eq!(edit.retract, vec![record("x", "a.jsonl", "hx")]);
        assert!(edit.insert.is_empty());
        assert!(edit.errors.is_empty());
        // a's y changes in its new place: b's copy still loses to it.
        let changed = origins.update("a.jsonl", a(vec![record("y", "a.jsonl", "h2")]));
        assert_eq!(changed.retract, vec![record("y", "a.jsonl", "ha")]);
        assert_eq!(changed.insert, vec![record("y", "a.jsonl", "h2")]);
        assert!(changed.errors.is_empty());
        let gone = origins.update("a.jsonl", None);
        assert_eq!(gone.retract, vec![record("y", "a.jsonl", "h2")]);
        assert_eq!(gone.insert, vec![record("y", "b.jsonl", "hb")]);
    }

    #[test]
    fn ingestion_errors_come_and_go_with_their_origin() {
        let mut origins = Origins::default();
        let error = ErrorRow::new("ingest", "x.bin", None, "binary", "NUL bytes");
        let with_error = Held {
            errors: vec![error.clone()],
            ..Held::default()
        };
        let came = origins.update("x.bin", Some(with_error));
        assert_eq!(came.errors, HashMap::from([(error.clone(), 1)]));
        let went = origins.update("x.bin", None);
        assert_eq!(went.errors, HashMap::from([(error, -1)]));
    }
}
