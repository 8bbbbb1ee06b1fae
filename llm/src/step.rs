//! One model call's task and inputs, owned, so a call can be rendered into a
//! prompt, answered by any backend, and (in the simulator) read back from a prompt.

use std::collections::HashMap;
use std::fmt;

use std::sync::LazyLock;

use regex::Regex;

/// A break label on its own line of a pagination passage: `<12>`.
static LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^<(\d+)>$").expect("a valid pattern"));

/// The steps of the four methods, one prompt template each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Task {
    SummarizeSegment,
    CompressSummaries,
    Triage,
    ReadLeaf,
    ChooseBreak,
    GistPage,
    StartsNewSection,
    LookupPages,
    LookupNextPage,
    ExtractEntities,
    ExtractRelations,
    MergeRelations,
    SameEntity,
    JudgeAnswerable,
    SummarizeWithFacts,
    UpdateMemory,
    Answer,
}

impl Task {
    pub const ALL: [Task; 17] = [
        Task::SummarizeSegment,
        Task::CompressSummaries,
        Task::Triage,
        Task::ReadLeaf,
        Task::ChooseBreak,
        Task::GistPage,
        Task::StartsNewSection,
        Task::LookupPages,
        Task::LookupNextPage,
        Task::ExtractEntities,
        Task::ExtractRelations,
        Task::MergeRelations,
        Task::SameEntity,
        Task::JudgeAnswerable,
        Task::SummarizeWithFacts,
        Task::UpdateMemory,
        Task::Answer,
    ];

    /// The task's name: `llm_calls.task` and the template's file name (`NAME.txt`).
    pub fn name(self) -> &'static str {
        match self {
            Task::SummarizeSegment => "summarize_segment",
            Task::CompressSummaries => "compress_summaries",
            Task::Triage => "triage",
            Task::ReadLeaf => "read_leaf",
            Task::ChooseBreak => "choose_break",
            Task::GistPage => "gist_page",
            Task::StartsNewSection => "starts_new_section",
            Task::LookupPages => "lookup_pages",
            Task::LookupNextPage => "lookup_next_page",
            Task::ExtractEntities => "extract_entities",
            Task::ExtractRelations => "extract_relations",
            Task::MergeRelations => "merge_relations",
            Task::SameEntity => "same_entity",
            Task::JudgeAnswerable => "judge_answerable",
            Task::SummarizeWithFacts => "summarize_with_facts",
            Task::UpdateMemory => "update_memory",
            Task::Answer => "answer",
        }
    }

    /// The placeholders its template must contain.
    pub fn placeholders(self) -> &'static [&'static str] {
        match self {
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
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A ReadAgent page in a look-up prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageText {
    pub number: u32,
    pub text: String,
}

/// A call: the task and everything its prompt is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    SummarizeSegment {
        segment: String,
    },
    CompressSummaries {
        summaries: Vec<String>,
    },
    Triage {
        question: String,
        summaries: Vec<String>,
    },
    ReadLeaf {
        question: String,
        memory: String,
        segment: String,
    },
    ChooseBreak {
        units: Vec<String>,
        candidates: Vec<usize>,
        first_label: usize,
    },
    GistPage {
        page: String,
    },
    StartsNewSection {
        previous: String,
        current: String,
    },
    LookupPages {
        question: String,
        pages: Vec<PageText>,
        max_pages: usize,
    },
    LookupNextPage {
        question: String,
        pages: Vec<PageText>,
        already_read: Vec<u32>,
    },
    ExtractEntities {
        background: String,
        segment: String,
    },
    ExtractRelations {
        segment: String,
        entities: Vec<String>,
    },
    MergeRelations {
        summary: String,
        segments: [String; 2],
        relations: [String; 2],
    },
    SameEntity {
        name: String,
        first: String,
        others: Vec<String>,
    },
    JudgeAnswerable {
        question: String,
        context: String,
    },
    SummarizeWithFacts {
        chunk: String,
    },
    UpdateMemory {
        question: String,
        retrieved: String,
        memory: String,
    },
    Answer {
        question: String,
        context: String,
    },
}

impl Step {
    pub fn task(&self) -> Task {
        match self {
            Step::SummarizeSegment { .. } => Task::SummarizeSegment,
            Step::CompressSummaries { .. } => Task::CompressSummaries,
            Step::Triage { .. } => Task::Triage,
            Step::ReadLeaf { .. } => Task::ReadLeaf,
            Step::ChooseBreak { .. } => Task::ChooseBreak,
            Step::GistPage { .. } => Task::GistPage,
            Step::StartsNewSection { .. } => Task::StartsNewSection,
            Step::LookupPages { .. } => Task::LookupPages,
            Step::LookupNextPage { .. } => Task::LookupNextPage,
            Step::ExtractEntities { .. } => Task::ExtractEntities,
            Step::ExtractRelations { .. } => Task::ExtractRelations,
            Step::MergeRelations { .. } => Task::MergeRelations,
            Step::SameEntity { .. } => Task::SameEntity,
            Step::JudgeAnswerable { .. } => Task::JudgeAnswerable,
            Step::SummarizeWithFacts { .. } => Task::SummarizeWithFacts,
            Step::UpdateMemory { .. } => Task::UpdateMemory,
            Step::Answer { .. } => Task::Answer,
        }
    }

    /// The values of the template's placeholders.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        match self {
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
    pub fn from_vars(task: Task, vars: &HashMap<String, String>) -> Option<Step> {
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
