//! A new process's dataflow restored from the last checkpoint: what its
//! cross-document stages held and every document's state, so that a round
//! builds only what changed.

use std::collections::{BTreeSet, HashMap};

use memweave_schemas::store::batch_rows;
use memweave_schemas::{
    CheckpointRow, DocStateRow, DocumentRow, EmbeddingRow, ErrorRow, GistMemoryRow, MemoryRow,
    NameStateRow, PageRow, SegmentRow, Table, TableRow, TableStore, TreeNodeRow,
};

use super::engine::Engine;
use crate::IndexError;
use crate::dataflow::Fed;
use crate::state::{DocState, NameStates, StoredEntity};
use crate::write::Batch;

/// Documents' states per restore epoch: a message to a worker holds their
/// texts (a few kilobytes each) until the worker spills them.
const STATES_PER_EPOCH: usize = 64;

/// A state of a document the checkpoint left unfinished: as its table
/// holds it (`stored`, which the tables retract) and as the dataflow was
/// fed it, its spans filled in (`fed`, which the dataflow retracts).
pub(super) struct UnfinishedState {
    pub stored: DocStateRow,
    pub fed: DocStateRow,
}

/// Feeds what the checkpoint's cross-document stages held at `round`'s
/// restore time: its entities with its names' states (see
/// [`crate::state`]) first, then every document's state, its spans filled
/// in from the document's text, spread over this process's workers.
/// Returns the bytes of states read, and the states of the documents the
/// checkpoint left `unfinished`.
pub(super) fn restore(
    engine: &Engine,
    round: u64,
    checkpoint: &CheckpointRow,
    unfinished: Option<&BTreeSet<String>>,
) -> Result<(u64, Vec<UnfinishedState>), IndexError> {
    let mut states_of_unfinished = Vec::new();
    let (store, feeds) = (engine.store(), engine.feeds());
    let (mut sent, mut bytes, mut failed) = (0, 0, None);
    let mut names = NameStates::default();
    let scan =
        store.scan_at(
            Table::NameStates,
            checkpoint,
            &["name", "asked"],
            |batch| match batch_rows::<NameStateRow>(Table::NameStates, batch) {
                Ok(rows) => rows.into_iter().for_each(|r| names.insert(r)),
                Err(e) => failed = Some(e.into()),
            },
        );
    engine.block_on(scan)?;
    // Worker 0's first epoch, ahead of the states: each epoch of a
    // worker's input is one message.
    let mut entities = Vec::new();
    let columns = ["entity_id", "seg_ids"];
    let scan = store.scan_at(Table::Entities, checkpoint, &columns, |batch| {
        if failed.is_some() {
            return;
        }
        match batch_rows::<EntitySegments>(Table::Entities, batch) {
            Ok(rows) => entities.push(Fed::Entities(
                (rows.iter())
                    .map(|r| StoredEntity::new(&r.entity_id, &r.seg_ids, &names))
                    .collect(),
            )),
            Err(e) => failed = Some(e.into()),
        }
    });
    engine.block_on(scan)?;
    let documents = checkpoint.version_of(Table::Documents);
    let columns = ["doc_id", "build", "state"];
    let scan = store.scan_at_awaiting(Table::DocStates, checkpoint, &columns, async |batch| {
        if failed.is_some() {
            return;
        }
        let filled = match batch_rows::<DocStateRow>(Table::DocStates, batch) {
            Ok(rows) => filled_in(store, documents, rows).await,
            Err(e) => Err(e.into()),
        };
        let rows = match filled {
            Ok(rows) => rows,
            Err(e) => {
                failed = Some(e);
                return;
            }
        };
        bytes += rows.iter().map(|(r, _)| r.state.len() as u64).sum::<u64>();
        states_of_unfinished.extend(
            (rows.iter())
                .filter(|(r, _)| unfinished.is_some_and(|u| u.contains(&r.doc_id)))
                .map(|(stored, fed)| UnfinishedState {
                    stored: stored.clone(),
                    fed: fed.clone(),
                }),
        );
        let mut rows = rows.into_iter().map(|(_, fed)| fed).peekable();
        while rows.peek().is_some() && failed.is_none() {
            let mut chunk: Vec<Fed> = std::mem::take(&mut entities);
            chunk.extend(rows.by_ref().take(STATES_PER_EPOCH).map(Fed::Restored));
            let (worker, epoch) = (sent % feeds, (sent / feeds) as u64);
            if let Err(e) = engine.restore(round, epoch, worker, chunk) {
                failed = Some(e);
            }
            sent += 1;
        }
    });
    engine.block_on(scan)?;
    if failed.is_none() && !entities.is_empty() {
        failed = engine.restore(round, 0, 0, entities).err();
    }
    if let Some(error) = failed {
        return Err(error);
    }
    tracing::info!(
        epoch = checkpoint.epoch,
        bytes,
        unfinished = states_of_unfinished.len(),
        "restored the dataflow from the documents' states"
    );
    Ok((bytes, states_of_unfinished))
}

/// Each of `states` with its spans filled in from its document's text, as
/// the checkpoint's `documents` (at version `documents`) holds it: read
/// through the table's `doc_id` index, a batch of states at a time.
async fn filled_in(
    store: &TableStore,
    documents: Option<u64>,
    states: Vec<DocStateRow>,
) -> Result<Vec<(DocStateRow, DocStateRow)>, IndexError> {
    let ids: Vec<String> = states.iter().map(|s| s.doc_id.clone()).collect();
    let texts: Vec<DocumentText> = match documents {
        Some(version) => {
            let columns: &[&str] = &["doc_id", "text"];
            (store.columns_where_in(Table::Documents, version, "doc_id", &ids, Some(columns)))
                .await?
        }
        None => Vec::new(),
    };
    let texts: HashMap<&str, &str> = (texts.iter())
        .map(|d| (d.doc_id.as_str(), d.text.as_str()))
        .collect();
    (states.into_iter())
        .map(|stored| {
            let unreadable = |why: String| IndexError::UnreadableState {
                doc_id: stored.doc_id.clone(),
                why,
            };
            let text = (texts.get(stored.doc_id.as_str()))
                .ok_or_else(|| unreadable("its document has no row".into()))?;
            let fed = DocState::with_document_text(&stored, text).map_err(unreadable)?;
            Ok((stored, fed))
        })
        .collect()
}

/// The rows the tables hold at `checkpoint` of the documents whose `states`
/// are given, each with multiplicity -1: every row their builds made but
/// the graph's, which the states themselves give the dataflow (which
/// retracts those; their roots only feed the corpus trees).
pub(super) async fn stored_rows(
    store: &TableStore,
    checkpoint: &CheckpointRow,
    states: &[UnfinishedState],
) -> Result<Batch, IndexError> {
    async fn rows<R: TableRow>(
        store: &TableStore,
        checkpoint: &CheckpointRow,
        column: &str,
        values: &[String],
    ) -> Result<Vec<R>, IndexError> {
        Ok(match checkpoint.version_of(R::TABLE) {
            Some(version) => store.rows_where_in(version, column, values).await?,
            None => Vec::new(),
        })
    }
    let ids: Vec<String> = states.iter().map(|s| s.stored.doc_id.clone()).collect();
    let segments: Vec<SegmentRow> = rows(store, checkpoint, "doc_id", &ids).await?;
    let mut nodes: Vec<TreeNodeRow> = rows(store, checkpoint, "doc_id", &ids).await?;
    TreeNodeRow::fill_own_text_terms(&mut nodes, &segments);
    let owners: Vec<String> = (segments.iter().map(|s| s.seg_id.clone()))
        .chain(nodes.iter().map(|n| n.node_id.clone()))
        .collect();
    let vectors: Vec<EmbeddingRow> = rows(store, checkpoint, "owner_id", &owners).await?;
    let documents: Vec<DocumentRow> = rows(store, checkpoint, "doc_id", &ids).await?;
    let pages: Vec<PageRow> = rows(store, checkpoint, "doc_id", &ids).await?;
    let gists: Vec<GistMemoryRow> = rows(store, checkpoint, "doc_id", &ids).await?;
    let errors: Vec<ErrorRow> = rows(store, checkpoint, "doc_id", &ids).await?;
    let stored = (documents.into_iter().map(MemoryRow::Document))
        .chain(segments.into_iter().map(MemoryRow::Segment))
        .chain(nodes.into_iter().map(MemoryRow::TreeNode))
        .chain(vectors.into_iter().map(MemoryRow::Embedding))
        .chain(pages.into_iter().map(MemoryRow::Page))
        .chain(gists.into_iter().map(MemoryRow::GistMemory))
        .chain(
            (errors.into_iter())
                .filter(|e| e.stage != "ingest")
                .map(MemoryRow::Error),
        )
        .chain(states.iter().map(|s| MemoryRow::DocState(s.stored.clone())));
    Ok(stored.map(|row| (row, -1)).collect())
}

/// The columns of a document's row that fill its state's spans in.
#[derive(serde::Deserialize)]
struct DocumentText {
    doc_id: String,
    text: String,
}

/// The columns of an entity's row the restore reads.
#[derive(serde::Deserialize)]
struct EntitySegments {
    entity_id: String,
    seg_ids: Vec<String>,
}
