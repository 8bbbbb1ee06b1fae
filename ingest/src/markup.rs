//! Plain-text markups (Markdown, reStructuredText, AsciiDoc, Org) read as the
//! text they are, with their headings found as sections: a citation names the
//! heading path above a passage.

use memweave_schemas::Section;

use crate::outline::PATH_SEPARATOR;
use crate::{Format, clip};

/// The characters a title keeps.
const TITLE_CHARS: usize = 120;

/// A line of the text: where it starts (in characters) and what it says.
struct Line<'a> {
    start: u64,
    text: &'a str,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut start = 0;
    text.split('\n')
        .map(|raw| {
            let line = Line {
                start,
                text: raw.trim_end_matches('\r'),
            };
            start += raw.chars().count() as u64 + 1;
            line
        })
        .collect()
}

/// The headings of `text` in `format` as sections, each starting at its
/// heading's line (an overline's, for reStructuredText) and named by the
/// path of headings above it.
pub(crate) fn outline(text: &str, format: Format) -> Vec<Section> {
    let lines = lines(text);
    let headings = match format {
        Format::Markdown => markdown_headings(&lines),
        Format::ReStructuredText => rst_headings(&lines),
        Format::AsciiDoc => prefixed_headings(&lines, '=', true),
        Format::Org => prefixed_headings(&lines, '*', false),
        _ => Vec::new(),
    };
    let mut open: Vec<(u8, &str)> = Vec::new();
    headings
        .into_iter()
        .map(|(start, level, title)| {
            open.retain(|(l, _)| *l < level);
            open.push((level, title));
            let label = (open.iter().map(|(_, t)| *t))
                .collect::<Vec<_>>()
                .join(PATH_SEPARATOR);
            Section {
                start_char: start,
                kind: "heading".into(),
                label,
            }
        })
        .collect()
}

/// ATX (`# Title`) and setext (`Title` over `===` or `---`) headings, outside
/// fenced code.
fn markdown_headings<'a>(lines: &[Line<'a>]) -> Vec<(u64, u8, &'a str)> {
    let mut headings = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.text.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            continue;
        }
        let marks = trimmed.bytes().take_while(|&b| b == b'#').count();
        if (1..=6).contains(&marks) && line.text.len() - trimmed.len() < 4 {
            let rest = &trimmed[marks..];
            if rest.is_empty() || rest.starts_with([' ', '\t']) {
                let title = rest.trim().trim_end_matches('#').trim();
                if !title.is_empty() {
                    headings.push((line.start, marks as u8, title));
                }
                continue;
            }
        }
        let Some(next) = lines.get(i + 1) else {
            continue;
        };
        let underline = next.text.trim();
        let level = match underline.as_bytes().first() {
            Some(b'=') => 1,
            Some(b'-') => 2,
            _ => continue,
        };
        let previous_blank = i == 0 || lines[i - 1].text.trim().is_empty();
        if !trimmed.is_empty()
            && previous_blank
            && underline.bytes().all(|b| b == underline.as_bytes()[0])
        {
            headings.push((line.start, level, trimmed.trim_end()));
        }
    }
    headings
}

/// A title over a line of one punctuation character at least as long (and
/// under an equal line, when overlined); levels in the order the styles
/// first appear, as reStructuredText defines them.
fn rst_headings<'a>(lines: &[Line<'a>]) -> Vec<(u64, u8, &'a str)> {
    let adornment = |text: &str| -> Option<char> {
        let first = text.chars().next()?;
        (first.is_ascii_punctuation() && text.len() >= 2 && text.chars().all(|c| c == first))
            .then_some(first)
    };
    let mut styles: Vec<(char, bool)> = Vec::new();
    let mut headings = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let title = lines[i].text.trim_end();
        let under = lines[i + 1].text.trim_end();
        let blank_before = i == 0 || lines[i - 1].text.trim().is_empty();
        let overline = (i > 0)
            .then(|| adornment(lines[i - 1].text.trim_end()))
            .flatten();
        match adornment(under) {
            Some(c)
                if !title.trim().is_empty()
                    && adornment(title).is_none()
                    && under.chars().count() >= title.trim().chars().count()
                    && (blank_before || overline == Some(c)) =>
            {
                let over = overline == Some(c);
                let style = (c, over);
                let level = match styles.iter().position(|s| *s == style) {
                    Some(at) => at,
                    None => {
                        styles.push(style);
                        styles.len() - 1
                    }
                };
                let start = if over {
                    lines[i - 1].start
                } else {
                    lines[i].start
                };
                headings.push((start, level as u8 + 1, title.trim()));
                i += 2;
            }
            _ => i += 1,
        }
    }
    headings
}

/// Headings marked by a run of `mark` and a space (AsciiDoc's `==`, Org's
/// `**`), the run's length their level; AsciiDoc's are outside its
/// `----` and `....` blocks.
fn prefixed_headings<'a>(lines: &[Line<'a>], mark: char, blocks: bool) -> Vec<(u64, u8, &'a str)> {
    let mut headings = Vec::new();
    let mut in_block: Option<&str> = None;
    for line in lines {
        let text = line.text.trim_end();
        if blocks && matches!(text, "----" | "...." | "====" | "****" | "____" | "++++") {
            in_block = match in_block {
                Some(open) if open == text => None,
                Some(open) => Some(open),
                None => Some(text),
            };
            continue;
        }
        if in_block.is_some() {
            continue;
        }
        let marks = text.chars().take_while(|&c| c == mark).count();
        let rest = &text[marks..];
        if (1..=6).contains(&marks) && rest.starts_with(' ') && !rest.trim().is_empty() {
            headings.push((line.start, marks as u8, rest.trim()));
        }
    }
    headings
}

/// A markup's title: its first heading's when nothing but adornment comes
/// before it (an Org file's `#+TITLE:`), else its first line.
pub(crate) fn title(text: &str, format: Format, sections: &[Section]) -> String {
    if format == Format::Org
        && let Some(title) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("#+TITLE:").map(str::trim))
            .filter(|t| !t.is_empty())
    {
        return clip(title, TITLE_CHARS);
    }
    if let Some(first) = sections.first() {
        let before: String = text.chars().take(first.start_char as usize).collect();
        if before.trim().is_empty() {
            let own = first.label.rsplit(PATH_SEPARATOR).next().unwrap_or("");
            return clip(own, TITLE_CHARS);
        }
    }
    first_line_title(text)
}

/// The first non-empty line, without Markdown's heading marks.
pub(crate) fn first_line_title(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    clip(line.trim_start_matches('#').trim(), TITLE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(text: &str, format: Format) -> Vec<(u64, String)> {
        outline(text, format)
            .into_iter()
            .map(|s| (s.start_char, s.label))
            .collect()
    }

    #[test]
    fn markdown_headings_make_paths_but_not_inside_code() {
        let text = "# Top\nintro\n\n## Sub\n```\n# not a heading\n```\n\nSetext\n======\n\nSub two\n-------\nx";
        let found = labels(text, Format::Markdown);
        assert_eq!(
            found,
            [
                (0, "Top".to_string()),
                (13, "Top › Sub".to_string()),
                (45, "Setext".to_string()),
                (60, "Setext › Sub two".to_string())
            ]
        );
        assert_eq!(&text[13..19], "## Sub");
        assert_eq!(
            title(text, Format::Markdown, &outline(text, Format::Markdown)),
            "Top"
        );
    }

    #[test]
    fn rst_levels_follow_the_order_styles_appear_in() {
        let text = "=====\nTitle\n=====\n\nIntro.\n\nPart\n----\n\nText.\n\nOther\n-----\n";
        let found = labels(text, Format::ReStructuredText);
        assert_eq!(
            found,
            [
                (0, "Title".to_string()),
                (27, "Title › Part".to_string()),
                (45, "Title › Other".to_string())
            ]
        );
        assert_eq!(
            title(
                text,
                Format::ReStructuredText,
                &outline(text, Format::ReStructuredText)
            ),
            "Title"
        );
    }

    #[test]
    fn asciidoc_and_org_headings_are_their_marks() {
        let adoc = "= Book\n\n== One\n----\n== code\n----\n=== Deep\n";
        let found: Vec<String> = labels(adoc, Format::AsciiDoc)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(found, ["Book", "Book › One", "Book › One › Deep"]);
        let org = "#+TITLE: Notes\n* A\ntext\n** B\n* C\n";
        let found: Vec<String> = labels(org, Format::Org)
            .into_iter()
            .map(|(_, l)| l)
            .collect();
        assert_eq!(found, ["A", "A › B", "C"]);
        assert_eq!(title(org, Format::Org, &[]), "Notes");
    }
}
