//! The offline backend: every step answered extractively (sentences chosen, never
//! written), in the reply format its paper's prompt asks for, so the same parsers
//! read it as read a model. The simulator answers with these replies too.

use std::collections::{BTreeSet, HashSet};

use memweave_operators::extract::{
    best_sentences, capitalised_names, co_mentions, distinctive_sentences, head_words,
    surprising_sentences,
};
use memweave_operators::lexical::{Bm25, TermVector, sharpest_shift, term_rarity, terms};
use memweave_operators::paginate::PageConfig;
use memweave_operators::text::word_count;

use memweave_operators::model::PageText;

/// Bumped whenever an extractive reply would change, so cached replies of an older
/// version are not reused (the version is part of every call key).
pub const EXTRACTIVE_MODEL: &str = "extractive-v4";

/// Longest leaf summary, in words (MemWalker summaries are a few sentences).
const LEAF_SUMMARY_WORDS: usize = 120;
/// Longest compressed parent summary, in words.
const PARENT_SUMMARY_WORDS: usize = 180;
/// ReadAgent's gists compress pages three to five times.
const GIST_RATIO: usize = 4;
/// Longest gist, in words: a quarter of the longest default page. A model's
/// gist has a length of its own, not a share of whatever it is shown, and
/// ReadAgent's appendix I relies on that: pages merged because their gists
/// outgrow the context get one gist each, so the gists shrink. Gists in
/// proportion to the page never shrank, and the merge went on to pages of
/// 100,000 words (a 500k-token document was 18 pages, its gists 117,000
/// tokens, past a question's whole budget).
const MAX_GIST_WORDS: usize = PageConfig::DEFAULT.max_words / GIST_RATIO;
/// Share of the question's term weight a passage must hold to count as an answer.
const ANSWER_COVERAGE: f64 = 0.5;
/// Most entities taken from one segment.
const MAX_ENTITIES: usize = 20;
/// Most relations taken from one segment.
const MAX_RELATIONS: usize = 30;
/// Longest merged relation description, in words.
const MERGED_RELATION_WORDS: usize = 60;
/// Page merging: below this cosine between two pages' terms the second starts a
/// new section; below twice it the extractive backend is not sure.
const NEW_SECTION_SIMILARITY: f64 = 0.1;

// One function per step, named after it; `steps.rs` says which step each answers.

/// A parent summary: the most distinctive third of its children's summaries.
pub(crate) fn compress(summaries: &[String]) -> String {
    let joined = summaries.join("\n\n");
    let words = word_count(&joined);
    distinctive_sentences(&joined, (words / 3).clamp(40, PARENT_SUMMARY_WORDS))
}

pub(crate) fn triage(question: &str, summaries: &[String]) -> String {
    let index = Bm25::new(summaries.iter().map(String::as_str));
    let query = terms(question);
    let (choice, score) = index
        .rank_by_rarity(&query)
        .into_iter()
        .next()
        .unwrap_or((0, 0.0));
    format!(
        "Reasoning: Summary {choice} shares the most of the question's rarer words (BM25 {score:.2}).\nAction: {choice}"
    )
}

pub(crate) fn choose_break(units: &[String], candidates: &[usize], first_label: usize) -> String {
    let vectors: Vec<TermVector> = units.iter().map(|u| TermVector::of(u)).collect();
    let chosen = sharpest_shift(&vectors, candidates)
        .unwrap_or_else(|| candidates.last().copied().unwrap_or(0));
    format!(
        "Break point: <{}>\nBecause the vocabulary shifts most there.",
        first_label + chosen
    )
}

pub(crate) fn starts_new_section(previous: &str, current: &str) -> String {
    // Where the two pages share little vocabulary, a new section has begun.
    let similarity = TermVector::of(previous).cosine(&TermVector::of(current));
    let answer = if similarity < NEW_SECTION_SIMILARITY {
        "Yes"
    } else if similarity < NEW_SECTION_SIMILARITY * 2.0 {
        "Not sure"
    } else {
        "No"
    };
    format!("{answer}. The pages' vocabularies are {similarity:.2} alike.")
}

pub(crate) fn lookup_pages(question: &str, pages: &[PageText], max_pages: usize) -> String {
    let ranked = rank_pages(question, pages, &[]);
    let chosen: Vec<String> = ranked
        .iter()
        .take(max_pages.max(1))
        .map(u32::to_string)
        .collect();
    if chosen.is_empty() {
        "I don't need to look up any pages.".to_string()
    } else {
        format!(
            "I want to look up Page [{}] to find the passages that share the question's words.",
            chosen.join(", ")
        )
    }
}

pub(crate) fn lookup_next_page(question: &str, pages: &[PageText], already_read: &[u32]) -> String {
    match rank_pages(question, pages, already_read).first() {
        Some(page) => format!("Page {page}"),
        None => "STOP".to_string(),
    }
}

pub(crate) fn entities(segment: &str) -> String {
    let names = capitalised_names(segment, MAX_ENTITIES);
    if names.is_empty() {
        "Entities:\nNone".to_string()
    } else {
        format!("Entities:\n{}", names.join("\n"))
    }
}

pub(crate) fn relations(segment: &str, entities: &[String]) -> String {
    let names: Vec<&str> = entities.iter().map(String::as_str).collect();
    let mut lines: Vec<String> = co_mentions(segment, &names)
        .into_iter()
        .map(|(a, b, sentence)| format!("({a}; {b}): {}", head_words(&sentence, 40)))
        .collect();
    // A list of twenty names in one sentence relates each to each; a
    // model names the relations that matter, not all 190 pairs.
    lines.truncate(MAX_RELATIONS);
    if lines.is_empty() {
        "None".to_string()
    } else {
        lines.join("\n")
    }
}

pub(crate) fn merge_relations([a, b]: &[String; 2]) -> String {
    // Both descriptions, kept to the central sentences of a short paragraph.
    let merged = if a.contains(b.as_str()) {
        a.clone()
    } else if b.contains(a.as_str()) {
        b.clone()
    } else {
        distinctive_sentences(&format!("{a} {b}"), MERGED_RELATION_WORDS)
    };
    format!("Merged relation: {merged}")
}

pub(crate) fn same_entity(name: &str, first: &str, others: &[String]) -> String {
    // The same entity where a passage shares vocabulary with the first
    // beyond the name itself.
    let own: HashSet<String> = terms(name).into_iter().collect();
    let context = |text: &str| -> HashSet<String> {
        terms(text)
            .into_iter()
            .filter(|t| !own.contains(t))
            .collect()
    };
    let reference = context(first);
    let same: Vec<String> = others
        .iter()
        .enumerate()
        .filter(|(_, p)| !reference.is_disjoint(&context(p)))
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    if same.is_empty() {
        "Same: none\nThe passages share nothing with the first but the name.".to_string()
    } else {
        format!(
            "Same: {}\nThese passages share words with the first besides the name.",
            same.join(", ")
        )
    }
}

pub(crate) fn fact_summary(chunk: &str) -> String {
    let summary = leaf_summary(chunk);
    let surprise = surprising_sentences(chunk, 2);
    let surprise = if surprise.is_empty() {
        "None".to_string()
    } else {
        surprise
    };
    format!("(Summary): {summary}\n(Surprise): {surprise}")
}

pub(crate) fn update_memory(question: &str, retrieved: &str, memory: &str) -> String {
    let (found, _) = best_sentences(&format!("{question} {memory}"), retrieved, 2);
    match (found.is_empty(), memory.trim().is_empty()) {
        (true, true) => "Nothing retrieved so far answers the question.".to_string(),
        (true, false) => memory.trim().to_string(),
        _ => found,
    }
}

pub(crate) fn answer(question: &str, context: &str) -> String {
    let (found, _) = best_sentences(question, context, 2);
    if found.is_empty() {
        "The text does not say.".to_string()
    } else {
        found
    }
}

/// A segment's (or chunk's) summary: its most distinctive quarter, 25 to 120 words.
pub(crate) fn leaf_summary(text: &str) -> String {
    let words = word_count(text);
    distinctive_sentences(text, (words / 4).clamp(25, LEAF_SUMMARY_WORDS))
}

pub(crate) fn gist(page: &str) -> String {
    let words = word_count(page);
    let gist = distinctive_sentences(page, (words / GIST_RATIO).clamp(12, MAX_GIST_WORDS));
    if word_count(&gist) < words || words <= 1 {
        return gist;
    }
    // One long sentence: keep its head so the gist is still shorter than the page.
    head_words(page, words.div_ceil(2))
}

/// MemWalker's leaf prompt and QRMeM's reflection: answer (-2) with the sentences
/// that cover the question when they hold its most specific term and enough of
/// its weight, else revert (-1) naming what is missing. A passage that shares
/// only a question's common words ("author", "learn") answers another question.
pub(crate) fn judge(question: &str, text: &str) -> String {
    let (best, covered) = best_sentences(question, text, 2);
    if covered.most_specific && covered.share >= ANSWER_COVERAGE && !best.is_empty() {
        return format!(
            "Reasoning: the text covers {:.0}% of the question's weight, its rarest word included.\nAction: -2\nAnswer: {best}",
            covered.share * 100.0
        );
    }
    let present: HashSet<String> = terms(text).into_iter().collect();
    let missing: BTreeSet<String> = terms(question)
        .into_iter()
        .filter(|t| !present.contains(t))
        .collect();
    // Rarest first: the word the text would need most.
    let mut missing: Vec<String> = missing.into_iter().collect();
    missing.sort_by(|a, b| term_rarity(b).total_cmp(&term_rarity(a)));
    format!(
        "Reasoning: the text does not mention {}.\nAction: -1",
        if missing.is_empty() {
            "enough of the question together".to_string()
        } else {
            missing.join(", ")
        }
    )
}

/// Pages by BM25 against the question, best first, only those that share a word
/// with it, none of `skip`.
fn rank_pages(question: &str, pages: &[PageText], skip: &[u32]) -> Vec<u32> {
    let index = Bm25::new(pages.iter().map(|p| p.text.as_str()));
    index
        .rank_by_rarity(&terms(question))
        .into_iter()
        .filter(|&(_, score)| score > 0.0)
        .map(|(i, _)| pages[i].number)
        .filter(|n| !skip.contains(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::extractive_reply as reply;
    use memweave_operators::model::Step;
    use memweave_operators::model::parse;
    use memweave_operators::testing::PAINTING as TEXT;

    #[test]
    fn replies_follow_the_formats_the_parsers_read() {
        let s = |t: &str| t.to_string();
        let triage = reply(&Step::Triage {
            question: s("What about the weather?"),
            summaries: vec![s("Paint."), s("The weather was cold.")],
        });
        assert_eq!(
            parse::triage(&triage, 2).map(|t| t.choice),
            Some(1),
            "{triage}"
        );

        let leaf = reply(&Step::ReadLeaf {
            question: s("What taught patience?"),
            memory: String::new(),
            segment: s(TEXT),
        });
        let judged = parse::judgement(&leaf).expect("parses");
        assert!(
            judged.answer.is_some_and(|a| a.contains("patience")),
            "{leaf}"
        );
        let revert = reply(&Step::ReadLeaf {
            question: s("Who won the election?"),
            memory: String::new(),
            segment: s(TEXT),
        });
        assert_eq!(
            parse::judgement(&revert).map(|j| j.answer),
            Some(None),
            "{revert}"
        );

        let facts = reply(&Step::SummarizeWithFacts { chunk: s(TEXT) });
        let facts = parse::fact_summary(&facts).expect("parses");
        assert_eq!(facts.surprise, "The weather was cold.");

        let units = vec![
            s("cats purr and cats sleep"),
            s("cats chase mice"),
            s("stocks fell on monday"),
            s("stocks rose"),
        ];
        let brk = reply(&Step::ChooseBreak {
            units,
            candidates: vec![0, 1, 2],
            first_label: 30,
        });
        assert_eq!(parse::break_point(&brk, 30, &[0, 1, 2]), Some(1), "{brk}");

        let pages = vec![
            PageText {
                number: 0,
                text: s("gardens and roses"),
            },
            PageText {
                number: 1,
                text: s("the weather was cold in winter"),
            },
        ];
        let lookup = reply(&Step::LookupPages {
            question: s("How cold was the winter?"),
            pages: pages.clone(),
            max_pages: 2,
        });
        assert_eq!(parse::pages(&lookup, &[0, 1], 2), Some(vec![1]), "{lookup}");
        let next = reply(&Step::LookupNextPage {
            question: s("winter weather"),
            pages,
            already_read: vec![1],
        });
        assert_eq!(parse::next_page(&next, &[0, 1], &[1]), Some(None), "{next}");

        let segment = s("Paul Graham started Viaweb with Robert Morris. Yahoo bought Viaweb.");
        let entities = reply(&Step::ExtractEntities {
            background: String::new(),
            segment: segment.clone(),
        });
        let entities = parse::entities(&entities).expect("parses");
        assert_eq!(
            entities,
            ["Paul Graham", "Viaweb", "Robert Morris", "Yahoo"]
        );
        let names: Vec<&str> = entities.iter().map(String::as_str).collect();
        let relations = reply(&Step::ExtractRelations {
            segment,
            entities: entities.clone(),
        });
        let relations = parse::relations(&relations, &names).expect("parses");
        assert!(
            relations
                .iter()
                .any(|r| r.source == "Viaweb" && r.target == "Yahoo"),
            "{relations:?}"
        );
    }

    #[test]
    fn gists_are_shorter_than_their_pages() {
        for page in [
            TEXT,
            "A single rather long sentence without any break at all in it.",
        ] {
            let gist =
                parse::free_text(&reply(&Step::GistPage { page: page.into() })).expect("a gist");
            assert!(word_count(&gist) < word_count(page), "{gist}");
        }
    }

    #[test]
    fn a_long_page_gets_a_gist_of_bounded_length() {
        // Every sentence holds words of its own, so each is worth keeping.
        let page: String = (0..400)
            .map(|i| format!("Chapter {i} tells of harbour{i} and lantern{i}. "))
            .collect();
        assert!(word_count(&page) > 8 * MAX_GIST_WORDS);
        let gist = parse::free_text(&reply(&Step::GistPage { page })).expect("a gist");
        assert!(
            word_count(&gist) <= MAX_GIST_WORDS,
            "{} words",
            word_count(&gist)
        );
    }
}
