//! ReadAgent pagination: pages of whole paragraphs, each ending at a break the
//! model chooses among the paragraph ends past `min_words` and within `max_words`.

use crate::model::MemoryModel;
use crate::text::{Span, paragraphs, sentences, word_count};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageConfig {
    pub min_words: usize,
    pub max_words: usize,
}

impl PageConfig {
    /// ReadAgent's Table 8 defaults.
    pub const DEFAULT: PageConfig = PageConfig {
        min_words: 280,
        max_words: 600,
    };

    pub fn validate(&self) -> Result<(), String> {
        if self.min_words == 0 || self.min_words >= self.max_words {
            return Err(format!(
                "page sizes need 0 < min words ({}) < max words ({})",
                self.min_words, self.max_words
            ));
        }
        Ok(())
    }
}

impl Default for PageConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Pages of `text`, as byte spans that tile it.
pub fn paginate(text: &str, config: &PageConfig, model: &dyn MemoryModel) -> Vec<Span> {
    let units = units(text, config);
    let mut pages = Vec::new();
    let mut start = 0;
    while start < units.len() {
        if word_count(&text[units[start].start..]) <= config.max_words {
            pages.push(Span {
                start: units[start].start,
                end: units[units.len() - 1].end,
            });
            break;
        }
        // Candidate breaks: after each unit once the page holds min_words, while it
        // stays within max_words; at least one, so every page makes progress. Words
        // are counted on the page's text, as a reader would count them.
        let mut candidates = Vec::new();
        for i in start..units.len() {
            let total = word_count(&text[units[start].start..units[i].end]);
            if total > config.max_words && !candidates.is_empty() {
                break;
            }
            if total >= config.min_words || total > config.max_words {
                candidates.push(i - start);
            }
            if total > config.max_words {
                break;
            }
        }
        let last = start + candidates[candidates.len() - 1];
        let window: Vec<&str> = units[start..=(last + 1).min(units.len() - 1)]
            .iter()
            .map(|u| u.of(text))
            .collect();
        let chosen = model.choose_break(&window, &candidates);
        let end_unit = start
            + if candidates.contains(&chosen) {
                chosen
            } else {
                candidates[0]
            };
        pages.push(Span {
            start: units[start].start,
            end: units[end_unit].end,
        });
        start = end_unit + 1;
    }
    pages
}

/// Paragraphs, with any paragraph longer than `max_words - min_words` split into
/// sentences: then the first break past `min_words` always lands within `max_words`.
fn units(text: &str, config: &PageConfig) -> Vec<Span> {
    let mut units = Vec::new();
    for paragraph in paragraphs(text) {
        if word_count(paragraph.of(text)) <= config.max_words - config.min_words {
            units.push(paragraph);
            continue;
        }
        let body = paragraph.of(text);
        for sentence in sentences(body) {
            units.push(Span {
                start: paragraph.start + sentence.start,
                end: paragraph.start + sentence.end,
            });
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Extractive;

    #[test]
    fn pages_tile_the_text_and_keep_to_the_bounds() {
        let text: String = (0..120)
            .map(|i| format!("Paragraph {i} speaks of subject {} in twenty odd words, give or take a few more words here.\n\n", i / 10))
            .collect();
        let config = PageConfig {
            min_words: 60,
            max_words: 120,
        };
        let pages = paginate(&text, &config, &Extractive);
        assert_eq!(pages[0].start, 0);
        assert_eq!(pages.last().unwrap().end, text.len());
        for pair in pages.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        for page in &pages[..pages.len() - 1] {
            let words = word_count(page.of(&text));
            assert!((60..=120).contains(&words), "{words} words");
        }
    }

    #[test]
    fn a_short_text_is_one_page() {
        let text = "Just a few words.";
        let pages = paginate(text, &PageConfig::DEFAULT, &Extractive);
        assert_eq!(
            pages,
            vec![Span {
                start: 0,
                end: text.len()
            }]
        );
    }
}
