//! Files and objects as a source: each round lists them, reads the new and
//! changed ones as their epochs are fed, and retracts the ones gone. A
//! process's first round carries unchanged files over from the checkpoint.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use memweave_ingest::kind::DUPLICATE_ID;
use memweave_ingest::{self as ingest, IngestError, ReadOptions, SourceFile};
use memweave_operators::build::RawDocument;
use memweave_schemas::{ErrorRow, now_micros};
use rayon::prelude::*;

use super::checkpoint::Previous;
use super::{
    Carried, Documents, Fresh, IndexSummary, Reader, RoundInput, RoundSource, Routed,
    SourceContext, Update, Updates,
};
use crate::IndexError;
use crate::origins::{Held, Record};
use crate::positions::{Positions, file_uri, key_under};
use crate::source::{LocalFile, ReadError, Source};

/// Files read at once.
const READS_IN_FLIGHT: usize = 16;

/// A file or object-store source, round by round: once, or (`--watch`) again
/// whenever a listing differs from the last round's.
pub(super) struct FileRounds<'s> {
    source: &'s Source,
    /// How files' documents are read out of them.
    read: ReadOptions,
    /// The listing the round in progress reads.
    files: Vec<SourceFile>,
    /// Its files' versions, by key.
    versions: BTreeMap<String, String>,
    /// Roots the archive was read from before that carried documents cite.
    earlier_roots: Vec<String>,
    /// Whether a round has committed.
    done: bool,
    /// With `--watch`: how long to wait between listings.
    watch: Option<Duration>,
}

impl<'s> FileRounds<'s> {
    pub(super) fn once(source: &'s Source, read: ReadOptions) -> Self {
        FileRounds {
            source,
            read,
            files: Vec::new(),
            versions: BTreeMap::new(),
            earlier_roots: Vec::new(),
            done: false,
            watch: None,
        }
    }

    pub(super) fn watching(source: &'s Source, read: ReadOptions, every: Duration) -> Self {
        FileRounds {
            watch: Some(every),
            ..FileRounds::once(source, read)
        }
    }
}

impl RoundSource for FileRounds<'_> {
    fn next_round(&mut self, cx: &SourceContext<'_>) -> Result<Option<RoundInput<'_>>, IndexError> {
        let (source, name) = (self.source, self.source.name());
        // A listing, with its files' versions.
        let listed = |cx: &SourceContext<'_>| match cx.block_on(source.discover()) {
            Ok(discovery) => {
                let versions = Source::versions(&discovery.files);
                Ok((discovery, versions))
            }
            Err(e) => Err(IndexError::Listing {
                name: name.clone(),
                source: Box::new(e),
            }),
        };
        let mut started = Instant::now();
        let (discovery, versions) = match self.watch {
            _ if !self.done => listed(cx)?,
            None => return Ok(None),
            Some(every) => loop {
                tracing::info!(seconds = every.as_secs(), "watching the source for changes");
                if stopped_within(cx, every) {
                    return Err(IndexError::Interrupted);
                }
                started = Instant::now();
                let (discovery, versions) = listed(cx)?;
                if versions != self.versions {
                    break (discovery, versions);
                }
            },
        };
        self.files = discovery.files;
        self.versions = versions;
        let carried = match cx.previous {
            Some(previous) => {
                let (carried, cited) = carried_over(
                    previous,
                    cx.positions,
                    &name,
                    &self.files,
                    &self.read,
                    cx.feeds,
                );
                self.earlier_roots = cited;
                carried
            }
            None => Carried::new(),
        };
        let updates = file_updates(cx, &carried, &self.files);
        let reading = updates
            .values()
            .filter(|u| matches!(u.input, Update::Read))
            .count();
        tracing::info!(
            source = %name,
            files = self.files.len(),
            changed = reading,
            workers = cx.feeds,
            "indexing"
        );
        Ok(Some(RoundInput {
            updates,
            carried,
            positions: Positions::Files {
                source: name,
                files: self.files.len(),
                versions: self.versions.clone(),
                earlier_roots: self.earlier_roots.clone(),
                labelling: self.read.labelling(),
            },
            source_errors: Some(discovery.rejected.iter().map(error_row).collect()),
            reader: Some(Box::new(Listing {
                source: self.source,
                read: &self.read,
                files: self.files.iter().map(|f| (f.key.clone(), f)).collect(),
                runtime: cx.runtime.handle().clone(),
                copies: Mutex::new(HashMap::new()),
            })),
            started,
        }))
    }

    fn committed(&mut self, summary: &mut IndexSummary) {
        self.done = true;
        summary.source = self.source.name();
        summary.files = self.files.len();
    }
}

/// What changed in `files` since the dataflow's last round: the files new,
/// changed or gone since, against what the dataflow holds and (a process's
/// first round) what is `carried` over from the checkpoint. A file whose
/// documents lost a shared id is read again at a first round: the checkpoint
/// keeps only the documents that won theirs. Keys are sharded across workers
/// by their place in the listing.
fn file_updates(cx: &SourceContext<'_>, carried: &Carried, files: &[SourceFile]) -> Updates {
    let held = |key: &str| carried.get(key).map(|c| &c.input).or(cx.origins.get(key));
    let unchanged = |file: &SourceFile| {
        held(&file.key).is_some_and(|held| {
            held.version.is_some()
                && held.version == file.version
                && !held.errors.iter().any(|e| e.kind == DUPLICATE_ID)
        })
    };
    let mut updates = Updates::new();
    for (index, file) in files.iter().enumerate() {
        if !unchanged(file) {
            let peer = index % cx.feeds;
            updates.insert(file.key.clone(), Routed::to(peer, Update::Read));
        }
    }
    let listed: HashSet<&str> = files.iter().map(|f| f.key.as_str()).collect();
    for key in cx.origins.keys().chain(carried.keys().map(String::as_str)) {
        if !listed.contains(key) && !cx.other_origins.contains(key) {
            updates.insert(key.to_string(), Routed::to(0, Update::Gone));
        }
    }
    updates
}

/// Where a round reads files: the source, and its listing by key.
struct Listing<'a> {
    source: &'a Source,
    read: &'a ReadOptions,
    files: HashMap<String, &'a SourceFile>,
    runtime: tokio::runtime::Handle,
    /// Objects of datasets copied to this machine, by key: read again as
    /// their documents are sent.
    copies: Mutex<HashMap<String, LocalFile>>,
}

/// A file as fetched: its bytes, or (a dataset) a file on this machine to
/// read a batch at a time.
enum Fetched {
    Bytes(Result<Vec<u8>, ReadError>),
    Local(Result<LocalFile, ReadError>),
}

/// A fetched file as parsed: its documents and errors, or (a dataset) still
/// to read a batch at a time.
enum Parsed {
    Whole(ingest::Parsed),
    Rows(LocalFile),
}

impl Listing<'_> {
    async fn fetch(&self, file: &SourceFile) -> Fetched {
        if file.format.is_dataset() {
            Fetched::Local(self.source.local(file).await)
        } else {
            Fetched::Bytes(self.source.read(file).await)
        }
    }

    fn copies(&self) -> std::sync::MutexGuard<'_, HashMap<String, LocalFile>> {
        self.copies.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Reader for Listing<'_> {
    /// Reads the listed files under `origins` (at most [`READS_IN_FLIGHT`]
    /// at once), parsing them in parallel. A dataset's rows are read here
    /// without keeping their texts: [`Reader::documents`] reads them again
    /// as they are sent.
    fn read(&self, cx: &SourceContext<'_>, origins: Vec<&str>) -> HashMap<String, Fresh> {
        let files = origins
            .into_iter()
            .filter_map(|key| self.files.get(key).copied());
        let fetched: Vec<(&SourceFile, Fetched)> = cx.block_on(
            futures::stream::iter(files)
                .map(|file| async move { (file, self.fetch(file).await) })
                .buffered(READS_IN_FLIGHT)
                .collect(),
        );
        let read = self.read;
        let parsed: Vec<(&SourceFile, Parsed)> = fetched
            .into_par_iter()
            .map(|(file, fetched)| match fetched {
                Fetched::Bytes(bytes) => {
                    let bytes = bytes.map_err(|e| e.for_file(&file.uri));
                    (file, Parsed::Whole(ingest::parse(file, bytes, read)))
                }
                Fetched::Local(Ok(local)) => (file, Parsed::Rows(local)),
                Fetched::Local(Err(e)) => {
                    let error = Err(e.for_file(&file.uri));
                    (file, Parsed::Whole(ingest::parse(file, error, read)))
                }
            })
            .collect();
        let now = now_micros();
        let mut inputs = HashMap::new();
        for (file, parsed) in parsed {
            let mut input = Fresh {
                version: file.version.clone(),
                ..Fresh::default()
            };
            let mut take = |parsed: Result<RawDocument, IngestError>, texts: bool| match parsed {
                Ok(raw) if texts => input.records.push(cx.versioned(raw, now)),
                Ok(raw) => {
                    let (doc, seen) = cx.versioned(raw, now);
                    input.unread.push(Record::of(&doc, seen));
                }
                Err(error) => input.errors.push(error_row(&error)),
            };
            match parsed {
                Parsed::Whole(parsed) => parsed.into_iter().for_each(|p| take(p, true)),
                Parsed::Rows(local) => {
                    ingest::read_rows(file, local.path(), read).for_each(|p| take(p, false));
                    if let LocalFile::Copy(_) = local {
                        self.copies().insert(file.key.clone(), local);
                    }
                }
            }
            inputs.insert(file.key.clone(), input);
        }
        inputs
    }

    fn documents(&self, origin: &str) -> Option<Documents<'_>> {
        let file = *self.files.get(origin)?;
        if !file.format.is_dataset() {
            let bytes = self.runtime.block_on(self.source.read(file));
            let bytes = bytes.map_err(|e| e.for_file(&file.uri));
            let parsed = ingest::parse(file, bytes, self.read).into_iter();
            return Some(Box::new(parsed.filter_map(Result::ok)));
        }
        // The copy the first reading made, else a new one.
        let local = match self.copies().remove(origin) {
            Some(copy) => copy,
            None => self.runtime.block_on(self.source.local(file)).ok()?,
        };
        // The copy lives as long as its rows: a parser process opens it
        // only once it takes the request.
        let mut rows = ingest::read_rows(file, local.path(), self.read);
        let rows = std::iter::from_fn(move || {
            let _copy = &local;
            rows.next()
        });
        Some(Box::new(rows.filter_map(Result::ok)))
    }
}

/// Waits `every` on the indexer's runtime: whether Ctrl-C or SIGTERM came
/// first. (The runtimes leave their signal handlers installed, so the default
/// action no longer stops the process.)
fn stopped_within(cx: &SourceContext<'_>, every: Duration) -> bool {
    cx.block_on(async {
        tokio::select! {
            () = memweave_process::stop_requested() => true,
            () = tokio::time::sleep(every) => false,
        }
    })
}

/// Every file of the checkpoint as it left it, for a process's first round
/// (later rounds hold them in the dataflow already): its documents (without
/// texts) and ingestion errors, with the version the checkpoint recorded for
/// its key (a file of another version is read again); and the roots other
/// than `source` that carried documents or errors cite, for the next
/// checkpoint's `earlier_roots`. Documents of a file no longer listed are carried
/// under their own URI, so that the round finds that origin gone. Errors the
/// listing itself caused (files of a skipped type) cite no listed file and
/// are not carried.
///
/// Files are known by their keys (paths relative to the source's root), so
/// an archive read from another place (moved, restored, mounted elsewhere,
/// copied to another bucket or machine with its files' versions) is the same
/// archive: its unchanged files are carried over, not read again.
fn carried_over(
    previous: &Previous,
    positions: Option<&Positions>,
    source: &str,
    files: &[SourceFile],
    read: &ReadOptions,
    feeds: usize,
) -> (Carried, Vec<String>) {
    let no_versions = BTreeMap::new();
    let (versions, earlier_roots) = match positions {
        Some(Positions::Files {
            source: recorded,
            versions,
            earlier_roots,
            labelling,
            ..
        }) => {
            // Its own root last time, and the ones before it still named.
            let roots = std::iter::once(recorded).chain(earlier_roots);
            // Files labelled otherwise are read again: their documents'
            // labels (and so their versions) may differ.
            let versions = if *labelling == read.labelling() {
                versions
            } else {
                &no_versions
            };
            (
                versions,
                roots.filter(|root| *root != source).cloned().collect(),
            )
        }
        _ => (&no_versions, Vec::new()),
    };
    let listing = Listed::new(files, feeds, &earlier_roots);
    let mut carried = Carried::new();
    for d in &previous.documents {
        let (key, peer, version) = match listing.file_of(&d.source_uri) {
            Some((peer, file)) => (file.key.clone(), peer, versions.get(&file.key).cloned()),
            None => (file_uri(&d.source_uri).to_string(), 0, None),
        };
        let held = &mut carried.entry(key).or_insert_with(|| {
            let held = Held {
                version,
                ..Held::default()
            };
            Routed::to(peer, held)
        });
        held.input.records.push(d.clone());
    }
    for e in &previous.ingest_errors {
        if let Some((peer, file)) = listing.file_of(&e.source) {
            let held = &mut carried.entry(file.key.clone()).or_insert_with(|| {
                let held = Held {
                    version: versions.get(&file.key).cloned(),
                    ..Held::default()
                };
                Routed::to(peer, held)
            });
            held.input.errors.push(e.clone());
        }
    }
    // A root goes once every document read under it was read again elsewhere.
    let uris: Vec<&str> = (previous.documents.iter().map(|d| &*d.source_uri))
        .chain(previous.ingest_errors.iter().map(|e| e.source.as_str()))
        .collect();
    let cited = (earlier_roots.iter())
        .filter(|root| uris.iter().any(|uri| key_under(uri, root).is_some()))
        .cloned()
        .collect();
    (carried, cited)
}

/// A listing, each file with the worker that feeds it, found by its URI or,
/// under a root the archive was read from before, by its key.
struct Listed<'a> {
    by_uri: HashMap<&'a str, (usize, &'a SourceFile)>,
    by_key: HashMap<&'a str, (usize, &'a SourceFile)>,
    earlier_roots: &'a [String],
}

impl<'a> Listed<'a> {
    fn new(files: &'a [SourceFile], feeds: usize, earlier_roots: &'a [String]) -> Self {
        let fed = || (files.iter().enumerate()).map(|(index, f)| (index % feeds, f));
        Listed {
            by_uri: fed().map(|(peer, f)| (f.uri.as_str(), (peer, f))).collect(),
            by_key: fed().map(|(peer, f)| (f.key.as_str(), (peer, f))).collect(),
            earlier_roots,
        }
    }

    /// The listed file a document or error came from: its URI, or `URI:N`
    /// for an error of a file's Nth record; or the file whose key the URI
    /// names under a root the archive was read from before.
    fn file_of(&self, uri: &str) -> Option<(usize, &'a SourceFile)> {
        let file = file_uri(uri);
        let by_uri = self.by_uri.get(uri).or_else(|| self.by_uri.get(file));
        let by_key = || {
            (self.earlier_roots.iter())
                .filter_map(|root| key_under(file, root))
                .find_map(|key| self.by_key.get(key))
        };
        by_uri.or_else(by_key).copied()
    }
}

fn error_row(error: &IngestError) -> ErrorRow {
    ErrorRow::new("ingest", &error.source, None, error.kind, &error.message)
}
