//! Where documents come from: a local file or directory, or the objects under a
//! prefix of any object store (s3://, gs://, az://, file://).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures::TryStreamExt;
use memweave_ingest::{self as ingest, Discovery, ReadOptions, SourceFile};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::{IndexError, UsageError};

/// Environment variables the object stores read their settings from
/// (credentials, region, endpoint), as the cloud SDKs do.
const ENV_PREFIXES: [&str; 3] = ["AWS_", "GOOGLE_", "AZURE_"];

/// How to reach an object-store source.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// An S3-compatible endpoint (MinIO, Ceph, s3s-fs, R2); http:// is allowed.
    pub s3_endpoint: Option<String>,
    /// Further object-store settings (KEY=VALUE, as object_store names them).
    pub options: Vec<(String, String)>,
    /// How files' documents are read out of them (dataset columns, limits).
    pub read: ReadOptions,
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

#[derive(Debug, Clone)]
pub enum Source {
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
            return Ok(Source::Local(path));
        }
        let (store, prefix) = object_store_at("source", spec, options, false)?;
        Ok(Source::Objects {
            url: spec.trim_end_matches('/').to_string(),
            store,
            prefix,
        })
    }

    /// The source as documents and summaries name it.
    pub fn name(&self) -> String {
        match self {
            Source::Local(path) => path.display().to_string(),
            Source::Objects { url, .. } => url.clone(),
        }
    }

    /// Every file or object to read, sorted by key, with those that will not be.
    pub async fn discover(&self) -> Result<Discovery, IndexError> {
        match self {
            Source::Local(path) => Ok(ingest::discover(path)?),
            Source::Objects { url, store, prefix } => {
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

    /// The bytes of one discovered file.
    pub async fn read(&self, file: &SourceFile) -> Result<Vec<u8>, ReadError> {
        match self {
            Source::Local(_) => Ok(tokio::fs::read(&file.uri).await?),
            Source::Objects { store, prefix, .. } => {
                read_object(store.as_ref(), &object_at(prefix, file)).await
            }
        }
    }

    /// A file on this machine holding `file`'s bytes, for readers that take
    /// it a part at a time (datasets): the file itself, or an object copied
    /// to a temporary file as it downloads (its bytes never all in memory).
    pub async fn local(&self, file: &SourceFile) -> Result<LocalFile, ReadError> {
        match self {
            Source::Local(_) => Ok(LocalFile::Source(PathBuf::from(&file.uri))),
            Source::Objects { store, prefix, .. } => {
                let copy = tempfile::NamedTempFile::new()?;
                let mut out = tokio::fs::File::from_std(copy.reopen()?);
                let mut chunks = store.get(&object_at(prefix, file)).await?.into_stream();
                while let Some(chunk) = chunks.try_next().await? {
                    tokio::io::AsyncWriteExt::write_all(&mut out, &chunk).await?;
                }
                tokio::io::AsyncWriteExt::flush(&mut out).await?;
                Ok(LocalFile::Copy(copy.into_temp_path()))
            }
        }
    }

    /// The bytes of the one file or object the source names (a Kafka message's
    /// `uri`).
    pub async fn read_whole(&self) -> Result<Vec<u8>, ReadError> {
        match self {
            Source::Local(path) => Ok(tokio::fs::read(path).await?),
            Source::Objects { store, prefix, .. } => read_object(store.as_ref(), prefix).await,
        }
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
    pub fn path(&self) -> &std::path::Path {
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
}

async fn read_object(store: &dyn ObjectStore, location: &ObjectPath) -> Result<Vec<u8>, ReadError> {
    Ok(store.get(location).await?.bytes().await?.to_vec())
}
