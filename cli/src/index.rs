//! `memweave index`: its flags, the run they ask for, and its summary.

use std::num::NonZeroUsize;
use std::time::Duration;

use memweave_ingest::sandbox::{
    DEFAULT_PARSE_MEMORY_BYTES, DEFAULT_PARSE_TIME, ParseLimits, ParserCommand,
};
use memweave_ingest::{
    Access, Columns, DEFAULT_MAX_INFLATED_BYTES, DEFAULT_MAX_RECORD_BYTES, Parsers, ReadOptions,
};
use memweave_llm::ModelArgs;
use memweave_llm::cache::CacheReport;
use memweave_llm::pool::PoolReport;
use memweave_operators::build::{BuildConfig, Memories};
use memweave_operators::embed::HashingEmbedder;
use memweave_operators::entity_graph::GraphConfig;
use memweave_operators::paginate::PageConfig;
use memweave_operators::raptor::RaptorConfig;
use memweave_operators::segment::SegmentConfig;
use memweave_operators::tree::{DEFAULT_MAX_CHILDREN, DEFAULT_PARENT_MAX_TOKENS};
use memweave_pipeline::cluster::ClusterArgs;
use memweave_pipeline::index::kafka::{DEFAULT_ROUND_MESSAGES, KafkaOptions, index_kafka};
use memweave_pipeline::index::{
    ComputeSummary, DEFAULT_WRITE_BATCH_ROWS, IndexOptions, IndexSummary, compute, error_kinds,
    run_index, watch,
};
use memweave_pipeline::source::{
    AllowedUris, DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_DOCUMENT_BYTES, FetchLimits, SourceOptions,
};
use memweave_pipeline::supervise::Flights;
use memweave_pipeline::{IndexError, UsageError};
use memweave_process::{StorageArgs, parse_key_value};
use memweave_schemas::store::Collected;

use crate::gc::{RetentionArgs, print_collected};

// The flags of `memweave index`; its help is the `Index` command's doc.
#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// Print help (-h is the hostfile, as for every timely program).
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// File, directory, object-store URL or kafka:// topic to index.
    #[arg(env = "MEMWEAVE_SOURCE")]
    source: String,
    /// What SOURCE is called in a memory that other sources share (each
    /// indexed with its own name, one run at a time): its documents are
    /// keyed by NAME and their place under SOURCE, and a run leaves the
    /// other sources' documents alone. Without a name, SOURCE is the
    /// memory's only source, and a run retracts whatever it no longer holds.
    #[arg(long, value_name = "NAME", value_parser = parse_source_name)]
    source_name: Option<String>,
    /// Endpoint of an S3-compatible server for an s3:// SOURCE (http:// allowed).
    #[arg(long, env = "MEMWEAVE_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// Object-store setting for SOURCE, KEY=VALUE as object_store names them
    /// (aws_region, aws_virtual_hosted_style_request, …); repeatable.
    #[arg(long = "source-option", value_parser = parse_key_value)]
    source_options: Vec<(String, String)>,
    /// A dataset's (Parquet, Arrow, JSON Lines) column holding each row's id:
    /// a string or an integer, what the row's document is known by across runs.
    #[arg(long, value_name = "COLUMN", default_value = "id")]
    id_column: String,
    /// A dataset's column holding each row's text (strings).
    #[arg(long, value_name = "COLUMN", default_value = "text")]
    text_column: String,
    /// A dataset's column holding each row's title, if it has one (else the
    /// id is the title).
    #[arg(long, value_name = "COLUMN", default_value = "title")]
    title_column: String,
    /// A dataset's column (or JSON field) holding each row's access labels,
    /// the groups that may read it: a list of strings, or one
    /// comma-separated string. A row without (null, or no such column)
    /// takes its file's labels (--acl-map, --acl-default).
    #[arg(long, value_name = "COLUMN")]
    acl_column: Option<String>,
    /// A JSON object (or, named .toml, a TOML table) of path prefixes under
    /// SOURCE to the labels their files' documents carry, a list or one
    /// comma-separated string each: {"hr/": ["hr"], "": ["staff"]}. The
    /// longest prefix of a file's path, in whole components, wins.
    #[arg(long, value_name = "FILE")]
    acl_map: Option<std::path::PathBuf>,
    /// The labels, comma-separated, of a document that neither its own
    /// record nor --acl-map labels. Empty by default: such a document is
    /// read by the administrator's bearer token alone, never by a reader's
    /// token, so that a document no one labelled is no one's.
    #[arg(long, value_name = "LABELS", default_value = "")]
    acl_default: String,
    /// Most a DOCX or EPUB file (zip containers) may inflate to; a larger one
    /// is a too_large error, not read.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_INFLATED_BYTES >> 20)]
    max_inflated_mib: u64,
    /// Parse files in this process rather than in parser processes (where a
    /// crash, a stack overflow or a hang on a hostile file costs that file
    /// alone); for debugging a parser.
    #[arg(long)]
    parse_in_process: bool,
    /// Memory each parser process may use (its heap and stacks, not its
    /// binary); a file that needs more is a too_large error.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_PARSE_MEMORY_BYTES >> 20)]
    parser_memory_mib: u64,
    /// Longest one file's parse may take; a slower one is a timeout error.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_PARSE_TIME.as_secs())]
    parse_timeout: u64,
    /// Most bytes one file or object may have; a larger one is a too_large
    /// error, not read. Datasets (read a batch at a time) are not capped.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_DOCUMENT_BYTES >> 20)]
    max_document_mib: u64,
    /// Longest one file or object may take to fetch (a dataset object: the
    /// longest wait for its next chunk); a slower one is a timeout error.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_FETCH_TIMEOUT.as_secs())]
    fetch_timeout: u64,
    /// A prefix a kafka:// message's `uri` may name: an object-store URL
    /// (s3://BUCKET/PREFIX) or a local folder; repeatable. With none, a
    /// message with a `uri` is a forbidden_uri error: the topic's writers
    /// choose the uri, and it is read with the indexer's own access.
    #[arg(long = "allow-uri", value_name = "PREFIX")]
    allow_uris: Vec<String>,
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
    /// Most messages of a kafka:// SOURCE one round absorbs before it commits
    /// [default: 1000]. Each round's cross-document work spans the whole
    /// memory, so a backlog loads faster in larger rounds; smaller ones bound
    /// a round's memory and what a crash makes the next process read again.
    #[arg(long, value_name = "MESSAGES")]
    round_messages: Option<NonZeroUsize>,
    /// Root of the memory tables: a path or an object-store URL (s3://…).
    #[arg(long, env = "MEMWEAVE_TABLES")]
    out: String,
    /// Dataflow worker threads.
    #[arg(short = 'w', long, default_value_t = memweave_pipeline::index::default_workers())]
    workers: usize,
    #[command(flatten)]
    build: BuildArgs,
    /// Stop once the model calls made have spent this many tokens (prompt and
    /// reply, per process): later calls are not made, the round commits what
    /// is done (what could not be built is in the errors table as
    /// llm_over_budget), and the run ends. Replies already in the call cache
    /// cost nothing, so a run with a larger budget goes on where this stopped.
    #[arg(long, value_name = "TOKENS")]
    max_model_tokens: Option<u64>,
    #[command(flatten)]
    storage: StorageArgs,
    /// After every commit, what the memory keeps of its history.
    #[command(flatten)]
    retention: RetentionArgs,
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
}

/// What the memories are cut into and how they are built.
#[derive(Debug, clap::Args)]
struct BuildArgs {
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
    /// Ask the model to summarise segments shorter than --min-tokens and to
    /// gist pages shorter than --page-min-words, as the papers do for every
    /// unit; by default such a text (a short document, or a long one's
    /// tail) is its own leaf summary and gist, with no call.
    #[arg(long)]
    shorten_short_texts: bool,
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
}

impl IndexArgs {
    /// Runs what the flags ask for: one index, a --watch, a Kafka topic, or a
    /// cluster process's share; prints each committed round's summary. The
    /// builds are reported to `flights`, the supervising process's.
    pub fn run(self, interactive: bool, flights: Flights) -> anyhow::Result<()> {
        let (watch_every, group, follow) = (self.watch, self.group.clone(), self.follow);
        let round_messages = self.round_messages;
        let options = self.options(interactive, flights)?;
        let kafka = options.source.starts_with("kafka://");
        let run: Result<(), IndexError> = match watch_every {
            _ if follow && !kafka => Err(UsageError(
                "--follow is for kafka:// sources; use --watch SECONDS for files and objects"
                    .into(),
            )
            .into()),
            _ if round_messages.is_some() && !kafka => Err(UsageError(
                "--round-messages is for kafka:// sources: files and objects are read in one round"
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
                let kafka = KafkaOptions {
                    group,
                    follow,
                    round_messages: round_messages.unwrap_or(DEFAULT_ROUND_MESSAGES),
                };
                index_kafka(&options, &kafka, print_summary)
            }
            None => run_index(&options).map(|summary| print_summary(&summary)),
            Some(seconds) => watch(&options, Duration::from_secs(seconds.max(1)), print_summary),
        };
        Ok(run?)
    }

    /// The run's options, once the cluster and the model flags are checked;
    /// the builds reported to `flights`.
    fn options(self, interactive: bool, flights: Flights) -> anyhow::Result<IndexOptions> {
        let cluster = self.cluster.resolve()?;
        let (llm, embed) = self.model.config().map_err(UsageError::of)?;
        let default = memweave_schemas::acl::comma_separated(&self.acl_default)
            .map_err(|e| UsageError(format!("--acl-default: {e}")))?;
        let access = match &self.acl_map {
            Some(_) if self.source.starts_with("kafka://") => {
                return Err(UsageError(
                    "--acl-map labels files and objects; a kafka:// message gives its own \"acl\""
                        .into(),
                )
                .into());
            }
            Some(map) => Access::from_file(map, default).map_err(UsageError)?,
            None => Access::only_default(default),
        };
        Ok(IndexOptions {
            source: self.source,
            source_name: self.source_name.unwrap_or_default(),
            source_options: SourceOptions {
                s3_endpoint: self.s3_endpoint,
                options: self.source_options,
                read: ReadOptions {
                    columns: Columns {
                        id: self.id_column,
                        text: self.text_column,
                        title: self.title_column,
                        acl: self.acl_column,
                    },
                    max_inflated_bytes: self.max_inflated_mib << 20,
                    max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
                    access,
                    parsers: if self.parse_in_process {
                        Parsers::default()
                    } else {
                        Parsers::isolated(ParserCommand {
                            program: std::env::current_exe()?,
                            args: vec!["parse-worker".into()],
                            limits: ParseLimits {
                                memory_bytes: self.parser_memory_mib << 20,
                                time: Duration::from_secs(self.parse_timeout.max(1)),
                            },
                        })
                    },
                },
                fetch: FetchLimits {
                    max_bytes: self.max_document_mib << 20,
                    timeout: Duration::from_secs(self.fetch_timeout.max(1)),
                },
                allowed_uris: AllowedUris::parse(&self.allow_uris)?,
            },
            tables: self.out,
            storage_options: self.storage.into_map(),
            workers: self.workers,
            build: self.build.config(),
            llm,
            embed,
            interactive,
            cluster,
            metrics_listen: self.metrics_listen,
            write_batch_rows: self.write_batch_rows,
            max_model_tokens: self.max_model_tokens,
            flights,
            retention: self.retention.retention(),
        })
    }
}

impl BuildArgs {
    fn config(self) -> BuildConfig {
        let around = SegmentConfig::around(self.segment_tokens);
        let segments = SegmentConfig {
            target_tokens: self.segment_tokens,
            min_tokens: self.min_tokens.unwrap_or(around.min_tokens),
            max_tokens: self.max_tokens.unwrap_or(around.max_tokens),
        };
        let pages = PageConfig {
            min_words: self.page_min_words,
            max_words: self.page_max_words,
            gist_word_budget: self.gist_word_budget,
        };
        BuildConfig {
            memories: self.memories,
            parent_max_tokens: self.parent_max_tokens,
            corpus_tree: self.corpus_tree,
            shorten_short_texts: self.shorten_short_texts,
            raptor: RaptorConfig {
                chunk_tokens: self.chunk_tokens,
                max_levels: self.raptor_max_levels,
                cluster_max_tokens: self.cluster_max_tokens,
                ..RaptorConfig::DEFAULT
            },
            graph: GraphConfig {
                description_budget: self.relation_description_tokens,
                same_above: self.same_entity_above,
                apart_below: self.different_entity_below,
            },
            passage_tokens: self.passage_tokens,
            ..BuildConfig::new(segments, pages, self.max_children)
        }
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
    if HashingEmbedder::for_model(&s.embedder.model).is_some() {
        println!(
            "  embeddings  none stored ({}, {} dimensions: recomputed from the rows)",
            s.embedder.model, s.embedder.width
        );
    } else {
        println!(
            "  embeddings  {} ({}, {} dimensions)",
            s.embeddings, s.embedder.model, s.embedder.width
        );
    }
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
    if s.restored_bytes > 0 {
        println!(
            "  restored    {:.1} MB of the documents' states ({:.2} bytes per character of text): the unchanged documents were not built again",
            s.restored_bytes as f64 / 1e6,
            s.restored_bytes as f64 / s.chars.max(1) as f64
        );
    }
    println!(
        "  throughput  {:.1} documents/s",
        s.documents as f64 / secs.max(1e-3)
    );
    if s.collected != Collected::default() {
        print_collected("  retention  ", &s.collected);
    }
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

/// A source's name: printable, and short enough to read in a checkpoint.
fn parse_source_name(name: &str) -> Result<String, String> {
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err("a source name is 1 to 200 bytes of printable characters".into());
    }
    Ok(name.to_string())
}
