//! ReadAgent pagination: pages of whole paragraphs, each ending at a break the
//! model chooses among the paragraph ends past `min_words` and within `max_words`.

use crate::config::BuildConfigError;
use std::collections::HashMap;
use std::sync::Mutex;

use futures::StreamExt;

use crate::lexical::{TermVector, sharpest_shift};
use crate::model::{CallContext, MemoryModel, StepResult};
use crate::text::{Span, paragraphs, sentences, word_count};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageConfig {
    pub min_words: usize,
    pub max_words: usize,
    /// When a document's gists together exceed this many words, neighbouring pages
    /// that the model says do not start a new section are merged and gisted again
    /// (ReadAgent appendix I, for texts whose gists outgrow the context); 0 never
    /// merges.
    pub gist_word_budget: usize,
}

impl PageConfig {
    /// ReadAgent's Table 8 defaults.
    pub const DEFAULT: PageConfig = PageConfig {
        min_words: 280,
        max_words: 600,
        gist_word_budget: 20_000,
    };

    pub fn validate(&self) -> Result<(), BuildConfigError> {
        if self.min_words == 0 || self.min_words >= self.max_words {
            return Err(BuildConfigError::PageWords {
                min: self.min_words,
                max: self.max_words,
            });
        }
        Ok(())
    }
}

impl Default for PageConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Pages of `text`, as byte spans that tile it.
pub async fn paginate(
    text: &str,
    config: &PageConfig,
    model: &dyn MemoryModel,
    cx: &CallContext,
) -> StepResult<Vec<Span>> {
    let pages = paginate_then(text, config, model, cx, |_| async { Ok(()) }).await?;
    Ok(pages.into_iter().map(|(span, ())| span).collect())
}

/// Pages of `text`, each with what `then` makes of it; `then` starts on a page as
/// soon as the page is certain, while later pages are still being found.
///
/// ReadAgent paginates sequentially: each page starts where the last one ended. On
/// a remote model that is a chain of calls as long as the document, so it runs the
/// way speculative decoding runs a large model: a cheap draft (the break where the
/// vocabulary shifts most, `sharpest_shift`) predicts the page starts, and the
/// page at every predicted start is asked for at once. The sequential walk from the
/// first unit finds those replies (the call cache shares a call still in flight):
/// where the model agrees with the draft it races ahead; where it parts from it,
/// the draft starts again from the true page start, `REDRAFT_PAGES` ahead or until
/// it falls back in step with a start already asked. The pages are exactly those
/// of the sequential walk, and so is the first error; speculation costs only the
/// pages asked at starts off the model's path (measured by the `pagination` bench).
pub async fn paginate_then<T, F, Fut>(
    text: &str,
    config: &PageConfig,
    model: &dyn MemoryModel,
    cx: &CallContext,
    then: F,
) -> StepResult<Vec<(Span, T)>>
where
    F: Fn(Span) -> Fut,
    Fut: Future<Output = StepResult<T>>,
{
    let units = units(text, config);
    if units.is_empty() {
        return Ok(Vec::new());
    }
    let (spawn, mut spawned) = futures::channel::mpsc::unbounded::<usize>();
    let walker = Walker {
        text,
        units: &units,
        config,
        model,
        cx,
        found: Mutex::new(HashMap::new()),
        draft: model.is_remote().then(|| Draft {
            vectors: units.iter().map(|u| TermVector::of(u.of(text))).collect(),
            spawn,
        }),
    };
    walker.redraft(0, usize::MAX);
    let (confirmed, pages) = futures::channel::mpsc::unbounded::<Span>();
    let sequential = async {
        let mut start = 0;
        while start < units.len() {
            let known = *walker.lock().entry(start).or_insert(None);
            let end = match known {
                Some(end) => end,
                None => {
                    walker.redraft(start, REDRAFT_PAGES);
                    walker.page_end(start).await?
                }
            };
            walker.lock().insert(start, Some(end));
            // The receiver lives until every page is followed.
            let _ = confirmed.unbounded_send(Span {
                start: units[start].start,
                end: units[end].end,
            });
            start = end + 1;
        }
        drop(confirmed);
        Ok(())
    };
    let then = &then;
    let followed = pages
        .map(|span| async move { (span, then(span).await) })
        .buffered(usize::MAX)
        .collect::<Vec<_>>();
    // Drafted pages are asked for until the sequential walk is done (what they would
    // still ask then is not needed), or at once not at all on a local model.
    let speculation = async {
        let mut asking = futures::stream::FuturesUnordered::new();
        loop {
            // New asks first, so the drafted pages all go out together.
            futures::select_biased! {
                start = spawned.select_next_some() => asking.push(walker.speculate(start)),
                () = asking.select_next_some() => {}
                complete => break,
            }
        }
    };
    let walked_and_followed = futures::future::join(sequential, followed);
    futures::pin_mut!(walked_and_followed, speculation);
    let (walked, followed): (StepResult<()>, Vec<_>) =
        match futures::future::select(walked_and_followed, speculation).await {
            futures::future::Either::Left((done, _)) => done,
            futures::future::Either::Right(((), rest)) => rest.await,
        };
    walked?;
    followed
        .into_iter()
        .map(|(span, result)| result.map(|t| (span, t)))
        .collect()
}

/// The number of a window's first paragraph in the labels `choose_break` shows.
/// Labels count within the window, not the document, so a window's prompt
/// depends only on its text: after an edit, the pages past it that fall back in
/// step with the old breaks are asked the same prompts and answered from the
/// call cache, instead of every later label shifting by the paragraphs inserted.
const FIRST_LABEL: usize = 1;

/// Words the model is shown before the first place a page may end: enough to
/// tell what the candidates' paragraphs go on from.
const LEAD_WORDS: usize = 100;

/// Pages drafted ahead of the sequential walk each time it leaves the draft: more
/// shortens the chain when the model mostly agrees, and costs more when it does not.
const REDRAFT_PAGES: usize = 8;

struct Walker<'a> {
    text: &'a str,
    units: &'a [Span],
    config: &'a PageConfig,
    model: &'a dyn MemoryModel,
    cx: &'a CallContext,
    /// Page starts claimed by the sequential walk or the draft (first unit → last
    /// unit once known).
    found: Mutex<HashMap<usize, Option<usize>>>,
    /// Only for a remote model: a local one is better served by no extra work.
    draft: Option<Draft>,
}

struct Draft {
    /// Each unit's terms, for `sharpest_shift`.
    vectors: Vec<TermVector>,
    /// Drafted page starts to ask for.
    spawn: futures::channel::mpsc::UnboundedSender<usize>,
}

/// Where the page that starts at a unit may end.
enum Break {
    /// The rest of the text fits on the page, or only one break is allowed.
    Forced(usize),
    /// The units the model is shown, `first..=shown` (from [`LEAD_WORDS`] before
    /// the first candidate to one past the last, for context), and the candidate
    /// last units as offsets from `first` (at least two).
    Choice {
        first: usize,
        candidates: Vec<usize>,
        shown: usize,
    },
}

impl Walker<'_> {
    /// Claims the next `pages` drafted page starts after `start` and asks for their
    /// pages, until one is already claimed (the draft is back in step with what was
    /// asked) or the text ends.
    fn redraft(&self, mut start: usize, pages: usize) {
        let Some(draft) = &self.draft else {
            return;
        };
        for _ in 0..pages {
            start = 1 + match self.break_at(start) {
                Break::Forced(end) => end,
                Break::Choice {
                    first,
                    candidates,
                    shown,
                } => {
                    first
                        + sharpest_shift(&draft.vectors[first..=shown], &candidates)
                            .unwrap_or(candidates[candidates.len() - 1])
                }
            };
            if start >= self.units.len() || self.lock().insert(start, None).is_some() {
                return;
            }
            // The receiver lives as long as the speculation it feeds.
            let _ = draft.spawn.unbounded_send(start);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Option<usize>>> {
        self.found.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for the page that starts at `start`, claimed for it by the draft. Only
    /// that one page: if the model parts from the draft there, the sequential walk
    /// drafts again from the true start once it gets there.
    async fn speculate(&self, start: usize) {
        if let Ok(end) = self.page_end(start).await {
            self.lock().insert(start, Some(end));
        }
    }

    /// Where the page that starts at unit `start` may end. Candidate breaks: after
    /// each unit once the page holds min_words, while it stays within max_words; at
    /// least one, so every page makes progress. Words are counted on the page's
    /// text, as a reader would count them. The model is shown the candidates'
    /// stretch and the [`LEAD_WORDS`] before it, not the page's opening: that was
    /// past the break of the window before, which showed it already.
    fn break_at(&self, start: usize) -> Break {
        let (text, units, config) = (self.text, self.units, self.config);
        if word_count(&text[units[start].start..]) <= config.max_words {
            return Break::Forced(units.len() - 1);
        }
        let mut candidates = Vec::new();
        for i in start..units.len() {
            let total = word_count(&text[units[start].start..units[i].end]);
            if total > config.max_words && !candidates.is_empty() {
                break;
            }
            if total >= config.min_words || total > config.max_words {
                candidates.push(i - start);
            }
            if total > config.max_words {
                break;
            }
        }
        if candidates.len() == 1 {
            return Break::Forced(start + candidates[0]);
        }
        let shown = (start + candidates[candidates.len() - 1] + 1).min(units.len() - 1);
        let first_break = start + candidates[0];
        let mut first = first_break;
        while first > start
            && word_count(&text[units[first].start..units[first_break].end]) < LEAD_WORDS
        {
            first -= 1;
        }
        let candidates = candidates.iter().map(|c| start + c - first).collect();
        Break::Choice {
            first,
            candidates,
            shown,
        }
    }

    /// The last unit of the page that starts at unit `start`.
    async fn page_end(&self, start: usize) -> StepResult<usize> {
        let (first, candidates, shown) = match self.break_at(start) {
            Break::Forced(end) => return Ok(end),
            Break::Choice {
                first,
                candidates,
                shown,
            } => (first, candidates, shown),
        };
        let window: Vec<&str> = self.units[first..=shown]
            .iter()
            .map(|u| u.of(self.text))
            .collect();
        // The longer the text still to paginate, the sooner this break should go.
        let remaining_kb = ((self.text.len() - self.units[start].start) / 1024) as u32;
        let chosen = self
            .model
            .choose_break(
                &self.cx.chained(remaining_kb),
                &window,
                &candidates,
                FIRST_LABEL,
            )
            .await?;
        Ok(first
            + if candidates.contains(&chosen) {
                chosen
            } else {
                candidates[0]
            })
    }
}

/// Paragraphs, with any paragraph longer than `max_words - min_words` split into
/// sentences: then the first break past `min_words` always lands within `max_words`.
fn units(text: &str, config: &PageConfig) -> Vec<Span> {
    let mut units = Vec::new();
    for paragraph in paragraphs(text) {
        if word_count(paragraph.of(text)) <= config.max_words - config.min_words {
            units.push(paragraph);
            continue;
        }
        let body = paragraph.of(text);
        for sentence in sentences(body) {
            units.push(Span {
                start: paragraph.start + sentence.start,
                end: paragraph.start + sentence.end,
            });
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FirstSentence;

    fn pages(text: &str, config: &PageConfig, remote: bool) -> Vec<Span> {
        let model = FirstSentence::remote(remote);
        let cx = CallContext::build("readagent", "d");
        futures::executor::block_on(paginate(text, config, &model, &cx)).expect("the stub answers")
    }

    #[test]
    fn pages_tile_the_text_and_keep_to_the_bounds() {
        let text: String = (0..120)
            .map(|i| format!("Paragraph {i} speaks of subject {} in twenty odd words, give or take a few more words here.\n\n", i / 10))
            .collect();
        let config = PageConfig {
            min_words: 60,
            max_words: 120,
            gist_word_budget: 0,
        };
        let pages = pages(&text, &config, false);
        assert_eq!(pages[0].start, 0);
        assert_eq!(pages.last().unwrap().end, text.len());
        for pair in pages.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        for page in &pages[..pages.len() - 1] {
            let words = word_count(page.of(&text));
            assert!((60..=120).contains(&words), "{words} words");
        }
    }

    #[test]
    fn a_short_text_is_one_page() {
        let text = "Just a few words.";
        let pages = pages(text, &PageConfig::DEFAULT, false);
        assert_eq!(
            pages,
            vec![Span {
                start: 0,
                end: text.len()
            }]
        );
    }

    /// Pages of 60 to 150 words, so a few hundred paragraphs make dozens of pages.
    const SMALL_PAGES: PageConfig = PageConfig {
        min_words: 60,
        max_words: 150,
        gist_word_budget: 0,
    };

    fn numbered_paragraphs() -> String {
        (0..900)
            .map(|i| {
                let words = 12 + (i * 7) % 23;
                let body = vec!["word"; words].join(" ");
                format!("Paragraph {i} {body} topic{}.\n\n", i / 3)
            })
            .collect()
    }

    #[test]
    fn a_model_that_agrees_with_the_draft_is_asked_only_for_pages_it_needs() {
        let text = numbered_paragraphs();
        let config = SMALL_PAGES;
        let cx = CallContext::build("readagent", "d");
        let run = |remote: bool| {
            let model = FirstSentence::agreeing_with_draft(remote);
            let pages = futures::executor::block_on(paginate(&text, &config, &model, &cx))
                .expect("the stub answers");
            (pages, model.breaks_asked(), model.peak_breaks_in_flight())
        };
        let (sequential, mut needed, _) = run(false);
        needed.sort_unstable();
        let (drafted, mut asked, peak) = run(true);
        // All the drafted pages were asked for at once, not one after the other.
        assert!(peak > needed.len() / 2, "{peak} of {}", needed.len());
        assert!(sequential.len() > 60, "{} pages", sequential.len());
        assert_eq!(drafted, sequential);
        // The sequential walk may ask again for a page still in flight: the call
        // cache sends such a call once.
        asked.sort_unstable();
        asked.dedup();
        assert_eq!(
            asked, needed,
            "speculation asked for pages the walk did not need"
        );
    }

    #[test]
    fn speculation_gives_exactly_the_sequential_pages_when_the_model_disagrees() {
        let text = numbered_paragraphs();
        let config = SMALL_PAGES;
        let sequential = pages(&text, &config, false);
        assert!(sequential.len() > 60, "{} pages", sequential.len());
        let model = FirstSentence::remote(true);
        let cx = CallContext::build("readagent", "d");
        let speculated = futures::executor::block_on(paginate(&text, &config, &model, &cx))
            .expect("the stub answers");
        assert_eq!(speculated, sequential);
        // It did speculate, and some guesses were wrong: more pages asked than needed.
        assert!(
            model.breaks_asked().len() > sequential.len(),
            "{}",
            model.breaks_asked().len()
        );
    }

    /// A paragraph inserted mid-way moves the breaks after it until the walk
    /// falls back in step with the old ones; from there on every window is one
    /// the model was already shown, prompt for prompt.
    #[test]
    fn an_insertion_asks_anew_only_until_the_pages_fall_back_in_step() {
        let text = numbered_paragraphs();
        let at = text.len() / 2 + text[text.len() / 2..].find("\n\n").unwrap() + 2;
        let edited = format!(
            "{}An inserted paragraph of a few more words than most, to move the breaks after it.\n\n{}",
            &text[..at],
            &text[at..]
        );
        let cx = CallContext::build("readagent", "d");
        let asked = |text: &str| {
            let model = FirstSentence::default();
            let pages = futures::executor::block_on(paginate(text, &SMALL_PAGES, &model, &cx))
                .expect("the stub answers");
            (pages, model.breaks_asked())
        };
        let (before, shown_before) = asked(&text);
        let (after, shown_after) = asked(&edited);
        let shown_before: std::collections::HashSet<_> = shown_before.into_iter().collect();
        let anew = shown_after
            .iter()
            .filter(|w| !shown_before.contains(*w))
            .count();
        let pages_past = after.iter().filter(|p| p.start >= at).count();
        assert!(pages_past > 30, "{pages_past} pages past the insertion");
        assert!(
            anew <= 4,
            "{anew} of {} windows asked anew",
            shown_after.len()
        );
        let last = |pages: &[Span], text: &str| pages.last().unwrap().of(text).to_string();
        assert_eq!(last(&after, &edited), last(&before, &text));
    }

    /// A window opens LEAD_WORDS before its first candidate, not at the page's
    /// start: the page's opening was shown by the window before.
    #[test]
    fn a_window_shows_the_candidates_and_a_lead_not_the_whole_page() {
        let text = numbered_paragraphs();
        let config = PageConfig::DEFAULT;
        let model = FirstSentence::default();
        let cx = CallContext::build("readagent", "d");
        let pages = futures::executor::block_on(paginate(&text, &config, &model, &cx))
            .expect("the stub answers");
        assert!(pages.len() > 20, "{} pages", pages.len());
        let longest = paragraphs(&text)
            .iter()
            .map(|p| word_count(p.of(&text)))
            .max()
            .unwrap();
        let shown = model.breaks_asked();
        assert!(shown.len() + 1 >= pages.len());
        for (window, _) in &shown {
            let words: usize = window.iter().map(|u| word_count(u)).sum();
            assert!(
                words <= config.max_words - config.min_words + LEAD_WORDS + 2 * longest,
                "{words} words shown"
            );
        }
    }
}
