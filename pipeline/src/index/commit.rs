//! A round's commit, and what commits leave: the checkpoint a new process
//! starts from, and the summary read back from the tables.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use arrow::array::{Array, AsArray, PrimitiveArray, RecordBatch};
use arrow::datatypes::{ArrowPrimitiveType, TimestampMicrosecondType, UInt32Type, UInt64Type};
use memweave_operators::model::StepError;
use memweave_schemas::store::{Collected, Compaction, strings};
use memweave_schemas::{
    CallStatRow, CheckpointRow, ErrorRow, LlmCallRow, Table, TableStore, TableVersion,
};

use super::{EmbedderName, IndexSummary, Indexer, KnownVersion, Previous, Stages, TreeShape};
use crate::origins::Record;
use crate::write::{RoundChanges, StagedPart};
use crate::{IndexError, UsageError};

impl Indexer {
    /// Commits the round: every memory table's staged rows and deletes (see
    /// [`RoundWriter::commit`]; `replace` replaces each table's rows), the
    /// model's calls and their counts, then a checkpoint naming every table's
    /// version and where the memory's sources stand; returns it and what
    /// changed.
    pub(super) async fn commit(
        &self,
        replace: bool,
        parts: Vec<StagedPart>,
    ) -> Result<(CheckpointRow, RoundChanges), IndexError> {
        let store = &self.engine.store;
        let compaction = self.options.retention.compaction();
        let writer = &self.engine.writer;
        let (mut versions, changes) = writer.commit(replace, parts, compaction).await?;
        let mut calls = self.engine.cache.finish().await?;
        if compaction == Compaction::Tiered && calls.is_some() {
            if self.options.cluster.processes() == 1 {
                let superseded = self.superseded(&changes, replace);
                let evicted = self.engine.cache.evict_superseded(&superseded).await?;
                tracing::debug!(evicted, "calls of superseded texts removed from llm_calls");
            }
            // Appended a flush at a time: a ledger whose history retention
            // removes is compacted like the memory (kept, it never is).
            calls = Some(store.compact(Table::LlmCalls, compaction).await?);
        }
        versions.push(TableVersion {
            table: Table::LlmCalls.name().to_string(),
            version: match calls {
                Some(version) => version,
                None => store.write_rows::<LlmCallRow>(&[]).await?,
            },
        });
        // No checkpoint yet is no documents version yet.
        let first = self.documents_version.is_none();
        versions.push(self.write_call_stats(first).await?);
        let checkpoint = store
            .commit_checkpoint(self.positions.record(), versions)
            .await?;
        Ok((checkpoint, changes))
    }

    /// Appends what this round asked of the model, per stage and task, under the
    /// epoch the round's checkpoint will have (process 0 alone commits); the
    /// first commit under a root (`whole`) replaces what a crashed run left.
    async fn write_call_stats(&self, whole: bool) -> Result<TableVersion, IndexError> {
        let store = &self.engine.store;
        let epoch = store.latest_checkpoint().await?.map_or(1, |c| c.epoch + 1);
        let rows: Vec<CallStatRow> = self
            .engine
            .cache
            .take_stats()
            .into_iter()
            .map(|((stage, task), stats)| CallStatRow {
                stat_id: format!("{epoch}/{stage}/{task}"),
                epoch,
                stage,
                task,
                calls: stats.calls,
                cache_hits: stats.cache_hits,
                tokens_in: stats.tokens_in,
                tokens_out: stats.tokens_out,
            })
            .collect();
        let mut version = match store.table_version(Table::CallStats).await? {
            Some(_) if whole => store.write_rows(&rows).await?,
            Some(version) if rows.is_empty() => version,
            Some(_) => store.append_rows(&rows).await?,
            None => store.write_rows(&rows).await?,
        };
        let compaction = self.options.retention.compaction();
        if compaction == Compaction::Tiered {
            version = store.compact(Table::CallStats, compaction).await?;
        }
        Ok(TableVersion {
            table: Table::CallStats.name().to_string(),
            version,
        })
    }

    /// The documents whose earlier text the round replaced or removed: what
    /// [`Indexer::note_versions`] counts as changed and gone, but new ones.
    fn superseded(&self, changes: &RoundChanges, replace: bool) -> Vec<String> {
        if !replace {
            return changes.documents_removed.clone();
        }
        let added = added_versions(changes);
        self.versions
            .iter()
            .filter(|(id, known)| added.get(id.as_str()) != Some(*known))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Notes the versions of the documents a round added and removed; returns
    /// how many documents are new or changed, and how many are gone. A
    /// `replace` round (a process's first) added every document: against the
    /// last checkpoint's versions, only those whose version changed count, and
    /// the checkpoint's documents it did not add are gone.
    pub(super) fn note_versions(
        &mut self,
        changes: &RoundChanges,
        replace: bool,
    ) -> (usize, usize) {
        let added = added_versions(changes);
        let (changed, deleted) = if replace {
            let changed = added
                .iter()
                .filter(|(id, known)| self.versions.get(**id) != Some(known))
                .count();
            let deleted = self
                .versions
                .keys()
                .filter(|id| !added.contains_key(id.as_str()))
                .count();
            self.versions.clear();
            (changed, deleted)
        } else {
            let removed: HashSet<&str> = changes
                .documents_removed
                .iter()
                .map(String::as_str)
                .filter(|id| !added.contains_key(id))
                .collect();
            for id in &removed {
                self.versions.remove(*id);
            }
            (added.len(), removed.len())
        };
        for (id, known) in added {
            self.versions.insert(id.to_string(), known);
        }
        (changed, deleted)
    }

    /// The summary of the memory at `checkpoint`, from its tables (row counts
    /// from Lance's metadata; tokens and tree shapes from a scan of three
    /// small columns). What the round changed is the caller's to fill in.
    pub(super) fn summary(
        &self,
        checkpoint: &CheckpointRow,
        started: Instant,
    ) -> Result<IndexSummary, IndexError> {
        let store = &self.engine.store;
        let (counts, (tokens, chars), trees, mut errors) = self.engine.runtime.block_on(async {
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
            embedder: EmbedderName {
                model: self.engine.embedder.model().to_string(),
                width: self.engine.embedder.dim(),
            },
            errors,
            wall: started.elapsed(),
            stages: Stages::default(),
            rows_written: 0,
            restored_bytes: 0,
            chars,
            backend: self.engine.backend.clone(),
            cache: self.engine.cache.report(),
            pool: self.engine.pool.as_ref().map(|p| p.report()),
            collected: Collected::default(),
        })
    }

    /// Removes what `--keep-checkpoints`/`--keep-for` keep no longer, but the
    /// checkpoint the dataflow is still to be restored from. The round is
    /// committed whatever this does: a failure is logged, and the next
    /// commit tries again.
    pub(super) fn collect_garbage(&self) -> Collected {
        let retention = self.options.retention;
        if !retention.removes() {
            return Collected::default();
        }
        let pinned = self.restore_from.iter().map(|c| c.epoch).collect();
        let store = &self.engine.store;
        match self
            .engine
            .runtime
            .block_on(store.collect_garbage(&retention, &pinned))
        {
            Ok(collected) => collected,
            Err(e) => {
                tracing::warn!(
                    "removing the checkpoints the retention policy keeps no longer failed: {e:#}"
                );
                Collected::default()
            }
        }
    }
}

/// The versions of the documents a round added, by id.
fn added_versions(changes: &RoundChanges) -> HashMap<&str, KnownVersion> {
    changes
        .documents_added
        .iter()
        .map(|d| {
            let known = KnownVersion::new(&d.content_hash, d.version, d.ingested_at);
            (d.doc_id.as_str(), known)
        })
        .collect()
}

/// The newest checkpoint's documents and ingestion errors, after rolling back
/// table versions written after it by a run that did not commit, and whether
/// its documents' states were built as `made_by` builds them.
pub(super) async fn previous_tables(
    store: &TableStore,
    made_by: &str,
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
    let restorable = !across && states_built_by(store, &checkpoint, made_by).await?;
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
/// as `made_by` builds.
async fn states_built_by(
    store: &TableStore,
    checkpoint: &CheckpointRow,
    made_by: &str,
) -> Result<bool, IndexError> {
    if checkpoint.version_of(Table::DocStates).is_none() {
        return Ok(false);
    }
    let mut same = true;
    store
        .scan_at(Table::DocStates, checkpoint, &["build"], |batch| {
            same &= strings(batch, "build")
                .is_some_and(|builds| builds.iter().all(|b| b == Some(made_by)));
        })
        .await?;
    Ok(same)
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
            records.extend((0..batch.num_rows()).map(|row| Record {
                doc_id: ids.value(row).to_string(),
                version: versions.value(row),
                content_hash: hashes.value(row).to_string(),
                source_uri: uris.value(row).to_string(),
                title: titles.value(row).to_string(),
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
    Ok(records)
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

/// The column `name` of `batch` as values of `T`, if it has one.
fn primitives<'b, T: ArrowPrimitiveType>(
    batch: &'b RecordBatch,
    name: &str,
) -> Option<&'b PrimitiveArray<T>> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<T>())
}

/// The values of the `UInt64` column `name` of `batch` (none if it has no
/// such column).
fn u64_column(batch: &RecordBatch, name: &str) -> Vec<Option<u64>> {
    primitives::<UInt64Type>(batch, name)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}
