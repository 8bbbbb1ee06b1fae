//! Every model step in one table: for each, its template, the placeholders it
//! fills and how a rendered prompt reads back into the step, the reply type and
//! the parser that reads it, the extractive backend's reply and how the
//! simulator dresses that reply. The step's inputs are declared once in
//! `memweave-operators` (`model/step.rs`); the matches the rest of this crate
//! needs (`Prompts`, `TaskModel`, the simulator) are generated from this table,
//! so a step missing here does not compile.

use std::collections::HashMap;

#[cfg(test)]
use memweave_operators::model::PageText;
use memweave_operators::model::{Reply, Step, Task};

use crate::extractive;
use crate::placeholders::*;
use memweave_operators::model::parse;

/// How a real model dresses a kind of reply: labels in another case or in
/// markdown, a preamble, a list written in words. The simulator's drift
/// (`sim::drift`) picks one of the ways of the step's dress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dress {
    /// "Reasoning: … Action: … (Answer: …)".
    Reasoned,
    /// "Break point: <n>".
    BreakPoint,
    /// "Page [a, b]" in a sentence.
    PageList,
    /// "Page n" or "STOP".
    NextPage,
    /// "Entities:" and a name a line.
    EntityList,
    /// "(a; b): description", a relation a line.
    RelationList,
    /// A short yes/no or list answer.
    Verdict,
    /// "(Summary): … (Surprise): …".
    FactSummary,
    /// Free text; `relabel`: a "Summary:" label may be put before it (not
    /// before a reply that opens with a label of its own).
    Prose { relabel: bool },
}

/// Generates, from one entry per step, the functions below the table. In an
/// entry, the step's fields are bound by name in `placeholders`, `reply` and
/// `extractive`; `read_back` builds the step from its placeholders' values
/// (`get(name)`, `None` when a value lacks the shape rendering gives it).
macro_rules! model_steps {
    ($(
        $variant:ident { $($field:ident),* $(,)? } {
            template: $template:literal,
            placeholders: { $($name:literal => $value:expr),* $(,)? },
            read_back: |$get:ident| $read:expr,
            reply: $kind:ident = |$reply:ident| $parse:expr,
            extractive: $extractive:expr,
            dress: $dress:expr,
            example: $example:expr $(,)?
        },
    )*) => {
        /// The built-in template of `task` (`prompts/NAME.txt`).
        pub(crate) fn template(task: Task) -> &'static str {
            match task {
                $(Task::$variant => include_str!(concat!("../prompts/", $template, ".txt")),)*
            }
        }

        /// The file name (without `.txt`) of the built-in template of `task`.
        #[cfg(test)]
        fn template_name(task: Task) -> &'static str {
            match task {
                $(Task::$variant => $template,)*
            }
        }

        /// The placeholders `task`'s template must contain.
        pub(crate) fn placeholders(task: Task) -> &'static [&'static str] {
            match task {
                $(Task::$variant => &[$($name),*],)*
            }
        }

        /// The values of `step`'s placeholders.
        pub(crate) fn values(step: &Step) -> Vec<(&'static str, String)> {
            match step {
                $(Step::$variant { $($field),* } => vec![$(($name, $value)),*],)*
            }
        }

        /// The step a prompt was rendered from, given its task and placeholder
        /// values (what the simulator reads back out of a prompt).
        pub fn read_back(task: Task, vars: &HashMap<String, String>) -> Option<Step> {
            let get = |name: &str| vars.get(name).cloned();
            Some(match task {
                $(Task::$variant => {
                    let $get = &get;
                    $read
                })*
            })
        }

        /// `reply` read as `step` asks, into the step's reply type; `None` when
        /// it does not answer.
        #[allow(unused_variables)] // an entry's parser reads only the fields it needs
        pub fn parse(step: &Step, reply: &str) -> Option<Reply> {
            match step {
                $(Step::$variant { $($field),* } => {
                    let $reply = reply;
                    ($parse).map(Reply::$kind)
                })*
            }
        }

        /// The offline backend's reply to `step`, in its template's format.
        #[allow(unused_variables)] // an entry's reply reads only the fields it needs
        pub fn extractive_reply(step: &Step) -> String {
            match step {
                $(Step::$variant { $($field),* } => $extractive,)*
            }
        }

        /// How a model dresses `task`'s reply.
        pub fn dress(task: Task) -> Dress {
            match task {
                $(Task::$variant => $dress,)*
            }
        }

        /// One step of each task, as the tests render, parse and answer them.
        #[cfg(test)]
        pub(crate) fn examples() -> Vec<Step> {
            vec![$($example),*]
        }
    };
}

model_steps! {
    SummarizeSegment { segment } {
        template: "summarize_segment",
        placeholders: { "segment" => segment.clone() },
        read_back: |get| Step::SummarizeSegment { segment: get("segment")? },
        reply: Text = |reply| parse::free_text(reply),
        extractive: extractive::leaf_summary(segment),
        dress: Dress::Prose { relabel: true },
        example: Step::SummarizeSegment { segment: "It rained.\n\nThen it stopped.".into() },
    },
    CompressSummaries { summaries } {
        template: "compress_summaries",
        placeholders: { "summaries" => numbered_summaries(summaries) },
        read_back: |get| Step::CompressSummaries {
            summaries: parse_numbered_summaries(&get("summaries")?),
        },
        reply: Text = |reply| parse::free_text(reply),
        extractive: extractive::compress(summaries),
        dress: Dress::Prose { relabel: true },
        example: Step::CompressSummaries { summaries: vec!["One.".into(), "Two.\n\nThree.".into()] },
    },
    Triage { question, summaries } {
        template: "triage",
        placeholders: {
            "question" => question.clone(),
            "summaries" => numbered_summaries(summaries),
        },
        read_back: |get| Step::Triage {
            question: get("question")?,
            summaries: parse_numbered_summaries(&get("summaries")?),
        },
        reply: Triage = |reply| parse::triage(reply, summaries.len()),
        extractive: extractive::triage(question, summaries),
        dress: Dress::Reasoned,
        example: Step::Triage { question: "Why?".into(), summaries: vec!["A.".into(), "B.".into()] },
    },
    ReadLeaf { question, memory, segment } {
        template: "read_leaf",
        placeholders: {
            "memory" => memory.clone(),
            "segment" => segment.clone(),
            "question" => question.clone(),
        },
        read_back: |get| Step::ReadLeaf {
            question: get("question")?,
            memory: get("memory")?,
            segment: get("segment")?,
        },
        reply: Judgement = |reply| parse::judgement(reply),
        extractive: extractive::judge(question, segment),
        dress: Dress::Reasoned,
        example: Step::ReadLeaf { question: "Who?".into(), memory: "m".into(), segment: "Text.".into() },
    },
    ChooseBreak { units, candidates, first_label } {
        template: "choose_break",
        placeholders: { "passage" => labelled_passage(units, candidates, *first_label) },
        read_back: |get| {
            let (units, candidates, first_label) = parse_labelled_passage(&get("passage")?)?;
            Step::ChooseBreak { units, candidates, first_label }
        },
        reply: Break = |reply| parse::break_point(reply, *first_label, candidates),
        extractive: extractive::choose_break(units, candidates, *first_label),
        dress: Dress::BreakPoint,
        example: Step::ChooseBreak {
            units: vec!["P one.".into(), "P two.".into(), "P three.".into()],
            candidates: vec![0, 1],
            first_label: 40,
        },
    },
    GistPage { page } {
        template: "gist_page",
        placeholders: { "page" => page.clone() },
        read_back: |get| Step::GistPage { page: get("page")? },
        reply: Text = |reply| parse::free_text(reply),
        extractive: extractive::gist(page),
        dress: Dress::Prose { relabel: true },
        example: Step::GistPage { page: "A page.".into() },
    },
    StartsNewSection { previous, current } {
        template: "starts_new_section",
        placeholders: {
            "previous_page" => previous.clone(),
            "current_page" => current.clone(),
        },
        read_back: |get| Step::StartsNewSection {
            previous: get("previous_page")?,
            current: get("current_page")?,
        },
        reply: SectionStart = |reply| parse::section_start(reply),
        extractive: extractive::starts_new_section(previous, current),
        dress: Dress::Verdict,
        example: Step::StartsNewSection {
            previous: "The end of one page.".into(),
            current: "Chapter 2. A new start.".into(),
        },
    },
    LookupPages { question, pages, max_pages } {
        template: "lookup_pages",
        placeholders: {
            "max_pages" => max_pages.to_string(),
            "memory" => page_memory(pages),
            "question" => question.clone(),
        },
        read_back: |get| Step::LookupPages {
            question: get("question")?,
            pages: parse_page_memory(&get("memory")?),
            max_pages: get("max_pages")?.trim().parse().ok()?,
        },
        reply: Pages = |reply| parse::pages(reply, &page_numbers(pages), *max_pages),
        extractive: extractive::lookup_pages(question, pages, *max_pages),
        dress: Dress::PageList,
        example: Step::LookupPages {
            question: "Q?".into(),
            pages: vec![
                PageText { number: 0, text: "gist zero".into() },
                PageText { number: 1, text: "gist one".into() },
            ],
            max_pages: 3,
        },
    },
    LookupNextPage { question, pages, already_read } {
        template: "lookup_next_page",
        placeholders: {
            "memory" => page_memory(pages),
            "already_read" => page_list(already_read),
            "question" => question.clone(),
        },
        read_back: |get| Step::LookupNextPage {
            question: get("question")?,
            pages: parse_page_memory(&get("memory")?),
            already_read: parse_page_list(&get("already_read")?),
        },
        reply: NextPage = |reply| parse::next_page(reply, &page_numbers(pages), already_read),
        extractive: extractive::lookup_next_page(question, pages, already_read),
        dress: Dress::NextPage,
        example: Step::LookupNextPage {
            question: "Q?".into(),
            pages: vec![PageText { number: 4, text: "g".into() }],
            already_read: vec![1, 4],
        },
    },
    ExtractEntities { background, segment } {
        template: "extract_entities",
        placeholders: {
            "background" => background.clone(),
            "segment" => segment.clone(),
        },
        read_back: |get| Step::ExtractEntities {
            background: get("background")?,
            segment: get("segment")?,
        },
        reply: Entities = |reply| parse::entities(reply),
        extractive: extractive::entities(segment),
        dress: Dress::EntityList,
        example: Step::ExtractEntities { background: "bg".into(), segment: "Paul met Ann.".into() },
    },
    ExtractRelations { segment, entities } {
        template: "extract_relations",
        placeholders: {
            "segment" => segment.clone(),
            "entities" => entities.join("\n"),
        },
        read_back: |get| Step::ExtractRelations {
            segment: get("segment")?,
            entities: non_empty_lines(&get("entities")?),
        },
        reply: Relations = |reply| {
            let entities: Vec<&str> = entities.iter().map(String::as_str).collect();
            parse::relations(reply, &entities)
        },
        extractive: extractive::relations(segment, entities),
        dress: Dress::RelationList,
        example: Step::ExtractRelations {
            segment: "Paul met Ann.".into(),
            entities: vec!["Paul".into(), "Ann".into()],
        },
    },
    MergeRelations { summary, segments, relations } {
        template: "merge_relations",
        placeholders: {
            "summary" => summary.clone(),
            "segment_1" => segments[0].clone(),
            "relation_1" => relations[0].clone(),
            "segment_2" => segments[1].clone(),
            "relation_2" => relations[1].clone(),
        },
        read_back: |get| Step::MergeRelations {
            summary: get("summary")?,
            segments: [get("segment_1")?, get("segment_2")?],
            relations: [get("relation_1")?, get("relation_2")?],
        },
        reply: Text = |reply| parse::free_text(reply),
        extractive: extractive::merge_relations(relations),
        // Its reply opens with "Merged relation:", a label of its own.
        dress: Dress::Prose { relabel: false },
        example: Step::MergeRelations {
            summary: "doc".into(),
            segments: ["s1".into(), "s2".into()],
            relations: ["r1".into(), "r2".into()],
        },
    },
    SameEntity { name, first, others } {
        template: "same_entity",
        placeholders: {
            "name" => name.clone(),
            "first" => one_line(first),
            "others" => numbered_passages(others),
        },
        read_back: |get| Step::SameEntity {
            name: get("name")?,
            first: get("first")?,
            others: parse_numbered_passages(&get("others")?),
        },
        reply: SameEntity = |reply| parse::same_entities(reply, others.len()),
        extractive: extractive::same_entity(name, first, others),
        dress: Dress::Verdict,
        example: Step::SameEntity {
            name: "Paul".into(),
            first: "Paul painted.".into(),
            others: vec!["Paul wrote.".into(), "Paul sailed.".into()],
        },
    },
    JudgeAnswerable { question, context } {
        template: "judge_answerable",
        placeholders: {
            "context" => context.clone(),
            "question" => question.clone(),
        },
        read_back: |get| Step::JudgeAnswerable {
            question: get("question")?,
            context: get("context")?,
        },
        reply: Judgement = |reply| parse::judgement(reply),
        extractive: extractive::judge(question, context),
        dress: Dress::Reasoned,
        example: Step::JudgeAnswerable { question: "Q?".into(), context: "C.".into() },
    },
    SummarizeWithFacts { chunk } {
        template: "summarize_with_facts",
        placeholders: { "chunk" => chunk.clone() },
        read_back: |get| Step::SummarizeWithFacts { chunk: get("chunk")? },
        reply: FactSummary = |reply| parse::fact_summary(reply),
        extractive: extractive::fact_summary(chunk),
        dress: Dress::FactSummary,
        example: Step::SummarizeWithFacts { chunk: "Chunk.".into() },
    },
    UpdateMemory { question, retrieved, memory } {
        template: "update_memory",
        placeholders: {
            "retrieved" => retrieved.clone(),
            "memory" => memory.clone(),
            "question" => question.clone(),
        },
        read_back: |get| Step::UpdateMemory {
            question: get("question")?,
            retrieved: get("retrieved")?,
            memory: get("memory")?,
        },
        reply: Text = |reply| parse::free_text(reply),
        extractive: extractive::update_memory(question, retrieved, memory),
        dress: Dress::Prose { relabel: true },
        example: Step::UpdateMemory { question: "Q?".into(), retrieved: "R.".into(), memory: "M.".into() },
    },
    Answer { question, context } {
        template: "answer",
        placeholders: {
            "context" => context.clone(),
            "question" => question.clone(),
        },
        read_back: |get| Step::Answer {
            question: get("question")?,
            context: get("context")?,
        },
        reply: Text = |reply| parse::free_text(reply),
        extractive: extractive::answer(question, context),
        dress: Dress::Prose { relabel: true },
        example: Step::Answer { question: "Q?".into(), context: "C.".into() },
    },
}

/// `step` as its prompt shows it: what a model reading the prompt is asked
/// (list items on one line each).
pub fn as_shown(step: &Step) -> Step {
    let values = values(step)
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
    read_back(step.task(), &values).unwrap_or_else(|| step.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_has_one_entry_and_a_template_named_after_it() {
        let examples = examples();
        assert_eq!(
            examples.iter().map(Step::task).collect::<Vec<_>>(),
            Task::ALL,
            "one example per task, in Task::ALL's order"
        );
        for task in Task::ALL {
            assert_eq!(template_name(task), task.name());
        }
    }

    #[test]
    fn every_extractive_reply_reads_back_through_its_steps_parser() {
        for step in examples() {
            let reply = extractive_reply(&as_shown(&step));
            assert!(parse(&step, &reply).is_some(), "{step:?}: {reply:?}");
        }
    }
}
