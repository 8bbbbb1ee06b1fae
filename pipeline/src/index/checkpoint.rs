//! What the last checkpoint left: the documents and errors a new process
//! carries over, after rolling back what a run that did not commit wrote.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, AsArray, ListArray};
use arrow::datatypes::{TimestampMicrosecondType, UInt64Type};
use memweave_operators::model::StepError;
use memweave_schemas::store::{primitives, strings};
use memweave_schemas::{CheckpointRow, ErrorRow, Table, TableStore, hash128};

use crate::origins::Record;
use crate::write::version_hash;
use crate::{IndexError, UsageError};

/// What the last checkpoint held, until the process's first round has used it:
/// the documents (without their texts) and ingestion errors the source's
/// files or messages carry over.
#[derive(Debug)]
pub(super) struct Previous {
    pub(super) checkpoint: CheckpointRow,
    pub(super) documents: Vec<Record>,
    pub(super) ingest_errors: Vec<ErrorRow>,
    /// Whether its documents' states were built as this process builds them:
    /// then the first round restores them rather than rebuild every document.
    pub(super) restorable: bool,
    /// Documents whose build met a model failure a new run may not meet:
    /// a restoring round builds them again.
    pub(super) unfinished: BTreeSet<String>,
}

/// The newest checkpoint's documents and ingestion errors, after rolling back
/// table versions written after it by a run that did not commit, and whether
/// its documents' states were built by one of the builds `reads` names.
pub(super) async fn previous_tables(
    store: &TableStore,
    reads: &[String],
) -> Result<Option<Previous>, IndexError> {
    let Some(checkpoint) = store.latest_checkpoint().await? else {
        return Ok(None);
    };
    // An older memory's tables lack the columns rows are staged with now:
    // refuse before touching them.
    store.check_current(&checkpoint).map_err(UsageError::of)?;
    let rolled_back = store.roll_back_to(&checkpoint).await?;
    if !rolled_back.is_empty() {
        let names: Vec<&str> = rolled_back.iter().map(|t| t.name()).collect();
        tracing::warn!(
            epoch = checkpoint.epoch,
            tables = %names.join(", "),
            "rolled back table versions a stopped run wrote after the last checkpoint"
        );
    }
    // Rows are staged with the columns each table declares now: an older
    // memory's tables are brought to them first (their metadata only).
    for &table in Table::MEMORY
        .iter()
        .chain([&Table::Lexicon, &Table::Checkpoints])
    {
        store.upgrade_columns(table).await?;
    }
    let documents = document_records(store, &checkpoint)
        .await
        .map_err(|e| IndexError::OlderTables(Box::new(e)))?;
    let errors: Vec<ErrorRow> = store.read_at(&checkpoint).await?;
    // A build that met a failure a new run may not meet (the pool down, the
    // budget spent) is not final: a new process builds the documents that met
    // one again, the call cache answering what they had. A failure of a stage
    // across documents (a name's resolution, a corpus tree) names no document:
    // then every document is built again, as before states were kept.
    let transient = |e: &&ErrorRow| StepError::TRANSIENT_KINDS.contains(&e.kind.as_str());
    let unfinished: BTreeSet<String> = errors
        .iter()
        .filter(transient)
        .filter_map(|e| e.doc_id.clone())
        .collect();
    let across = errors.iter().filter(transient).any(|e| e.doc_id.is_none());
    let ingest_errors = errors.into_iter().filter(|e| e.stage == "ingest").collect();
    let restorable = !across && states_built_by(store, &checkpoint, reads).await?;
    if across {
        tracing::info!(
            epoch = checkpoint.epoch,
            "the memory's last build met model failures across documents a new run may not \
             meet (llm_unavailable, llm_cache_miss, llm_over_budget): every document is built again"
        );
    } else if !restorable {
        tracing::info!(
            epoch = checkpoint.epoch,
            "the memory's documents' states were not kept by this build (an older memweave, \
             or other sizes, memories, model or embedder): every document is built again"
        );
    }
    Ok(Some(Previous {
        checkpoint,
        documents,
        ingest_errors,
        restorable,
        unfinished,
    }))
}

/// Whether `checkpoint` names the documents' states and every one was built
/// by one of the builds `reads` names.
async fn states_built_by(
    store: &TableStore,
    checkpoint: &CheckpointRow,
    reads: &[String],
) -> Result<bool, IndexError> {
    if checkpoint.version_of(Table::DocStates).is_none() {
        return Ok(false);
    }
    let mut same = true;
    store
        .scan_at(Table::DocStates, checkpoint, &["build"], |batch| {
            same &= strings(batch, "build").is_some_and(|builds| {
                builds
                    .iter()
                    .all(|b| b.is_some_and(|b| reads.iter().any(|r| r == b)))
            });
        })
        .await?;
    Ok(same)
}

/// Row `row`'s labels in a `List<Utf8>` column (null, in a memory built
/// before labels: none).
fn row_labels(labels: &ListArray, row: usize) -> Arc<[String]> {
    if labels.is_null(row) {
        return Arc::from([]);
    }
    let list = labels.value(row);
    let list = list.as_string::<i32>();
    list.iter().flatten().map(str::to_string).collect()
}

/// Every document at `checkpoint`, without its text (the one column read
/// again only when a document is fed or retracted).
async fn document_records(
    store: &TableStore,
    checkpoint: &CheckpointRow,
) -> Result<Vec<Record>, IndexError> {
    let columns = [
        "doc_id",
        "version",
        "content_hash",
        "source_uri",
        "title",
        "ingested_at",
        "acl",
    ];
    let mut records = Vec::new();
    let mut failed = None;
    store
        .scan_at(Table::Documents, checkpoint, &columns, |batch| {
            let (Some(ids), Some(hashes), Some(uris), Some(titles), Some(versions), Some(seen)) = (
                strings(batch, "doc_id"),
                strings(batch, "content_hash"),
                strings(batch, "source_uri"),
                strings(batch, "title"),
                primitives::<UInt64Type>(batch, "version"),
                primitives::<TimestampMicrosecondType>(batch, "ingested_at"),
            ) else {
                failed = Some(batch.schema());
                return;
            };
            let labels = batch
                .column_by_name("acl")
                .and_then(|c| c.as_list_opt::<i32>());
            records.extend((0..batch.num_rows()).map(|row| Record {
                doc_id: ids.value(row).into(),
                version: versions.value(row),
                content_hash: version_hash(hashes.value(row)),
                source_uri: uris.value(row).into(),
                title: hash128(titles.value(row).as_bytes()),
                acl: labels.map_or_else(|| Arc::from([]), |labels| row_labels(labels, row)),
                seen: seen.value(row),
            }));
        })
        .await?;
    if let Some(schema) = failed {
        return Err(IndexError::ForeignTable {
            table: Table::Documents,
            schema: format!("{schema:?}"),
        });
    }
    Record::share_sources(&mut records);
    Ok(records)
}
