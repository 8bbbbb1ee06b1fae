//! Writing: rows staged and committed, tables created and compacted, the
//! lexicon counted.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::FieldRef;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{
    ColumnAlteration, CommitBuilder, Dataset, InsertBuilder, NewColumnTransform, WriteMode,
    WriteParams,
};
use lance::index::DatasetIndexExt;
use lance_index::optimize::OptimizeOptions;

use super::batches::{KEYS_PER_PREDICATE, key_in, to_batch};
use super::{Fragment, Result, StoreError, TableStore};
use crate::Table;
use crate::rows::LexiconRow;
use crate::rows::{CheckpointRow, TableRow, TableVersion};
use crate::search::{LexiconDelta, RankedCorpora, TOTALS};
use crate::tables::DEFAULT_VECTOR_WIDTH;
use crate::tables::MemoryTables;

/// How much larger than the newer fragments after it an older fragment may
/// be and still be merged with them. Merging the newest fragments while the
/// next older one is at most twice their rows keeps fragment sizes
/// geometric, as a size-tiered LSM tree does: a table of n rows has about
/// log₂ n fragments, each row is rewritten about log₂ n times over the
/// table's life, and a round that adds a few rows to a large table rewrites
/// only its few small newest fragments.
const TIER_RATIO: u64 = 2;
/// Live rows up to which a table whose history is removed is rewritten
/// whole, into one fragment, at every commit that changed it: a rewrite that
/// costs little, where tiers would leave a round's small fragment, its index
/// segments and its deleted rows beside the rest (four essays edited six
/// times under `--keep-checkpoints 1`: 1.30 times the bytes of a fresh build
/// with tiers).
const REWRITTEN_WHOLE_ROWS: u64 = 65_536;
/// The share of a fragment's rows deleted at which it is rewritten without
/// them: what deleted rows may add to a table's bytes.
const DELETED_SHARE: f32 = 0.1;
/// Data files a table whose history is kept may have before a commit
/// compacts it: few enough that a scan opens a handful of files per thousand
/// rows, many enough that most commits compact nothing (each rewrite is kept
/// with the history).
pub(super) const KEPT_HISTORY_FRAGMENTS: usize = 64;

/// How a commit compacts a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compaction {
    /// History is removed (a retention policy): tiers merged and deleted rows
    /// rewritten away at every commit, so that the versions retention
    /// removes take the data files only they need with them.
    Tiered,
    /// History is kept: what a round appended merged into one, and every
    /// fragment once a table has many.
    WhenFragmented,
}

/// How an existing table's schema differs from the one it declares
/// ([`TableStore::upgrade_columns`]).
#[derive(Debug, Default, PartialEq)]
struct Behind {
    /// Declared columns it lacks.
    absent: Vec<FieldRef>,
    /// Columns declared nullable that it holds as required.
    relaxed: Vec<String>,
    /// Columns it holds that are no longer declared.
    undeclared: Vec<String>,
    /// Declared columns whose declared metadata it lacks.
    metadata: Vec<FieldRef>,
}

/// Held while this process creates a table ([`TableStore::write_batch`]).
static CREATING_TABLES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
        if self.dataset(table, None).await?.is_some() {
            return self.write_as(table, batch, mode).await;
        }
        // Two writers that both find a table missing would both create it,
        // and Lance may let both creations commit, the later one's table
        // without the earlier one's rows (seen: the call cache's first flush
        // beside `prepare`'s creation of `llm_calls`). A process creates its
        // tables one at a time, looking again once it is its turn; across
        // processes, process 0's `prepare` makes them before any other writes.
        let _one_at_a_time = CREATING_TABLES.lock().await;
        match (self.table_version(table).await?, mode) {
            (Some(version), WriteMode::Create) => Ok(version),
            (Some(_), mode) => self.write_as(table, batch, mode).await,
            (None, _) => self.write_as(table, batch, WriteMode::Create).await,
        }
    }

    /// `batch` written to `table` in `mode`; the new version.
    async fn write_as(&self, table: Table, batch: RecordBatch, mode: WriteMode) -> Result<u64> {
        let uri = self.table_uri(table);
        let schema = batch.schema();
        let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
        let params = WriteParams {
            mode,
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

    /// Whether the `embeddings` table stores its vectors as single floats,
    /// as tables written before half floats do (`false` where it does not
    /// exist: [`TableStore::create_if_missing`] makes it with half floats).
    pub async fn vectors_are_single_floats(&self) -> Result<bool> {
        let Some(dataset) = self.dataset(Table::Embeddings, None).await? else {
            return Ok(false);
        };
        Ok(dataset.schema().field("vector").is_some_and(|vector| {
            matches!(
                vector.data_type(),
                arrow_schema::DataType::FixedSizeList(component, _)
                    if *component.data_type() == arrow_schema::DataType::Float32
            )
        }))
    }

    /// Brings an existing `table`'s schema up to the one it declares, for a
    /// memory a release before wrote: adds the columns its data lacks (all
    /// nullable), null for the rows already there, lets null into the
    /// columns that have become nullable, and drops the columns it no longer
    /// declares (pages kept their text before it was their document's), and
    /// gives its fields the metadata they declare (a compression: the files
    /// written and compacted from then on use it; the old ones stay as they are).
    /// Each changes the table's metadata only, so the memory is appended to
    /// as it is, and reads of its older versions find the new columns null
    /// and the dropped ones still there. Each process of a cluster may do
    /// this at once; the ones that lose the race find the schema upgraded.
    pub async fn upgrade_columns(&self, table: Table) -> Result<()> {
        let Some(mut dataset) = self.dataset(table, None).await? else {
            return Ok(());
        };
        let behind = |dataset: &Dataset| -> Behind {
            let present = dataset.schema();
            let declared = table.fields();
            let mut behind = Behind::default();
            for declared in &declared {
                let Some(old) = present.field(declared.name()) else {
                    behind.absent.push(Arc::clone(declared));
                    continue;
                };
                if declared.is_nullable() && !old.nullable {
                    behind.relaxed.push(declared.name().clone());
                }
                let missing = (declared.metadata().iter())
                    .any(|(key, value)| old.metadata.get(key) != Some(value));
                if missing {
                    behind.metadata.push(Arc::clone(declared));
                }
            }
            behind.undeclared = (present.fields.iter())
                .filter(|old| !declared.iter().any(|f| f.name() == &old.name))
                .map(|old| old.name.clone())
                .collect();
            behind
        };
        let Behind {
            absent,
            relaxed,
            undeclared,
            metadata,
        } = behind(&dataset);
        if let Some(required) = absent.iter().find(|f| !f.is_nullable()) {
            return Err(StoreError::Invalid {
                table,
                message: format!(
                    "column {} is missing and cannot be added as nulls: this memory was \
                     written by an older memweave; build it again",
                    required.name()
                ),
            });
        }
        let upgraded = async {
            if !relaxed.is_empty() {
                let alterations: Vec<ColumnAlteration> = (relaxed.iter())
                    .map(|name| ColumnAlteration::new(name.clone()).set_nullable(true))
                    .collect();
                dataset.alter_columns(&alterations).await?;
            }
            if !absent.is_empty() {
                let nulls =
                    NewColumnTransform::AllNulls(Arc::new(arrow_schema::Schema::new(absent)));
                dataset.add_columns(nulls, None, None).await?;
            }
            if !undeclared.is_empty() {
                let names: Vec<&str> = undeclared.iter().map(String::as_str).collect();
                dataset.drop_columns(&names).await?;
            }
            if !metadata.is_empty() {
                let mut update = dataset.update_field_metadata();
                for field in &metadata {
                    let entries = (field.metadata().iter()).map(|(k, v)| (k.as_str(), v.as_str()));
                    update = update.update(field.name().as_str(), entries)?;
                }
                update.await?;
            }
            Ok::<_, lance::Error>(())
        };
        match upgraded.await {
            Ok(()) => Ok(()),
            Err(e) => match self.dataset(table, None).await? {
                Some(now) if behind(&now) == Behind::default() => Ok(()),
                _ => Err(self.lance_error(table, e)),
            },
        }
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
            // Every row is replaced: kept, the indexes would go on holding the
            // old rows' entries beside the new rows' (a memory rebuilt for a
            // new state format carried both); they are built again over the
            // new rows after the commit.
            let names: BTreeSet<String> = (dataset.load_indices().await)
                .map_err(|e| self.lance_error(table, e))?
                .iter()
                .map(|index| index.name.clone())
                .collect();
            for name in names {
                dataset
                    .drop_index(&name)
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

    /// Compacts `table` as `compaction` says; `since` is the table's version
    /// the newest checkpoint names (`None` before the first). Tiered: a table of
    /// at most [`REWRITTEN_WHOLE_ROWS`] live rows into one fragment; a larger
    /// one merges its newest small fragments (see [`TIER_RATIO`]), and rewrites any
    /// fragment with more than [`DELETED_SHARE`] of its rows deleted: each
    /// round of a long `--watch` or `--follow` adds a fragment and deletes
    /// rows, which would otherwise stay in the table's files for good. History
    /// kept: every fragment once there are more than
    /// [`KEPT_HISTORY_FRAGMENTS`], else what the round appended into one. A new
    /// version when anything is rewritten: earlier ones stay readable (until
    /// retention removes them), so checkpoints keep their time travel. Returns
    /// the table's version.
    pub async fn compact(
        &self,
        table: Table,
        compaction: Compaction,
        since: Option<u64>,
    ) -> Result<u64> {
        let mut dataset = self.existing(table).await?;
        let plan = match compaction {
            Compaction::WhenFragmented if dataset.count_fragments() > KEPT_HISTORY_FRAGMENTS => {
                Some(Plan::whole(&dataset))
            }
            Compaction::WhenFragmented => self.appended_since(&dataset, table, since).await?,
            Compaction::Tiered => {
                let sizes: Vec<FragmentSize> = (dataset.get_fragments().iter())
                    .map(|fragment| FragmentSize::of(fragment.metadata()))
                    .collect();
                let live: u64 = sizes.iter().map(FragmentSize::live).sum();
                let untidy = sizes.len() > 1 || sizes.iter().any(|f| f.deleted > 0);
                if live <= REWRITTEN_WHOLE_ROWS {
                    untidy.then(|| Plan::whole(&dataset))
                } else {
                    plan(&sizes)
                }
            }
        };
        if let Some(plan) = plan {
            self.rewrite(&mut dataset, table, plan).await?;
        }
        Ok(dataset.version().version)
    }

    /// The fragments of `dataset` that its version `since` does not have,
    /// merged into one, the others left alone; `None` where that is one
    /// fragment or none. What a round appended is referenced only by versions
    /// no checkpoint names, which retention removes with their files, so the
    /// rewrite keeps no second copy even when the history is kept. A round
    /// stages a fragment a batch (and the call cache one a flush: 3,878 after
    /// a first build of 1M short documents); in one fragment a table's pages
    /// are larger and compress better (20,000 short documents: 4.12 → 3.85
    /// bytes of memory a byte of text).
    async fn appended_since(
        &self,
        dataset: &Dataset,
        table: Table,
        since: Option<u64>,
    ) -> Result<Option<Plan>> {
        let then = match since {
            Some(version) => self.dataset(table, Some(version)).await?,
            None => None,
        };
        let before: BTreeSet<u32> = then.iter().flat_map(fragment_ids).collect();
        let (left_alone, merged): (Vec<u32>, Vec<u32>) =
            (fragment_ids(dataset).into_iter()).partition(|id| before.contains(id));
        Ok((merged.len() > 1).then_some(Plan { merged, left_alone }))
    }

    async fn existing(&self, table: Table) -> Result<Dataset> {
        self.dataset(table, None)
            .await?
            .ok_or_else(|| StoreError::Invalid {
                table,
                message: "compacting a table that does not exist".into(),
            })
    }

    /// Rewrites every fragment but those `plan` leaves alone: its merged ones
    /// into one, after one segment of each index covers them all (Lance
    /// merges no fragments that different segments cover: the call cache's,
    /// indexed every 65,536 rows, were never merged), any other without its
    /// deleted rows.
    async fn rewrite(&self, dataset: &mut Dataset, table: Table, plan: Plan) -> Result<()> {
        self.share_index_segments(dataset, table, &plan.merged)
            .await?;
        let options = CompactionOptions {
            excluded_fragment_ids: plan.left_alone,
            materialize_deletions_threshold: DELETED_SHARE,
            ..CompactionOptions::default()
        };
        compact_files(dataset, options, None)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        Ok(())
    }

    /// Merges, per index of `table`, the segments that cover any of
    /// `fragments` (the newest ones) and indexes the rows no segment covers
    /// yet, into one: Lance compacts together only fragments that the same
    /// index segments cover, and each commit adds a segment for its rows.
    async fn share_index_segments(
        &self,
        dataset: &mut Dataset,
        table: Table,
        fragments: &[u32],
    ) -> Result<()> {
        if fragments.is_empty() {
            return Ok(());
        }
        let indices = dataset
            .load_indices()
            .await
            .map_err(|e| self.lance_error(table, e))?;
        let mut covering: HashMap<String, usize> = HashMap::new();
        for index in indices.iter() {
            let covers = (index.fragment_bitmap.as_ref())
                .is_some_and(|bitmap| fragments.iter().any(|id| bitmap.contains(*id)));
            *covering.entry(index.name.clone()).or_default() += usize::from(covers);
        }
        for (name, segments) in covering {
            let options = OptimizeOptions::merge(segments).index_names(vec![name]);
            dataset
                .optimize_indices(&options)
                .await
                .map_err(|e| self.lance_error(table, e))?;
        }
        Ok(())
    }

    /// Appends `rows` to `R`'s table (creating it), as a new version; returns it.
    pub async fn append_rows<R: TableRow>(&self, rows: &[R]) -> Result<u64> {
        let refs: Vec<&R> = rows.iter().collect();
        let batch = to_batch(&refs)?;
        self.write_batch(R::TABLE, batch, WriteMode::Append).await
    }

    /// Applies `delta`, counted for `ranked`, to the `lexicon` table (to an
    /// empty one with `replace`, a rebuild): the rows of the terms it
    /// changes deleted and their new counts appended, one version. Returns
    /// it. A lexicon that counts a corpus `ranked` does not (one written
    /// before it counted only these, or for another finest cut) is written
    /// again without it, once: a stale corpus's totals would mislead the
    /// readers, and its rows would stay for good.
    pub async fn apply_lexicon(
        &self,
        delta: &LexiconDelta,
        ranked: RankedCorpora,
        replace: bool,
    ) -> Result<u64> {
        let table = Table::Lexicon;
        self.create_if_missing(table, DEFAULT_VECTOR_WIDTH).await?;
        let mut replace = replace;
        let current: Vec<LexiconRow> = if replace {
            Vec::new()
        } else {
            let version = self.table_version(table).await?.unwrap_or_default();
            let changed = (self.rows_with_keys::<LexiconRow>(version, &delta.terms())).await?;
            let stale = |row: &LexiconRow| !ranked.counts(&row.corpus);
            match changed.iter().any(|row| row.term == TOTALS && stale(row)) {
                true => {
                    replace = true;
                    let all: Vec<LexiconRow> = self.read_rows(Some(version)).await?;
                    all.into_iter().filter(|row| !stale(row)).collect()
                }
                false => changed,
            }
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
        let removed: BTreeSet<String> = current.into_iter().map(|row| row.term).collect();
        let removed: Vec<String> = removed.into_iter().collect();
        self.commit_staged(table, &removed, replace, fragments)
            .await
    }

    /// Commits `memory` as one round, as the indexer commits one: its rows
    /// appended to the memory tables (replacing their content, with
    /// `replace`), the lexicon counted, the indexes brought over them, and a
    /// checkpoint naming the new versions (and the previous checkpoint's
    /// others). For programs that make a memory without the indexing
    /// dataflow: tests, benchmarks. `memory`'s finest cut is taken for the
    /// memory's (the lexicon counts its passages, [`RankedCorpora`]).
    pub async fn commit_memory(
        &self,
        memory: &MemoryTables,
        replace: bool,
    ) -> Result<CheckpointRow> {
        let width = memory
            .embeddings
            .first()
            .map_or(DEFAULT_VECTOR_WIDTH, |e| e.vector.len());
        let ranked = RankedCorpora::of_cuts(memory.segments.iter().map(|s| s.target_tokens));
        let mut lexicon = LexiconDelta::default();
        for row in memory.rows() {
            lexicon.count(&row, 1, ranked);
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
        self.apply_lexicon(&lexicon, ranked, replace).await?;
        let version = self
            .index_lookups(Table::Lexicon)
            .await?
            .unwrap_or_default();
        versions.insert(Table::Lexicon.name().to_string(), version);
        let vectors = latest.as_ref().and_then(CheckpointRow::vectors);
        let positions = latest.map_or_else(|| "{}".to_string(), |c| c.source_positions);
        let versions = versions
            .into_iter()
            .map(|(table, version)| TableVersion { table, version })
            .collect();
        self.commit_checkpoint(positions, versions, vectors).await
    }
}

/// Deletes the rows of `table` whose key is one of `keys`.
async fn delete_keys(dataset: &mut Dataset, table: Table, keys: &[String]) -> lance::Result<()> {
    for keys in keys.chunks(KEYS_PER_PREDICATE) {
        dataset.delete(&key_in(table, keys)).await?;
    }
    Ok(())
}

/// A fragment's rows, and how many of them are deleted.
#[derive(Debug, Clone, Copy)]
struct FragmentSize {
    id: u32,
    rows: u64,
    deleted: u64,
}

impl FragmentSize {
    fn of(meta: &Fragment) -> Self {
        let deleted = meta
            .deletion_file
            .as_ref()
            .and_then(|file| file.num_deleted_rows);
        FragmentSize {
            id: meta.id as u32,
            rows: meta.physical_rows.unwrap_or_default() as u64,
            deleted: deleted.unwrap_or_default() as u64,
        }
    }

    fn live(&self) -> u64 {
        self.rows.saturating_sub(self.deleted)
    }

    fn mostly_deleted(&self) -> bool {
        self.deleted as f64 > f64::from(DELETED_SHARE) * self.rows as f64
    }
}

/// The ids of `dataset`'s fragments, oldest first.
fn fragment_ids(dataset: &Dataset) -> Vec<u32> {
    (dataset.get_fragments().iter())
        .map(|fragment| fragment.metadata().id as u32)
        .collect()
}

/// What a tiered compaction rewrites, of fragments listed oldest first.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    /// The newest fragments, merged into one: the segments of their indexes
    /// are merged first.
    merged: Vec<u32>,
    /// The fragments left as they are (rewritten besides `merged`: those
    /// past the deleted share, each alone).
    left_alone: Vec<u32>,
}

impl Plan {
    /// Every fragment of `dataset` merged into one.
    fn whole(dataset: &Dataset) -> Plan {
        Plan {
            merged: fragment_ids(dataset),
            left_alone: Vec::new(),
        }
    }
}

/// What a compaction of `fragments` (oldest first) rewrites, or `None` when
/// nothing: the newest are merged while the next older one has at most
/// [`TIER_RATIO`] times their live rows, and any fragment past the deleted
/// share is rewritten.
fn plan(fragments: &[FragmentSize]) -> Option<Plan> {
    let mut tail_rows = 0u64;
    let mut tail = 0;
    for fragment in fragments.iter().rev() {
        if tail > 0 && fragment.live() > TIER_RATIO * tail_rows {
            break;
        }
        tail += 1;
        tail_rows += fragment.live();
    }
    let merged = if tail >= 2 {
        &fragments[fragments.len() - tail..]
    } else {
        &[]
    };
    let rewritten =
        |index: usize| index >= fragments.len() - merged.len() || fragments[index].mostly_deleted();
    let left_alone: Vec<u32> = (0..fragments.len())
        .filter(|&index| !rewritten(index))
        .map(|index| fragments[index].id)
        .collect();
    (left_alone.len() < fragments.len()).then(|| Plan {
        merged: merged.iter().map(|f| f.id).collect(),
        left_alone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left_alone_of(fragments: &[FragmentSize]) -> Option<Vec<u32>> {
        plan(fragments).map(|plan| plan.left_alone)
    }

    fn sizes(rows: &[(u64, u64)]) -> Vec<FragmentSize> {
        (rows.iter().enumerate())
            .map(|(id, &(rows, deleted))| FragmentSize {
                id: id as u32,
                rows,
                deleted,
            })
            .collect()
    }

    #[test]
    fn the_newest_small_fragments_merge_and_mostly_deleted_ones_are_rewritten() {
        // A build's large fragment and a round's small one: nothing to do.
        assert_eq!(left_alone_of(&sizes(&[(1_000_000, 0), (100, 0)])), None);
        // Two rounds' alike: merged, the large one left alone.
        assert_eq!(
            left_alone_of(&sizes(&[(1_000_000, 0), (100, 0), (120, 0)])),
            Some(vec![0])
        );
        // Only the newest are merged (their index segments first); a
        // fragment past the deleted share is rewritten alone.
        let merged = |rows: &[(u64, u64)]| plan(&sizes(rows)).map(|plan| plan.merged);
        assert_eq!(
            merged(&[(1_000_000, 0), (100, 0), (120, 0)]),
            Some(vec![1, 2])
        );
        assert_eq!(
            merged(&[(1_000, 101), (1_000_000, 0), (10, 0)]),
            Some(Vec::new())
        );
        // Growing tiers: 400 joins 100 + 150 (at most twice 250), 2,000 does not.
        assert_eq!(
            left_alone_of(&sizes(&[(2_000, 0), (400, 0), (150, 0), (100, 0)])),
            Some(vec![0])
        );
        // A fragment with more than a tenth of its rows deleted is rewritten
        // where it is; one with a tenth, not.
        assert_eq!(
            left_alone_of(&sizes(&[(1_000, 101), (1_000_000, 0), (10, 0)])),
            Some(vec![1, 2])
        );
        assert_eq!(
            left_alone_of(&sizes(&[(1_000, 100), (1_000_000, 0), (10, 0)])),
            None
        );
        // Deleted rows do not count towards a fragment's tier.
        assert_eq!(
            left_alone_of(&sizes(&[(1_000, 900), (100, 0)])),
            Some(Vec::new())
        );
        assert_eq!(left_alone_of(&[]), None);
    }

    /// Rounds of equal appends, each compacted as a commit would: the
    /// fragments stay few (about log₂ of the rounds) and every row is
    /// rewritten a few times, not once per round.
    #[test]
    fn equal_rounds_keep_few_fragments_and_rewrite_each_row_a_few_times() {
        let mut fragments: Vec<FragmentSize> = Vec::new();
        let mut rewritten_rows = 0u64;
        let mut next_id = 0;
        for _ in 0..1_000 {
            fragments.push(FragmentSize {
                id: next_id,
                rows: 10,
                deleted: 0,
            });
            next_id += 1;
            if let Some(alone) = left_alone_of(&fragments) {
                let (kept, merged): (Vec<FragmentSize>, Vec<FragmentSize>) =
                    fragments.iter().partition(|f| alone.contains(&f.id));
                let rows: u64 = merged.iter().map(|f| f.live()).sum();
                rewritten_rows += rows;
                fragments = kept;
                fragments.push(FragmentSize {
                    id: next_id,
                    rows,
                    deleted: 0,
                });
                next_id += 1;
            }
        }
        assert!(fragments.len() <= 12, "{} fragments", fragments.len());
        assert!(
            rewritten_rows <= 12 * 10_000,
            "{rewritten_rows} rows rewritten for 10,000 appended"
        );
    }
}
