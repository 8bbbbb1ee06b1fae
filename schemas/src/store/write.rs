//! Writing: rows staged and committed, tables created and compacted, the
//! lexicon counted.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator};
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{CommitBuilder, Dataset, InsertBuilder, WriteMode, WriteParams};

use super::batches::{KEYS_PER_PREDICATE, key_in, to_batch};
use super::{Fragment, Result, StoreError, TableStore};
use crate::Table;
use crate::rows::LexiconRow;
use crate::rows::{CheckpointRow, TableRow, TableVersion};
use crate::search::LexiconDelta;
use crate::tables::DEFAULT_VECTOR_WIDTH;
use crate::tables::MemoryTables;

/// Data files a table may have before a commit compacts it: few enough that
/// a scan opens a handful of files per thousand rows, many enough that most
/// commits compact nothing.
pub const COMPACT_AT_FRAGMENTS: usize = 64;

impl TableStore {
    /// Replaces the content of `R`'s table with `rows` (sorted by key), as a new
    /// version; returns that version.
    pub async fn write_rows<R: TableRow>(&self, rows: &[R]) -> Result<u64> {
        let mut sorted: Vec<&R> = rows.iter().collect();
        sorted.sort_by_cached_key(|r| r.key());
        let batch = to_batch(&sorted)?;
        self.write_batch(R::TABLE, batch, WriteMode::Overwrite)
            .await
    }

    pub(super) async fn write_batch(
        &self,
        table: Table,
        batch: RecordBatch,
        mode: WriteMode,
    ) -> Result<u64> {
        let uri = self.table_uri(table);
        let schema = batch.schema();
        let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
        let exists = self.dataset(table, None).await?.is_some();
        let params = WriteParams {
            mode: if exists { mode } else { WriteMode::Create },
            store_params: Some(self.store_params()),
            ..Default::default()
        };
        let dataset = Dataset::write(reader, uri.as_str(), Some(params))
            .await
            .map_err(|e| self.lance_error(table, e))?;
        Ok(dataset.version().version)
    }

    /// Writes `batch` as data files of `table` without making them part of
    /// any version: they stay invisible to every reader until
    /// [`TableStore::commit_staged`] names them, so a run that dies before its
    /// commit leaves nothing anyone sees. The table must exist
    /// ([`TableStore::create_if_missing`]).
    pub async fn stage_batch(&self, table: Table, batch: RecordBatch) -> Result<Vec<Fragment>> {
        let uri = self.table_uri(table);
        let params = WriteParams {
            mode: WriteMode::Append,
            store_params: Some(self.store_params()),
            ..Default::default()
        };
        let transaction = InsertBuilder::new(uri.as_str())
            .with_params(&params)
            .execute_uncommitted(vec![batch])
            .await
            .map_err(|e| self.lance_error(table, e))?;
        match transaction.operation {
            Operation::Append { fragments } => Ok(fragments),
            other => Err(StoreError::Invalid {
                table,
                message: format!("staging rows made a {other} transaction, not an append"),
            }),
        }
    }

    /// Creates `table` with no rows (the `embeddings` table with vectors of
    /// `dim` components) where it does not exist yet, so rows can be staged
    /// into it.
    pub async fn create_if_missing(&self, table: Table, dim: usize) -> Result<()> {
        if self.dataset(table, None).await?.is_some() {
            return Ok(());
        }
        let schema = Arc::new(arrow_schema::Schema::new(table.fields_of_width(dim)));
        self.write_batch(table, RecordBatch::new_empty(schema), WriteMode::Create)
            .await
            .map(drop)
    }

    /// Applies a round to `table`: deletes the rows whose keys are `removed`
    /// (every row, with `replace`), then makes the staged `fragments` part of
    /// the table, each step one version; returns the last. The deletes see only
    /// rows of earlier versions, never the staged ones.
    pub async fn commit_staged(
        &self,
        table: Table,
        removed: &[String],
        replace: bool,
        fragments: Vec<Fragment>,
    ) -> Result<u64> {
        let Some(mut dataset) = self.dataset(table, None).await? else {
            return Err(StoreError::Invalid {
                table,
                message: "rows were staged into a table that does not exist".into(),
            });
        };
        if replace {
            if dataset
                .count_rows(None)
                .await
                .map_err(|e| self.lance_error(table, e))?
                > 0
            {
                dataset
                    .delete("true")
                    .await
                    .map_err(|e| self.lance_error(table, e))?;
            }
        } else {
            delete_keys(&mut dataset, table, removed)
                .await
                .map_err(|e| self.lance_error(table, e))?;
        }
        if fragments.is_empty() {
            return Ok(dataset.version().version);
        }
        let transaction =
            TransactionBuilder::new(dataset.version().version, Operation::Append { fragments })
                .build();
        let committed = CommitBuilder::new(Arc::new(dataset))
            .with_store_params(self.store_params())
            .execute(transaction)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        Ok(committed.version().version)
    }

    /// Rewrites `table`'s small data files into large ones once it has more
    /// than [`COMPACT_AT_FRAGMENTS`] of them (rounds of a long `--watch` or
    /// `--follow` add a few each), and drops rows deleted since. A new
    /// version: earlier ones stay readable, so checkpoints keep their time
    /// travel. Returns the table's version.
    pub async fn compact_if_fragmented(&self, table: Table) -> Result<u64> {
        let Some(mut dataset) = self.dataset(table, None).await? else {
            return Err(StoreError::Invalid {
                table,
                message: "compacting a table that does not exist".into(),
            });
        };
        if dataset.count_fragments() > COMPACT_AT_FRAGMENTS {
            compact_files(&mut dataset, CompactionOptions::default(), None)
                .await
                .map_err(|e| self.lance_error(table, e))?;
        }
        Ok(dataset.version().version)
    }

    /// Appends `rows` to `R`'s table (creating it), as a new version; returns it.
    pub async fn append_rows<R: TableRow>(&self, rows: &[R]) -> Result<u64> {
        let refs: Vec<&R> = rows.iter().collect();
        let batch = to_batch(&refs)?;
        self.write_batch(R::TABLE, batch, WriteMode::Append).await
    }

    /// Applies `delta` to the `lexicon` table (to an empty one with
    /// `replace`, a rebuild): the changed entries' rows deleted and their new
    /// counts appended, one version. Returns it.
    pub async fn apply_lexicon(&self, delta: &LexiconDelta, replace: bool) -> Result<u64> {
        let table = Table::Lexicon;
        self.create_if_missing(table, DEFAULT_VECTOR_WIDTH).await?;
        let entries = delta.entries();
        let current: HashMap<String, LexiconRow> = if replace {
            HashMap::new()
        } else {
            let version = self.table_version(table).await?.unwrap_or_default();
            self.rows_with_keys::<LexiconRow>(version, &entries)
                .await?
                .into_iter()
                .map(|row| (row.entry.clone(), row))
                .collect()
        };
        let rows = delta.apply(&current).map_err(|e| StoreError::Invalid {
            table,
            message: e.to_string(),
        })?;
        let fragments = if rows.is_empty() {
            Vec::new()
        } else {
            let sorted: Vec<&LexiconRow> = rows.iter().collect();
            self.stage_batch(table, to_batch(&sorted)?).await?
        };
        let removed: Vec<String> = current.into_keys().collect();
        self.commit_staged(table, &removed, replace, fragments)
            .await
    }

    /// Commits `memory` as one round, as the indexer commits one: its rows
    /// appended to the memory tables (replacing their content, with
    /// `replace`), the lexicon counted, the indexes brought over them, and a
    /// checkpoint naming the new versions (and the previous checkpoint's
    /// others). For programs that make a memory without the indexing
    /// dataflow: tests, benchmarks.
    pub async fn commit_memory(
        &self,
        memory: &MemoryTables,
        replace: bool,
    ) -> Result<CheckpointRow> {
        let width = memory
            .embeddings
            .first()
            .map_or(DEFAULT_VECTOR_WIDTH, |e| e.vector.len());
        let mut lexicon = LexiconDelta::default();
        for row in memory.rows() {
            lexicon.count(&row, 1);
        }
        let mut sorted = memory.clone();
        sorted.sort_by_key();
        let mut batches: HashMap<Table, RecordBatch> = sorted
            .batches(width)?
            .into_iter()
            .map(|(table, batch, _)| (table, batch))
            .collect();
        let latest = self.latest_checkpoint().await?;
        let mut versions: HashMap<String, u64> = latest
            .iter()
            .flat_map(|c| &c.table_versions)
            .map(|v| (v.table.clone(), v.version))
            .collect();
        for &table in Table::MEMORY {
            self.create_if_missing(table, width).await?;
            let fragments = match batches.remove(&table) {
                Some(batch) => self.stage_batch(table, batch).await?,
                None => Vec::new(),
            };
            self.commit_staged(table, &[], replace, fragments).await?;
            if table == Table::Embeddings {
                self.index_vectors(replace).await?;
            }
            let version = self.index_lookups(table).await?.unwrap_or_default();
            versions.insert(table.name().to_string(), version);
        }
        self.apply_lexicon(&lexicon, replace).await?;
        let version = self
            .index_lookups(Table::Lexicon)
            .await?
            .unwrap_or_default();
        versions.insert(Table::Lexicon.name().to_string(), version);
        let positions = latest.map_or_else(|| "{}".to_string(), |c| c.source_positions);
        let versions = versions
            .into_iter()
            .map(|(table, version)| TableVersion { table, version })
            .collect();
        self.commit_checkpoint(positions, versions).await
    }
}

/// Deletes the rows of `table` whose key is one of `keys`.
async fn delete_keys(dataset: &mut Dataset, table: Table, keys: &[String]) -> lance::Result<()> {
    for keys in keys.chunks(KEYS_PER_PREDICATE) {
        dataset.delete(&key_in(table, keys)).await?;
    }
    Ok(())
}
