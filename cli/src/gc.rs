//! `memweave gc`, and the retention flags `memweave index` shares with it.

use std::collections::BTreeSet;
use std::time::Duration;

use memweave_pipeline::UsageError;
use memweave_process::StorageArgs;
use memweave_schemas::TableStore;
use memweave_schemas::store::{Collected, Retention};

/// What a memory keeps of its history: checkpoints outside both bounds are
/// removed, with the table versions and data files only they need.
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionArgs {
    /// Keep the newest N checkpoints (time travel to them, `--version`,
    /// `?epoch=`); older ones are removed with what only they need.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    keep_checkpoints: Option<u64>,
    /// Keep the checkpoints younger than DURATION (7d, 12h, 30min). With
    /// --keep-checkpoints too, a checkpoint either bound keeps is kept.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    keep_for: Option<Duration>,
    /// Keep a checkpoint for DURATION after a newer one is committed, so
    /// that no query replica's is removed under it: at least its
    /// --refresh-secs plus its --request-timeout-secs (1 s and 120 s by
    /// default).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "3min")]
    serving_grace: Duration,
}

impl RetentionArgs {
    pub fn retention(&self) -> Retention {
        Retention {
            keep_checkpoints: self.keep_checkpoints.map(|n| n as usize),
            keep_for: self.keep_for,
            serving_grace: self.serving_grace,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Root of the memory tables: a path or an object-store URL.
    #[arg(long, env = "MEMWEAVE_TABLES")]
    tables: String,
    #[command(flatten)]
    retention: RetentionArgs,
    #[command(flatten)]
    storage: StorageArgs,
}

impl GcArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let retention = self.retention.retention();
        if !retention.removes() {
            return Err(UsageError(
                "say what to keep: --keep-checkpoints N and/or --keep-for DURATION".into(),
            )
            .into());
        }
        let store =
            TableStore::new(&self.tables, self.storage.into_map()).map_err(UsageError::of)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let collected = runtime.block_on(store.collect_garbage(&retention, &BTreeSet::new()))?;
        print_collected("memweave gc:", &collected);
        Ok(())
    }
}

/// One line: what a collection removed and kept.
#[allow(clippy::print_stdout)]
pub fn print_collected(label: &str, collected: &Collected) {
    let kept = match collected.kept {
        Some((oldest, newest)) => format!("keeps checkpoints {oldest} to {newest}"),
        None => "no checkpoint yet".to_string(),
    };
    let counted = |n: u64, noun: &str| match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    };
    println!(
        "{label} removed {}, {}, {:.1} MB; {kept}",
        counted(collected.checkpoints as u64, "checkpoint"),
        counted(collected.versions, "table version"),
        collected.bytes as f64 / 1e6
    );
}
