//! One consistent, immutable view of the memory tables: the versions the newest
//! checkpoint names, loaded and indexed for navigation.

use std::collections::HashMap;

use memweave_operators::lexical::Bm25;
use memweave_schemas::{
    CheckpointRow, DocumentRow, PageRow, SegmentRow, StoreError, TREE_MEMWALKER, TableStore,
    TreeNodeRow,
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
        let mut documents: Vec<DocumentRow> = store.read_at(checkpoint).await?;
        documents.retain(|d| !d.deleted);
        documents.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
        let segments: Vec<SegmentRow> = store.read_at(checkpoint).await?;
        let mut nodes: Vec<TreeNodeRow> = store.read_at(checkpoint).await?;
        nodes.retain(|n| n.tree == TREE_MEMWALKER);
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        let page_rows: Vec<PageRow> = store.read_at(checkpoint).await?;
        Ok(Self::from_rows(
            checkpoint.epoch,
            documents,
            segments,
            nodes,
            page_rows,
        ))
    }

    pub fn from_rows(
        epoch: u64,
        documents: Vec<DocumentRow>,
        segments: Vec<SegmentRow>,
        nodes: Vec<TreeNodeRow>,
        page_rows: Vec<PageRow>,
    ) -> Snapshot {
        let doc_index = documents
            .iter()
            .enumerate()
            .map(|(i, d)| (d.doc_id.clone(), i))
            .collect();
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.node_id.clone(), i))
            .collect();
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
}
