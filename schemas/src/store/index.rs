//! The indexes a commit keeps: B-trees, full-text and label lists over the
//! columns rows are looked up by, and the vectors' IVF index.

use std::collections::HashMap;
use std::sync::Arc;

use lance::dataset::Dataset;
use lance::dataset::statistics::DatasetStatisticsExt;
use lance::index::DatasetIndexExt;
use lance::index::vector::VectorIndexParams;
use lance_index::IndexType;
use lance_index::optimize::OptimizeOptions;
use lance_index::scalar::inverted::tokenizer::Language;
use lance_index::scalar::{BuiltinIndexType, InvertedIndexParams, ScalarIndexParams};
use lance_index::vector::bq::RQBuildParams;
use lance_index::vector::ivf::IvfBuildParams;
use lance_linalg::distance::DistanceType;

use super::{Result, TableStore};
use crate::{ColumnIndex, Table};

/// Fewest vectors the `embeddings` table is indexed at: below it a scan of
/// every vector is as fast as probing an index.
pub const VECTOR_INDEX_MIN_ROWS: usize = 1024;

/// Vectors sampled per IVF partition to train its centroids: within faiss's
/// advice (39 to 256). Lance's default of 256 loads every vector of a table of
/// up to 65,536 (256·√n ≥ n), and the training time with them.
const VECTOR_TRAINING_PER_PARTITION: usize = 64;

/// Bits per dimension of the index's RaBitQ codes: 128 bytes for a
/// 1,024-wide vector. A search re-ranks its candidates with the table's own
/// vectors, so more bits buy no recall there: over python3.11-doc's 19,553
/// vectors, the re-ranked top 5 and top 10 were those of 8-bit scalar
/// quantization (99.5% of the exact ones) at 157 bytes of index per vector
/// against 1,041 (`scripts/vector-index-recall`).
const VECTOR_RQ_BITS: u8 = 1;

/// Segments an index may have (one per commit that appended rows) before a
/// commit merges them: a lookup reads each segment, and a long `--watch` or
/// `--follow` commits every few seconds.
pub(super) const MERGE_INDEX_SEGMENTS_AT: usize = 8;

/// What a table holds before each kind of its [`Table::column_indexes`] is
/// made: an index costs bytes for every distinct value or term whatever the
/// table's size, and on a small table buys a read nothing or a few
/// milliseconds. An index made stays while its table shrinks; a table
/// rewritten whole gets its indexes again by what it then holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexFloor {
    /// Rows before B-trees, label lists and bitmaps. Lance's B-tree keeps its
    /// values in pages of 4,096, and a lookup reads a whole page: below one
    /// page it reads what a scan of the column reads. On pg-essays they were
    /// 0.59 bytes a byte of text (relations' three over 1,302 rows 111 KB).
    pub lookup_rows: u64,
    /// Bytes the search column takes on disk before its full-text index. A
    /// search without one reads and tokenizes every row's terms, a cost in
    /// their bytes, not their rows; the index costs some 35 bytes a distinct
    /// term, paid again in each table. pylance, a search for 64 candidates,
    /// without the index and with it: pg-essays' tree nodes (74 KB of terms
    /// on disk) 4.6 and 1.6 ms, its entities (55 KB) 4.1 and 2.5, its gist
    /// memories (45 KB) 4.3 and 2.2, its segments (296 KB) 14.9 and 2.8;
    /// the first three's indexes were about 0.7 bytes a byte of its text.
    pub full_text_bytes: u64,
}

impl Default for IndexFloor {
    fn default() -> Self {
        IndexFloor {
            lookup_rows: 4_096,
            full_text_bytes: 128 << 10,
        }
    }
}

impl IndexFloor {
    /// Every index made at a table's first row (tests that read through
    /// indexes over a few rows).
    pub fn none() -> Self {
        IndexFloor {
            lookup_rows: 0,
            full_text_bytes: 0,
        }
    }
}

/// The name of the `embeddings` table's vector index.
const VECTOR_INDEX_NAME: &str = "vector_ivf";

impl TableStore {
    /// Indexes the vectors of the `embeddings` table (IVF, cosine) once there
    /// are enough of them that an index beats a scan, and trains it anew with
    /// `retrain` (a rebuild replaced every vector); later appends join it as
    /// segments ([`TableStore::index_lookups`]). Returns the version. The
    /// partitions hold 1-bit RaBitQ codes of the vectors (randomly rotated,
    /// so each bit carries as much as any other), not the vectors: an
    /// IVF_FLAT index copies them whole (building one held about five times
    /// the table's vectors at once: pylance, 50K vectors, +255 MiB), and a
    /// search re-ranks its candidates with the table's own vectors
    /// (`refine_factor`).
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
        let params = VectorIndexParams::with_ivf_rq_params(
            DistanceType::Cosine,
            ivf,
            RQBuildParams {
                num_bits: VECTOR_RQ_BITS,
                ..RQBuildParams::default()
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

    /// Brings every index of `table` over the rows appended since it was last
    /// indexed (a new segment of each, so a lookup or search stays
    /// index-backed as the table grows), and creates each of the table's
    /// [`Table::column_indexes`] that is missing once the table holds what
    /// its kind waits for ([`IndexFloor`]); below it a read scans.
    /// Returns the table's version after; `None` when the table does not
    /// exist.
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
        if !missing.is_empty() {
            let rows = dataset
                .count_rows(None)
                .await
                .map_err(|e| self.lance_error(table, e))? as u64;
            let floor = self.index_floor;
            let mut due = Vec::new();
            for (column, kind) in missing {
                let reached = match kind {
                    ColumnIndex::FullText => {
                        column_bytes(&dataset, column)
                            .await
                            .map_err(|e| self.lance_error(table, e))?
                            >= floor.full_text_bytes
                    }
                    ColumnIndex::BTree | ColumnIndex::Labels | ColumnIndex::Bitmap => {
                        rows >= floor.lookup_rows
                    }
                };
                if rows > 0 && reached {
                    due.push((column, kind));
                }
            }
            for (column, kind) in due {
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

    /// The bytes `column` of the newest version of `table` takes on disk
    /// (what [`IndexFloor::full_text_bytes`] is measured against).
    pub async fn column_bytes(&self, table: Table, column: &str) -> Result<u64> {
        let Some(dataset) = self.dataset(table, None).await? else {
            return Ok(0);
        };
        (column_bytes(&dataset, column).await).map_err(|e| self.lance_error(table, e))
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
}

/// The bytes `column`'s values take on disk in `dataset`.
async fn column_bytes(dataset: &Dataset, column: &str) -> lance::Result<u64> {
    let Some(field) = dataset.schema().field(column) else {
        return Ok(0);
    };
    let stats = Arc::new(dataset.clone()).calculate_data_stats().await?;
    Ok((stats.fields.iter())
        .filter(|f| f.id == field.id as u32)
        .map(|f| f.bytes_on_disk)
        .sum())
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
