//! What the memory is searched by, derived from the rows as they are written,
//! so a reader finds texts through Lance's indexes instead of holding them:
//!
//! - a `terms` column on each searched row (segments, tree nodes, documents'
//!   gist memories), kept with the row where it is made, since a segment
//!   keeps no text: its text's [`terms`](crate::text::terms), sorted, one
//!   space apart ([`crate::text::searched_terms`]). A leaf that is its
//!   segment's own text carries them while it is built and is stored
//!   without them, its segment's row holding the same.
//!   Lance's full-text index reads it with a whitespace tokenizer and nothing
//!   else (no lower-casing, stemming or stop words), so the index's tokens,
//!   frequencies and lengths are exactly those BM25 scores with here;
//! - a `name_keys` list beside each entity: its name and aliases
//!   [`normalise`]d, the keys entities are looked up by;
//! - the `lexicon` table: per corpus and term, how many texts hold the term
//!   and how often it occurs, and per corpus ([`TOTALS`]) how many texts and
//!   terms it has. A reader scores BM25 with it, so a score does not depend on
//!   how Lance splits its index into segments.
//!
//! A corpus is a set of texts ranked against each other: the segments of one
//! cut size, the nodes of one tree, the gist memories.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::MemoryRow;
use crate::rows::LexiconRow;
use crate::rows::TREE_MEMWALKER;
use crate::text::normalise;

pub use crate::tables::{NAME_KEYS, TERMS};

/// The lexicon's term for its corpus as a whole: `rows` its texts,
/// `occurrences` their terms in all.
pub const TOTALS: &str = "*";
/// The corpus of ReadAgent's gist memories, one text per document.
pub const GIST_CORPUS: &str = "gist_memories";

/// The corpus of the segments cut to `target_tokens`.
pub fn segments_corpus(target_tokens: u32) -> String {
    format!("segments/{target_tokens}")
}

/// The cut size of a segments corpus, `None` for any other corpus.
pub fn segments_cut(corpus: &str) -> Option<u32> {
    corpus.strip_prefix("segments/")?.parse().ok()
}

/// The `target_tokens` of the one segment of a document too short for its
/// segments and its passages (the baselines' finer cut) to differ: a row that
/// stands in both cuts, so that its terms and index entries are kept once.
/// A reader of either cut reads these rows with its own
/// ([`cut_condition`]), and counts their corpus with its own.
pub const WHOLE_DOCUMENT_CUT: u32 = 0;

/// The `target_tokens` of a whole document ([`WHOLE_DOCUMENT_CUT`]) that is
/// also its own gist memory (one page, its own gist): it stands in the
/// gist memories too, which keep no row of it, so that a short document's
/// terms are kept once. ReadAgent's document choice searches these rows
/// with the gist memories ([`gist_corpora`]). No cut is this size (a cut's
/// target is above its smallest segment, at least one token).
pub const OWN_GIST_CUT: u32 = 1;

/// The cuts of the segments that stand in every cut: the whole documents'.
const WHOLE_DOCUMENT_CUTS: [u32; 2] = [WHOLE_DOCUMENT_CUT, OWN_GIST_CUT];

/// Whether `target_tokens` is a whole document's, not a cut's.
pub fn is_whole_document(target_tokens: u32) -> bool {
    WHOLE_DOCUMENT_CUTS.contains(&target_tokens)
}

/// The filter on `segments` for the rows of the cut `target_tokens`: its own
/// and the whole documents' ([`WHOLE_DOCUMENT_CUT`], [`OWN_GIST_CUT`]).
pub fn cut_condition(target_tokens: u32) -> String {
    format!("target_tokens IN ({target_tokens}, {WHOLE_DOCUMENT_CUT}, {OWN_GIST_CUT})")
}

/// Whether a segment of the cut `segment_cut` belongs to the cut
/// `target_tokens` ([`cut_condition`]'s test on one row).
pub fn in_cut(segment_cut: u32, target_tokens: u32) -> bool {
    segment_cut == target_tokens || is_whole_document(segment_cut)
}

/// The corpora whose statistics together are those of the cut
/// `target_tokens`: its own and the whole documents', once each.
pub fn cut_corpora(target_tokens: u32) -> Vec<String> {
    let mut corpora = vec![segments_corpus(target_tokens)];
    for whole in WHOLE_DOCUMENT_CUTS {
        if whole != target_tokens {
            corpora.push(segments_corpus(whole));
        }
    }
    corpora
}

/// The corpora whose statistics together are those of ReadAgent's gist
/// memories: the gist memories kept as rows, and the documents that are
/// their own ([`OWN_GIST_CUT`]).
pub fn gist_corpora() -> Vec<String> {
    vec![GIST_CORPUS.to_string(), segments_corpus(OWN_GIST_CUT)]
}

/// The corpus of the summaries of one tree (`memwalker`, `raptor`, …).
pub fn tree_corpus(tree: &str) -> String {
    format!("tree_nodes/{tree}")
}

/// The keys an entity is found by: its name and aliases, normalised, sorted
/// and once each.
pub fn name_keys<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let keys: BTreeSet<String> = names.into_iter().map(normalise).collect();
    keys.into_iter().collect()
}

/// The corpora a reader scores BM25 over, the only ones the lexicon counts:
/// the passages (the memory's finest cut, with the whole documents that
/// stand in every cut), MemWalker's summaries and the gist memories. The
/// other cuts and trees are searched only for candidates, which their
/// full-text indexes find by their own counts; counting them too kept
/// about 40% of pg-essays' lexicon rows that nothing read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankedCorpora {
    passage_cut: u32,
}

impl RankedCorpora {
    /// Of a memory whose finest cut is `passage_cut`.
    pub fn finest_cut(passage_cut: u32) -> Self {
        RankedCorpora { passage_cut }
    }

    /// Of a memory holding segments of the cuts `cuts`: the finest that is
    /// not a whole document's (the one a reader ranks as its passages).
    pub fn of_cuts(cuts: impl IntoIterator<Item = u32>) -> Self {
        let finest = cuts
            .into_iter()
            .filter(|cut| !is_whole_document(*cut))
            .min();
        Self::finest_cut(finest.unwrap_or(WHOLE_DOCUMENT_CUT))
    }

    /// Whether the lexicon counts `corpus`.
    pub fn counts(&self, corpus: &str) -> bool {
        match segments_cut(corpus) {
            Some(cut) => in_cut(cut, self.passage_cut),
            None => corpus == GIST_CORPUS || corpus == tree_corpus(TREE_MEMWALKER),
        }
    }
}

/// The corpus a row's searched text belongs to, that text's terms (each
/// row carries its text's terms: a segment and a leaf that is its segment's
/// own text keep no text) and its label set.
fn corpus_and_terms(row: &MemoryRow) -> Option<(String, &str, &[String])> {
    let (corpus, terms, acl) = match row {
        MemoryRow::Segment(s) => (segments_corpus(s.target_tokens), &s.terms, &s.acl),
        MemoryRow::TreeNode(n) => (tree_corpus(&n.tree), &n.terms, &n.acl),
        MemoryRow::GistMemory(g) => (GIST_CORPUS.to_string(), &g.terms, &g.acl),
        _ => return None,
    };
    Some((corpus, terms, acl))
}

/// A lexicon entry: a corpus, a term, and the label set of the texts it
/// counts. Each label set's texts are counted apart, so that a reader's
/// statistics are those of the sets it may read: how often a term occurs
/// in documents it may not read does not move its scores.
type Entry = (String, String, Vec<String>);

/// A change to the lexicon: per entry, texts and occurrences added
/// (positive) or removed (negative).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LexiconDelta {
    changes: BTreeMap<Entry, (i64, i64)>,
}

impl LexiconDelta {
    /// Counts `row`'s searched text in (`sign` 1) or out (`sign` -1), where
    /// its corpus is one of `ranked`.
    pub fn count(&mut self, row: &MemoryRow, sign: i64, ranked: RankedCorpora) {
        let Some((corpus, terms, acl)) = corpus_and_terms(row) else {
            return;
        };
        if !ranked.counts(&corpus) {
            return;
        }
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for term in terms.split_whitespace() {
            *counts.entry(term).or_default() += 1;
        }
        let total: i64 = counts.values().sum();
        self.add(&corpus, TOTALS, acl, sign, sign * total);
        for (term, count) in counts {
            self.add(&corpus, term, acl, sign, sign * count);
        }
    }

    fn add(&mut self, corpus: &str, term: &str, acl: &[String], rows: i64, occurrences: i64) {
        let entry = (corpus.to_string(), term.to_string(), acl.to_vec());
        let change = self.changes.entry(entry).or_default();
        change.0 += rows;
        change.1 += occurrences;
    }

    pub fn merge(&mut self, other: LexiconDelta) {
        for (entry, (rows, occurrences)) in other.changes {
            let change = self.changes.entry(entry).or_default();
            change.0 += rows;
            change.1 += occurrences;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The terms this delta changes (the lexicon's keys), each once.
    pub fn terms(&self) -> Vec<String> {
        let terms: BTreeSet<&String> = self.changes.keys().map(|(_, term, _)| term).collect();
        terms.into_iter().cloned().collect()
    }

    /// The rows that replace `current`, the rows of the terms this delta
    /// changes (every corpus's and label set's: a commit replaces a term's
    /// rows together):
    /// the changed counts, and the others as they were; an entry no text
    /// holds any more has none. An entry that would go below zero is an
    /// error: the lexicon and the tables disagree.
    pub fn apply(&self, current: &[LexiconRow]) -> Result<Vec<LexiconRow>, BelowZero> {
        let mut counts: BTreeMap<Entry, (u64, u64)> = (current.iter())
            .map(|r| {
                let entry = (r.corpus.clone(), r.term.clone(), r.acl.clone());
                (entry, (r.rows, r.occurrences))
            })
            .collect();
        for (key, &(rows_change, occurrences_change)) in &self.changes {
            let before = counts.get(key).copied();
            let (corpus, term, acl) = key;
            let after = |was: Option<u64>, change: i64| {
                u64::try_from(was.unwrap_or(0) as i64 + change).map_err(|_| BelowZero {
                    entry: format!("{corpus} {term} {acl:?}"),
                    change,
                    was,
                })
            };
            let texts = after(before.map(|c| c.0), rows_change)?;
            let occurrences = after(before.map(|c| c.1), occurrences_change)?;
            counts.insert(key.clone(), (texts, occurrences));
        }
        Ok(counts
            .into_iter()
            .filter(|(_, (texts, _))| *texts > 0)
            .map(|((corpus, term, acl), (rows, occurrences))| LexiconRow {
                corpus,
                term,
                rows,
                occurrences,
                acl,
            })
            .collect())
    }
}

/// A lexicon entry a delta would count below zero: the lexicon and the tables
/// disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lexicon entry {entry:?} would count below zero ({change} from {was:?})")]
pub struct BelowZero {
    pub entry: String,
    pub change: i64,
    pub was: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Labelled;
    use crate::rows::{GistMemoryRow, Segment, SegmentRow};

    fn segment(text: &str, target_tokens: u32) -> MemoryRow {
        let row = SegmentRow::counted(text, target_tokens, String::new());
        MemoryRow::Segment(Segment::new(row, text.into()).row)
    }

    /// A memory whose passages are cut to 100 tokens.
    const RANKED: RankedCorpora = RankedCorpora { passage_cut: 100 };

    #[test]
    fn a_delta_counts_texts_and_occurrences_per_corpus_and_drops_emptied_entries() {
        let mut delta = LexiconDelta::default();
        delta.count(&segment("Paint, paints and startups.", 100), 1, RANKED);
        delta.count(&segment("A startup.", 100), 1, RANKED);
        delta.count(&segment("A startup.", WHOLE_DOCUMENT_CUT), 1, RANKED);
        let gists = MemoryRow::GistMemory(GistMemoryRow::new("d", ["paints"]));
        delta.count(&gists, 1, RANKED);
        let rows = delta.apply(&[]).unwrap();
        let find = |entry: &str| {
            let (corpus, term) = entry.split_once(' ').unwrap();
            (rows.iter())
                .find(|r| r.corpus == corpus && r.term == term)
                .cloned()
        };
        let painting = find("segments/100 paint").unwrap();
        assert_eq!((painting.rows, painting.occurrences), (1, 2));
        let startup = find("segments/100 startup").unwrap();
        assert_eq!((startup.rows, startup.occurrences), (2, 2));
        let totals = find("segments/100 *").unwrap();
        assert_eq!((totals.rows, totals.occurrences), (2, 4));
        assert_eq!(find("segments/0 *").unwrap().rows, 1);
        assert_eq!(find("gist_memories paint").unwrap().rows, 1);

        // Each label set's texts are counted apart: what a reader of one
        // set learns of a term is what its own texts say.
        let mut labelled = LexiconDelta::default();
        let hr = vec!["hr".to_string()];
        let secret = match segment("A startup.", 100) {
            MemoryRow::Segment(row) => MemoryRow::Segment(row.labelled(&hr)),
            _ => unreachable!("a segment"),
        };
        labelled.count(&secret, 1, RANKED);
        labelled.count(&segment("A startup.", 100), 1, RANKED);
        let counted = labelled.apply(&[]).unwrap();
        let startups: Vec<(Vec<String>, u64)> = (counted.iter())
            .filter(|r| r.term == "startup")
            .map(|r| (r.acl.clone(), r.rows))
            .collect();
        assert_eq!(startups, [(vec![], 1), (hr, 1)]);

        // Taking a text out again replaces the rows of its terms (in every
        // corpus, as a commit reads them back by term): the others' counts
        // kept, and no entry for a term no text holds.
        let mut removal = LexiconDelta::default();
        removal.count(&segment("Paint, paints and startups.", 100), -1, RANKED);
        let terms = removal.terms();
        let current: Vec<LexiconRow> = (rows.iter())
            .filter(|r| terms.contains(&r.term))
            .cloned()
            .collect();
        let after = removal.apply(&current).unwrap();
        assert!(
            !after
                .iter()
                .any(|r| r.term == "paint" && r.corpus == "segments/100")
        );
        let startup = |corpus: &str| {
            let row = after
                .iter()
                .find(|r| r.term == "startup" && r.corpus == corpus);
            row.map(|r| (r.rows, r.occurrences))
        };
        assert_eq!(startup("segments/100"), Some((1, 1)));
        assert_eq!(
            startup("segments/0"),
            Some((1, 1)),
            "another corpus's row kept"
        );
        assert!(
            after
                .iter()
                .any(|r| r.term == "paint" && r.corpus == "gist_memories")
        );

        // Removing what was never counted is an error, not a silent zero.
        let mut wrong = LexiconDelta::default();
        wrong.count(&segment("unknown words", 100), -1, RANKED);
        assert!(
            wrong
                .apply(&current)
                .unwrap_err()
                .to_string()
                .contains("below zero")
        );
    }

    /// Only what a reader ranks is counted: a coarser cut's segments and
    /// RAPTOR's summaries are found by their full-text indexes alone.
    #[test]
    fn the_lexicon_counts_only_the_corpora_readers_rank() {
        let node = |tree: &str| {
            MemoryRow::TreeNode(crate::rows::TreeNodeRow {
                node_id: tree.into(),
                tree: tree.into(),
                doc_id: None,
                level: 0,
                ordinal: 0,
                parent_id: None,
                child_ids: Vec::new(),
                seg_id: None,
                summary: Some("A harbour.".into()),
                surprise: None,
                n_tokens: 2,
                terms: "harbour".into(),
                acl: Vec::new(),
            })
        };
        let mut delta = LexiconDelta::default();
        for row in [
            segment("A harbour.", 100),
            segment("A harbour.", 600),
            segment("A harbour.", OWN_GIST_CUT),
            node(TREE_MEMWALKER),
            node(crate::rows::TREE_RAPTOR),
            node(crate::rows::TREE_MEMWALKER_CORPUS),
        ] {
            delta.count(&row, 1, RANKED);
        }
        let corpora: BTreeSet<String> = (delta.apply(&[]).unwrap().into_iter())
            .map(|r| r.corpus)
            .collect();
        assert_eq!(
            corpora,
            BTreeSet::from([
                "segments/100".to_string(),
                "segments/1".to_string(),
                "tree_nodes/memwalker".to_string(),
            ])
        );
        // The finest cut of a memory's is its passages, whole documents apart.
        assert_eq!(
            RankedCorpora::of_cuts([1_000, 600, 0, 1]),
            RankedCorpora::finest_cut(600)
        );
        assert_eq!(
            RankedCorpora::of_cuts([0, 1]),
            RankedCorpora::finest_cut(WHOLE_DOCUMENT_CUT)
        );
    }

    #[test]
    fn name_keys_are_normalised_sorted_and_once_each() {
        assert_eq!(
            name_keys(["The Beatles", "beatles", "Fab Four"]),
            vec!["beatles".to_string(), "fab four".to_string()]
        );
    }
}
