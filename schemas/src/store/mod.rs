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

use lance::dataset::builder::DatasetBuilder;
use lance::dataset::{Dataset, WriteMode};
use lance::io::{ObjectStoreParams, StorageOptionsAccessor};
use lance::session::Session;
pub use lance::table::format::Fragment;

use crate::Table;
use crate::rows::{CheckpointRow, TableVersion, VectorSpec, now_micros};

mod batches;
mod index;
mod read;
mod retain;
mod write;

pub use batches::{
    KEYS_PER_PREDICATE, batch_rows, primitives, rows_batch, rows_of, sql_string, sql_strings,
    strings, to_batch, with_single_float_vectors,
};
pub use index::{IndexFloor, VECTOR_INDEX_MIN_ROWS};
pub use read::{StoredBytes, present_columns};
pub use retain::{Collected, Retention};
pub use write::Compaction;

/// What reading or writing the tables failed with. Each message ends with
/// its cause's own, and names no `source()`: an error chain (`{:#}`, a
/// log's `error` field) then says it once, not twice.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("tables root {root}: {reason}")]
    Root { root: String, reason: String },
    #[error("table {table} at {uri}: {cause}")]
    Lance {
        table: Table,
        uri: String,
        cause: Box<lance::Error>,
    },
    #[error("table {table}: rows do not match the schema: {cause}")]
    Rows {
        table: Table,
        cause: serde_arrow::Error,
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
    /// Rows a table holds before each kind of index is made on it.
    index_floor: IndexFloor,
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
            index_floor: IndexFloor::default(),
        })
    }

    /// This store, opening its datasets in `session`.
    pub fn with_session(mut self, session: Arc<Session>) -> Self {
        self.session = Some(session);
        self
    }

    /// This store, making a table's indexes once it holds `floor`'s rows.
    pub fn with_index_floor(mut self, floor: IndexFloor) -> Self {
        self.index_floor = floor;
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
        vectors: Option<VectorSpec>,
    ) -> Result<CheckpointRow> {
        versions.sort();
        let epoch = self.latest_checkpoint().await?.map_or(1, |c| c.epoch + 1);
        let (vector_model, vector_segment_tokens) = match vectors {
            Some(spec) => (Some(spec.model), Some(spec.segment_tokens)),
            None => (None, None),
        };
        let row = CheckpointRow {
            epoch,
            created_at: now_micros(),
            source_positions,
            table_versions: versions,
            vector_model,
            vector_segment_tokens,
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
            cause: Box::new(source),
        }
    }
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
    use std::collections::BTreeSet;

    use arrow_array::RecordBatch;
    use futures::TryStreamExt;
    use lance::dataset::statistics::DatasetStatisticsExt;
    use lance::index::DatasetIndexExt;

    use super::index::MERGE_INDEX_SEGMENTS_AT;
    use super::write::KEPT_HISTORY_FRAGMENTS;
    use super::*;
    use crate::rows::*;
    use crate::search;
    use crate::{DEFAULT_VECTOR_WIDTH, MemoryRow};

    /// A call of document `d`, keyed `key`, its reply "r".
    fn call_row(key: &str) -> LlmCallRow {
        LlmCallRow {
            call_key: key.into(),
            backend: "b".into(),
            model: "m".into(),
            task: "t".into(),
            stage: "s".into(),
            doc_id: Some("d".into()),
            inputs: None,
            reply: "r".into(),
            tokens_in: 1,
            tokens_out: 1,
            latency_ms: 1,
            created_at: 1,
            subject: None,
        }
    }

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
            summary: Some(format!("summary of {id}")),
            surprise: None,
            n_tokens: 3,
            terms: String::new(),
            acl: Vec::new(),
        }
        .with_terms()
    }

    /// Rows that do not fit their type fail naming the table and the reason,
    /// and say the reason once along the error's chain.
    #[test]
    fn a_failed_read_says_its_cause_once() {
        let batch = RecordBatch::try_from_iter([(
            "node_id",
            Arc::new(arrow_array::Int32Array::from(vec![1])) as arrow_array::ArrayRef,
        )])
        .unwrap();
        let failed = batch_rows::<TreeNodeRow>(Table::TreeNodes, &batch).unwrap_err();
        let said = failed.to_string();
        assert!(
            said.starts_with("table tree_nodes: rows do not match the schema: "),
            "{said}"
        );
        let mut chain = said.clone();
        let mut cause = std::error::Error::source(&failed);
        while let Some(next) = cause {
            chain.push_str(&format!(": {next}"));
            cause = next.source();
        }
        assert_eq!(
            chain, said,
            "the cause is in the message, not again after it"
        );
    }

    /// A leaf that is its segment's own text is written without the terms
    /// its segment's row holds, and gets them back from that row; a leaf
    /// with a summary of its own keeps its summary's.
    #[test]
    fn an_own_text_leaf_keeps_its_terms_once_on_its_segment() {
        let text = "lighthouse keepers log the storms";
        let segment = Segment::new(
            SegmentRow {
                seg_id: "s".into(),
                doc_id: "d".into(),
                ordinal: 0,
                start_char: 0,
                end_char: text.chars().count() as u64,
                n_tokens: 5,
                target_tokens: 1000,
                terms: String::new(),
                acl: Vec::new(),
            },
            text.into(),
        );
        let mut own = TreeNodeRow {
            seg_id: Some("s".into()),
            summary: Some(text.into()),
            ..node("own", None)
        }
        .with_terms();
        own.forget_own_text(text);
        let summarised = TreeNodeRow {
            seg_id: Some("s".into()),
            ..node("summarised", None)
        };
        assert!(own.is_own_text() && !summarised.is_own_text());
        assert_eq!(own.terms, segment.row.terms);
        let batch = to_batch(&[&own, &summarised]).unwrap();
        let mut read: Vec<TreeNodeRow> = batch_rows(Table::TreeNodes, &batch).unwrap();
        assert_eq!(read[0].terms, "", "the table keeps the leaf's terms once");
        assert_eq!(read[1], summarised);
        TreeNodeRow::fill_own_text_terms(&mut read, std::slice::from_ref(&segment.row));
        assert_eq!(read, vec![own, summarised]);
    }

    /// Writers that each find a table missing and create it at once all
    /// write their rows: the process creates it once, and the others write
    /// into it (two creations may both commit, the later without the
    /// earlier's rows).
    #[tokio::test]
    async fn writers_creating_one_table_at_once_all_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let ids: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
        let nodes: Vec<[TreeNodeRow; 1]> = ids.iter().map(|id| [node(id, None)]).collect();
        let writes = nodes.iter().map(|one| store.append_rows(one));
        let written = futures::future::join_all(writes).await;
        assert!(written.iter().all(Result::is_ok), "{written:?}");
        let empty = store.create_if_missing(Table::TreeNodes, 0).await;
        assert!(empty.is_ok(), "{empty:?}");
        let mut read: Vec<String> = (store.read_rows::<TreeNodeRow>(None).await.unwrap())
            .into_iter()
            .map(|n| n.node_id)
            .collect();
        read.sort();
        assert_eq!(read, ids);
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
        let changed = TreeNodeRow {
            summary: Some("changed".into()),
            ..node("b", None)
        }
        .with_terms();
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
                None,
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

    /// The processes of a cluster each append their model calls to one table
    /// (made before any of them calls a model, as a racing create could
    /// overwrite another's rows): appends at once from many writers all land.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn appends_at_once_from_many_writers_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::TreeNodes, 0).await.unwrap();
        let writers: Vec<_> = (0..8)
            .map(|writer| {
                let store = TableStore::local(dir.path()).unwrap();
                // schemas depends on no crate of ours, the wrapper's included.
                #[allow(clippy::disallowed_methods)]
                tokio::spawn(async move {
                    let id = format!("n{writer}");
                    store.append_rows(&[node(&id, None)]).await
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap().unwrap();
        }
        let mut ids: Vec<String> = store
            .read_rows::<TreeNodeRow>(None)
            .await
            .unwrap()
            .into_iter()
            .map(|row| row.node_id)
            .collect();
        ids.sort();
        assert_eq!(ids, (0..8).map(|n| format!("n{n}")).collect::<Vec<_>>());
    }

    /// A table gets each kind of index once it holds what its floor names
    /// (rows for a lookup index, bytes of terms for a full-text one), and
    /// reads find the same rows on either side: below, a lookup and a search
    /// scan them.
    #[tokio::test]
    async fn indexes_wait_for_their_floor_and_reads_find_rows_either_side() {
        let dir = tempfile::tempdir().unwrap();
        let nodes = |ids: std::ops::Range<usize>| -> Vec<TreeNodeRow> {
            ids.map(|n| node(&format!("n{n}"), None)).collect()
        };
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::TreeNodes, 0).await.unwrap();
        store.append_rows(&nodes(0..2)).await.unwrap();
        let two_rows = store.column_bytes(Table::TreeNodes, search::TERMS).await;
        let floor = IndexFloor {
            lookup_rows: 6,
            full_text_bytes: two_rows.unwrap() + 1,
        };
        let store = store.with_index_floor(floor);
        let full_text = BTreeSet::from([format!("{}_fts", search::TERMS)]);
        let every: BTreeSet<String> = (Table::TreeNodes.column_indexes().iter())
            .map(|(column, kind)| kind.name(column))
            .collect();
        for (rows, indexed) in [(2, BTreeSet::new()), (4, full_text), (6, every)] {
            if rows > 2 {
                store.append_rows(&nodes(rows - 2..rows)).await.unwrap();
            }
            store.index_lookups(Table::TreeNodes).await.unwrap();
            let dataset = store
                .dataset(Table::TreeNodes, None)
                .await
                .unwrap()
                .unwrap();
            let indices = dataset.load_indices().await.unwrap();
            let names: BTreeSet<String> = indices.iter().map(|i| i.name.clone()).collect();
            assert_eq!(names, indexed, "{rows} rows");
            for id in ["n0", &format!("n{}", rows - 1)] {
                let mut lookup = dataset.scan();
                lookup.filter(&format!("node_id = '{id}'")).unwrap();
                assert_eq!(lookup.count_rows().await.unwrap(), 1, "{id} of {rows}");
                let mut search = dataset.scan();
                let query = lance_index::scalar::FullTextSearchQuery::new(id.to_string())
                    .with_column(search::TERMS.to_string())
                    .unwrap();
                search.full_text_search(query).unwrap();
                assert_eq!(search.count_rows().await.unwrap(), 1, "{id} of {rows}");
            }
        }
    }

    #[tokio::test]
    async fn lookup_indexes_are_created_then_brought_over_each_append() {
        let dir = tempfile::tempdir().unwrap();
        let store = (TableStore::local(dir.path()).unwrap()).with_index_floor(IndexFloor::none());
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
        let changed = TreeNodeRow {
            summary: Some("changed".into()),
            ..node("b", Some("a"))
        }
        .with_terms();
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

    /// A table written before a column was declared, before another became
    /// nullable and before its replies were compressed, gets the one (null
    /// for its rows), lets null into the other and declares the compression;
    /// then it takes rows that need both.
    #[tokio::test]
    async fn an_older_table_is_upgraded_to_the_declared_columns() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let call = |key: &str, inputs: Option<&str>, subject: Option<&str>| LlmCallRow {
            doc_id: None,
            inputs: inputs.map(str::to_string),
            subject: subject.map(str::to_string),
            ..call_row(key)
        };
        let full = to_batch(&[&call("old", Some("p"), None)]).unwrap();
        let without = full
            .project(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
            .unwrap();
        let older_fields: Vec<arrow_schema::Field> = (without.schema().fields().iter())
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_nullable(f.is_nullable() && f.name() != "inputs")
                    .with_metadata(HashMap::new())
            })
            .collect();
        let older = RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(older_fields)),
            without.columns().to_vec(),
        )
        .unwrap();
        assert!(older.schema().field_with_name("subject").is_err());
        store
            .write_batch(Table::LlmCalls, older, WriteMode::Create)
            .await
            .unwrap();
        let newer = call("new", None, Some("tree"));
        let appended = store.append_rows(std::slice::from_ref(&newer)).await;
        assert!(appended.is_err(), "the older table refuses the new row");
        store.upgrade_columns(Table::LlmCalls).await.unwrap();
        store.upgrade_columns(Table::LlmCalls).await.unwrap();
        let dataset = store.dataset(Table::LlmCalls, None).await.unwrap().unwrap();
        let inputs = dataset.schema().field("inputs").unwrap();
        assert!(inputs.nullable, "inputs lets null in");
        let reply = dataset.schema().field("reply").unwrap();
        assert_eq!(
            reply.metadata.get(crate::tables::COMPRESSION_KEY),
            Some(&"zstd".to_string()),
            "replies are compressed as declared from then on"
        );
        assert_eq!(
            reply.metadata.get(crate::tables::STRUCTURAL_ENCODING_KEY),
            Some(&"miniblock".to_string()),
            "and several to a block"
        );
        store
            .append_rows(std::slice::from_ref(&newer))
            .await
            .unwrap();
        let mut rows: Vec<LlmCallRow> = store.read_rows(None).await.unwrap();
        rows.sort();
        assert_eq!(rows, [newer, call("old", Some("p"), None)]);
    }

    /// Pages written when they kept their text and every gist: the table
    /// refuses pages without them until the upgrade drops the column and
    /// lets a page be its own gist, and the older rows read back as pages.
    #[tokio::test]
    async fn a_column_no_longer_declared_is_dropped_from_an_older_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let page = |id: &str, gist: Option<&str>| PageRow {
            page_id: id.into(),
            doc_id: "d".into(),
            ordinal: 0,
            start_char: 0,
            end_char: 3,
            gist: gist.map(str::to_string),
            acl: Vec::new(),
        };
        let current = to_batch(&[&page("old", Some("g"))]).unwrap();
        let text = arrow_array::StringArray::from(vec!["old"]);
        let mut fields: Vec<arrow_schema::Field> = (current.schema().fields().iter())
            .map(|f| f.as_ref().clone().with_nullable(false))
            .collect();
        fields.insert(
            5,
            arrow_schema::Field::new("text", arrow_schema::DataType::Utf8, false),
        );
        let mut columns = current.columns().to_vec();
        columns.insert(5, Arc::new(text));
        let older =
            RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns).unwrap();
        store
            .write_batch(Table::Pages, older, WriteMode::Create)
            .await
            .unwrap();
        let appended = store.append_rows(&[page("new", None)]).await;
        assert!(
            appended.is_err(),
            "the older table refuses a page without text"
        );
        store.upgrade_columns(Table::Pages).await.unwrap();
        store.upgrade_columns(Table::Pages).await.unwrap();
        let dataset = store.dataset(Table::Pages, None).await.unwrap().unwrap();
        assert!(dataset.schema().field("text").is_none());
        store.append_rows(&[page("new", None)]).await.unwrap();
        let mut rows: Vec<PageRow> = store.read_rows(None).await.unwrap();
        rows.sort();
        assert_eq!(rows, [page("new", None), page("old", Some("g"))]);
    }

    /// Vectors are stored as half floats, and a row reads back bit for bit;
    /// an `embeddings` table written with single floats takes the same rows
    /// widened, and reads them back the same.
    #[tokio::test]
    async fn vectors_are_half_floats_and_older_tables_keep_single_ones() {
        let row =
            |id: &str| EmbeddingRow::new(id, "segment", "hashing", vec![0.1, -1.0 / 3.0, 7.0, 0.0]);
        assert_ne!(row("a").vector[0], 0.1, "rounded to a half float");
        let component = |store: &TableStore| {
            let store = store.clone();
            async move {
                let dataset = store
                    .dataset(Table::Embeddings, None)
                    .await
                    .unwrap()
                    .unwrap();
                match dataset.schema().field("vector").unwrap().data_type() {
                    arrow_schema::DataType::FixedSizeList(c, 4) => c.data_type().clone(),
                    other => panic!("{other}"),
                }
            }
        };

        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::Embeddings, 4).await.unwrap();
        assert_eq!(component(&store).await, arrow_schema::DataType::Float16);
        assert!(!store.vectors_are_single_floats().await.unwrap());
        let batch = rows_batch(&[&row("a")], 4).unwrap();
        store
            .write_batch(Table::Embeddings, batch, WriteMode::Append)
            .await
            .unwrap();
        let read: Vec<EmbeddingRow> = store.read_rows(None).await.unwrap();
        assert_eq!(read, [row("a")]);

        let older = tempfile::tempdir().unwrap();
        let store = TableStore::local(older.path()).unwrap();
        let widened =
            |id: &str| with_single_float_vectors(&rows_batch(&[&row(id)], 4).unwrap()).unwrap();
        store
            .write_batch(Table::Embeddings, widened("a"), WriteMode::Create)
            .await
            .unwrap();
        assert_eq!(component(&store).await, arrow_schema::DataType::Float32);
        assert!(store.vectors_are_single_floats().await.unwrap());
        let half = rows_batch(&[&row("b")], 4).unwrap();
        let refused = store
            .write_batch(Table::Embeddings, half, WriteMode::Append)
            .await;
        assert!(refused.is_err(), "half floats do not append to single ones");
        store
            .write_batch(Table::Embeddings, widened("b"), WriteMode::Append)
            .await
            .unwrap();
        let mut read: Vec<EmbeddingRow> = store.read_rows(None).await.unwrap();
        read.sort();
        assert_eq!(read, [row("a"), row("b")]);
    }

    /// The bytes the newest version of `table` in `store` keeps of `column`.
    async fn column_bytes(store: &TableStore, table: Table, column: &str) -> u64 {
        let dataset = Arc::new(store.dataset(table, None).await.unwrap().unwrap());
        let id = dataset.schema().field(column).unwrap().id as u32;
        let stats = dataset.calculate_data_stats().await.unwrap();
        (stats.fields.iter().find(|f| f.id == id))
            .unwrap()
            .bytes_on_disk
    }

    /// The bytes of `column` in `rows` written under `dir` with no field
    /// metadata: as Lance's defaults store them.
    async fn written_undeclared<R: TableRow>(dir: &Path, rows: &[R], column: &str) -> u64 {
        let store = TableStore::local(dir).unwrap();
        let batch = to_batch(&rows.iter().collect::<Vec<_>>()).unwrap();
        let fields: Vec<arrow_schema::Field> = (batch.schema().fields().iter())
            .map(|f| f.as_ref().clone().with_metadata(HashMap::new()))
            .collect();
        let batch = RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(fields)),
            batch.columns().to_vec(),
        )
        .unwrap();
        store
            .write_batch(R::TABLE, batch, WriteMode::Create)
            .await
            .unwrap();
        column_bytes(&store, R::TABLE, column).await
    }

    fn lexicon_segment(seg_id: &str, target_tokens: u32, terms: String) -> MemoryRow {
        MemoryRow::Segment(SegmentRow::counted(seg_id, target_tokens, terms))
    }

    /// A lexicon as a build writes one: each term once per corpus that holds
    /// it, the rows in order of corpus and then term, so that every run of
    /// rows is distinct though the column repeats its values several times.
    /// Lance judges a page by samples of such runs and would keep every term
    /// whole; with the declared threshold it stores each distinct term once.
    #[tokio::test]
    async fn a_lexicon_stores_each_term_once_across_its_corpora() {
        let vocabulary: Vec<String> = (0..4_000u32)
            .map(|i| {
                let letters = i.wrapping_mul(2_654_435_761).to_string();
                letters.bytes().map(|b| (b'a' + b - b'0') as char).collect()
            })
            .collect();
        let held_by_every = |step: usize| -> String {
            (vocabulary.iter().step_by(step))
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let segment = |target_tokens: u32, terms: String| {
            lexicon_segment(&format!("s{target_tokens}"), target_tokens, terms)
        };
        let ranked = search::RankedCorpora::finest_cut(600);
        let mut delta = search::LexiconDelta::default();
        for row in [
            segment(600, held_by_every(1)),
            segment(search::OWN_GIST_CUT, held_by_every(1)),
            segment(search::WHOLE_DOCUMENT_CUT, held_by_every(5)),
            MemoryRow::GistMemory(GistMemoryRow {
                doc_id: "d".into(),
                terms: held_by_every(2),
                acl: Vec::new(),
            }),
        ] {
            delta.count(&row, 1, ranked);
        }
        let declared = tempfile::tempdir().unwrap();
        let store = TableStore::local(declared.path()).unwrap();
        store.apply_lexicon(&delta, ranked, true).await.unwrap();
        let rows: Vec<LexiconRow> = store.read_rows(None).await.unwrap();
        let declared_bytes = column_bytes(&store, Table::Lexicon, "term").await;
        let plain = tempfile::tempdir().unwrap();
        let plain_bytes = written_undeclared(plain.path(), &rows, "term").await;
        assert!(
            declared_bytes * 4 < plain_bytes * 3,
            "terms take {declared_bytes} bytes, {plain_bytes} at Lance's default"
        );
    }

    /// A lexicon that counts corpora its memory no longer ranks (written
    /// before it counted only those, or for another finest cut) loses them
    /// at its next commit, the terms that commit leaves alone included.
    #[tokio::test]
    async fn a_commit_drops_the_lexicon_rows_of_corpora_no_reader_ranks() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let segment = |text: &str, target_tokens: u32| {
            let terms = crate::text::searched_terms([text]);
            lexicon_segment(&format!("{target_tokens}{text}"), target_tokens, terms)
        };
        // As every cut was counted: each row in its own.
        let mut older = search::LexiconDelta::default();
        for (text, cut) in [
            ("harbour lights", 1_000),
            ("harbour", 600),
            ("lighthouse", 600),
        ] {
            let own_cut = search::RankedCorpora::finest_cut(cut);
            older.count(&segment(text, cut), 1, own_cut);
        }
        let ranked = search::RankedCorpora::finest_cut(600);
        store.apply_lexicon(&older, ranked, true).await.unwrap();
        let corpora = |rows: &[LexiconRow]| -> BTreeSet<String> {
            rows.iter().map(|r| r.corpus.clone()).collect()
        };
        let before: Vec<LexiconRow> = store.read_rows(None).await.unwrap();
        assert!(corpora(&before).contains("segments/1000"), "{before:?}");

        let mut round = search::LexiconDelta::default();
        round.count(&segment("lighthouse", 600), 1, ranked);
        store.apply_lexicon(&round, ranked, false).await.unwrap();
        let after: Vec<LexiconRow> = store.read_rows(None).await.unwrap();
        assert_eq!(
            corpora(&after),
            BTreeSet::from(["segments/600".to_string()])
        );
        let count = |word: &str| {
            let term = match word {
                search::TOTALS => word.to_string(),
                _ => crate::text::terms(word).remove(0),
            };
            let row = after.iter().find(|r| r.term == term).unwrap();
            (row.rows, row.occurrences)
        };
        assert_eq!(count("harbour"), (1, 1), "a term the round left alone");
        assert_eq!(count("lighthouse"), (2, 2));
        assert_eq!(count(search::TOTALS), (3, 3));
    }

    #[tokio::test]
    async fn a_fragmented_table_is_compacted_and_keeps_its_rows() {
        const FRAGMENTS: usize = 20;
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        store.create_if_missing(Table::TreeNodes, 0).await.unwrap();
        let mut fragments = Vec::new();
        for i in 0..FRAGMENTS {
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
        assert_eq!(count(committed).await, FRAGMENTS);
        // Fragments of a row each are one tier: one fragment after.
        let compacted = store
            .compact(Table::TreeNodes, Compaction::Tiered, None)
            .await
            .unwrap();
        assert!(compacted > committed);
        assert_eq!(count(compacted).await, 1);
        let rows: Vec<TreeNodeRow> = store.read_rows(Some(compacted)).await.unwrap();
        assert_eq!(rows.len(), FRAGMENTS);
        // Nothing left to do: no new version.
        assert_eq!(
            store
                .compact(Table::TreeNodes, Compaction::Tiered, None)
                .await
                .unwrap(),
            compacted
        );
    }

    /// Under a retention policy a small table is one fragment after each
    /// commit that changed it, its deleted rows gone, where tiers would
    /// leave fragments each over twice the rows of the ones after it.
    #[tokio::test]
    async fn a_small_table_under_a_policy_is_one_fragment_after_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        for (round, rows) in [40, 10, 2].into_iter().enumerate() {
            let nodes: Vec<TreeNodeRow> = (0..rows)
                .map(|row| node(&format!("n{round}-{row:02}"), None))
                .collect();
            store.append_rows(&nodes).await.unwrap();
        }
        let removed = ["n0-00".to_string()];
        (store.commit_staged(Table::TreeNodes, &removed, false, Vec::new()))
            .await
            .unwrap();
        let compacted = store
            .compact(Table::TreeNodes, Compaction::Tiered, None)
            .await
            .unwrap();
        let dataset = store.dataset(Table::TreeNodes, Some(compacted)).await;
        let fragments = dataset.unwrap().unwrap().get_fragments();
        assert_eq!(fragments.len(), 1);
        assert_eq!(fragments[0].metadata().deletion_file, None);
        let rows: Vec<TreeNodeRow> = store.read_rows(Some(compacted)).await.unwrap();
        assert_eq!(rows.len(), 51);
    }

    /// The call cache's table as a build leaves it: an append a flush, its
    /// lookup indexes brought up to date every so many appends (a segment
    /// each). Compacted, whether the history is removed or kept, it is one
    /// fragment, every row found through its index.
    #[tokio::test]
    async fn a_table_appended_between_index_segments_is_compacted_to_one_fragment() {
        const APPENDS: usize = KEPT_HISTORY_FRAGMENTS + 6;
        let keys: Vec<String> = (0..APPENDS).map(|i| format!("k{i:03}")).collect();
        let shape = |store: TableStore| async move {
            let dataset = store.dataset(Table::LlmCalls, None).await.unwrap().unwrap();
            let indices = dataset.load_indices().await.unwrap();
            let segments = indices
                .iter()
                .filter(|i| i.name == "call_key_btree")
                .count();
            (dataset.count_fragments(), segments)
        };
        for compaction in [Compaction::Tiered, Compaction::WhenFragmented] {
            let dir = tempfile::tempdir().unwrap();
            let store = TableStore::local(dir.path()).unwrap();
            let store = store.with_index_floor(IndexFloor::none());
            for (i, key) in keys.iter().enumerate() {
                store.append_rows(&[call_row(key)]).await.unwrap();
                if i % 16 == 15 {
                    store.index_lookups(Table::LlmCalls).await.unwrap();
                }
            }
            store.index_lookups(Table::LlmCalls).await.unwrap();
            let (fragments, segments) = shape(store.clone()).await;
            assert_eq!(fragments, APPENDS);
            assert!(segments > 1, "appends indexed apart: {segments} segments");
            store
                .compact(Table::LlmCalls, compaction, None)
                .await
                .unwrap();
            assert_eq!(shape(store.clone()).await, (1, 1), "{compaction:?}");
            let found = store
                .lookup(Table::LlmCalls, "call_key", "reply", &keys)
                .await
                .unwrap();
            assert_eq!(found.len(), APPENDS, "{compaction:?}");
        }
    }

    /// With the history kept, a round's appends are merged and what the
    /// last checkpoint's version holds stays as it is, fragment for fragment.
    #[tokio::test]
    async fn only_what_a_round_appended_is_merged_when_the_history_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let append = |id: String| {
            let store = store.clone();
            async move { store.append_rows(&[node(&id, None)]).await.unwrap() }
        };
        let ids = |version: u64| {
            let store = store.clone();
            async move {
                let dataset = store.dataset(Table::TreeNodes, Some(version)).await;
                let fragments = dataset.unwrap().unwrap().get_fragments();
                fragments.iter().map(|f| f.id()).collect::<Vec<_>>()
            }
        };
        let mut checkpointed = 0;
        for i in 0..3 {
            checkpointed = append(format!("old{i}")).await;
        }
        for i in 0..4 {
            append(format!("new{i}")).await;
        }
        let compacted = store
            .compact(
                Table::TreeNodes,
                Compaction::WhenFragmented,
                Some(checkpointed),
            )
            .await
            .unwrap();
        let old = ids(checkpointed).await;
        let now = ids(compacted).await;
        assert_eq!(now.len(), old.len() + 1, "the round's four appends are one");
        assert_eq!(now[..old.len()], old[..]);
        let rows: Vec<TreeNodeRow> = store.read_rows(Some(compacted)).await.unwrap();
        assert_eq!(rows.len(), 7);
        // Before any checkpoint, every fragment is the round's.
        let all = store
            .compact(Table::TreeNodes, Compaction::WhenFragmented, None)
            .await
            .unwrap();
        assert_eq!(ids(all).await.len(), 1);
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
            .commit_checkpoint("{}".into(), versions.clone(), None)
            .await
            .unwrap();
        let second = store
            .commit_checkpoint("{}".into(), versions, None)
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
                sections: vec![Section {
                    start_char: 7,
                    kind: "page".into(),
                    label: "2".into(),
                }],
                acl: Vec::new(),
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
                n_tokens: 4,
                target_tokens: 1000,
                terms: "ten char".into(),
                acl: Vec::new(),
            }],
        )
        .await;
        round_trip(&store, vec![node("a", None), node("b", Some("a"))]).await;
        round_trip(
            &store,
            vec![
                PageRow {
                    page_id: "p".into(),
                    doc_id: "d".into(),
                    ordinal: 0,
                    start_char: 0,
                    end_char: 10,
                    gist: Some("ten".into()),
                    acl: Vec::new(),
                },
                PageRow {
                    page_id: "q".into(),
                    doc_id: "d".into(),
                    ordinal: 1,
                    start_char: 10,
                    end_char: 12,
                    gist: None,
                    acl: Vec::new(),
                },
            ],
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
                acl: Vec::new(),
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
                acl: Vec::new(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![EmbeddingRow::new(
                "s",
                "segment",
                "hashing",
                (0..DEFAULT_VECTOR_WIDTH).map(|i| i as f32 / 7.0).collect(),
            )],
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
                inputs: Some("{}".into()),
                reply: "ok".into(),
                tokens_in: 10,
                tokens_out: 2,
                latency_ms: 30,
                created_at: 1_700_000_000_000_000,
                subject: Some("relation a b".into()),
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
            vec![GistMemoryRow::new("d", ["The first page.", "The second."])],
        )
        .await;
        round_trip(
            &store,
            vec![NameStateRow {
                name: "ada".into(),
                asked: vec![3, 0],
                acl: Vec::new(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![DocStateRow {
                doc_id: "d".into(),
                build: "b1".into(),
                state: r#"{"entities":[]}"#.into(),
                acl: Vec::new(),
            }],
        )
        .await;
        round_trip(
            &store,
            vec![LexiconRow {
                corpus: "gist_memories".into(),
                term: "page".into(),
                rows: 1,
                occurrences: 1,
                acl: vec!["hr".into()],
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
                vector_model: Some("hashing-weighted-1024".into()),
                vector_segment_tokens: Some(1000),
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
