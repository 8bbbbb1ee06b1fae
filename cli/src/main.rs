//! `memweave`: build LLM memory from an archive, and ask it questions.

// A binary's edge: errors become messages here, with anyhow (clippy.toml keeps
// it out of the libraries).
#![allow(clippy::disallowed_types, clippy::disallowed_macros)]

mod index;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use memweave_analytics::catalog::{Catalog, CatalogError};
use memweave_analytics::export::{self, ExportSummary};
use memweave_analytics::sql::{self, Format as SqlFormat, SqlError};
use memweave_analytics::{html, report};
use memweave_llm::{CallCache, ModelArgs};
use memweave_pipeline::source::{SourceOptions, object_store_at};
use memweave_pipeline::{IndexError, UsageError};
use memweave_process::{LogFormat, StorageArgs, init_logging, parse_key_value};
use memweave_query::cache::ReadCache;
use memweave_query::request::RequestError;
use memweave_query::{Answer, AskOptions, AskRequest, Models, Snapshot, Strategy};
use memweave_schemas::{StoreError, TableStore};

use crate::index::IndexArgs;

/// jemalloc, not glibc's malloc: the indexer frees as much as it allocates
/// (texts in, rows out), and glibc's per-thread arenas kept the freed pages
/// (peak RSS about twice the live heap). jemalloc's background thread returns
/// them to the system.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// `memweave ask` reads one question's rows once: small read caches do.
const ASK_CACHE_MIB: u64 = 64;

#[derive(Parser)]
#[command(
    name = "memweave",
    version,
    about = "Build LLM memory (MemWalker trees, ReadAgent gists) from an archive and ask it questions",
    after_help = "Start here:\n  memweave index docs --out ./memory\n  memweave ask \"What is memweave?\" --tables ./memory"
)]
struct Cli {
    /// Log format on stderr: text for people, json for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the Index variant's size costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Build the memory of every document under SOURCE into Lance tables.
    ///
    /// SOURCE is a file or a directory, read recursively (hidden entries skipped),
    /// or the objects under an object-store prefix: s3://BUCKET/PREFIX (with
    /// --s3-endpoint for MinIO, Ceph and other S3-compatible servers),
    /// gs://BUCKET/PREFIX, az://CONTAINER/PREFIX, file:///PATH. Credentials and
    /// region come from the usual environment variables (AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION, GOOGLE_SERVICE_ACCOUNT, AZURE_STORAGE_…).
    /// Formats, by file name: plain text and text markups (.txt, .md, .rst,
    /// .adoc, .org), web pages (.html, .htm, .xhtml: scripts, styles and
    /// navigation dropped), PDF (.pdf: the text layer, page by page), Word
    /// (.docx), books (.epub), mail (.mbox: one document per message, keyed by
    /// its Message-ID; .eml) and datasets, each row a document keyed by its id
    /// (.parquet, Arrow IPC .arrow/.feather/.arrows, JSON Lines .jsonl/.ndjson,
    /// also .gz or .zst; see --id-column). Citations name the PDF page, the
    /// heading path, the message or the row. Files that cannot be read
    /// (encrypted or scanned PDFs, corrupt files, rows without text) become
    /// rows of the `errors` table and the run goes on. Re-running over the same SOURCE and
    /// tables reads only the files added or changed since the last run and
    /// applies what changed to the tables: unchanged documents keep their ids
    /// and versions and cost no model call; documents gone from SOURCE leave the
    /// tables.
    ///
    /// SOURCE may also be a Kafka topic, kafka://HOST:PORT[,HOST:PORT…]/TOPIC,
    /// whose messages are JSON changes: {"doc_id", "op": "upsert", "text" (or
    /// "uri" of an object holding it), "metadata": {"title"}} or {"doc_id",
    /// "op": "delete"}. Key them by doc_id. Offsets are kept in the checkpoint,
    /// so a re-run resumes where the last one committed.
    ///
    /// Across machines: start the same command on N hosts with -n N, -p 0…N-1
    /// and -h HOSTFILE (their HOST:PORT addresses, one per line); on Kubernetes
    /// the process index comes from the pod's ordinal and --peers names the
    /// others. Process 0 reads SOURCE (files, objects or Kafka; --watch and
    /// --follow too) and writes the tables; the others build their share of
    /// the memories and stop when process 0 does.
    #[command(disable_help_flag = true)]
    Index(IndexArgs),
    /// Run a SQL query over the memory tables (DataFusion SQL).
    ///
    /// Every table of the newest checkpoint (or of --version EPOCH) is there by
    /// name: documents, segments, tree_nodes, pages, entities, relations,
    /// embeddings, llm_calls, errors, checkpoints. For example:
    ///
    ///   memweave sql "SELECT task, count(*), sum(tokens_in) FROM llm_calls GROUP BY task" --tables ./memory
    ///
    /// A query DataFusion refuses exits with 2 and DataFusion's message.
    Sql {
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
    },
    /// Export every memory table of one checkpoint as Parquet (zstd): URL/TABLE.parquet.
    ///
    /// URL is a local folder or any object-store URL (s3://, gs://, az://,
    /// file://), with credentials from the usual environment variables. The
    /// files are readable by DuckDB, pandas/pyarrow and Spark, and carry the
    /// checkpoint's epoch in their metadata (memweave.epoch).
    Export {
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
    },
    /// What a memory holds and what it cost, from the tables alone: documents and
    /// tokens, rows per table, model calls, tokens and cache hits per task and per
    /// memory kind, the most expensive documents, errors, tree shapes, graph
    /// density and the gists' compression rate. Every number is a SQL query over
    /// the tables (in --json's "queries"), to check or extend with memweave sql.
    Report {
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
    },
    /// Write the built-in prompt templates (the papers' prompts) into DIR, to edit
    /// and pass back with --prompts DIR.
    Prompts {
        /// Directory to write TASK.txt files into (created if missing).
        dir: PathBuf,
    },
    /// Answer a question from the memory tables, with the trace of how.
    Ask {
        /// The question.
        question: String,
        /// Root of the memory tables.
        #[arg(long, env = "MEMWEAVE_TABLES")]
        tables: String,
        /// How to navigate the memory: memwalker (summary tree, model triage),
        /// readagent-p / readagent-s (gists, pages looked up at once / one at a
        /// time), qrmem-trial / qrmem-expand / qrmem (entity graph: the question's
        /// entities / and their neighbours / reflection loop), ilmtr (collapsed
        /// tree + short-term memory), raptor (collapsed tree), bm25 and dense
        /// (top segments, baselines).
        #[arg(long, default_value = "memwalker", value_parser = strategy_names())]
        strategy: String,
        /// Tokens of context the retrieval strategies gather.
        #[arg(long)]
        budget: Option<usize>,
        #[command(flatten)]
        options: AskOptions,
        /// Only consider this document (id); repeatable.
        #[arg(long = "document")]
        documents: Vec<String>,
        /// Print the answer and its trace as JSON (the same body the query service returns).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        storage: StorageArgs,
        /// The model that navigates (the extractive backend by default) and the
        /// embedder the index used (questions are embedded by it too).
        #[command(flatten)]
        model: ModelArgs,
    },
}

fn strategy_names() -> Vec<&'static str> {
    Strategy::ALL.iter().map(|s| s.name()).collect()
}

// The binary edge: the one place an error is printed rather than logged.
#[allow(clippy::print_stderr)]
fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let interactive = matches!(cli.log_format, LogFormat::Text);
    let result = match cli.command {
        Command::Index(args) => args.run(interactive),
        Command::Sql {
            query,
            tables,
            version,
            format,
            output,
            storage,
        } => with_catalog(&tables, storage, version, |catalog| async move {
            let frame = sql::plan(&catalog, &query).await.map_err(sql_error)?;
            let rows = sql::write(frame, format, output.as_deref())
                .await
                .map_err(sql_error)?;
            if let Some(output) = &output {
                tracing::info!(rows, file = %output.display(), "wrote the query's rows");
            }
            Ok(())
        }),
        Command::Export {
            tables,
            to,
            format: ExportFormat::Parquet,
            version,
            s3_endpoint,
            to_options,
            storage,
        } => with_catalog(&tables, storage, version, |catalog| async move {
            let options = SourceOptions {
                s3_endpoint,
                options: to_options,
                ..SourceOptions::default()
            };
            let (store, prefix) = object_store_at("--to", &to, &options, true)?;
            let summary = export::export(&catalog, store, prefix, &to).await?;
            print_export(&summary);
            Ok(())
        }),
        Command::Report {
            tables,
            version,
            json,
            html,
            storage,
        } => with_catalog(&tables, storage, version, |catalog| async move {
            let report = report::report(&catalog).await?;
            if let Some(file) = &html {
                std::fs::write(file, html::html(&report))
                    .map_err(|e| UsageError(format!("--html {}: {e}", file.display())))?;
                tracing::info!(file = %file.display(), "wrote the HTML report");
            }
            print_report(&report, json)
        }),
        Command::Prompts { dir } => memweave_llm::Prompts::export(&dir)
            .map_err(|e| anyhow::Error::new(UsageError(format!("{}: {e}", dir.display()))))
            .map(|()| tracing::info!(dir = %dir.display(), "wrote the built-in prompt templates")),
        Command::Ask {
            question,
            tables,
            strategy,
            budget,
            options,
            documents,
            json,
            storage,
            model,
        } => {
            let request = strategy.parse().map(|strategy| AskRequest {
                question,
                strategy,
                documents: (!documents.is_empty()).then_some(documents),
                budget,
                options,
                epoch: None,
            });
            request
                .map_err(|e: RequestError| UsageError::of(e).into())
                .and_then(|request| ask(&request, &tables, json, storage.into_map(), &model))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memweave: error: {err:#}");
            let index = err.downcast_ref::<IndexError>();
            if let Some(IndexError::Interrupted) = index {
                ExitCode::from(130)
            } else if index.is_some_and(IndexError::is_usage)
                || err.downcast_ref::<UsageError>().is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// The formats `memweave export` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Parquet,
}

/// A mistake in the query is the asker's (exit code 2).
fn sql_error(error: SqlError) -> anyhow::Error {
    if error.is_usage() {
        UsageError::of(error).into()
    } else {
        error.into()
    }
}

/// Runs `work` (sql, export, report) on a runtime of its own, over the catalog
/// of the tables at `tables` as the newest checkpoint, or `version`, left them.
fn with_catalog<Work, Done>(
    tables: &str,
    storage: StorageArgs,
    version: Option<u64>,
    work: Work,
) -> anyhow::Result<()>
where
    Work: FnOnce(Catalog) -> Done,
    Done: Future<Output = anyhow::Result<()>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = TableStore::new(tables, storage.into_map()).map_err(UsageError::of)?;
        let catalog = Catalog::open(store, version).await.map_err(|e| match e {
            usage @ (CatalogError::NoCheckpoint { .. } | CatalogError::NoSuchEpoch { .. }) => {
                anyhow::Error::from(UsageError::of(usage))
            }
            failure => failure.into(),
        })?;
        work(catalog).await
    })
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

#[allow(clippy::print_stdout)]
fn print_export(summary: &ExportSummary) {
    println!("memweave export: checkpoint {}", summary.epoch);
    for (file, rows) in &summary.files {
        println!("  {rows:>9} rows  {file}");
    }
}

fn ask(
    request: &AskRequest,
    tables: &str,
    json: bool,
    storage_options: HashMap<String, String>,
    flags: &ModelArgs,
) -> anyhow::Result<()> {
    if flags.llm.cache_only {
        return Err(UsageError(
            "--cache-only replays a build's model calls; questions are not kept in the tables, so there is nothing to replay them from".into(),
        )
        .into());
    }
    let (llm, embed) = flags.config().map_err(UsageError::of)?;
    // Calls are cached for this question only: asking writes nothing to the tables.
    let model = llm.model(CallCache::in_memory()).map_err(UsageError::of)?;
    let store = TableStore::new(tables, storage_options).map_err(UsageError::of)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let embedder = runtime
        .block_on(embed.embedder(CallCache::in_memory()))
        .map_err(UsageError::of)?;
    let snapshot = runtime
        .block_on(Snapshot::load_latest(
            &store,
            Arc::new(ReadCache::new(ASK_CACHE_MIB)),
        ))
        .map_err(|e| match e {
            older @ StoreError::OlderMemory { .. } => UsageError::of(older).into(),
            other => anyhow::Error::from(other),
        })?
        .ok_or_else(|| {
            UsageError(format!(
                "no memory under {tables}: run `memweave index SOURCE --out {tables}` first"
            ))
        })?;
    runtime
        .block_on(snapshot.validate(request))?
        .map_err(UsageError::of)?;
    let models = Models {
        model: &model,
        embedder: &*embedder,
    };
    let answer = runtime.block_on(memweave_query::ask(&snapshot, request, models))?;
    if json {
        print_json(&answer)?;
    } else {
        print_answer(&answer);
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn print_json(answer: &Answer) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(answer)?);
    Ok(())
}

#[allow(clippy::print_stdout)]
fn print_answer(answer: &Answer) {
    println!(
        "Answer ({}, epoch {}):",
        answer.strategy.name(),
        answer.epoch
    );
    print_wrapped(&answer.answer, "  ");
    if !answer.supporting.is_empty() {
        println!("\nSupporting passages:");
    }
    for (n, passage) in answer.supporting.iter().enumerate() {
        let section = (passage.section.as_ref())
            .map(|s| format!(", {}", s.cited()))
            .unwrap_or_default();
        println!(
            "  [{}] \"{}\" ({}){section}, characters {}–{}",
            n + 1,
            passage.title,
            passage.source_uri,
            passage.start_char,
            passage.end_char
        );
        let excerpt: String = passage.text.chars().take(240).collect();
        let more = if excerpt.len() < passage.text.len() {
            "…"
        } else {
            ""
        };
        print_wrapped(&format!("\"{excerpt}{more}\""), "      ");
    }
    let usage = &answer.usage;
    println!(
        "\nTrace ({} steps; {} model calls, {} tokens in, {} out, {} ms waiting on the model):",
        answer.trace.len(),
        usage.model_calls,
        usage.tokens_in,
        usage.tokens_out,
        usage.model_ms
    );
    for step in &answer.trace {
        let indent = "  ".repeat(step.depth as usize + 1);
        let level = step.level.map(|l| format!(" L{l}")).unwrap_or_default();
        let target = if step.target.is_empty() {
            String::new()
        } else {
            format!(" {}", short(&step.target))
        };
        let chosen = step
            .signal
            .map(|s| format!(" by {}", s.name()))
            .unwrap_or_default();
        println!(
            "{:>3} {indent}{}{target}{level}  score {:.2}{chosen}",
            step.step, step.action, step.score
        );
        let detail = format!("    {indent}");
        print_wrapped(&step.reasoning, &detail);
        if !step.calls.is_empty() {
            let calls: Vec<String> = step
                .calls
                .iter()
                .map(|c| {
                    if c.cached {
                        format!("{} (answered by an identical call)", c.task)
                    } else {
                        format!(
                            "{} {}→{} tokens {} ms",
                            c.task, c.tokens_in, c.tokens_out, c.latency_ms
                        )
                    }
                })
                .collect();
            print_wrapped(&format!("model: {}", calls.join("; ")), &detail);
        }
    }
}

/// Prints `text` in lines of at most about 100 characters, each after `indent`.
#[allow(clippy::print_stdout)]
fn print_wrapped(text: &str, indent: &str) {
    const WIDTH: usize = 100;
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > WIDTH {
            println!("{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        println!("{indent}{line}");
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
