//! `memweave sql`: one query over the tables of a checkpoint, written as a
//! table, CSV, a JSON array of row objects, or Parquet.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::DataFrame;
use futures::StreamExt;
use parquet::arrow::ArrowWriter;
use parquet::errors::ParquetError;

use crate::catalog::Catalog;
use crate::export::writer_properties;

/// How `memweave sql` writes its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for a terminal.
    Table,
    /// CSV with a header row.
    Csv,
    /// A JSON array of row objects (nulls written as null).
    Json,
    /// A Parquet file (needs --output).
    Parquet,
}

/// Why a query gave no rows. The first three are the asker's to fix.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// DataFusion refused the query: its own message.
    #[error("{0}")]
    Refused(DataFusionError),
    /// DDL, DML, `COPY` or a statement such as `SET`.
    #[error("memweave sql runs queries only (SELECT, WITH, EXPLAIN): {0}")]
    NotAQuery(String),
    #[error("--format parquet writes a file: give --output FILE")]
    ParquetNeedsFile,
    #[error("--output {path}: {error}")]
    Output {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// Reading the tables failed.
    #[error("running the query: {0}")]
    Failed(DataFusionError),
    /// Writing the rows failed.
    #[error(transparent)]
    Rows(#[from] ArrowError),
    #[error(transparent)]
    Parquet(#[from] ParquetError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl SqlError {
    /// A mistake in what was asked, rather than a failure to carry it out.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SqlError::Refused(_)
                | SqlError::NotAQuery(_)
                | SqlError::ParquetNeedsFile
                | SqlError::Output { .. }
        )
    }
}

/// Plans `sql` against the catalog, refusing anything but a query: the
/// tables are read-only here, and so is the machine (no `COPY … TO`, no
/// `CREATE EXTERNAL TABLE` over a local file, no `SET`).
pub async fn plan(catalog: &Catalog, sql: &str) -> Result<DataFrame, SqlError> {
    let plan = catalog
        .context
        .state()
        .create_logical_plan(sql)
        .await
        .map_err(query_error)?;
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(&plan)
        .map_err(|refused| SqlError::NotAQuery(refused.strip_backtrace()))?;
    catalog
        .context
        .execute_logical_plan(plan)
        .await
        .map_err(query_error)
}

/// Runs `frame` and writes its rows as `format` to `output` (stdout without
/// one); returns how many rows were written.
pub async fn write(
    frame: DataFrame,
    format: Format,
    output: Option<&Path>,
) -> Result<u64, SqlError> {
    if format == Format::Parquet && output.is_none() {
        return Err(SqlError::ParquetNeedsFile);
    }
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let mut stream = frame.execute_stream().await.map_err(query_error)?;
    let sink: Box<dyn Write + Send> = match output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|error| SqlError::Output {
                path: path.to_path_buf(),
                error,
            })?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let mut writer = RowWriter::new(format, sink, schema)?;
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(query_error)?;
        rows += batch.num_rows() as u64;
        writer.write(batch)?;
    }
    writer.finish(rows)?;
    Ok(rows)
}

/// A query's error: refused, unless reading the tables failed.
fn query_error(error: DataFusionError) -> SqlError {
    match error {
        DataFusionError::IoError(_)
        | DataFusionError::ObjectStore(_)
        | DataFusionError::External(_) => SqlError::Failed(error),
        error => SqlError::Refused(error),
    }
}

enum RowWriter {
    /// Pretty-printing needs every row (column widths).
    Table(Box<dyn Write + Send>, SchemaRef, Vec<RecordBatch>),
    Csv(arrow::csv::Writer<Box<dyn Write + Send>>),
    Json(arrow::json::Writer<Box<dyn Write + Send>, arrow::json::writer::JsonArray>),
    Parquet(ArrowWriter<Box<dyn Write + Send>>),
}

impl RowWriter {
    fn new(
        format: Format,
        sink: Box<dyn Write + Send>,
        schema: SchemaRef,
    ) -> Result<Self, SqlError> {
        Ok(match format {
            Format::Table => RowWriter::Table(sink, schema, Vec::new()),
            Format::Csv => RowWriter::Csv(
                arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(sink),
            ),
            Format::Json => RowWriter::Json(
                arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build(sink),
            ),
            Format::Parquet => RowWriter::Parquet(ArrowWriter::try_new(
                sink,
                schema,
                Some(writer_properties(None)),
            )?),
        })
    }

    fn write(&mut self, batch: RecordBatch) -> Result<(), SqlError> {
        match self {
            RowWriter::Table(_, _, batches) => batches.push(batch),
            RowWriter::Csv(writer) => writer.write(&batch)?,
            RowWriter::Json(writer) => writer.write(&batch)?,
            RowWriter::Parquet(writer) => writer.write(&batch)?,
        }
        Ok(())
    }

    fn finish(self, rows: u64) -> Result<(), SqlError> {
        match self {
            RowWriter::Table(mut sink, schema, batches) => {
                let table =
                    arrow::util::pretty::pretty_format_batches_with_schema(schema, &batches)?;
                writeln!(sink, "{table}")?;
                writeln!(sink, "({rows} row{})", if rows == 1 { "" } else { "s" })?;
                sink.flush()?;
            }
            RowWriter::Csv(writer) => writer.into_inner().flush()?,
            RowWriter::Json(mut writer) => {
                writer.finish()?;
                let mut sink = writer.into_inner();
                writeln!(sink)?;
                sink.flush()?;
            }
            RowWriter::Parquet(writer) => {
                writer.close()?;
            }
        }
        Ok(())
    }
}
