//! Extractive text operations: what the offline backend answers every model step
//! with. Deterministic, no model, no network; sentences are chosen, never written.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::lexical::{rarest, term_rarity, terms};
use crate::text::{sentences, word_count};

/// The trimmed, non-empty sentences of `text`.
pub fn sentence_list(text: &str) -> Vec<&str> {
    sentences(text)
        .iter()
        .map(|s| s.of(text).trim())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A sentence's distinct terms.
fn term_sets(sentences: &[&str]) -> Vec<BTreeSet<String>> {
    sentences
        .iter()
        .map(|s| terms(s).into_iter().collect())
        .collect()
}

/// What each term of a text is worth to a reader who has to tell the text
/// apart from others: its [`term_rarity`], raised by how often the text
/// repeats it (what the text is about), `1 + ln(count)`.
fn term_weights(sets: &[BTreeSet<String>], text: &str) -> HashMap<String, f64> {
    let mut counts: HashMap<String, f64> = HashMap::new();
    for term in terms(text) {
        *counts.entry(term).or_insert(0.0) += 1.0;
    }
    sets.iter()
        .flatten()
        .map(|t| {
            let count = counts.get(t).copied().unwrap_or(1.0);
            (t.clone(), term_rarity(t) * (1.0 + count.ln()))
        })
        .collect()
}

/// Sentences of `text` chosen to cover its distinctive terms, at least one, up
/// to `budget_words`, in their original order, whitespace collapsed. Greedy
/// budgeted coverage: each pick is the sentence whose terms not yet covered
/// weigh most per word ([`term_weights`]), so the first picks say what the
/// text is about and later ones keep what only one sentence says (a name, a
/// figure, an aside) rather than a third way of saying the topic. A summary of
/// summaries chosen this way still carries each part's rare words, which is
/// what leads a reader from it down to the part that holds them.
pub fn distinctive_sentences(text: &str, budget_words: usize) -> String {
    let sentences = sentence_list(text);
    if sentences.is_empty() {
        return String::new();
    }
    let sets = term_sets(&sentences);
    let weights = term_weights(&sets, text);
    let words: Vec<usize> = sentences.iter().map(|s| word_count(s)).collect();
    let mut covered: HashSet<&str> = HashSet::new();
    let mut chosen: Vec<usize> = Vec::new();
    let mut used = 0;
    loop {
        let gain = |i: usize| -> f64 {
            sets[i]
                .iter()
                .filter(|t| !covered.contains(t.as_str()))
                .map(|t| weights[t])
                .sum()
        };
        let fits = |i: usize| chosen.is_empty() || used + words[i] <= budget_words;
        // Short fragments ("Yes.") would win per word on one rare term.
        let best = (0..sentences.len())
            .filter(|i| !chosen.contains(i) && fits(*i))
            .map(|i| (i, gain(i) / (words[i] + SHORT_SENTENCE_WORDS) as f64))
            .filter(|&(_, per_word)| per_word > 0.0 || chosen.is_empty())
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((i, _)) = best else { break };
        covered.extend(sets[i].iter().map(String::as_str));
        chosen.push(i);
        used += words[i];
        if used >= budget_words {
            break;
        }
    }
    chosen.sort_unstable();
    join_chosen(&sentences, chosen)
}

/// The `max` words of `text` whose terms weigh most ([`term_weights`]: rare,
/// and repeated), heaviest first, each as the text first writes it, joined
/// with commas: what the text is about, in a form that a small edit (one new
/// word, one sentence reworded) leaves as it was.
pub fn key_words(text: &str, max: usize) -> String {
    let sentences = sentence_list(text);
    let weights = term_weights(&term_sets(&sentences), text);
    let mut first_form: Vec<(String, String)> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if let [term] = terms(word).as_slice()
            && !first_form.iter().any(|(t, _)| t == term)
        {
            first_form.push((term.clone(), word.to_string()));
        }
    }
    let mut ranked: Vec<(usize, f64)> = first_form
        .iter()
        .enumerate()
        .map(|(i, (term, _))| (i, weights.get(term).copied().unwrap_or(0.0)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
        .iter()
        .take(max)
        .map(|&(i, _)| first_form[i].1.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Words added to every sentence's length when weighing its terms per word.
const SHORT_SENTENCE_WORDS: usize = 6;

/// ILM-TR's surprising facts, extractively: the sentences whose weight lies
/// mostly in terms no other sentence of the text uses, rarest first, up to
/// `max` of them, in order. Empty when the text has fewer than three sentences:
/// nothing can stand out.
pub fn surprising_sentences(text: &str, max: usize) -> String {
    let sentences = sentence_list(text);
    if sentences.len() < 3 || max == 0 {
        return String::new();
    }
    let sets = term_sets(&sentences);
    let weights = term_weights(&sets, text);
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for term in sets.iter().flatten() {
        *uses.entry(term.as_str()).or_insert(0) += 1;
    }
    let unshared: Vec<(f64, f64)> = sets
        .iter()
        .map(|set| {
            let total: f64 = set.iter().map(|t| weights[t]).sum();
            let own: f64 = set
                .iter()
                .filter(|t| uses[t.as_str()] == 1)
                .map(|t| weights[t])
                .sum();
            (own, total)
        })
        .collect();
    let mut order: Vec<usize> = (0..sentences.len())
        .filter(|&i| unshared[i].1 > 0.0 && unshared[i].0 >= SURPRISE_SHARE * unshared[i].1)
        .collect();
    order.sort_by(|&a, &b| unshared[b].0.total_cmp(&unshared[a].0).then(a.cmp(&b)));
    order.truncate(max);
    order.sort_unstable();
    join_chosen(&sentences, order)
}

/// Share of a sentence's term weight that must be its own (no other sentence
/// uses the terms) for it to stand out as a surprise.
const SURPRISE_SHARE: f64 = 0.75;

/// How much of a question the sentences [`best_sentences`] chose hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coverage {
    /// Share of the question's term weight ([`term_rarity`]) they hold.
    pub share: f64,
    /// Whether they hold the question's rarest term: what it is most
    /// specifically about ("painting" in "What did the author learn from
    /// painting?"), without which a passage answers another question.
    pub most_specific: bool,
}

/// The `n` sentences of `text` that hold the most of the question's term
/// weight (each term counted by its [`term_rarity`]), in text order, with how
/// much of the question they cover (nothing when the question has no content
/// terms or no sentence shares one).
pub fn best_sentences(question: &str, text: &str, n: usize) -> (String, Coverage) {
    let wanted: BTreeMap<String, f64> = terms(question)
        .into_iter()
        .map(|t| {
            let rarity = term_rarity(&t);
            (t, rarity)
        })
        .collect();
    let sentences = sentence_list(text);
    let nothing = Coverage {
        share: 0.0,
        most_specific: false,
    };
    if wanted.is_empty() || sentences.is_empty() {
        return (String::new(), nothing);
    }
    let held: Vec<f64> = term_sets(&sentences)
        .iter()
        .map(|set| set.iter().filter_map(|t| wanted.get(t)).sum())
        .collect();
    let mut order: Vec<usize> = (0..sentences.len()).filter(|&i| held[i] > 0.0).collect();
    order.sort_by(|&a, &b| held[b].total_cmp(&held[a]).then(a.cmp(&b)));
    order.truncate(n);
    order.sort_unstable();
    let chosen: BTreeSet<String> = order
        .iter()
        .flat_map(|&i| terms(sentences[i]))
        .filter(|t| wanted.contains_key(t))
        .collect();
    let total: f64 = wanted.values().sum();
    let rarest = rarest(wanted.keys());
    let coverage = Coverage {
        share: chosen.iter().map(|t| wanted[t]).sum::<f64>() / total,
        most_specific: rarest.is_some_and(|t| chosen.contains(t)),
    };
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

/// For each pair of `names` (in the order `(names[i], names[j])`, `i < j`)
/// that one sentence of `text` mentions together, the first such sentence,
/// whitespace collapsed. The text is split into sentences once, not once per
/// pair: twenty names make 190 pairs, and sentence breaking dominated the
/// extractive relation step when each pair split the segment again.
pub fn co_mentions<'n>(text: &str, names: &[&'n str]) -> Vec<(&'n str, &'n str, String)> {
    let sentences = sentence_list(text);
    let mentions: Vec<Vec<bool>> = sentences
        .iter()
        .map(|s| names.iter().map(|name| s.contains(name)).collect())
        .collect();
    let mut pairs = Vec::new();
    for i in 0..names.len() {
        for j in i + 1..names.len() {
            if let Some(k) = mentions.iter().position(|m| m[i] && m[j]) {
                pairs.push((names[i], names[j], collapse_whitespace(sentences[k])));
            }
        }
    }
    pairs
}

/// What [`head_words`] ends a head it cut short with.
pub const CUT_MARK: &str = " …";

/// The first `max_words` words of `text`, with [`CUT_MARK`] when cut.
pub fn head_words(text: &str, max_words: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() <= max_words {
        return words.join(" ");
    }
    format!("{}{CUT_MARK}", words[..max_words].join(" "))
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
    use crate::testing::PAINTING as TEXT;

    #[test]
    fn distinctive_sentences_keep_order_and_budget() {
        let summary = distinctive_sentences(TEXT, 12);
        assert!(word_count(&summary) <= 12, "{summary}");
        assert!(summary.contains("paint"), "{summary}");
        // With room for everything, a sentence that says nothing the others do
        // not ("Painting taught me to look": paint, taught, look) is left out.
        assert_eq!(
            distinctive_sentences(TEXT, 1000),
            TEXT.replace("Painting taught me to look. ", "")
        );
    }

    #[test]
    fn a_fact_only_one_sentence_states_survives_the_summary() {
        // Six sentences that say the topic over again, and one aside.
        let text = "Startups need to grow fast. A startup that grows fast raises money. \
            Fast growth lets a startup raise money from investors. Investors fund startups \
            that grow fast. Figs are one of the secret ingredients of the perfect pizza. \
            Growth is what investors look for in startups. Startups that grow raise money.";
        let summary = distinctive_sentences(text, 20);
        assert!(summary.contains("pizza"), "{summary}");
        assert!(summary.contains("grow"), "{summary}");
    }

    #[test]
    fn key_words_name_the_topic_and_survive_a_small_edit() {
        let text = "Making money is a specialized skill. Money is not wealth. \
            Wealth is what people want, and money moves wealth around.";
        let edited = text.replace(
            "specialized skill",
            "rather specialized skill, as it happens",
        );
        assert_eq!(key_words(text, 2), "wealth, money");
        assert_eq!(key_words(&edited, 2), key_words(text, 2));
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
        assert!(
            coverage.share > 0.3 && coverage.most_specific,
            "{coverage:?}"
        );
        let (best, coverage) = best_sentences("What did painting teach about prosciutto?", TEXT, 1);
        assert_eq!(best, "Painting taught me to look.");
        assert!(!coverage.most_specific, "{coverage:?}");
        let (best, coverage) = best_sentences("zebra quagga", TEXT, 2);
        assert_eq!((best.as_str(), coverage.share), ("", 0.0));
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
        let pairs = co_mentions(text, &["Paul Graham", "Mountain View", "Lisp"]);
        assert_eq!(
            pairs,
            [(
                "Paul Graham",
                "Mountain View",
                "The founders met Paul Graham at Y Combinator in Mountain View.".to_string()
            )]
        );
    }
}
