//! A round's summary, read back from the tables it committed.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{UInt32Type, UInt64Type};
use memweave_schemas::store::{Collected, primitives, strings};
use memweave_schemas::{CheckpointRow, ErrorRow, Table, TableStore};

use super::engine::Engine;
use super::{IndexSummary, Stages, TreeShape};
use crate::IndexError;

/// The summary of the memory at `checkpoint`, from its tables (row counts
/// from Lance's metadata; tokens and tree shapes from a scan of three small
/// columns). What the round changed is the caller's to fill in.
pub(super) fn summary(
    engine: &Engine,
    checkpoint: &CheckpointRow,
    started: Instant,
) -> Result<IndexSummary, IndexError> {
    let store = engine.store();
    let (counts, (tokens, chars), trees, mut errors) = engine.block_on(async {
        let mut counts = HashMap::new();
        for &table in Table::MEMORY {
            counts.insert(table, store.count_at(table, checkpoint).await? as usize);
        }
        let (mut tokens, mut chars) = (0, 0);
        let columns = ["n_tokens", "n_chars"];
        store
            .scan_at(Table::Documents, checkpoint, &columns, |batch| {
                tokens += u64_column(batch, "n_tokens").iter().flatten().sum::<u64>();
                chars += u64_column(batch, "n_chars").iter().flatten().sum::<u64>();
            })
            .await?;
        let trees = tree_shapes(store, checkpoint).await?;
        let errors: Vec<ErrorRow> = store.read_at(checkpoint).await?;
        Ok::<_, IndexError>((counts, (tokens, chars), trees, errors))
    })?;
    errors.sort_by(|a, b| (&a.source, &a.error_id).cmp(&(&b.source, &b.error_id)));
    let count = |table| counts.get(&table).copied().unwrap_or(0);
    let models = engine.model_report();
    Ok(IndexSummary {
        source: String::new(),
        tables: store.root().to_string(),
        epoch: checkpoint.epoch,
        files: 0,
        input_unit: "files",
        documents: count(Table::Documents),
        changed: 0,
        deleted: 0,
        tokens,
        segments: count(Table::Segments),
        trees,
        pages: count(Table::Pages),
        entities: count(Table::Entities),
        relations: count(Table::Relations),
        embeddings: count(Table::Embeddings),
        embedder: models.embedder,
        errors,
        wall: started.elapsed(),
        stages: Stages::default(),
        rows_written: 0,
        restored_bytes: 0,
        chars,
        backend: models.backend,
        cache: models.cache,
        pool: models.pool,
        collected: Collected::default(),
    })
}

/// Nodes, roots and depth of each kind of tree at `checkpoint`.
async fn tree_shapes(
    store: &TableStore,
    checkpoint: &CheckpointRow,
) -> Result<BTreeMap<String, TreeShape>, IndexError> {
    let mut shapes: BTreeMap<String, TreeShape> = BTreeMap::new();
    let columns = ["tree", "parent_id", "level"];
    store
        .scan_at(Table::TreeNodes, checkpoint, &columns, |batch| {
            let (Some(trees), Some(parents), Some(levels)) = (
                strings(batch, "tree"),
                strings(batch, "parent_id"),
                primitives::<UInt32Type>(batch, "level"),
            ) else {
                return;
            };
            for row in 0..batch.num_rows() {
                let shape = shapes.entry(trees.value(row).to_string()).or_default();
                shape.nodes += 1;
                shape.roots += usize::from(parents.is_null(row));
                shape.depth = shape.depth.max(levels.value(row));
            }
        })
        .await?;
    Ok(shapes)
}

/// The values of the `UInt64` column `name` of `batch` (none if it has no
/// such column).
fn u64_column(batch: &RecordBatch, name: &str) -> Vec<Option<u64>> {
    primitives::<UInt64Type>(batch, name)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}
