//! One consistent, immutable view of the memory tables: the versions the newest
//! checkpoint names, loaded and indexed for navigation.

use std::collections::HashMap;

use memweave_operators::graph::normalise;
use memweave_operators::lexical::Bm25;
use memweave_schemas::{
    CheckpointRow, DocumentRow, EntityRow, MemoryTables, PageRow, RelationRow, SegmentRow,
    StoreError, TREE_MEMWALKER, TREE_RAPTOR, TableStore, TreeNodeRow,
};

#[derive(Debug)]
pub struct Snapshot {
    pub epoch: u64,
    pub documents: Vec<DocumentRow>,
    doc_index: HashMap<String, usize>,
    segments: HashMap<String, SegmentRow>,
    pub nodes: Vec<TreeNodeRow>,
    node_index: HashMap<String, usize>,
    /// BM25 over every MemWalker node summary, in `nodes` order.
    pub node_bm25: Bm25,
    roots: HashMap<String, usize>,
    /// Pages of each document, in order.
    pages: HashMap<String, Vec<PageRow>>,
    /// The documents with pages, in doc_id order, and BM25 over each one's gists
    /// together: ReadAgent picks its document by them.
    pub gist_documents: Vec<String>,
    pub gist_bm25: Bm25,
    /// The RAPTOR / ILM-TR nodes of every document, by node id.
    pub raptor: Vec<TreeNodeRow>,
    raptor_index: HashMap<String, usize>,
    /// The passages the retrieval baselines rank: each document's finest cut.
    pub passages: Vec<String>,
    /// BM25 over `passages`, in that order.
    pub passage_bm25: Bm25,
    /// The segments embedded from their own text (MemWalker's), which the
    /// `dense` baseline ranks; in document order.
    pub embedded_segments: Vec<String>,
    pub entities: Vec<EntityRow>,
    /// Normalised names and aliases to entities.
    entity_names: HashMap<String, Vec<usize>>,
    entity_index: HashMap<String, usize>,
    pub relations: Vec<RelationRow>,
    /// Relations touching each entity (positions in `relations`).
    adjacent: HashMap<String, Vec<usize>>,
    /// Vectors by owner (segment, node, entity id).
    vectors: HashMap<String, Vec<f32>>,
    /// The embedder that made the vectors (`embeddings.model`); a question must
    /// be embedded by the same one.
    pub embedding_model: Option<String>,
}

impl Snapshot {
    /// The snapshot at the newest checkpoint, or `None` before the first commit.
    pub async fn load_latest(store: &TableStore) -> Result<Option<Snapshot>, StoreError> {
        match store.latest_checkpoint().await? {
            Some(checkpoint) => Ok(Some(Self::load(store, &checkpoint).await?)),
            None => Ok(None),
        }
    }

    pub async fn load(
        store: &TableStore,
        checkpoint: &CheckpointRow,
    ) -> Result<Snapshot, StoreError> {
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
        let vectors: HashMap<String, Vec<f32>> = embeddings
            .into_iter()
            .map(|e| (e.owner_id, e.vector))
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
            documents,
            doc_index,
            segments: segments
                .into_iter()
                .map(|s| (s.seg_id.clone(), s))
                .collect(),
            nodes,
            node_index,
            node_bm25,
            roots,
            pages,
            gist_documents,
            gist_bm25,
            raptor,
            raptor_index,
            passages,
            passage_bm25,
            embedded_segments,
            entities,
            entity_names,
            entity_index,
            relations,
            adjacent,
            vectors,
            embedding_model,
        }
    }

    pub fn document(&self, doc_id: &str) -> Option<&DocumentRow> {
        self.doc_index.get(doc_id).map(|&i| &self.documents[i])
    }

    /// The title of a document, empty when it is unknown.
    pub fn title_of(&self, doc_id: &str) -> String {
        self.document(doc_id)
            .map_or_else(String::new, |d| d.title.clone())
    }

    pub fn node_position(&self, node_id: &str) -> Option<usize> {
        self.node_index.get(node_id).copied()
    }

    pub fn root_of(&self, doc_id: &str) -> Option<usize> {
        self.roots.get(doc_id).copied()
    }

    pub fn segment(&self, seg_id: &str) -> Option<&SegmentRow> {
        self.segments.get(seg_id)
    }

    pub fn pages_of(&self, doc_id: &str) -> &[PageRow] {
        self.pages.get(doc_id).map_or(&[], Vec::as_slice)
    }

    pub fn raptor_position(&self, node_id: &str) -> Option<usize> {
        self.raptor_index.get(node_id).copied()
    }

    pub fn entity(&self, entity_id: &str) -> Option<&EntityRow> {
        self.entity_position(entity_id).map(|i| &self.entities[i])
    }

    pub fn entity_position(&self, entity_id: &str) -> Option<usize> {
        self.entity_index.get(entity_id).copied()
    }

    /// Entities whose name or an alias normalises to `name`'s normal form.
    pub fn entities_named(&self, name: &str) -> &[usize] {
        self.entity_names
            .get(&normalise(name))
            .map_or(&[], Vec::as_slice)
    }

    /// Relations with `entity_id` at either end.
    pub fn relations_of(&self, entity_id: &str) -> &[usize] {
        self.adjacent.get(entity_id).map_or(&[], Vec::as_slice)
    }

    pub fn vector(&self, owner_id: &str) -> Option<&[f32]> {
        self.vectors.get(owner_id).map(Vec::as_slice)
    }
}

fn positions<'a>(ids: impl Iterator<Item = &'a str>) -> HashMap<String, usize> {
    ids.enumerate().map(|(i, id)| (id.to_string(), i)).collect()
}
