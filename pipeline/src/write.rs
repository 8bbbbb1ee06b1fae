//! A round's writes, made where and while the dataflow produces rows rather
//! than by one process at the round's end. Every worker of every process
//! stages its own output rows as data files of their tables as soon as it has
//! a batch (and the rest when the round's input is complete): written into the
//! shared table store, invisible to readers until a commit names them. What
//! travels to process 0 is only what was staged (the files' metadata, the keys
//! of rows removed, the documents added and removed). Process 0 commits: per
//! table, the removed keys deleted, then every staged file added in one
//! version, then the checkpoint. A process that dies before the commit leaves
//! files no version names.
//!
//! Memory holds the batches being written and the keys to delete, never the
//! tables. Rows a round removes were in the tables before it (a row's
//! document is fed at most once a round, claims settled in listing order), so
//! deleting keys from the previous version and then adding the staged files
//! is the round's net change, even when one key is removed and added again.

use std::collections::HashMap;
use std::sync::Arc;

use memweave_schemas::search::{LexiconDelta, RankedCorpora};
use memweave_schemas::store::{Compaction, Fragment, StoreError, with_single_float_vectors};
use memweave_schemas::{
    CheckpointRow, ErrorRow, MemoryRow, MemoryTables, Table, TableStore, TableVersion, hash128,
};
use serde::{Deserialize, Serialize};
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::IndexError;
use crate::error::StagingError;
use crate::progress::StageProgress;

/// Batches being written at once by one process: each holds its rows until
/// written, so this bounds that memory; a worker with another batch waits.
const WRITES_IN_FLIGHT: usize = 4;

/// The writer's stages in [`StageProgress`]: batches staged, tables committed.
const WRITE: &str = "write";
const COMMIT: &str = "commit";

/// Output rows with their multiplicities: a batch to stage.
pub type Batch = HashMap<MemoryRow, isize>;

/// What one batch staged: per table, the data files written and the keys of
/// rows removed; and the documents it added and removed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StagedPart {
    pub tables: Vec<StagedTable>,
    pub documents_added: Vec<DocumentChange>,
    pub documents_removed: Vec<String>,
    pub errors_added: Vec<ErrorRow>,
    /// The searched texts added and removed, counted for the lexicon.
    pub lexicon: LexiconDelta,
}

impl StagedPart {
    /// Adds what `other` staged to this part.
    pub fn absorb(&mut self, other: StagedPart) {
        self.tables.extend(other.tables);
        self.documents_added.extend(other.documents_added);
        self.documents_removed.extend(other.documents_removed);
        self.errors_added.extend(other.errors_added);
        self.lexicon.merge(other.lexicon);
    }
}

/// Keeps `part` with what a round staged so far (`parts`): added to the
/// last part, so a round holds one lexicon delta, whose entries grow with
/// the corpus's terms, not one a batch. Held apart they grew with the
/// documents: 6.6 KB a short document at 20,000, half the indexer's peak.
/// A failure is kept as it came.
pub fn gather_staged(
    parts: &mut Vec<Result<StagedPart, StagingError>>,
    part: Result<StagedPart, StagingError>,
) {
    match (parts.last_mut(), part) {
        (Some(Ok(gathered)), Ok(part)) => gathered.absorb(part),
        (_, part) => parts.push(part),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagedTable {
    pub table: Table,
    #[serde(with = "fragments_as_json")]
    pub fragments: Vec<Fragment>,
    pub removed: Vec<String>,
    pub rows: u64,
}

/// Lance's fragment metadata travels between processes as the JSON Lance
/// itself reads and writes (its serde is made for JSON: timely's bincode
/// cannot read it back).
mod fragments_as_json {
    use memweave_schemas::store::Fragment;
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        fragments: &[Fragment],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let json = serde_json::to_string(fragments).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&json)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Fragment>, D::Error> {
        let json = String::deserialize(deserializer)?;
        serde_json::from_str(&json).map_err(D::Error::custom)
    }
}

/// A document content hash's text as the versions compare it: 16 bytes of
/// its hash, where the 64 hex digits cost a heap block per document.
pub fn version_hash(content_hash: &str) -> u128 {
    hash128(content_hash.as_bytes())
}

/// A document a round added: what the indexer needs to version a re-read
/// document and to summarise the round. Its content hash is kept as its
/// [`version_hash`], all a comparison of versions needs (a bulk round holds
/// one of these per document until its commit).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DocumentChange {
    pub doc_id: String,
    pub content_hash: u128,
    pub version: u64,
    pub ingested_at: i64,
}

/// What a committed round changed.
#[derive(Debug, Default)]
pub struct RoundChanges {
    pub documents_added: Vec<DocumentChange>,
    pub documents_removed: Vec<String>,
    pub errors_added: Vec<ErrorRow>,
    /// Rows written, all tables together.
    pub rows_written: u64,
}

/// Stages a process's output rows; in process 0, also commits a round.
#[derive(Debug)]
pub struct RoundWriter {
    store: TableStore,
    /// Components of the embedder's vectors: the `embeddings` table's width.
    vector_width: usize,
    /// The `embeddings` table was written before vectors were half floats:
    /// its rows are staged as it stores them. Read by the first batch with
    /// vectors that this process stages (every process of a cluster stages;
    /// a table never changes its type).
    single_float_vectors: OnceCell<bool>,
    permits: Arc<Semaphore>,
    stages: Arc<StageProgress>,
    batch_rows: usize,
    /// The corpora the lexicon counts: the build's finest cut's.
    ranked: RankedCorpora,
}

impl RoundWriter {
    pub fn new(
        store: TableStore,
        vector_width: usize,
        stages: Arc<StageProgress>,
        batch_rows: usize,
        ranked: RankedCorpora,
    ) -> RoundWriter {
        RoundWriter {
            store,
            vector_width,
            single_float_vectors: OnceCell::new(),
            permits: Arc::new(Semaphore::new(WRITES_IN_FLIGHT)),
            stages,
            batch_rows,
            ranked,
        }
    }

    /// Output rows a worker gathers before staging them.
    pub fn batch_rows(&self) -> usize {
        self.batch_rows
    }

    /// Creates the tables rows are staged into, and `llm_calls`, where
    /// missing. Process 0 calls it before a round's input is fed, so no worker
    /// stages and no process saves a model call before: two processes racing
    /// to create a Lance table can both commit, the later create overwriting
    /// the rows the earlier one wrote.
    pub async fn prepare(&self) -> Result<(), StoreError> {
        for &table in Table::MEMORY.iter().chain([&Table::LlmCalls]) {
            self.store
                .create_if_missing(table, self.vector_width)
                .await?;
        }
        Ok(())
    }

    /// A permit to stage one batch: waits while [`WRITES_IN_FLIGHT`] are being
    /// written (which is what keeps the build from outrunning the disk).
    pub async fn permit(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// Writes `batch`'s added rows as staged data files, table by table, and
    /// notes its removed keys.
    pub async fn stage(&self, batch: Batch) -> Result<StagedPart, IndexError> {
        self.stages.started(WRITE, 1);
        let result = self.stage_tables(batch).await;
        self.stages.done(WRITE, 1);
        if let Ok(part) = &result {
            let rows: u64 = part.tables.iter().map(|t| t.rows).sum();
            let removed: usize = part.tables.iter().map(|t| t.removed.len()).sum();
            tracing::info!(rows, removed, "staged a batch of rows (uncommitted)");
        }
        result
    }

    async fn stage_tables(&self, batch: Batch) -> Result<StagedPart, IndexError> {
        let mut added = MemoryTables::default();
        let mut removed: HashMap<Table, Vec<String>> = HashMap::new();
        let mut lexicon = LexiconDelta::default();
        for (row, diff) in batch {
            // A row counted more than once is one row, as in a table.
            let sign = diff.signum() as i64;
            lexicon.count(&row, sign, self.ranked);
            match sign {
                1 => added.push(row),
                -1 => removed.entry(row.table()).or_default().push(row.key()),
                _ => {}
            }
        }
        let width = self.vector_width;
        if let Some(odd) = added.embeddings.iter().find(|e| e.vector.len() != width) {
            return Err(IndexError::VectorWidth {
                owner: odd.owner_id.clone(),
                components: odd.vector.len(),
                width,
            });
        }
        let mut part = StagedPart {
            documents_added: added
                .documents
                .iter()
                .map(|d| DocumentChange {
                    doc_id: d.doc_id.clone(),
                    content_hash: version_hash(&d.content_hash),
                    version: d.version,
                    ingested_at: d.ingested_at,
                })
                .collect(),
            documents_removed: removed.get(&Table::Documents).cloned().unwrap_or_default(),
            errors_added: added.errors.clone(),
            tables: Vec::new(),
            lexicon,
        };
        added.sort_by_key();
        let single = match added.embeddings.is_empty() {
            true => false,
            false => {
                *(self.single_float_vectors)
                    .get_or_try_init(|| self.store.vectors_are_single_floats())
                    .await?
            }
        };
        for (table, mut batch, rows) in added.batches(width)? {
            if table == Table::Embeddings && single {
                batch = with_single_float_vectors(&batch)?;
            }
            part.tables.push(StagedTable {
                table,
                fragments: self.store.stage_batch(table, batch).await?,
                removed: removed.remove(&table).unwrap_or_default(),
                rows: rows as u64,
            });
        }
        part.tables
            .extend(removed.into_iter().map(|(table, removed)| StagedTable {
                table,
                fragments: Vec::new(),
                removed,
                rows: 0,
            }));
        Ok(part)
    }

    /// Commits a round from what its batches staged: per table, removed keys
    /// deleted (every row, with `replace`), staged files added, small files
    /// compacted (`checkpointed`: the newest checkpoint, whose versions stay
    /// as they are where the history is kept). Returns each table's version
    /// and what changed.
    pub async fn commit(
        &self,
        replace: bool,
        parts: Vec<StagedPart>,
        compaction: Compaction,
        checkpointed: Option<&CheckpointRow>,
    ) -> Result<(Vec<TableVersion>, RoundChanges), StoreError> {
        let since = |table| checkpointed.and_then(|checkpoint| checkpoint.version_of(table));
        let mut round = StagedPart::default();
        for part in parts {
            round.absorb(part);
        }
        let StagedPart {
            tables: staged,
            documents_added,
            documents_removed,
            errors_added,
            lexicon,
        } = round;
        let mut changes = RoundChanges {
            documents_added,
            documents_removed,
            errors_added,
            ..RoundChanges::default()
        };
        let mut tables: HashMap<Table, (Vec<Fragment>, Vec<String>)> = HashMap::new();
        for staged in staged {
            changes.rows_written += staged.rows;
            let (fragments, removed) = tables.entry(staged.table).or_default();
            fragments.extend(staged.fragments);
            removed.extend(staged.removed);
        }
        let mut versions = Vec::new();
        self.stages.started(COMMIT, Table::MEMORY.len() as u64);
        for &table in Table::MEMORY {
            let (fragments, mut removed) = tables.remove(&table).unwrap_or_default();
            removed.sort();
            removed.dedup();
            self.store
                .commit_staged(table, &removed, replace, fragments)
                .await?;
            let mut version = self.store.compact(table, compaction, since(table)).await?;
            if table == Table::Embeddings {
                version = self.store.index_vectors(replace).await?.unwrap_or(version);
            }
            // Texts to retract or carry over, and every id a walk follows, are
            // looked up through indexes that cover the rows this round added.
            version = self.store.index_lookups(table).await?.unwrap_or(version);
            versions.push(TableVersion {
                table: table.name().to_string(),
                version,
            });
            self.stages.done(COMMIT, 1);
        }
        // The statistics the searched texts are scored with, as of the tables
        // just committed.
        (self.store.apply_lexicon(&lexicon, self.ranked, replace)).await?;
        (self
            .store
            .compact(Table::Lexicon, compaction, since(Table::Lexicon)))
        .await?;
        let version = self.store.index_lookups(Table::Lexicon).await?;
        versions.push(TableVersion {
            table: Table::Lexicon.name().to_string(),
            version: version.unwrap_or_default(),
        });
        Ok((versions, changes))
    }
}

#[cfg(test)]
mod tests {
    use memweave_schemas::store::rows_batch;
    use memweave_schemas::{EmbeddingRow, StoreError};

    use super::*;

    /// A round's staged parts are kept as one as they arrive (their
    /// lexicon deltas summed, their files and changes together), and a
    /// failure apart, neither lost.
    #[test]
    fn staged_parts_gather_into_one_and_failures_stay_apart() {
        let part = |doc: &str, text: &str| {
            let mut lexicon = LexiconDelta::default();
            let gists = memweave_schemas::GistMemoryRow::new(doc, [text]);
            lexicon.count(&MemoryRow::GistMemory(gists), 1, RankedCorpora::of_cuts([]));
            StagedPart {
                documents_removed: vec![doc.to_string()],
                lexicon,
                ..StagedPart::default()
            }
        };
        let failed = || -> StagingError { IndexError::Interrupted.into() };
        let mut parts = Vec::new();
        gather_staged(&mut parts, Ok(part("a", "harbour lights")));
        gather_staged(&mut parts, Ok(part("b", "harbour")));
        gather_staged(&mut parts, Err(failed()));
        gather_staged(&mut parts, Ok(part("c", "lights")));
        let [Ok(first), Err(_), Ok(last)] = parts.as_slice() else {
            panic!("{parts:?}");
        };
        assert_eq!(first.documents_removed, ["a", "b"]);
        assert_eq!(last.documents_removed, ["c"]);
        let counts: Vec<(String, u64, u64)> = (first.lexicon.apply(&[]).unwrap().into_iter())
            .map(|r| (r.term, r.rows, r.occurrences))
            .collect();
        let counted = |term: &str, rows, occurrences| (term.to_string(), rows, occurrences);
        assert_eq!(
            counts,
            [
                counted("*", 2, 3),
                counted("harbour", 2, 2),
                counted("light", 1, 1)
            ]
        );
    }

    /// With the history kept, a round staged a batch at a time commits each
    /// table as one fragment, and the next round adds one more: what the
    /// checkpointed version holds stays as it is.
    #[tokio::test]
    async fn a_round_staged_in_batches_is_one_fragment_a_table() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path())?;
        let ranked = RankedCorpora::of_cuts([]);
        let writer = RoundWriter::new(store.clone(), 4, StageProgress::new(), 64, ranked);
        writer.prepare().await?;
        let round = |first: usize| {
            let writer = &writer;
            async move {
                let mut parts = Vec::new();
                for i in first..first + 5 {
                    let error = ErrorRow::new("build", "stage", None, "kind", &format!("bad {i}"));
                    let batch: Batch = HashMap::from([(MemoryRow::Error(error), 1)]);
                    parts.push(writer.stage(batch).await.expect("staged"));
                }
                parts
            }
        };
        let fragments = |version| {
            let store = store.clone();
            async move {
                let dataset = store.dataset(Table::Errors, Some(version)).await.unwrap();
                let fragments = dataset.unwrap().get_fragments();
                fragments.iter().map(|f| f.id()).collect::<Vec<_>>()
            }
        };
        let kept = Compaction::WhenFragmented;
        let (versions, _) = writer.commit(false, round(0).await, kept, None).await?;
        let checkpoint = CheckpointRow {
            epoch: 1,
            created_at: 0,
            source_positions: String::new(),
            table_versions: versions,
            vector_model: None,
            vector_segment_tokens: None,
        };
        let first = checkpoint.version_of(Table::Errors).unwrap();
        assert_eq!(
            fragments(first).await.len(),
            1,
            "five batches, one fragment"
        );
        let (versions, _) = (writer.commit(false, round(5).await, kept, Some(&checkpoint))).await?;
        let second = (versions.iter().find(|v| v.table == Table::Errors.name())).unwrap();
        let (before, after) = (fragments(first).await, fragments(second.version).await);
        assert_eq!(after.len(), 2, "{after:?}");
        assert_eq!(
            after[0], before[0],
            "the checkpointed fragment is left alone"
        );
        let rows: Vec<ErrorRow> = store.read_rows(Some(second.version)).await?;
        assert_eq!(rows.len(), 10);
        Ok(())
    }

    /// A writer that was never prepared (a cluster's process other than 0)
    /// stages vectors into an `embeddings` table written with single floats
    /// as that table stores them, and the rows read back.
    #[tokio::test]
    async fn vectors_are_staged_as_an_older_table_stores_them() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path())?;
        let row = |id: &str| EmbeddingRow::new(id, "segment", "hashing", vec![0.1, -2.0, 0.0, 3.5]);
        let older = with_single_float_vectors(&rows_batch(&[&row("a")], 4)?)?;
        let schema = older.schema();
        let batches = arrow::record_batch::RecordBatchIterator::new([Ok(older)], schema);
        let uri = dir.path().join("embeddings.lance");
        lance::Dataset::write(batches, uri.to_str().unwrap(), None)
            .await
            .expect("an older embeddings table");
        let ranked = RankedCorpora::of_cuts([]);
        let writer = RoundWriter::new(store.clone(), 4, StageProgress::new(), 64, ranked);
        let batch: Batch = HashMap::from([(MemoryRow::Embedding(row("b")), 1)]);
        let part = writer.stage(batch).await.expect("staged");
        let fragments = part.tables.into_iter().flat_map(|t| t.fragments).collect();
        store
            .commit_staged(Table::Embeddings, &[], false, fragments)
            .await?;
        let mut read: Vec<EmbeddingRow> = store.read_rows(None).await?;
        read.sort();
        assert_eq!(read, [row("a"), row("b")]);
        assert!(store.vectors_are_single_floats().await?);
        Ok(())
    }
}
