//! `memweave report`: what a memory holds and what it cost.

use std::path::PathBuf;

use memweave_analytics::{html, report};
use memweave_pipeline::UsageError;
use memweave_process::StorageArgs;

use crate::tables::with_catalog;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Root of the memory tables.
    #[arg(long, env = "MEMWEAVE_TABLES")]
    tables: String,
    /// Report on checkpoint EPOCH rather than the newest.
    #[arg(long, value_name = "EPOCH")]
    version: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the report as a self-contained HTML page with charts.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    storage: StorageArgs,
}

impl ReportArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let ReportArgs {
            tables,
            version,
            json,
            html,
            storage,
        } = self;
        with_catalog(&tables, storage, version, |catalog| async move {
            let report = report::report(&catalog).await?;
            if let Some(file) = &html {
                std::fs::write(file, html::html(&report))
                    .map_err(|e| UsageError(format!("--html {}: {e}", file.display())))?;
                tracing::info!(file = %file.display(), "wrote the HTML report");
            }
            print_report(&report, json)
        })
    }
}

/// Prints the report; a closed stdout (`| head`) ends it quietly.
fn print_report(report: &report::Report, json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let text = if json {
        // Through a JSON value: its members in name order, as the SQL's rows were.
        format!("{:#}\n", serde_json::to_value(report)?)
    } else {
        report::text(report)
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}
