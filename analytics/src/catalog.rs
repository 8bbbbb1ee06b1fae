//! Every memory table as of one checkpoint, registered by name in a DataFusion
//! session: each table at the version the checkpoint names (so a query never
//! sees half a round), `checkpoints` up to that epoch.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use lance::datafusion::LanceTableProvider;
use memweave_schemas::{CheckpointRow, StoreError, Table, TableStore, to_batch};

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
        let context = register(&store, &checkpoint, &checkpoints).await?;
        Ok(Catalog {
            checkpoint,
            context,
            store,
        })
    }

    pub fn store(&self) -> &TableStore {
        &self.store
    }
}

/// A session with the tables of `checkpoint` and the `checkpoints` up to it.
async fn register(
    store: &TableStore,
    checkpoint: &CheckpointRow,
    checkpoints: &[CheckpointRow],
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
        context.register_table(table.name(), provider)?;
    }
    let rows: Vec<&CheckpointRow> = checkpoints.iter().collect();
    let batch = to_batch(&rows)?;
    let checkpoints = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    context.register_table(Table::Checkpoints.name(), Arc::new(checkpoints))?;
    Ok(context)
}
