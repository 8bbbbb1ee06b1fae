//! Which access labels a source's documents carry: their own (a dataset
//! row's column, a message's field), else those the operator's map gives
//! the path they were read from, else the source's default.

use std::path::Path;

use memweave_schemas::acl;

/// A source's labelling: the operator's map of path prefixes to label sets
/// (`--acl-map`) and the set of a document neither it nor the map labels
/// (`--acl-default`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Access {
    /// Prefixes (paths relative to the source's root, without the slashes
    /// at their ends; "" is the root) and their labels, longest first, so
    /// the first that matches is the most specific.
    prefixes: Vec<(String, Vec<String>)>,
    default: Vec<String>,
}

impl Access {
    /// The labelling of `map` (prefix → labels) and `default`, each label
    /// set normalised; a bad label is refused naming its prefix.
    pub fn new<L, S>(
        map: impl IntoIterator<Item = (String, L)>,
        default: Vec<String>,
    ) -> Result<Self, String>
    where
        L: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut prefixes = Vec::new();
        for (prefix, labels) in map {
            let labels = acl::labels(labels).map_err(|e| format!("prefix {prefix:?}: {e}"))?;
            prefixes.push((prefix.trim_matches('/').to_string(), labels));
        }
        prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        if let Some(pair) = prefixes.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(format!("prefix {:?} is given twice", pair[0].0));
        }
        Ok(Access { prefixes, default })
    }

    /// The labelling of a source without a map: `default` for every
    /// document that has no labels of its own.
    pub fn only_default(default: Vec<String>) -> Self {
        Access {
            prefixes: Vec::new(),
            default,
        }
    }

    /// The labelling a map file gives (a JSON object, or a TOML table of a
    /// `.toml` file: each key a path prefix, each value a list of labels or
    /// one comma-separated string), with `default`.
    pub fn from_file(path: &Path, default: Vec<String>) -> Result<Self, String> {
        let named = |e: String| format!("{}: {e}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| named(e.to_string()))?;
        let map: std::collections::BTreeMap<String, LabelList> = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
        {
            toml::from_str(&text).map_err(|e| named(e.to_string()))?
        } else {
            serde_json::from_str(&text).map_err(|e| named(e.to_string()))?
        };
        let map = map
            .into_iter()
            .map(|(prefix, list)| (prefix, list.into_labels()));
        Access::new(map, default).map_err(named)
    }

    /// Whether this labelling labels nothing: every document keeps its own.
    pub fn is_none(&self) -> bool {
        self.prefixes.is_empty() && self.default.is_empty()
    }

    /// The labels of a document that gives `own`, read from `key` (a path
    /// under the source's root; `None` for a message): its own if it has
    /// any, else those of the longest prefix of `key`, in whole path
    /// components, the map names, else the default.
    pub fn labels_of(&self, key: Option<&str>, own: Vec<String>) -> Vec<String> {
        if !own.is_empty() {
            return own;
        }
        let mapped = key.and_then(|key| {
            (self.prefixes.iter())
                .find(|(prefix, _)| is_under(key, prefix))
                .map(|(_, labels)| labels.clone())
        });
        mapped.unwrap_or_else(|| self.default.clone())
    }
}

/// Whether `key` is `prefix` or lies under it, component by component
/// (`hr` holds `hr/a.txt`, not `hrx/a.txt`).
fn is_under(key: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Labels as a map file or a record writes them: a list, or one
/// comma-separated string.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum LabelList {
    List(Vec<String>),
    Text(String),
}

impl LabelList {
    fn into_labels(self) -> Vec<String> {
        match self {
            LabelList::List(list) => list,
            LabelList::Text(text) => text.split(',').map(str::to_string).collect(),
        }
    }
}

/// The labels a JSON value gives (a record's field, a message's `acl`):
/// none for a missing field or null, else a list of strings or one
/// comma-separated string, normalised.
pub fn json_labels(value: Option<serde_json::Value>) -> Result<Vec<String>, String> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::String(list)) => acl::comma_separated(&list),
        Some(serde_json::Value::Array(items)) => {
            if !items.iter().all(serde_json::Value::is_string) {
                return Err("must be a list of strings".into());
            }
            // Bounded as the set grows: a list of millions stops at the
            // first label past the most.
            acl::labels(items.iter().filter_map(serde_json::Value::as_str))
        }
        Some(_) => Err("must be a list of strings or one comma-separated string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(map: &[(&str, &str)], default: &str) -> Access {
        let map = (map.iter()).map(|(p, l)| (p.to_string(), l.split(',').collect::<Vec<_>>()));
        Access::new(map, acl::comma_separated(default).unwrap()).unwrap()
    }

    #[test]
    fn the_longest_prefix_in_whole_components_labels_a_path() {
        let access = access(
            &[("hr", "hr"), ("hr/payroll/", "payroll"), ("", "staff")],
            "",
        );
        let of = |key: &str| access.labels_of(Some(key), Vec::new());
        assert_eq!(of("hr/policy.md"), ["hr"]);
        assert_eq!(of("hr/payroll/2026.csv"), ["payroll"]);
        assert_eq!(of("hrx/a.txt"), ["staff"]);
        assert_eq!(of("hr"), ["hr"]);
        // A document's own labels win; a message has no path.
        assert_eq!(access.labels_of(Some("hr/a"), vec!["x".into()]), ["x"]);
        assert_eq!(access.labels_of(None, Vec::new()), Vec::<String>::new());
    }

    #[test]
    fn what_nothing_labels_gets_the_default() {
        let access = access(&[("legal", "legal")], "everyone");
        assert_eq!(
            access.labels_of(Some("notes/a.txt"), Vec::new()),
            ["everyone"]
        );
        assert_eq!(access.labels_of(None, Vec::new()), ["everyone"]);
        assert!(Access::default().is_none());
        assert!(!access.is_none());
    }

    #[test]
    fn map_files_are_json_or_toml_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("acl.json");
        std::fs::write(&json, r#"{"a/": ["x", "y"], "b": "z, w"}"#).unwrap();
        let toml = dir.path().join("acl.toml");
        std::fs::write(&toml, "\"a/\" = [\"x\", \"y\"]\nb = \"z, w\"\n").unwrap();
        let read = Access::from_file(&json, Vec::new()).unwrap();
        assert_eq!(read, Access::from_file(&toml, Vec::new()).unwrap());
        assert_eq!(read.labels_of(Some("b/c"), Vec::new()), ["w", "z"]);
        std::fs::write(&json, r#"{"a": ["bad\u0007label"]}"#).unwrap();
        let error = Access::from_file(&json, Vec::new()).unwrap_err();
        assert!(
            error.contains("acl.json") && error.contains("prefix \"a\""),
            "{error}"
        );
        std::fs::write(&json, r#"{"a": [1]}"#).unwrap();
        assert!(
            Access::from_file(&json, Vec::new())
                .unwrap_err()
                .contains("acl.json")
        );
        std::fs::write(&json, r#"{"a": "x", "a/": "y"}"#).unwrap();
        let twice = Access::from_file(&json, Vec::new()).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
    }

    #[test]
    fn json_labels_take_a_list_or_a_string_and_refuse_the_rest() {
        let labels = |v: serde_json::Value| json_labels(Some(v));
        assert_eq!(labels(serde_json::json!(["b", "a"])).unwrap(), ["a", "b"]);
        assert_eq!(labels(serde_json::json!("b,a")).unwrap(), ["a", "b"]);
        assert_eq!(json_labels(None).unwrap(), Vec::<String>::new());
        assert_eq!(
            labels(serde_json::Value::Null).unwrap(),
            Vec::<String>::new()
        );
        assert!(labels(serde_json::json!([1])).is_err());
        assert!(labels(serde_json::json!({"a": 1})).is_err());
        let many: Vec<String> = (0..10_000).map(|i| format!("g{i}")).collect();
        assert!(
            labels(serde_json::json!(many))
                .unwrap_err()
                .contains("more than")
        );
    }
}
