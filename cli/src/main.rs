//! `memweave`: build LLM memory from an archive, and ask it questions.

// A binary's edge: errors become messages here, with anyhow (clippy.toml keeps
// it out of the libraries).
#![allow(clippy::disallowed_types, clippy::disallowed_macros)]

mod ask;
mod export;
mod gc;
mod index;
mod prompts;
mod report;
mod sql;
mod tables;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memweave_pipeline::supervise::{Flights, SUPERVISED_BY, supervise};
use memweave_pipeline::{IndexError, UsageError};
use memweave_process::{LogFormat, init_logging};

use crate::ask::AskArgs;
use crate::export::ExportArgs;
use crate::gc::GcArgs;
use crate::index::IndexArgs;
use crate::prompts::PromptsArgs;
use crate::report::ReportArgs;
use crate::sql::SqlArgs;

/// jemalloc, not glibc's malloc: the indexer frees as much as it allocates
/// (texts in, rows out), and glibc's per-thread arenas kept the freed pages
/// (peak RSS about twice the live heap). jemalloc's background thread returns
/// them to the system.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    Sql(SqlArgs),
    /// Export every memory table of one checkpoint as Parquet (zstd): URL/TABLE.parquet.
    ///
    /// URL is a local folder or any object-store URL (s3://, gs://, az://,
    /// file://), with credentials from the usual environment variables. The
    /// files are readable by DuckDB, pandas/pyarrow and Spark, and carry the
    /// checkpoint's epoch in their metadata (memweave.epoch).
    Export(ExportArgs),
    /// What a memory holds and what it cost, from the tables alone: documents and
    /// tokens, rows per table, model calls, tokens and cache hits per task and per
    /// memory kind, the most expensive documents, errors, tree shapes, graph
    /// density and the gists' compression rate. Every number is a SQL query over
    /// the tables (in --json's "queries"), to check or extend with memweave sql.
    Report(ReportArgs),
    /// Remove old checkpoints, with the table versions and data files only
    /// they need: keep the newest N (--keep-checkpoints) and/or those younger
    /// than a duration (--keep-for). `memweave index` takes the same flags
    /// and applies them after every commit.
    Gc(GcArgs),
    /// Write the built-in prompt templates (the papers' prompts) into DIR, to edit
    /// and pass back with --prompts DIR.
    Prompts(PromptsArgs),
    /// Answer a question from the memory tables, with the trace of how.
    Ask(AskArgs),
    /// A parser process of `memweave index`: reads files on stdin, answers
    /// their documents on stdout, within MEMORY_BYTES of private memory.
    #[command(hide = true)]
    ParseWorker { memory_bytes: u64 },
}

/// `memweave index` as the supervisor of the indexer, its child (see
/// [`memweave_pipeline::supervise`]): ends as the child ended.
#[allow(clippy::print_stderr)]
fn supervise_index() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let supervised = std::env::current_exe().and_then(|program| supervise(&program, &args));
    match supervised {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("memweave: error: starting the indexer: {err}");
            ExitCode::from(1)
        }
    }
}

// The binary edge: the one place an error is printed rather than logged.
#[allow(clippy::print_stderr)]
fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::ParseWorker { memory_bytes } = cli.command {
        // No logging: its stderr is read only when it dies.
        return match memweave_ingest::sandbox::serve_worker(memory_bytes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("memweave parse-worker: {err}");
                ExitCode::FAILURE
            }
        };
    }
    init_logging(cli.log_format);
    let interactive = matches!(cli.log_format, LogFormat::Text);
    let result = match cli.command {
        Command::Index(args) => match std::env::var(SUPERVISED_BY) {
            Ok(supervisor) => Flights::join(&supervisor)
                .map_err(anyhow::Error::from)
                .and_then(|flights| args.run(interactive, flights)),
            // This process supervises; the indexer is its child.
            Err(_) => return supervise_index(),
        },
        Command::Sql(args) => args.run(),
        Command::Export(args) => args.run(),
        Command::Report(args) => args.run(),
        Command::Gc(args) => args.run(),
        Command::Prompts(args) => args.run(),
        Command::Ask(args) => args.run(),
        Command::ParseWorker { .. } => unreachable!("served above"),
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
