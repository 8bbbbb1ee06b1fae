//! Access labels: the groups a document may be read by. A document's labels
//! come from its source (a dataset's column, a message's field, the
//! operator's map of paths) and are held as one normalised set, so that two
//! spellings of one set are one set, with one hash.

/// Most labels one document may carry: a reader's groups are matched
/// against every one of them on every read.
pub const MAX_LABELS: usize = 64;

/// Longest label, in bytes: a group's name, not a document.
pub const MAX_LABEL_BYTES: usize = 256;

/// `given` as a label set: each label trimmed, empty ones dropped, sorted
/// and without repeats. A label with a control character or a comma (the
/// separator of the one-string form), a label longer than
/// [`MAX_LABEL_BYTES`] or more than [`MAX_LABELS`] of them are refused,
/// naming the first that is.
pub fn labels<S: AsRef<str>>(given: impl IntoIterator<Item = S>) -> Result<Vec<String>, String> {
    let mut set = std::collections::BTreeSet::new();
    for label in given {
        let label = label.as_ref().trim();
        if label.is_empty() {
            continue;
        }
        if label.len() > MAX_LABEL_BYTES {
            let head: String = label.chars().take(40).collect();
            return Err(format!(
                "label {head:?}… is longer than {MAX_LABEL_BYTES} bytes"
            ));
        }
        if let Some(bad) = label.chars().find(|c| c.is_control() || *c == ',') {
            return Err(format!("label {label:?} holds {bad:?}"));
        }
        set.insert(label.to_string());
        // Checked as it grows: a hostile list of millions stops here.
        if set.len() > MAX_LABELS {
            return Err(format!("more than {MAX_LABELS} labels"));
        }
    }
    Ok(set.into_iter().collect())
}

/// The label set of a comma-separated list (`"hr, finance"`).
pub fn comma_separated(list: &str) -> Result<Vec<String>, String> {
    labels(list.split(','))
}

/// What separates a name from its label set in a scoped key: a control
/// character, which no label and no normalised name holds.
const SCOPE_SEPARATOR: char = '\u{1f}';

/// The key a cross-document stage groups `key` (an entity's normalised
/// name) under for a document labelled `acl`: the key alone for a document
/// without labels (as memories built before labels keyed it), else the key
/// and the label set, so that no group, and no text written from one, holds
/// documents of two label sets. Every id derived from the key (an entity's,
/// a relation's) is then the label set's own.
pub fn scoped(key: &str, acl: &[String]) -> String {
    if acl.is_empty() {
        return key.to_string();
    }
    format!("{key}{SCOPE_SEPARATOR}{}", acl.join(","))
}

/// The label set a [`scoped`] key was scoped to (none: unlabelled).
pub fn scope_of(key: &str) -> Vec<String> {
    match key.split_once(SCOPE_SEPARATOR) {
        Some((_, set)) => set.split(',').map(str::to_string).collect(),
        None => Vec::new(),
    }
}

/// The column every memory row's labels are in.
pub const ACL_COLUMN: &str = "acl";

/// The SQL condition (Lance's and DataFusion's) a row readable by a
/// principal of `groups` meets: its labels share one of them. None: `false`.
#[cfg(feature = "store")]
pub fn readable(groups: &[String]) -> String {
    match groups.is_empty() {
        true => "false".to_string(),
        false => format!(
            "array_has_any({ACL_COLUMN}, [{}])",
            crate::store::sql_strings(groups)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_one_set_however_it_is_spelled() {
        let spelled = labels([" hr", "finance ", "", "hr"]).unwrap();
        assert_eq!(spelled, ["finance", "hr"]);
        assert_eq!(comma_separated("hr,finance, ,hr").unwrap(), spelled);
        assert_eq!(comma_separated("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_scoped_key_is_the_name_alone_without_labels_and_keeps_its_set() {
        assert_eq!(scoped("ada lovelace", &[]), "ada lovelace");
        assert!(scope_of("ada lovelace").is_empty());
        let set = labels(["tenant-a", "shared"]).unwrap();
        let key = scoped("ada lovelace", &set);
        assert_ne!(key, scoped("ada lovelace", &labels(["tenant-b"]).unwrap()));
        assert_eq!(scope_of(&key), set);
    }

    #[test]
    fn hostile_labels_are_refused_by_name() {
        let error = labels(["ok", "tab\there"]).unwrap_err();
        assert!(error.contains("tab\\there"), "{error}");
        assert!(labels(["a,b"]).unwrap_err().contains("','"));
        let long = "x".repeat(MAX_LABEL_BYTES + 1);
        assert!(labels([long.as_str()]).unwrap_err().contains("longer than"));
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("g{i}")).collect();
        assert!(labels(&many).unwrap_err().contains("more than"));
        let most: Vec<String> = (0..MAX_LABELS).map(|i| format!("g{i}")).collect();
        assert_eq!(labels(&most).unwrap().len(), MAX_LABELS);
    }
}
