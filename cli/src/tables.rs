//! The memory tables as one checkpoint left them, for the commands that read
//! them whole (`sql`, `export`, `report`).

use std::future::Future;

use memweave_analytics::catalog::{Catalog, CatalogError};
use memweave_pipeline::UsageError;
use memweave_process::StorageArgs;
use memweave_schemas::TableStore;

/// Runs `work` on a runtime of its own, over the catalog of the tables at
/// `tables` as the newest checkpoint, or `version`, left them.
pub fn with_catalog<Work, Done>(
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
