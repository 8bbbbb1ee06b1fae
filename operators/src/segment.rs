//! Sentence-aligned segmentation with content-defined boundaries.
//!
//! A segment ends after a sentence when the segment has reached `min_tokens` and a
//! draw from the sentence's own bytes falls under a probability proportional to the
//! sentence's tokens (so the expected size is `target_tokens`), or when the next
//! sentence would push it past `max_tokens`. Because a cut depends on the sentence
//! and not on its position, inserting text moves only the cuts next to the insertion.

use crate::config::BuildConfigError;
use memweave_schemas::ids::content_draw;

use crate::text::{Span, sentences};
use crate::tokens::count_tokens;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SegmentConfig {
    pub target_tokens: usize,
    pub min_tokens: usize,
    pub max_tokens: usize,
}

impl SegmentConfig {
    /// MemWalker's segment size.
    pub const DEFAULT: SegmentConfig = SegmentConfig::around(1000);

    /// A configuration whose segments average about `target` tokens.
    ///
    /// The minimum is a quarter of the target so that cut candidates are rarely
    /// skipped for being too close to the previous cut: skipped candidates are what
    /// make cuts drift after an edit. Measured on pg-essays (target 200, a paragraph
    /// inserted at seven places in each of 20 essays): with min = target/4 and
    /// max = 3 × target every edit changed at most 2 segments; with min = target/2
    /// and max = 2 × target, 6 of 140 edits changed 4 or 5.
    pub const fn around(target: usize) -> Self {
        SegmentConfig {
            target_tokens: target,
            min_tokens: target / 4,
            max_tokens: target * 3,
        }
    }

    pub fn validate(&self) -> Result<(), BuildConfigError> {
        if self.min_tokens == 0 || self.min_tokens >= self.target_tokens {
            return Err(BuildConfigError::SegmentMin {
                min: self.min_tokens,
                target: self.target_tokens,
            });
        }
        if self.max_tokens <= self.target_tokens {
            return Err(BuildConfigError::SegmentMax {
                target: self.target_tokens,
                max: self.max_tokens,
            });
        }
        Ok(())
    }
}

impl Default for SegmentConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One segment: a byte span of the document and its token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSpan {
    pub span: Span,
    pub n_tokens: usize,
}

/// Cuts `text` into segments that tile it exactly.
pub fn segment(text: &str, config: &SegmentConfig) -> Vec<SegmentSpan> {
    let units = units_within(text, config.max_tokens);
    let mut segments = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut tokens = 0;
    let spread = (config.target_tokens - config.min_tokens).max(1) as f64;
    for (span, unit_tokens) in units {
        if start.is_some() && tokens + unit_tokens > config.max_tokens {
            segments.push(close(text, start.take(), end));
            tokens = 0;
        }
        start.get_or_insert(span.start);
        end = span.end;
        tokens += unit_tokens;
        let unit = span.of(text);
        let boost = if ends_paragraph(unit) { 2.0 } else { 1.0 };
        let probability = boost * unit_tokens as f64 / spread;
        if tokens >= config.min_tokens && content_draw(unit.trim().as_bytes()) < probability {
            segments.push(close(text, start.take(), end));
            tokens = 0;
        }
    }
    if start.is_some() {
        segments.push(close(text, start, end));
    }
    segments
}

fn close(text: &str, start: Option<usize>, end: usize) -> SegmentSpan {
    let span = Span {
        start: start.unwrap_or(end),
        end,
    };
    SegmentSpan {
        span,
        n_tokens: count_tokens(span.of(text)),
    }
}

fn ends_paragraph(unit: &str) -> bool {
    let trailing = &unit[unit.trim_end().len()..];
    trailing.matches('\n').count() >= 2
}

/// Sentences with their token counts; a sentence longer than `max_tokens` is split
/// at word boundaries into pieces that fit.
///
/// A sentence is counted with the whitespace before it rather than after, as BPE
/// joins a space to the word that follows: the counts then add up to the count of
/// the joined text, within a token or two.
fn units_within(text: &str, max_tokens: usize) -> Vec<(Span, usize)> {
    let mut units = Vec::new();
    let mut previous_content_end = 0;
    for sentence in sentences(text) {
        let content_end = sentence.start + sentence.of(text).trim_end().len();
        let tokens = count_tokens(&text[previous_content_end..content_end]);
        previous_content_end = content_end;
        if tokens <= max_tokens {
            units.push((sentence, tokens));
        } else {
            units.extend(split_long(text, sentence, max_tokens));
        }
    }
    units
}

fn split_long(text: &str, sentence: Span, max_tokens: usize) -> Vec<(Span, usize)> {
    let mut pieces = Vec::new();
    let mut start = sentence.start;
    let mut tokens = 0;
    let body = sentence.of(text);
    let mut word_end = sentence.start;
    for (offset, word) in body.split_inclusive(char::is_whitespace).scan(0, |pos, w| {
        let at = *pos;
        *pos += w.len();
        Some((at, w))
    }) {
        let word_tokens = count_tokens(word);
        if tokens > 0 && tokens + word_tokens > max_tokens {
            let span = Span {
                start,
                end: word_end,
            };
            pieces.push((span, count_tokens(span.of(text))));
            start = word_end;
            tokens = 0;
        }
        tokens += word_tokens;
        word_end = sentence.start + offset + word.len();
    }
    let span = Span {
        start,
        end: sentence.end,
    };
    pieces.push((span, count_tokens(span.of(text))));
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prose(sentences: usize, seed: &str) -> String {
        (0..sentences)
            .map(|i| {
                format!(
                    "Sentence {i} of {seed} talks about topic {} at some length.",
                    i % 7
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn segments_tile_the_text_and_respect_max() {
        let text = prose(400, "alpha");
        let config = SegmentConfig::around(120);
        let segments = segment(&text, &config);
        assert!(segments.len() > 5);
        assert_eq!(segments[0].span.start, 0);
        assert_eq!(segments.last().unwrap().span.end, text.len());
        for pair in segments.windows(2) {
            assert_eq!(pair[0].span.end, pair[1].span.start);
        }
        for s in &segments {
            assert!(s.n_tokens <= config.max_tokens, "{} tokens", s.n_tokens);
        }
        for s in &segments[..segments.len() - 1] {
            assert!(s.n_tokens >= config.min_tokens - 2, "{} tokens", s.n_tokens);
        }
    }

    #[test]
    fn a_sentence_longer_than_max_is_split_at_words() {
        let text = "word ".repeat(3000);
        let segments = segment(&text, &SegmentConfig::around(100));
        assert!(segments.len() >= 10);
        assert!(segments.iter().all(|s| s.n_tokens <= 200));
        assert_eq!(segments.last().unwrap().span.end, text.len());
    }

    #[test]
    fn empty_text_has_no_segments() {
        assert!(segment("", &SegmentConfig::DEFAULT).is_empty());
    }

    #[test]
    fn invalid_sizes_are_rejected() {
        let bad = SegmentConfig {
            target_tokens: 100,
            min_tokens: 100,
            max_tokens: 200,
        };
        assert!(bad.validate().is_err());
        assert!(SegmentConfig::DEFAULT.validate().is_ok());
    }
}
