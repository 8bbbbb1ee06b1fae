//! Extractive text operations: what the offline backend answers every model step
//! with. Deterministic, no model, no network; sentences are chosen, never written.

use std::collections::HashSet;

use crate::lexical::{TermVector, terms};
use crate::text::{sentences, word_count};

/// The trimmed, non-empty sentences of `text`.
pub fn sentence_list(text: &str) -> Vec<&str> {
    sentences(text)
        .iter()
        .map(|s| s.of(text).trim())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Each sentence's summed cosine similarity to the others.
fn centrality(sentences: &[&str]) -> Vec<f64> {
    let vectors: Vec<TermVector> = sentences.iter().map(|s| TermVector::of(s)).collect();
    (0..vectors.len())
        .map(|i| {
            (0..vectors.len())
                .filter(|&j| j != i)
                .map(|j| vectors[i].cosine(&vectors[j]))
                .sum()
        })
        .collect()
}

/// The most central sentences of `text`, at least one, up to `budget_words`, in
/// their original order, whitespace collapsed.
pub fn central_sentences(text: &str, budget_words: usize) -> String {
    let sentences = sentence_list(text);
    if sentences.is_empty() {
        return String::new();
    }
    let centrality = centrality(&sentences);
    let mut order: Vec<usize> = (0..sentences.len()).collect();
    order.sort_by(|&a, &b| centrality[b].total_cmp(&centrality[a]).then(a.cmp(&b)));
    join_chosen(&sentences, choose_within(&sentences, order, budget_words))
}

/// ILM-TR's surprising facts, extractively: the sentences least like the rest of
/// the text (lowest centrality), up to `max` of them, in order. Empty when the text
/// has fewer than three sentences: nothing can stand out.
pub fn surprising_sentences(text: &str, max: usize) -> String {
    let sentences = sentence_list(text);
    if sentences.len() < 3 || max == 0 {
        return String::new();
    }
    let centrality = centrality(&sentences);
    let mean = centrality.iter().sum::<f64>() / centrality.len() as f64;
    let mut order: Vec<usize> = (0..sentences.len())
        .filter(|&i| centrality[i] < mean / 2.0 && !terms(sentences[i]).is_empty())
        .collect();
    order.sort_by(|&a, &b| centrality[a].total_cmp(&centrality[b]).then(a.cmp(&b)));
    order.truncate(max);
    order.sort_unstable();
    join_chosen(&sentences, order)
}

/// Sentences of `text` ranked by how much of the question's vocabulary they cover;
/// returns the best `n` in text order, with their coverage of the question's terms
/// (0 when the question has no content terms).
pub fn best_sentences(question: &str, text: &str, n: usize) -> (String, f64) {
    let wanted: HashSet<String> = terms(question).into_iter().collect();
    let sentences = sentence_list(text);
    if wanted.is_empty() || sentences.is_empty() {
        return (String::new(), 0.0);
    }
    let hits: Vec<usize> = sentences
        .iter()
        .map(|s| {
            let have: HashSet<String> = terms(s).into_iter().collect();
            wanted.iter().filter(|t| have.contains(*t)).count()
        })
        .collect();
    let mut order: Vec<usize> = (0..sentences.len()).filter(|&i| hits[i] > 0).collect();
    order.sort_by(|&a, &b| hits[b].cmp(&hits[a]).then(a.cmp(&b)));
    order.truncate(n);
    order.sort_unstable();
    let chosen: HashSet<String> = order
        .iter()
        .flat_map(|&i| terms(sentences[i]))
        .filter(|t| wanted.contains(t))
        .collect();
    let coverage = chosen.len() as f64 / wanted.len() as f64;
    (join_chosen(&sentences, order), coverage)
}

/// Words that start a sentence in capitals without naming anything.
const NOT_NAMES: &[&str] = &[
    "A", "An", "And", "As", "At", "But", "By", "For", "From", "He", "Her", "His", "How", "I", "If",
    "In", "It", "Its", "My", "No", "Not", "Of", "On", "Or", "She", "So", "That", "The", "Their",
    "Then", "There", "These", "They", "This", "Those", "To", "We", "What", "When", "Where",
    "Which", "While", "Who", "Why", "With", "You", "Your", "Yes", "One", "Some", "All", "Most",
    "Many", "Much", "Now", "Once", "Our", "After", "Before", "Because", "Although", "Even", "Just",
    "Also", "Here", "Maybe", "Perhaps", "Still", "Yet",
];

/// Named entities, extractively: runs of capitalised words, each once, in order
/// of first mention, at most `max`. A run may not start with a function word
/// ("The", "It's"), nor with a sentence's first word when the text also has that
/// word in lower case ("Sometimes" at a sentence start is no name; "Lisp" is).
pub fn capitalised_names(text: &str, max: usize) -> Vec<String> {
    let lower_case: HashSet<&str> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| w.chars().next().is_some_and(char::is_lowercase))
        .collect();
    let not_a_name = |word: &str, opens_sentence: bool| {
        let stem = word.split('\'').next().unwrap_or(word);
        NOT_NAMES.contains(&stem)
            || (opens_sentence && lower_case.contains(word.to_lowercase().as_str()))
    };
    let mut names: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut run: Vec<&str> = Vec::new();
    let mut flush = |run: &mut Vec<&str>, names: &mut Vec<String>| {
        if !run.is_empty() {
            let name = run.join(" ");
            if seen.insert(name.to_lowercase()) {
                names.push(name);
            }
            run.clear();
        }
    };
    let mut opens_sentence = true;
    for raw in text.split_whitespace() {
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric());
        let capitalised = word.chars().next().is_some_and(char::is_uppercase)
            && word
                .chars()
                .all(|c| c.is_alphanumeric() || c == '-' || c == '\'');
        if capitalised && !(run.is_empty() && not_a_name(word, opens_sentence)) {
            run.push(word);
        } else {
            flush(&mut run, &mut names);
        }
        opens_sentence = raw.ends_with(['.', '!', '?', ':']);
        // Punctuation after a word ends the name.
        if raw.ends_with(|c: char| !c.is_alphanumeric()) {
            flush(&mut run, &mut names);
        }
    }
    flush(&mut run, &mut names);
    names.truncate(max);
    names
}

/// The sentences of `text` that mention both `a` and `b`, whitespace collapsed.
pub fn sentences_mentioning(text: &str, a: &str, b: &str) -> Vec<String> {
    sentence_list(text)
        .into_iter()
        .filter(|s| s.contains(a) && s.contains(b))
        .map(collapse_whitespace)
        .collect()
}

/// The first `max_words` words of `text`, with an ellipsis when cut.
pub fn head_words(text: &str, max_words: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() <= max_words {
        return words.join(" ");
    }
    format!("{} …", words[..max_words].join(" "))
}

fn choose_within(sentences: &[&str], order: Vec<usize>, budget_words: usize) -> Vec<usize> {
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
}

fn join_chosen(sentences: &[&str], chosen: Vec<usize>) -> String {
    chosen
        .into_iter()
        .map(|i| collapse_whitespace(sentences[i]))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn collapse_whitespace(s: &str) -> String {
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
        assert!(central_sentences(TEXT, 1000).starts_with("Painting taught me"));
    }

    #[test]
    fn the_off_topic_sentence_is_the_surprise() {
        assert_eq!(surprising_sentences(TEXT, 1), "The weather was cold.");
        assert_eq!(surprising_sentences("One. Two.", 3), "");
    }

    #[test]
    fn best_sentences_cover_the_question() {
        let (best, coverage) = best_sentences("What did painting teach about patience?", TEXT, 1);
        assert_eq!(best, "Looking at paint on canvas taught me patience.");
        assert!(coverage > 0.3, "{coverage}");
        assert_eq!(
            best_sentences("zebra quagga", TEXT, 2),
            (String::new(), 0.0)
        );
    }

    #[test]
    fn names_are_capitalised_runs_not_sentence_openers() {
        let text = "The founders met Paul Graham at Y Combinator in Mountain View. \
            Then Jessica Livingston joined. Paul Graham wrote essays. It's late. \
            Sometimes Lisp wins; it sometimes loses.";
        assert_eq!(
            capitalised_names(text, 10),
            [
                "Paul Graham",
                "Y Combinator",
                "Mountain View",
                "Jessica Livingston",
                "Lisp"
            ]
        );
        assert_eq!(
            sentences_mentioning(text, "Paul Graham", "Mountain View").len(),
            1
        );
    }
}
