//! Why an indexing run stopped. The command tells three kinds apart by their
//! exit codes: the user's mistake ([`IndexError::is_usage`], 2), a signal
//! ([`IndexError::Interrupted`], 130) and a failure (1).

use std::error::Error as _;
use std::fmt::Write as _;

use memweave_llm::cache::CacheError;
use memweave_schemas::Table;
use memweave_schemas::store::StoreError;
#[cfg(feature = "kafka")]
use rdkafka::error::KafkaError;

/// A mistake in what the user asked for (a missing source, an unwritable tables
/// root, bad sizes): the command reports it in one line and exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    /// `error` as the user's mistake: its message, whatever its type.
    pub fn of(error: impl std::fmt::Display) -> Self {
        UsageError(error.to_string())
    }
}

/// Why an indexing run (or a cluster process's share of one) stopped. A
/// variant that names what was being done keeps the failure under it as its
/// source, so `{:#}` prints the whole chain.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// Stopped by a signal after saving the model calls; nothing was committed.
    #[error("interrupted: the model calls made so far are saved; re-run to resume")]
    Interrupted,
    #[error("process {process} of a cluster computes; process 0 indexes")]
    NotIndexing { process: usize },
    #[error("reading the last checkpoint under {root}")]
    Checkpoint {
        root: String,
        #[source]
        source: Box<IndexError>,
    },
    #[error("the tables may be from an older memweave; index into a new --out to rebuild them")]
    OlderTables(#[source] Box<IndexError>),
    #[error("the {table} table's columns are not memweave's: {schema}")]
    ForeignTable { table: Table, schema: String },
    #[error("reading the call cache under {root}")]
    CallCache {
        root: String,
        #[source]
        source: CacheError,
    },
    #[error("listing {name}")]
    Listing {
        name: String,
        #[source]
        source: Box<IndexError>,
    },
    /// Not a source error: the object store's own message says which, and the
    /// hint says where to look.
    #[error(
        "{0} (check the endpoint, --s3-endpoint, and the credentials: \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, GOOGLE_*, AZURE_*)"
    )]
    ListObjects(object_store::Error),
    #[error(
        "a round names origins to read, but its source reads none (a stream's updates carry their texts)"
    )]
    NothingReadsOrigins,
    #[error(
        "the documents table does not hold version {version} of {doc_id} ({source_uri}) to retract"
    )]
    NotStored {
        version: u64,
        doc_id: String,
        source_uri: String,
    },
    /// A `doc_states` row the restore cannot read back: the tables were
    /// changed by something other than memweave.
    #[error(
        "the state of {doc_id} in the doc_states table does not read ({why}); index into a new --out to rebuild"
    )]
    UnreadableState { doc_id: String, why: String },
    #[error("no text to index for {doc_id} ({source_uri})")]
    NoText { doc_id: String, source_uri: String },
    #[error("{source_uri} changed while it was indexed; run again")]
    ChangedWhileIndexed { source_uri: String },
    #[error("the vector of {owner} has {components} components, the embeddings table {width}")]
    VectorWidth {
        owner: String,
        components: usize,
        width: usize,
    },
    #[error("staging rows")]
    Staging(#[source] StagingError),
    #[error("writing the tables under {root}")]
    Commit {
        root: String,
        #[source]
        source: Box<IndexError>,
    },
    /// Timely's reason, which it gives as text.
    #[error("starting the dataflow workers: {0}")]
    StartWorkers(String),
    #[error("starting the cluster's network threads")]
    Network(#[source] std::io::Error),
    #[error("process {process} cannot listen on {address}")]
    Listen {
        process: usize,
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("a dataflow worker stopped")]
    WorkerStopped,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl IndexError {
    /// Whether the user's request is at fault, under whatever was being done.
    pub fn is_usage(&self) -> bool {
        match self {
            IndexError::Usage(_) => true,
            IndexError::Checkpoint { source, .. }
            | IndexError::OlderTables(source)
            | IndexError::Listing { source, .. }
            | IndexError::Commit { source, .. } => source.is_usage(),
            _ => false,
        }
    }
}

/// Why a worker could not stage a batch of rows, as it travels to worker 0
/// (maybe in another process, so as text): the failure and its causes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{0}")]
pub struct StagingError(String);

impl From<IndexError> for StagingError {
    fn from(error: IndexError) -> Self {
        let mut text = error.to_string();
        let mut cause = error.source();
        while let Some(error) = cause {
            let _ = write!(text, ": {error}");
            cause = error.source();
        }
        StagingError(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_is_one_under_what_was_being_done() {
        let usage = IndexError::Checkpoint {
            root: "/t".into(),
            source: Box::new(UsageError("older tables".into()).into()),
        };
        assert!(usage.is_usage());
        let failure = IndexError::Checkpoint {
            root: "/t".into(),
            source: Box::new(IndexError::WorkerStopped),
        };
        assert!(!failure.is_usage());
        assert!(!IndexError::Interrupted.is_usage());
    }

    #[test]
    fn a_staging_error_keeps_every_cause() {
        let error = IndexError::Commit {
            root: "/t".into(),
            source: Box::new(IndexError::WorkerStopped),
        };
        let staging = StagingError::from(error);
        assert_eq!(
            staging.to_string(),
            "writing the tables under /t: a dataflow worker stopped"
        );
    }
}
