//! `memweave sql`: a SQL query over one checkpoint's tables.

use std::path::PathBuf;

use memweave_analytics::sql::{self, Format as SqlFormat, SqlError};
use memweave_pipeline::UsageError;
use memweave_process::StorageArgs;

use crate::tables::with_catalog;

#[derive(clap::Args)]
pub struct SqlArgs {
    /// The query.
    query: String,
    /// Root of the memory tables.
    #[arg(long, env = "MEMWEAVE_TABLES")]
    tables: String,
    /// Query the tables as checkpoint EPOCH committed them (time travel).
    #[arg(long, value_name = "EPOCH")]
    version: Option<u64>,
    #[arg(long, value_enum, default_value = "table")]
    format: SqlFormat,
    /// Write the rows to FILE rather than stdout (required for parquet).
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    storage: StorageArgs,
}

impl SqlArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let SqlArgs {
            query,
            tables,
            version,
            format,
            output,
            storage,
        } = self;
        with_catalog(&tables, storage, version, |catalog| async move {
            let frame = sql::plan(&catalog, &query).await.map_err(sql_error)?;
            let rows = sql::write(frame, format, output.as_deref())
                .await
                .map_err(sql_error)?;
            if let Some(output) = &output {
                tracing::info!(rows, file = %output.display(), "wrote the query's rows");
            }
            Ok(())
        })
    }
}

/// A mistake in the query is the asker's (exit code 2).
fn sql_error(error: SqlError) -> anyhow::Error {
    if error.is_usage() {
        UsageError::of(error).into()
    } else {
        error.into()
    }
}
