//! An indexing process (process 0 of a cluster): it opens the memory where
//! its last checkpoint left it, then runs rounds. A round feeds the dataflow
//! what changed, epoch by epoch, commits the rows it staged with the model's
//! calls and a checkpoint, and reads its summary back from the tables.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use memweave_analytics::metrics::memory_gauges;
use memweave_operators::build::Document;
use memweave_schemas::{CheckpointRow, DocumentRow, ErrorRow, MemoryRow, Table};

use super::checkpoint::{Previous, previous_tables};
use super::commit::{RoundCommit, collect_garbage, commit};
use super::engine::Engine;
use super::files::FileRounds;
use super::pending::{Pending, ReadLater};
use super::restore::{restore, stored_rows};
use super::shared::{OtherSources, source_root};
use super::summary::summary;
use super::versions::DocumentVersions;
use super::{
    Carried, Fresh, INTERRUPT_PATIENCE, IndexOptions, IndexSummary, Reader, RoundInput,
    RoundSource, Routed, SourceContext, Stages, Update, Updates,
};
use crate::IndexError;
use crate::dataflow::Fed;
use crate::metrics::IndexMetrics;
use crate::origins::{Content, Held, Origins, Record};
use crate::positions::SourcePositions;
use crate::progress::Progress;
use crate::source::Source;
use crate::workers::InputChange;
use crate::write::StagedPart;

/// Files (or messages) each worker gets per input epoch: small enough that
/// progress is smooth and memory stays bounded, large enough that epochs are cheap.
const ORIGINS_PER_EPOCH: usize = 8;
/// Documents each worker gets per input epoch: a file of many (a dataset, a
/// mailbox) is spread over epochs and workers as a folder of files would be,
/// so that one file does not put all its documents in flight at once.
const DOCUMENTS_PER_EPOCH: usize = ORIGINS_PER_EPOCH;
/// An indexing process: the model, the running dataflow workers, and what the
/// tables hold.
pub struct Indexer {
    engine: Engine,
    /// What `/metrics` shows, with `--metrics-listen`.
    metrics: Option<Arc<IndexMetrics>>,
    options: IndexOptions,
    /// What the dataflow holds, by origin.
    origins: Origins,
    /// The `documents` table's version at the last checkpoint: where texts to
    /// retract or carry over are read.
    documents_version: Option<u64>,
    /// The source's own errors, of no origin (files skipped for their type).
    source_errors: Vec<ErrorRow>,
    /// Where every source of the memory stands: the last checkpoint's, this
    /// source's updated as each round commits.
    positions: SourcePositions,
    /// What the memory holds of other sources than this run's.
    others: OtherSources,
    previous: Option<Previous>,
    /// The checkpoint whose documents' states the dataflow is still to be
    /// restored from: at the first round with changes.
    restore_from: Option<CheckpointRow>,
    round: u64,
    versions: DocumentVersions,
}

impl std::fmt::Debug for Indexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Indexer")
            .field("tables", &self.engine.store().root())
            .field("round", &self.round)
            .finish_non_exhaustive()
    }
}

impl Indexer {
    /// Opens the tables (rolling back what a crashed run wrote after its last
    /// checkpoint), the model and the embedder, and starts the workers. In a
    /// cluster, this is process 0; the others run [`compute`].
    pub fn open(options: &IndexOptions) -> Result<Indexer, IndexError> {
        if options.cluster.process != 0 {
            return Err(IndexError::NotIndexing {
                process: options.cluster.process,
            });
        }
        let engine = Engine::start(options)?;
        let mut previous = engine
            .block_on(previous_tables(engine.store(), engine.reads_states_of()))
            .map_err(|e| IndexError::Checkpoint {
                root: engine.store().root().to_string(),
                source: Box::new(e),
            })?;
        let mut positions = (previous.as_ref())
            .map(|p| SourcePositions::parse(&p.checkpoint.source_positions))
            .unwrap_or_default();
        let others = match &mut previous {
            Some(previous) => OtherSources::take(
                previous,
                &mut positions,
                &options.source_name,
                &source_root(options)?,
                engine.feeds(),
            ),
            None => OtherSources::default(),
        };
        let versions = DocumentVersions::of(previous.iter().flat_map(|p| &p.documents));
        let documents_version = previous
            .as_ref()
            .and_then(|p| p.checkpoint.version_of(Table::Documents));
        let metrics = match options.metrics_listen {
            Some(address) => Some(engine.serve_metrics(address)?),
            None => None,
        };
        let restore_from = previous
            .as_ref()
            .filter(|p| p.restorable)
            .map(|p| p.checkpoint.clone());
        Ok(Indexer {
            metrics,
            options: options.clone(),
            previous,
            restore_from,
            engine,
            origins: Origins::default(),
            documents_version,
            source_errors: Vec::new(),
            positions,
            others,
            round: 0,
            versions,
        })
    }

    /// One round over a file or object-store source: files whose version is the
    /// one last indexed are not read again; changed and new files are read and
    /// their documents replace the old; removed files' documents are retracted.
    pub fn index_files(&mut self, source: &Source) -> Result<IndexSummary, IndexError> {
        let read = self.options.source_options.read.clone();
        let summary = self.run(&mut FileRounds::once(source, read), |_| {})?;
        Ok(summary.expect("a listing makes one round"))
    }

    /// Rounds until `source` has no more, each reported once committed;
    /// returns the last round's summary.
    pub(super) fn run(
        &mut self,
        source: &mut dyn RoundSource,
        mut report: impl FnMut(&IndexSummary),
    ) -> Result<Option<IndexSummary>, IndexError> {
        let mut last = None;
        loop {
            // A statement of its own: the input (and what it borrows of the
            // source) is gone before the source hears of the commit.
            let Some(input) = source.next_round(&self.source_context())? else {
                break;
            };
            let mut summary = self.round(input)?;
            source.committed(&mut summary);
            report(&summary);
            // The token budget is spent: what was done is committed, and a
            // later round would only refuse its calls.
            let spent = summary.cache.refused > 0;
            last = Some(summary);
            if spent {
                break;
            }
        }
        Ok(last)
    }

    /// What a source sees of this process while it makes a round.
    pub(super) fn source_context(&self) -> SourceContext<'_> {
        SourceContext {
            runtime: self.engine.runtime(),
            cache: self.engine.cache(),
            feeds: self.engine.feeds(),
            source_name: &self.options.source_name,
            previous: self.previous.as_ref(),
            positions: (self.previous.as_ref())
                .and_then(|_| self.positions.of(&self.options.source_name)),
            other_origins: &self.others.origins,
            origins: &self.origins,
            versions: &self.versions,
        }
    }

    /// Runs one round of `input`: feeds its updates epoch by epoch, waits for
    /// the dataflow, and commits.
    fn round(&mut self, input: RoundInput<'_>) -> Result<IndexSummary, IndexError> {
        let RoundInput {
            mut updates,
            mut carried,
            positions,
            source_errors,
            reader,
            started,
        } = input;
        let reader = reader.as_deref();
        let round = self.round;
        carried.append(&mut self.others.carried);
        // A process's first round rebuilds every document, its rows replacing
        // the tables', unless it can restore the last checkpoint's states.
        let replace = round == 0 && !self.previous.as_ref().is_some_and(|p| p.restorable);
        if replace {
            for (origin, Routed { peer, input }) in carried {
                updates
                    .entry(origin)
                    .or_insert(Routed::to(peer, Update::Carried(input)));
            }
        } else if !carried.is_empty() {
            self.carry_over(carried, source_errors.is_some(), &mut updates);
        }
        let read = started.elapsed();
        let mut ingest_errors: HashMap<ErrorRow, isize> = HashMap::new();
        if let Some(source_errors) = source_errors {
            count(&mut ingest_errors, &self.source_errors, -1);
            count(&mut ingest_errors, &source_errors, 1);
            self.source_errors = source_errors;
        }
        let progress = Progress::new(updates.len() as u64, self.options.interactive);
        self.engine.begin_round(Arc::clone(&progress))?;
        // Epoch by epoch, every worker: one left behind would hold back
        // everyone's progress, and with it their flow control. Each epoch's
        // files are read as it is fed, so texts are held only while in flight.
        let feeds = self.engine.feeds();
        let mut queues: Vec<Vec<(String, Update)>> = (0..feeds).map(|_| Vec::new()).collect();
        for (
            key,
            Routed {
                peer,
                input: update,
            },
        ) in updates
        {
            queues[peer].push((key, update));
        }
        let mut queues: Vec<_> = queues.into_iter().map(Vec::into_iter).collect();
        let mut pending = Pending::default();
        // The dataflow of a new process is restored once something changes:
        // restoring costs less than any rebuild, but more than nothing, and
        // a file touched but not changed (a copy, a checkout) changes
        // nothing. Until then the epochs fed are empty and wait here, as the
        // restore's epochs come before the round's. Documents the checkpoint
        // left unfinished are taken out at once, even by a round that
        // changes nothing else.
        let unfinished = (self.previous.as_ref()).is_some_and(|p| !p.unfinished.is_empty());
        let mut waiting = Some(Vec::new());
        let mut restored = Restored::default();
        let mut epoch = 0;
        // The origins of what is pending.
        let mut origins_fed = 0;
        while !pending.is_empty() || queues.iter().any(|q| q.len() > 0) {
            for (peer, queue) in queues.iter_mut().enumerate() {
                if pending.is_empty() {
                    let batch: Vec<(String, Update)> = queue.take(ORIGINS_PER_EPOCH).collect();
                    origins_fed = batch.len();
                    let (ready, later) = self.feed(batch, &mut ingest_errors, reader)?;
                    let inserted = ready.iter().filter(|(_, diff)| *diff > 0).count();
                    let read_later: usize = later.iter().map(ReadLater::len).sum();
                    progress.expect((inserted + read_later) as u64);
                    pending.extend(ready, later);
                }
                let changes = pending.take(DOCUMENTS_PER_EPOCH, &self.origins)?;
                // The origins count as done with the epoch of their last documents.
                let origins = if pending.is_empty() {
                    std::mem::take(&mut origins_fed)
                } else {
                    0
                };
                let fed = FedEpoch {
                    epoch,
                    peer,
                    origins,
                    changes,
                };
                let Some(mut sent) = waiting.take_if(|_| unfinished || !fed.changes.is_empty())
                else {
                    match &mut waiting {
                        Some(waiting) => waiting.push(fed),
                        None => self.send(round, fed)?,
                    }
                    continue;
                };
                sent.push(fed);
                restored = self.restore_for(round, &mut sent)?;
                sent.into_iter().try_for_each(|fed| self.send(round, fed))?;
            }
            epoch += 1;
        }
        for fed in waiting.into_iter().flatten() {
            self.send(round, fed)?;
        }
        let Restored { bytes, retracted } = restored;
        let mut parts = self.engine.finish_round(round)?;
        parts.extend(retracted);
        let build = started.elapsed() - read;
        progress.finish();
        if self.engine.cache().is_closing() {
            // Interrupted: documents whose calls were refused are not built, so
            // this round must not be committed. Save the calls and stop.
            (self.engine).block_on(self.engine.cache().close(INTERRUPT_PATIENCE))?;
            return Err(IndexError::Interrupted);
        }
        ingest_errors.retain(|_, diff| *diff != 0);
        if !ingest_errors.is_empty() {
            let batch = ingest_errors
                .into_iter()
                .map(|(row, diff)| (MemoryRow::Error(row), diff))
                .collect();
            parts.push(self.engine.stage(batch)?);
        }
        self.previous = None;
        tracing::info!(round, "committing the round");
        self.positions.set(&self.options.source_name, positions);
        let committing = RoundCommit {
            replace,
            parts,
            retention: self.options.retention,
            evicts: self.options.cluster.processes() == 1,
            // No checkpoint yet is no documents version yet.
            first: self.documents_version.is_none(),
            versions: &self.versions,
            positions: self.positions.record(),
        };
        let (checkpoint, changes) = (self.engine)
            .block_on(commit(&self.engine, committing))
            .map_err(|e| IndexError::Commit {
                root: self.engine.store().root().to_string(),
                source: Box::new(e),
            })?;
        self.round += 1;
        self.documents_version = checkpoint.version_of(Table::Documents);
        for error in &changes.errors_added {
            tracing::warn!(source = %error.source, kind = %error.kind, "{}", error.message);
        }
        let (changed, deleted) = self.versions.note(&changes, replace, &self.origins);
        if let Some(metrics) = &self.metrics {
            let memory =
                (self.engine).block_on(memory_gauges(self.engine.store(), checkpoint.epoch));
            match memory {
                Ok(memory) => metrics.committed(checkpoint.epoch, memory),
                Err(e) => tracing::warn!("the memory's report for /metrics failed: {e:#}"),
            }
        }
        let mut summary = summary(&self.engine, &checkpoint, started)?;
        summary.changed = changed;
        summary.deleted = deleted;
        summary.rows_written = changes.rows_written;
        summary.restored_bytes = bytes;
        let pinned = self.restore_from.as_ref().map(|c| c.epoch);
        summary.collected = collect_garbage(&self.engine, &self.options.retention, pinned);
        summary.stages = Stages {
            read,
            build,
            write: summary.wall - read - build,
        };
        Ok(summary)
    }

    /// Takes `carried` as what the dataflow holds (the tables hold its rows,
    /// and the restore will give the dataflow its state): the origins are
    /// set, no change is fed. The checkpoint's ingestion errors no origin
    /// carries are the source's own (`own_errors`: a source that has them).
    /// The checkpoint's unfinished documents are fed again: their origins
    /// are taken without them, and carried into `updates` (unless they
    /// changed) so that the round inserts them.
    fn carry_over(&mut self, carried: Carried, own_errors: bool, updates: &mut Updates) {
        let Some(previous) = &self.previous else {
            return;
        };
        if own_errors {
            let held: HashSet<&ErrorRow> = carried.values().flat_map(|c| &c.input.errors).collect();
            self.source_errors = (previous.ingest_errors.iter())
                .filter(|e| !held.contains(e))
                .cloned()
                .collect();
        }
        let unfinished = |r: &Record| previous.unfinished.contains(&*r.doc_id);
        for (origin, Routed { peer, input: held }) in carried {
            // The moves are what the tables and the restored dataflow hold.
            if !held.records.iter().any(unfinished) {
                self.origins.update(&origin, Some(held));
                continue;
            }
            let finished = Held {
                records: (held.records.iter())
                    .filter(|r| !unfinished(r))
                    .cloned()
                    .collect(),
                ..held.clone()
            };
            self.origins.update(&origin, Some(finished));
            updates
                .entry(origin)
                .or_insert(Routed::to(peer, Update::Carried(held)));
        }
    }

    /// Restores the dataflow for `round`, whose first epochs are `sent`, if
    /// this process has not: the checkpoint's unfinished documents leave the
    /// cross-document stages (their states) and the tables (their rows, as
    /// the tables hold them, retracted by key: building them again now would
    /// not fail as they did) before anything of the round reaches them.
    fn restore_for(&mut self, round: u64, sent: &mut [FedEpoch]) -> Result<Restored, IndexError> {
        let Some(checkpoint) = self.restore_from.take() else {
            return Ok(Restored::default());
        };
        let unfinished = (self.previous.as_ref()).map(|p| &p.unfinished);
        let (bytes, unfinished) = restore(&self.engine, round, &checkpoint, unfinished)?;
        let mut retracted = Vec::new();
        if let (false, Some(previous)) = (unfinished.is_empty(), &self.previous) {
            let store = self.engine.store();
            let rows =
                (self.engine).block_on(stored_rows(store, &previous.checkpoint, &unfinished))?;
            retracted.push(self.engine.stage(rows)?);
        }
        if let Some(first) = sent.first_mut() {
            let states = unfinished.into_iter().map(|s| (Fed::Restored(s.fed), -1));
            first.changes.extend(states);
        }
        Ok(Restored { bytes, retracted })
    }

    fn send(&mut self, round: u64, fed: FedEpoch) -> Result<(), IndexError> {
        let FedEpoch {
            epoch,
            peer,
            origins,
            changes,
        } = fed;
        self.engine.send(round, epoch, peer, origins, changes)
    }

    /// One epoch's share of a round: reads its files, updates the origins, and
    /// returns the dataflow's input changes whose texts are in hand, and the
    /// origins whose documents' texts are read as they are sent. Texts not
    /// read now come from the `documents` table as last committed (documents
    /// carried over, and every version retracted) or from their origin,
    /// read again as they are sent: a dataset's rows (read without their
    /// texts), and a claim that has just become its id's document.
    fn feed<'r>(
        &mut self,
        batch: Vec<(String, Update)>,
        errors: &mut HashMap<ErrorRow, isize>,
        reader: Option<&'r dyn Reader>,
    ) -> Result<(Vec<InputChange>, Vec<ReadLater<'r>>), IndexError> {
        let named: Vec<&str> = batch
            .iter()
            .filter(|(_, update)| matches!(update, Update::Read))
            .map(|(key, _)| key.as_str())
            .collect();
        let mut read = match (named.is_empty(), reader) {
            (true, _) => HashMap::new(),
            (false, Some(reader)) => reader.read(&self.source_context(), named),
            (false, None) => return Err(IndexError::NothingReadsOrigins),
        };
        // Texts (and sections) read now, by document id and source; the
        // origins read without them.
        let mut texts: HashMap<(String, String), Content> = HashMap::new();
        let mut texts_later: HashSet<String> = HashSet::new();
        let (mut retract, mut insert) = (Vec::new(), Vec::new());
        for (key, update) in batch {
            let fresh = match update {
                Update::Gone => None,
                Update::Carried(held) => Some(held),
                Update::Ready(fresh) => Some(hold(fresh, &mut texts)),
                Update::Read => read.remove(&key).map(|mut fresh| {
                    if !fresh.unread.is_empty() {
                        texts_later.insert(key.clone());
                    }
                    if let Some(before) = self.origins.get(&key) {
                        cite_unmoved_as_before(&mut fresh, before);
                    }
                    hold(fresh, &mut texts)
                }),
            };
            let moves = self.origins.update(&key, fresh);
            for (row, diff) in moves.errors {
                *errors.entry(row).or_insert(0) += diff;
            }
            retract.extend(moves.retract);
            insert.extend(moves.insert);
        }
        let in_hand =
            |r: &Record| texts.contains_key(&(r.doc_id.to_string(), r.source_uri.to_string()));
        let from_origin = |r: &Record| {
            (self.origins.claim_of(r)).is_some_and(|(origin, _)| texts_later.contains(&**origin))
        };
        let wanted: Vec<String> = retract
            .iter()
            .chain(insert.iter().filter(|r| !in_hand(r) && !from_origin(r)))
            .map(|r| r.doc_id.to_string())
            .collect();
        let stored: HashMap<String, DocumentRow> = match (wanted.is_empty(), self.documents_version)
        {
            (false, Some(version)) => (self.engine)
                .block_on(
                    self.engine
                        .store()
                        .rows_with_keys::<DocumentRow>(version, &wanted),
                )?
                .into_iter()
                .map(|row| (row.doc_id.clone(), row))
                .collect(),
            _ => HashMap::new(),
        };
        let stored_text = |record: &Record| {
            stored
                .get(&*record.doc_id)
                .filter(|row| Record::of_row(row) == *record)
                .map(Content::of_row)
        };
        let mut ready = Vec::with_capacity(retract.len() + insert.len());
        let mut later: BTreeMap<String, ReadLater<'r>> = BTreeMap::new();
        for record in insert {
            let key = (record.doc_id.to_string(), record.source_uri.to_string());
            let text = texts
                .remove(&key)
                .or_else(|| (!from_origin(&record)).then(|| stored_text(&record))?);
            if let Some(text) = text {
                ready.push((fed(record.with_text(text)), 1));
                continue;
            }
            let no_text = || IndexError::NoText {
                doc_id: record.doc_id.to_string(),
                source_uri: record.source_uri.to_string(),
            };
            let (origin, place) = self.origins.claim_of(&record).ok_or_else(no_text)?;
            if !later.contains_key(&**origin) {
                let documents = (reader.and_then(|r| r.documents(origin))).ok_or_else(no_text)?;
                let source_uri = record.source_uri.to_string();
                let name = &self.options.source_name;
                later.insert(
                    origin.to_string(),
                    ReadLater::new(name, source_uri, documents, Arc::clone(origin)),
                );
            }
            later.get_mut(&**origin).expect("added").want(place);
        }
        for record in retract {
            let text = stored_text(&record).ok_or_else(|| IndexError::NotStored {
                version: record.version,
                doc_id: record.doc_id.to_string(),
                source_uri: record.source_uri.to_string(),
            })?;
            let retraction = (fed(record.with_text(text)), -1);
            match (later.values_mut()).find(|l| l.inserts(&record.doc_id, &self.origins)) {
                Some(origin) => origin.replaces(record.doc_id.to_string(), retraction),
                None => ready.push(retraction),
            }
        }
        Ok((ready, later.into_values().collect()))
    }
}

/// One worker's share of one epoch of a round, as fed.
struct FedEpoch {
    epoch: u64,
    peer: usize,
    origins: usize,
    changes: Vec<InputChange>,
}

/// What restoring a new process's dataflow read, and staged.
#[derive(Default)]
struct Restored {
    /// Bytes of documents' states.
    bytes: u64,
    /// The unfinished documents' rows, retracted.
    retracted: Vec<StagedPart>,
}

/// A document version as the dataflow's input takes it.
fn fed((doc, seen): (Document, i64)) -> Fed {
    Fed::Document(doc, seen)
}

/// `fresh`, each of its documents that differs from what `before` held only
/// by its place citing the place `before` does: a file read again at
/// another place (an archive moved, then changed there) then rebuilds the
/// documents that changed, not all of them, and a document keeps citing
/// where it was last read until it changes, as a moved file's do.
fn cite_unmoved_as_before(fresh: &mut Fresh, before: &Held) {
    // An origin's records share its place: read where it was read before
    // (the usual case), nothing moved and no row need be compared.
    let read_at = (fresh
        .records
        .first()
        .map(|(doc, _)| doc.source_uri.as_str()))
    .or_else(|| fresh.unread.first().map(|record| &*record.source_uri));
    if (before.records.iter()).all(|record| Some(&*record.source_uri) == read_at) {
        return;
    }
    let held: HashMap<&str, &Record> = (before.records.iter())
        .map(|record| (&*record.doc_id, record))
        .collect();
    let place_before = |record: &Record| {
        let held = *held.get(&*record.doc_id)?;
        let moved = Record {
            source_uri: Arc::clone(&held.source_uri),
            ..record.clone()
        };
        (held.source_uri != record.source_uri && moved == *held)
            .then(|| Arc::clone(&held.source_uri))
    };
    for (doc, seen) in &mut fresh.records {
        if let Some(place) = place_before(&Record::of(doc, *seen)) {
            doc.source_uri = place.to_string();
        }
    }
    for record in &mut fresh.unread {
        if let Some(place) = place_before(record) {
            record.source_uri = place;
        }
    }
}

/// An origin's input as held: its documents without their texts, which go to
/// `texts` by document id and source.
fn hold(fresh: Fresh, texts: &mut HashMap<(String, String), Content>) -> Held {
    let mut records: Vec<Record> = fresh
        .records
        .into_iter()
        .map(|(mut doc, seen)| {
            let record = Record::of(&doc, seen);
            let key = (
                std::mem::take(&mut doc.doc_id),
                std::mem::take(&mut doc.source_uri),
            );
            texts.insert(key, Content::of(doc));
            record
        })
        .collect();
    records.extend(fresh.unread);
    Record::share_sources(&mut records);
    Held {
        version: fresh.version,
        records,
        errors: fresh.errors,
    }
}

fn count(errors: &mut HashMap<ErrorRow, isize>, rows: &[ErrorRow], diff: isize) {
    for row in rows {
        *errors.entry(row.clone()).or_insert(0) += diff;
    }
}
