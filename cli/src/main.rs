//! `memweave`: build LLM memory from an archive, and ask it questions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use memweave_analytics::catalog::{Catalog, CatalogError};
use memweave_analytics::export::{self, ExportSummary};
use memweave_analytics::sql::{self, Format as SqlFormat, SqlError};
use memweave_analytics::{html, report};
use memweave_llm::cache::CacheReport;
use memweave_llm::pool::PoolReport;
use memweave_llm::{CallCache, ConfigError, ModelArgs};
use memweave_operators::build::{BuildConfig, Memories};
use memweave_operators::graph::GraphConfig;
use memweave_operators::paginate::PageConfig;
use memweave_operators::raptor::RaptorConfig;
use memweave_operators::segment::SegmentConfig;
use memweave_operators::tree::{DEFAULT_MAX_CHILDREN, DEFAULT_PARENT_MAX_TOKENS};
use memweave_pipeline::cluster::ClusterArgs;
use memweave_pipeline::index::{
    ComputeSummary, DEFAULT_WRITE_BATCH_ROWS, IndexOptions, IndexSummary, compute, error_kinds,
    run_index,
};
use memweave_pipeline::kafka::{KafkaOptions, index_kafka};
use memweave_pipeline::source::{SourceOptions, object_store_at};
use memweave_pipeline::{IndexError, UsageError};
use memweave_process::{LogFormat, StorageArgs, init_logging, parse_key_value};
use memweave_query::cache::ReadCache;
use memweave_query::request::RequestError;
use memweave_query::{Answer, AskOptions, AskRequest, Models, Snapshot, Strategy};
use memweave_schemas::{StoreError, TableStore};

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
    /// Formats: .txt, .md, .html/.htm (tags stripped) and .jsonl (one
    /// {"id", "text"} per line). Files that cannot be read become rows of the
    /// `errors` table and the run goes on. Re-running over the same SOURCE and
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
    Index {
        /// Print help (-h is the hostfile, as for every timely program).
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
        /// File, directory, object-store URL or kafka:// topic to index.
        #[arg(env = "MEMWEAVE_SOURCE")]
        source: String,
        /// Endpoint of an S3-compatible server for an s3:// SOURCE (http:// allowed).
        #[arg(long, env = "MEMWEAVE_S3_ENDPOINT")]
        s3_endpoint: Option<String>,
        /// Object-store setting for SOURCE, KEY=VALUE as object_store names them
        /// (aws_region, aws_virtual_hosted_style_request, …); repeatable.
        #[arg(long = "source-option", value_parser = parse_key_value)]
        source_options: Vec<(String, String)>,
        /// After the run, look at SOURCE every SECONDS and index again when a file
        /// or object was added, changed or removed; stop with Ctrl-C.
        #[arg(long, value_name = "SECONDS")]
        watch: Option<u64>,
        /// Consumer group of a kafka:// SOURCE: its offsets show the lag of what
        /// is committed to the tables (the checkpoint is what a restart reads).
        #[arg(long, default_value = "memweave")]
        group: String,
        /// Keep consuming a kafka:// SOURCE; otherwise stop at the end offsets
        /// seen at the start.
        #[arg(long)]
        follow: bool,
        /// Root of the memory tables: a path or an object-store URL (s3://…).
        #[arg(long, env = "MEMWEAVE_TABLES")]
        out: String,
        /// Dataflow worker threads.
        #[arg(short = 'w', long, default_value_t = memweave_pipeline::index::default_workers())]
        workers: usize,
        /// The memories to build, comma-separated: memwalker (summary tree),
        /// readagent (pages and gists), graph (QRMeM entities and relations),
        /// raptor (ILM-TR cluster tree with embeddings).
        #[arg(long, default_value = "memwalker,readagent,graph,raptor", value_parser = Memories::parse)]
        memories: Memories,
        /// Average segment size in tokens (cl100k BPE); segments stay between a
        /// quarter of and three times this unless --min-tokens/--max-tokens say otherwise.
        #[arg(long, default_value_t = SegmentConfig::DEFAULT.target_tokens)]
        segment_tokens: usize,
        /// Smallest segment, in tokens (default: a quarter of --segment-tokens).
        #[arg(long)]
        min_tokens: Option<usize>,
        /// Largest segment, in tokens (default: three times --segment-tokens); lower it
        /// to fit a model with a small context window.
        #[arg(long)]
        max_tokens: Option<usize>,
        /// Most children of a MemWalker tree node (the paper's Mt).
        #[arg(long, default_value_t = DEFAULT_MAX_CHILDREN)]
        max_children: usize,
        /// Fewest words of a ReadAgent page before a break may be chosen.
        #[arg(long, default_value_t = PageConfig::DEFAULT.min_words)]
        page_min_words: usize,
        /// Most words of a ReadAgent page.
        #[arg(long, default_value_t = PageConfig::DEFAULT.max_words)]
        page_max_words: usize,
        /// Words a document's gists may total before neighbouring pages that do not
        /// start a new section are merged and gisted again (ReadAgent appendix I);
        /// 0 never merges.
        #[arg(long, default_value_t = PageConfig::DEFAULT.gist_word_budget)]
        gist_word_budget: usize,
        /// Longest concatenation of child summaries kept as a MemWalker parent's
        /// summary, in tokens; longer ones are compressed by the model.
        #[arg(long, default_value_t = DEFAULT_PARENT_MAX_TOKENS)]
        parent_max_tokens: usize,
        /// Also build corpus-level trees whose leaves are the documents' roots:
        /// MemWalker's (tree_nodes.tree = "memwalker-corpus") and RAPTOR's
        /// ("raptor-corpus", the roots clustered by their vectors).
        #[arg(long)]
        corpus_tree: bool,
        /// RAPTOR chunk size in tokens (RAPTOR used 100, ILM-TR 600). By default
        /// the chunks are the MemWalker segments (--segment-tokens), and one
        /// ILM-TR call per segment summarises it for both trees; another size
        /// reads the text once more for RAPTOR.
        #[arg(long)]
        chunk_tokens: Option<usize>,
        /// Tokens of the finer cut the retrieval baselines (bm25) rank, kept in
        /// segments beside the memories' own cut when finer than it; no model
        /// call reads it. 0 keeps none, and the baselines rank the segments.
        #[arg(long, default_value_t = BuildConfig::DEFAULT.passage_tokens)]
        passage_tokens: usize,
        /// Most RAPTOR levels above the chunks; the last is one cluster, the root.
        #[arg(long, default_value_t = RaptorConfig::DEFAULT.max_levels)]
        raptor_max_levels: u32,
        /// A RAPTOR cluster whose texts total more tokens than this is clustered
        /// again on its own.
        #[arg(long, default_value_t = RaptorConfig::DEFAULT.cluster_max_tokens)]
        cluster_max_tokens: usize,
        /// Longest relation description kept by joining what the documents say,
        /// in tokens: the model merges descriptions only past it.
        #[arg(long, value_name = "TOKENS", default_value_t = GraphConfig::DEFAULT.description_budget)]
        relation_description_tokens: usize,
        /// Two documents' entities of one name whose passages' vectors are at
        /// least this similar (cosine) are one entity, without asking the model.
        /// The defaults suit the hashing embedder; with MiniLM, whose cosines
        /// run higher, something like 0.8 and 0.3.
        #[arg(long, value_name = "COSINE", default_value_t = GraphConfig::DEFAULT.same_above, allow_negative_numbers = true)]
        same_entity_above: f32,
        /// Below this cosine they are different entities, without asking; between
        /// the two the model is asked (QRMeM's disambiguation prompt).
        #[arg(long, value_name = "COSINE", default_value_t = GraphConfig::DEFAULT.apart_below, allow_negative_numbers = true)]
        different_entity_below: f32,
        /// Stop once the model calls made have spent this many tokens (prompt and
        /// reply, per process): later calls are not made, the round commits what
        /// is done (what could not be built is in the errors table as
        /// llm_over_budget), and the run ends. Replies already in the call cache
        /// cost nothing, so a run with a larger budget goes on where this stopped.
        #[arg(long, value_name = "TOKENS")]
        max_model_tokens: Option<u64>,
        #[command(flatten)]
        storage: StorageArgs,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Serve Prometheus metrics (/metrics) on ADDR while indexing, e.g.
        /// 0.0.0.0:9464: the round's progress, model calls and tokens per stage,
        /// the last commit, and the committed memory's report.
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Output rows each worker gathers before writing them as data files:
        /// bigger batches make fewer, larger files and hold more rows in memory.
        #[arg(long, value_name = "ROWS", default_value_t = DEFAULT_WRITE_BATCH_ROWS, value_parser = clap::value_parser!(usize))]
        write_batch_rows: usize,
    },
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
        /// Passages bm25 and dense return.
        #[arg(long)]
        top_k: Option<usize>,
        /// Pages ReadAgent may look up.
        #[arg(long)]
        max_pages: Option<usize>,
        /// Rounds of ILM-TR's inner loop and QRMeM's reflection.
        #[arg(long)]
        max_rounds: Option<usize>,
        /// Model tokens (prompts and replies) the question may spend [default: 100000].
        #[arg(long)]
        max_tokens: Option<usize>,
        /// Trace steps the navigation may take [default: 200].
        #[arg(long)]
        max_steps: Option<usize>,
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
        Command::Index {
            help: _,
            cluster,
            metrics_listen,
            write_batch_rows,
            source,
            s3_endpoint,
            source_options,
            watch,
            group,
            follow,
            out,
            workers,
            segment_tokens,
            min_tokens,
            max_tokens,
            max_children,
            page_min_words,
            page_max_words,
            gist_word_budget,
            corpus_tree,
            parent_max_tokens,
            memories,
            chunk_tokens,
            passage_tokens,
            raptor_max_levels,
            cluster_max_tokens,
            relation_description_tokens,
            same_entity_above,
            different_entity_below,
            max_model_tokens,
            storage,
            model,
        } => {
            cluster.resolve().map_err(anyhow::Error::from).and_then(|cluster| {
                let (llm, embed) = model.config().map_err(|e| usage(&e))?;
                let segments = SegmentConfig {
                    target_tokens: segment_tokens,
                    min_tokens: min_tokens.unwrap_or(SegmentConfig::around(segment_tokens).min_tokens),
                    max_tokens: max_tokens.unwrap_or(SegmentConfig::around(segment_tokens).max_tokens),
                };
                let pages = PageConfig {
                    min_words: page_min_words,
                    max_words: page_max_words,
                    gist_word_budget,
                };
                let options = IndexOptions {
                    source,
                    source_options: SourceOptions {
                        s3_endpoint,
                        options: source_options,
                    },
                    tables: out,
                    storage_options: storage.into_map(),
                    workers,
                    build: BuildConfig {
                        memories,
                        parent_max_tokens,
                        corpus_tree,
                        raptor: RaptorConfig {
                            chunk_tokens,
                            max_levels: raptor_max_levels,
                            cluster_max_tokens,
                            ..RaptorConfig::DEFAULT
                        },
                        graph: GraphConfig {
                            description_budget: relation_description_tokens,
                            same_above: same_entity_above,
                            apart_below: different_entity_below,
                        },
                        passage_tokens,
                        ..BuildConfig::new(segments, pages, max_children)
                    },
                    llm,
                    embed,
                    interactive,
                    cluster,
                    metrics_listen,
                    write_batch_rows,
                    max_model_tokens,
                };
                let kafka = options.source.starts_with("kafka://");
                let run: Result<(), IndexError> = match watch {
                    _ if follow && !kafka => Err(UsageError(
                        "--follow is for kafka:// sources; use --watch SECONDS for files and objects"
                            .into(),
                    )
                    .into()),
                    Some(_) if kafka => Err(UsageError(
                        "--watch is for files and objects; use --follow for kafka:// sources".into(),
                    )
                    .into()),
                    _ if options.cluster.process != 0 => {
                        compute(&options).map(|summary| print_compute_summary(&summary))
                    }
                    None if kafka => {
                        let kafka = KafkaOptions { group, follow };
                        index_kafka(&options, &kafka, print_summary)
                    }
                    None => run_index(&options).map(|summary| print_summary(&summary)),
                    Some(seconds) => memweave_pipeline::index::watch(
                        &options,
                        Duration::from_secs(seconds.max(1)),
                        print_summary,
                    ),
                };
                Ok(run?)
            })
        }
        Command::Sql {
            query,
            tables,
            version,
            format,
            output,
            storage,
        } => analytics_runtime().and_then(|runtime| {
            runtime.block_on(async {
                let catalog = open_catalog(&tables, storage.into_map(), version).await?;
                let frame = sql::plan(&catalog, &query).await.map_err(sql_error)?;
                let rows = sql::write(frame, format, output.as_deref())
                    .await
                    .map_err(sql_error)?;
                if let Some(output) = &output {
                    tracing::info!(rows, file = %output.display(), "wrote the query's rows");
                }
                Ok(())
            })
        }),
        Command::Export {
            tables,
            to,
            format: ExportFormat::Parquet,
            version,
            s3_endpoint,
            to_options,
            storage,
        } => analytics_runtime().and_then(|runtime| {
            runtime.block_on(async {
                let catalog = open_catalog(&tables, storage.into_map(), version).await?;
                let options = SourceOptions {
                    s3_endpoint,
                    options: to_options,
                };
                let (store, prefix) = object_store_at("--to", &to, &options, true)?;
                let summary = export::export(&catalog, store, prefix, &to).await?;
                print_export(&summary);
                Ok(())
            })
        }),
        Command::Report {
            tables,
            version,
            json,
            html,
            storage,
        } => analytics_runtime().and_then(|runtime| {
            runtime.block_on(async {
                let catalog = open_catalog(&tables, storage.into_map(), version).await?;
                let report = report::report(&catalog).await?;
                if let Some(file) = &html {
                    std::fs::write(file, html::html(&report))
                        .map_err(|e| UsageError(format!("--html {}: {e}", file.display())))?;
                    tracing::info!(file = %file.display(), "wrote the HTML report");
                }
                print_report(&report, json)
            })
        }),
        Command::Prompts { dir } => memweave_llm::Prompts::export(&dir)
            .map_err(|e| anyhow::Error::new(UsageError(format!("{}: {e}", dir.display()))))
            .map(|()| tracing::info!(dir = %dir.display(), "wrote the built-in prompt templates")),
        Command::Ask {
            question,
            tables,
            strategy,
            budget,
            top_k,
            max_pages,
            max_rounds,
            max_tokens,
            max_steps,
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
                options: AskOptions {
                    top_k,
                    max_pages,
                    max_rounds,
                    max_tokens,
                    max_steps,
                },
            });
            request
                .map_err(|e: RequestError| UsageError(e.to_string()).into())
                .and_then(|request| {
                    ask(
                        &request,
                        &tables,
                        json,
                        storage.into_map(),
                        &model,
                    )
                })
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

/// Flags that do not make a model or an embedder (exit code 2).
fn usage(error: &ConfigError) -> anyhow::Error {
    UsageError(error.to_string()).into()
}

/// A mistake in the query is the asker's (exit code 2).
fn sql_error(error: SqlError) -> anyhow::Error {
    if error.is_usage() {
        UsageError(error.to_string()).into()
    } else {
        error.into()
    }
}

fn analytics_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

async fn open_catalog(
    tables: &str,
    storage_options: HashMap<String, String>,
    version: Option<u64>,
) -> anyhow::Result<Catalog> {
    let store = TableStore::new(tables, storage_options).map_err(|e| UsageError(e.to_string()))?;
    Catalog::open(store, version).await.map_err(|e| match e {
        usage @ (CatalogError::NoCheckpoint { .. } | CatalogError::NoSuchEpoch { .. }) => {
            UsageError(usage.to_string()).into()
        }
        failure => failure.into(),
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

#[allow(clippy::print_stdout)]
fn print_summary(s: &IndexSummary) {
    let kinds: Vec<String> = error_kinds(&s.errors)
        .into_iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    let secs = s.wall.as_secs_f64();
    println!(
        "memweave index: done in {secs:.1}s, committed epoch {}",
        s.epoch
    );
    println!("  source      {} ({} {})", s.source, s.files, s.input_unit);
    println!("  tables      {}", s.tables);
    println!(
        "  documents   {} ({} new or changed, {} unchanged, {} deleted)",
        s.documents,
        s.changed,
        s.documents - s.changed,
        s.deleted
    );
    println!("  tokens      {}", s.tokens);
    println!("  segments    {}", s.segments);
    for (tree, shape) in &s.trees {
        println!(
            "  tree nodes  {} in {tree} ({} roots, depth {})",
            shape.nodes, shape.roots, shape.depth
        );
    }
    println!("  pages       {} (each with a gist)", s.pages);
    println!("  entities    {}", s.entities);
    println!("  relations   {}", s.relations);
    println!(
        "  embeddings  {} ({}, {} dimensions)",
        s.embeddings, s.embedder.0, s.embedder.1
    );
    if s.errors.is_empty() {
        println!("  errors      0");
    } else {
        println!(
            "  errors      {} ({}); see the errors table",
            s.errors.len(),
            kinds.join(", ")
        );
    }
    print_model(&s.backend, &s.cache, s.pool.as_ref());
    if s.cache.refused > 0 {
        println!(
            "  stopped     the model-token budget (--max-model-tokens) is spent: {} tokens in {} calls; {} calls were not made, and what needed them is in the errors table (llm_over_budget). Run again with a larger budget to go on: replies already made come from the call cache.",
            s.cache.tokens, s.cache.calls, s.cache.refused
        );
    }
    println!(
        "  time        read {:.1}s, build {:.1}s, write {:.1}s",
        s.stages.read.as_secs_f64(),
        s.stages.build.as_secs_f64(),
        s.stages.write.as_secs_f64()
    );
    println!(
        "  written     {} rows, staged while the dataflow built",
        s.rows_written
    );
    println!(
        "  throughput  {:.1} documents/s",
        s.documents as f64 / secs.max(1e-3)
    );
}

#[allow(clippy::print_stdout)]
fn print_compute_summary(s: &ComputeSummary) {
    println!(
        "memweave index: process {} of {} stopped after {:.1}s ({} rounds seen end); process 0 read the source and committed the tables",
        s.process,
        s.processes,
        s.wall.as_secs_f64(),
        s.rounds
    );
    print_model(&s.backend, &s.cache, s.pool.as_ref());
}

/// The model's lines of a summary: calls, cache hits, and the pool's counters.
#[allow(clippy::print_stdout)]
fn print_model(backend: &str, cache: &CacheReport, pool: Option<&PoolReport>) {
    println!(
        "  model       {backend}: {} calls ({} tokens in and out), {} answered from the cache",
        cache.calls, cache.tokens, cache.hits
    );
    if let Some(pool) = pool {
        println!(
            "  pool        {} requests ({} retried: {} rate-limited, {} server errors, {} timeouts, {} malformed; {} cut off by the output budget and asked again), {} tokens in, {} out, peak {} in flight",
            pool.requests,
            pool.requests.saturating_sub(pool.succeeded),
            pool.rate_limited,
            pool.server_errors,
            pool.timeouts,
            pool.malformed,
            pool.truncated,
            pool.tokens_in,
            pool.tokens_out,
            pool.peak_in_flight
        );
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
    let (llm, embed) = flags.config().map_err(|e| usage(&e))?;
    // Calls are cached for this question only: asking writes nothing to the tables.
    let model = llm.model(CallCache::in_memory()).map_err(|e| usage(&e))?;
    let store = TableStore::new(tables, storage_options).map_err(|e| UsageError(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let embedder = runtime
        .block_on(embed.embedder(CallCache::in_memory()))
        .map_err(|e| usage(&e))?;
    let snapshot = runtime
        .block_on(Snapshot::load_latest(
            &store,
            Arc::new(ReadCache::new(ASK_CACHE_MIB)),
        ))
        .map_err(|e| match e {
            older @ StoreError::OlderMemory { .. } => UsageError(older.to_string()).into(),
            other => anyhow::Error::from(other),
        })?
        .ok_or_else(|| {
            UsageError(format!(
                "no memory under {tables}: run `memweave index SOURCE --out {tables}` first"
            ))
        })?;
    runtime
        .block_on(snapshot.validate(request))?
        .map_err(|e| UsageError(e.to_string()))?;
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
        println!(
            "  [{}] \"{}\" ({}), characters {}–{}",
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
        println!(
            "{:>3} {indent}{}{target}{level}  score {:.2}",
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
