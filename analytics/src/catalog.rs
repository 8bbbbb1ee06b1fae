//! Every memory table as of one checkpoint, registered by name in a DataFusion
//! session: each table at the version the checkpoint names (so a query never
//! sees half a round), `checkpoints` up to that epoch.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use lance::datafusion::LanceTableProvider;
use memweave_schemas::{CheckpointRow, StoreError, Table, TableStore, acl, to_batch};

/// Why a catalog could not be opened: the first two are the caller's to fix.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("no checkpoint under {root}: index into it first (memweave index SOURCE --out {root})")]
    NoCheckpoint { root: String },
    #[error("no checkpoint {epoch} under {root}: {}", kept_checkpoints(*.oldest, *.newest))]
    NoSuchEpoch {
        root: String,
        epoch: u64,
        oldest: u64,
        newest: u64,
    },
    #[error("{root}: version {version} of {table} is gone")]
    VersionGone {
        root: String,
        table: &'static str,
        version: u64,
    },
    /// Reading the tables failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Registering a table with the session failed.
    #[error(transparent)]
    Session(#[from] DataFusionError),
}

/// Which checkpoints a memory has, for a message about one it has not:
/// those before `oldest` were removed by its retention policy.
pub fn kept_checkpoints(oldest: u64, newest: u64) -> String {
    match oldest {
        1 => format!("its checkpoints are 1 to {newest}"),
        _ => format!(
            "its checkpoints are {oldest} to {newest} (the older ones were removed by the \
             retention policy: --keep-checkpoints, --keep-for)"
        ),
    }
}

/// A session over one checkpoint's tables.
pub struct Catalog {
    pub checkpoint: CheckpointRow,
    pub context: SessionContext,
    store: TableStore,
    /// The groups whose rows the tables hold, where they hold only those.
    readers_groups: Option<Vec<String>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("root", &self.store.root())
            .field("epoch", &self.checkpoint.epoch)
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// The tables of checkpoint `epoch`, else of the newest.
    pub async fn open(store: TableStore, epoch: Option<u64>) -> Result<Catalog, CatalogError> {
        Self::open_as(store, epoch, None).await
    }

    /// [`Catalog::open`], each table holding only the rows a reader of
    /// `groups` may read, when given ([`memweave_schemas::acl::readable`]):
    /// the memory tables and the lexicon their readable rows, `llm_calls`
    /// the calls about readable documents, `call_stats` (counts of every
    /// document's calls) nothing.
    pub async fn open_as(
        store: TableStore,
        epoch: Option<u64>,
        groups: Option<&[String]>,
    ) -> Result<Catalog, CatalogError> {
        let mut checkpoints: Vec<CheckpointRow> = store.read_rows(None).await?;
        checkpoints.sort_by_key(|c| c.epoch);
        let root = store.root().to_string();
        let (Some(oldest), Some(newest)) = (checkpoints.first(), checkpoints.last()) else {
            return Err(CatalogError::NoCheckpoint { root });
        };
        let (oldest, newest) = (oldest.epoch, newest.epoch);
        let epoch = epoch.unwrap_or(newest);
        let Some(at) = checkpoints.iter().position(|c| c.epoch == epoch) else {
            return Err(CatalogError::NoSuchEpoch {
                root,
                epoch,
                oldest,
                newest,
            });
        };
        checkpoints.truncate(at + 1);
        let checkpoint = checkpoints[at].clone();
        let context = register(&store, &checkpoint, &checkpoints, groups).await?;
        Ok(Catalog {
            checkpoint,
            context,
            store,
            readers_groups: groups.map(<[String]>::to_vec),
        })
    }

    pub fn store(&self) -> &TableStore {
        &self.store
    }

    /// Whether the tables hold only some readers' rows ([`Catalog::open_as`]).
    pub fn is_restricted(&self) -> bool {
        self.readers_groups.is_some()
    }
}

/// A session with the tables of `checkpoint` and the `checkpoints` up to it.
async fn register(
    store: &TableStore,
    checkpoint: &CheckpointRow,
    checkpoints: &[CheckpointRow],
    groups: Option<&[String]>,
) -> Result<SessionContext, CatalogError> {
    let context = SessionContext::new();
    for table in Table::data_tables() {
        let provider: Arc<dyn datafusion::catalog::TableProvider> =
            match checkpoint.version_of(table) {
                Some(version) => {
                    let dataset = store.dataset(table, Some(version)).await?.ok_or_else(|| {
                        CatalogError::VersionGone {
                            root: store.root().to_string(),
                            table: table.name(),
                            version,
                        }
                    })?;
                    Arc::new(LanceTableProvider::new(Arc::new(dataset), false, false))
                }
                // A table the checkpoint does not name has no rows in it.
                None => Arc::new(MemTable::try_new(table.schema(), vec![vec![]])?),
            };
        match groups {
            None => {
                context.register_table(table.name(), provider)?;
            }
            Some(groups) => restrict(&context, table, provider, groups).await?,
        }
    }
    let rows: Vec<&CheckpointRow> = checkpoints.iter().collect();
    let batch = to_batch(&rows)?;
    let checkpoints = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    context.register_table(Table::Checkpoints.name(), Arc::new(checkpoints))?;
    Ok(context)
}

/// `table` registered as a view of `provider`'s rows a reader of `groups`
/// may read ([`Catalog::open_as`]). Registered after `documents`, which
/// `llm_calls` is filtered by.
async fn restrict(
    context: &SessionContext,
    table: Table,
    provider: Arc<dyn datafusion::catalog::TableProvider>,
    groups: &[String],
) -> Result<(), CatalogError> {
    let labelled = provider
        .schema()
        .column_with_name(acl::ACL_COLUMN)
        .is_some();
    let readable = match table {
        Table::LlmCalls => "doc_id IN (SELECT doc_id FROM documents)".to_string(),
        Table::CallStats => "false".to_string(),
        _ if labelled => acl::readable(groups),
        _ => "false".to_string(),
    };
    let whole = format!("{}_unrestricted", table.name());
    context.register_table(&whole, provider)?;
    let view = context
        .sql(&format!("SELECT * FROM {whole} WHERE {readable}"))
        .await?
        .into_view();
    context.register_table(table.name(), view)?;
    context.deregister_table(&whole)?;
    Ok(())
}
