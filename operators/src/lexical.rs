//! Lexical statistics: terms, term-frequency vectors, cosine similarity and BM25.
//! The extractive backend and the lexical navigators are built from these.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use quick_cache::sync::Cache;

pub use memweave_schemas::text::terms;

/// How rare a term is in general text, in nats: its self-information under a
/// Zipf law over cl100k's vocabulary. BPE merges are made in order of how
/// often byte sequences occur in the tokenizer's web-scale training text, so a
/// word's token id ranks its frequency there (" need" comes before " pizza");
/// a word with no token of its own is rarer than any that has one. Built into
/// the binary, so a term weighs the same in every process, document and
/// stream order, and a reply that depends on it stays a function of its prompt.
pub fn term_rarity(term: &str) -> f64 {
    term_facts(term).rarity
}

/// What a hashing vector takes of a term, a pure function of it: its
/// [`term_rarity`], and the component and sign its hash gives it.
#[derive(Debug, Clone, Copy)]
struct TermFacts {
    rarity: f64,
    hash: u64,
    negative: bool,
}

fn term_facts(term: &str) -> TermFacts {
    // Encoding a term with cl100k and hashing it are most of a hashing
    // vector's cost, and an archive's texts share most of their terms: each
    // process keeps the facts of the terms it met last (any process gets
    // the same).
    static KNOWN: LazyLock<Cache<String, TermFacts>> = LazyLock::new(|| Cache::new(TERMS_KEPT));
    if let Some(facts) = KNOWN.get(term) {
        return facts;
    }
    let hash = blake3::hash(term.as_bytes());
    let bytes = hash.as_bytes();
    let facts = TermFacts {
        rarity: encoded_rarity(term),
        hash: u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")),
        negative: bytes[8] & 1 == 1,
    };
    KNOWN.insert(term.to_string(), facts);
    facts
}

/// [`term_rarity`] worked out from the term's cl100k tokens.
fn encoded_rarity(term: &str) -> f64 {
    /// ln of the harmonic number of cl100k's 100,256 ranks: the Zipf law's
    /// normalising constant.
    const LN_ZIPF_NORM: f64 = 2.49;
    const VOCABULARY: f64 = 100_256.0;
    let tokens = crate::tokens::cl100k().encode_ordinary(&format!(" {term}"));
    let rank = match tokens.as_slice() {
        [single] => f64::from(*single).max(1.0),
        pieces => VOCABULARY * pieces.len() as f64,
    };
    rank.ln() + LN_ZIPF_NORM
}

/// Terms whose facts a process keeps: a few MiB.
const TERMS_KEPT: usize = 1 << 16;

/// The rarest of `terms` ([`term_rarity`]): what a question is most
/// specifically about; ties to the first in alphabetical order.
pub fn rarest<'a>(terms: impl IntoIterator<Item = &'a String>) -> Option<&'a String> {
    terms
        .into_iter()
        .map(|t| (t, term_rarity(t)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(t, _)| t)
}

/// A bag of terms with counts.
/// Ordered, so sums run in one order and similarities are the same bit for bit in
/// every process (ties between them decide breaks and summaries).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermVector {
    counts: BTreeMap<String, f64>,
}

impl TermVector {
    pub fn of(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for term in terms(text) {
            *counts.entry(term).or_insert(0.0) += 1.0;
        }
        TermVector { counts }
    }

    pub fn cosine(&self, other: &TermVector) -> f64 {
        let (small, large) = if self.counts.len() < other.counts.len() {
            (self, other)
        } else {
            (other, self)
        };
        let dot: f64 = small
            .counts
            .iter()
            .filter_map(|(t, a)| large.counts.get(t).map(|b| a * b))
            .sum();
        let norm = self.norm() * other.norm();
        if norm == 0.0 { 0.0 } else { dot / norm }
    }

    fn norm(&self) -> f64 {
        self.counts.values().map(|c| c * c).sum::<f64>().sqrt()
    }
}

/// Among `candidates` (a break after unit `c`), the one where the vocabulary shifts
/// most: the lowest similarity between unit `c` and unit `c + 1`; ties go to the
/// earliest. `None` when no candidate has a unit after it to compare with.
pub fn sharpest_shift(vectors: &[TermVector], candidates: &[usize]) -> Option<usize> {
    candidates
        .iter()
        .copied()
        .filter(|&c| c + 1 < vectors.len())
        .map(|c| (c, vectors[c].cosine(&vectors[c + 1])))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(c, _)| c)
}

/// Okapi BM25 over a fixed set of texts.
#[derive(Debug, Clone)]
pub struct Bm25 {
    docs: Vec<HashMap<String, f64>>,
    lengths: Vec<f64>,
    stats: CorpusStats,
}

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// What BM25 needs of a corpus to score any text against it: how many texts it
/// has, their average length in terms, and how many of them hold each term
/// (those of one query suffice to score that query).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorpusStats {
    pub texts: f64,
    pub average_length: f64,
    pub document_frequency: HashMap<String, f64>,
}

impl CorpusStats {
    /// Inverse document frequency of `term` in the corpus.
    pub fn idf(&self, term: &str) -> f64 {
        let df = self.document_frequency.get(term).copied().unwrap_or(0.0);
        ((self.texts - df + 0.5) / (df + 0.5) + 1.0).ln()
    }

    /// BM25 score of `text` (any text, in the corpus or not) for the query terms.
    pub fn score_text(&self, query: &[String], text: &str) -> f64 {
        self.score_terms(query, terms(text).iter().map(String::as_str))
    }

    /// BM25 score of a text given as its [`terms`], for the query terms.
    pub fn score_terms<'a>(
        &self,
        query: &[String],
        terms: impl IntoIterator<Item = &'a str>,
    ) -> f64 {
        let mut length = 0.0;
        let mut counts: HashMap<String, f64> = HashMap::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            length += 1.0;
            *counts.entry(term.to_string()).or_insert(0.0) += 1.0;
        }
        self.score_counts(query, &counts, length)
    }

    fn score_counts(&self, query: &[String], doc: &HashMap<String, f64>, length: f64) -> f64 {
        self.score_weighted(query, doc, length, |_| 1.0)
    }

    /// [`CorpusStats::score_counts`] with each query term's part multiplied by
    /// `weight(term)`.
    fn score_weighted(
        &self,
        query: &[String],
        doc: &HashMap<String, f64>,
        length: f64,
        weight: impl Fn(&str) -> f64,
    ) -> f64 {
        let length_norm = if self.average_length > 0.0 {
            length / self.average_length
        } else {
            1.0
        };
        query
            .iter()
            .filter_map(|term| {
                let tf = *doc.get(term)?;
                let idf = self.idf(term) * weight(term);
                Some(idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length_norm)))
            })
            // An empty sum is -0.0; adding 0.0 keeps "no match" at plain zero.
            .sum::<f64>()
            + 0.0
    }
}

impl Bm25 {
    pub fn new<'a>(texts: impl IntoIterator<Item = &'a str>) -> Self {
        let mut docs = Vec::new();
        let mut lengths = Vec::new();
        let mut document_frequency: HashMap<String, f64> = HashMap::new();
        for text in texts {
            let mut counts: HashMap<String, f64> = HashMap::new();
            let terms = terms(text);
            lengths.push(terms.len() as f64);
            for term in terms {
                *counts.entry(term).or_insert(0.0) += 1.0;
            }
            for term in counts.keys() {
                *document_frequency.entry(term.clone()).or_insert(0.0) += 1.0;
            }
            docs.push(counts);
        }
        let average_length = if lengths.is_empty() {
            0.0
        } else {
            lengths.iter().sum::<f64>() / lengths.len() as f64
        };
        Bm25 {
            stats: CorpusStats {
                texts: docs.len() as f64,
                average_length,
                document_frequency,
            },
            docs,
            lengths,
        }
    }

    /// BM25 score of text `index` for the query terms.
    pub fn score(&self, query: &[String], index: usize) -> f64 {
        self.stats
            .score_counts(query, &self.docs[index], self.lengths[index])
    }

    /// BM25 score of a text outside the index, with the index's statistics.
    pub fn score_text(&self, query: &[String], text: &str) -> f64 {
        self.stats.score_text(query, text)
    }

    /// Inverse document frequency of `term` in the indexed texts.
    pub fn idf(&self, term: &str) -> f64 {
        self.stats.idf(term)
    }

    /// Indices of the texts ordered by descending score (ties by index), with scores.
    pub fn rank(&self, query: &[String]) -> Vec<(usize, f64)> {
        self.rank_by(|i| self.score(query, i))
    }

    /// [`Bm25::rank`] with each query term's part weighted by its
    /// [`term_rarity`]: among a handful of texts (a node's children, a
    /// document's gists) document frequencies barely tell "first" from
    /// "pizza"; general rarity does.
    pub fn rank_by_rarity(&self, query: &[String]) -> Vec<(usize, f64)> {
        let rarity: HashMap<&str, f64> =
            query.iter().map(|t| (t.as_str(), term_rarity(t))).collect();
        self.rank_by(|i| {
            self.stats
                .score_weighted(query, &self.docs[i], self.lengths[i], |t| rarity[t])
        })
    }

    fn rank_by(&self, score: impl Fn(usize) -> f64) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = (0..self.docs.len()).map(|i| (i, score(i))).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }
}

/// A feature-hashed bag of terms: each term adds ± its [`term_rarity`] times
/// `1 + ln(count)` at a position drawn from its hash, then the vector is scaled to unit length. No
/// model; texts that share rare words get similar vectors, so a question's
/// rare words find the passage that holds them among common ones.
pub fn hashing_embedding(text: &str, dim: usize) -> Vec<f32> {
    let terms = terms(text);
    hashing_embedding_of_terms(terms.iter().map(String::as_str), dim)
}

/// [`hashing_embedding`] of a text whose [`terms`] are `terms`: a row that
/// keeps its text's terms (a segment's) has its vector without its text.
pub fn hashing_embedding_of_terms<'a>(
    terms: impl IntoIterator<Item = &'a str>,
    dim: usize,
) -> Vec<f32> {
    let mut vector = vec![0f32; dim.max(1)];
    let mut counts: BTreeMap<&str, f32> = BTreeMap::new();
    for term in terms {
        *counts.entry(term).or_insert(0.0) += 1.0;
    }
    for (term, count) in counts {
        let facts = term_facts(term);
        let position = facts.hash as usize % vector.len();
        // Repeats count sublinearly, as BM25 saturates them: a text's tenth
        // "startup" says less than its one "pizza".
        let weight = (1.0 + count.ln()) * facts.rarity as f32;
        vector[position] += if facts.negative { -weight } else { weight };
    }
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_stopwords_and_stem() {
        assert_eq!(
            terms("What did the author learn from Painting? He learned paintings."),
            vec!["author", "learn", "paint", "learn", "paint"]
        );
    }

    /// A row that keeps its text's terms (a segment's) has the text's vector.
    #[test]
    fn a_text_and_its_terms_have_one_vector() {
        let text = "Painting still lifes taught me to look; paintings fade, pizza does not.";
        let kept = memweave_schemas::text::searched_terms([text]);
        assert_eq!(
            hashing_embedding_of_terms(kept.split_whitespace(), 64),
            hashing_embedding(text, 64)
        );
        assert_ne!(
            hashing_embedding_of_terms(kept.split_whitespace().skip(1), 64),
            hashing_embedding(text, 64)
        );
    }

    #[test]
    fn bm25_prefers_the_text_that_mentions_rare_query_terms() {
        let texts = [
            "startups and investors and founders",
            "painting still lifes taught me to look",
            "founders of startups raise money",
        ];
        let bm25 = Bm25::new(texts);
        let ranked = bm25.rank(&terms("what did painting teach"));
        assert_eq!(ranked[0].0, 1);
        assert!(ranked[0].1 > 0.0);
        assert_eq!(ranked[1].1, 0.0);
    }

    #[test]
    fn a_text_scores_the_same_from_outside_the_index() {
        let texts = [
            "painting taught me patience",
            "startups grow",
            "paint and paint",
        ];
        let bm25 = Bm25::new(texts);
        let query = terms("What did painting teach about patience?");
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(bm25.score_text(&query, text), bm25.score(&query, i));
        }
        assert!(bm25.score(&query, 0) > bm25.score(&query, 2));
        assert_eq!(bm25.score(&query, 1), 0.0);
    }

    #[test]
    fn rare_words_weigh_more_than_common_ones() {
        let common = term_rarity("need");
        assert!(term_rarity("pizza") > common + 1.0);
        assert!(term_rarity("prosciutto") > term_rarity("pizza"));
        assert!(common > term_rarity("time"));
    }

    #[test]
    fn a_shared_rare_word_brings_hashing_vectors_closer_than_a_common_one() {
        let cosine = |a: &str, b: &str| {
            let (a, b) = (hashing_embedding(a, 4096), hashing_embedding(b, 4096));
            a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
        };
        let question = "which ingredient makes the perfect pizza";
        let rare = cosine(question, "pizza dough rises slowly overnight");
        let common = cosine(question, "perfect weather came slowly overnight");
        assert!(rare > common, "{rare} vs {common}");
    }

    #[test]
    fn cosine_of_identical_and_disjoint_texts() {
        let a = TermVector::of("red apples and green pears");
        assert!((a.cosine(&a) - 1.0).abs() < 1e-9);
        assert_eq!(a.cosine(&TermVector::of("blue skies")), 0.0);
    }
}
