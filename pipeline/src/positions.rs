//! Where a source was read up to, as a checkpoint records it (the
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
    /// The positions a checkpoint recorded; `None` for a row no source wrote.
    pub fn parse(recorded: &str) -> Option<Positions> {
        serde_json::from_str(recorded).ok()
    }

    /// The column's value.
    pub fn record(&self) -> String {
        serde_json::to_string(self).expect("positions serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_keep_the_json_checkpoints_have_always_held() {
        let files = r#"{"source":"/a","files":1,"versions":{"x.txt":"5@7"}}"#;
        let parsed = Positions::parse(files).unwrap();
        assert!(matches!(&parsed, Positions::Files { source, .. } if source == "/a"));
        assert_eq!(parsed.record(), files);
        let moved =
            r#"{"source":"/b","files":1,"versions":{"x.txt":"5@7"},"earlier_roots":["/a"]}"#;
        let parsed = Positions::parse(moved).unwrap();
        assert!(
            matches!(&parsed, Positions::Files { earlier_roots, .. } if earlier_roots == &["/a"])
        );
        assert_eq!(parsed.record(), moved);
        let kafka = r#"{"source":"kafka://b:9092/docs","offsets":{"0":12,"3":4}}"#;
        let Some(Positions::Kafka { offsets, .. }) = Positions::parse(kafka) else {
            panic!("a Kafka position");
        };
        assert_eq!(offsets, BTreeMap::from([(0, 12), (3, 4)]));
        assert_eq!(Positions::parse("{}"), None);
    }
}
