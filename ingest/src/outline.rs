//! A document's text as a reader builds it from a structured format: words
//! and blocks in reading order, and the sections a citation names (the
//! heading path above each part, or its page).

use memweave_schemas::Section;

/// What joins heading titles into a path.
pub(crate) const PATH_SEPARATOR: &str = " › ";

/// Text built block by block: inline text has its runs of white space
/// collapsed, blocks are separated by one blank line, and every heading
/// starts a section named by the path of headings above it.
#[derive(Debug, Default)]
pub(crate) struct Outline {
    text: String,
    /// Characters in `text`.
    chars: u64,
    sections: Vec<Section>,
    /// The open headings, outermost first: (level, title).
    headings: Vec<(u8, String)>,
    /// A break is owed before the next text: 1 a line, 2 a paragraph.
    pending: u8,
    /// Inline white space was seen since the last word.
    space: bool,
}

impl Outline {
    /// Inline text: white space collapses to one space between words.
    pub(crate) fn inline(&mut self, text: &str) {
        if text.starts_with(char::is_whitespace) {
            self.space = true;
        }
        for (i, word) in text.split_whitespace().enumerate() {
            if i > 0 {
                self.space = true;
            }
            self.word(word);
        }
        if text.ends_with(char::is_whitespace) {
            self.space = true;
        }
    }

    /// Text kept as it is (preformatted): its lines, and one blank line
    /// where it has blank lines.
    pub(crate) fn verbatim(&mut self, text: &str) {
        let mut lines = text.split('\n').peekable();
        let mut first = true;
        while let Some(line) = lines.next() {
            if !first {
                self.pending = (self.pending + 1).min(2);
                self.space = false;
            }
            first = false;
            // A line's trailing blanks go; a piece that goes on (the space
            // between two highlighted words of code) keeps them.
            self.raw(if lines.peek().is_some() {
                line.trim_end()
            } else {
                line
            });
        }
    }

    fn word(&mut self, word: &str) {
        self.flush_breaks();
        if self.space && !self.at_line_start() {
            self.push(" ");
        }
        self.space = false;
        self.push(word);
    }

    fn raw(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.flush_breaks();
        self.space = false;
        self.push(text);
    }

    /// A prefix for the next block's first line (a list item's bullet).
    pub(crate) fn marker(&mut self, marker: &str) {
        self.word(marker);
        self.space = true;
    }

    /// A cell separator within a table row.
    pub(crate) fn separator(&mut self, separator: &str) {
        if self.pending == 0 && !self.at_line_start() {
            self.push(separator);
            self.space = false;
        }
    }

    pub(crate) fn line_break(&mut self) {
        self.pending = self.pending.max(1);
        self.space = false;
    }

    pub(crate) fn paragraph_break(&mut self) {
        self.pending = 2;
        self.space = false;
    }

    /// A heading of `level` (1 outermost): its section starts here, named by
    /// the headings above it and its own title, which is also written as a
    /// paragraph of its own.
    pub(crate) fn heading(&mut self, level: u8, title: &str) {
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if title.is_empty() {
            return;
        }
        self.headings.retain(|(open, _)| *open < level);
        self.headings.push((level, title.clone()));
        let path = (self.headings.iter())
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join(PATH_SEPARATOR);
        self.paragraph_break();
        self.flush_breaks();
        self.section("heading", path);
        self.inline(&title);
        self.paragraph_break();
    }

    /// A part read on its own (an EPUB chapter) as the next block: its
    /// sections moved to where it lands, under a heading section `label`
    /// where its own do not start at its start.
    pub(crate) fn append(&mut self, text: &str, sections: Vec<Section>, label: &str) {
        if text.trim().is_empty() {
            return;
        }
        self.paragraph_break();
        self.flush_breaks();
        let offset = self.chars;
        if sections.first().is_none_or(|s| s.start_char > 0) {
            self.section("heading", label.to_string());
        }
        self.headings.clear();
        self.sections.extend(sections.into_iter().map(|s| Section {
            start_char: s.start_char + offset,
            ..s
        }));
        self.push(text);
        self.paragraph_break();
    }

    /// A page starts here (`number` from 1).
    pub(crate) fn page(&mut self, number: usize) {
        self.paragraph_break();
        self.flush_breaks();
        self.section("page", number.to_string());
    }

    /// A section named `label` starts at the next character written; one
    /// that would start at the same place replaces the one before it.
    fn section(&mut self, kind: &str, label: String) {
        let start_char = self.chars;
        if self
            .sections
            .last()
            .is_some_and(|s| s.start_char == start_char)
        {
            self.sections.pop();
        }
        self.sections.push(Section {
            start_char,
            kind: kind.to_string(),
            label,
        });
    }

    fn at_line_start(&self) -> bool {
        self.text.is_empty() || self.text.ends_with('\n')
    }

    fn flush_breaks(&mut self) {
        if self.pending > 0 && !self.text.is_empty() {
            while self.text.ends_with(' ') {
                self.text.pop();
                self.chars -= 1;
            }
            let have = self.text.len() - self.text.trim_end_matches('\n').len();
            for _ in have..usize::from(self.pending) {
                self.push("\n");
            }
        }
        self.pending = 0;
    }

    fn push(&mut self, text: &str) {
        self.chars += text.chars().count() as u64;
        self.text.push_str(text);
    }

    /// The text and its sections (none past the text's end).
    pub(crate) fn finish(mut self) -> (String, Vec<Section>) {
        let trimmed = self.text.trim_end().len();
        self.text.truncate(trimmed);
        let chars = self.text.chars().count() as u64;
        self.sections.retain(|s| s.start_char < chars);
        (self.text, self.sections)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_name_the_text_under_them_by_their_path() {
        let mut o = Outline::default();
        o.heading(1, "Guide");
        o.inline("  Intro   words ");
        o.inline("here");
        o.heading(2, "Setup");
        o.inline("Install it.");
        o.heading(2, "Use");
        o.inline("Run it.");
        o.heading(1, "Reference");
        o.inline("All of it.");
        let (text, sections) = o.finish();
        assert_eq!(
            text,
            "Guide\n\nIntro words here\n\nSetup\n\nInstall it.\n\nUse\n\nRun it.\n\nReference\n\nAll of it."
        );
        let labels: Vec<(&str, u64)> = sections
            .iter()
            .map(|s| (s.label.as_str(), s.start_char))
            .collect();
        assert_eq!(
            labels,
            [
                ("Guide", 0),
                ("Guide › Setup", 25),
                ("Guide › Use", 45),
                ("Reference", 59)
            ]
        );
        let at = |c| Section::at(&sections, c).map(|s| s.label.as_str());
        assert_eq!(at(30), Some("Guide › Setup"));
        assert_eq!(&text[25..30], "Setup");
    }

    #[test]
    fn verbatim_text_keeps_its_lines_and_pages_start_sections() {
        let mut o = Outline::default();
        o.page(1);
        o.verbatim("a  b\n  c");
        o.page(2);
        o.inline("d");
        let (text, sections) = o.finish();
        assert_eq!(text, "a  b\n  c\n\nd");
        assert_eq!(sections[1].start_char, 10);
        assert_eq!(sections[1].label, "2");
    }
}
