//! `memweave report`: what a memory holds and what it cost, from the tables
//! alone. Every number but the storage section's is the result of one of
//! [`QUERIES`], run over the checkpoint's tables, so anyone can check (or
//! extend) it with `memweave sql`; the bytes each table holds come from
//! listing its files in the object store.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use memweave_schemas::store::StoredBytes;
use memweave_schemas::{StoreError, Table, TableStore};

use crate::catalog::Catalog;

/// Each section of the report and the SQL that defines it. Sections whose
/// name is in [`SINGLE_ROW`] are one row; the others are lists.
pub const QUERIES: [(&str, &str); 12] = [
    (
        "overview",
        "SELECT count(*) AS documents, coalesce(sum(n_tokens), 0) AS tokens, \
                coalesce(sum(octet_length(text)), 0) AS text_bytes FROM documents",
    ),
    (
        "density",
        "SELECT CASE WHEN t.tokens = 0 THEN NULL ELSE e.n * 1000.0 / t.tokens END AS entities_per_1k_tokens, \
                CASE WHEN t.tokens = 0 THEN NULL ELSE r.n * 1000.0 / t.tokens END AS relations_per_1k_tokens \
         FROM (SELECT count(*) AS n FROM entities) e, (SELECT count(*) AS n FROM relations) r, \
              (SELECT coalesce(sum(n_tokens), 0) AS tokens FROM documents) t",
    ),
    (
        "gists",
        "SELECT coalesce(sum(regexp_count(text, '\\S+')), 0) AS page_words, \
                coalesce(sum(regexp_count(gist, '\\S+')), 0) AS gist_words, \
                100.0 * (1.0 - CAST(sum(regexp_count(gist, '\\S+')) AS DOUBLE) \
                               / CAST(sum(regexp_count(text, '\\S+')) AS DOUBLE)) AS compression_rate \
         FROM (SELECT text, coalesce(gist, text) AS gist \
               FROM (SELECT substr(d.text, CAST(p.start_char AS BIGINT) + 1, \
                                   CAST(p.end_char - p.start_char AS BIGINT)) AS text, p.gist \
                     FROM pages p JOIN documents d ON p.doc_id = d.doc_id))",
    ),
    (
        "rows",
        "SELECT * FROM (SELECT 'documents' AS \"table\", count(*) AS rows FROM documents \
         UNION ALL SELECT 'segments', count(*) FROM segments \
         UNION ALL SELECT 'tree_nodes', count(*) FROM tree_nodes \
         UNION ALL SELECT 'pages', count(*) FROM pages \
         UNION ALL SELECT 'entities', count(*) FROM entities \
         UNION ALL SELECT 'relations', count(*) FROM relations \
         UNION ALL SELECT 'embeddings', count(*) FROM embeddings \
         UNION ALL SELECT 'llm_calls', count(*) FROM llm_calls \
         UNION ALL SELECT 'call_stats', count(*) FROM call_stats \
         UNION ALL SELECT 'errors', count(*) FROM errors \
         UNION ALL SELECT 'checkpoints', count(*) FROM checkpoints) ORDER BY \"table\"",
    ),
    (
        "cost",
        "SELECT c.calls, c.tokens_in, c.tokens_out, \
                CASE WHEN t.corpus = 0 THEN NULL ELSE (c.tokens_in + c.tokens_out) * 1.0 / t.corpus END \
                    AS tokens_per_corpus_token, \
                CASE WHEN t.corpus = 0 THEN NULL ELSE c.calls * 1000.0 / t.corpus END AS calls_per_1k_tokens \
         FROM (SELECT count(*) AS calls, coalesce(sum(CAST(tokens_in AS BIGINT)), 0) AS tokens_in, \
                      coalesce(sum(CAST(tokens_out AS BIGINT)), 0) AS tokens_out FROM llm_calls) c, \
              (SELECT coalesce(sum(n_tokens), 0) AS corpus FROM documents) t",
    ),
    ("calls_by_task", CALLS_BY_TASK),
    ("calls_by_memory", CALLS_BY_MEMORY),
    (
        "expensive_documents",
        "SELECT c.doc_id, d.title, count(*) AS calls, \
                sum(CAST(c.tokens_in AS BIGINT) + CAST(c.tokens_out AS BIGINT)) AS tokens \
         FROM llm_calls c LEFT JOIN documents d ON d.doc_id = c.doc_id \
         WHERE c.doc_id IS NOT NULL GROUP BY c.doc_id, d.title \
         ORDER BY tokens DESC, c.doc_id LIMIT 10",
    ),
    (
        "errors",
        "SELECT stage, kind, count(*) AS errors FROM errors \
         GROUP BY stage, kind ORDER BY errors DESC, stage, kind",
    ),
    (
        "trees",
        "SELECT tree, count(*) AS nodes, count(*) FILTER (WHERE parent_id IS NULL) AS roots, \
                max(level) AS max_depth, \
                avg(cardinality(child_ids)) FILTER (WHERE cardinality(child_ids) > 0) AS mean_fanout, \
                max(cardinality(child_ids)) AS max_fanout \
         FROM tree_nodes GROUP BY tree ORDER BY tree",
    ),
    (
        "tree_depths",
        "SELECT tree, level AS depth, count(*) AS trees FROM tree_nodes \
         WHERE parent_id IS NULL GROUP BY tree, level ORDER BY tree, depth",
    ),
    (
        "calls_over_time",
        "SELECT date_trunc('minute', created_at) AS minute, count(*) AS calls, \
                sum(CAST(tokens_in AS BIGINT) + CAST(tokens_out AS BIGINT)) AS tokens \
         FROM llm_calls GROUP BY 1 ORDER BY 1",
    ),
];

/// Sections that are one row (an object in the JSON, not a list).
const SINGLE_ROW: [&str; 4] = ["overview", "density", "gists", "cost"];

/// Calls paid for (`llm_calls`, every run) and answered from the cache
/// (`call_stats`), grouped by `$column` of both tables and named `$name`, and
/// what was paid per token of the documents the tables hold now (calls of every
/// run, over today's corpus: the memory's whole cost, edits included).
macro_rules! calls_by {
    ($column:literal, $name:literal) => {
        concat!(
            "WITH paid AS (SELECT ", $column, ", count(*) AS calls, \
                sum(CAST(tokens_in AS BIGINT)) AS tokens_in, sum(CAST(tokens_out AS BIGINT)) AS tokens_out \
                FROM llm_calls GROUP BY ", $column, "), \
             hits AS (SELECT ", $column, ", sum(cache_hits) AS cache_hits FROM call_stats GROUP BY ", $column, ") \
             SELECT coalesce(paid.", $column, ", hits.", $column, ") AS ", $name, ", coalesce(paid.calls, 0) AS calls, \
                    coalesce(paid.tokens_in, 0) AS tokens_in, coalesce(paid.tokens_out, 0) AS tokens_out, \
                    coalesce(hits.cache_hits, 0) AS cache_hits, \
                    CASE WHEN t.corpus = 0 THEN NULL \
                         ELSE (coalesce(paid.tokens_in, 0) + coalesce(paid.tokens_out, 0)) * 1.0 / t.corpus END \
                        AS tokens_per_corpus_token, \
                    CASE WHEN t.corpus = 0 THEN NULL ELSE coalesce(paid.calls, 0) * 1000.0 / t.corpus END \
                        AS calls_per_1k_tokens \
             FROM paid FULL OUTER JOIN hits ON paid.", $column, " = hits.", $column, " \
                  CROSS JOIN (SELECT coalesce(sum(n_tokens), 0) AS corpus FROM documents) t \
             ORDER BY tokens_in + tokens_out DESC, ", $name
        )
    };
}

/// Per pipeline task.
const CALLS_BY_TASK: &str = calls_by!("task", "task");

/// Per memory kind (the `stage` a call was made for).
const CALLS_BY_MEMORY: &str = calls_by!("stage", "memory");

/// The report: one field per section of [`QUERIES`], each read from its
/// query's rows (a single-row section is that row). Serialised, it is what
/// `memweave report --json` prints: the sections, `tables`, `epoch` and
/// `queries` (each section's SQL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The tables' root.
    pub tables: String,
    /// The checkpoint the numbers describe.
    pub epoch: u64,
    pub overview: Overview,
    pub density: Density,
    pub gists: Gists,
    pub rows: Vec<TableRows>,
    pub cost: Cost,
    pub calls_by_task: Vec<TaskCalls>,
    pub calls_by_memory: Vec<MemoryCalls>,
    pub expensive_documents: Vec<DocumentCost>,
    pub errors: Vec<ErrorCount>,
    pub trees: Vec<TreeShape>,
    pub tree_depths: Vec<TreeDepth>,
    pub calls_over_time: Vec<MinuteCalls>,
    /// Bytes each table holds in storage, largest first.
    pub storage: Vec<TableStorage>,
    pub queries: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub documents: u64,
    pub tokens: u64,
    /// Bytes of the documents' text (UTF-8).
    pub text_bytes: u64,
}

/// What one table's files hold in storage, of every version the retention
/// policy keeps, and that over the bytes of the documents' text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableStorage {
    pub table: String,
    #[serde(flatten)]
    pub bytes: StoredBytes,
    pub total: u64,
    pub per_text_byte: Option<f64>,
}

/// The graph's size per 1,000 tokens (none for an empty corpus).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Density {
    pub entities_per_1k_tokens: Option<f64>,
    pub relations_per_1k_tokens: Option<f64>,
}

/// ReadAgent's gists against their pages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gists {
    pub page_words: u64,
    pub gist_words: u64,
    /// Percent of the pages' words the gists leave out (none without pages).
    pub compression_rate: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRows {
    pub table: String,
    pub rows: u64,
}

/// Every model call the tables record, against the corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub calls: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub tokens_per_corpus_token: Option<f64>,
    pub calls_per_1k_tokens: Option<f64>,
}

/// Calls paid for and answered from the cache, for one task or memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calls {
    pub calls: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cache_hits: u64,
    pub tokens_per_corpus_token: Option<f64>,
    pub calls_per_1k_tokens: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCalls {
    pub task: String,
    #[serde(flatten)]
    pub calls: Calls,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryCalls {
    pub memory: String,
    #[serde(flatten)]
    pub calls: Calls,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentCost {
    pub doc_id: String,
    /// None once the document is deleted (its calls stay in the ledger).
    pub title: Option<String>,
    pub calls: u64,
    pub tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorCount {
    pub stage: String,
    pub kind: String,
    pub errors: u64,
}

/// The shape of one kind of tree, over every tree of that kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeShape {
    pub tree: String,
    pub nodes: u64,
    pub roots: u64,
    pub max_depth: u64,
    /// Mean children of a parent node (none where every node is a leaf).
    pub mean_fanout: Option<f64>,
    pub max_fanout: u64,
}

/// How many trees of a kind have their root at `depth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeDepth {
    pub tree: String,
    pub depth: u64,
    pub trees: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinuteCalls {
    /// The minute's start, as the SQL writes a timestamp.
    pub minute: String,
    pub calls: u64,
    pub tokens: u64,
}

/// Why the report could not be made: which section's query failed, and how.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("the report's {section} query: {error}")]
    Query {
        section: &'static str,
        error: DataFusionError,
    },
    #[error("the report's {section} query: {error}")]
    Rows {
        section: &'static str,
        error: ArrowError,
    },
    /// The rows do not read as the report's sections (a column renamed,
    /// a type changed).
    #[error("the report's sections: {0}")]
    Shape(serde_json::Error),
    /// Listing a table's files failed.
    #[error("the report's storage section: {0}")]
    Storage(StoreError),
}

impl Report {
    /// The calls per task and per memory, each row as what it is for and
    /// its calls.
    pub fn calls_per(&self) -> CallsPer<'_> {
        CallsPer {
            task: self
                .calls_by_task
                .iter()
                .map(|c| (c.task.as_str(), &c.calls))
                .collect(),
            memory: self
                .calls_by_memory
                .iter()
                .map(|c| (c.memory.as_str(), &c.calls))
                .collect(),
        }
    }
}

/// [`Report::calls_per`]: the two groupings of the calls, named rows.
#[derive(Debug)]
pub struct CallsPer<'r> {
    pub task: Vec<(&'r str, &'r Calls)>,
    pub memory: Vec<(&'r str, &'r Calls)>,
}

/// Runs every query into the report.
pub async fn report(catalog: &Catalog) -> Result<Report, ReportError> {
    let mut out = Map::new();
    out.insert("tables".into(), catalog.store().root().into());
    out.insert("epoch".into(), catalog.checkpoint.epoch.into());
    for (name, sql) in QUERIES {
        let rows = rows_of(catalog, name, sql).await?;
        let section = if SINGLE_ROW.contains(&name) {
            rows.into_iter().next().unwrap_or(Value::Null)
        } else {
            Value::Array(rows)
        };
        out.insert(name.into(), section);
    }
    let text_bytes = (out.get("overview"))
        .and_then(|overview| overview["text_bytes"].as_u64())
        .unwrap_or(0);
    // A table's bytes are every reader's: none of a reader's own to show.
    let storage = match catalog.is_restricted() {
        true => Vec::new(),
        false => storage(catalog.store(), text_bytes).await?,
    };
    out.insert(
        "storage".into(),
        serde_json::to_value(storage).map_err(ReportError::Shape)?,
    );
    let queries: Map<String, Value> = QUERIES
        .iter()
        .map(|(name, sql)| ((*name).to_string(), (*sql).into()))
        .collect();
    out.insert("queries".into(), Value::Object(queries));
    serde_json::from_value(Value::Object(out)).map_err(ReportError::Shape)
}

/// The bytes each table holds in storage, largest first.
async fn storage(store: &TableStore, text_bytes: u64) -> Result<Vec<TableStorage>, ReportError> {
    let mut tables = Vec::new();
    for &table in Table::ALL {
        let Some(bytes) = store
            .stored_bytes(table)
            .await
            .map_err(ReportError::Storage)?
        else {
            continue;
        };
        tables.push(TableStorage {
            table: table.name().to_string(),
            total: bytes.total(),
            per_text_byte: per_byte_of_text(bytes.total(), text_bytes),
            bytes,
        });
    }
    tables.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.table.cmp(&b.table)));
    Ok(tables)
}

/// `bytes` over the bytes of the documents' text (none without text).
fn per_byte_of_text(bytes: u64, text_bytes: u64) -> Option<f64> {
    (text_bytes > 0).then(|| bytes as f64 / text_bytes as f64)
}

/// A query's rows as JSON objects (as `memweave sql --format json` writes them).
async fn rows_of(
    catalog: &Catalog,
    section: &'static str,
    sql: &str,
) -> Result<Vec<Value>, ReportError> {
    let query = |error| ReportError::Query { section, error };
    let rows = |error| ReportError::Rows { section, error };
    let batches = catalog
        .context
        .sql(sql)
        .await
        .map_err(query)?
        .collect()
        .await
        .map_err(query)?;
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::JsonArray>(Vec::new());
    for batch in &batches {
        writer.write(batch).map_err(rows)?;
    }
    writer.finish().map_err(rows)?;
    serde_json::from_slice(&writer.into_inner()).map_err(ReportError::Shape)
}

/// The report as one screen of text.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let o = &report.overview;
    let _ = writeln!(
        out,
        "memweave report: {} (checkpoint {})",
        report.tables, report.epoch
    );
    let _ = writeln!(out, "  documents   {} ({} tokens)", o.documents, o.tokens);
    let rows: Vec<String> = report
        .rows
        .iter()
        .map(|r| format!("{} {}", r.table, r.rows))
        .collect();
    let _ = writeln!(out, "  rows        {}", rows.join(", "));
    let d = &report.density;
    let _ = writeln!(
        out,
        "  graph       {} entities and {} relations per 1,000 tokens",
        decimal(d.entities_per_1k_tokens),
        decimal(d.relations_per_1k_tokens)
    );
    let g = &report.gists;
    let _ = writeln!(
        out,
        "  gists       {} words for {} words of pages: compression rate {}%",
        g.gist_words,
        g.page_words,
        decimal(g.compression_rate)
    );
    let _ = writeln!(
        out,
        "  trees       tree        nodes  roots  depth  fan-out (mean, max)"
    );
    for t in &report.trees {
        let _ = writeln!(
            out,
            "              {:<10} {:>6} {:>6} {:>6}  {}, {}",
            t.tree,
            t.nodes,
            t.roots,
            t.max_depth,
            decimal(t.mean_fanout),
            t.max_fanout
        );
    }
    let c = &report.cost;
    let _ = writeln!(
        out,
        "  cost        {} model calls, {} tokens in and {} out: {} model tokens per corpus token, {} calls per 1,000",
        c.calls,
        c.tokens_in,
        c.tokens_out,
        decimal(c.tokens_per_corpus_token),
        decimal(c.calls_per_1k_tokens)
    );
    let per = report.calls_per();
    for (title, rows) in [("calls by memory", per.memory), ("calls by task", per.task)] {
        let _ = writeln!(
            out,
            "  {title:<22}     calls  cache hits   tokens in  tokens out  per corpus token"
        );
        for (name, c) in rows {
            let _ = writeln!(
                out,
                "    {:<22} {:>9} {:>11} {:>11} {:>11} {:>17}",
                name,
                c.calls,
                c.cache_hits,
                c.tokens_in,
                c.tokens_out,
                decimal(c.tokens_per_corpus_token)
            );
        }
    }
    let _ = writeln!(out, "  most expensive documents (tokens in + out, calls)");
    for doc in &report.expensive_documents {
        let title: String = doc
            .title
            .as_deref()
            .unwrap_or("(deleted)")
            .chars()
            .take(48)
            .collect();
        let _ = writeln!(out, "    {:>9} {:>6}  {title}", doc.tokens, doc.calls);
    }
    let errors: Vec<String> = report
        .errors
        .iter()
        .map(|e| format!("{}/{}: {}", e.stage, e.kind, e.errors))
        .collect();
    let errors = if errors.is_empty() {
        "none".to_string()
    } else {
        errors.join(", ")
    };
    let _ = writeln!(out, "  errors      {errors}");
    let stored: u64 = report.storage.iter().map(|t| t.total).sum();
    let text_bytes = report.overview.text_bytes;
    let _ = writeln!(
        out,
        "  storage     {stored} bytes for {text_bytes} bytes of text: {} bytes a byte of text",
        decimal(per_byte_of_text(stored, text_bytes))
    );
    let _ = writeln!(
        out,
        "              table                 total       data    indexes    history  per text byte"
    );
    for t in &report.storage {
        let _ = writeln!(
            out,
            "              {:<15} {:>11} {:>10} {:>10} {:>10} {:>14}",
            t.table,
            t.total,
            t.bytes.data,
            t.bytes.indexes,
            t.bytes.history,
            decimal(t.per_text_byte)
        );
    }
    out
}

/// A number with two decimals, or "-" where there is none.
pub fn decimal(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}
