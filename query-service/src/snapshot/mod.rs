//! One consistent, immutable view of the memory tables: the versions the newest
//! checkpoint names. Navigators read it only through the questions below (a
//! row by id, a document's rows, the best matches of a question's terms or
//! vector), each answered for the whole checkpoint.
//!
//! Nothing here holds the memory: a snapshot is the tables' Lance datasets
//! opened at the checkpoint's versions, and each question is a read through
//! their indexes (B-tree on the ids a walk follows, full-text on the searched
//! terms, IVF on the vectors; see [`Table::column_indexes`]). Lance answers
//! over rows a commit has not indexed yet by scanning them, so every read sees
//! the whole checkpoint. Opening a newer checkpoint is opening its versions.
//!
//! Ranking has one definition, the project's: BM25 over
//! [`memweave_schemas::text::terms`] with the lexicon's statistics, and
//! cosine similarity. Lance's full-text and vector indexes find candidates
//! (more than asked for); the candidates are scored exactly and ordered with
//! ties broken by id, so an answer does not depend on how Lance splits or
//! approximates its indexes.
//!
//! The reads by job: [`lookup`] (rows by id, a document's trees, pages and
//! text, entities by name, relations by their ends), [`lexical`] (BM25
//! ranking), [`vector`] (nearest vectors); the row cache is [`crate::cache`].

mod lexical;
mod lookup;
mod vector;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use arrow::array::RecordBatch;
use futures::TryStreamExt;
use lance::dataset::Dataset;
use lance::dataset::scanner::Scanner;
use memweave_operators::embed::HashingEmbedder;
use memweave_schemas::search::{TOTALS, WHOLE_DOCUMENT_CUT, is_whole_document, segments_cut};
use memweave_schemas::store::{present_columns, rows_of, sql_strings};
use memweave_schemas::{CheckpointRow, LexiconRow, StoreError, Table, TableStore};
use serde::Deserialize;
use serde::de::DeserializeOwned;

pub use lookup::{ById, Document, DocumentPage, Page};
pub use vector::Probe;

use crate::cache::{ReadCache, RowCacheStats};
use crate::reader::{ACL_COLUMN, Reader};
use crate::request::{AskRequest, RequestError};

/// What reading the memory can fail with.
pub type Read<T> = Result<T, StoreError>;

/// The documents a request may read: all, or those it names.
#[derive(Debug, Clone, Copy)]
pub struct Allowed<'a>(pub Option<&'a [String]>);

impl Allowed<'_> {
    pub fn admits(&self, doc_id: &str) -> bool {
        self.0.is_none_or(|docs| docs.iter().any(|d| d == doc_id))
    }

    /// The SQL condition "`column` is an allowed document", if any.
    fn condition(&self, column: &str) -> Option<String> {
        self.0
            .map(|docs| format!("{column} IN ({})", sql_strings(docs)))
    }
}

/// The memory tables at one checkpoint, as one reader reads them: every
/// read is filtered to the rows its [`Reader`] may see.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub epoch: u64,
    store: TableStore,
    datasets: Arc<HashMap<Table, Dataset>>,
    cache: Arc<ReadCache>,
    reader: Reader,
    /// Each searched corpus's size per label set: its texts, and their terms
    /// in all ([`TOTALS`] rows).
    set_totals: Arc<[LexiconRow]>,
    /// Each searched corpus's size as the reader sees it: the sums over the
    /// label sets it may read.
    totals: HashMap<String, (u64, u64)>,
    /// The passages the retrieval baselines rank: the memory's finest cut of
    /// segments (their target size), with the whole documents'.
    passage_cut: Option<u32>,
    /// The embedder that made the vectors (as the checkpoint records it, or
    /// an older memory's `embeddings.model`); a question must be embedded by
    /// the same one.
    pub embedding_model: Option<String>,
    /// Where the vectors are recomputed rather than stored.
    recomputed: Option<vector::Recomputed>,
    /// The IVF partitions a vector search probes: all of them.
    vector_probes: usize,
}

/// Probes that reach every partition of a vector index over `vectors` rows
/// (it has about √n, fixed when first built; twice that covers a table that
/// has since shrunk to a quarter). Every partition, because the embedded
/// default's hashing embedder makes vectors without cluster structure, so
/// partitions do not localise neighbours: recall@10 against exact search at
/// 100M tokens was 0.48 (segments) and 0.16 (entities) probing 64 of ~600,
/// 1.00 and 0.99 probing all, at the same cost per search (the owner-kind
/// prefilter, not the partition scan, dominates it).
fn every_partition(vectors: usize) -> usize {
    (2.0 * (vectors as f64).sqrt()).ceil() as usize
}

impl Snapshot {
    /// The snapshot at the newest checkpoint, or `None` before the first commit.
    pub async fn load_latest(store: &TableStore, cache: Arc<ReadCache>) -> Read<Option<Snapshot>> {
        match store.latest_checkpoint().await? {
            Some(checkpoint) => Ok(Some(Self::load(store, &checkpoint, cache).await?)),
            None => Ok(None),
        }
    }

    /// Opens the tables at the versions `checkpoint` names, in `cache`'s
    /// Lance session, and reads the few rows every question needs: the
    /// corpora's sizes, the embedder.
    pub async fn load(
        store: &TableStore,
        checkpoint: &CheckpointRow,
        cache: Arc<ReadCache>,
    ) -> Read<Snapshot> {
        store.check_current(checkpoint)?;
        let store = store.clone().with_session(cache.session());
        let mut datasets = HashMap::new();
        for &table in Table::MEMORY.iter().chain([&Table::Lexicon]) {
            let Some(version) = checkpoint.version_of(table) else {
                continue;
            };
            if let Some(dataset) = store.dataset(table, Some(version)).await? {
                datasets.insert(table, dataset);
            }
        }
        let mut snapshot = Snapshot {
            epoch: checkpoint.epoch,
            store,
            datasets: Arc::new(datasets),
            cache,
            reader: Reader::Everything,
            set_totals: Arc::new([]),
            totals: HashMap::new(),
            passage_cut: None,
            embedding_model: None,
            recomputed: None,
            vector_probes: 0,
        };
        if let Some(vectors) = snapshot.datasets.get(&Table::Embeddings) {
            let rows = vectors
                .count_rows(None)
                .await
                .map_err(|e| snapshot.store.lance_error(Table::Embeddings, e))?;
            snapshot.vector_probes = every_partition(rows);
        }
        let totals: Vec<LexiconRow> = snapshot
            .select(Table::Lexicon, &[], &format!("term = '{TOTALS}'"), None)
            .await?;
        snapshot.set_totals = totals.into();
        snapshot.totals = snapshot.readers_totals();
        // The finest cut; the whole documents' where there is no other (an
        // archive of short documents only).
        snapshot.passage_cut = (snapshot.totals.keys())
            .filter_map(|corpus| segments_cut(corpus))
            .min_by_key(|cut| (is_whole_document(*cut), *cut))
            .map(|cut| match is_whole_document(cut) {
                true => WHOLE_DOCUMENT_CUT,
                false => cut,
            });
        if let Some(vectors) = checkpoint.vectors() {
            snapshot.recomputed =
                HashingEmbedder::for_model(&vectors.model).map(|embedder| vector::Recomputed {
                    embedder,
                    segment_tokens: vectors.segment_tokens,
                });
            snapshot.embedding_model = Some(vectors.model);
            return Ok(snapshot);
        }
        #[derive(Deserialize)]
        struct Model {
            model: String,
        }
        let model: Vec<Model> = snapshot
            .select(Table::Embeddings, &["model"], "true", Some(1))
            .await?;
        snapshot.embedding_model = model.into_iter().next().map(|m| m.model);
        Ok(snapshot)
    }

    /// This checkpoint as `reader` reads it: the same tables, every read
    /// filtered to its rows, the corpora's sizes those of its label sets.
    pub fn read_as(&self, reader: Reader) -> Snapshot {
        let mut view = Snapshot {
            reader,
            ..self.clone()
        };
        view.totals = view.readers_totals();
        view
    }

    /// Whose reads this snapshot answers.
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    /// The sizes of the corpora the reader may read.
    fn readers_totals(&self) -> HashMap<String, (u64, u64)> {
        let mut totals: HashMap<String, (u64, u64)> = HashMap::new();
        for row in self.set_totals.iter().filter(|r| self.reader.sees(&r.acl)) {
            let sum = totals.entry(row.corpus.clone()).or_default();
            sum.0 += row.rows;
            sum.1 += row.occurrences;
        }
        totals
    }

    /// `filter` and the reader's condition on `dataset`'s rows.
    fn readable(&self, dataset: &Dataset, filter: &str) -> String {
        let labelled = dataset.schema().field(ACL_COLUMN).is_some();
        match self.reader.condition(labelled) {
            Some(condition) => format!("({filter}) AND {condition}"),
            None => filter.to_string(),
        }
    }

    /// `request`'s rules ([`AskRequest::validate`]), the documents it names
    /// looked up in this checkpoint: what the request gets wrong, or a failed
    /// read.
    pub async fn validate(&self, request: &AskRequest) -> Read<Result<(), RequestError>> {
        let named = request.documents.as_deref().unwrap_or_default();
        let known = self.rows_by_id::<Document>(named).await?;
        Ok(request.validate(|id| known.contains_key(id)))
    }

    /// How the row cache this snapshot reads through has done.
    pub fn cache_stats(&self) -> RowCacheStats {
        self.cache.row_stats()
    }

    /// The version of `table` this snapshot reads (0 for a table it lacks).
    fn version(&self, table: Table) -> u64 {
        self.datasets.get(&table).map_or(0, |d| d.version().version)
    }

    /// The answer to `lookup` of `key` in `table`: the cached one, or `read`'s,
    /// then cached.
    async fn cached<T: Send + Sync + 'static>(
        &self,
        table: Table,
        lookup: &'static str,
        key: &str,
        read: impl Future<Output = Read<T>>,
        bytes: impl FnOnce(&T) -> usize,
    ) -> Read<Arc<T>> {
        let version = self.version(table);
        let key = self.reader.cache_key(key);
        if let Some(hit) = self.cache.get::<T>(table, version, lookup, &key) {
            return Ok(hit);
        }
        let value = read.await?;
        let bytes = bytes(&value);
        let value = Arc::new(value);
        self.cache.put(
            table,
            version,
            lookup,
            key.to_string(),
            value.clone(),
            bytes,
        );
        Ok(value)
    }

    /// Rows of `table` meeting `filter` (columns: `columns`, or the row
    /// type's), at most `limit`.
    async fn select<R: DeserializeOwned>(
        &self,
        table: Table,
        columns: &[&str],
        filter: &str,
        limit: Option<i64>,
    ) -> Read<Vec<R>> {
        let batches = self
            .scan(table, columns, filter, |scan| {
                scan.limit(limit, None)?;
                Ok(())
            })
            .await?;
        rows_of(table, &batches)
    }

    /// The batches of a scan of `table` at this checkpoint: `columns` (the
    /// row type's when empty) of the rows meeting `filter`, after `shape` set
    /// up the rest (a search, a limit). No batches for a table the checkpoint
    /// lacks.
    async fn scan(
        &self,
        table: Table,
        columns: &[&str],
        filter: &str,
        shape: impl FnOnce(&mut Scanner) -> lance::Result<()>,
    ) -> Read<Vec<RecordBatch>> {
        let Some(dataset) = self.datasets.get(&table) else {
            return Ok(Vec::new());
        };
        let failed = |e| self.store.lance_error(table, e);
        let mut scan = dataset.scan();
        if columns.is_empty() {
            // Not the search columns: as large as the texts they are derived
            // from. A column an older memory lacks is read as its default.
            let present = present_columns(dataset, table.row_columns());
            scan.project(&present).map_err(failed)?;
        } else {
            scan.project(columns).map_err(failed)?;
        }
        scan.filter(&self.readable(dataset, filter))
            .map_err(failed)?;
        shape(&mut scan).map_err(failed)?;
        scan.try_into_stream()
            .await
            .map_err(failed)?
            .try_collect()
            .await
            .map_err(failed)
    }

    /// Rows of `table` meeting `filter`.
    async fn count(&self, table: Table, filter: &str) -> Read<usize> {
        let Some(dataset) = self.datasets.get(&table) else {
            return Ok(0);
        };
        dataset
            .count_rows(Some(self.readable(dataset, filter)))
            .await
            .map_err(|e| self.store.lance_error(table, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::navigate::fixture::{
        FIXTURE_CACHE_MIB, FOUNDERS, PAINTERS, answer, labelled_rows, request, written,
    };
    use crate::request::Strategy;

    /// A principal reads its own rows only, whatever it reads through: every
    /// strategy's answer, a listing and its count, a row by id, an entity by
    /// name, the corpora's statistics; and what the administrator read first
    /// (cached) is not what it is given.
    #[tokio::test]
    async fn a_reader_reads_only_the_rows_its_groups_label() {
        let memory = written(labelled_rows(), FIXTURE_CACHE_MIB).await;
        let question = "What did painting teach the author about patience?";
        // The administrator first, so the caches hold the painters' rows.
        let everyone = answer(&memory, &request(question, Strategy::Memwalker)).await;
        assert!(everyone.supporting.iter().any(|p| p.doc_id == "paint"));
        let founders = memory.read_as(Reader::groups([FOUNDERS]).unwrap());
        let painters = memory.read_as(Reader::groups([PAINTERS]).unwrap());
        for strategy in Strategy::ALL {
            let asked = request(question, strategy);
            let theirs = answer(&founders, &asked).await;
            assert!(
                theirs.supporting.iter().all(|p| p.doc_id == "startup"),
                "{strategy:?} showed the founders {:?}",
                theirs.supporting
            );
            let said = serde_json::to_string(&theirs).unwrap();
            for secret in ["s-p1", "s-p2", "n-p", "studio", "Studio", "still lifes"] {
                assert!(!said.contains(secret), "{strategy:?} told {secret}: {said}");
            }
            let own = answer(&painters, &asked).await;
            assert!(
                own.supporting.iter().all(|p| p.doc_id == "paint"),
                "{strategy:?}"
            );
        }
        let listed = founders.documents_page(None, 10, None).await.unwrap();
        assert_eq!(listed.total, 1);
        assert_eq!(listed.documents.len(), 1);
        assert!(founders.row::<Document>("paint").await.unwrap().is_none());
        assert!(memory.row::<Document>("paint").await.unwrap().is_some());
        assert!(founders.entities_named("studio").await.unwrap().is_empty());
        assert_eq!(painters.entities_named("studio").await.unwrap().len(), 1);
        // BM25's statistics are those of the reader's texts only.
        let query = ["paint".to_string()];
        let all = memory.passage_stats(&query).await.unwrap();
        let theirs = founders.passage_stats(&query).await.unwrap();
        assert_eq!((all.texts, theirs.texts), (3.0, 1.0));
        assert_eq!(theirs.document_frequency.get("paint"), None);
        assert!(all.document_frequency["paint"] > 0.0);
        // No groups, no rows.
        let nobody = memory.read_as(Reader::nobody());
        assert_eq!(
            nobody.documents_page(None, 10, None).await.unwrap().total,
            0
        );
    }
}
