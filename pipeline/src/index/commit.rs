//! A round's commit: the memory tables' staged rows and deletes, the model's
//! calls and their counts, then the checkpoint naming every table's version;
//! and, after it, what the retention policy keeps no longer.

use memweave_schemas::store::{Collected, Compaction, Retention};
use memweave_schemas::{CallStatRow, CheckpointRow, LlmCallRow, Table, TableVersion};

use super::engine::Engine;
use super::versions::DocumentVersions;
use crate::IndexError;
use crate::write::{RoundChanges, StagedPart};

/// A round to commit.
pub(super) struct RoundCommit<'a> {
    /// Whether its rows replace each table's (a process's first round, which
    /// built every document).
    pub(super) replace: bool,
    /// What the workers (and the round) staged.
    pub(super) parts: Vec<StagedPart>,
    pub(super) retention: Retention,
    /// Whether this process alone writes the call cache, and so may remove
    /// the calls of the texts the round superseded.
    pub(super) evicts: bool,
    /// Whether the memory has no checkpoint yet.
    pub(super) first: bool,
    /// The documents' versions before the round.
    pub(super) versions: &'a DocumentVersions,
    /// Where the memory's sources stand after it (the checkpoint's column).
    pub(super) positions: String,
}

/// Commits `round`: every memory table's staged rows and deletes (see
/// [`crate::write::RoundWriter::commit`]), the model's calls and their
/// counts, then a checkpoint naming every table's version and where the
/// memory's sources stand; returns it and what changed.
pub(super) async fn commit(
    engine: &Engine,
    round: RoundCommit<'_>,
) -> Result<(CheckpointRow, RoundChanges), IndexError> {
    let (store, cache) = (engine.store(), engine.cache());
    let compaction = round.retention.compaction();
    let previous = store.latest_checkpoint().await?;
    let (mut versions, changes) =
        (engine.commit_rows(round.replace, round.parts, compaction, previous.as_ref())).await?;
    let mut calls = cache.finish().await?;
    if calls.is_some() {
        // Appended a flush at a time, and compacted like the memory.
        if compaction == Compaction::Tiered && round.evicts {
            let superseded = round.versions.superseded(&changes, round.replace);
            let evicted = cache.evict_superseded(&superseded).await?;
            tracing::debug!(evicted, "calls of superseded texts removed from llm_calls");
        }
        let since =
            (previous.as_ref()).and_then(|checkpoint| checkpoint.version_of(Table::LlmCalls));
        calls = Some(store.compact(Table::LlmCalls, compaction, since).await?);
    }
    versions.push(TableVersion {
        table: Table::LlmCalls.name().to_string(),
        version: match calls {
            Some(version) => version,
            None => store.write_rows::<LlmCallRow>(&[]).await?,
        },
    });
    let epoch = previous.map_or(1, |checkpoint| checkpoint.epoch + 1);
    versions.push(write_call_stats(engine, compaction, epoch, round.first).await?);
    let checkpoint = store
        .commit_checkpoint(round.positions, versions, Some(engine.vectors().clone()))
        .await?;
    Ok((checkpoint, changes))
}

/// Appends what this round asked of the model, per stage and task, under
/// `epoch`, the one the round's checkpoint will have (process 0 alone
/// commits); the first commit under a root (`whole`) replaces what a crashed
/// run left.
async fn write_call_stats(
    engine: &Engine,
    compaction: Compaction,
    epoch: u64,
    whole: bool,
) -> Result<TableVersion, IndexError> {
    let store = engine.store();
    let rows: Vec<CallStatRow> = (engine.cache().take_stats().into_iter())
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
    if compaction == Compaction::Tiered {
        version = store.compact(Table::CallStats, compaction, None).await?;
    }
    Ok(TableVersion {
        table: Table::CallStats.name().to_string(),
        version,
    })
}

/// Removes what `retention` keeps no longer, but the checkpoint `pinned`
/// (the one the dataflow is still to be restored from). Without a policy
/// every checkpoint is kept, and what goes is the table versions none names:
/// a round's own steps (its appends before its compaction) and the call
/// cache's appends between rounds, with the files only they reference. A
/// first build of 60,000 short documents kept its 119 staged files of each
/// compacted table beside the one they became (10.2 bytes a byte of text,
/// 6.2 without). The round is committed whatever this does: a failure is
/// logged, and the next commit tries again.
pub(super) fn collect_garbage(
    engine: &Engine,
    retention: &Retention,
    pinned: Option<u64>,
) -> Collected {
    let pinned = pinned.into_iter().collect();
    match engine.block_on(engine.store().collect_garbage(retention, &pinned)) {
        Ok(collected) => collected,
        Err(e) => {
            tracing::warn!(
                "removing the checkpoints the retention policy keeps no longer failed: {e:#}"
            );
            Collected::default()
        }
    }
}
