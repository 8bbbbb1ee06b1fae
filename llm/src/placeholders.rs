//! How a step fills its template's placeholders, and how it is read back out
//! of them (the simulator answers a prompt as the step it was rendered from).

use std::collections::HashMap;
use std::sync::LazyLock;

use memweave_operators::model::{PageText, Step, Task};
use regex::Regex;

/// A break label on its own line of a pagination passage: `<12>`.
static LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^<(\d+)>$").expect("a valid pattern"));

/// The placeholders `task`'s template must contain.
pub fn names(task: Task) -> &'static [&'static str] {
    match task {
        Task::SummarizeSegment => &["segment"],
        Task::CompressSummaries => &["summaries"],
        Task::Triage => &["question", "summaries"],
        Task::ReadLeaf => &["memory", "segment", "question"],
        Task::ChooseBreak => &["passage"],
        Task::GistPage => &["page"],
        Task::StartsNewSection => &["previous_page", "current_page"],
        Task::LookupPages => &["max_pages", "memory", "question"],
        Task::LookupNextPage => &["memory", "already_read", "question"],
        Task::ExtractEntities => &["background", "segment"],
        Task::ExtractRelations => &["segment", "entities"],
        Task::MergeRelations => &[
            "summary",
            "segment_1",
            "relation_1",
            "segment_2",
            "relation_2",
        ],
        Task::SameEntity => &["name", "first", "others"],
        Task::JudgeAnswerable => &["context", "question"],
        Task::SummarizeWithFacts => &["chunk"],
        Task::UpdateMemory => &["retrieved", "memory", "question"],
        Task::Answer => &["context", "question"],
    }
}

/// The values of `step`'s placeholders.
pub fn values(step: &Step) -> Vec<(&'static str, String)> {
    match step {
        Step::SummarizeSegment { segment } => vec![("segment", segment.clone())],
        Step::CompressSummaries { summaries } => {
            vec![("summaries", numbered_summaries(summaries))]
        }
        Step::Triage {
            question,
            summaries,
        } => vec![
            ("question", question.clone()),
            ("summaries", numbered_summaries(summaries)),
        ],
        Step::ReadLeaf {
            question,
            memory,
            segment,
        } => vec![
            ("memory", memory.clone()),
            ("segment", segment.clone()),
            ("question", question.clone()),
        ],
        Step::ChooseBreak {
            units,
            candidates,
            first_label,
        } => vec![("passage", labelled_passage(units, candidates, *first_label))],
        Step::GistPage { page } => vec![("page", page.clone())],
        Step::StartsNewSection { previous, current } => vec![
            ("previous_page", previous.clone()),
            ("current_page", current.clone()),
        ],
        Step::LookupPages {
            question,
            pages,
            max_pages,
        } => vec![
            ("max_pages", max_pages.to_string()),
            ("memory", page_memory(pages)),
            ("question", question.clone()),
        ],
        Step::LookupNextPage {
            question,
            pages,
            already_read,
        } => vec![
            ("memory", page_memory(pages)),
            ("already_read", page_list(already_read)),
            ("question", question.clone()),
        ],
        Step::ExtractEntities {
            background,
            segment,
        } => vec![
            ("background", background.clone()),
            ("segment", segment.clone()),
        ],
        Step::ExtractRelations { segment, entities } => vec![
            ("segment", segment.clone()),
            ("entities", entities.join("\n")),
        ],
        Step::MergeRelations {
            summary,
            segments,
            relations,
        } => vec![
            ("summary", summary.clone()),
            ("segment_1", segments[0].clone()),
            ("relation_1", relations[0].clone()),
            ("segment_2", segments[1].clone()),
            ("relation_2", relations[1].clone()),
        ],
        Step::SameEntity {
            name,
            first,
            others,
        } => vec![
            ("name", name.clone()),
            ("first", one_line(first)),
            ("others", numbered_passages(others)),
        ],
        Step::JudgeAnswerable { question, context } => {
            vec![("context", context.clone()), ("question", question.clone())]
        }
        Step::SummarizeWithFacts { chunk } => vec![("chunk", chunk.clone())],
        Step::UpdateMemory {
            question,
            retrieved,
            memory,
        } => vec![
            ("retrieved", retrieved.clone()),
            ("memory", memory.clone()),
            ("question", question.clone()),
        ],
        Step::Answer { question, context } => {
            vec![("context", context.clone()), ("question", question.clone())]
        }
    }
}

/// The step a prompt was rendered from, given its task and placeholder values
/// (what the simulator reads back out of a prompt). `None` when a value does not
/// have the shape rendering gives it.
pub fn step_from(task: Task, vars: &HashMap<String, String>) -> Option<Step> {
    let get = |name: &str| vars.get(name).cloned();
    Some(match task {
        Task::SummarizeSegment => Step::SummarizeSegment {
            segment: get("segment")?,
        },
        Task::CompressSummaries => Step::CompressSummaries {
            summaries: parse_numbered_summaries(&get("summaries")?),
        },
        Task::Triage => Step::Triage {
            question: get("question")?,
            summaries: parse_numbered_summaries(&get("summaries")?),
        },
        Task::ReadLeaf => Step::ReadLeaf {
            question: get("question")?,
            memory: get("memory")?,
            segment: get("segment")?,
        },
        Task::ChooseBreak => {
            let (units, candidates, first_label) = parse_labelled_passage(&get("passage")?)?;
            Step::ChooseBreak {
                units,
                candidates,
                first_label,
            }
        }
        Task::GistPage => Step::GistPage { page: get("page")? },
        Task::StartsNewSection => Step::StartsNewSection {
            previous: get("previous_page")?,
            current: get("current_page")?,
        },
        Task::LookupPages => Step::LookupPages {
            question: get("question")?,
            pages: parse_page_memory(&get("memory")?),
            max_pages: get("max_pages")?.trim().parse().ok()?,
        },
        Task::LookupNextPage => Step::LookupNextPage {
            question: get("question")?,
            pages: parse_page_memory(&get("memory")?),
            already_read: get("already_read")?
                .split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect(),
        },
        Task::ExtractEntities => Step::ExtractEntities {
            background: get("background")?,
            segment: get("segment")?,
        },
        Task::ExtractRelations => Step::ExtractRelations {
            segment: get("segment")?,
            entities: get("entities")?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect(),
        },
        Task::MergeRelations => Step::MergeRelations {
            summary: get("summary")?,
            segments: [get("segment_1")?, get("segment_2")?],
            relations: [get("relation_1")?, get("relation_2")?],
        },
        Task::SameEntity => Step::SameEntity {
            name: get("name")?,
            first: get("first")?,
            others: parse_numbered_passages(&get("others")?),
        },
        Task::JudgeAnswerable => Step::JudgeAnswerable {
            question: get("question")?,
            context: get("context")?,
        },
        Task::SummarizeWithFacts => Step::SummarizeWithFacts {
            chunk: get("chunk")?,
        },
        Task::UpdateMemory => Step::UpdateMemory {
            question: get("question")?,
            retrieved: get("retrieved")?,
            memory: get("memory")?,
        },
        Task::Answer => Step::Answer {
            question: get("question")?,
            context: get("context")?,
        },
    })
}

/// `step` as its prompt shows it: what a model reading the prompt is asked
/// (list items on one line each).
pub fn as_shown(step: &Step) -> Step {
    let values = values(step)
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    step_from(step.task(), &values).unwrap_or_else(|| step.clone())
}

/// MemWalker's "Summary 0: …" list, one summary per line.
fn numbered_summaries(summaries: &[String]) -> String {
    summaries
        .iter()
        .enumerate()
        .map(|(i, s)| format!("Summary {i}: {}", one_line(s)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse_numbered_summaries(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("Summary ")?;
            let (_, summary) = rest.split_once(": ")?;
            Some(summary.to_string())
        })
        .collect()
}

/// Entity disambiguation's candidates: "Passage 1: …", one per line.
fn numbered_passages(passages: &[String]) -> String {
    passages
        .iter()
        .enumerate()
        .map(|(i, p)| format!("Passage {}: {}", i + 1, one_line(p)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse_numbered_passages(text: &str) -> Vec<String> {
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
fn one_line(text: &str) -> String {
    text.split('\n')
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// ReadAgent's passage: paragraphs separated by blank lines, with the label `<n>`
/// (paragraph numbers counted from `first_label`) after each paragraph a page may
/// end with.
fn labelled_passage(units: &[String], candidates: &[usize], first_label: usize) -> String {
    let mut parts = Vec::new();
    for (i, unit) in units.iter().enumerate() {
        parts.push(single_paragraph(unit));
        if candidates.contains(&i) {
            parts.push(format!("<{}>", first_label + i));
        }
    }
    parts.join("\n\n")
}

fn parse_labelled_passage(text: &str) -> Option<(Vec<String>, Vec<usize>, usize)> {
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
fn single_paragraph(text: &str) -> String {
    text.trim()
        .split('\n')
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// ReadAgent's gist memory: each page's gist (or, once looked up, its text) under
/// its page tag.
fn page_memory(pages: &[PageText]) -> String {
    pages
        .iter()
        .map(|p| format!("<Page {}>\n{}", p.number, single_paragraph(&p.text)))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn parse_page_memory(text: &str) -> Vec<PageText> {
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

fn page_list(pages: &[u32]) -> String {
    if pages.is_empty() {
        return "none".to_string();
    }
    pages
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
