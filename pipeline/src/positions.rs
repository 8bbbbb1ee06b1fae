//! Where a memory's sources were read up to, as a checkpoint records it (the
//! `source_positions` column, JSON): a restart resumes from here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A source's positions at a commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Positions {
    /// Files or objects: the version (ETag, else size@mtime) of each, by key.
    Files {
        source: String,
        files: usize,
        versions: BTreeMap<String, String>,
        /// Other roots the archive was read from before (it moved) that
        /// documents still carried over cite in their `source_uri`: a
        /// document is read again only when it changes.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        earlier_roots: Vec<String>,
        /// How the files' documents were labelled (a hash of the label
        /// column, map and default; none without labels): under another
        /// labelling, every file is read again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        labelling: Option<String>,
    },
    /// A Kafka topic: each partition's next offset.
    Kafka {
        source: String,
        #[serde(with = "by_partition")]
        offsets: BTreeMap<i32, i64>,
    },
}

/// Offsets keyed by partition as JSON writes them (string keys): serde reads
/// no integer keys inside an untagged enum.
mod by_partition {
    use std::collections::BTreeMap;

    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        offsets: &BTreeMap<i32, i64>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let keyed: BTreeMap<String, i64> =
            offsets.iter().map(|(p, o)| (p.to_string(), *o)).collect();
        keyed.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<i32, i64>, D::Error> {
        BTreeMap::<String, i64>::deserialize(deserializer)?
            .into_iter()
            .map(|(p, o)| Ok((p.parse().map_err(D::Error::custom)?, o)))
            .collect()
    }
}

impl Positions {
    /// The places this source's documents and errors cite: its root (a
    /// folder, a bucket's prefix, `kafka:TOPIC`) and, for files, the roots
    /// it was read from before that documents still cite.
    pub fn roots(&self) -> impl Iterator<Item = &str> {
        let (source, earlier): (&String, &[String]) = match self {
            Positions::Files {
                source,
                earlier_roots,
                ..
            } => (source, earlier_roots),
            Positions::Kafka { source, .. } => (source, &[]),
        };
        std::iter::once(source.as_str()).chain(earlier.iter().map(String::as_str))
    }
}

/// Every source's positions at a commit, by source name (`--source-name`;
/// the empty name is a source given none). A memory of one unnamed source
/// records its positions alone, as memories always have; one that named
/// sources share records `{"sources": {NAME: positions, …}}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourcePositions(BTreeMap<String, Positions>);

/// The JSON of a memory that named sources share. Its one field, denied
/// any other, makes a memory of one source's JSON fail at its first key
/// rather than after a parse of every file's version.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    sources: BTreeMap<String, Positions>,
}

impl SourcePositions {
    /// The positions a checkpoint recorded; none for a row no source wrote.
    pub fn parse(recorded: &str) -> SourcePositions {
        if let Ok(Named { sources }) = serde_json::from_str(recorded) {
            return SourcePositions(sources);
        }
        let alone = serde_json::from_str(recorded).ok();
        SourcePositions(alone.map(|p| (String::new(), p)).into_iter().collect())
    }

    /// The column's value.
    pub fn record(&self) -> String {
        let recorded = match self.0.get("") {
            Some(alone) if self.0.len() == 1 => serde_json::to_string(alone),
            _ => serde_json::to_string(&Named {
                sources: self.0.clone(),
            }),
        };
        recorded.expect("positions serialise")
    }

    /// The positions of the source `name`.
    pub fn of(&self, name: &str) -> Option<&Positions> {
        self.0.get(name)
    }

    /// The source `name` is now at `positions`.
    pub fn set(&mut self, name: &str, positions: Positions) {
        self.0.insert(name.to_string(), positions);
    }

    /// Keeps the sources other than `name` that `keep` says still own something.
    pub fn retain_others(&mut self, name: &str, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|source, _| source == name || keep(source));
    }

    /// The source, other than `name` (now read from `root`), whose document
    /// or error cites `uri`: the one with the longest root its file is
    /// under, `name` winning a tie. `None` when that is `name`, or no
    /// source: then it is `name`'s, as everything is a memory's only
    /// source's. So a source that takes a name takes the documents it was
    /// last read into under another (none, before sources had names).
    pub fn other_owner<'a>(&'a self, name: &'a str, root: &str, uri: &str) -> Option<&'a str> {
        let uri = file_uri(uri);
        let recorded = (self.0.iter()).flat_map(|(source, p)| p.roots().map(move |r| (source, r)));
        let candidates =
            std::iter::once((name, root)).chain(recorded.map(|(s, r)| (s.as_str(), r)));
        let mut owner: Option<(&str, usize)> = None;
        for (source, root) in candidates {
            let longer = owner.is_none_or(|(_, length)| root.len() > length);
            if longer && under(uri, root) {
                owner = Some((source, root.len()));
            }
        }
        owner
            .map(|(source, _)| source)
            .filter(|source| *source != name)
    }
}

/// The URI of the file a document or error came from: `URI:N` names an
/// error of its Nth record or message, `URI#page=N` of its Nth page.
pub(crate) fn file_uri(uri: &str) -> &str {
    match uri.rsplit_once(':') {
        Some((file, line)) if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => file,
        _ => uri,
    }
}

/// Whether the file `uri` is the root itself (a source of one file) or under it.
fn under(uri: &str, root: &str) -> bool {
    key_under(uri, root).is_some()
}

/// The key of the file at `uri` under `root`: the rest of the URI after the
/// root and a separator (an object's URI is its source's URL, `/`, its key,
/// whether or not the URL ends in `/`). A source of one file is its own
/// root, and its file is keyed by its name, as its listing keys it.
pub(crate) fn key_under<'u>(uri: &'u str, root: &str) -> Option<&'u str> {
    let rest = uri.strip_prefix(root)?;
    match rest.strip_prefix('/') {
        Some(key) => Some(key),
        None if rest.is_empty() => Some(uri.rsplit_once('/').map_or(uri, |(_, name)| name)),
        None if root.ends_with('/') => Some(rest),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The positions of a memory's only source, as `recorded`.
    fn alone(recorded: &str) -> Option<Positions> {
        SourcePositions::parse(recorded).of("").cloned()
    }

    #[test]
    fn positions_keep_the_json_checkpoints_have_always_held() {
        let files = r#"{"source":"/a","files":1,"versions":{"x.txt":"5@7"}}"#;
        let parsed = alone(files).unwrap();
        assert!(matches!(&parsed, Positions::Files { source, .. } if source == "/a"));
        assert_eq!(SourcePositions::parse(files).record(), files);
        let moved =
            r#"{"source":"/b","files":1,"versions":{"x.txt":"5@7"},"earlier_roots":["/a"]}"#;
        let parsed = alone(moved).unwrap();
        assert!(
            matches!(&parsed, Positions::Files { earlier_roots, .. } if earlier_roots == &["/a"])
        );
        assert_eq!(SourcePositions::parse(moved).record(), moved);
        let kafka = r#"{"source":"kafka://b:9092/docs","offsets":{"0":12,"3":4}}"#;
        let Some(Positions::Kafka { offsets, .. }) = alone(kafka) else {
            panic!("a Kafka position");
        };
        assert_eq!(offsets, BTreeMap::from([(0, 12), (3, 4)]));
        assert_eq!(SourcePositions::parse("{}"), SourcePositions::default());
    }

    #[test]
    fn named_sources_keep_their_positions_side_by_side() {
        let mut shared = SourcePositions::parse(r#"{"source":"/a","files":0,"versions":{}}"#);
        let kafka = Positions::Kafka {
            source: "kafka:mail".into(),
            offsets: BTreeMap::from([(0, 3)]),
        };
        shared.set("mail", kafka.clone());
        let recorded = shared.record();
        assert!(
            recorded.starts_with(r#"{"sources":{"":{"source":"/a""#),
            "{recorded}"
        );
        let parsed = SourcePositions::parse(&recorded);
        assert_eq!(parsed, shared);
        assert_eq!(parsed.of("mail"), Some(&kafka));
        // A source that owns nothing any more is dropped; the running one stays.
        let mut kept = parsed.clone();
        kept.retain_others("", |_| false);
        assert_eq!(kept.of("mail"), None);
        assert!(kept.of("").is_some());
        let mut kept = parsed;
        kept.retain_others("mail", |_| false);
        assert_eq!(kept.of(""), None);
        assert_eq!(
            kept.record(),
            r#"{"sources":{"mail":{"source":"kafka:mail","offsets":{"0":3}}}}"#
        );
    }

    #[test]
    fn a_document_belongs_to_the_source_with_the_longest_root_over_it() {
        let files = |root: &str, earlier: &[&str]| Positions::Files {
            source: root.into(),
            files: 0,
            versions: BTreeMap::new(),
            earlier_roots: earlier.iter().map(|r| r.to_string()).collect(),
            labelling: None,
        };
        let mut shared = SourcePositions::default();
        shared.set("wiki", files("/srv/wiki", &["/old/wiki"]));
        shared.set("notes", files("/srv/wiki/notes", &[]));
        shared.set("one", files("/srv/one.jsonl", &[]));
        shared.set(
            "mail",
            Positions::Kafka {
                source: "kafka:mail".into(),
                offsets: BTreeMap::new(),
            },
        );
        let owner = |running: &'static str, uri: &str| {
            let root = shared.of(running).and_then(|p| p.roots().next()).unwrap();
            shared.other_owner(running, root, uri).map(str::to_string)
        };
        assert_eq!(owner("mail", "/srv/wiki/a.md").as_deref(), Some("wiki"));
        assert_eq!(owner("mail", "/old/wiki/a.md").as_deref(), Some("wiki"));
        assert_eq!(
            owner("mail", "/srv/wiki/notes/b.md").as_deref(),
            Some("notes")
        );
        assert_eq!(
            owner("mail", "/srv/wiki/notes/b.md:3").as_deref(),
            Some("notes")
        );
        assert_eq!(owner("mail", "/srv/one.jsonl").as_deref(), Some("one"));
        assert_eq!(owner("wiki", "kafka:mail/0/17").as_deref(), Some("mail"));
        // Its own, and what no source's root covers, are the running source's.
        assert_eq!(owner("wiki", "/srv/wiki/a.md"), None);
        assert_eq!(owner("mail", "/srv/wikis/a.md"), None);
        assert_eq!(owner("mail", "kafka:mailbox/0/1"), None);
        // A source read from the root another was claims its documents
        // (it took a name); from elsewhere, it leaves them.
        assert_eq!(
            shared.other_owner("new", "/srv/wiki", "/srv/wiki/a.md"),
            None
        );
        assert_eq!(
            shared.other_owner("new", "/srv", "/srv/wiki/a.md"),
            Some("wiki")
        );
        assert_eq!(shared.other_owner("new", "/srv", "/srv/b.md"), None);
    }

    #[test]
    fn a_key_is_what_follows_its_root_and_a_separator() {
        assert_eq!(key_under("/a/src/x/y.txt", "/a/src"), Some("x/y.txt"));
        assert_eq!(key_under("/a/srcx/y.txt", "/a/src"), None);
        assert_eq!(key_under("/b/src/y.txt", "/a/src"), None);
        assert_eq!(
            key_under("/a/rows.jsonl", "/a/rows.jsonl"),
            Some("rows.jsonl")
        );
        assert_eq!(key_under("s3://b/p//y.txt", "s3://b/p/"), Some("y.txt"));
        assert_eq!(key_under("s3://b/p/y.txt", "s3://b/p/"), Some("y.txt"));
    }
}
