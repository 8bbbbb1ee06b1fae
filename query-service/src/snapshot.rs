//! One consistent, immutable view of the memory tables: the versions the newest
//! checkpoint names. Navigators read it only through the questions below (a
//! row by id, a document's rows, the best matches of a question's terms or
//! vector), each answered for the whole checkpoint, so how the rows are found
//! is this module's business alone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use memweave_operators::embed::cosine;
use memweave_operators::graph::normalise;
use memweave_operators::lexical::{Bm25, CorpusStats};
use memweave_schemas::{
    CheckpointRow, DocumentRow, EntityRow, MemoryTables, PageRow, RelationRow, SegmentRow,
    StoreError, TREE_MEMWALKER, TREE_RAPTOR, TableStore, TreeNodeRow,
};

use crate::request::AskRequest;

/// What reading the memory can fail with.
pub type Read<T> = Result<T, StoreError>;

/// The documents a request may read: all, or those it names.
#[derive(Debug, Clone, Copy)]
pub struct Allowed<'a>(pub Option<&'a [String]>);

impl Allowed<'_> {
    pub fn admits(&self, doc_id: &str) -> bool {
        self.0.is_none_or(|docs| docs.iter().any(|d| d == doc_id))
    }
}

#[derive(Debug)]
pub struct Snapshot {
    pub epoch: u64,
    documents: Vec<Arc<DocumentRow>>,
    doc_index: HashMap<String, usize>,
    segments: HashMap<String, Arc<SegmentRow>>,
    /// MemWalker nodes, in node id order.
    nodes: Vec<Arc<TreeNodeRow>>,
    node_index: HashMap<String, usize>,
    /// BM25 over every MemWalker node summary, in `nodes` order.
    node_bm25: Bm25,
    roots: HashMap<String, usize>,
    /// Pages of each document, in order.
    pages: HashMap<String, Arc<[PageRow]>>,
    /// The documents with pages, in doc_id order, and BM25 over each one's gists
    /// together: ReadAgent picks its document by them.
    gist_documents: Vec<String>,
    gist_bm25: Bm25,
    /// The RAPTOR / ILM-TR nodes of every document, in node id order.
    raptor: Vec<Arc<TreeNodeRow>>,
    raptor_index: HashMap<String, usize>,
    /// The passages the retrieval baselines rank: each document's finest cut.
    passages: Vec<String>,
    /// BM25 over `passages`, in that order.
    passage_bm25: Bm25,
    /// The segments embedded from their own text (MemWalker's), which the
    /// `dense` baseline ranks; in document order.
    embedded_segments: Vec<String>,
    /// In entity id order.
    entities: Vec<Arc<EntityRow>>,
    /// Normalised names and aliases to entities.
    entity_names: HashMap<String, Vec<usize>>,
    entity_index: HashMap<String, usize>,
    /// In relation id order.
    relations: Vec<Arc<RelationRow>>,
    /// Relations touching each entity (positions in `relations`).
    adjacent: HashMap<String, Vec<usize>>,
    /// Vectors by owner (segment, node, entity id).
    vectors: HashMap<String, Arc<[f32]>>,
    /// The embedder that made the vectors (`embeddings.model`); a question must
    /// be embedded by the same one.
    pub embedding_model: Option<String>,
}

impl Snapshot {
    /// The snapshot at the newest checkpoint, or `None` before the first commit.
    pub async fn load_latest(store: &TableStore) -> Read<Option<Snapshot>> {
        match store.latest_checkpoint().await? {
            Some(checkpoint) => Ok(Some(Self::load(store, &checkpoint).await?)),
            None => Ok(None),
        }
    }

    pub async fn load(store: &TableStore, checkpoint: &CheckpointRow) -> Read<Snapshot> {
        let rows = MemoryTables::read_at(store, checkpoint).await?;
        Ok(Self::from_rows(checkpoint.epoch, rows))
    }

    /// The snapshot of `rows` (every memory table of one checkpoint); errors
    /// are not navigated.
    pub fn from_rows(epoch: u64, rows: MemoryTables) -> Snapshot {
        let MemoryTables {
            mut documents,
            segments,
            tree_nodes: nodes,
            pages: page_rows,
            mut entities,
            mut relations,
            embeddings,
            errors: _,
        } = rows;
        documents.retain(|d| !d.deleted);
        documents.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
        let (mut nodes, mut raptor): (Vec<TreeNodeRow>, Vec<TreeNodeRow>) = nodes
            .into_iter()
            .filter(|n| n.tree == TREE_MEMWALKER || n.tree == TREE_RAPTOR)
            .partition(|n| n.tree == TREE_MEMWALKER);
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        raptor.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        let raptor_index = positions(raptor.iter().map(|n| n.node_id.as_str()));
        entities.sort_by(|a, b| a.entity_id.cmp(&b.entity_id));
        relations.sort_by(|a, b| a.relation_id.cmp(&b.relation_id));
        let entity_index = positions(entities.iter().map(|e| e.entity_id.as_str()));
        let mut entity_names: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, entity) in entities.iter().enumerate() {
            for name in std::iter::once(&entity.name).chain(&entity.aliases) {
                let list = entity_names.entry(normalise(name)).or_default();
                if !list.contains(&i) {
                    list.push(i);
                }
            }
        }
        let mut adjacent: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, relation) in relations.iter().enumerate() {
            adjacent
                .entry(relation.source_id.clone())
                .or_default()
                .push(i);
            adjacent
                .entry(relation.target_id.clone())
                .or_default()
                .push(i);
        }
        // The finest cut of each document: the retrieval baselines rank passages
        // of one size, not the same text twice at two sizes.
        let mut finest: HashMap<&str, u32> = HashMap::new();
        for segment in &segments {
            let size = finest
                .entry(&segment.doc_id)
                .or_insert(segment.target_tokens);
            *size = (*size).min(segment.target_tokens);
        }
        let mut passages: Vec<&SegmentRow> = segments
            .iter()
            .filter(|s| finest.get(s.doc_id.as_str()) == Some(&s.target_tokens))
            .collect();
        passages.sort_by(|a, b| (&a.doc_id, a.ordinal).cmp(&(&b.doc_id, b.ordinal)));
        let passage_bm25 = Bm25::new(passages.iter().map(|s| s.text.as_str()));
        let passages = passages.iter().map(|s| s.seg_id.clone()).collect();
        let embedding_model = embeddings.first().map(|e| e.model.clone());
        let vectors: HashMap<String, Arc<[f32]>> = embeddings
            .into_iter()
            .map(|e| (e.owner_id, e.vector.into()))
            .collect();
        let mut embedded: Vec<&SegmentRow> = segments
            .iter()
            .filter(|s| vectors.contains_key(&s.seg_id))
            .collect();
        embedded.sort_by(|a, b| (&a.doc_id, a.ordinal).cmp(&(&b.doc_id, b.ordinal)));
        let embedded_segments = embedded.iter().map(|s| s.seg_id.clone()).collect();
        let doc_index = positions(documents.iter().map(|d| d.doc_id.as_str()));
        let node_index = positions(nodes.iter().map(|n| n.node_id.as_str()));
        let roots = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.parent_id.is_none())
            .filter_map(|(i, n)| Some((n.doc_id.clone()?, i)))
            .collect();
        let node_bm25 = Bm25::new(nodes.iter().map(|n| n.summary.as_str()));
        let mut pages: HashMap<String, Vec<PageRow>> = HashMap::new();
        for page in page_rows {
            pages.entry(page.doc_id.clone()).or_default().push(page);
        }
        for list in pages.values_mut() {
            list.sort_by_key(|p| p.ordinal);
        }
        let mut gist_documents: Vec<String> = pages.keys().cloned().collect();
        gist_documents.sort();
        let gist_memories: Vec<String> = gist_documents
            .iter()
            .map(|d| {
                pages[d]
                    .iter()
                    .map(|p| p.gist.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let gist_bm25 = Bm25::new(gist_memories.iter().map(String::as_str));
        Snapshot {
            epoch,
            documents: documents.into_iter().map(Arc::new).collect(),
            doc_index,
            segments: segments
                .into_iter()
                .map(|s| (s.seg_id.clone(), Arc::new(s)))
                .collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            node_index,
            node_bm25,
            roots,
            pages: pages
                .into_iter()
                .map(|(doc, list)| (doc, list.into()))
                .collect(),
            gist_documents,
            gist_bm25,
            raptor: raptor.into_iter().map(Arc::new).collect(),
            raptor_index,
            passages,
            passage_bm25,
            embedded_segments,
            entities: entities.into_iter().map(Arc::new).collect(),
            entity_names,
            entity_index,
            relations: relations.into_iter().map(Arc::new).collect(),
            adjacent,
            vectors,
            embedding_model,
        }
    }

    /// Every document not deleted, in id order.
    pub async fn documents(&self) -> Read<Vec<Arc<DocumentRow>>> {
        Ok(self.documents.clone())
    }

    pub async fn document(&self, doc_id: &str) -> Read<Option<Arc<DocumentRow>>> {
        Ok(self
            .doc_index
            .get(doc_id)
            .map(|&i| self.documents[i].clone()))
    }

    /// Which of `doc_ids` the memory holds.
    async fn known_documents(&self, doc_ids: &[String]) -> Read<HashSet<String>> {
        Ok(doc_ids
            .iter()
            .filter(|d| self.doc_index.contains_key(d.as_str()))
            .cloned()
            .collect())
    }

    /// `request`'s rules ([`AskRequest::validate`]), the documents it names
    /// looked up in this checkpoint: what the request gets wrong, or a failed
    /// read.
    pub async fn validate(&self, request: &AskRequest) -> Read<Result<(), String>> {
        let named = request.documents.as_deref().unwrap_or_default();
        let known = self.known_documents(named).await?;
        Ok(request.validate(|id| known.contains(id)))
    }

    /// A MemWalker or RAPTOR node.
    pub async fn node(&self, node_id: &str) -> Read<Option<Arc<TreeNodeRow>>> {
        Ok(self
            .node_index
            .get(node_id)
            .map(|&i| self.nodes[i].clone())
            .or_else(|| {
                self.raptor_index
                    .get(node_id)
                    .map(|&i| self.raptor[i].clone())
            }))
    }

    /// The nodes of `ids` that exist, in that order.
    pub async fn nodes(&self, ids: &[String]) -> Read<Vec<Arc<TreeNodeRow>>> {
        let mut found = Vec::new();
        for id in ids {
            found.extend(self.node(id).await?);
        }
        Ok(found)
    }

    /// Every node of one tree (`memwalker` or `raptor`) of a document, in id order.
    pub async fn tree(&self, doc_id: &str, tree: &str) -> Read<Vec<Arc<TreeNodeRow>>> {
        let nodes = if tree == TREE_RAPTOR {
            &self.raptor
        } else {
            &self.nodes
        };
        Ok(nodes
            .iter()
            .filter(|n| n.doc_id.as_deref() == Some(doc_id))
            .cloned()
            .collect())
    }

    /// The root of a document's MemWalker tree.
    pub async fn root_of(&self, doc_id: &str) -> Read<Option<Arc<TreeNodeRow>>> {
        Ok(self.roots.get(doc_id).map(|&i| self.nodes[i].clone()))
    }

    pub async fn segment(&self, seg_id: &str) -> Read<Option<Arc<SegmentRow>>> {
        Ok(self.segments.get(seg_id).cloned())
    }

    pub async fn pages_of(&self, doc_id: &str) -> Read<Arc<[PageRow]>> {
        Ok(self.pages.get(doc_id).cloned().unwrap_or_else(|| [].into()))
    }

    pub async fn entity(&self, entity_id: &str) -> Read<Option<Arc<EntityRow>>> {
        Ok(self
            .entity_index
            .get(entity_id)
            .map(|&i| self.entities[i].clone()))
    }

    /// Entities whose name or an alias normalises to `name`'s normal form, in
    /// id order.
    pub async fn entities_named(&self, name: &str) -> Read<Vec<Arc<EntityRow>>> {
        Ok(self
            .entity_names
            .get(&normalise(name))
            .map_or_else(Vec::new, |list| {
                list.iter().map(|&i| self.entities[i].clone()).collect()
            }))
    }

    /// Relations with `entity_id` at either end, in id order.
    pub async fn relations_of(&self, entity_id: &str) -> Read<Vec<Arc<RelationRow>>> {
        Ok(self.adjacent.get(entity_id).map_or_else(Vec::new, |list| {
            list.iter().map(|&r| self.relations[r].clone()).collect()
        }))
    }

    pub async fn vector(&self, owner_id: &str) -> Read<Option<Arc<[f32]>>> {
        Ok(self.vectors.get(owner_id).cloned())
    }

    /// The documents whose best MemWalker node matches `query` best (BM25 over
    /// the node summaries), at most `limit`, each with that score and node; only
    /// those with a positive score.
    pub async fn documents_by_nodes(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64, Arc<TreeNodeRow>)>> {
        let mut best: HashMap<&str, (f64, usize)> = HashMap::new();
        for (i, score) in self.node_bm25.rank(query) {
            let Some(doc_id) = self.nodes[i].doc_id.as_deref() else {
                continue;
            };
            if allowed.admits(doc_id) {
                best.entry(doc_id).or_insert((score, i));
            }
        }
        let mut ranked: Vec<(String, f64, Arc<TreeNodeRow>)> = best
            .into_iter()
            .filter(|(_, (score, _))| *score > 0.0)
            .map(|(d, (s, i))| (d.to_string(), s, self.nodes[i].clone()))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(limit);
        Ok(ranked)
    }

    /// The BM25 statistics of the MemWalker node summaries for `query`'s terms.
    pub async fn node_stats(&self, query: &[String]) -> Read<CorpusStats> {
        Ok(self.node_bm25.stats(query))
    }

    /// The BM25 statistics of the passages for `query`'s terms.
    pub async fn passage_stats(&self, query: &[String]) -> Read<CorpusStats> {
        Ok(self.passage_bm25.stats(query))
    }

    /// ReadAgent's document: the one whose gists together match `query` best,
    /// with its score (none when no gist shares a term), and how many allowed
    /// documents have gists.
    pub async fn document_by_gists(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
    ) -> Read<(Option<(String, f64)>, usize)> {
        let candidates = self
            .gist_documents
            .iter()
            .filter(|d| allowed.admits(d))
            .count();
        let best = self
            .gist_bm25
            .rank(query)
            .into_iter()
            .find(|&(i, _)| allowed.admits(&self.gist_documents[i]))
            .filter(|&(_, score)| score > 0.0)
            .map(|(i, score)| (self.gist_documents[i].clone(), score));
        Ok((best, candidates))
    }

    /// The passages (each document's finest cut) BM25 ranks highest for
    /// `query`, at most `limit`, only those with a positive score.
    pub async fn passages_by_bm25(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        Ok(self
            .passage_bm25
            .rank(query)
            .into_iter()
            .filter(|&(_, score)| score > 0.0)
            .filter_map(|(i, score)| Some((self.segments.get(&self.passages[i])?.clone(), score)))
            .filter(|(s, _)| allowed.admits(&s.doc_id))
            .take(limit)
            .collect())
    }

    /// The segments embedded from their own text nearest `vector` (cosine),
    /// at most `limit`, ties in id order.
    pub async fn nearest_segments(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        let candidates = self
            .embedded_segments
            .iter()
            .filter_map(|id| self.segments.get(id))
            .filter(|s| allowed.admits(&s.doc_id))
            .map(|s| (s.seg_id.as_str(), s));
        Ok(self.nearest(vector, candidates, limit))
    }

    /// The RAPTOR nodes of the allowed documents nearest `vector` (cosine),
    /// leaves and summaries alike, at most `limit`, ties in id order.
    pub async fn nearest_raptor_nodes(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<TreeNodeRow>, f64)>> {
        let candidates = self
            .raptor
            .iter()
            .filter(|n| n.doc_id.as_deref().is_some_and(|d| allowed.admits(d)))
            .map(|n| (n.node_id.as_str(), n));
        Ok(self.nearest(vector, candidates, limit))
    }

    /// The entities nearest `vector` (cosine), at most `limit`, ties in id order.
    pub async fn nearest_entities(
        &self,
        vector: &[f32],
        limit: usize,
    ) -> Read<Vec<(Arc<EntityRow>, f64)>> {
        let candidates = self.entities.iter().map(|e| (e.entity_id.as_str(), e));
        Ok(self.nearest(vector, candidates, limit))
    }

    /// The `candidates` (id, row) with a vector, most similar to `vector`
    /// first, ties in id order, at most `limit`.
    fn nearest<'s, T: 's>(
        &'s self,
        vector: &[f32],
        candidates: impl Iterator<Item = (&'s str, &'s Arc<T>)>,
        limit: usize,
    ) -> Vec<(Arc<T>, f64)> {
        let mut ranked: Vec<(&str, &Arc<T>, f64)> = candidates
            .filter_map(|(id, row)| Some((id, row, cosine(vector, self.vectors.get(id)?))))
            .collect();
        ranked.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(b.0)));
        ranked.truncate(limit);
        ranked
            .into_iter()
            .map(|(_, row, score)| (Arc::clone(row), score))
            .collect()
    }
}

fn positions<'a>(ids: impl Iterator<Item = &'a str>) -> HashMap<String, usize> {
    ids.enumerate().map(|(i, id)| (id.to_string(), i)).collect()
}
