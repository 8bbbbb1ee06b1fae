//! `memweave index`: discover the source, run the dataflow, write the tables, commit.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use memweave_operators::build::{BuildConfig, Document};
use memweave_operators::ingest::{self, IngestError, SourceFile};
use memweave_operators::model::MemoryModel;
use memweave_schemas::{
    DocumentRow, EmbeddingRow, EntityRow, ErrorRow, LlmCallRow, RelationRow, TableRow, TableStore,
    TableVersion, now_micros,
};

use crate::UsageError;
use crate::dataflow::{self, WorkerOutput};
use crate::progress::Progress;

/// Files each worker reads per input epoch: small enough that progress is smooth
/// and memory stays bounded, large enough that epochs are cheap.
const FILES_PER_EPOCH: usize = 8;

#[derive(Debug, Clone)]
pub struct IndexOptions {
    pub source: PathBuf,
    pub tables: String,
    pub storage_options: HashMap<String, String>,
    pub workers: usize,
    pub build: BuildConfig,
    /// Draw a progress bar when stderr is a terminal.
    pub interactive: bool,
}

/// What a run did, for the closing summary.
#[derive(Debug, Clone)]
pub struct IndexSummary {
    pub source: PathBuf,
    pub tables: String,
    pub epoch: u64,
    pub files: usize,
    pub documents: usize,
    /// Documents new or changed since the previous checkpoint.
    pub changed: usize,
    pub tokens: u64,
    pub segments: usize,
    pub tree_nodes: usize,
    pub roots: usize,
    pub tree_depth: u32,
    pub pages: usize,
    pub errors: Vec<ErrorRow>,
    pub wall: Duration,
}

pub fn run_index(
    options: &IndexOptions,
    model: Arc<dyn MemoryModel>,
) -> anyhow::Result<IndexSummary> {
    let started = Instant::now();
    options.build.validate().map_err(UsageError)?;
    // Canonical, so source URIs in the tables do not depend on how the path was typed.
    let source = std::fs::canonicalize(&options.source).map_err(|e| {
        let reason = if e.kind() == std::io::ErrorKind::NotFound {
            "does not exist".to_string()
        } else {
            e.to_string()
        };
        UsageError(format!("source {} {reason}", options.source.display()))
    })?;
    let store = TableStore::new(&options.tables, options.storage_options.clone())
        .map_err(|e| UsageError(e.to_string()))?;
    store
        .check_writable()
        .map_err(|e| UsageError(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let previous = runtime
        .block_on(previous_documents(&store))
        .with_context(|| format!("reading the previous checkpoint under {}", store.root()))?;

    let discovery =
        ingest::discover(&source).with_context(|| format!("listing {}", source.display()))?;
    let files = Arc::new(discovery.files);
    tracing::info!(source = %source.display(), files = files.len(), workers = options.workers, "indexing");
    let progress = Progress::new(files.len() as u64, options.interactive);
    let outputs = run_dataflow(options, model, &files, &previous, &progress)?;
    progress.finish();

    let mut errors: Vec<ErrorRow> = discovery.rejected.iter().map(error_row).collect();
    let mut merged = WorkerOutput::default();
    for (output, ingest_errors) in outputs {
        errors.extend(ingest_errors.iter().map(error_row));
        merge(&mut merged.documents, output.documents);
        merge(&mut merged.segments, output.segments);
        merge(&mut merged.tree_nodes, output.tree_nodes);
        merge(&mut merged.pages, output.pages);
        merge(&mut merged.errors, output.errors);
    }
    errors.extend(rows(merged.errors));
    errors.sort_by(|a, b| a.source.cmp(&b.source));
    for error in &errors {
        tracing::warn!(source = %error.source, kind = %error.kind, "{}", error.message);
    }

    let documents = rows(merged.documents);
    let segments = rows(merged.segments);
    let tree_nodes = rows(merged.tree_nodes);
    let pages = rows(merged.pages);
    let changed = documents
        .iter()
        .filter(|d| {
            previous
                .get(&d.doc_id)
                .is_none_or(|p| p.content_hash != d.content_hash)
        })
        .count();
    let source_positions = serde_json::json!({
        "source": source.display().to_string(),
        "files": files.len(),
    })
    .to_string();
    let epoch = runtime
        .block_on(async {
            let versions = vec![
                write_table(&store, &documents).await?,
                write_table(&store, &segments).await?,
                write_table(&store, &tree_nodes).await?,
                write_table(&store, &pages).await?,
                write_table::<EntityRow>(&store, &[]).await?,
                write_table::<RelationRow>(&store, &[]).await?,
                write_table::<EmbeddingRow>(&store, &[]).await?,
                write_table::<LlmCallRow>(&store, &[]).await?,
                write_table(&store, &errors).await?,
            ];
            let checkpoint = store.commit_checkpoint(source_positions, versions).await?;
            anyhow::Ok(checkpoint.epoch)
        })
        .with_context(|| format!("writing the tables under {}", store.root()))?;

    Ok(IndexSummary {
        source,
        tables: store.root().to_string(),
        epoch,
        files: files.len(),
        tokens: documents.iter().map(|d| d.n_tokens).sum(),
        documents: documents.len(),
        changed,
        segments: segments.len(),
        roots: tree_nodes.iter().filter(|n| n.parent_id.is_none()).count(),
        tree_depth: tree_nodes.iter().map(|n| n.level).max().unwrap_or(0),
        tree_nodes: tree_nodes.len(),
        pages: pages.len(),
        errors,
        wall: started.elapsed(),
    })
}

async fn write_table<R: TableRow>(store: &TableStore, rows: &[R]) -> anyhow::Result<TableVersion> {
    Ok(TableVersion {
        table: R::TABLE.name().to_string(),
        version: store.write_rows(rows).await?,
    })
}

/// The documents of the newest checkpoint, by id: an unchanged document keeps its
/// version and ingestion time, a changed one gets the next version.
async fn previous_documents(store: &TableStore) -> anyhow::Result<HashMap<String, DocumentRow>> {
    let Some(checkpoint) = store.latest_checkpoint().await? else {
        return Ok(HashMap::new());
    };
    let documents: Vec<DocumentRow> = store.read_at(&checkpoint).await?;
    Ok(documents
        .into_iter()
        .map(|d| (d.doc_id.clone(), d))
        .collect())
}

type WorkerResult = (WorkerOutput, Vec<IngestError>);

fn run_dataflow(
    options: &IndexOptions,
    model: Arc<dyn MemoryModel>,
    files: &Arc<Vec<SourceFile>>,
    previous: &HashMap<String, DocumentRow>,
    progress: &Arc<Progress>,
) -> anyhow::Result<Vec<WorkerResult>> {
    let files = Arc::clone(files);
    let previous = Arc::new(previous.clone());
    let progress = Arc::clone(progress);
    let config = options.build;
    let now = now_micros();
    let guards = timely::execute(
        timely::Config::process(options.workers.max(1)),
        move |worker| {
            let (mut input, probe, output) = dataflow::build(worker, &model, config);
            let (index, peers) = (worker.index(), worker.peers());
            let mine: Vec<&SourceFile> = files.iter().skip(index).step_by(peers).collect();
            let mut failures = Vec::new();
            for (epoch, batch) in mine.chunks(FILES_PER_EPOCH).enumerate() {
                let mut documents = 0;
                for file in batch {
                    for loaded in ingest::load(file) {
                        match loaded {
                            Ok(raw) => {
                                input.insert(versioned(raw, &previous, now));
                                documents += 1;
                            }
                            Err(error) => failures.push(error),
                        }
                    }
                }
                input.advance_to(epoch as u64 + 1);
                input.flush();
                worker.step_while(|| probe.less_than(input.time()));
                progress.advance(batch.len() as u64, documents);
            }
            input.close();
            while worker.step() {}
            let output = std::mem::take(&mut *output.borrow_mut());
            (output, failures)
        },
    )
    .map_err(|e| anyhow::anyhow!("starting the dataflow: {e}"))?;
    guards
        .join()
        .into_iter()
        .map(|r| r.map_err(|e| anyhow::anyhow!("a dataflow worker failed: {e}")))
        .collect()
}

fn versioned(
    raw: ingest::RawDocument,
    previous: &HashMap<String, DocumentRow>,
    now: i64,
) -> (Document, i64) {
    let mut doc = Document::new(raw, 1);
    match previous.get(&doc.doc_id) {
        Some(prev) if prev.content_hash == doc.content_hash => {
            doc.version = prev.version;
            (doc, prev.ingested_at)
        }
        Some(prev) => {
            doc.version = prev.version + 1;
            (doc, now)
        }
        None => (doc, now),
    }
}

fn merge<D: Eq + std::hash::Hash>(into: &mut HashMap<D, isize>, from: HashMap<D, isize>) {
    for (row, count) in from {
        *into.entry(row).or_insert(0) += count;
    }
}

/// The rows present in a collection (positive multiplicity), each once.
fn rows<D: Eq + std::hash::Hash>(counts: HashMap<D, isize>) -> Vec<D> {
    counts
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(row, _)| row)
        .collect()
}

fn error_row(error: &IngestError) -> ErrorRow {
    ErrorRow::new("ingest", &error.source, None, error.kind, &error.message)
}

/// Error counts by kind, in name order.
pub fn error_kinds(errors: &[ErrorRow]) -> BTreeMap<&str, usize> {
    let mut kinds = BTreeMap::new();
    for error in errors {
        *kinds.entry(error.kind.as_str()).or_insert(0) += 1;
    }
    kinds
}
