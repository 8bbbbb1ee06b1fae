//! Where documents come from: a local file or directory, or the objects under a
//! prefix of any object store (s3://, gs://, az://, file://).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use memweave_ingest::{self as ingest, Discovery, IngestError, ReadOptions, SourceFile};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::AsyncReadExt;

use crate::{IndexError, UsageError};

/// Environment variables the object stores read their settings from
/// (credentials, region, endpoint), as the cloud SDKs do.
const ENV_PREFIXES: [&str; 3] = ["AWS_", "GOOGLE_", "AZURE_"];

/// How to reach an object-store source, and what one read may take.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// An S3-compatible endpoint (MinIO, Ceph, s3s-fs, R2); http:// is allowed.
    pub s3_endpoint: Option<String>,
    /// Further object-store settings (KEY=VALUE, as object_store names them).
    pub options: Vec<(String, String)>,
    /// How files' documents are read out of them (dataset columns, limits).
    pub read: ReadOptions,
    /// The most bytes and time one file or object may take to fetch.
    pub fetch: FetchLimits,
    /// Where a Kafka message's `uri` may point (`--allow-uri`); none by default.
    pub allowed_uris: AllowedUris,
}

/// 256 MiB: far above any one document's text (the largest real PDFs and
/// books are tens of MB), far below what would take the indexer down with
/// sixteen reads in flight.
pub const DEFAULT_MAX_DOCUMENT_BYTES: u64 = 256 << 20;

/// Two minutes: a 256 MiB object at 2 MB/s, or a stalled server.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(120);

/// What fetching one file or object may take. A dataset (Parquet, Arrow,
/// JSON Lines) is copied to a local file and read a batch at a time, never
/// whole, so its size is not capped, and the timeout bounds each wait for
/// its next chunk rather than the whole copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    pub max_bytes: u64,
    pub timeout: Duration,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            max_bytes: DEFAULT_MAX_DOCUMENT_BYTES,
            timeout: DEFAULT_FETCH_TIMEOUT,
        }
    }
}

/// The prefixes a Kafka message's `uri` may name, as the operator gave them:
/// object-store URLs (matched by scheme, bucket and whole path segments) and
/// local folders (matched after resolving links, so a link cannot lead out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedUris {
    prefixes: Vec<AllowedPrefix>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedPrefix {
    Folder(PathBuf),
    Objects {
        scheme: String,
        bucket: String,
        segments: Vec<String>,
    },
}

impl AllowedUris {
    /// The allow-list of `--allow-uri` flags: each an object-store URL prefix
    /// (`s3://bucket/docs`) or a local folder (a path or `file://` URL, which
    /// must exist).
    pub fn parse(prefixes: &[String]) -> Result<AllowedUris, UsageError> {
        let prefixes = prefixes
            .iter()
            .map(|prefix| {
                let usage = |why: String| UsageError(format!("--allow-uri {prefix}: {why}"));
                match local_path(prefix) {
                    Some(path) => std::fs::canonicalize(path)
                        .map(AllowedPrefix::Folder)
                        .map_err(|e| usage(e.to_string())),
                    None => {
                        let url = url::Url::parse(prefix).map_err(|e| usage(e.to_string()))?;
                        object_prefix(&url).ok_or_else(|| {
                            usage("expected a folder or SCHEME://BUCKET[/PREFIX]".into())
                        })
                    }
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(AllowedUris { prefixes })
    }

    /// Whether `uri` may be read, and if not why: the message of its
    /// `forbidden_uri` error.
    pub fn check(&self, uri: &str) -> Result<(), String> {
        let refused = || {
            if self.prefixes.is_empty() {
                format!(
                    "{uri}: reading a message's uri needs --allow-uri naming its prefix; none is given"
                )
            } else {
                format!("{uri}: under no --allow-uri prefix")
            }
        };
        let allowed = match local_path(uri) {
            Some(path) => {
                // `..` is refused before the path is resolved, so what is
                // outside is never looked at; links are resolved after.
                let lexical = Path::new(path);
                if !lexical.is_absolute()
                    || lexical
                        .components()
                        .any(|c| !matches!(c, Component::Normal(_) | Component::RootDir))
                {
                    return Err(refused());
                }
                let inside = |path: &Path| {
                    self.prefixes
                        .iter()
                        .any(|p| matches!(p, AllowedPrefix::Folder(f) if path.starts_with(f)))
                };
                inside(lexical) && std::fs::canonicalize(lexical).is_ok_and(|real| inside(&real))
            }
            None => url::Url::parse(uri)
                .ok()
                .and_then(|url| object_prefix(&url))
                .is_some_and(|wanted| {
                    self.prefixes
                        .iter()
                        .any(|allowed| match (allowed, &wanted) {
                            (
                                AllowedPrefix::Objects {
                                    scheme,
                                    bucket,
                                    segments,
                                },
                                AllowedPrefix::Objects {
                                    scheme: s,
                                    bucket: b,
                                    segments: path,
                                },
                            ) => scheme == s && bucket == b && path.starts_with(segments),
                            _ => false,
                        })
                }),
        };
        if allowed { Ok(()) } else { Err(refused()) }
    }
}

/// The local path a source or `uri` names: one without a scheme, or a
/// `file://` URL's path.
fn local_path(spec: &str) -> Option<&str> {
    match spec.split_once("://") {
        None => Some(spec),
        Some(("file", path)) => Some(path),
        Some(_) => None,
    }
}

/// An object-store URL as a prefix: scheme, bucket (or container) and path
/// segments; `None` for URLs with a user, a query, a fragment, or `.`/`..`
/// or empty segments, which could name something else than they seem to.
fn object_prefix(url: &url::Url) -> Option<AllowedPrefix> {
    let bucket = url.host_str().filter(|b| !b.is_empty())?;
    if !url.username().is_empty() || url.query().is_some() || url.fragment().is_some() {
        return None;
    }
    let path = url.path().trim_start_matches('/').trim_end_matches('/');
    let segments: Vec<String> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').map(str::to_string).collect()
    };
    let odd = |s: &String| {
        s.is_empty()
            || s == "."
            || s == ".."
            || s.to_ascii_lowercase().contains("%2e")
            || s.to_ascii_lowercase().contains("%2f")
    };
    if segments.iter().any(odd) {
        return None;
    }
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    Some(AllowedPrefix::Objects {
        scheme: url.scheme().to_string(),
        bucket: format!("{bucket}{port}"),
        segments,
    })
}

/// The object store behind `spec` (a URL, or with `local_paths` a local
/// folder, created if missing) and the prefix in it, with settings from the
/// cloud SDKs' environment variables and `options`. `what` names the flag in
/// errors.
pub fn object_store_at(
    what: &str,
    spec: &str,
    options: &SourceOptions,
    local_paths: bool,
) -> Result<(Arc<dyn ObjectStore>, ObjectPath), UsageError> {
    if local_paths && !spec.contains("://") {
        std::fs::create_dir_all(spec).map_err(|e| UsageError(format!("{what} {spec}: {e}")))?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(spec)
            .map_err(|e| UsageError(format!("{what} {spec}: {e}")))?;
        return Ok((Arc::new(store), ObjectPath::default()));
    }
    let parsed = url::Url::parse(spec)
        .map_err(|e| UsageError(format!("{what} {spec} is not a valid URL: {e}")))?;
    let mut settings: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    if let Some(endpoint) = &options.s3_endpoint {
        settings.push(("aws_endpoint".into(), endpoint.clone()));
        if endpoint.starts_with("http://") {
            settings.push(("aws_allow_http".into(), "true".into()));
        }
    }
    settings.extend(options.options.iter().cloned());
    let (store, prefix) = object_store::parse_url_opts(&parsed, settings)
        .map_err(|e| UsageError(format!("{what} {spec}: {e}")))?;
    Ok((Arc::from(store), prefix))
}

/// A source of documents, and the limits each fetch from it has.
#[derive(Debug, Clone)]
pub struct Source {
    place: Place,
    limits: FetchLimits,
}

#[derive(Debug, Clone)]
enum Place {
    Local(PathBuf),
    Objects {
        /// The source as given, without a trailing '/'.
        url: String,
        store: Arc<dyn ObjectStore>,
        prefix: ObjectPath,
    },
}

impl Source {
    /// A URL with a scheme is an object store; anything else is a local path.
    pub fn open(spec: &str, options: &SourceOptions) -> Result<Source, UsageError> {
        let limits = options.fetch;
        if !spec.contains("://") {
            // Canonical, so source URIs in the tables do not depend on how the
            // path was typed.
            let path = std::fs::canonicalize(spec).map_err(|e| {
                let reason = if e.kind() == std::io::ErrorKind::NotFound {
                    "does not exist".to_string()
                } else {
                    e.to_string()
                };
                UsageError(format!("source {spec} {reason}"))
            })?;
            let place = Place::Local(path);
            return Ok(Source { place, limits });
        }
        let (store, prefix) = object_store_at("source", spec, options, false)?;
        let place = Place::Objects {
            url: spec.trim_end_matches('/').to_string(),
            store,
            prefix,
        };
        Ok(Source { place, limits })
    }

    /// The source as documents and summaries name it.
    pub fn name(&self) -> String {
        match &self.place {
            Place::Local(path) => path.display().to_string(),
            Place::Objects { url, .. } => url.clone(),
        }
    }

    /// Every file or object to read, sorted by key, with those that will not be.
    pub async fn discover(&self) -> Result<Discovery, IndexError> {
        match &self.place {
            Place::Local(path) => Ok(ingest::discover(path)?),
            Place::Objects { url, store, prefix } => {
                let objects: Vec<object_store::ObjectMeta> = store
                    .list(Some(prefix))
                    .try_collect()
                    .await
                    .map_err(IndexError::ListObjects)?;
                let mut discovery = Discovery::default();
                for object in objects {
                    let key = object
                        .location
                        .prefix_match(prefix)
                        .map(|parts| parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>())
                        .unwrap_or_default()
                        .join("/");
                    let uri = format!("{url}/{key}");
                    if key.split('/').any(|part| part.starts_with('.')) {
                        continue;
                    }
                    // Servers that give no ETag (s3s-fs) still give the
                    // size and the modification time.
                    let version = object.e_tag.unwrap_or_else(|| {
                        format!("{}@{}", object.size, object.last_modified.to_rfc3339())
                    });
                    discovery.add(uri, key, Some(version));
                }
                discovery.files.sort_by(|a, b| a.key.cmp(&b.key));
                Ok(discovery)
            }
        }
    }

    /// The bytes of one discovered file, within the source's limits.
    pub async fn read(&self, file: &SourceFile) -> Result<Vec<u8>, ReadError> {
        let read = async {
            match &self.place {
                Place::Local(_) => read_file(Path::new(&file.uri), self.limits.max_bytes).await,
                Place::Objects { store, prefix, .. } => {
                    read_object(
                        store.as_ref(),
                        &object_at(prefix, file),
                        self.limits.max_bytes,
                    )
                    .await
                }
            }
        };
        self.in_time(read).await
    }

    /// A file on this machine holding `file`'s bytes, for readers that take
    /// it a part at a time (datasets): the file itself, or an object copied
    /// to a temporary file as it downloads (its bytes never all in memory).
    pub async fn local(&self, file: &SourceFile) -> Result<LocalFile, ReadError> {
        match &self.place {
            Place::Local(_) => Ok(LocalFile::Source(PathBuf::from(&file.uri))),
            // A dataset may be larger than any timeout fits: the limit is on
            // each wait (the request, every chunk), so only a stall fails.
            Place::Objects { store, prefix, .. } => {
                let copy = tempfile::NamedTempFile::new()?;
                let mut out = tokio::fs::File::from_std(copy.reopen()?);
                let object = self.in_time(async { Ok(store.get(&object_at(prefix, file)).await?) });
                let mut chunks = object.await?.into_stream();
                while let Some(chunk) = self.in_time(async { Ok(chunks.try_next().await?) }).await?
                {
                    tokio::io::AsyncWriteExt::write_all(&mut out, &chunk).await?;
                }
                tokio::io::AsyncWriteExt::flush(&mut out).await?;
                Ok(LocalFile::Copy(copy.into_temp_path()))
            }
        }
    }

    /// The bytes of the one file or object the source names (a Kafka message's
    /// `uri`), within the source's limits.
    pub async fn read_whole(&self) -> Result<Vec<u8>, ReadError> {
        let read = async {
            match &self.place {
                Place::Local(path) => read_file(path, self.limits.max_bytes).await,
                Place::Objects { store, prefix, .. } => {
                    read_object(store.as_ref(), prefix, self.limits.max_bytes).await
                }
            }
        };
        self.in_time(read).await
    }

    async fn in_time<T>(
        &self,
        read: impl Future<Output = Result<T, ReadError>>,
    ) -> Result<T, ReadError> {
        let timeout = self.limits.timeout;
        tokio::time::timeout(timeout, read)
            .await
            .unwrap_or(Err(ReadError::Timeout(timeout)))
    }

    /// Each file's version, by key: what the checkpoint records and `--watch`
    /// compares.
    pub fn versions(files: &[SourceFile]) -> BTreeMap<String, String> {
        files
            .iter()
            .filter_map(|f| Some((f.key.clone(), f.version.clone()?)))
            .collect()
    }
}

/// Where a discovered file is in its object store: under `prefix`, at its key.
fn object_at(prefix: &ObjectPath, file: &SourceFile) -> ObjectPath {
    (file.key.split('/')).fold(prefix.clone(), |path, part| path.join(part))
}

/// A source file's bytes on this machine: the file, or a temporary copy of
/// an object (removed when dropped).
#[derive(Debug)]
pub enum LocalFile {
    Source(PathBuf),
    Copy(tempfile::TempPath),
}

impl LocalFile {
    pub fn path(&self) -> &Path {
        match self {
            LocalFile::Source(path) => path,
            LocalFile::Copy(path) => path,
        }
    }
}

/// Why a file or object could not be read (its error row carries the message).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    File(#[from] std::io::Error),
    #[error(transparent)]
    Object(#[from] object_store::Error),
    #[error("not a regular file (a FIFO, socket or device)")]
    NotAFile,
    #[error("larger than --max-document-mib: {size} bytes or more, {max} allowed")]
    TooLarge { size: u64, max: u64 },
    #[error("not fetched within {0:?}")]
    Timeout(Duration),
}

impl ReadError {
    /// The error row of `uri`, of the kind this failure is.
    pub fn for_file(&self, uri: &str) -> IngestError {
        let kind = match self {
            ReadError::TooLarge { .. } => ingest::kind::TOO_LARGE,
            ReadError::Timeout(_) => ingest::kind::TIMEOUT,
            _ => ingest::kind::UNREADABLE,
        };
        IngestError::new(uri, kind, format!("cannot read: {self}"))
    }
}

/// A local file's bytes, refused before it is opened when it is not a
/// regular file (opening a FIFO would wait for a writer) or is too large,
/// and read no further than `max` when it grows or lies about its size.
async fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let meta = tokio::fs::metadata(path).await?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile);
    }
    if meta.len() > max {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            max,
        });
    }
    let file = tokio::fs::File::open(path).await?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .await?;
    match u64::try_from(bytes.len()) {
        Ok(size) if size <= max => Ok(bytes),
        _ => Err(ReadError::TooLarge {
            size: max.saturating_add(1),
            max,
        }),
    }
}

/// An object's bytes, refused by its listed size and cut off as it streams
/// past `max`.
async fn read_object(
    store: &dyn ObjectStore,
    location: &ObjectPath,
    max: u64,
) -> Result<Vec<u8>, ReadError> {
    let object = store.get(location).await?;
    if object.meta.size > max {
        return Err(ReadError::TooLarge {
            size: object.meta.size,
            max,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(object.meta.size).unwrap_or(0));
    let mut chunks = object.into_stream();
    while let Some(chunk) = chunks.try_next().await? {
        bytes.extend_from_slice(&chunk);
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > max {
            return Err(ReadError::TooLarge { size, max });
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(prefixes: &[&str]) -> AllowedUris {
        let prefixes: Vec<String> = prefixes.iter().map(|p| p.to_string()).collect();
        AllowedUris::parse(&prefixes).unwrap()
    }

    #[test]
    fn with_no_prefix_no_uri_may_be_read() {
        let none = AllowedUris::default();
        for uri in [
            "/etc/passwd",
            "file:///etc/passwd",
            "s3://bucket/a.md",
            "../x",
        ] {
            let why = none.check(uri).unwrap_err();
            assert!(why.contains("needs --allow-uri"), "{uri}: {why}");
        }
    }

    #[test]
    fn object_urls_match_by_scheme_bucket_and_whole_segments() {
        let list = allowed(&["s3://bucket/docs", "gs://other"]);
        for ok in [
            "s3://bucket/docs/a.md",
            "s3://bucket/docs/x/y.pdf",
            "gs://other/any/thing",
        ] {
            assert_eq!(list.check(ok), Ok(()), "{ok}");
        }
        for refused in [
            "s3://bucket/docs-private/a.md",
            "s3://bucket/a.md",
            "s3://another-bucket/docs/a.md",
            "gs://bucket/docs/a.md",
            "s3://bucket/docs/../secret.md",
            "s3://bucket/docs/%2e%2e/secret.md",
            "s3://user@bucket/docs/a.md",
            "http://bucket/docs/a.md",
            "/etc/passwd",
        ] {
            assert!(list.check(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn local_paths_must_resolve_inside_an_allowed_folder() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("inside");
        std::fs::create_dir(&inside).unwrap();
        std::fs::write(inside.join("a.md"), "A").unwrap();
        std::fs::write(root.path().join("secret.md"), "S").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret.md"), inside.join("link.md")).unwrap();
        let list = allowed(&[inside.to_str().unwrap()]);
        let path = |p: &Path| p.display().to_string();
        assert_eq!(list.check(&path(&inside.join("a.md"))), Ok(()));
        assert_eq!(
            list.check(&format!("file://{}", path(&inside.join("a.md")))),
            Ok(())
        );
        for refused in [
            path(&root.path().join("secret.md")),
            path(&inside.join("link.md")),
            format!("{}/../secret.md", path(&inside)),
            "inside/a.md".to_string(),
            "/etc/passwd".to_string(),
        ] {
            assert!(list.check(&refused).is_err(), "{refused}");
        }
        assert!(AllowedUris::parse(&["/no/such/folder".to_string()]).is_err());
    }

    #[tokio::test]
    async fn reads_stop_at_the_size_cap_and_refuse_what_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.txt");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        assert!(matches!(
            read_file(&big, 1024).await,
            Err(ReadError::TooLarge {
                size: 2048,
                max: 1024
            })
        ));
        assert_eq!(read_file(&big, 4096).await.unwrap().len(), 2048);
        let zero = read_file(Path::new("/dev/zero"), 1024).await.unwrap_err();
        assert!(matches!(zero, ReadError::NotAFile), "{zero}");
        assert_eq!(zero.for_file("/dev/zero").kind, ingest::kind::UNREADABLE);

        let store = object_store::memory::InMemory::new();
        let at = ObjectPath::from("big.txt");
        store.put(&at, vec![b'a'; 2048].into()).await.unwrap();
        let refused = read_object(&store, &at, 1024).await.unwrap_err();
        assert_eq!(
            refused.for_file("mem://big.txt").kind,
            ingest::kind::TOO_LARGE
        );
        assert_eq!(read_object(&store, &at, 2048).await.unwrap().len(), 2048);
    }

    #[tokio::test]
    async fn a_fetch_past_its_timeout_is_a_timeout_error() {
        let source = Source {
            place: Place::Local(PathBuf::from("/")),
            limits: FetchLimits {
                max_bytes: 1,
                timeout: Duration::from_millis(20),
            },
        };
        let waited = source
            .in_time(std::future::pending::<Result<(), ReadError>>())
            .await
            .unwrap_err();
        assert_eq!(waited.for_file("slow").kind, ingest::kind::TIMEOUT);
    }
}
