//! Reply parsers. Real models drift from the format a prompt asks for: labels in
//! any case, markdown around them, a sentence of preamble, `Action 0` for
//! `Action: 0`, `pages 7 and 12` for `Page [7, 12]`. Each parser takes what a
//! reader would accept and returns `None` only when the reply does not answer.

use std::sync::LazyLock;

use super::{FactSummary, Judgement, Relation, Triage};
use regex::Regex;

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a valid pattern")
}

static FENCE: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(```\w*|[#=*_-]{3,})\s*$"));
static PREAMBLE: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^\W*(sure|okay|ok|certainly|here|below|of course)\b.{0,100}:\s*$"));
static LABEL: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)^[\s*_#]*(summary|shortened (version|passage)|shortened|gist|final answer|answer|merged relation|memory|your output|\(your output\)|output)[\s*_]*:(?:(?:\*\*|__)(?:\s+|$)|\s*)",
    )
});
static ACTION: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\baction\b[\s*_]*[:#=]?[\s*_]*(-?\d+)"));
static REASONING: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)reasoning[\s*_]*:[\s*_]*"));
static ANSWER: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(final\s+)?answer[\s*_]*:(?:(?:\*\*|__)(?:\s+|$)|\s*)"));
static BREAK: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)break\s*point[\s*_]*[:#]?[\s*_]*[<(\[]?\s*(\d+)"));
static YES_NO: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\b(not\s+sure|yes|no)\b"));
static ANGLE: LazyLock<Regex> = LazyLock::new(|| re(r"<\s*(\d+)\s*>"));
static PAGE_BRACKETS: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)pages?\s*\[([^\]]*)\]"));
static PAGE_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)\bpages?\s*#?\s*(\d+(?:\s*(?:,|and|&|or)\s*(?:pages?\s*)?#?\s*\d+)*)")
});
static NUMBER: LazyLock<Regex> = LazyLock::new(|| re(r"\d+"));
static SAME: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)same:"));
static REFUSAL: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(don't|do not|no) need to (look up|read)|\bno pages?\b|\bnone\b"));
static STOP: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\bstop\b"));
static BULLET: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(?:[-*•+]|\d+[.)])\s+"));
static ENTITY_TYPE: LazyLock<Regex> = LazyLock::new(|| re(r"\s*[(\[][A-Za-z /]+[)\]]\s*$"));
static RELATION: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\(?\s*([^;|()]+?)\s*(?:;|\||,|\s-\s|\s–\s|\s->\s|\s→\s)\s*([^;|()]+?)\s*\)?\s*(?::|\||\s-\s|\s–\s)\s*(.+)$",
    )
});
static SUMMARY_LABEL: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)[(\[]?\s*summary\s*[)\]]?[\s*_]*:[\s*_]*"));
static SURPRISE_LABEL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)[(\[]?\s*surpris(e|ing information|ing facts?)\s*[)\]]?[\s*_]*:[\s*_]*")
});
/// The surprise label opening a line, as the prompt's format puts it. The last
/// one is the label: the summary comes first and may itself hold a line that
/// opens "surprise: …" (hard-wrapped text).
static SURPRISE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?im)^[\s*_#>-]*[(\[]?\s*surpris(e|ing information|ing facts?)\s*[)\]]?[\s*_]*:[\s*_]*")
});

/// The reply without code fences and separator lines (`####`, `---`).
fn body(reply: &str) -> String {
    reply
        .lines()
        .filter(|line| !FENCE.is_match(line))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

fn unmark(text: &str) -> String {
    text.replace("**", "").replace("__", "").trim().to_string()
}

/// ReadAgent's page-merging answer: `Some(true)` for yes (Page 2 starts a new
/// section), `Some(false)` for no, `None` for not sure; the first of the three
/// the reply says counts.
pub fn section_start(reply: &str) -> Option<Option<bool>> {
    let text = unmark(&body(reply));
    let answer = YES_NO.captures(&text)?[1].to_lowercase();
    Some(match answer.as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    })
}

/// Entity disambiguation: the passage numbers (1 to `n`) after "Same:", as one
/// answer per passage; "none" (or no number) keeps every passage apart. `None`
/// when the reply has no "Same:" line or names a passage that does not exist.
pub fn same_entities(reply: &str, n: usize) -> Option<Vec<bool>> {
    let text = unmark(&body(reply));
    // Matched in the reply itself: an offset found in a lowercased copy is
    // not an offset of the original once a character changes its length
    // (`İ` lowercases to two characters).
    let line = text
        .lines()
        .find_map(|l| Some(l[SAME.find(l)?.end()..].to_string()))?;
    let mut same = vec![false; n];
    for number in NUMBER.find_iter(&line) {
        let k: usize = number.as_str().parse().ok()?;
        *same.get_mut(k.checked_sub(1)?)? = true;
    }
    Some(same)
}

/// Free text (summaries, gists, merged relations, memory, answers): the reply
/// without fences, a leading "Here is …:" line, or a leading label such as
/// "Summary:". `None` when nothing is left.
pub fn free_text(reply: &str) -> Option<String> {
    let body = body(reply);
    let mut lines: Vec<&str> = body.lines().collect();
    if lines.len() > 1 && PREAMBLE.is_match(lines[0]) {
        lines.remove(0);
    }
    let text = lines.join("\n");
    let text = text.trim();
    let text = LABEL.replace(text, "");
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The number after the last "Action", with where the match starts and ends.
fn action(reply: &str) -> Option<(i64, usize, usize)> {
    ACTION.captures_iter(reply).last().and_then(|c| {
        let whole = c.get(0)?;
        Some((c[1].parse().ok()?, whole.start(), whole.end()))
    })
}

fn reasoning(text: &str, end: usize) -> String {
    let head = &text[..end];
    let start = REASONING.find(head).map_or(0, |m| m.end());
    unmark(&head[start..])
}

/// MemWalker triage: `Action: i` with `i` one of the `n` children.
pub fn triage(reply: &str, n: usize) -> Option<Triage> {
    let text = body(reply);
    let (choice, at, _) = action(&text)?;
    let choice = usize::try_from(choice).ok().filter(|&c| c < n)?;
    Some(Triage {
        reasoning: reasoning(&text, at),
        choice,
    })
}

/// MemWalker's leaf and QRMeM's reflection: `Action: -2` with an answer, or
/// `Action: -1` (the reasoning says why not).
pub fn judgement(reply: &str) -> Option<Judgement> {
    let text = body(reply);
    let (action, at, end) = action(&text)?;
    let reasoning = reasoning(&text, at);
    match action {
        -1 => Some(Judgement {
            reasoning,
            answer: None,
        }),
        -2 => {
            let after = &text[at..];
            // Without an "Answer:" label, what follows the action is the answer.
            let answer = ANSWER
                .find_iter(after)
                .last()
                .map(|m| unmark(&after[m.end()..]))
                .or_else(|| {
                    Some(unmark(
                        text[end..].trim_start_matches(|c: char| !c.is_alphanumeric()),
                    ))
                })
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| reasoning.clone());
            Some(Judgement {
                reasoning,
                answer: Some(answer),
            })
        }
        _ => None,
    }
}

/// ReadAgent's pagination: the label of the chosen break, as an index into the
/// passage's paragraphs; only labels that were offered count.
pub fn break_point(reply: &str, first_label: usize, candidates: &[usize]) -> Option<usize> {
    let text = body(reply);
    let label: usize = BREAK
        .captures(&text)
        .or_else(|| ANGLE.captures(&text))
        .and_then(|c| c[1].parse().ok())?;
    label
        .checked_sub(first_label)
        .filter(|index| candidates.contains(index))
}

/// ReadAgent-P: the page numbers asked for, among `known`, at most `max`. An
/// explicit "no need to look anything up" is an empty list.
pub fn pages(reply: &str, known: &[u32], max: usize) -> Option<Vec<u32>> {
    let text = body(reply);
    let listed = PAGE_BRACKETS
        .captures(&text)
        .or_else(|| PAGE_WORDS.captures(&text))
        .map(|c| c[1].to_string());
    let Some(listed) = listed else {
        return REFUSAL.is_match(&text).then(Vec::new);
    };
    let mut chosen = Vec::new();
    for number in NUMBER.find_iter(&listed) {
        let page: u32 = number.as_str().parse().ok()?;
        if !known.contains(&page) {
            return None;
        }
        if !chosen.contains(&page) {
            chosen.push(page);
        }
    }
    if chosen.is_empty() {
        return REFUSAL.is_match(&text).then(Vec::new);
    }
    chosen.truncate(max.max(1));
    Some(chosen)
}

/// ReadAgent-S: `Some(None)` for STOP, `Some(Some(page))` for a page not read yet.
pub fn next_page(reply: &str, known: &[u32], already_read: &[u32]) -> Option<Option<u32>> {
    let text = body(reply);
    if let Some(c) = PAGE_WORDS
        .captures(&text)
        .or_else(|| PAGE_BRACKETS.captures(&text))
    {
        let page: u32 = NUMBER.find(&c[1])?.as_str().parse().ok()?;
        return (known.contains(&page) && !already_read.contains(&page)).then_some(Some(page));
    }
    STOP.is_match(&text).then_some(None)
}

/// QRMeM entities: one per line (bullets, numbering and type tags removed) or a
/// comma-separated line; "None" is an empty list.
pub fn entities(reply: &str) -> Option<Vec<String>> {
    let text = body(reply);
    if text.is_empty() {
        return None;
    }
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| unmark(&BULLET.replace(l, "")))
        .map(|l| match l.split_once(':') {
            // "Entities: A, B" keeps what follows the label.
            Some((label, rest)) if label.to_lowercase().contains("entit") => {
                rest.trim().to_string()
            }
            _ => l,
        })
        .filter(|l| !l.is_empty() && !l.ends_with(':'))
        .collect();
    if lines.len() == 1 && lines[0].contains(',') {
        lines = lines[0].split(',').map(|s| s.trim().to_string()).collect();
    }
    let mut names: Vec<String> = Vec::new();
    for line in lines {
        let name = ENTITY_TYPE
            .replace(&line, "")
            .trim()
            .trim_end_matches('.')
            .to_string();
        if name.is_empty()
            || name.eq_ignore_ascii_case("none")
            || name.split_whitespace().count() > 8
        {
            continue;
        }
        if !names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            names.push(name);
        }
    }
    Some(names)
}

/// QRMeM relations: `(A; B): description` per line, also `A | B | description`
/// and `A - B: description`; only pairs of the given entities (matched without
/// regard to case) count. "None" is an empty list.
pub fn relations(reply: &str, entities: &[&str]) -> Option<Vec<Relation>> {
    let text = body(reply);
    if text.is_empty() {
        return None;
    }
    let canonical = |name: &str| -> Option<String> {
        let name = unmark(name);
        entities
            .iter()
            .find(|e| e.eq_ignore_ascii_case(name.trim()))
            .map(|e| e.to_string())
    };
    let mut found = Vec::new();
    let mut saw_relation_line = false;
    for line in text.lines() {
        let line = BULLET.replace(line, "");
        let line = line.trim();
        let Some(c) = RELATION.captures(line) else {
            continue;
        };
        saw_relation_line = true;
        if let (Some(source), Some(target)) = (canonical(&c[1]), canonical(&c[2])) {
            let description = unmark(&c[3]);
            if source != target && !description.is_empty() {
                found.push(Relation {
                    source,
                    target,
                    description,
                });
            }
        }
    }
    if found.is_empty() && !saw_relation_line && !REFUSAL.is_match(&text) {
        return None;
    }
    Some(found)
}

/// ILM-TR: `(Summary): …` and `(Surprise): …`; the surprise may be absent or "None".
pub fn fact_summary(reply: &str) -> Option<FactSummary> {
    let text = body(reply);
    let summary_at = SUMMARY_LABEL.find(&text)?;
    let rest = &text[summary_at.end()..];
    let label = SURPRISE_LINE
        .find_iter(rest)
        .last()
        .or_else(|| SURPRISE_LABEL.find(rest));
    let (summary, surprise) = match label {
        Some(m) => (&rest[..m.start()], unmark(&rest[m.end()..])),
        None => (rest, String::new()),
    };
    let summary = unmark(summary);
    if summary.is_empty() {
        return None;
    }
    let none = ["none", "none.", "n/a", "-"];
    let surprise = if none.contains(&surprise.to_lowercase().as_str()) {
        String::new()
    } else {
        surprise
    };
    Some(FactSummary { summary, surprise })
}

/// `reply` read by every parser above, with arguments that reach each one's
/// branches: what the property test and the `replies` fuzz target run.
pub fn read_with_every_parser(reply: &str) {
    let _ = free_text(reply);
    let _ = section_start(reply);
    let _ = same_entities(reply, 3);
    let _ = triage(reply, 4);
    let _ = judgement(reply);
    let _ = break_point(reply, 3, &[0, 2, 5]);
    let _ = pages(reply, &[1, 2, 7], 2);
    let _ = next_page(reply, &[1, 2, 7], &[2]);
    let _ = entities(reply);
    let _ = relations(reply, &["A", "B", "İ"]);
    let _ = fact_summary(reply);
}

#[cfg(test)]
mod tests {
    //! A corpus of replies as real models write them, well-formed and not.
    use super::*;

    #[test]
    fn free_text_loses_preambles_labels_and_fences_only() {
        let cases = [
            (
                "The author learned to paint.",
                Some("The author learned to paint."),
            ),
            (
                "Summary: The author learned to paint.",
                Some("The author learned to paint."),
            ),
            (
                "**Summary:** The author learned to paint.",
                Some("The author learned to paint."),
            ),
            (
                "Sure! Here is the shortened passage:\n\nThe author learned to paint.\n",
                Some("The author learned to paint."),
            ),
            (
                "```\nThe author learned to paint.\n```",
                Some("The author learned to paint."),
            ),
            ("shortened version: He painted.", Some("He painted.")),
            // A text that opens with a rule of underscores keeps it.
            (
                "Summary: _____ As with most things.",
                Some("_____ As with most things."),
            ),
            ("__Summary:__ He painted.", Some("He painted.")),
            (
                "Merged relation: A founded B in 2005.",
                Some("A founded B in 2005."),
            ),
            ("   \n", None),
            ("", None),
            ("Summary:", None),
        ];
        for (reply, expected) in cases {
            assert_eq!(free_text(reply).as_deref(), expected, "{reply:?}");
        }
    }

    #[test]
    fn triage_takes_the_action_in_any_dress() {
        let cases = [
            (
                "Reasoning: Summary 2 mentions the speech.\nAction: 2",
                Some(2),
            ),
            (
                "###################################\nReasoning: x\nAction: 1\n###################################",
                Some(1),
            ),
            ("reasoning: x\naction 0", Some(0)),
            ("**Reasoning:** x\n**Action:** 3", Some(3)),
            ("ACTION: 1.", Some(1)),
            (
                "Let me compare. Summary 0 is about bats.\n\nAction: 1\n\nI hope this helps!",
                Some(1),
            ),
            ("Action: 7", None),
            ("Action: seven", None),
            ("I think the second summary.", None),
            ("Action: -1", None),
        ];
        for (reply, expected) in cases {
            assert_eq!(triage(reply, 4).map(|t| t.choice), expected, "{reply:?}");
        }
        let t = triage("Reasoning: it is about painting\nAction: 0", 2).expect("parses");
        assert_eq!(t.reasoning, "it is about painting");
    }

    #[test]
    fn leaf_replies_answer_or_revert() {
        let answered =
            judgement("Reasoning: it says so\nAction: -2\nAnswer: At RISD.").expect("parses");
        assert_eq!(answered.answer.as_deref(), Some("At RISD."));
        assert_eq!(answered.reasoning, "it says so");
        let reverted = judgement("Reasoning: nothing about painting\nAction: -1").expect("parses");
        assert_eq!(reverted.answer, None);
        assert!(
            judgement("action -2\nfinal answer: yes")
                .is_some_and(|j| j.answer.as_deref() == Some("yes"))
        );
        assert_eq!(
            judgement("**Action**: -2 — the text names RISD")
                .and_then(|j| j.answer)
                .as_deref(),
            Some("the text names RISD")
        );
        assert!(judgement("Action: 3").is_none());
        assert!(judgement("I cannot tell.").is_none());
    }

    #[test]
    fn break_points_must_be_offered_labels() {
        let candidates = [2, 3, 5];
        let cases = [
            ("Break point: <12>\nBecause the scene changes.", Some(2)),
            ("break point: 13", Some(3)),
            ("**Break point:** <15>", Some(5)),
            ("I would break at <13> since the argument ends.", Some(3)),
            ("Break point: (15)", Some(5)),
            ("Break point: <14>", None),
            ("Break point: <3>", None),
            ("The chapter ends somewhere.", None),
        ];
        for (reply, expected) in cases {
            assert_eq!(break_point(reply, 10, &candidates), expected, "{reply:?}");
        }
    }

    #[test]
    fn page_lookups_in_brackets_or_words() {
        let known = [0, 1, 2, 7, 12, 15];
        let cases: [(&str, Option<Vec<u32>>); 9] = [
            (
                "I want to look up Page [7, 12] to find the date.",
                Some(vec![7, 12]),
            ),
            ("I want to look up Page [2] to ...", Some(vec![2])),
            ("I'd like to read pages 7 and 12.", Some(vec![7, 12])),
            ("page 15", Some(vec![15])),
            ("Pages [7,12,12,15]", Some(vec![7, 12])),
            ("I don't need to look up any pages.", Some(vec![])),
            ("Page [99]", None),
            ("Let me think about it.", None),
            ("PAGE [ 1 , 2 ]", Some(vec![1, 2])),
        ];
        for (reply, expected) in cases {
            assert_eq!(pages(reply, &known, 2), expected, "{reply:?}");
        }
    }

    #[test]
    fn same_entities_are_the_numbers_after_same() {
        let cases = [
            (
                "Same: 1, 3\nBoth describe the founder.",
                Some(vec![true, false, true]),
            ),
            (
                "**Same:** none - different people.",
                Some(vec![false, false, false]),
            ),
            ("SAME: 2", Some(vec![false, true, false])),
            (
                "Reasoning first.\nSame: [1,2,3]",
                Some(vec![true, true, true]),
            ),
            ("Same: 4", None),
            ("Passages 1 and 2.", None),
        ];
        for (reply, expected) in cases {
            assert_eq!(same_entities(reply, 3), expected, "{reply:?}");
        }
    }

    #[test]
    fn same_entities_reads_a_reply_whose_case_changes_its_length() {
        assert_eq!(same_entities("İİİİ Same: 1", 2), Some(vec![true, false]));
        assert_eq!(same_entities("ẞ SAME: 2", 2), Some(vec![false, true]));
    }

    /// Replies made of what breaks byte arithmetic: characters whose case
    /// changes their length (`İ`, `ẞ`, the Kelvin sign), multi-byte
    /// characters, and the labels and numbers the parsers look for.
    fn hostile_reply() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just("İ".to_string()),
            Just("ẞ".to_string()),
            Just("\u{212A}".to_string()),
            Just("ﬀ".to_string()),
            Just("Σ".to_string()),
            Just("\u{0130}same:".to_string()),
            Just("Same: ".to_string()),
            Just("Action: ".to_string()),
            Just("Answer:".to_string()),
            Just("Reasoning:".to_string()),
            Just("(Summary): ".to_string()),
            Just("(Surprise): ".to_string()),
            Just("Page [".to_string()),
            Just("pages ".to_string()),
            Just("Break point: <".to_string()),
            Just("**".to_string()),
            Just("```".to_string()),
            Just("\n".to_string()),
            Just("(A; B): ".to_string()),
            (-3i64..40).prop_map(|n| n.to_string()),
            any::<String>(),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Every reply parser is total: whatever a model says, it returns.
        #[test]
        fn no_reply_makes_a_parser_panic(reply in hostile_reply()) {
            read_with_every_parser(&reply);
        }
    }

    #[test]
    fn section_starts_are_yes_no_or_not_sure() {
        let cases = [
            ("Yes.", Some(Some(true))),
            ("**YES** - a new chapter begins.", Some(Some(true))),
            ("No, Page 2 continues the same argument.", Some(Some(false))),
            ("Answer: no", Some(Some(false))),
            ("Not sure; the pages could go either way.", Some(None)),
            ("not  sure", Some(None)),
            ("Nothing tells.", None),
            ("It continues the story.", None),
            ("", None),
        ];
        for (reply, expected) in cases {
            assert_eq!(section_start(reply), expected, "{reply:?}");
        }
    }

    #[test]
    fn sequential_lookups_read_a_new_page_or_stop() {
        let known = [0, 1, 2, 3];
        assert_eq!(next_page("Page 2", &known, &[1]), Some(Some(2)));
        assert_eq!(
            next_page("I would like to read page 3 again.", &known, &[]),
            Some(Some(3))
        );
        assert_eq!(next_page("STOP", &known, &[]), Some(None));
        assert_eq!(next_page("stop.", &known, &[]), Some(None));
        assert_eq!(next_page("Page 1", &known, &[1]), None);
        assert_eq!(next_page("Page 9", &known, &[]), None);
        assert_eq!(next_page("Hmm.", &known, &[]), None);
    }

    #[test]
    fn entities_from_lists_of_any_shape() {
        let cases: [(&str, Option<Vec<&str>>); 6] = [
            (
                "Entities:\n- Paul Graham\n- Y Combinator\n- Paul Graham",
                Some(vec!["Paul Graham", "Y Combinator"]),
            ),
            (
                "1. Paul Graham (PERSON)\n2. Cambridge (LOCATION)",
                Some(vec!["Paul Graham", "Cambridge"]),
            ),
            (
                "Entities: RISD, Florence, Accademia",
                Some(vec!["RISD", "Florence", "Accademia"]),
            ),
            (
                "**Entities:**\n* **Lisp**\n* Viaweb.",
                Some(vec!["Lisp", "Viaweb"]),
            ),
            ("None", Some(vec![])),
            ("", None),
        ];
        for (reply, expected) in cases {
            let expected = expected.map(|v| v.into_iter().map(str::to_string).collect::<Vec<_>>());
            assert_eq!(entities(reply), expected, "{reply:?}");
        }
    }

    #[test]
    fn relations_between_known_entities() {
        let known = ["Paul Graham", "Viaweb", "Yahoo"];
        let reply = "Relations:\n(Paul Graham; Viaweb): Paul Graham co-founded Viaweb.\n\
            - Viaweb | Yahoo | Yahoo bought Viaweb in 1998.\n\
            (paul graham; Mars): not an entity we gave.\n\
            Viaweb - Yahoo: acquired.";
        let found = relations(reply, &known).expect("parses");
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].source, "Paul Graham");
        assert_eq!(found[1].description, "Yahoo bought Viaweb in 1998.");
        assert_eq!(relations("None.", &known), Some(vec![]));
        assert_eq!(relations("They are related somehow.", &known), None);
    }

    #[test]
    fn summaries_with_surprises() {
        let f = fact_summary("(Summary): He learned to paint.\n(Surprise): The weather was cold.")
            .expect("parses");
        assert_eq!(
            (f.summary.as_str(), f.surprise.as_str()),
            ("He learned to paint.", "The weather was cold.")
        );
        let f = fact_summary("**Summary:** He painted.\n**Surprising Information:** None")
            .expect("parses");
        assert_eq!(
            (f.summary.as_str(), f.surprise.as_str()),
            ("He painted.", "")
        );
        assert!(fact_summary("(Summary): He painted.").is_some_and(|f| f.surprise.is_empty()));
        // The last label that opens a line, not the word inside the summary,
        // even where a wrapped line of the summary opens with it.
        for label in ["(Surprise):", "Surprise:"] {
            let f = fact_summary(&format!(
                "(Summary): A big surprise: a letter. I got a big\nsurprise: another.\n{label} It was late."
            ))
            .expect("parses");
            assert_eq!(
                (f.summary.as_str(), f.surprise.as_str()),
                (
                    "A big surprise: a letter. I got a big\nsurprise: another.",
                    "It was late."
                )
            );
        }
        // One line: the label found wherever it is.
        let f = fact_summary("(Summary): He painted. (Surprise): It rained.").expect("parses");
        assert_eq!(
            (f.summary.as_str(), f.surprise.as_str()),
            ("He painted.", "It rained.")
        );
        assert!(fact_summary("He painted.").is_none());
        assert!(fact_summary("(Summary):\n(Surprise): x").is_none());
    }
}
