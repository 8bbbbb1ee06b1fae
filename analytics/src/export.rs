//! `memweave export`: every table of one checkpoint as a Parquet file,
//! `URL/TABLE.parquet`, on any object store (or a local folder).

use std::sync::Arc;

use datafusion::error::DataFusionError;
use futures::StreamExt;
use memweave_schemas::Table;
use object_store::ObjectStore;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::catalog::Catalog;

/// Row groups close at this many bytes (Spark's and Hive's block size), so
/// readers can split the big text tables without a group per handful of rows.
const ROW_GROUP_BYTES: usize = 128 << 20;

/// Parquet settings of every file memweave writes, with `metadata`.
pub fn writer_properties(metadata: Option<Vec<KeyValue>>) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_key_value_metadata(metadata)
        .build()
}

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading a table failed.
    #[error(transparent)]
    Read(#[from] DataFusionError),
    #[error("writing {file}: {error}")]
    Write { file: String, error: ParquetError },
}

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct ExportSummary {
    pub epoch: u64,
    /// Each table's file and row count.
    pub files: Vec<(String, u64)>,
}

/// Writes each table of the catalog's checkpoint to `prefix`/`TABLE.parquet`
/// in `store`, which `to` names (in messages and the summary). The files
/// carry the checkpoint's epoch and the table's version as key-value metadata
/// (`memweave.epoch`, `memweave.version`).
pub async fn export(
    catalog: &Catalog,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    to: &str,
) -> Result<ExportSummary, ExportError> {
    let epoch = catalog.checkpoint.epoch;
    let mut files = Vec::new();
    for &table in Table::ALL {
        let name = table.name();
        let file = format!("{}/{name}.parquet", to.trim_end_matches('/'));
        let writing = |error| ExportError::Write {
            file: file.clone(),
            error,
        };
        let frame = catalog.context.table(name).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let mut metadata = vec![KeyValue::new("memweave.epoch".into(), epoch.to_string())];
        if let Some(version) = catalog.checkpoint.version_of(table) {
            metadata.push(KeyValue::new(
                "memweave.version".into(),
                version.to_string(),
            ));
        }
        let properties = writer_properties(Some(metadata));
        let path = prefix.clone().join(format!("{name}.parquet"));
        // Multipart upload as the row groups come (a local file on file stores).
        let object = BufWriter::new(store.clone(), path);
        let mut writer =
            AsyncArrowWriter::try_new(object, schema, Some(properties)).map_err(writing)?;
        let mut stream = frame.execute_stream().await?;
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            rows += batch.num_rows() as u64;
            writer.write(&batch).await.map_err(writing)?;
        }
        writer.close().await.map_err(writing)?;
        tracing::info!(table = name, rows, "exported");
        files.push((file, rows));
    }
    Ok(ExportSummary { epoch, files })
}
