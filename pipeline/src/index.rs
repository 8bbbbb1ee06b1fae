//! `memweave index`: keeps the memory tables equal to what the source holds, one
//! round at a time. A round finds what changed since the last one (or, for a
//! process's first round, since the last checkpoint), feeds only that to the
//! dataflow, applies the rows it changed to the tables (deletes, then appends)
//! and commits a checkpoint naming every table's version.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use memweave_llm::cache::CacheReport;
use memweave_llm::pool::PoolReport;
use memweave_llm::{EmbedConfig, LlmConfig};
use memweave_operators::build::{BuildConfig, Document};
use memweave_schemas::ErrorRow;
use memweave_schemas::store::{Collected, Retention};

use crate::IndexError;
use crate::cluster::Cluster;
use crate::origins::{Held, Record};
use crate::positions::Positions;
use crate::source::{Source, SourceOptions};
use crate::supervise::Flights;

mod checkpoint;
mod commit;
mod context;
mod engine;
mod files;
mod indexer;
pub mod kafka;
mod pending;
mod restore;
mod shared;
mod summary;
mod versions;

use context::SourceContext;
pub use engine::{ComputeSummary, compute};
use files::FileRounds;
pub use indexer::Indexer;
use pending::Documents;

/// Longest an interrupted build waits for the model calls in flight.
const INTERRUPT_PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// A path, or an object-store URL (s3://, gs://, az://, file://).
    pub source: String,
    /// What the source is called in a memory other sources share
    /// (`--source-name`): its documents are keyed under it, and its runs
    /// leave the other sources' documents alone. Empty: the memory's one
    /// source, which owns every document.
    pub source_name: String,
    pub source_options: SourceOptions,
    pub tables: String,
    pub storage_options: HashMap<String, String>,
    pub workers: usize,
    pub build: BuildConfig,
    /// The model backend and how to reach it.
    pub llm: LlmConfig,
    /// How texts become vectors.
    pub embed: EmbedConfig,
    /// Draw a progress bar when stderr is a terminal.
    pub interactive: bool,
    /// This process's place among the run's processes.
    pub cluster: Cluster,
    /// Serve Prometheus metrics on this address while indexing.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Output rows a worker gathers before writing them as data files.
    pub write_batch_rows: usize,
    /// Model tokens (prompt and reply) this process may spend; past them no
    /// call is made, the round commits what is done and the run stops.
    pub max_model_tokens: Option<u64>,
    /// What the supervising process is told of the builds, and has learnt.
    pub flights: Flights,
    /// What the memory keeps of its history: after each commit, the rest is
    /// removed.
    pub retention: Retention,
}

impl IndexOptions {
    /// Indexing `source` into `tables` as `memweave index SOURCE --out TABLES`
    /// does with no other flag: the default sizes and memories, the offline
    /// extractive backend and hashing embedder, one worker per core, no
    /// progress bar.
    pub fn new(source: impl Into<String>, tables: impl Into<String>) -> Self {
        IndexOptions {
            source: source.into(),
            source_name: String::new(),
            source_options: SourceOptions::default(),
            tables: tables.into(),
            storage_options: HashMap::new(),
            workers: default_workers(),
            build: BuildConfig::DEFAULT,
            llm: LlmConfig::default(),
            embed: EmbedConfig::default(),
            interactive: false,
            cluster: Cluster::default(),
            metrics_listen: None,
            write_batch_rows: DEFAULT_WRITE_BATCH_ROWS,
            max_model_tokens: None,
            flights: Flights::default(),
            retention: Retention::default(),
        }
    }
}

/// Worker threads unless told otherwise: one per core.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Rows per written batch unless told otherwise. A worker holds a batch of
/// whole rows (texts, vectors) until it is written: at 10M tokens 32,768 rows
/// held about 280 MiB more at peak than 4,096, for the same write time; the
/// smaller files this makes are merged by the commit's compaction.
pub const DEFAULT_WRITE_BATCH_ROWS: usize = 4_096;

/// What a run did, for the closing summary.
#[derive(Debug, Clone)]
pub struct IndexSummary {
    pub source: String,
    pub tables: String,
    pub epoch: u64,
    /// Files (or messages) the run read.
    pub files: usize,
    /// What `files` counts: "files" or "messages".
    pub input_unit: &'static str,
    pub documents: usize,
    /// Documents new or changed since the previous checkpoint.
    pub changed: usize,
    /// Documents of the previous checkpoint the source no longer holds.
    pub deleted: usize,
    pub tokens: u64,
    pub segments: usize,
    /// Per tree (memwalker, raptor, …): nodes, roots, depth.
    pub trees: BTreeMap<String, TreeShape>,
    pub pages: usize,
    pub entities: usize,
    pub relations: usize,
    pub embeddings: usize,
    /// What made the vectors.
    pub embedder: EmbedderName,
    pub errors: Vec<ErrorRow>,
    pub wall: Duration,
    /// Where `wall` went.
    pub stages: Stages,
    /// Rows the round wrote, all tables together.
    pub rows_written: u64,
    /// Bytes of the documents' states this process restored its dataflow
    /// from in this round (its first with changes), instead of rebuilding
    /// the unchanged documents.
    pub restored_bytes: u64,
    /// Characters of the documents' texts, all documents together.
    pub chars: u64,
    pub backend: String,
    pub cache: CacheReport,
    /// The pool's counters, with the openai backend.
    pub pool: Option<PoolReport>,
    /// What the retention policy removed after the commit.
    pub collected: Collected,
}

/// An embedder as its vectors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderName {
    /// The `embeddings.model` of its vectors.
    pub model: String,
    pub width: usize,
}

/// A round's wall time by stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stages {
    /// Listing and reading files (or consuming messages), parsing, diffing.
    pub read: Duration,
    /// The dataflow: every memory built (model calls, embeddings, clustering).
    pub build: Duration,
    /// After the dataflow: the last rows' writes, the deletes, the commit of
    /// every table and the checkpoint. (Rows are written while the dataflow
    /// builds; that time is in `build`.)
    pub write: Duration,
}

/// How big one kind of tree came out.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeShape {
    pub nodes: usize,
    pub roots: usize,
    pub depth: u32,
}

/// What a round is told about one origin (a file, or a streamed document).
#[derive(Debug)]
enum Update {
    /// Its new input, texts included (a streamed message).
    #[cfg_attr(
        not(feature = "kafka"),
        allow(dead_code, reason = "only the Kafka source streams")
    )]
    Ready(Fresh),
    /// To read through the round's [`Reader`] when its epoch is fed (a
    /// listed file).
    Read,
    /// Its input as the last checkpoint left it, fed again because the round
    /// rebuilds every document (see [`Carried`]): texts are read from the
    /// `documents` table when fed.
    Carried(Held),
    /// The origin is gone.
    Gone,
}

/// An origin's input as just read: its documents with their texts, each with
/// the time it was first seen, and the ingestion errors it caused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fresh {
    /// The file's version (ETag, size@mtime) when it was read.
    pub version: Option<String>,
    pub records: Vec<(Document, i64)>,
    /// Or its documents without their texts, which stay in the file (a
    /// dataset's rows): they are read again as they are sent, with
    /// [`Reader::documents`].
    pub unread: Vec<Record>,
    pub errors: Vec<ErrorRow>,
}

/// An origin's input with the worker of this process that feeds it: origins
/// are sharded across workers, and one stays with its worker.
#[derive(Debug)]
struct Routed<T> {
    pub peer: usize,
    pub input: T,
}

impl<T> Routed<T> {
    fn to(peer: usize, input: T) -> Self {
        Routed { peer, input }
    }
}

/// What a round changes, by origin. Origins not named are unchanged.
type Updates = BTreeMap<String, Routed<Update>>;

/// Every origin as the last checkpoint left it, for a process's first round,
/// each with the worker that would feed it; updates are what changed since.
/// Where the checkpoint's documents' states can be restored, the round takes
/// these as what the dataflow holds, and feeds only the updates; elsewhere
/// (a memory's first build by this version, or by another configuration) it
/// feeds them all, and its rows replace the tables'.
type Carried = BTreeMap<String, Routed<Held>>;

/// Where a round reads the origins a source names with [`Update::Read`]
/// (a listing of files; a stream's updates carry their texts).
trait Reader {
    /// Reads `origins` into their inputs, each document versioned against
    /// what the process has seen; an origin that cannot be read is absent.
    fn read(&self, cx: &SourceContext<'_>, origins: Vec<&str>) -> HashMap<String, Fresh>;

    /// `origin`'s documents read again, in the order it holds them, for the
    /// texts [`Reader::read`] left in it; `None` for an origin it does not
    /// know.
    fn documents(&self, origin: &str) -> Option<Documents<'_>>;
}

/// What a source hands the round it drives: the origins that changed since
/// the last round, where the source stands after them (the checkpoint records
/// it), and where the origins it names are read.
struct RoundInput<'a> {
    pub updates: Updates,
    /// Every origin as the last checkpoint left it: a process's first round
    /// alone has any.
    pub carried: Carried,
    pub positions: Positions,
    /// The source's own errors, of no origin (files a listing skipped for
    /// their type), which replace the last round's; `None` from a source
    /// that has none (a stream).
    pub source_errors: Option<Vec<ErrorRow>>,
    /// Where origins named by [`Update::Read`] are read; `None` from a
    /// source whose updates carry their texts.
    pub reader: Option<Box<dyn Reader + 'a>>,
    pub started: Instant,
}

/// A source as the round drives it, whatever it is (files and objects, a
/// Kafka topic): rounds until it has nothing more for this run.
trait RoundSource {
    /// The next round's input, waiting for one if the source follows its
    /// changes; `None` ends the run.
    fn next_round(&mut self, cx: &SourceContext<'_>) -> Result<Option<RoundInput<'_>>, IndexError>;

    /// The round committed: the source fills in its part of the summary and
    /// acknowledges what the round consumed.
    fn committed(&mut self, summary: &mut IndexSummary);
}

/// Indexes `options.source` once: the tables end equal to what it holds now.
pub fn run_index(options: &IndexOptions) -> Result<IndexSummary, IndexError> {
    let source = Source::open(&options.source, &options.source_options)?;
    Indexer::open(options)?.index_files(&source)
}

/// Indexes, then looks at the source every `every` and indexes what changed;
/// the dataflow stays up between rounds, so a round costs what changed.
/// Returns only on an error or a signal.
pub fn watch(
    options: &IndexOptions,
    every: Duration,
    report: impl FnMut(&IndexSummary),
) -> Result<(), IndexError> {
    let source = Source::open(&options.source, &options.source_options)?;
    let read = options.source_options.read.clone();
    let mut rounds = FileRounds::watching(&source, read, every);
    Indexer::open(options)?.run(&mut rounds, report)?;
    Ok(())
}

/// Error counts by kind, in name order.
pub fn error_kinds(errors: &[ErrorRow]) -> BTreeMap<&str, usize> {
    let mut kinds = BTreeMap::new();
    for error in errors {
        *kinds.entry(error.kind.as_str()).or_insert(0) += 1;
    }
    kinds
}
