//! The memory model: one method per step of memory building, behind one trait, so
//! the dataflow never knows which backend answers.

use crate::lexical::TermVector;
use crate::text::{sentences, word_count};

/// The steps of memory building that need a model.
pub trait MemoryModel: Send + Sync + std::fmt::Debug {
    /// Backend name, as recorded in `llm_calls.backend`.
    fn backend(&self) -> &str;

    /// A MemWalker leaf summary of one segment.
    fn summarize_segment(&self, segment: &str) -> String;

    /// A MemWalker parent summary of its children's summaries, in order.
    fn summarize_children(&self, summaries: &[&str]) -> String;

    /// ReadAgent pagination: given consecutive units (paragraphs) and the indices
    /// after which a page may end, the index to end the page after.
    fn choose_break(&self, units: &[&str], candidates: &[usize]) -> usize;

    /// A ReadAgent gist: the page shortened, keeping what matters.
    fn gist_page(&self, page: &str) -> String;
}

/// Offline, deterministic backend: sentence-centrality summaries and gists,
/// lexical-shift pagination. Needs no model and no network.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extractive;

/// Longest leaf summary, in words (MemWalker summaries are a few sentences).
const LEAF_SUMMARY_WORDS: usize = 120;
/// Longest parent summary, in words.
const PARENT_SUMMARY_WORDS: usize = 180;
/// ReadAgent's gists compress pages three to five times.
const GIST_RATIO: usize = 4;

impl MemoryModel for Extractive {
    fn backend(&self) -> &str {
        "extractive"
    }

    fn summarize_segment(&self, segment: &str) -> String {
        let words = word_count(segment);
        central_sentences(segment, (words / 4).clamp(25, LEAF_SUMMARY_WORDS))
    }

    fn summarize_children(&self, summaries: &[&str]) -> String {
        let joined = summaries.join("\n\n");
        let words = word_count(&joined);
        central_sentences(&joined, (words / 3).clamp(40, PARENT_SUMMARY_WORDS))
    }

    fn choose_break(&self, units: &[&str], candidates: &[usize]) -> usize {
        // The break where the vocabulary shifts most: lowest similarity between the
        // unit before and the unit after. Ties go to the earliest candidate.
        let vectors: Vec<TermVector> = units.iter().map(|u| TermVector::of(u)).collect();
        candidates
            .iter()
            .copied()
            .filter(|&c| c + 1 < units.len())
            .map(|c| (c, vectors[c].cosine(&vectors[c + 1])))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map_or_else(|| candidates.last().copied().unwrap_or(0), |(c, _)| c)
    }

    fn gist_page(&self, page: &str) -> String {
        let words = word_count(page);
        let gist = central_sentences(page, (words / GIST_RATIO).max(12));
        if word_count(&gist) < words || words <= 1 {
            return gist;
        }
        // One long sentence: keep its head so the gist is still shorter than the page.
        let keep = words.div_ceil(2);
        let head: Vec<&str> = page.split_whitespace().take(keep).collect();
        format!("{} …", head.join(" "))
    }
}

/// The most central sentences of `text` (summed cosine similarity to the others),
/// at least one, up to `budget_words`, in their original order, whitespace collapsed.
pub fn central_sentences(text: &str, budget_words: usize) -> String {
    let spans = sentences(text);
    let sentences: Vec<&str> = spans
        .iter()
        .map(|s| s.of(text).trim())
        .filter(|s| !s.is_empty())
        .collect();
    if sentences.is_empty() {
        return String::new();
    }
    let vectors: Vec<TermVector> = sentences.iter().map(|s| TermVector::of(s)).collect();
    let centrality: Vec<f64> = (0..vectors.len())
        .map(|i| {
            (0..vectors.len())
                .filter(|&j| j != i)
                .map(|j| vectors[i].cosine(&vectors[j]))
                .sum()
        })
        .collect();
    let mut order: Vec<usize> = (0..sentences.len()).collect();
    order.sort_by(|&a, &b| centrality[b].total_cmp(&centrality[a]).then(a.cmp(&b)));
    let mut chosen = Vec::new();
    let mut words = 0;
    for i in order {
        let w = word_count(sentences[i]);
        if !chosen.is_empty() && words + w > budget_words {
            continue;
        }
        chosen.push(i);
        words += w;
        if words >= budget_words {
            break;
        }
    }
    chosen.sort_unstable();
    chosen
        .iter()
        .map(|&i| collapse_whitespace(sentences[i]))
        .collect::<Vec<_>>()
        .join(" ")
}

fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "Painting taught me to look. I painted still lifes every day. \
        Looking at paint on canvas taught me patience. The weather was cold. \
        Still lifes are paintings of objects that do not move.";

    #[test]
    fn central_sentences_keep_order_and_budget() {
        let summary = central_sentences(TEXT, 12);
        assert!(word_count(&summary) <= 14, "{summary}");
        assert!(
            !summary.contains("weather"),
            "the off-topic sentence is least central"
        );
        let all = central_sentences(TEXT, 1000);
        assert!(all.starts_with("Painting taught me"));
    }

    #[test]
    fn gists_are_shorter_than_their_pages() {
        let model = Extractive;
        for page in [
            TEXT,
            "A single rather long sentence without any break at all in it.",
        ] {
            let gist = model.gist_page(page);
            assert!(word_count(&gist) < word_count(page), "{gist}");
            assert!(!gist.is_empty());
        }
    }

    #[test]
    fn breaks_fall_where_the_vocabulary_shifts() {
        let units = [
            "cats purr and cats sleep",
            "cats chase mice",
            "stocks fell on monday",
            "stocks rose on tuesday",
        ];
        assert_eq!(Extractive.choose_break(&units, &[0, 1, 2]), 1);
    }
}
