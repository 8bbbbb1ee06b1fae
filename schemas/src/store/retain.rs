//! Retention: which checkpoints a memory keeps, and removing the others with
//! the table versions (and the data files) that only they reference.
//!
//! Every round writes new versions of the tables it changed, and a version
//! keeps every data file it references, deleted rows' included: without
//! removal, a memory that follows a topic grows with its history, not with
//! its corpus. A checkpoint is kept while it is among the newest
//! `keep_checkpoints`, younger than `keep_for`, or pinned (a serving
//! replica's); a version is kept while a kept checkpoint names it, or when it
//! is newer than every checkpoint (a round being written, the model calls
//! saved since). The rows of removed checkpoints leave the `checkpoints`
//! table first, so that time travel to them says they are gone rather than
//! failing on a missing file.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use lance::dataset::cleanup::CleanupPolicyBuilder;

use super::{Compaction, Result, StoreError, TableStore};
use crate::Table;
use crate::rows::{CheckpointRow, now_micros};

/// What a memory keeps of its history. With neither bound, every
/// checkpoint (and the table versions they name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// The newest checkpoints kept whatever their age.
    pub keep_checkpoints: Option<usize>,
    /// Checkpoints younger than this are kept.
    pub keep_for: Option<Duration>,
    /// A checkpoint is kept for this long after a newer one is committed: a
    /// query replica serves the newest it has seen, loads a newer one every
    /// `--refresh-secs` and answers a request within its timeout, so the
    /// checkpoint it serves is never removed under it. Replicas write
    /// nothing (they hold no lease to read back): this bound is the pin.
    pub serving_grace: Duration,
}

impl Retention {
    /// Whether this removes anything at all.
    pub fn removes(&self) -> bool {
        self.keep_checkpoints.is_some() || self.keep_for.is_some()
    }

    /// How a commit under this policy compacts: by tiers when the history is
    /// removed, so what old versions alone reference goes with them.
    pub fn compaction(&self) -> Compaction {
        match self.removes() {
            true => Compaction::Tiered,
            false => Compaction::WhenFragmented,
        }
    }

    /// The epochs of `checkpoints` kept at `now` (microseconds), `pinned`
    /// ones, those a replica may still serve and the newest always among
    /// them.
    fn kept(
        &self,
        checkpoints: &[CheckpointRow],
        now: i64,
        pinned: &BTreeSet<u64>,
    ) -> BTreeSet<u64> {
        let mut epochs: Vec<&CheckpointRow> = checkpoints.iter().collect();
        epochs.sort_by_key(|c| std::cmp::Reverse(c.epoch));
        let newest = self.keep_checkpoints.unwrap_or(0).max(1);
        let young = |c: &CheckpointRow| {
            self.keep_for
                .is_some_and(|age| now.saturating_sub(c.created_at) < age.as_micros() as i64)
        };
        // Newest until its successor was made: a replica may serve it until
        // the grace after.
        let served = |rank: usize| {
            rank.checked_sub(1).is_some_and(|successor| {
                let superseded = epochs[successor].created_at;
                now.saturating_sub(superseded) < self.serving_grace.as_micros() as i64
            })
        };
        let bounded = self.removes();
        epochs
            .iter()
            .enumerate()
            .filter(|(rank, c)| {
                !bounded || *rank < newest || young(c) || served(*rank) || pinned.contains(&c.epoch)
            })
            .map(|(_, c)| c.epoch)
            .collect()
    }
}

/// What a collection removed and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Checkpoints removed.
    pub checkpoints: usize,
    /// Table versions removed, over every table.
    pub versions: u64,
    /// Bytes of the files removed (manifests, data, deletions, indexes).
    pub bytes: u64,
    /// The oldest and newest checkpoints kept.
    pub kept: Option<(u64, u64)>,
}

impl TableStore {
    /// Removes what `retention` does not keep (and no `pinned` epoch needs):
    /// the checkpoints, then every table's versions no kept checkpoint
    /// names, older than the newest one's.
    pub async fn collect_garbage(
        &self,
        retention: &Retention,
        pinned: &BTreeSet<u64>,
    ) -> Result<Collected> {
        let checkpoints: Vec<CheckpointRow> = self.read_rows(None).await?;
        let kept = retention.kept(&checkpoints, now_micros(), pinned);
        let (Some(&oldest), Some(&newest)) = (kept.first(), kept.last()) else {
            return Ok(Collected::default());
        };
        let mut collected = Collected {
            kept: Some((oldest, newest)),
            ..Collected::default()
        };
        let removed: Vec<u64> = checkpoints
            .iter()
            .map(|c| c.epoch)
            .filter(|epoch| !kept.contains(epoch))
            .collect();
        if !removed.is_empty() {
            let mut table =
                self.dataset(Table::Checkpoints, None)
                    .await?
                    .ok_or(StoreError::MissingTable {
                        epoch: newest,
                        table: Table::Checkpoints,
                    })?;
            let epochs: Vec<String> = removed.iter().map(u64::to_string).collect();
            table
                .delete(&format!("epoch IN ({})", epochs.join(", ")))
                .await
                .map_err(|e| self.lance_error(Table::Checkpoints, e))?;
            collected.checkpoints = removed.len();
        }
        let kept: Vec<&CheckpointRow> = checkpoints
            .iter()
            .filter(|c| kept.contains(&c.epoch))
            .collect();
        let newest = kept
            .iter()
            .max_by_key(|c| c.epoch)
            .expect("the newest checkpoint is kept");
        for table in Table::ALL.iter().copied() {
            // The checkpoints table's newest version holds every row kept.
            let before = match table {
                Table::Checkpoints => None,
                _ => match newest.version_of(table) {
                    Some(version) => Some(version),
                    None => continue,
                },
            };
            let named: HashSet<u64> = kept.iter().filter_map(|c| c.version_of(table)).collect();
            let (versions, bytes) = self.remove_versions(table, before, &named).await?;
            collected.versions += versions;
            collected.bytes += bytes;
        }
        Ok(collected)
    }

    /// Removes the versions of `table` older than `before` (all but the
    /// newest, without it) that are not `named`; returns how many, and the
    /// bytes their files held.
    async fn remove_versions(
        &self,
        table: Table,
        before: Option<u64>,
        named: &HashSet<u64>,
    ) -> Result<(u64, u64)> {
        let Some(dataset) = self.dataset(table, None).await? else {
            return Ok((0, 0));
        };
        let latest = dataset.version().version;
        let before = before.unwrap_or(latest);
        let versions = dataset
            .versions()
            .await
            .map_err(|e| self.lance_error(table, e))?;
        let removed: Vec<u64> = versions
            .iter()
            .map(|v| v.version)
            .filter(|v| *v < before && *v != latest && !named.contains(v))
            .collect();
        if removed.is_empty() {
            return Ok((0, 0));
        }
        let policy = CleanupPolicyBuilder::default()
            .versions(removed)
            .map_err(|e| self.lance_error(table, e))?
            .error_if_tagged_old_versions(false)
            .build();
        let stats = dataset
            .cleanup_with_policy(policy)
            .await
            .map_err(|e| self.lance_error(table, e))?;
        Ok((stats.old_versions, stats.bytes_removed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(epoch: u64, created_at: i64) -> CheckpointRow {
        CheckpointRow {
            epoch,
            created_at,
            source_positions: "{}".into(),
            table_versions: Vec::new(),
            vector_model: None,
            vector_segment_tokens: None,
        }
    }

    /// Bytes of the files under `dir`.
    fn bytes_under(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                match entry.file_type().unwrap().is_dir() {
                    true => bytes_under(&entry.path()),
                    false => entry.metadata().unwrap().len(),
                }
            })
            .sum()
    }

    /// Six rounds, each replacing the errors table: keeping two checkpoints
    /// removes the others, the versions only they named and their files;
    /// the kept ones read as they were written.
    #[tokio::test]
    async fn removed_checkpoints_take_their_versions_and_files_and_kept_ones_still_read() {
        use crate::rows::{ErrorRow, TableVersion};
        let dir = tempfile::tempdir().unwrap();
        let store = TableStore::local(dir.path()).unwrap();
        let mut written = Vec::new();
        for round in 1..=6 {
            let rows = vec![ErrorRow::new(
                "ingest",
                &format!("file-{round}.txt"),
                None,
                "empty",
                &"a long message ".repeat(200),
            )];
            let version = store.write_rows(&rows).await.unwrap();
            let table = Table::Errors.name().to_string();
            let versions = vec![TableVersion { table, version }];
            let checkpoint = store
                .commit_checkpoint("{}".into(), versions, None)
                .await
                .unwrap();
            written.push((checkpoint, rows));
        }
        let errors_dir = dir.path().join("errors.lance");
        let before = bytes_under(&errors_dir);
        let retention = Retention {
            keep_checkpoints: Some(2),
            ..Retention::default()
        };
        let collected = store
            .collect_garbage(&retention, &BTreeSet::from([2]))
            .await
            .unwrap();
        assert_eq!(collected.checkpoints, 3, "{collected:?}");
        assert_eq!(collected.kept, Some((2, 6)));
        assert!(
            collected.versions >= 3 && collected.bytes > 0,
            "{collected:?}"
        );
        let after = bytes_under(&errors_dir);
        assert!(after < before, "{after} bytes, {before} before");

        let left: Vec<CheckpointRow> = store.read_rows(None).await.unwrap();
        let mut epochs: Vec<u64> = left.iter().map(|c| c.epoch).collect();
        epochs.sort();
        assert_eq!(epochs, [2, 5, 6]);
        for (checkpoint, rows) in &written {
            if epochs.contains(&checkpoint.epoch) {
                let read: Vec<ErrorRow> = store.read_at(checkpoint).await.unwrap();
                assert_eq!(&read, rows, "epoch {}", checkpoint.epoch);
            } else {
                let version = checkpoint.version_of(Table::Errors);
                assert!(
                    matches!(
                        store.dataset(Table::Errors, version).await,
                        Ok(None) | Err(_)
                    ),
                    "epoch {} is gone",
                    checkpoint.epoch
                );
            }
        }
        // Nothing more to remove; the next commit's epoch follows the newest.
        let again = store
            .collect_garbage(&retention, &BTreeSet::new())
            .await
            .unwrap();
        assert_eq!((again.checkpoints, again.kept), (1, Some((5, 6))));
        let next = store
            .commit_checkpoint("{}".into(), Vec::new(), None)
            .await
            .unwrap();
        assert_eq!(next.epoch, 7);
    }

    #[test]
    fn a_checkpoint_is_kept_while_newest_young_pinned_or_still_served() {
        const SECOND: i64 = 1_000_000;
        let now = 100 * SECOND;
        // Epoch e was made e seconds after the start.
        let checkpoints: Vec<CheckpointRow> =
            (1..=10).map(|e| checkpoint(e, e as i64 * SECOND)).collect();
        let kept = |retention: Retention, pinned: &[u64]| {
            let pinned = pinned.iter().copied().collect();
            Vec::from_iter(retention.kept(&checkpoints, now, &pinned))
        };
        assert_eq!(kept(Retention::default(), &[]), Vec::from_iter(1..=10));
        let newest_three = Retention {
            keep_checkpoints: Some(3),
            ..Retention::default()
        };
        assert_eq!(kept(newest_three, &[]), [8, 9, 10]);
        assert_eq!(kept(newest_three, &[2]), [2, 8, 9, 10]);
        // Younger than 93.5 s: made after 6.5 s.
        let young = Retention {
            keep_for: Some(Duration::from_millis(93_500)),
            ..Retention::default()
        };
        assert_eq!(kept(young, &[]), [7, 8, 9, 10]);
        // Either bound keeps; the newest is kept even when old.
        let both = Retention {
            keep_checkpoints: Some(1),
            keep_for: Some(Duration::from_secs(1)),
            ..Retention::default()
        };
        assert_eq!(kept(both, &[]), [10]);
        assert_eq!(
            kept(
                Retention {
                    keep_checkpoints: Some(5),
                    ..young
                },
                &[]
            ),
            [6, 7, 8, 9, 10]
        );
        // At 10.5 s, epoch 9 was superseded 0.5 s ago (by 10) and 8 1.5 s
        // ago: a 2-second grace keeps both; at 12 s, neither.
        let served = Retention {
            keep_checkpoints: Some(1),
            serving_grace: Duration::from_secs(2),
            ..Retention::default()
        };
        let pinned = BTreeSet::new();
        let at = |now: i64| Vec::from_iter(served.kept(&checkpoints, now, &pinned));
        assert_eq!(at(10 * SECOND + SECOND / 2), [8, 9, 10]);
        assert_eq!(at(12 * SECOND), [10]);
    }
}
