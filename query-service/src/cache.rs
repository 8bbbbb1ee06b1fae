//! What a replica keeps between questions, bounded in bytes: Lance's caches
//! (index pages and file metadata) in one session every snapshot's datasets
//! share, so a newer checkpoint finds its unchanged files already cached; and
//! the rows navigators read most (roots, upper tree levels, titles, the
//! lexicon's common terms), keyed by the table version they were read at, so a
//! cached row is exactly the row that version holds.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lance::session::Session;
use memweave_schemas::Table;
use quick_cache::Weighter;
use quick_cache::sync::Cache;
use serde::Serialize;

/// The replica's default: Lance's caches and hot rows together.
pub const DEFAULT_CACHE_MIB: u64 = 512;

/// Shares of the budget, in eighths: Lance's index cache (posting lists,
/// B-tree pages, IVF partitions), its file metadata, and rows.
const INDEX_EIGHTHS: u64 = 4;
const METADATA_EIGHTHS: u64 = 1;
const ROW_EIGHTHS: u64 = 3;

/// A read's answer as it was cached: which table at which version, which
/// question of it (`lookup`: by id, a document's root, …) about what (`key`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RowKey {
    table: Table,
    version: u64,
    lookup: &'static str,
    key: String,
}

#[derive(Clone)]
struct Cached {
    value: Arc<dyn Any + Send + Sync>,
    bytes: u64,
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<RowKey, Cached> for ByBytes {
    fn weight(&self, key: &RowKey, cached: &Cached) -> u64 {
        (size_of::<RowKey>() + key.key.len()) as u64 + cached.bytes
    }
}

/// The caches of one replica (or one `memweave ask`).
pub struct ReadCache {
    session: Arc<Session>,
    rows: Option<Cache<RowKey, Cached, ByBytes>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// How the row cache has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowCacheStats {
    /// Look-ups answered from the cache, and those that read the tables.
    pub hits: u64,
    pub misses: u64,
    /// What it holds now.
    pub entries: u64,
    pub bytes: u64,
}

impl std::fmt::Debug for ReadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadCache")
            .field("rows", &self.rows.as_ref().map(|r| (r.len(), r.weight())))
            .finish_non_exhaustive()
    }
}

impl ReadCache {
    /// Caches of `mib` MiB in all; with 0, every read goes to the tables.
    pub fn new(mib: u64) -> Self {
        let eighth = mib * 1024 * 1024 / 8;
        let session = Session::new(
            (INDEX_EIGHTHS * eighth) as usize,
            (METADATA_EIGHTHS * eighth) as usize,
            Default::default(),
        );
        let row_bytes = ROW_EIGHTHS * eighth;
        let rows = (row_bytes > 0).then(|| {
            // Rows of about 2 KiB: a segment with its terms, a node with its summary.
            let estimated_rows = (row_bytes / 2048).max(16) as usize;
            Cache::with_weighter(estimated_rows, row_bytes, ByBytes)
        });
        ReadCache {
            session: Arc::new(session),
            rows,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn row_stats(&self) -> RowCacheStats {
        RowCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.rows.as_ref().map_or(0, |r| r.len() as u64),
            bytes: self.rows.as_ref().map_or(0, |r| r.weight()),
        }
    }

    /// The Lance session datasets are opened in.
    pub fn session(&self) -> Arc<Session> {
        self.session.clone()
    }

    /// The cached answer to `lookup` of `key` in `table` at `version`.
    pub(crate) fn get<T: Any + Send + Sync>(
        &self,
        table: Table,
        version: u64,
        lookup: &'static str,
        key: &str,
    ) -> Option<Arc<T>> {
        let found = self.rows.as_ref().and_then(|rows| {
            rows.get(&RowKey {
                table,
                version,
                lookup,
                key: key.to_string(),
            })
        });
        let value = found.and_then(|cached| cached.value.downcast::<T>().ok());
        let counter = if value.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        value
    }

    /// Keeps `value`, of about `bytes` bytes beyond its own size
    /// ([`rows_bytes`]), as the answer to `lookup` of `key` in `table` at
    /// `version`.
    pub(crate) fn put<T: Any + Send + Sync>(
        &self,
        table: Table,
        version: u64,
        lookup: &'static str,
        key: String,
        value: Arc<T>,
        bytes: usize,
    ) {
        let Some(rows) = &self.rows else { return };
        let bytes = (size_of::<T>() + bytes) as u64;
        rows.insert(
            RowKey {
                table,
                version,
                lookup,
                key,
            },
            Cached { value, bytes },
        );
    }
}

/// About the bytes `rows` hold: their sizes and serialised lengths (strings
/// and vectors dominate rows, and serialise to about their size).
pub(crate) fn rows_bytes<'a, R: Serialize + 'a>(rows: impl IntoIterator<Item = &'a R>) -> usize {
    rows.into_iter()
        .map(|row| size_of::<R>() + serialised_bytes(row))
        .sum()
}

fn serialised_bytes<T: Serialize>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Rows always serialise; a failure would only under-count.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_row_is_found_only_at_its_version_and_lookup() {
        let cache = ReadCache::new(8);
        cache.put(
            Table::Documents,
            3,
            "id",
            "d1".into(),
            Arc::new("one".to_string()),
            3,
        );
        let found = cache.get::<String>(Table::Documents, 3, "id", "d1");
        assert_eq!(found.as_deref().map(String::as_str), Some("one"));
        assert!(
            cache
                .get::<String>(Table::Documents, 4, "id", "d1")
                .is_none()
        );
        assert!(
            cache
                .get::<String>(Table::Documents, 3, "root", "d1")
                .is_none()
        );
        assert!(
            cache
                .get::<String>(Table::Segments, 3, "id", "d1")
                .is_none()
        );
    }

    #[test]
    fn the_row_cache_stays_within_its_bytes() {
        let cache = ReadCache::new(1);
        let budget = ROW_EIGHTHS * 1024 * 1024 / 8;
        let row = Arc::new("x".repeat(10_000));
        for i in 0..200 {
            cache.put(
                Table::Segments,
                1,
                "id",
                format!("s{i}"),
                row.clone(),
                row.len(),
            );
        }
        let rows = cache.rows.as_ref().unwrap();
        assert!(rows.weight() <= budget, "{} > {budget}", rows.weight());
        assert!(rows.len() < 200 && rows.len() > 10, "kept {}", rows.len());
    }

    #[test]
    fn no_budget_caches_nothing() {
        let cache = ReadCache::new(0);
        cache.put(Table::Documents, 1, "id", "d".into(), Arc::new(1u64), 0);
        assert!(cache.get::<u64>(Table::Documents, 1, "id", "d").is_none());
    }
}
