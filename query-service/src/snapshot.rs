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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use std::future::Future;

use arrow::array::{Float32Array, RecordBatch};
use futures::TryStreamExt;
use lance::dataset::Dataset;
use lance::dataset::scanner::{ColumnOrdering, Scanner};
use lance_index::scalar::FullTextSearchQuery;
use memweave_operators::embed::cosine;
use memweave_operators::lexical::CorpusStats;
use memweave_schemas::search::{
    GIST_CORPUS, NAME_KEYS, TERMS, TOTALS, lexicon_entry, segments_corpus, segments_cut,
    tree_corpus,
};
use memweave_schemas::store::{
    KEYS_PER_PREDICATE, batch_rows, rows_of, sql_string, sql_strings, strings,
};
use memweave_schemas::text::normalise;
use memweave_schemas::{
    CheckpointRow, EntityRow, LexiconRow, PageRow, RelationRow, Section, SegmentRow, StoreError,
    TREE_MEMWALKER, TREE_RAPTOR, Table, TableStore, TreeNodeRow,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cache::{ReadCache, RowCacheStats, rows_bytes};
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

/// A document as the query service shows it: everything but its text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub doc_id: String,
    pub source_uri: String,
    pub title: String,
    pub version: u64,
    pub n_tokens: u64,
    /// Where its text's parts came from: what citations name.
    pub sections: Vec<Section>,
}

const DOCUMENT_COLUMNS: &[&str] = &[
    "doc_id",
    "source_uri",
    "title",
    "version",
    "n_tokens",
    "sections",
];
/// The documents a reader sees: rows not marked deleted.
const NOT_DELETED: &str = "deleted = false";

/// One page of the documents, in id order.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentPage {
    pub documents: Vec<Document>,
    /// The last id of this page when another page follows: the next page's
    /// `after`.
    pub next: Option<String>,
    /// Documents not deleted, on every page.
    pub total: usize,
}

/// An owner's vector, as the embeddings table holds it.
#[derive(Debug, Serialize, Deserialize)]
struct OwnerVector {
    owner_id: String,
    vector: Vec<f32>,
}

const VECTOR_COLUMNS: &[&str] = &["owner_id", "vector"];

/// A relation without its description and sources: what choosing among a
/// hub's relations needs.
#[derive(Debug, Serialize, Deserialize)]
struct RelationEnds {
    relation_id: String,
    source_id: String,
    target_id: String,
}

const RELATION_ENDS: &[&str] = &["relation_id", "source_id", "target_id"];

/// The lookups whose answers are cached: a row by its id, and the rest by
/// what they are about.
const BY_ID: &str = "id";
const ROOT_OF: &str = "root";
const TREE_OF: &str = "tree";
const PAGES_OF: &str = "pages";
#[cfg(test)]
const RELATIONS_OF: &str = "relations";
const RELATION_ENDS_OF: &str = "relation ends";
const NAMED: &str = "named";

/// Candidates Lance's full-text index is asked for, per result wanted, and at
/// least: the exact BM25 order of the best results lies well inside Lance's
/// own (measured: the exact top 10 within Lance's top 40 on the scale
/// benchmark's memories, 10M and 100M tokens).
const TEXT_CANDIDATES_PER_RESULT: usize = 4;
const TEXT_CANDIDATES_AT_LEAST: usize = 64;

/// Candidates the vector index is asked for, per result wanted, and at least;
/// and the quantized candidates re-ranked with the table's own vectors per
/// candidate kept, at most 10 and within [`VECTOR_REFINE_ROWS`] vectors read
/// in all (asked for 2,048, ten times as many full vectors would be 30 MB
/// read for one question).
const VECTOR_CANDIDATES_PER_RESULT: usize = 2;
const VECTOR_CANDIDATES_AT_LEAST: usize = 32;
const VECTOR_REFINE_AT_MOST: usize = 10;
const VECTOR_REFINE_ROWS: usize = 512;

/// A passage the full-text search found: what ranking and grouping by
/// document need before its row is read.
#[derive(Deserialize)]
struct PassageMatch {
    seg_id: String,
    doc_id: String,
    ordinal: u32,
}

/// The memory tables at one checkpoint.
#[derive(Debug)]
pub struct Snapshot {
    pub epoch: u64,
    store: TableStore,
    datasets: HashMap<Table, Dataset>,
    cache: Arc<ReadCache>,
    /// Each searched corpus's size: its texts, and their terms in all.
    totals: HashMap<String, (u64, u64)>,
    /// The passages the retrieval baselines rank: the memory's finest cut of
    /// segments (their target size).
    passage_cut: Option<u32>,
    /// The embedder that made the vectors (`embeddings.model`); a question must
    /// be embedded by the same one.
    pub embedding_model: Option<String>,
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
            datasets,
            cache,
            totals: HashMap::new(),
            passage_cut: None,
            embedding_model: None,
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
        snapshot.totals = totals
            .into_iter()
            .map(|r| (r.corpus, (r.rows, r.occurrences)))
            .collect();
        snapshot.passage_cut = snapshot
            .totals
            .keys()
            .filter_map(|corpus| segments_cut(corpus))
            .min();
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

    /// The documents not deleted whose ids follow `after` (all, without it), in
    /// id order, at most `limit`, and, with `matching`, only those whose id or
    /// title holds it in any case: the ids are sorted, the other columns read
    /// for the page's rows only.
    pub async fn documents_page(
        &self,
        after: Option<&str>,
        limit: usize,
        matching: Option<&str>,
    ) -> Read<DocumentPage> {
        let mut listed = NOT_DELETED.to_string();
        if let Some(text) = matching.map(str::to_lowercase).filter(|t| !t.is_empty()) {
            let text = sql_string(&text);
            listed.push_str(&format!(
                " AND (strpos(lower(doc_id), {text}) > 0 OR strpos(lower(title), {text}) > 0)"
            ));
        }
        let mut filter = listed.clone();
        if let Some(after) = after {
            filter.push_str(&format!(" AND doc_id > {}", sql_string(after)));
        }
        // One more than the page: whether another page follows.
        let batches = self
            .scan(Table::Documents, DOCUMENT_COLUMNS, &filter, |scan| {
                scan.order_by(Some(vec![ColumnOrdering::asc_nulls_last("doc_id".into())]))?
                    .limit(Some(limit as i64 + 1), None)?;
                Ok(())
            })
            .await?;
        let mut documents: Vec<Document> = rows_of(Table::Documents, &batches)?;
        let more = documents.len() > limit;
        documents.truncate(limit);
        let next = more
            .then(|| documents.last().map(|d| d.doc_id.clone()))
            .flatten();
        let total = self.count(Table::Documents, &listed).await?;
        Ok(DocumentPage {
            documents,
            next,
            total,
        })
    }

    pub async fn document(&self, doc_id: &str) -> Read<Option<Arc<Document>>> {
        Ok(self
            .documents_of(&[doc_id.to_string()])
            .await?
            .remove(doc_id))
    }

    /// The documents of `doc_ids` the memory holds, by id: one read for those
    /// not cached.
    pub async fn documents_of(&self, doc_ids: &[String]) -> Read<HashMap<String, Arc<Document>>> {
        self.rows_by_id(
            Table::Documents,
            DOCUMENT_COLUMNS,
            "doc_id",
            Some(NOT_DELETED),
            doc_ids,
            |d: &Document| &d.doc_id,
        )
        .await
    }

    /// `request`'s rules ([`AskRequest::validate`]), the documents it names
    /// looked up in this checkpoint: what the request gets wrong, or a failed
    /// read.
    pub async fn validate(&self, request: &AskRequest) -> Read<Result<(), RequestError>> {
        let named = request.documents.as_deref().unwrap_or_default();
        let known = self.documents_of(named).await?;
        Ok(request.validate(|id| known.contains_key(id)))
    }

    /// A MemWalker or RAPTOR node.
    pub async fn node(&self, node_id: &str) -> Read<Option<Arc<TreeNodeRow>>> {
        Ok(self.nodes(&[node_id.to_string()]).await?.into_iter().next())
    }

    /// The MemWalker and RAPTOR nodes of `ids` that exist, in that order.
    pub async fn nodes(&self, ids: &[String]) -> Read<Vec<Arc<TreeNodeRow>>> {
        let by_id = self
            .rows_by_id(
                Table::TreeNodes,
                &[],
                "node_id",
                Some(DOCUMENT_TREES),
                ids,
                |n: &TreeNodeRow| &n.node_id,
            )
            .await?;
        Ok(ids.iter().filter_map(|id| by_id.get(id).cloned()).collect())
    }

    /// Every node of one tree (`memwalker` or `raptor`) of a document, in id order.
    pub async fn tree(&self, doc_id: &str, tree: &str) -> Read<Vec<Arc<TreeNodeRow>>> {
        let filter = format!(
            "doc_id = {} AND tree = {}",
            sql_string(doc_id),
            sql_string(tree)
        );
        let key = format!("{tree} {doc_id}");
        let read = async {
            let mut nodes: Vec<TreeNodeRow> =
                self.select(Table::TreeNodes, &[], &filter, None).await?;
            nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
            Ok(nodes.into_iter().map(Arc::new).collect::<Vec<_>>())
        };
        let nodes = self.cached(Table::TreeNodes, TREE_OF, &key, read, |rows| {
            rows_bytes(rows.iter().map(|r| &**r))
        });
        Ok(nodes.await?.as_ref().clone())
    }

    /// The root of a document's MemWalker tree.
    pub async fn root_of(&self, doc_id: &str) -> Read<Option<Arc<TreeNodeRow>>> {
        let filter = format!(
            "doc_id = {} AND tree = '{TREE_MEMWALKER}' AND parent_id IS NULL",
            sql_string(doc_id)
        );
        let read = async {
            let roots: Vec<TreeNodeRow> = self.select(Table::TreeNodes, &[], &filter, None).await?;
            let root = roots.into_iter().min_by(|a, b| a.node_id.cmp(&b.node_id));
            Ok(root.map(Arc::new))
        };
        let root = self.cached(Table::TreeNodes, ROOT_OF, doc_id, read, |root| {
            rows_bytes(root.as_deref())
        });
        Ok(root.await?.as_ref().clone())
    }

    pub async fn segment(&self, seg_id: &str) -> Read<Option<Arc<SegmentRow>>> {
        Ok(self
            .segments(&[seg_id.to_string()])
            .await?
            .into_iter()
            .next())
    }

    /// The segments of `ids` that exist, in that order: one read for them all.
    pub async fn segments(&self, ids: &[String]) -> Read<Vec<Arc<SegmentRow>>> {
        let by_id = self
            .rows_by_id(
                Table::Segments,
                &[],
                "seg_id",
                None,
                ids,
                |s: &SegmentRow| &s.seg_id,
            )
            .await?;
        Ok(ids.iter().filter_map(|id| by_id.get(id).cloned()).collect())
    }

    pub async fn pages_of(&self, doc_id: &str) -> Read<Arc<[PageRow]>> {
        let filter = format!("doc_id = {}", sql_string(doc_id));
        let read = async {
            let mut pages: Vec<PageRow> = self.select(Table::Pages, &[], &filter, None).await?;
            pages.sort_by_key(|p| p.ordinal);
            Ok(Arc::<[PageRow]>::from(pages))
        };
        let pages = self.cached(Table::Pages, PAGES_OF, doc_id, read, |pages| {
            rows_bytes(pages.iter())
        });
        Ok(pages.await?.as_ref().clone())
    }

    /// The characters `chars` of a document's text, as far as its text goes,
    /// and where they start; `None` for a document without pages. Read from its
    /// ReadAgent pages, which tile the text: no read of the whole document.
    pub async fn text_of(
        &self,
        doc_id: &str,
        chars: std::ops::Range<u64>,
    ) -> Read<Option<(u64, String)>> {
        Ok(text_within(&self.pages_of(doc_id).await?, chars))
    }

    pub async fn entity(&self, entity_id: &str) -> Read<Option<Arc<EntityRow>>> {
        Ok(self
            .entities(&[entity_id.to_string()])
            .await?
            .into_iter()
            .next())
    }

    /// The entities of `ids` that exist, in that order: one read for those not
    /// cached.
    pub async fn entities(&self, ids: &[String]) -> Read<Vec<Arc<EntityRow>>> {
        let by_id = self
            .rows_by_id(
                Table::Entities,
                &[],
                "entity_id",
                None,
                ids,
                |e: &EntityRow| &e.entity_id,
            )
            .await?;
        Ok(ids.iter().filter_map(|id| by_id.get(id).cloned()).collect())
    }

    /// Entities whose name or an alias normalises to `name`'s normal form, in
    /// id order.
    pub async fn entities_named(&self, name: &str) -> Read<Vec<Arc<EntityRow>>> {
        let key = normalise(name);
        let filter = format!("array_has_any({NAME_KEYS}, [{}])", sql_string(&key));
        let read = async {
            let mut found: Vec<EntityRow> =
                self.select(Table::Entities, &[], &filter, None).await?;
            found.sort_by(|a, b| a.entity_id.cmp(&b.entity_id));
            Ok(found.into_iter().map(Arc::new).collect::<Vec<_>>())
        };
        let found = self.cached(Table::Entities, NAMED, &key, read, |rows| {
            rows_bytes(rows.iter().map(|r| &**r))
        });
        Ok(found.await?.as_ref().clone())
    }

    /// Relations with any of `entity_ids` at either end, each once, in id
    /// order, read whole: what the tests check the reads through the ends
    /// against.
    #[cfg(test)]
    pub async fn relations_touching(&self, entity_ids: &[String]) -> Read<Vec<Arc<RelationRow>>> {
        self.touching(entity_ids, RELATIONS_OF, &[], |r: &RelationRow| {
            [&r.relation_id, &r.source_id, &r.target_id]
        })
        .await
    }

    /// The first `limit` relations in id order with any of `entity_ids` at
    /// either end, other than those in `skip`: a hub's thousands are read as
    /// ids and ends only, and whole rows only for the relations kept.
    pub async fn first_relations_touching(
        &self,
        entity_ids: &[String],
        skip: &HashSet<&str>,
        limit: usize,
    ) -> Read<Vec<Arc<RelationRow>>> {
        let ends = self.relation_ends(entity_ids).await?;
        self.first_whole(&ends, skip, limit).await
    }

    /// The first `limit` relations of `entity_id` in id order, and how many
    /// it has: its relations' ends read once for both.
    pub async fn relations_page(
        &self,
        entity_id: &str,
        offset: usize,
        limit: usize,
    ) -> Read<(Vec<Arc<RelationRow>>, usize)> {
        let ends = self.relation_ends(&[entity_id.to_string()]).await?;
        let page = ends.get(offset..).unwrap_or_default();
        let first = self.first_whole(page, &HashSet::new(), limit).await?;
        Ok((first, ends.len()))
    }

    /// The ids and ends of the relations with any of `entity_ids` at either
    /// end, each once, in id order.
    async fn relation_ends(&self, entity_ids: &[String]) -> Read<Vec<Arc<RelationEnds>>> {
        self.touching(
            entity_ids,
            RELATION_ENDS_OF,
            RELATION_ENDS,
            |r: &RelationEnds| [&r.relation_id, &r.source_id, &r.target_id],
        )
        .await
    }

    /// The first `limit` of `ends` not in `skip`, read whole, in their order.
    async fn first_whole(
        &self,
        ends: &[Arc<RelationEnds>],
        skip: &HashSet<&str>,
        limit: usize,
    ) -> Read<Vec<Arc<RelationRow>>> {
        let kept: Vec<String> = ends
            .iter()
            .map(|r| r.relation_id.clone())
            .filter(|id| !skip.contains(id.as_str()))
            .take(limit)
            .collect();
        let mut rows = self
            .rows_by_id(
                Table::Relations,
                &[],
                "relation_id",
                None,
                &kept,
                |r: &RelationRow| &r.relation_id,
            )
            .await?;
        Ok(kept.iter().filter_map(|id| rows.remove(id)).collect())
    }

    /// `R`s (relation rows, or their ends) with any of `entity_ids` at
    /// either end (`ends`: id, source, target), each once, in id order: one
    /// read for the entities whose answer to `lookup` is not cached.
    async fn touching<R>(
        &self,
        entity_ids: &[String],
        lookup: &'static str,
        columns: &[&str],
        ends: fn(&R) -> [&String; 3],
    ) -> Read<Vec<Arc<R>>>
    where
        R: DeserializeOwned + Serialize + Send + Sync + 'static,
    {
        let version = self.version(Table::Relations);
        let mut touching: HashMap<String, Arc<R>> = HashMap::new();
        let mut missing: Vec<String> = Vec::new();
        for id in entity_ids {
            match self
                .cache
                .get::<Vec<Arc<R>>>(Table::Relations, version, lookup, id)
            {
                Some(hit) => touching.extend(hit.iter().map(|r| (ends(r)[0].clone(), r.clone()))),
                None => missing.push(id.clone()),
            }
        }
        missing.sort();
        missing.dedup();
        for chunk in missing.chunks(KEYS_PER_PREDICATE) {
            let ids = sql_strings(chunk);
            let filter = format!("source_id IN ({ids}) OR target_id IN ({ids})");
            let found: Vec<R> = self
                .select(Table::Relations, columns, &filter, None)
                .await?;
            let mut found: Vec<Arc<R>> = found.into_iter().map(Arc::new).collect();
            found.sort_by(|a, b| ends(a)[0].cmp(ends(b)[0]));
            for id in chunk {
                let of: Vec<Arc<R>> = found
                    .iter()
                    .filter(|r| ends(r)[1] == id || ends(r)[2] == id)
                    .cloned()
                    .collect();
                let bytes = rows_bytes(of.iter().map(|r| &**r));
                self.cache.put(
                    Table::Relations,
                    version,
                    lookup,
                    id.clone(),
                    Arc::new(of),
                    bytes,
                );
            }
            touching.extend(found.into_iter().map(|r| (ends(&r)[0].clone(), r)));
        }
        let mut touching: Vec<(String, Arc<R>)> = touching.into_iter().collect();
        touching.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(touching.into_iter().map(|(_, r)| r).collect())
    }

    pub async fn vector(&self, owner_id: &str) -> Read<Option<Arc<[f32]>>> {
        Ok(self
            .vectors(&[owner_id.to_string()])
            .await?
            .remove(owner_id))
    }

    /// The vectors of those of `owner_ids` that have one: one read for them all.
    pub async fn vectors(&self, owner_ids: &[String]) -> Read<HashMap<String, Arc<[f32]>>> {
        let found = self
            .rows_by_id(
                Table::Embeddings,
                VECTOR_COLUMNS,
                "owner_id",
                None,
                owner_ids,
                |v: &OwnerVector| &v.owner_id,
            )
            .await?;
        Ok(found
            .into_iter()
            .map(|(id, v)| (id, Arc::from(v.vector.as_slice())))
            .collect())
    }

    /// The documents whose best passage matches `query` best (BM25 over the
    /// memory's finest cut: the documents' own words, which no summary has
    /// dropped), at most `limit`, each with that score and passage; only those
    /// with a positive score, ties in document id order.
    pub async fn documents_by_passages(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64, Arc<SegmentRow>)>> {
        let scored = self.scored_passages(query, allowed, limit).await?;
        let mut best: HashMap<String, (f64, PassageMatch)> = HashMap::new();
        for (segment, score) in scored {
            let better = |(s, m): &(f64, PassageMatch)| {
                score
                    .total_cmp(s)
                    .then(m.ordinal.cmp(&segment.ordinal))
                    .is_gt()
            };
            if best.get(&segment.doc_id).is_none_or(better) {
                best.insert(segment.doc_id.clone(), (score, segment));
            }
        }
        let mut ranked: Vec<(String, f64, String)> = best
            .into_iter()
            .map(|(d, (s, m))| (d, s, m.seg_id))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(limit);
        let ids: Vec<String> = ranked.iter().map(|r| r.2.clone()).collect();
        let segments = self.segments(&ids).await?;
        Ok(ranked
            .into_iter()
            .zip(segments)
            .map(|((d, s, _), segment)| (d, s, segment))
            .collect())
    }

    /// The BM25 statistics of the MemWalker node summaries for `query`'s terms.
    pub async fn node_stats(&self, query: &[String]) -> Read<CorpusStats> {
        self.corpus_stats(&tree_corpus(TREE_MEMWALKER), query).await
    }

    /// The BM25 statistics of the passages for `query`'s terms.
    pub async fn passage_stats(&self, query: &[String]) -> Read<CorpusStats> {
        match self.passage_cut {
            Some(cut) => self.corpus_stats(&segments_corpus(cut), query).await,
            None => Ok(CorpusStats::default()),
        }
    }

    /// ReadAgent's document: the one whose gist memory matches `query` best,
    /// with its score (none when no gist shares a term), and how many allowed
    /// documents have gists.
    pub async fn document_by_gists(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
    ) -> Read<(Option<(String, f64)>, usize)> {
        let candidates = match allowed.condition("doc_id") {
            None => self.totals.get(GIST_CORPUS).map_or(0, |t| t.0 as usize),
            Some(condition) => self.count(Table::GistMemories, &condition).await?,
        };
        #[derive(Deserialize)]
        struct Gists {
            doc_id: String,
        }
        let stats = self.corpus_stats(GIST_CORPUS, query).await?;
        let scored: Vec<(Gists, f64)> = self
            .best_texts(
                Table::GistMemories,
                &["doc_id"],
                query,
                &stats,
                &[allowed.condition("doc_id")],
                1,
            )
            .await?;
        let best = scored
            .into_iter()
            .map(|(g, score)| (g.doc_id, score))
            .min_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok((best, candidates))
    }

    /// The passages (the memory's finest cut) BM25 ranks highest for `query`,
    /// at most `limit`, only those with a positive score; ties in document
    /// order.
    pub async fn passages_by_bm25(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        let mut scored = self.scored_passages(query, allowed, limit).await?;
        scored.sort_by(|(a, x), (b, y)| {
            y.total_cmp(x)
                .then((&a.doc_id, a.ordinal).cmp(&(&b.doc_id, b.ordinal)))
        });
        scored.truncate(limit);
        let ids: Vec<String> = scored.iter().map(|(m, _)| m.seg_id.clone()).collect();
        let segments = self.segments(&ids).await?;
        Ok(segments
            .into_iter()
            .zip(scored)
            .map(|(segment, (_, score))| (segment, score))
            .collect())
    }

    /// The passages (the memory's finest cut) Lance's full-text index finds for
    /// `query`, enough for `limit` results, each scored by our BM25 (positive
    /// scores only); none when the memory has no segments.
    async fn scored_passages(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(PassageMatch, f64)>> {
        let Some(cut) = self.passage_cut else {
            return Ok(Vec::new());
        };
        let stats = self.passage_stats(query).await?;
        let condition = [
            Some(format!("target_tokens = {cut}")),
            allowed.condition("doc_id"),
        ];
        self.best_texts(
            Table::Segments,
            &["seg_id", "doc_id", "ordinal"],
            query,
            &stats,
            &condition,
            limit,
        )
        .await
    }

    /// The segments embedded from their own text nearest `vector` (cosine),
    /// at most `limit`, ties in id order.
    pub async fn nearest_segments(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        let near = self.nearest_segment_ids(vector, allowed, limit).await?;
        if near.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = near.iter().map(|(id, _)| id.clone()).collect();
        let rows = self.segments(&ids).await?;
        Ok(in_order(near, rows, |s| &s.seg_id))
    }

    /// The ids of the segments [`Snapshot::nearest_segments`] finds, with
    /// their similarity, without reading the segments.
    pub async fn nearest_segment_ids(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        let owners = match allowed.0 {
            None => None,
            Some(_) => Some(self.owners(Table::Segments, "seg_id", allowed).await?),
        };
        self.nearest("segment", vector, owners.as_deref(), limit)
            .await
    }

    /// The ids of the tree nodes of the allowed documents nearest `vector`
    /// (cosine), at most `limit`, with their similarity, without reading the
    /// nodes ([`Snapshot::raptor_nodes`] reads them).
    pub async fn nearest_node_ids(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        let owners = match allowed.0 {
            None => None,
            Some(_) => Some(self.owners(Table::TreeNodes, "node_id", allowed).await?),
        };
        self.nearest("node", vector, owners.as_deref(), limit).await
    }

    /// The RAPTOR nodes among `ranked` (node id, score), in that order: a
    /// corpus tree's nodes have vectors of the same kind.
    pub async fn raptor_nodes(
        &self,
        ranked: &[(String, f64)],
    ) -> Read<Vec<(Arc<TreeNodeRow>, f64)>> {
        let ids: Vec<String> = ranked.iter().map(|(id, _)| id.clone()).collect();
        let mut rows = self.nodes(&ids).await?;
        rows.retain(|n| n.tree == TREE_RAPTOR);
        Ok(in_order(ranked.to_vec(), rows, |n| &n.node_id))
    }

    /// The entities nearest `vector` (cosine), at most `limit`, ties in id order.
    pub async fn nearest_entities(
        &self,
        vector: &[f32],
        limit: usize,
    ) -> Read<Vec<(Arc<EntityRow>, f64)>> {
        let near = self.nearest("entity", vector, None, limit).await?;
        if near.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = near.iter().map(|(id, _)| id.clone()).collect();
        let rows = self.entities(&ids).await?;
        Ok(in_order(near, rows, |e| &e.entity_id))
    }

    /// The owners (of `owner_kind`) whose vectors are nearest `vector`, at
    /// most `limit`, with their exact cosine, most similar first, ties in id
    /// order; only `owners` where given.
    async fn nearest(
        &self,
        owner_kind: &str,
        vector: &[f32],
        owners: Option<&[String]>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        if limit == 0 || owners.is_some_and(<[String]>::is_empty) {
            return Ok(Vec::new());
        }
        let mut filter = format!("owner_kind = {}", sql_string(owner_kind));
        if let Some(owners) = owners {
            filter.push_str(&format!(" AND owner_id IN ({})", sql_strings(owners)));
        }
        let candidates = (limit * VECTOR_CANDIDATES_PER_RESULT).max(VECTOR_CANDIDATES_AT_LEAST);
        let refine = (VECTOR_REFINE_ROWS / candidates).clamp(1, VECTOR_REFINE_AT_MOST) as u32;
        let query = Float32Array::from(vector.to_vec());
        let batches = self
            .scan(Table::Embeddings, VECTOR_COLUMNS, &filter, |scan| {
                scan.nearest("vector", &query, candidates)?
                    .distance_metric(lance_linalg::distance::DistanceType::Cosine)
                    .nprobes(self.vector_probes.max(1))
                    .refine(refine)
                    .prefilter(true)
                    // Re-scored by exact cosine, not by Lance's `_distance`.
                    .disable_scoring_autoprojection();
                Ok(())
            })
            .await?;
        let mut scored = Vec::new();
        for batch in &batches {
            let found: Vec<OwnerVector> = batch_rows(Table::Embeddings, batch)?;
            scored.extend(
                found
                    .into_iter()
                    .map(|v| (v.owner_id, cosine(vector, &v.vector))),
            );
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        Ok(scored)
    }

    /// The ids (`column`) of `table`'s rows of the allowed documents.
    async fn owners(&self, table: Table, column: &str, allowed: Allowed<'_>) -> Read<Vec<String>> {
        let filter = allowed.condition("doc_id").unwrap_or_else(|| "true".into());
        let batches = self.scan(table, &[column], &filter, |_| Ok(())).await?;
        Ok(batches
            .iter()
            .filter_map(|b| strings(b, column))
            .flat_map(|ids| ids.iter().flatten().map(str::to_string))
            .collect())
    }

    /// The BM25 statistics of `corpus` for `query`'s terms, from the lexicon.
    async fn corpus_stats(&self, corpus: &str, query: &[String]) -> Read<CorpusStats> {
        let (texts, terms) = self.totals.get(corpus).copied().unwrap_or_default();
        let mut stats = CorpusStats {
            texts: texts as f64,
            average_length: if texts == 0 {
                0.0
            } else {
                terms as f64 / texts as f64
            },
            document_frequency: HashMap::new(),
        };
        if query.is_empty() || texts == 0 {
            return Ok(stats);
        }
        let entries: Vec<String> = query.iter().map(|t| lexicon_entry(corpus, t)).collect();
        let found = self
            .rows_by_id(
                Table::Lexicon,
                &[],
                "entry",
                None,
                &entries,
                |r: &LexiconRow| &r.entry,
            )
            .await?;
        stats.document_frequency = found
            .into_values()
            .map(|r| (r.term.clone(), r.rows as f64))
            .collect();
        Ok(stats)
    }

    /// The rows of `table` (one with a [`TERMS`] column; read: `columns`)
    /// meeting every `condition` that Lance's full-text index ranks best for
    /// `query`, enough
    /// of them that the `limit` best by exact BM25 (`stats`) are among them,
    /// each with that score; only those with a positive one, best first.
    async fn best_texts<R: DeserializeOwned>(
        &self,
        table: Table,
        columns: &[&str],
        query: &[String],
        stats: &CorpusStats,
        conditions: &[Option<String>],
        limit: usize,
    ) -> Read<Vec<(R, f64)>> {
        if query.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let filter: Vec<&str> = conditions.iter().flatten().map(String::as_str).collect();
        let filter = if filter.is_empty() {
            "true".to_string()
        } else {
            filter.join(" AND ")
        };
        let candidates = (limit * TEXT_CANDIDATES_PER_RESULT).max(TEXT_CANDIDATES_AT_LEAST);
        let search = FullTextSearchQuery::new(query.join(" "))
            .with_column(TERMS.to_string())
            .map_err(|e| self.store.lance_error(table, e))?
            .limit(Some(candidates as i64));
        // Only what ranking needs: the candidates' full rows are read after,
        // and only for the results kept.
        let projected: Vec<&str> = columns.iter().copied().chain([TERMS]).collect();
        let batches = self
            .scan(table, &projected, &filter, |scan| {
                // Ranked by our BM25 from the terms, not by Lance's `_score`.
                scan.full_text_search(search.clone())?
                    .prefilter(true)
                    .disable_scoring_autoprojection();
                Ok(())
            })
            .await?;
        let mut scored = Vec::new();
        for batch in &batches {
            let rows: Vec<R> = batch_rows(table, batch)?;
            let terms = strings(batch, TERMS).ok_or_else(|| StoreError::Invalid {
                table,
                message: format!("no {TERMS} column"),
            })?;
            for (row, terms) in rows.into_iter().zip(terms.iter()) {
                let score = stats.score_terms(query, terms.unwrap_or_default().split(' '));
                if score > 0.0 {
                    scored.push((row, score));
                }
            }
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(scored)
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
        if let Some(hit) = self.cache.get::<T>(table, version, lookup, key) {
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

    /// The rows of `table` whose `column` is one of `ids` (and meeting
    /// `filter`), by id: cached ones, and one read for the rest (absent ones
    /// are cached as absent too).
    async fn rows_by_id<R>(
        &self,
        table: Table,
        columns: &[&str],
        column: &str,
        filter: Option<&'static str>,
        ids: &[String],
        id_of: fn(&R) -> &String,
    ) -> Read<HashMap<String, Arc<R>>>
    where
        R: DeserializeOwned + Serialize + Send + Sync + 'static,
    {
        // Each table is looked up by id under one filter; it names the lookup.
        let lookup = filter.unwrap_or(BY_ID);
        let version = self.version(table);
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        for id in ids {
            match self.cache.get::<Option<Arc<R>>>(table, version, lookup, id) {
                Some(hit) => found.extend(hit.as_ref().clone().map(|row| (id.clone(), row))),
                None => missing.push(id.clone()),
            }
        }
        missing.sort();
        missing.dedup();
        for chunk in missing.chunks(KEYS_PER_PREDICATE) {
            let mut condition = format!("{column} IN ({})", sql_strings(chunk));
            if let Some(filter) = filter {
                condition = format!("{condition} AND {filter}");
            }
            let rows: Vec<R> = self.select(table, columns, &condition, None).await?;
            let mut read: HashMap<String, Arc<R>> = rows
                .into_iter()
                .map(|row| (id_of(&row).clone(), Arc::new(row)))
                .collect();
            for id in chunk {
                let row = read.remove(id);
                let bytes = rows_bytes(row.as_deref());
                self.cache.put(
                    table,
                    version,
                    lookup,
                    id.clone(),
                    Arc::new(row.clone()),
                    bytes,
                );
                found.extend(row.map(|row| (id.clone(), row)));
            }
        }
        Ok(found)
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
            // Not the search columns: as large as the texts they are derived from.
            scan.project(&table.row_columns()).map_err(failed)?;
        } else {
            scan.project(columns).map_err(failed)?;
        }
        scan.filter(filter).map_err(failed)?;
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
            .count_rows(Some(filter.to_string()))
            .await
            .map_err(|e| self.store.lance_error(table, e))
    }
}

/// The characters `chars` of the text `pages` tile (in order), clipped to
/// its end, and where they start; `None` without pages.
fn text_within(pages: &[PageRow], chars: std::ops::Range<u64>) -> Option<(u64, String)> {
    let start = chars.start.min(pages.last()?.end_char);
    let mut text = String::new();
    for page in pages
        .iter()
        .filter(|p| p.end_char > start && p.start_char < chars.end)
    {
        let from = start.saturating_sub(page.start_char) as usize;
        let to = (chars.end.min(page.end_char) - page.start_char) as usize;
        text.extend(page.text.chars().skip(from).take(to - from));
    }
    Some((start, text))
}

/// The trees a walk reads nodes of.
const DOCUMENT_TREES: &str = "tree IN ('memwalker', 'raptor')";

/// `rows` in the order of `ranked` (id, score), each with its score.
fn in_order<R>(
    ranked: Vec<(String, f64)>,
    rows: Vec<Arc<R>>,
    id: impl Fn(&R) -> &String,
) -> Vec<(Arc<R>, f64)> {
    let mut by_id: HashMap<String, Arc<R>> =
        rows.into_iter().map(|r| (id(&r).clone(), r)).collect();
    ranked
        .into_iter()
        .filter_map(|(owner, score)| Some((by_id.remove(&owner)?, score)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stretch of a document's text comes from the pages that tile it,
    /// across a page's end, counted in characters (not bytes), clipped to
    /// the text's end.
    #[test]
    fn a_documents_text_is_read_from_its_pages_by_character() {
        let whole = "Très bien. Ça va — oui. Fin.";
        let cut = [0, 11, 24, whole.chars().count()];
        let pages: Vec<PageRow> = cut
            .windows(2)
            .enumerate()
            .map(|(ordinal, w)| PageRow {
                page_id: format!("p{ordinal}"),
                doc_id: "d".into(),
                ordinal: ordinal as u32,
                start_char: w[0] as u64,
                end_char: w[1] as u64,
                text: whole.chars().skip(w[0]).take(w[1] - w[0]).collect(),
                gist: String::new(),
            })
            .collect();
        let chars = |range: std::ops::Range<usize>| -> String {
            whole.chars().skip(range.start).take(range.len()).collect()
        };
        assert_eq!(text_within(&pages, 8..14), Some((8, chars(8..14))));
        assert_eq!(text_within(&pages, 5..27), Some((5, chars(5..27))));
        assert_eq!(text_within(&pages, 0..100), Some((0, whole.to_string())));
        assert_eq!(text_within(&pages, 26..90), Some((26, chars(26..28))));
        assert_eq!(text_within(&pages, 90..95), Some((28, String::new())));
        assert_eq!(text_within(&[], 0..5), None);
    }
}
