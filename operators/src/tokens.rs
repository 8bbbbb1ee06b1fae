//! Token counts with a real BPE vocabulary (OpenAI's cl100k), bundled in the
//! binary so nothing is downloaded at run time.

/// Tokens of `text` under cl100k_base, special-token markers counted as text.
pub fn count_tokens(text: &str) -> usize {
    cl100k().count_ordinary(text)
}

/// The cl100k_base vocabulary, loaded once per process.
pub(crate) fn cl100k() -> &'static tiktoken_rs::CoreBPE {
    tiktoken_rs::cl100k_base_singleton()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bpe_tokens_not_words() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
        assert!(count_tokens("antidisestablishmentarianism") > 1);
    }
}
