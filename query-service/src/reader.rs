//! Whose request a snapshot answers. The administrator (no tokens, the
//! service's bearer token, `memweave ask`) reads every row. A principal (a
//! verified JSON Web Token) reads the rows whose access labels share one of
//! its groups, as if no other row were there: every read of the memory is
//! filtered where it is made ([`crate::snapshot::Snapshot::read_as`]), so a
//! navigator, a listing or a count cannot meet another's row.
//!
//! A row's labels are the label set of the documents it was derived from
//! (the indexer never writes a row from two sets), so a principal who may
//! read a row may read every document it says something of.

use std::sync::Arc;

use memweave_schemas::acl;
pub use memweave_schemas::acl::ACL_COLUMN;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Reader {
    /// Every row.
    #[default]
    Everything,
    /// The rows labelled with one of these groups.
    Groups(Arc<Groups>),
}

/// A principal's groups, normalised as labels are, with the filter and the
/// cache scope made from them once.
#[derive(Debug, PartialEq, Eq)]
pub struct Groups {
    groups: Vec<String>,
    /// The SQL condition on [`ACL_COLUMN`] a row meets when it is readable.
    condition: String,
    /// What the row cache keys this reader's answers under.
    scope: String,
}

impl Reader {
    /// The reader of the rows labelled with one of `groups` (none: no row).
    /// A group that could not be a label is refused, naming it.
    pub fn groups<S: AsRef<str>>(groups: impl IntoIterator<Item = S>) -> Result<Reader, String> {
        let groups = acl::labels(groups)?;
        let condition = acl::readable(&groups);
        let scope = acl::scoped("", &groups);
        Ok(Reader::Groups(Arc::new(Groups {
            groups,
            condition,
            scope,
        })))
    }

    /// Whether a row labelled `labels` is readable.
    pub fn sees(&self, labels: &[String]) -> bool {
        match self {
            Reader::Everything => true,
            Reader::Groups(reader) => labels.iter().any(|l| reader.groups.contains(l)),
        }
    }

    /// The condition a readable row of a table meets: none for the
    /// administrator; for a principal, one on the labels, or `false` where
    /// the table has no labels (a memory built before them: its rows are
    /// the administrator's).
    pub fn condition(&self, labelled: bool) -> Option<&str> {
        match self {
            Reader::Everything => None,
            Reader::Groups(_) if !labelled => Some("false"),
            Reader::Groups(reader) => Some(&reader.condition),
        }
    }

    /// `key` in this reader's part of a cache: answers read for one reader
    /// are never served to another.
    pub fn cache_key<'k>(&self, key: &'k str) -> std::borrow::Cow<'k, str> {
        match self {
            Reader::Everything => key.into(),
            Reader::Groups(reader) => format!("{key}{}", reader.scope).into(),
        }
    }

    /// The principal's groups; none for the administrator, who reads
    /// every row whatever its labels.
    pub fn group_names(&self) -> Option<&[String]> {
        match self {
            Reader::Everything => None,
            Reader::Groups(reader) => Some(&reader.groups),
        }
    }

    /// The principal of no group: it reads no row.
    pub fn nobody() -> Reader {
        let groups: [&str; 0] = [];
        Reader::groups(groups).expect("no label is a valid set of labels")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_sees_the_rows_that_share_a_group() {
        let reader = Reader::groups(["tenant-a", " shared", "shared"]).unwrap();
        assert_eq!(
            reader.group_names(),
            Some(&["shared".into(), "tenant-a".into()][..])
        );
        assert!(reader.sees(&["shared".into(), "tenant-b".into()]));
        assert!(!reader.sees(&["tenant-b".into()]));
        assert!(
            !reader.sees(&[]),
            "an unlabelled row is the administrator's"
        );
        assert_eq!(
            reader.condition(true),
            Some("array_has_any(acl, ['shared', 'tenant-a'])")
        );
        assert_eq!(reader.condition(false), Some("false"));
        assert_eq!(Reader::Everything.condition(false), None);
        assert!(Reader::Everything.sees(&[]));
        let none = Reader::nobody();
        assert_eq!(none.group_names(), Some(&[][..]));
        assert_eq!(Reader::Everything.group_names(), None);
        assert_eq!(none.condition(true), Some("false"));
        assert!(!none.sees(&["shared".into()]));
        // Another reader's answers are cached apart, the administrator's as
        // they were.
        assert_ne!(reader.cache_key("d1"), none.cache_key("d1"));
        assert_eq!(Reader::Everything.cache_key("d1"), "d1");
        assert!(
            Reader::groups(["a'); DROP"])
                .is_ok_and(|r| r.condition(true) == Some("array_has_any(acl, ['a''); DROP'])"))
        );
        assert!(Reader::groups(["a,b"]).is_err());
    }
}
