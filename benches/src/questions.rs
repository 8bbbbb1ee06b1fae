//! Question sets with known answer passages, over corpora the project reads
//! but did not write: each question's answer sits in one passage, named by
//! phrases quoted from it (any one of them marks the passage; some facts are
//! stated in more than one place). A strategy finds a question when a passage
//! its answer cites holds one of the phrases.

/// A question and the phrases that mark its answer passage (lower case,
/// whitespace collapsed, as [`cites`] compares them).
#[derive(Debug, Clone, Copy)]
pub struct Question {
    pub question: &'static str,
    pub answer_phrases: &'static [&'static str],
}

const fn q(question: &'static str, answer_phrases: &'static [&'static str]) -> Question {
    Question {
        question,
        answer_phrases,
    }
}

/// Over pg-essays (../shared/data/pg-essays).
pub const PG_ESSAYS: &[Question] = &[
    q(
        "What language was the Viaweb ordering system written in?",
        &["the ordering system, written in c"],
    ),
    q(
        "How many of the stories in traditional media come from PR firms?",
        &["more than half probably come from pr firms"],
    ),
    q(
        "What hypothetical language explains why programmers are satisfied with their favorite language?",
        &["hypothetical language called blub"],
    ),
    q(
        "How much of the company do VCs want in a series A round?",
        &["a third of your company"],
    ),
    q(
        "How much did a single VC fund invest in a series A round?",
        &["invested $1-5 million"],
    ),
    q(
        "Who made a calculator to find out whether a startup is default alive?",
        &["trevor blackwell has made a handy calculator"],
    ),
    q(
        "Which nonprofit launched an NFT whose sale pays to save lives?",
        &["noora health"],
    ),
    q(
        "What has harmed Apple's reputation with programmers?",
        &["harmed their reputation with programmers"],
    ),
    q(
        "Is wealth the same thing as money?",
        &["wealth is not money"],
    ),
    q(
        "Why does the author like hiking?",
        &["the longer i have to think without interruption"],
    ),
    q(
        "What keeps hackers from working on hard problems?",
        &["the mere prospect of being interrupted"],
    ),
    q(
        "Where was the talk on good taste given?",
        &["derived from a talk at the cambridge union"],
    ),
    q(
        "What policy that costs nothing would increase the number of startups?",
        &["establish a new class of visa for startup founders"],
    ),
    q(
        "Which towns become startup hubs?",
        &["if and only if they have both rich people and nerds"],
    ),
    q(
        "Who was in the first batch of Y Combinator?",
        &["that first batch included reddit"],
    ),
    q(
        "Why take earplugs to an island off the coast of Maine?",
        &["earplugs on a trip to an island"],
    ),
];

/// Over the Python 3.11 documentation's sources (Debian's python3.11-doc).
pub const PYTHON_DOCS: &[Question] = &[
    q(
        "What does zip do when the input iterables have different lengths?",
        &["stops when the shortest iterable is exhausted"],
    ),
    q(
        "What is the default maxsize of the lru_cache decorator?",
        &["default value of 128", "lru_cache(maxsize=128"],
    ),
    q(
        "Why is the assignment expression operator called the walrus operator?",
        &["eyes and tusks of a walrus"],
    ),
    q(
        "What must a thread hold before it can safely access Python objects?",
        &["before it can safely access python objects"],
    ),
    q(
        "When are the default values of function arguments created?",
        &[
            "default values are created exactly once",
            "default values are calculated, once, when the function is defined",
            "default values are evaluated at the point of function definition",
        ],
    ),
    q(
        "When is the else clause of a loop executed?",
        &["it is executed when the loop terminates through exhaustion"],
    ),
    q("What sorting algorithm does Python use?", &["timsort"]),
    q(
        "How do I read the Zen of Python?",
        &[
            "the zen of python, by tim peters",
            "typing \"``import this``\"",
        ],
    ),
    q(
        "How do I set the maximum depth of the interpreter stack?",
        &[
            "set the maximum depth of the python interpreter stack",
            "maximum recursion depth can be read and modified",
        ],
    ),
    q(
        "What does the nonlocal statement do?",
        &[
            "statement causes corresponding names to refer to previously bound variables",
            "statement causes the listed identifiers to refer to previously bound variables",
        ],
    ),
    q(
        "Do dictionaries keep the order keys were inserted in?",
        &["dictionaries preserve insertion order"],
    ),
    q(
        "How does __slots__ save memory?",
        &[
            "saves memory by pre-declaring space for instance attributes",
            "reserves space for the declared variables",
        ],
    ),
    q(
        "Why does adding 0.1 three times not give exactly 0.3?",
        &["summing three values of 0.1 may not yield exactly 0.3"],
    ),
    q(
        "What is a virtual environment?",
        &["a self-contained directory tree that contains a python installation"],
    ),
    q(
        "Is it safe to unpickle data from an untrusted source?",
        &["never unpickle data that could have come from an untrusted source"],
    ),
];

/// Whether any of `passages` (the texts an answer cites) holds one of `phrases`,
/// compared in lower case with whitespace collapsed (sources wrap lines).
pub fn cites<'a>(passages: impl IntoIterator<Item = &'a str>, phrases: &[&str]) -> bool {
    let flatten = |text: &str| {
        text.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    let cited: Vec<String> = passages.into_iter().map(flatten).collect();
    phrases
        .iter()
        .any(|phrase| cited.iter().any(|text| text.contains(&flatten(phrase))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phrase_is_found_across_a_line_break_in_any_case() {
        let passages = ["Then the Ordering system,\n  written in C, handled orders."];
        assert!(cites(passages, &["the ordering system, written in c"]));
        assert!(!cites(passages, &["written in lisp"]));
    }
}
