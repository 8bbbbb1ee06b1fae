//! Reads and writes the memory tables as Lance datasets under one root URL.
//!
//! The root is a plain path or any URL Lance's object-store registry knows
//! (`file://`, `s3://`, …); each table is the dataset `ROOT/NAME.lance`. A write
//! makes a new table version; a commit appends a `checkpoints` row naming the
//! version of every table, and readers only ever read the versions a checkpoint
//! names, so they always see one consistent epoch.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, RecordBatchIterator, StringArray};
use futures::TryStreamExt;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{CommitBuilder, Dataset, InsertBuilder, WriteMode, WriteParams};
use lance::index::DatasetIndexExt;
use lance::index::vector::VectorIndexParams;
use lance::io::{ObjectStoreParams, StorageOptionsAccessor};
use lance::session::Session;
pub use lance::table::format::Fragment;
use lance_index::IndexType;
use lance_index::optimize::OptimizeOptions;
use lance_index::scalar::inverted::tokenizer::Language;
use lance_index::scalar::{BuiltinIndexType, InvertedIndexParams, ScalarIndexParams};
use lance_index::vector::ivf::IvfBuildParams;
use lance_index::vector::sq::builder::SQBuildParams;
use lance_linalg::distance::DistanceType;

use crate::rows::LexiconRow;
use crate::rows::{CheckpointRow, TableRow, TableVersion, now_micros};
use crate::search::{self, LexiconDelta};
use crate::tables::DEFAULT_VECTOR_WIDTH;
use crate::tables::MemoryTables;
use crate::{ColumnIndex, Table};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("tables root {root}: {reason}")]
    Root { root: String, reason: String },
    #[error("table {table} at {uri}: {source}")]
    Lance {
        table: Table,
        uri: String,
        #[source]
        source: Box<lance::Error>,
    },
    #[error("table {table}: rows do not match the schema: {source}")]
    Rows {
        table: Table,
        #[source]
        source: serde_arrow::Error,
    },
    #[error("checkpoint {epoch} does not name table {table}")]
    MissingTable { epoch: u64, table: Table },
    #[error("table {table}: {message}")]
    Invalid { table: Table, message: String },
    #[error(
        "tables root {root}: checkpoint {epoch} was written by an older memweave, without the \
         lexicon and search columns reads go through; index the sources again into a new \
         tables directory (`memweave index SOURCE --out NEW_TABLES`)"
    )]
    OlderMemory { root: String, epoch: u64 },
}

/// Fewest vectors the `embeddings` table is indexed at: below it a scan of
/// every vector is as fast as probing an index.
pub const VECTOR_INDEX_MIN_ROWS: usize = 1024;

/// Vectors sampled per IVF partition to train its centroids: within faiss's
/// advice (39 to 256). Lance's default of 256 loads every vector of a table of
/// up to 65,536 (256·√n ≥ n), and the training time with them.
const VECTOR_TRAINING_PER_PARTITION: usize = 64;

/// Vectors sampled per 8-bit level to find each dimension's range for scalar
/// quantization: 4,096 in all. Lance's default (256 a level, 65,536 vectors)
/// loads a whole 10M-token build's vectors, and a copy to normalise them, at
/// the round's end: the largest allocation of its commit.
const VECTOR_SQ_TRAINING_PER_LEVEL: usize = 16;

/// Segments an index may have (one per commit that appended rows) before a
/// commit merges them: a lookup reads each segment, and a long `--watch` or
/// `--follow` commits every few seconds.
const MERGE_INDEX_SEGMENTS_AT: usize = 8;

/// The name of the `embeddings` table's vector index.
const VECTOR_INDEX_NAME: &str = "vector_ivf";

/// Data files a table may have before a commit compacts it: few enough that
/// a scan opens a handful of files per thousand rows, many enough that most
/// commits compact nothing.
pub const COMPACT_AT_FRAGMENTS: usize = 64;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The memory tables under one root.
#[derive(Debug, Clone)]
pub struct TableStore {
    root: String,
    storage_options: HashMap<String, String>,
    /// The Lance session [`TableStore::dataset`] opens datasets in: one shared,
    /// bounded set of index and metadata caches (a reader's); without it each
    /// dataset gets Lance's default caches of its own.
    session: Option<Arc<Session>>,
}

impl TableStore {
    /// A store at `root`: a path (relative paths are made absolute) or a URL.
    /// `storage_options` are object-store settings (endpoint, region, keys, …).
    pub fn new(root: &str, storage_options: HashMap<String, String>) -> Result<Self> {
        let root = if is_url(root) {
            root.trim_end_matches('/').to_string()
        } else {
            let path = std::path::absolute(root).map_err(|e| StoreError::Root {
                root: root.to_string(),
                reason: e.to_string(),
            })?;
            path.to_string_lossy().trim_end_matches('/').to_string()
        };
        Ok(TableStore {
            root,
            storage_options,
            session: None,
        })
    }

    /// This store, opening its datasets in `session`.
    pub fn with_session(mut self, session: Arc<Session>) -> Self {
        self.session = Some(session);
        self
    }

    /// `Ok` when `checkpoint` is of a memory this memweave reads and appends
    /// to: one with a lexicon (every commit since the search columns names one).
    pub fn check_current(&self, checkpoint: &CheckpointRow) -> Result<()> {
        match checkpoint.version_of(Table::Lexicon) {
            Some(_) => Ok(()),
            None => Err(StoreError::OlderMemory {
                root: self.root.clone(),
                epoch: checkpoint.epoch,
            }),
        }
    }

    /// A store at a local path, with no object-store settings.
    pub fn local(root: &Path) -> Result<Self> {
        Self::new(&root.to_string_lossy(), HashMap::new())
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn table_uri(&self, table: Table) -> String {
        format!("{}/{}.lance", self.root, table.name())
    }

    /// Fails early, with the reason, when a local root cannot be created or written.
    /// Object-store roots are checked by their first write.
    pub fn check_writable(&self) -> Result<()> {
        if is_url(&self.root) && !self.root.starts_with("file://") {
            return Ok(());
        }
        let path = Path::new(self.root.trim_start_matches("file://"));
        let fail = |reason: String| StoreError::Root {
            root: self.root.clone(),
            reason,
        };
        std::fs::create_dir_all(path).map_err(|e| fail(format!("cannot create: {e}")))?;
        // Named per process: the processes of a cluster check one root at once.
        let probe = path.join(format!(".memweave-write-probe-{}", std::process::id()));
        std::fs::write(&probe, b"probe").map_err(|e| fail(format!("cannot write: {e}")))?;
        std::fs::remove_file(&probe).map_err(|e| fail(format!("cannot write: {e}")))?;
        Ok(())
    }

    /// Replaces the content of `R`'s table with `rows` (sorted by key), as a new
    /// version; returns that version.
    pub async fn write_rows<R: TableRow>(&self, rows: &[R]) -> Result<u64> {
        let mut sorted: Vec<&R> = rows.iter().collect();
        sorted.sort_by_cached_key(|r| r.key());
        let batch = to_batch(&sorted)?;
        self.write_batch(R::TABLE, batch, WriteMode::Overwrite)
            .await
    }

    async fn write_batch(&self, table: Table, batch: RecordBatch, mode: WriteMode) -> Result<u64> {
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

    /// Indexes the vectors of the `embeddings` table (IVF, cosine) once there
    /// are enough of them that an index beats a scan, and trains it anew with
    /// `retrain` (a rebuild replaced every vector); later appends join it as
    /// segments ([`TableStore::index_lookups`]). Returns the version. The
    /// partitions hold 8-bit scalar-quantized vectors: building an IVF_FLAT
    /// index, whose partitions copy the vectors whole, held about five times
    /// the table's vectors at once (pylance, 50K vectors: +255 MiB, IVF_SQ
    /// +165 MiB), and a search can re-rank its candidates with the table's
    /// own vectors (`refine_factor`).
    pub async fn index_vectors(&self, retrain: bool) -> Result<Option<u64>> {
        let table = Table::Embeddings;
        let Some(mut dataset) = self.dataset(table, None).await? else {
            return Ok(None);
        };
        let indexed = dataset
            .load_indices_by_name(VECTOR_INDEX_NAME)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        if !retrain && !indexed.is_empty() {
            return Ok(Some(dataset.version().version));
        }
        let rows = dataset
            .count_rows(None)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        if rows < VECTOR_INDEX_MIN_ROWS {
            return Ok(Some(dataset.version().version));
        }
        // About √n partitions: a query probes a few of them, each about √n vectors.
        let partitions = (rows as f64).sqrt().round() as usize;
        let ivf = IvfBuildParams {
            sample_rate: VECTOR_TRAINING_PER_PARTITION,
            ..IvfBuildParams::new(partitions)
        };
        let params = VectorIndexParams::with_ivf_sq_params(
            DistanceType::Cosine,
            ivf,
            SQBuildParams {
                sample_rate: VECTOR_SQ_TRAINING_PER_LEVEL,
                ..SQBuildParams::default()
            },
        );
        dataset
            .create_index(
                &["vector"],
                IndexType::Vector,
                Some(VECTOR_INDEX_NAME.to_string()),
                &params,
                true,
            )
            .await
            .map_err(|e| self.lance_error(table, e))?;
        Ok(Some(dataset.version().version))
    }

    /// Makes the versions `checkpoint` names the newest of their tables again,
    /// undoing what a run that died between its table writes and its commit
    /// left behind; returns the tables rolled back. `llm_calls` keeps its newer
    /// versions: the calls saved before the crash are paid for and still valid.
    pub async fn roll_back_to(&self, checkpoint: &CheckpointRow) -> Result<Vec<Table>> {
        let mut rolled_back = Vec::new();
        for table in Table::data_tables().filter(|t| *t != Table::LlmCalls) {
            let Some(version) = checkpoint.version_of(table) else {
                continue;
            };
            let Some(latest) = self.dataset(table, None).await? else {
                continue;
            };
            if latest.version().version == version {
                continue;
            }
            let mut named = latest
                .checkout_version(version)
                .await
                .map_err(|e| self.lance_error(table, e))?;
            named
                .restore()
                .await
                .map_err(|e| self.lance_error(table, e))?;
            rolled_back.push(table);
        }
        Ok(rolled_back)
    }

    /// Appends `rows` to `R`'s table (creating it), as a new version; returns it.
    pub async fn append_rows<R: TableRow>(&self, rows: &[R]) -> Result<u64> {
        let refs: Vec<&R> = rows.iter().collect();
        let batch = to_batch(&refs)?;
        self.write_batch(R::TABLE, batch, WriteMode::Append).await
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
        let batches: Vec<RecordBatch> = scan
            .try_into_stream()
            .await
            .map_err(|e| self.lance_error(table, e))?
            .try_collect()
            .await
            .map_err(|e| self.lance_error(table, e))?;
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
        self.scan_columns(&dataset, table, &[column], |batch| {
            if let Some(values) = strings(batch, column) {
                values.iter().flatten().for_each(&mut each);
            }
        })
        .await
    }

    /// Brings every index of `table` over the rows appended since it was last
    /// indexed (a new segment of each, so a lookup or search stays
    /// index-backed as the table grows), and creates each of the table's
    /// [`Table::column_indexes`] that is missing. Returns the table's version
    /// after; `None` when the table does not exist. A table with no rows gets
    /// its indexes at the first commit that gives it some.
    pub async fn index_lookups(&self, table: Table) -> Result<Option<u64>> {
        let Some(mut dataset) = self.dataset(table, None).await? else {
            return Ok(None);
        };
        let indices = dataset
            .load_indices()
            .await
            .map_err(|e| self.lance_error(table, e))?;
        if !indices.is_empty() {
            // Each append is a segment that a lookup reads apart; past a few,
            // they are merged into one.
            let mut segments: HashMap<&str, usize> = HashMap::new();
            for index in indices.iter() {
                *segments.entry(index.name.as_str()).or_default() += 1;
            }
            let most = segments.values().copied().max().unwrap_or(0);
            let options = if most >= MERGE_INDEX_SEGMENTS_AT {
                OptimizeOptions::merge(most)
            } else {
                OptimizeOptions::append()
            };
            dataset
                .optimize_indices(&options)
                .await
                .map_err(|e| self.lance_error(table, e))?;
        }
        let missing: Vec<(&str, ColumnIndex)> = table
            .column_indexes()
            .iter()
            .copied()
            .filter(|(column, kind)| !indices.iter().any(|i| i.name == kind.name(column)))
            .collect();
        if !missing.is_empty()
            && dataset
                .count_rows(None)
                .await
                .map_err(|e| self.lance_error(table, e))?
                > 0
        {
            for (column, kind) in missing {
                let name = Some(kind.name(column));
                let created = match kind {
                    ColumnIndex::BTree => {
                        let params = ScalarIndexParams::default();
                        dataset
                            .create_index(&[column], IndexType::BTree, name, &params, true)
                            .await
                    }
                    ColumnIndex::Labels => {
                        let params = ScalarIndexParams::for_builtin(BuiltinIndexType::LabelList);
                        dataset
                            .create_index(&[column], IndexType::LabelList, name, &params, true)
                            .await
                    }
                    ColumnIndex::Bitmap => {
                        let params = ScalarIndexParams::for_builtin(BuiltinIndexType::Bitmap);
                        dataset
                            .create_index(&[column], IndexType::Bitmap, name, &params, true)
                            .await
                    }
                    ColumnIndex::FullText => {
                        dataset
                            .create_index(
                                &[column],
                                IndexType::Inverted,
                                name,
                                &terms_index(),
                                true,
                            )
                            .await
                    }
                };
                created.map_err(|e| self.lance_error(table, e))?;
            }
        }
        Ok(Some(dataset.version().version))
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

    /// Rows of the newest version of `table` that its index `name` (see
    /// [`ColumnIndex::name`]) does not cover; `None` when the table or the
    /// index does not exist.
    pub async fn rows_outside_index(&self, table: Table, name: &str) -> Result<Option<u64>> {
        let Some(dataset) = self.dataset(table, None).await? else {
            return Ok(None);
        };
        let segments = dataset
            .load_indices_by_name(name)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        if segments.is_empty() {
            return Ok(None);
        }
        let covered = |id: u64| {
            segments.iter().any(|segment| {
                segment
                    .fragment_bitmap
                    .as_ref()
                    .is_some_and(|fragments| fragments.contains(id as u32))
            })
        };
        Ok(Some(
            dataset
                .fragments()
                .iter()
                .filter(|fragment| !covered(fragment.id))
                .map(|fragment| fragment.physical_rows.unwrap_or(0) as u64)
                .sum(),
        ))
    }

    /// All rows of `R`'s table at `version` (the newest when `None`); no rows when
    /// the table does not exist yet.
    pub async fn read_rows<R: TableRow>(&self, version: Option<u64>) -> Result<Vec<R>> {
        let Some(dataset) = self.dataset(R::TABLE, version).await? else {
            return Ok(Vec::new());
        };
        let batches: Vec<RecordBatch> = dataset
            .scan()
            .try_into_stream()
            .await
            .map_err(|e| self.lance_error(R::TABLE, e))?
            .try_collect()
            .await
            .map_err(|e| self.lance_error(R::TABLE, e))?;
        rows_of(R::TABLE, &batches)
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
        each: impl FnMut(&RecordBatch),
    ) -> Result<()> {
        let Some(dataset) = self.dataset_at(table, checkpoint).await? else {
            return Ok(());
        };
        self.scan_columns(&dataset, table, columns, each).await
    }

    /// Calls `each` with every batch of `columns` of `dataset`, streaming.
    async fn scan_columns(
        &self,
        dataset: &Dataset,
        table: Table,
        columns: &[&str],
        mut each: impl FnMut(&RecordBatch),
    ) -> Result<()> {
        let mut scan = dataset.scan();
        scan.project(columns)
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
            each(&batch);
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
        let table = R::TABLE;
        let Some(dataset) = self.dataset(table, Some(version)).await? else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        for keys in keys.chunks(KEYS_PER_PREDICATE) {
            let mut scan = dataset.scan();
            scan.filter(&key_in(table, keys))
                .map_err(|e| self.lance_error(table, e))?;
            let batches: Vec<RecordBatch> = scan
                .try_into_stream()
                .await
                .map_err(|e| self.lance_error(table, e))?
                .try_collect()
                .await
                .map_err(|e| self.lance_error(table, e))?;
            rows.extend(rows_of(table, &batches)?);
        }
        Ok(rows)
    }

    /// The rows of `R`'s table at the version `checkpoint` names.
    pub async fn read_at<R: TableRow>(&self, checkpoint: &CheckpointRow) -> Result<Vec<R>> {
        let version = checkpoint
            .version_of(R::TABLE)
            .ok_or(StoreError::MissingTable {
                epoch: checkpoint.epoch,
                table: R::TABLE,
            })?;
        self.read_rows(Some(version)).await
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

    /// The newest checkpoint, if any commit has happened under this root.
    pub async fn latest_checkpoint(&self) -> Result<Option<CheckpointRow>> {
        let checkpoints: Vec<CheckpointRow> = self.read_rows(None).await?;
        Ok(checkpoints.into_iter().max_by_key(|c| c.epoch))
    }

    /// Commits an epoch: appends the checkpoint row that names `versions`. Until
    /// this returns, readers keep seeing the previous checkpoint.
    pub async fn commit_checkpoint(
        &self,
        source_positions: String,
        mut versions: Vec<TableVersion>,
    ) -> Result<CheckpointRow> {
        versions.sort();
        let epoch = self.latest_checkpoint().await?.map_or(1, |c| c.epoch + 1);
        let row = CheckpointRow {
            epoch,
            created_at: now_micros(),
            source_positions,
            table_versions: versions,
        };
        let batch = to_batch(&[&row])?;
        self.write_batch(Table::Checkpoints, batch, WriteMode::Append)
            .await?;
        Ok(row)
    }

    /// The Lance dataset of `table` (at `version`, else the newest), or `None`
    /// where the table was never written.
    pub async fn dataset(&self, table: Table, version: Option<u64>) -> Result<Option<Dataset>> {
        let uri = self.table_uri(table);
        let mut builder =
            DatasetBuilder::from_uri(&uri).with_storage_options(self.storage_options.clone());
        if let Some(version) = version {
            builder = builder.with_version(version);
        }
        if let Some(session) = &self.session {
            builder = builder.with_session(session.clone());
        }
        match builder.load().await {
            Ok(dataset) => Ok(Some(dataset)),
            Err(lance::Error::DatasetNotFound { .. }) => Ok(None),
            Err(e) => Err(self.lance_error(table, e)),
        }
    }

    fn store_params(&self) -> ObjectStoreParams {
        ObjectStoreParams {
            storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(
                self.storage_options.clone(),
            ))),
            ..Default::default()
        }
    }

    /// `source` as the error of `table` of this store.
    pub fn lance_error(&self, table: Table, source: lance::Error) -> StoreError {
        StoreError::Lance {
            table,
            uri: self.table_uri(table),
            source: Box::new(source),
        }
    }
}

/// The full-text index of a [`search::TERMS`] column: its tokens are the
/// words between spaces, as they are (the column holds terms already), so
/// the index counts exactly the terms BM25 scores with.
fn terms_index() -> InvertedIndexParams {
    InvertedIndexParams::new("whitespace".to_string(), Language::English)
        .with_position(false)
        .max_token_length(None)
        .lower_case(false)
        .stem(false)
        .remove_stop_words(false)
        .ascii_folding(false)
}

/// Deletes the rows of `table` whose key is one of `keys`.
async fn delete_keys(dataset: &mut Dataset, table: Table, keys: &[String]) -> lance::Result<()> {
    for keys in keys.chunks(KEYS_PER_PREDICATE) {
        dataset.delete(&key_in(table, keys)).await?;
    }
    Ok(())
}

/// Keys a predicate names at most: a few thousand keep each one quick to
/// parse and plan.
pub const KEYS_PER_PREDICATE: usize = 4096;

/// The predicate "`table`'s key is one of `keys`", keys quoted as SQL strings.
fn key_in(table: Table, keys: &[String]) -> String {
    format!("{} IN ({})", table.key_column(), sql_strings(keys))
}

/// `value` as an SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `values` as a comma-separated list of SQL string literals.
pub fn sql_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| sql_string(v)).collect();
    quoted.join(", ")
}

/// The rows of `table` in `batch`, as `R` (columns `R` lacks are ignored).
pub fn batch_rows<R: serde::de::DeserializeOwned>(
    table: Table,
    batch: &RecordBatch,
) -> Result<Vec<R>> {
    serde_arrow::from_record_batch(batch).map_err(|source| StoreError::Rows { table, source })
}

/// The rows of `table` in `batches`, in order.
pub fn rows_of<R: serde::de::DeserializeOwned>(
    table: Table,
    batches: &[RecordBatch],
) -> Result<Vec<R>> {
    let mut rows = Vec::new();
    for batch in batches {
        rows.extend(batch_rows(table, batch)?);
    }
    Ok(rows)
}

/// The string column `name` of `batch`, if it has one.
pub fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
}

/// `rows` as one Arrow batch with their table's declared schema.
pub fn to_batch<R: TableRow>(rows: &[&R]) -> Result<RecordBatch> {
    rows_batch(rows, DEFAULT_VECTOR_WIDTH)
}

/// [`to_batch`] where vectors have `vector_width` components: the rows'
/// fields, then the columns derived from them for search.
pub fn rows_batch<R: TableRow>(rows: &[&R], vector_width: usize) -> Result<RecordBatch> {
    let table = R::TABLE;
    let batch = serde_arrow::to_record_batch(&table.row_fields(vector_width), &rows)
        .map_err(|source| StoreError::Rows { table, source })?;
    let schema = Arc::new(arrow_schema::Schema::new(
        table.fields_of_width(vector_width),
    ));
    search::with_derived_columns(table, &batch, schema).map_err(|e| StoreError::Invalid {
        table,
        message: format!("deriving the search columns: {e}"),
    })
}

fn is_url(root: &str) -> bool {
    root.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::*;

    fn node(id: &str, parent: Option<&str>) -> TreeNodeRow {
        TreeNodeRow {
            node_id: id.into(),
            tree: TREE_MEMWALKER.into(),
            doc_id: Some("d".into()),
            level: 0,
            ordinal: 0,
            parent_id: parent.map(Into::into),
            child_ids: vec!["a".into(), "b".into()],
            seg_id: None,
            summary: format!("summary of {id}"),
            surprise: None,
            n_tokens: 3,
        }
    }

    async fn stage(store: &TableStore, rows: &[&TreeNodeRow]) -> Vec<Fragment> {
        let batch = to_batch(rows).unwrap();
        store.stage_batch(Table::TreeNodes, batch).await.unwrap()
    }

    #[tokio::test]
    async fn changes_delete_by_key_then_append_and_a_crash_rolls_back_to_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let first = store
            .write_rows(&[node("a", None), node("b", Some("a"))])
            .await
            .unwrap();
        let mut changed = node("b", None);
        changed.summary = "changed".into();
        let staged = stage(&store, &[&changed, &node("c", None)]).await;
        let second = store
            .commit_staged(Table::TreeNodes, &["b".to_string()], false, staged)
            .await
            .unwrap();
        assert!(second > first);
        let mut rows: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        rows.sort();
        assert_eq!(rows, vec![node("a", None), changed, node("c", None)]);

        let checkpoint = store
            .commit_checkpoint(
                "{}".into(),
                vec![TableVersion {
                    table: Table::TreeNodes.name().into(),
                    version: second,
                }],
            )
            .await
            .unwrap();
        // A run that dies after writing a table but before its commit.
        let gone = ["a".to_string(), "c".to_string()];
        store
            .commit_staged(Table::TreeNodes, &gone, false, Vec::new())
            .await
            .unwrap();
        assert_eq!(store.read_rows::<TreeNodeRow>(None).await.unwrap().len(), 1);
        let rolled = store.roll_back_to(&checkpoint).await.unwrap();
        assert_eq!(rolled, vec![Table::TreeNodes]);
        let mut back: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        back.sort();
        assert_eq!(back, rows);
    }

    #[tokio::test]
    async fn lookup_indexes_are_created_then_brought_over_each_append() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::TreeNodes, 0).await.unwrap();
        let outside = |name: String| {
            let store = store.clone();
            async move { store.rows_outside_index(Table::TreeNodes, &name).await }
        };
        store.index_lookups(Table::TreeNodes).await.unwrap();
        assert_eq!(
            outside("node_id_btree".into()).await.unwrap(),
            None,
            "no rows: no index yet"
        );
        let mut version = 0;
        let rounds: Vec<[String; 2]> = (0..MERGE_INDEX_SEGMENTS_AT + 2)
            .map(|r| [format!("{r}a"), format!("{r}b")])
            .collect();
        for (round, ids) in rounds.iter().enumerate() {
            let rows: Vec<TreeNodeRow> = ids.iter().map(|id| node(id, None)).collect();
            let refs: Vec<&TreeNodeRow> = rows.iter().collect();
            let fragments = stage(&store, &refs).await;
            store
                .commit_staged(Table::TreeNodes, &[], false, fragments)
                .await
                .unwrap();
            if round > 0 {
                assert_eq!(
                    outside("node_id_btree".into()).await.unwrap(),
                    Some(2),
                    "appended, not indexed"
                );
            }
            version = store
                .index_lookups(Table::TreeNodes)
                .await
                .unwrap()
                .unwrap();
            for (column, kind) in Table::TreeNodes.column_indexes() {
                assert_eq!(
                    outside(kind.name(column)).await.unwrap(),
                    Some(0),
                    "{column}, round {round}"
                );
            }
            let segments = store
                .dataset(Table::TreeNodes, None)
                .await
                .unwrap()
                .unwrap()
                .load_indices_by_name("node_id_btree")
                .await
                .unwrap()
                .len();
            // One segment per commit, merged before they pass the limit.
            assert_eq!(
                segments,
                (round % MERGE_INDEX_SEGMENTS_AT) + 1,
                "round {round}"
            );
        }
        // A filtered read at that version finds the rows through the index.
        let dataset = store
            .dataset(Table::TreeNodes, Some(version))
            .await
            .unwrap()
            .unwrap();
        let mut scan = dataset.scan();
        scan.filter("node_id IN ('0b', '9a')").unwrap();
        let plan = scan.explain_plan(true).await.unwrap();
        assert!(plan.contains("ScalarIndexQuery"), "{plan}");
        assert_eq!(scan.count_rows().await.unwrap(), 2);
        // The summaries' terms are searched through the full-text index, which
        // covers the first round's rows and the last's.
        for id in ["0a", "9b"] {
            let mut search = dataset.scan();
            search
                .full_text_search(
                    lance_index::scalar::FullTextSearchQuery::new(id.to_string())
                        .with_column(search::TERMS.to_string())
                        .unwrap(),
                )
                .unwrap()
                .project(&["node_id"])
                .unwrap();
            let batches: Vec<RecordBatch> = search
                .try_into_stream()
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            let found: Vec<&str> = batches
                .iter()
                .flat_map(|b| strings(b, "node_id").unwrap().iter().flatten())
                .collect();
            assert_eq!(found, vec![id]);
        }
    }

    #[tokio::test]
    async fn staged_rows_are_invisible_until_a_commit_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::TreeNodes, 0).await.unwrap();
        let base = store
            .commit_staged(
                Table::TreeNodes,
                &[],
                false,
                stage(&store, &[&node("a", None), &node("b", None)]).await,
            )
            .await
            .unwrap();
        // A round stages a changed "b" in two batches and removes the old one.
        let mut changed = node("b", Some("a"));
        changed.summary = "changed".into();
        let mut fragments = stage(&store, &[&changed]).await;
        fragments.extend(stage(&store, &[&node("c", None)]).await);
        let before: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        assert_eq!(before.len(), 2, "staged rows are not in the table");
        assert_eq!(
            store.table_version(Table::TreeNodes).await.unwrap(),
            Some(base)
        );
        // The delete sees the committed "b" only, not the staged one.
        store
            .commit_staged(Table::TreeNodes, &["b".to_string()], false, fragments)
            .await
            .unwrap();
        let mut rows: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        rows.sort();
        assert_eq!(rows, vec![node("a", None), changed, node("c", None)]);
        // Replacing deletes every row before adding the staged ones.
        let only = stage(&store, &[&node("d", None)]).await;
        store
            .commit_staged(Table::TreeNodes, &[], true, only)
            .await
            .unwrap();
        let rows: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        assert_eq!(rows, vec![node("d", None)]);
        let old: Vec<TreeNodeRow> = store.read_rows(Some(base)).await.unwrap();
        assert_eq!(old.len(), 2, "earlier versions stay readable");
    }

    #[tokio::test]
    async fn a_fragmented_table_is_compacted_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::TreeNodes, 0).await.unwrap();
        let mut fragments = Vec::new();
        for i in 0..=COMPACT_AT_FRAGMENTS {
            fragments.extend(stage(&store, &[&node(&format!("n{i:03}"), None)]).await);
        }
        let committed = store
            .commit_staged(Table::TreeNodes, &[], false, fragments)
            .await
            .unwrap();
        let count = |version| {
            let store = store.clone();
            async move {
                store
                    .dataset(Table::TreeNodes, Some(version))
                    .await
                    .unwrap()
                    .unwrap()
                    .count_fragments()
            }
        };
        assert!(count(committed).await > COMPACT_AT_FRAGMENTS);
        let compacted = store.compact_if_fragmented(Table::TreeNodes).await.unwrap();
        assert!(compacted > committed);
        assert!(count(compacted).await < COMPACT_AT_FRAGMENTS);
        let rows: Vec<TreeNodeRow> = store.read_rows(Some(compacted)).await.unwrap();
        assert_eq!(rows.len(), COMPACT_AT_FRAGMENTS + 1);
    }

    #[tokio::test]
    async fn rows_round_trip_through_lance_and_versions_advance() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let rows = vec![node("n2", Some("n1")), node("n1", None)];
        let v1 = store.write_rows(&rows).await.unwrap();
        let back: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        assert_eq!(
            back,
            vec![rows[1].clone(), rows[0].clone()],
            "sorted by key"
        );

        let v2 = store.write_rows(&rows[..1]).await.unwrap();
        assert!(v2 > v1);
        let old: Vec<TreeNodeRow> = store.read_rows(Some(v1)).await.unwrap();
        assert_eq!(old.len(), 2, "time travel to the first version");
        let new: Vec<TreeNodeRow> = store.read_rows(None).await.unwrap();
        assert_eq!(new.len(), 1);
    }

    #[tokio::test]
    async fn checkpoints_name_versions_and_epochs_increase() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        assert!(store.latest_checkpoint().await.unwrap().is_none());
        let errors = vec![ErrorRow::new(
            "ingest",
            "a.txt",
            None,
            "empty",
            "file is empty",
        )];
        let v = store.write_rows(&errors).await.unwrap();
        let versions = vec![TableVersion {
            table: "errors".into(),
            version: v,
        }];
        let first = store
            .commit_checkpoint("{}".into(), versions.clone())
            .await
            .unwrap();
        let second = store
            .commit_checkpoint("{}".into(), versions)
            .await
            .unwrap();
        assert_eq!((first.epoch, second.epoch), (1, 2));
        let latest = store.latest_checkpoint().await.unwrap().unwrap();
        assert_eq!(latest.epoch, 2);
        assert_eq!(latest.version_of(Table::Errors), Some(v));
        let read: Vec<ErrorRow> = store.read_at(&latest).await.unwrap();
        assert_eq!(read, errors);
    }

    #[tokio::test]
    async fn empty_tables_are_written_with_their_schema() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let rows: Vec<EntityRow> = Vec::new();
        store.write_rows(&rows).await.unwrap();
        let back: Vec<EntityRow> = store.read_rows(None).await.unwrap();
        assert!(back.is_empty());
        let missing: Vec<PageRow> = store.read_rows(None).await.unwrap();
        assert!(missing.is_empty(), "a table never written reads as empty");
    }

    async fn round_trip<R: TableRow + PartialEq + std::fmt::Debug>(
        store: &TableStore,
        rows: Vec<R>,
    ) {
        store.write_rows(&rows).await.unwrap();
        let back: Vec<R> = store.read_rows(None).await.unwrap();
        assert_eq!(back, rows, "{}", R::TABLE);
    }

    #[tokio::test]
    async fn every_table_round_trips_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        round_trip(
            &store,
            vec![DocumentRow {
                doc_id: "d".into(),
                source_uri: "/a/é.txt".into(),
                content_hash: "h".into(),
                version: 3,
                title: "Tïtle".into(),
                n_chars: 10,
                n_tokens: 4,
                ingested_at: 1_700_000_000_000_000,
                deleted: false,
                text: "Tïtle\n\nBody.".into(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![SegmentRow {
                seg_id: "s".into(),
                doc_id: "d".into(),
                ordinal: 0,
                start_char: 0,
                end_char: 10,
                text: "ten chars!".into(),
                n_tokens: 4,
                target_tokens: 1000,
            }],
        )
        .await;
        round_trip(&store, vec![node("a", None), node("b", Some("a"))]).await;
        round_trip(
            &store,
            vec![PageRow {
                page_id: "p".into(),
                doc_id: "d".into(),
                ordinal: 0,
                start_char: 0,
                end_char: 10,
                text: "ten chars!".into(),
                gist: "ten".into(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![EntityRow {
                entity_id: "e".into(),
                name: "Ada Lovelace".into(),
                entity_type: "person".into(),
                description: "mathematician".into(),
                aliases: vec!["Ada".into(), "Countess of Lovelace".into()],
                seg_ids: vec!["s".into()],
            }],
        )
        .await;
        round_trip(
            &store,
            vec![RelationRow {
                relation_id: "r".into(),
                source_id: "e".into(),
                target_id: "f".into(),
                description: "worked with".into(),
                seg_ids: vec![],
            }],
        )
        .await;
        round_trip(
            &store,
            vec![EmbeddingRow {
                owner_id: "s".into(),
                model: "hashing".into(),
                owner_kind: "segment".into(),
                vector: (0..DEFAULT_VECTOR_WIDTH).map(|i| i as f32 / 7.0).collect(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![LlmCallRow {
                call_key: "k".into(),
                backend: "openai".into(),
                model: "m".into(),
                task: "summarize".into(),
                stage: "tree".into(),
                doc_id: None,
                inputs: "{}".into(),
                reply: "ok".into(),
                tokens_in: 10,
                tokens_out: 2,
                latency_ms: 30,
                created_at: 1_700_000_000_000_000,
            }],
        )
        .await;
        round_trip(
            &store,
            vec![CallStatRow {
                stat_id: "1/raptor/summarize_with_facts".into(),
                epoch: 1,
                stage: "raptor".into(),
                task: "summarize_with_facts".into(),
                calls: 3,
                cache_hits: 4,
                tokens_in: 500,
                tokens_out: 60,
            }],
        )
        .await;
        round_trip(
            &store,
            vec![ErrorRow::new(
                "ingest",
                "x.bin",
                None,
                "binary",
                "NUL bytes",
            )],
        )
        .await;
        round_trip(
            &store,
            vec![GistMemoryRow {
                doc_id: "d".into(),
                gists: "The first page.\nThe second.".into(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![DocStateRow {
                doc_id: "d".into(),
                build: "b1".into(),
                state: r#"{"entities":[]}"#.into(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![LexiconRow {
                entry: "gist_memories page".into(),
                corpus: "gist_memories".into(),
                term: "page".into(),
                rows: 1,
                occurrences: 1,
            }],
        )
        .await;
        round_trip(
            &store,
            vec![CheckpointRow {
                epoch: 1,
                created_at: 5,
                source_positions: "{}".into(),
                table_versions: vec![TableVersion {
                    table: "documents".into(),
                    version: 2,
                }],
            }],
        )
        .await;
        let written: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for &table in Table::ALL {
            assert!(
                written.contains(&format!("{}.lance", table.name())),
                "{table}"
            );
        }
    }

    #[test]
    fn row_fields_match_the_declared_schemas() {
        // serde_arrow checks names and types when it builds a batch; an empty batch
        // still carries the full schema.
        let batch = to_batch::<TreeNodeRow>(&[]).unwrap();
        assert_eq!(batch.schema(), Table::TreeNodes.schema());
        assert_eq!(Table::from_name("tree_nodes"), Some(Table::TreeNodes));
    }

    #[test]
    fn an_unwritable_root_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        let store = TableStore::local(&file.join("tables")).unwrap();
        let err = store.check_writable().unwrap_err().to_string();
        assert!(err.contains("plain-file"), "{err}");
    }

    #[test]
    fn urls_and_paths_are_told_apart() {
        assert!(is_url("s3://bucket/x"));
        assert!(is_url("file:///tmp/x"));
        assert!(!is_url("./memory"));
        assert!(!is_url("/tmp/a://b"));
    }
}
