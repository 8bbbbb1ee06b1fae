//! Reading: whole tables, a checkpoint's versions, rows by key, columns
//! streamed.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lance::dataset::Dataset;
use lance::dataset::scanner::Scanner;

use super::batches::{KEYS_PER_PREDICATE, column_in, rows_of, strings};
use super::{Result, StoreError, TableStore};
use crate::rows::{CheckpointRow, TableRow};
use crate::tables::{EachTable, MemoryTables, Table};

/// The bytes a table's files hold in storage, of every version still kept
/// (not only the newest's): what a memory costs on disk or in a bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredBytes {
    /// Data files: the rows.
    pub data: u64,
    /// Index files.
    pub indexes: u64,
    /// Versions' manifests, transactions and deletion files.
    pub history: u64,
}

impl StoredBytes {
    pub fn total(&self) -> u64 {
        self.data + self.indexes + self.history
    }
}

impl TableStore {
    /// What `table`'s files hold in storage, listed from the object store;
    /// `None` where the table does not exist.
    pub async fn stored_bytes(&self, table: Table) -> Result<Option<StoredBytes>> {
        let Some(dataset) = self.dataset(table, None).await? else {
            return Ok(None);
        };
        let lance_error = |e| self.lance_error(table, e);
        let files = dataset.object_store(None).await.map_err(lance_error)?;
        let under = |dir: object_store::path::Path| {
            let files = std::sync::Arc::clone(&files);
            async move {
                files
                    .read_dir_all(&dir, None)
                    .try_fold(0, |sum, file| async move { Ok(sum + file.size) })
                    .await
            }
        };
        let history = [
            dataset.versions_dir(),
            dataset.transactions_dir(),
            dataset.deletions_dir(),
        ];
        let mut bytes = StoredBytes {
            data: under(dataset.data_dir()).await.map_err(lance_error)?,
            indexes: under(dataset.indices_dir()).await.map_err(lance_error)?,
            history: 0,
        };
        for dir in history {
            bytes.history += under(dir).await.map_err(lance_error)?;
        }
        Ok(Some(bytes))
    }

    /// The newest version of `table`, if it exists.
    pub async fn table_version(&self, table: Table) -> Result<Option<u64>> {
        Ok(self
            .dataset(table, None)
            .await?
            .map(|dataset| dataset.version().version))
    }

    /// The `value` column of the newest rows of `table` whose `key` column is one
    /// of `keys`, by key. Reads only those two columns, and uses a scalar index on
    /// `key` where one exists (see [`TableStore::index_lookups`]).
    pub async fn lookup(
        &self,
        table: Table,
        key: &str,
        value: &str,
        keys: &[String],
    ) -> Result<HashMap<String, String>> {
        let mut found = HashMap::new();
        if keys.is_empty() {
            return Ok(found);
        }
        let Some(dataset) = self.dataset(table, None).await? else {
            return Ok(found);
        };
        // Keys are content ids (hex); anything else cannot be in the table.
        let quoted: Vec<String> = keys
            .iter()
            .filter(|k| {
                k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            })
            .map(|k| format!("'{k}'"))
            .collect();
        if quoted.is_empty() {
            return Ok(found);
        }
        let mut scan = dataset.scan();
        scan.project(&[key, value])
            .and_then(|s| s.filter(&format!("{key} IN ({})", quoted.join(","))))
            .map_err(|e| self.lance_error(table, e))?;
        let batches = self.batches_of(table, &scan).await?;
        for batch in &batches {
            let (Some(keys), Some(values)) = (strings(batch, key), strings(batch, value)) else {
                continue;
            };
            for (k, v) in keys.iter().zip(values.iter()) {
                if let (Some(k), Some(v)) = (k, v) {
                    found.insert(k.to_string(), v.to_string());
                }
            }
        }
        Ok(found)
    }

    /// Calls `each` with every value of the string `column` of the newest version
    /// of `table`, reading that column only.
    pub async fn for_each_value(
        &self,
        table: Table,
        column: &str,
        mut each: impl FnMut(&str),
    ) -> Result<()> {
        let Some(dataset) = self.dataset(table, None).await? else {
            return Ok(());
        };
        self.scan_columns(&dataset, table, &[column], async |batch| {
            if let Some(values) = strings(batch, column) {
                values.iter().flatten().for_each(&mut each);
            }
        })
        .await
    }

    /// All rows of `R`'s table at `version` (the newest when `None`); no rows when
    /// the table does not exist yet.
    pub async fn read_rows<R: TableRow>(&self, version: Option<u64>) -> Result<Vec<R>> {
        let dataset = self.dataset(R::TABLE, version).await?;
        rows_of(R::TABLE, &self.whole(R::TABLE, dataset).await?)
    }

    /// All of `dataset` (a version of `table`), as batches; none without it.
    async fn whole(&self, table: Table, dataset: Option<Dataset>) -> Result<Vec<RecordBatch>> {
        match dataset {
            Some(dataset) => self.batches_of(table, &dataset.scan()).await,
            None => Ok(Vec::new()),
        }
    }

    /// The batches `scan` (of `table`) reads.
    async fn batches_of(&self, table: Table, scan: &Scanner) -> Result<Vec<RecordBatch>> {
        scan.try_into_stream()
            .await
            .map_err(|e| self.lance_error(table, e))?
            .try_collect()
            .await
            .map_err(|e| self.lance_error(table, e))
    }

    /// Rows of `table` at the version `checkpoint` names (from the fragments'
    /// metadata where no row is deleted; no scan).
    pub async fn count_at(&self, table: Table, checkpoint: &CheckpointRow) -> Result<u64> {
        let Some(dataset) = self.dataset_at(table, checkpoint).await? else {
            return Ok(0);
        };
        let rows = dataset
            .count_rows(None)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        Ok(rows as u64)
    }

    /// Calls `each` with every batch of `columns` of `table` at the version
    /// `checkpoint` names, reading those columns only.
    pub async fn scan_at(
        &self,
        table: Table,
        checkpoint: &CheckpointRow,
        columns: &[&str],
        mut each: impl FnMut(&RecordBatch),
    ) -> Result<()> {
        self.scan_at_awaiting(table, checkpoint, columns, async |batch| each(batch))
            .await
    }

    /// [`TableStore::scan_at`] with a callback that awaits (reads other
    /// tables, say) before the next batch is read.
    pub async fn scan_at_awaiting(
        &self,
        table: Table,
        checkpoint: &CheckpointRow,
        columns: &[&str],
        each: impl AsyncFnMut(&RecordBatch),
    ) -> Result<()> {
        let Some(dataset) = self.dataset_at(table, checkpoint).await? else {
            return Ok(());
        };
        self.scan_columns(&dataset, table, columns, each).await
    }

    /// Calls `each` with every batch of `columns` of `dataset`, streaming;
    /// those the table lacks are left out ([`present_columns`]).
    async fn scan_columns(
        &self,
        dataset: &Dataset,
        table: Table,
        columns: &[&str],
        mut each: impl AsyncFnMut(&RecordBatch),
    ) -> Result<()> {
        let mut scan = dataset.scan();
        scan.project(&present_columns(dataset, columns.iter().copied()))
            .map_err(|e| self.lance_error(table, e))?;
        let mut stream = scan
            .try_into_stream()
            .await
            .map_err(|e| self.lance_error(table, e))?;
        while let Some(batch) = stream
            .try_next()
            .await
            .map_err(|e| self.lance_error(table, e))?
        {
            each(&batch).await;
        }
        Ok(())
    }

    async fn dataset_at(
        &self,
        table: Table,
        checkpoint: &CheckpointRow,
    ) -> Result<Option<Dataset>> {
        let version = checkpoint
            .version_of(table)
            .ok_or(StoreError::MissingTable {
                epoch: checkpoint.epoch,
                table,
            })?;
        self.dataset(table, Some(version)).await
    }

    /// The rows of `R`'s table at `version` whose key is one of `keys`.
    pub async fn rows_with_keys<R: TableRow>(
        &self,
        version: u64,
        keys: &[String],
    ) -> Result<Vec<R>> {
        self.rows_where_in(version, R::TABLE.key_column(), keys)
            .await
    }

    /// The rows of `R`'s table at `version` whose string `column` is one of
    /// `values`.
    pub async fn rows_where_in<R: TableRow>(
        &self,
        version: u64,
        column: &str,
        values: &[String],
    ) -> Result<Vec<R>> {
        self.columns_where_in(R::TABLE, version, column, values, None)
            .await
    }

    /// The rows of `table` at `version` whose string `column` is one of
    /// `values`, as `R`, reading only the `projected` columns where given.
    pub async fn columns_where_in<R: serde::de::DeserializeOwned>(
        &self,
        table: Table,
        version: u64,
        column: &str,
        values: &[String],
        projected: Option<&[&str]>,
    ) -> Result<Vec<R>> {
        let Some(dataset) = self.dataset(table, Some(version)).await? else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        for values in values.chunks(KEYS_PER_PREDICATE) {
            let mut scan = dataset.scan();
            scan.filter(&column_in(column, values))
                .map_err(|e| self.lance_error(table, e))?;
            if let Some(columns) = projected {
                scan.project(columns)
                    .map_err(|e| self.lance_error(table, e))?;
            }
            rows.extend(rows_of(table, &self.batches_of(table, &scan).await?)?);
        }
        Ok(rows)
    }

    /// The rows of `R`'s table at the version `checkpoint` names.
    pub async fn read_at<R: TableRow>(&self, checkpoint: &CheckpointRow) -> Result<Vec<R>> {
        let batches = self.batches_at(R::TABLE, checkpoint).await?;
        rows_of(R::TABLE, &batches)
    }

    /// All of `table` at the version `checkpoint` names, as batches.
    async fn batches_at(
        &self,
        table: Table,
        checkpoint: &CheckpointRow,
    ) -> Result<Vec<RecordBatch>> {
        let dataset = self.dataset_at(table, checkpoint).await?;
        self.whole(table, dataset).await
    }
}

impl MemoryTables {
    /// Every memory table at the versions `checkpoint` names.
    pub async fn read_at(store: &TableStore, checkpoint: &CheckpointRow) -> Result<MemoryTables> {
        let mut read = HashMap::new();
        for &table in Table::MEMORY {
            read.insert(table, store.batches_at(table, checkpoint).await?);
        }
        struct Rows(HashMap<Table, Vec<RecordBatch>>);
        impl EachTable for Rows {
            type Error = StoreError;
            fn rows<R: TableRow>(&mut self, rows: &mut Vec<R>) -> Result<()> {
                *rows = rows_of(R::TABLE, &self.0[&R::TABLE])?;
                Ok(())
            }
        }
        let mut tables = MemoryTables::default();
        tables.each_table(&mut Rows(read))?;
        Ok(tables)
    }
}

/// The columns of `columns` that `dataset` has: a column added since an
/// older memory's table was written (as nulls on its next write) is left
/// out, so a reader reads it as absent.
pub fn present_columns<S: AsRef<str>>(
    dataset: &Dataset,
    columns: impl IntoIterator<Item = S>,
) -> Vec<S> {
    let schema = dataset.schema();
    (columns.into_iter())
        .filter(|name| schema.field(name.as_ref()).is_some())
        .collect()
}
