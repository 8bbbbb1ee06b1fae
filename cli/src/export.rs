//! `memweave export`: one checkpoint's tables as Parquet files, anywhere.

use memweave_analytics::export::{self, ExportSummary};
use memweave_pipeline::source::{SourceOptions, object_store_at};
use memweave_process::{StorageArgs, parse_key_value};

use crate::tables::with_catalog;

/// The formats `memweave export` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ExportFormat {
    Parquet,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Root of the memory tables.
    #[arg(long, env = "MEMWEAVE_TABLES")]
    tables: String,
    /// Where to write the files.
    #[arg(long, value_name = "URL")]
    to: String,
    #[arg(long, value_enum, default_value = "parquet")]
    format: ExportFormat,
    /// Export checkpoint EPOCH rather than the newest.
    #[arg(long, value_name = "EPOCH")]
    version: Option<u64>,
    /// Endpoint of an S3-compatible server for an s3:// URL (http:// allowed).
    #[arg(long, env = "MEMWEAVE_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// Object-store setting KEY=VALUE for URL; repeatable.
    #[arg(long = "to-option", value_parser = parse_key_value)]
    to_options: Vec<(String, String)>,
    #[command(flatten)]
    storage: StorageArgs,
}

impl ExportArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let ExportArgs {
            tables,
            to,
            format: ExportFormat::Parquet,
            version,
            s3_endpoint,
            to_options,
            storage,
        } = self;
        with_catalog(&tables, storage, version, |catalog| async move {
            let options = SourceOptions {
                s3_endpoint,
                options: to_options,
                ..SourceOptions::default()
            };
            let (store, prefix) = object_store_at("--to", &to, &options, true)?;
            let summary = export::export(&catalog, store, prefix, &to).await?;
            print_export(&summary);
            Ok(())
        })
    }
}

#[allow(clippy::print_stdout)]
fn print_export(summary: &ExportSummary) {
    println!("memweave export: checkpoint {}", summary.epoch);
    for (file, rows) in &summary.files {
        println!("  {rows:>9} rows  {file}");
    }
}
