//! The words texts are searched by, one definition for the writer (the
//! search columns and the lexicon it keeps) and for every reader (BM25, triage,
//! entity look-up): a term means the same thing at both ends.

/// Sorted, so a word is looked up by bisection: [`terms`] runs over every
/// word a hashing vector is made of.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "before", "being", "but", "by", "can", "could", "did", "do", "does",
    "doing", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "more", "most", "my",
    "no", "not", "now", "of", "on", "one", "only", "or", "other", "our", "out", "over", "own",
    "she", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "those", "through", "to", "too", "under", "up", "very", "was", "we", "were",
    "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would",
    "you", "your",
];

/// Content terms of `text`: lowercased words, stopwords dropped, lightly stemmed so
/// "learned" meets "learn" and "paintings" meets "painting".
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() > 1 && STOPWORDS.binary_search(&w.as_str()).is_err())
        .map(|w| stem(&w))
        .collect()
}

/// What a row searched by `texts` keeps in its `terms` column: their
/// [`terms`], sorted, one space apart. Every reader counts them as a bag (BM25,
/// the full-text index, the hashing vectors, the lexicon), and sorted, a
/// term's repeats lie together, which the column's compression finds.
pub fn searched_terms(texts: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let mut all: Vec<String> = (texts.into_iter())
        .flat_map(|text| terms(text.as_ref()))
        .collect();
    all.sort_unstable();
    all.join(" ")
}

fn stem(word: &str) -> String {
    if !word.is_ascii() {
        return word.to_string();
    }
    let mut word = word.to_string();
    let n = word.len();
    if n > 5 && word.ends_with("ies") {
        word.replace_range(n - 3.., "y");
    } else if n > 3 && word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us") {
        word.pop();
    }
    for suffix in ["ing", "ed"] {
        if word.len() > suffix.len() + 3 && word.ends_with(suffix) {
            word.truncate(word.len() - suffix.len());
            break;
        }
    }
    word
}

/// A name as entities are matched by: lower case, no leading article, no
/// possessive, punctuation as spaces. "The Beatles'" and "beatles" match.
pub fn normalise(name: &str) -> String {
    let lower = name.to_lowercase().replace(['\u{2019}', '`'], "'");
    let lower = lower.strip_suffix("'s").unwrap_or(&lower);
    let cleaned: String = lower
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect();
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    let words = match words.as_slice() {
        [first, rest @ ..] if !rest.is_empty() && matches!(*first, "the" | "a" | "an") => rest,
        all => all,
    };
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`terms`] finds a stopword by bisection: an entry out of order would
    /// be kept as a term.
    #[test]
    fn every_stopword_is_dropped() {
        for word in STOPWORDS {
            assert!(terms(word).is_empty(), "{word} is kept");
        }
    }

    /// A row keeps its texts' terms as a sorted bag: every repeat kept, a
    /// term's repeats side by side, whatever text they came from.
    #[test]
    fn searched_terms_are_every_term_sorted() {
        let searched =
            searched_terms(["Lighthouses guide ships.", "A ship passed the lighthouse."]);
        assert_eq!(searched, "guide lighthouse lighthouse pass ship ship");
    }
}
