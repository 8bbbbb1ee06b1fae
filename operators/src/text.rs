//! Sentence, paragraph and word boundaries, and byte-to-character offsets.

use unicode_segmentation::UnicodeSegmentation;

/// A half-open byte range of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn of(self, text: &str) -> &str {
        &text[self.start..self.end]
    }
}

/// Sentence spans that tile `text` exactly (each keeps its trailing whitespace).
///
/// Hard-wrapped prose breaks lines inside sentences, and Unicode treats every line
/// break as a sentence end; so single line breaks are read as spaces, and only a
/// blank line (a paragraph break) ends a sentence by itself.
pub fn sentences(text: &str) -> Vec<Span> {
    let unwrapped = unwrap_single_newlines(text);
    let mut spans: Vec<Span> = unwrapped
        .split_sentence_bound_indices()
        .map(|(start, s)| Span {
            start,
            end: start + s.len(),
        })
        .collect();
    // A piece of bare whitespace (between paragraphs) belongs to the sentence before it.
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans.drain(..) {
        match merged.last_mut() {
            Some(prev) if span.of(text).trim().is_empty() => prev.end = span.end,
            _ => merged.push(span),
        }
    }
    merged
}

/// `text` with each line break that is not part of a blank line replaced by a space
/// of the same byte length, so byte offsets carry over.
fn unwrap_single_newlines(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    for i in 0..bytes.len() {
        if bytes[i] == b'\n' && !is_blank_line_break(bytes, i) {
            out[i] = b' ';
        }
        if bytes[i] == b'\r' {
            out[i] = b' ';
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes, so the text stays valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// Whether the `\n` at `i` is next to another line break with only spaces between.
fn is_blank_line_break(bytes: &[u8], i: usize) -> bool {
    let is_space = |b: u8| b == b' ' || b == b'\t' || b == b'\r';
    let mut j = i + 1;
    while j < bytes.len() && is_space(bytes[j]) {
        j += 1;
    }
    if j < bytes.len() && bytes[j] == b'\n' {
        return true;
    }
    let mut k = i;
    while k > 0 && is_space(bytes[k - 1]) {
        k -= 1;
    }
    k > 0 && bytes[k - 1] == b'\n'
}

/// Paragraph spans that tile `text`: a paragraph ends after a blank line.
pub fn paragraphs(text: &str) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' && is_blank_line_break(bytes, i) {
            // Swallow the whole run of blank lines into this paragraph.
            let mut end = i;
            while end < bytes.len() && bytes[end].is_ascii_whitespace() {
                end += 1;
            }
            if !text[start..end].trim().is_empty() {
                spans.push(Span { start, end });
                start = end;
            }
            i = end;
        } else {
            i += 1;
        }
    }
    if start < text.len() {
        match spans.last_mut() {
            Some(prev) if text[start..].trim().is_empty() => prev.end = text.len(),
            _ => spans.push(Span {
                start,
                end: text.len(),
            }),
        }
    }
    spans
}

pub fn word_count(text: &str) -> usize {
    text.split_whitespace().count()
}

/// Converts increasing byte offsets of one text to character offsets in one pass.
#[derive(Debug)]
pub struct CharOffsets<'a> {
    text: &'a str,
    byte: usize,
    chars: u64,
}

impl<'a> CharOffsets<'a> {
    pub fn new(text: &'a str) -> Self {
        CharOffsets {
            text,
            byte: 0,
            chars: 0,
        }
    }

    /// The character offset of `byte`; offsets may repeat but never go back.
    pub fn at(&mut self, byte: usize) -> u64 {
        if byte < self.byte {
            return self.text[..byte].chars().count() as u64;
        }
        self.chars += self.text[self.byte..byte].chars().count() as u64;
        self.byte = byte;
        self.chars
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiles(text: &str, spans: &[Span]) {
        assert_eq!(spans.first().map(|s| s.start), Some(0));
        assert_eq!(spans.last().map(|s| s.end), Some(text.len()));
        for pair in spans.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
    }

    #[test]
    fn hard_wrapped_lines_stay_in_one_sentence() {
        let text =
            "I wrote what beginning\nwriters wrote. Stories were\nawful.\n\nNew paragraph here.";
        let spans = sentences(text);
        tiles(text, &spans);
        let got: Vec<&str> = spans.iter().map(|s| s.of(text).trim()).collect();
        assert_eq!(
            got,
            vec![
                "I wrote what beginning\nwriters wrote.",
                "Stories were\nawful.",
                "New paragraph here."
            ]
        );
    }

    #[test]
    fn paragraphs_split_on_blank_lines_and_tile() {
        let text = "One.\nStill one.\n\n\nTwo.\n  \nThree.\n";
        let spans = paragraphs(text);
        tiles(text, &spans);
        let got: Vec<&str> = spans.iter().map(|s| s.of(text).trim()).collect();
        assert_eq!(got, vec!["One.\nStill one.", "Two.", "Three."]);
    }

    #[test]
    fn char_offsets_count_unicode_scalars() {
        let text = "héllo wörld";
        let mut offsets = CharOffsets::new(text);
        assert_eq!(offsets.at(0), 0);
        assert_eq!(offsets.at(6), 5);
        assert_eq!(offsets.at(text.len()), 11);
        assert_eq!(offsets.at(3), 2, "going back still answers");
    }
}
