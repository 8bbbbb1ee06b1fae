//! `memweave sql` and `memweave export`: DataFusion over the tables of one
//! checkpoint, and Parquet files other programs read back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use memweave_schemas::Table;
use memweave_tests::{
    S3_ACCESS_KEY, S3_SECRET_KEY, S3Server, Tables, index, memweave, memweave_ok, python,
    read_calls, read_every_row, read_tables, stderr, stdout, tokens_spent,
};

use super::shared::{archive_of, essay, pg_essays};

/// Rows of `query` as JSON objects.
fn sql(tables: &Path, query: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "sql".to_string(),
        query.to_string(),
        "--tables".into(),
        tables.display().to_string(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let output = memweave_ok(args);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&output)))
}

fn count(tables: &Path, table: &str, extra: &[&str]) -> u64 {
    let rows = sql(tables, &format!("SELECT count(*) AS n FROM {table}"), extra);
    rows[0]["n"].as_u64().unwrap()
}

/// Rows each table holds, as the project's own reader sees them.
fn row_counts(t: &Tables, root: &Path) -> Vec<(&'static str, u64)> {
    vec![
        ("documents", t.documents.len() as u64),
        ("segments", t.segments.len() as u64),
        ("tree_nodes", t.tree_nodes.len() as u64),
        ("pages", t.pages.len() as u64),
        ("entities", t.entities.len() as u64),
        ("relations", t.relations.len() as u64),
        ("embeddings", t.embeddings.len() as u64),
        ("llm_calls", read_calls(root).len() as u64),
        ("errors", t.errors.len() as u64),
        ("checkpoints", t.checkpoint.epoch),
    ]
}

const PYLANCE_COUNTS: &str = r#"
import json, sys, lance
root, versions = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps({t: lance.dataset(f"{root}/{t}.lance", version=v).count_rows() for t, v in versions.items()}))
"#;

/// Every table is registered by name at the checkpoint's version: counts equal
/// the tables' rows, pylance's count at the same versions, and a join and
/// grouping agree with the rows they summarise.
#[test]
fn sql_sees_every_table_at_the_checkpoint() {
    let built = pg_essays();
    let t = &built.read;
    let versions: serde_json::Map<String, serde_json::Value> = t
        .checkpoint
        .table_versions
        .iter()
        .map(|v| (v.table.clone(), v.version.into()))
        .collect();
    let output = Command::new(python())
        .args([
            "-c",
            PYLANCE_COUNTS,
            built.tables.to_str().unwrap(),
            &serde_json::Value::Object(versions).to_string(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let pylance: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for (table, rows) in row_counts(t, &built.tables) {
        assert_eq!(count(&built.tables, table, &[]), rows, "{table}");
        if table != "checkpoints" {
            assert_eq!(pylance[table], rows, "pylance, {table}");
        }
    }
    let per_doc = sql(
        &built.tables,
        "SELECT d.doc_id, count(s.seg_id) AS segments, sum(s.n_tokens) AS tokens \
         FROM documents d JOIN segments s ON s.doc_id = d.doc_id \
         GROUP BY d.doc_id ORDER BY tokens DESC, d.doc_id",
        &[],
    );
    assert_eq!(per_doc.len(), t.documents.len());
    let top = t
        .documents
        .iter()
        .map(|d| {
            let tokens: u64 = t
                .segments
                .iter()
                .filter(|s| s.doc_id == d.doc_id)
                .map(|s| u64::from(s.n_tokens))
                .sum();
            (tokens, std::cmp::Reverse(d.doc_id.clone()))
        })
        .max()
        .unwrap();
    assert_eq!(per_doc[0]["tokens"], top.0);
    assert_eq!(per_doc[0]["doc_id"], top.1.0.as_str());
}

/// `--version EPOCH` queries the tables as an older checkpoint committed them;
/// a query DataFusion refuses exits 2 with its message; parquet output is a
/// file DuckDB reads.
#[test]
fn sql_travels_in_time_and_refuses_bad_queries() {
    let (dir, archive) = archive_of(&["gap.txt", "founders.txt"]);
    let tables = dir.path().join("memory");
    index(&archive, &tables, &[]);
    std::fs::remove_file(archive.join("founders.txt")).unwrap();
    index(&archive, &tables, &[]);
    assert_eq!(count(&tables, "documents", &[]), 1);
    assert_eq!(count(&tables, "documents", &["--version", "1"]), 2);
    assert_eq!(count(&tables, "checkpoints", &["--version", "1"]), 1);
    assert_eq!(count(&tables, "checkpoints", &[]), 2);

    let root = tables.display().to_string();
    let bad = memweave(["sql", "SELEC 1", "--tables", &root]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("SQL error"), "{}", stderr(&bad));
    let unknown = memweave(["sql", "SELECT nope FROM documents", "--tables", &root]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("nope"), "{}", stderr(&unknown));
    // Read-only: nothing written, no file outside the tables read.
    let written = dir.path().join("written.csv");
    for (statement, named) in [
        (
            format!("COPY (SELECT 1) TO '{}'", written.display()),
            "COPY",
        ),
        (
            "CREATE EXTERNAL TABLE secrets STORED AS CSV LOCATION '/etc/passwd'".to_string(),
            "CreateExternalTable",
        ),
        (
            "SET datafusion.execution.batch_size = 1".to_string(),
            "SetVariable",
        ),
        (
            "CREATE TABLE t AS SELECT 1".to_string(),
            "CreateMemoryTable",
        ),
    ] {
        let refused = memweave(["sql", statement.as_str(), "--tables", &root]);
        assert_eq!(refused.status.code(), Some(2), "{statement}");
        let message = stderr(&refused);
        assert!(
            message.contains("runs queries only") && message.contains(named),
            "{statement}: {message}"
        );
    }
    assert!(!written.exists());
    let gone = memweave(["sql", "SELECT 1", "--tables", &root, "--version", "9"]);
    assert_eq!(gone.status.code(), Some(2));
    assert!(
        stderr(&gone).contains("checkpoints are 1 to 2"),
        "{}",
        stderr(&gone)
    );

    let file = dir.path().join("segments.parquet");
    memweave_ok([
        "sql",
        "SELECT seg_id, n_tokens FROM segments",
        "--tables",
        &root,
        "--format",
        "parquet",
        "--output",
        file.to_str().unwrap(),
    ]);
    let read = Command::new(python())
        .args([
            "-c",
            "import duckdb, sys; print(duckdb.sql(f\"SELECT count(*), sum(n_tokens) FROM '{sys.argv[1]}'\").fetchall()[0][1])",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", stderr(&read));
    let tokens: u64 = read_tables(&tables)
        .segments
        .iter()
        .map(|s| u64::from(s.n_tokens))
        .sum();
    assert_eq!(stdout(&read).trim(), tokens.to_string());
}

/// For each table: row count and a checksum of its sorted keys, from the
/// exported Parquet file (pyarrow; a folder, or s3://… through an endpoint)
/// and from the Lance dataset at the checkpoint's version (pylance); the
/// files' epoch metadata and compression; DuckDB's count of one file.
const READ_EXPORT: &str = r#"
import hashlib, json, sys
import pyarrow.parquet as pq, pyarrow.fs as pafs, duckdb, lance
exported, tables, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
fs = None
if exported.startswith("s3://"):
    s3 = spec["s3"]
    fs = pafs.S3FileSystem(endpoint_override=s3["endpoint"], access_key=s3["key"], secret_key=s3["secret"], region="us-east-1", scheme="http")
    exported = exported[len("s3://"):]
def digest(column):
    return hashlib.sha256("\n".join(sorted(str(v) for v in column.to_pylist())).encode()).hexdigest()
out = {}
for table, key in spec["keys"].items():
    path = f"{exported}/{table}.parquet"
    t = pq.read_table(path, filesystem=fs)
    meta = pq.read_metadata(path, filesystem=fs)
    ds = lance.dataset(f"{tables}/{table}.lance", version=spec["versions"].get(table))
    out[table] = {
        "rows": t.num_rows,
        "keys": digest(t.column(key)),
        "lance_rows": ds.count_rows(),
        "lance_keys": digest(ds.to_table(columns=[key]).column(key)),
        "epoch": meta.metadata[b"memweave.epoch"].decode(),
        "zstd": all(meta.row_group(g).column(c).compression == "ZSTD"
                    for g in range(meta.num_row_groups) for c in range(meta.num_columns)),
    }
if fs is None:
    out["duckdb_documents"] = duckdb.sql(f"SELECT count(*) FROM '{exported}/documents.parquet'").fetchall()[0][0]
print(json.dumps(out))
"#;

/// Reads an export back and checks it against the tables of `root`.
fn check_export(root: &Path, exported: &str, s3: Option<&serde_json::Value>) {
    let t = read_tables(root);
    let keys: serde_json::Map<String, serde_json::Value> = Table::ALL
        .iter()
        .map(|t| (t.name().to_string(), t.key_column().into()))
        .collect();
    let versions: serde_json::Map<String, serde_json::Value> = t
        .checkpoint
        .table_versions
        .iter()
        .map(|v| (v.table.clone(), v.version.into()))
        .collect();
    let spec = serde_json::json!({"keys": keys, "versions": versions, "s3": s3});
    let output = Command::new(python())
        .args([
            "-c",
            READ_EXPORT,
            exported,
            root.to_str().unwrap(),
            &spec.to_string(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for (table, rows) in row_counts(&t, root) {
        let file = &read[table];
        assert_eq!(file["rows"], rows, "{table} rows");
        assert_eq!(file["lance_rows"], rows, "{table} rows in lance");
        assert_eq!(file["keys"], file["lance_keys"], "{table} keys");
        assert_eq!(file["epoch"], t.checkpoint.epoch.to_string(), "{table}");
        assert_eq!(file["zstd"], true, "{table}");
    }
    if s3.is_none() {
        assert_eq!(read["duckdb_documents"], t.documents.len());
    }
}

/// An export to a folder and to an S3 bucket round-trips every table: the
/// same rows and keys as the checkpoint's Lance versions.
#[test]
fn export_round_trips_to_a_folder_and_to_s3() {
    let built = pg_essays();
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("parquet");
    let root = built.tables.to_str().unwrap();
    let run = memweave_ok([
        "export",
        "--tables",
        root,
        "--to",
        folder.to_str().unwrap(),
        "--format",
        "parquet",
    ]);
    assert!(
        stdout(&run).contains("documents.parquet"),
        "{}",
        stdout(&run)
    );
    check_export(&built.tables, folder.to_str().unwrap(), None);

    let s3 = S3Server::start(&["exports"]);
    let export = ["export", "--tables", root, "--to", "s3://exports/pg"];
    let output = s3.memweave(&export, S3_SECRET_KEY);
    assert!(output.status.success(), "{}", stderr(&output));
    let credentials = serde_json::json!({
        "endpoint": s3.endpoint,
        "key": S3_ACCESS_KEY,
        "secret": S3_SECRET_KEY,
    });
    check_export(&built.tables, "s3://exports/pg", Some(&credentials));
}

/// Every number of `memweave report --json` is what its SQL returns through
/// `memweave sql`, and agrees with the rows read back by the project's own
/// reader: documents, tokens, rows per table, calls per task, errors, tree
/// depths, the gists' compression rate.
#[test]
fn report_numbers_are_the_sql_that_defines_them() {
    let built = pg_essays();
    let root = built.tables.to_str().unwrap();
    let output = memweave_ok(["report", "--tables", root, "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let queries = report["queries"].as_object().unwrap();
    assert!(queries.len() >= 10, "{queries:?}");
    for (name, query) in queries {
        let rows = sql(&built.tables, query.as_str().unwrap(), &[]);
        let section = match &report[name] {
            serde_json::Value::Array(list) => list.clone(),
            single => vec![single.clone()],
        };
        assert_eq!(section, rows, "section {name}");
    }

    let t = &built.read;
    assert_eq!(report["overview"]["documents"], t.documents.len());
    let tokens: u64 = t.documents.iter().map(|d| d.n_tokens).sum();
    assert_eq!(report["overview"]["tokens"], tokens);
    for (table, rows) in row_counts(t, &built.tables) {
        let row = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["table"] == table)
            .unwrap_or_else(|| panic!("no {table} in the report"));
        assert_eq!(row["rows"], rows, "{table}");
    }
    let calls = read_calls(&built.tables);
    // A per-corpus-token figure of the report is what was spent over the corpus.
    let assert_per_corpus_token = |figure: &serde_json::Value, spent: u64, what: &str| {
        let figure = figure.as_f64().unwrap();
        assert!(
            (figure - spent as f64 / tokens as f64).abs() < 1e-9,
            "{what}: {figure}"
        );
    };
    for row in report["calls_by_task"].as_array().unwrap() {
        let task = row["task"].as_str().unwrap();
        let paid: Vec<_> = calls.iter().filter(|c| c.task == task).collect();
        assert_eq!(row["calls"], paid.len(), "{task}");
        let tokens_in: u64 = paid.iter().map(|c| u64::from(c.tokens_in)).sum();
        assert_eq!(row["tokens_in"], tokens_in, "{task}");
        let spent = tokens_spent(paid.iter().copied());
        assert_per_corpus_token(&row["tokens_per_corpus_token"], spent, task);
    }
    // Every call of the build, over the corpus it built.
    let spent = tokens_spent(&calls);
    let cost = &report["cost"];
    assert_eq!(cost["calls"], calls.len());
    assert_per_corpus_token(&cost["tokens_per_corpus_token"], spent, "cost");
    let per_token = cost["tokens_per_corpus_token"].as_f64().unwrap();
    let by_memory: f64 = report["calls_by_memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tokens_per_corpus_token"].as_f64().unwrap())
        .sum();
    assert!(
        (by_memory - per_token).abs() < 1e-6,
        "{by_memory} {per_token}"
    );
    for tree in report["trees"].as_array().unwrap() {
        let name = tree["tree"].as_str().unwrap();
        let depth = t
            .tree_nodes
            .iter()
            .filter(|n| n.tree == name)
            .map(|n| n.level)
            .max()
            .unwrap();
        assert_eq!(tree["max_depth"], depth, "{name}");
    }
    let words = |text: &str| text.split_whitespace().count() as f64;
    let page_words: f64 = t.pages.iter().map(|p| words(&t.page_text(p))).sum();
    let gist_words: f64 = t.pages.iter().map(|p| words(&t.page_gist(p))).sum();
    let rate = report["gists"]["compression_rate"].as_f64().unwrap();
    assert!(
        (rate - 100.0 * (1.0 - gist_words / page_words)).abs() < 1e-6,
        "{rate}"
    );
    assert_eq!(report["errors"], serde_json::json!([]));
    // Storage: each table's files, as the folder holds them, over the text.
    let text_bytes: usize = t.documents.iter().map(|d| d.text.len()).sum();
    assert_eq!(report["overview"]["text_bytes"], text_bytes);
    let storage = report["storage"].as_array().unwrap();
    let mut listed: Vec<&str> = storage
        .iter()
        .map(|s| s["table"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut folders: Vec<String> = std::fs::read_dir(&built.tables)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .replace(".lance", "")
        })
        .collect();
    folders.sort_unstable();
    assert_eq!(listed, folders);
    for stored in storage {
        let table = stored["table"].as_str().unwrap();
        let folder = built.tables.join(format!("{table}.lance"));
        assert_eq!(stored["total"], folder_bytes(&folder), "{table}");
        let parts = ["data", "indexes", "history"].map(|p| stored[p].as_u64().unwrap());
        assert_eq!(stored["total"], parts.iter().sum::<u64>(), "{table}");
        let ratio = stored["per_text_byte"].as_f64().unwrap();
        let total = stored["total"].as_u64().unwrap();
        assert!(
            (ratio - total as f64 / text_bytes as f64).abs() < 1e-9,
            "{table}"
        );
    }
    let totals: Vec<u64> = storage
        .iter()
        .map(|s| s["total"].as_u64().unwrap())
        .collect();
    assert!(
        totals.windows(2).all(|w| w[0] >= w[1]),
        "largest first: {totals:?}"
    );

    let text = memweave_ok(["report", "--tables", root]);
    let text = stdout(&text);
    assert!(
        text.contains(&format!("documents   {}", t.documents.len())),
        "{text}"
    );
    assert!(text.contains("compression rate"), "{text}");
    let stored: u64 = totals.iter().sum();
    assert!(
        text.contains(&format!(
            "storage     {stored} bytes for {text_bytes} bytes of text"
        )),
        "{text}"
    );
    let per_token = format!(
        "{:.2} model tokens per corpus token",
        spent as f64 / tokens as f64
    );
    assert!(text.contains(&per_token), "{text}");
}

/// A round over an edited file pays only for what the edit changed: the calls
/// on its unchanged text are cache hits, counted in that round's `call_stats`
/// rows, and the report adds them per task.
#[test]
fn call_stats_count_cache_hits_per_round() {
    let (dir, archive) = archive_of(&["gap.txt"]);
    let tables = dir.path().join("memory");
    index(&archive, &tables, &[]);
    let edited = format!(
        "{}\n\nA closing paragraph written for this test.\n",
        essay("gap.txt")
    );
    std::fs::write(archive.join("gap.txt"), edited).unwrap();
    index(&archive, &tables, &[]);
    let per_epoch = sql(
        &tables,
        "SELECT epoch, sum(calls) AS calls, sum(cache_hits) AS hits FROM call_stats \
         GROUP BY epoch ORDER BY epoch",
        &[],
    );
    assert_eq!(per_epoch.len(), 2, "{per_epoch:?}");
    let calls = |row: &serde_json::Value| row["calls"].as_u64().unwrap();
    let hits = |row: &serde_json::Value| row["hits"].as_u64().unwrap();
    assert_eq!(
        calls(&per_epoch[0]) + calls(&per_epoch[1]),
        read_calls(&tables).len() as u64
    );
    assert!(calls(&per_epoch[1]) > 0, "{per_epoch:?}");
    assert!(hits(&per_epoch[1]) > 0, "{per_epoch:?}");
    let root = tables.display().to_string();
    let report: serde_json::Value =
        serde_json::from_slice(&memweave_ok(["report", "--tables", &root, "--json"]).stdout)
            .unwrap();
    let reported: u64 = report["calls_by_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cache_hits"].as_u64().unwrap())
        .sum();
    assert_eq!(reported, per_epoch.iter().map(hits).sum::<u64>());
}

/// `--html` writes one self-contained page a headless browser (Debian's
/// chromium, installed by the test command) renders: the figures, a bar per
/// task in the tokens chart, a bar per minute of calls, a bar per tree depth.
#[test]
fn the_html_report_renders_in_a_headless_browser() {
    let built = pg_essays();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let root = built.tables.to_str().unwrap();
    let output = memweave_ok([
        "report",
        "--tables",
        root,
        "--json",
        "--html",
        page.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://") && !html.contains("<script"),
        "the page must stand alone"
    );
    let browser = |args: &[&str]| {
        let output = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .args(args)
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("chromium runs (scripts/test installs it)");
        assert!(output.status.success(), "{}", stderr(&output));
        output
    };
    let dom = stdout(&browser(&["--dump-dom"]));
    let bars = |chart: &str| -> usize {
        let start = dom
            .find(&format!("id=\"{chart}\""))
            .unwrap_or_else(|| panic!("no {chart}"));
        let end = start + dom[start..].find("</svg>").unwrap();
        dom[start..end].matches("class=\"in\"").count()
            + dom[start..end].matches("class=\"bar\"").count()
    };
    let len = |section: &str| report[section].as_array().unwrap().len();
    assert_eq!(bars("tokens-per-task"), len("calls_by_task"));
    assert_eq!(bars("calls-over-time"), len("calls_over_time"));
    assert_eq!(bars("tree-depths"), len("tree_depths"));
    let documents = format!("<b>{}</b>", built.read.documents.len());
    assert!(dom.contains(&documents), "the figures are on the page");
    let shot = dir.path().join("report.png");
    browser(&[
        "--window-size=1200,1600",
        &format!("--screenshot={}", shot.display()),
    ]);
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
}

/// `memweave index --metrics-listen` serves Prometheus metrics while it runs:
/// after the first commit, the epoch, every call this process made (by stage
/// and task), and the committed memory's report.
#[test]
fn the_indexer_serves_metrics_while_it_runs() {
    let (dir, archive) = archive_of(&["gap.txt", "founders.txt"]);
    let tables = dir.path().join("memory");
    let address = format!("127.0.0.1:{}", memweave_tests::free_port());
    let mut child = Command::new(memweave_tests::binary("memweave"))
        .args(["--log-format", "json", "index"])
        .arg(&archive)
        .arg("--out")
        .arg(&tables)
        .args(["--watch", "1", "--metrics-listen", &address])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    memweave_tests::Printed::of(&mut child).wait_for("committed epoch 1");
    let metrics = http_get(&address, "/metrics");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let value = |sample: &str| memweave_tests::metric(&metrics, sample);
    assert_eq!(value("memweave_index_epoch"), Some(1.0), "{metrics}");
    let t = read_tables(&tables);
    assert_eq!(
        value("memweave_memory_documents"),
        Some(t.documents.len() as f64)
    );
    let made: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("memweave_llm_calls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let calls = read_calls(&tables);
    assert_eq!(made, calls.len() as f64, "{metrics}");
    let spent = tokens_spent(&calls);
    let corpus: u64 = t.documents.iter().map(|d| d.n_tokens).sum();
    let per_token = value("memweave_memory_model_tokens_per_corpus_token").unwrap();
    assert!(
        (per_token - spent as f64 / corpus as f64).abs() < 1e-6,
        "{metrics}"
    );
    assert_eq!(value("memweave_llm_calls_in_flight"), Some(0.0));
    assert_eq!(value("memweave_index_queue_depth"), Some(0.0));
    for table in ["documents", "embeddings", "llm_calls", "checkpoints"] {
        let stored = value(&format!(
            "memweave_memory_stored_bytes{{table=\"{table}\"}}"
        ));
        assert!(stored.is_some_and(|b| b > 0.0), "{table}: {metrics}");
    }
}

/// A plain HTTP/1.1 GET on loopback; the body.
fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// Bytes of the files under `dir`.
fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            match entry.file_type().unwrap().is_dir() {
                true => folder_bytes(&entry.path()),
                false => entry.metadata().unwrap().len(),
            }
        })
        .sum()
}

const PYLANCE_VERSIONS: &str = r#"
import json, os, sys, lance
root = sys.argv[1]
tables = sorted(n[:-6] for n in os.listdir(root) if n.endswith(".lance"))
print(json.dumps({t: [v["version"] for v in lance.dataset(f"{root}/{t}.lance").versions()] for t in tables}))
"#;

/// Rounds of one edit each, indexed twice: keeping every checkpoint, and
/// with --keep-checkpoints 3. The second keeps the three newest: each reads
/// as the first memory's same epoch does, every table's versions are those
/// they name (as pylance lists them) and older epochs say they were
/// removed; its folder stays the size of a few rounds while the other grows
/// with each. `memweave gc` applies a policy to the first afterwards.
#[test]
fn retention_keeps_the_newest_checkpoints_and_removes_the_rest() {
    let (dir, source) = archive_of(&["gap.txt", "founders.txt"]);
    let (every, kept) = (dir.path().join("every"), dir.path().join("kept"));
    // No replica serves these memories: no grace after a checkpoint is
    // superseded.
    let keep = ["--keep-checkpoints", "3", "--serving-grace", "0s"];
    for round in 0..8 {
        if round > 0 {
            let mut text = std::fs::read_to_string(source.join("gap.txt")).unwrap();
            text.push_str(&format!("\n\nEdit number {round} adds a sentence.\n"));
            std::fs::write(source.join("gap.txt"), text).unwrap();
        }
        index(&source, &every, &[]);
        let output = index(&source, &kept, &keep);
        if round >= 3 {
            assert!(
                stdout(&output).contains("removed 1 checkpoint,"),
                "{}",
                stdout(&output)
            );
        }
    }
    let epochs = |tables: &Path| -> Vec<u64> {
        sql(tables, "SELECT epoch FROM checkpoints ORDER BY epoch", &[])
            .iter()
            .map(|row| row["epoch"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(epochs(&kept), [6, 7, 8]);
    assert_eq!(epochs(&every), Vec::from_iter(1..=8));
    let query = "SELECT seg_id, doc_id, n_tokens FROM segments ORDER BY seg_id";
    for epoch in ["6", "7", "8"] {
        let at = ["--version", epoch];
        assert_eq!(
            sql(&kept, query, &at),
            sql(&every, query, &at),
            "epoch {epoch}"
        );
    }
    let gone = memweave([
        "sql",
        "SELECT 1",
        "--tables",
        kept.to_str().unwrap(),
        "--version",
        "5",
    ]);
    assert_eq!(gone.status.code(), Some(2));
    assert!(
        stderr(&gone).contains("6 to 8") && stderr(&gone).contains("retention"),
        "{}",
        stderr(&gone)
    );
    // Every table keeps only the versions the kept checkpoints name, and
    // what was written after the newest (model calls saved since).
    let output = Command::new(python())
        .args(["-c", PYLANCE_VERSIONS, kept.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let listed: BTreeMap<String, Vec<u64>> = serde_json::from_slice(&output.stdout).unwrap();
    let checkpoints = read_every_row::<memweave_schemas::CheckpointRow>(&kept);
    for (table, versions) in &listed {
        let Some(table) = Table::ALL.iter().find(|t| t.name() == table) else {
            continue;
        };
        let named: Vec<u64> = checkpoints
            .iter()
            .filter_map(|c| c.version_of(*table))
            .collect();
        let newest = named.iter().max().copied().unwrap_or(0);
        for version in versions {
            assert!(
                named.contains(version) || *version >= newest || *table == Table::Checkpoints,
                "{table}: version {version} is kept, named: {named:?}"
            );
        }
    }
    let (kept_bytes, every_bytes) = (folder_bytes(&kept), folder_bytes(&every));
    assert!(
        kept_bytes < every_bytes,
        "{kept_bytes} kept, {every_bytes} keeping all"
    );

    let collected = memweave_ok([
        "gc",
        "--tables",
        every.to_str().unwrap(),
        "--keep-checkpoints",
        "3",
        "--serving-grace",
        "0s",
    ]);
    assert!(
        stdout(&collected).contains("removed 5 checkpoints")
            && stdout(&collected).contains("keeps checkpoints 6 to 8"),
        "{}",
        stdout(&collected)
    );
    assert!(folder_bytes(&every) < every_bytes);
    assert_eq!(sql(&every, query, &[]), sql(&kept, query, &[]));
}

/// Rounds of edits under a retention policy leave the memory near the size
/// of a fresh build of the final archive: the call cache holds every call
/// such a build makes, and of the texts the edits replaced only the last
/// (a document's retraction asks for its previous text's calls once more),
/// where without a policy it keeps every call ever made.
#[test]
fn under_retention_edits_leave_the_calls_and_the_bytes_of_a_fresh_build() {
    // Documents that share names (Windows) whose sameness the model is asked.
    let (dir, source) = archive_of(&["gap.txt", "founders.txt", "apple.txt", "submarine.txt"]);
    let (kept, every) = (dir.path().join("kept"), dir.path().join("every"));
    for round in 0..6 {
        if round > 0 {
            // A new first mention of the shared name: the documents' calls
            // and the comparisons across them change.
            let path = source.join(["gap.txt", "founders.txt"][round % 2]);
            let text = std::fs::read_to_string(&path).unwrap();
            let edit = format!("Windows edit number {round} adds a sentence.\n\n");
            std::fs::write(&path, edit + &text).unwrap();
        }
        let keep = ["--keep-checkpoints", "1", "--serving-grace", "0s"];
        index(&source, &kept, &keep);
        index(&source, &every, &[]);
    }
    let fresh = dir.path().join("fresh");
    index(&source, &fresh, &[]);
    // A document's calls, then the calls across documents (the corpus trees,
    // the relations merged across documents).
    for owner in ["doc_id", "subject"] {
        let calls = |tables: &Path| -> BTreeSet<String> {
            let query = format!("SELECT call_key FROM llm_calls WHERE {owner} IS NOT NULL");
            let rows = sql(tables, &query, &[]);
            rows.iter()
                .map(|row| row["call_key"].as_str().unwrap().to_string())
                .collect()
        };
        let (wanted, held, ever) = (calls(&fresh), calls(&kept), calls(&every));
        assert!(held.is_superset(&wanted), "a call the memory needs is gone");
        // Each edit replaced a segment's text and the summaries above it:
        // their calls, and those of the texts replaced before the last edit
        // of each document, are gone.
        assert!(
            held.len() - wanted.len() < (ever.len() - wanted.len()) / 2,
            "{owner}: {} held, {} ever, {} needed",
            held.len(),
            ever.len(),
            wanted.len()
        );
    }
    let (kept_bytes, fresh_bytes) = (folder_bytes(&kept), folder_bytes(&fresh));
    assert!(
        kept_bytes * 10 <= fresh_bytes * 12,
        "{kept_bytes} bytes after the rounds, {fresh_bytes} in a fresh build"
    );
    // With the default grace, the checkpoint a replica may still serve (the
    // one just superseded) stays.
    std::fs::write(source.join("apple.txt"), "A last edit.\n").unwrap();
    index(&source, &kept, &["--keep-checkpoints", "1"]);
    let epochs = sql(&kept, "SELECT epoch FROM checkpoints ORDER BY epoch", &[]);
    assert_eq!(epochs.len(), 2, "{epochs:?}");
}
