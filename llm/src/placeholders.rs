//! How lists are written into a template's placeholders, and read back out of
//! them (the simulator answers a prompt as the step it was rendered from).
//! Which placeholder holds what is each step's entry in `steps.rs`.

use std::sync::LazyLock;

use memweave_operators::model::PageText;
use regex::Regex;

/// A break label on its own line of a pagination passage: `<12>`.
static LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^<(\d+)>$").expect("a valid pattern"));

/// MemWalker's "Summary 0: …" list, one summary per line.
pub(crate) fn numbered_summaries(summaries: &[String]) -> String {
    summaries
        .iter()
        .enumerate()
        .map(|(i, s)| format!("Summary {i}: {}", one_line(s)))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn parse_numbered_summaries(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("Summary ")?;
            let (_, summary) = rest.split_once(": ")?;
            Some(summary.to_string())
        })
        .collect()
}

/// Entity disambiguation's candidates: "Passage 1: …", one per line.
pub(crate) fn numbered_passages(passages: &[String]) -> String {
    passages
        .iter()
        .enumerate()
        .map(|(i, p)| format!("Passage {}: {}", i + 1, one_line(p)))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn parse_numbered_passages(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            Some(
                line.strip_prefix("Passage ")?
                    .split_once(": ")?
                    .1
                    .to_string(),
            )
        })
        .collect()
}

/// Line breaks inside one list item would make it several items.
pub(crate) fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// ReadAgent's passage: paragraphs separated by blank lines, with the label `<n>`
/// (paragraph numbers counted from `first_label`) after each paragraph a page may
/// end with.
pub(crate) fn labelled_passage(
    units: &[String],
    candidates: &[usize],
    first_label: usize,
) -> String {
    let mut parts = Vec::new();
    for (i, unit) in units.iter().enumerate() {
        parts.push(single_paragraph(unit));
        if candidates.contains(&i) {
            parts.push(format!("<{}>", first_label + i));
        }
    }
    parts.join("\n\n")
}

pub(crate) fn parse_labelled_passage(text: &str) -> Option<(Vec<String>, Vec<usize>, usize)> {
    let mut units = Vec::new();
    let mut labels = Vec::new();
    for part in text.split("\n\n") {
        match LABEL.captures(part) {
            Some(c) => labels.push((units.len().checked_sub(1)?, c[1].parse::<usize>().ok()?)),
            None => units.push(part.to_string()),
        }
    }
    let (first_index, first_value) = *labels.first()?;
    let first_label = first_value.checked_sub(first_index)?;
    let candidates = labels.into_iter().map(|(i, _)| i).collect();
    Some((units, candidates, first_label))
}

/// A paragraph with no blank line inside, so blank lines can separate paragraphs.
pub(crate) fn single_paragraph(text: &str) -> String {
    text.trim()
        .split('\n')
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// ReadAgent's gist memory: each page's gist (or, once looked up, its text) under
/// its page tag.
pub(crate) fn page_memory(pages: &[PageText]) -> String {
    pages
        .iter()
        .map(|p| format!("<Page {}>\n{}", p.number, single_paragraph(&p.text)))
        .collect::<Vec<_>>()
        .join("\n\n")
}

pub(crate) fn parse_page_memory(text: &str) -> Vec<PageText> {
    text.split("\n\n")
        .filter_map(|part| {
            let (tag, body) = part.split_once('\n')?;
            let number = tag
                .strip_prefix("<Page ")?
                .strip_suffix('>')?
                .parse()
                .ok()?;
            Some(PageText {
                number,
                text: body.to_string(),
            })
        })
        .collect()
}

pub(crate) fn page_list(pages: &[u32]) -> String {
    if pages.is_empty() {
        return "none".to_string();
    }
    pages
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn parse_page_list(text: &str) -> Vec<u32> {
    text.split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// The numbers of the pages a look-up shows.
pub(crate) fn page_numbers(pages: &[PageText]) -> Vec<u32> {
    pages.iter().map(|p| p.number).collect()
}

/// A list written a line an item.
pub(crate) fn non_empty_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}
