//! ReadAgent pagination: pages of whole paragraphs, each ending at a break the
//! model chooses among the paragraph ends past `min_words` and within `max_words`.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::StreamExt;
use futures::future::join_all;

use crate::lexical::TermVector;
use crate::model::{CallContext, MemoryModel, StepResult};
use crate::text::{Span, paragraphs, sentences, word_count};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageConfig {
    pub min_words: usize,
    pub max_words: usize,
}

impl PageConfig {
    /// ReadAgent's Table 8 defaults.
    pub const DEFAULT: PageConfig = PageConfig {
        min_words: 280,
        max_words: 600,
    };

    pub fn validate(&self) -> Result<(), String> {
        if self.min_words == 0 || self.min_words >= self.max_words {
            return Err(format!(
                "page sizes need 0 < min words ({}) < max words ({})",
                self.min_words, self.max_words
            ));
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
/// a remote model that is a chain of calls as long as the document, so besides the
/// sequential walk, walks start speculatively from anchors every
/// `SPECULATION_SPACING` pages' worth of words. Every walk claims a page start
/// before asking for its break; a speculative walk stops at a start another walk
/// has claimed (same start, same prompt, same reply: the rest is that walk's),
/// and the sequential walk finds the replies of starts others claimed already
/// asked (the call cache shares them). The pages are exactly those of the
/// sequential walk, and so is the first error; speculation only costs the few
/// pages each anchor walks before it falls into step.
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
    let walker = Walker {
        text,
        units: &units,
        config,
        model,
        cx,
        found: Mutex::new(HashMap::new()),
    };
    let (confirmed, pages) = futures::channel::mpsc::unbounded::<Span>();
    let sequential = async {
        let mut start = 0;
        while start < units.len() {
            let known = *walker.lock().entry(start).or_insert(None);
            let end = match known {
                Some(end) => end,
                None => walker.page_end(start).await?,
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
    let speculative = async {
        if model.is_remote() {
            let anchors = walker.anchors();
            join_all(anchors[1..].iter().map(|&anchor| walker.speculate(anchor))).await;
        }
    };
    let then = &then;
    let followed = pages
        .map(|span| async move { (span, then(span).await) })
        .buffered(usize::MAX)
        .collect::<Vec<_>>();
    let (walked, (), followed): (StepResult<()>, (), Vec<_>) =
        futures::future::join3(sequential, speculative, followed).await;
    walked?;
    followed
        .into_iter()
        .map(|(span, result)| result.map(|t| (span, t)))
        .collect()
}

/// Pages' worth of words between speculative anchors.
const SPECULATION_SPACING: usize = 2;

struct Walker<'a> {
    text: &'a str,
    units: &'a [Span],
    config: &'a PageConfig,
    model: &'a dyn MemoryModel,
    cx: &'a CallContext,
    /// Page starts claimed by some walk (first unit → last unit once known).
    found: Mutex<HashMap<usize, Option<usize>>>,
}

impl Walker<'_> {
    /// Unit indices where speculative walks start: the first unit, then one every
    /// `SPECULATION_SPACING * max_words` words.
    fn anchors(&self) -> Vec<usize> {
        let spacing = SPECULATION_SPACING * self.config.max_words;
        let vectors: Vec<TermVector> = self
            .units
            .iter()
            .map(|u| TermVector::of(u.of(self.text)))
            .collect();
        // In each stretch of `spacing` words, start after the paragraph where the
        // vocabulary shifts most: where a reader, and so the true walk, most likely
        // breaks, so the speculative walk starts in step more often.
        let mut anchors = vec![0];
        let mut stretch: Vec<usize> = Vec::new();
        let mut words = 0;
        for (i, unit) in self.units.iter().enumerate() {
            words += word_count(unit.of(self.text));
            if i + 1 < self.units.len() {
                stretch.push(i);
            }
            if words >= spacing * anchors.len() && !stretch.is_empty() {
                let best = stretch
                    .iter()
                    .copied()
                    .min_by(|&a, &b| {
                        vectors[a]
                            .cosine(&vectors[a + 1])
                            .total_cmp(&vectors[b].cosine(&vectors[b + 1]))
                            .then(a.cmp(&b))
                    })
                    .expect("a non-empty stretch");
                anchors.push(best + 1);
                stretch.clear();
            }
        }
        anchors.dedup();
        anchors
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Option<usize>>> {
        self.found.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Walks from `anchor` until the end of the text, a failed step, or a page
    /// start another walk has claimed (from there on the walks would agree; two
    /// walks that met in step would otherwise go on side by side to the end).
    async fn speculate(&self, anchor: usize) {
        let mut start = anchor;
        while start < self.units.len() {
            if self.lock().insert(start, None).is_some() {
                return;
            }
            let Ok(end) = self.page_end(start).await else {
                return;
            };
            self.lock().insert(start, Some(end));
            start = end + 1;
        }
    }

    /// The last unit of the page that starts at unit `start`.
    async fn page_end(&self, start: usize) -> StepResult<usize> {
        let (text, units, config) = (self.text, self.units, self.config);
        if word_count(&text[units[start].start..]) <= config.max_words {
            return Ok(units.len() - 1);
        }
        // Candidate breaks: after each unit once the page holds min_words, while it
        // stays within max_words; at least one, so every page makes progress. Words
        // are counted on the page's text, as a reader would count them.
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
        // The longer the text still to paginate, the sooner this break should go.
        let remaining_kb = ((text.len() - units[start].start) / 1024) as u32;
        let last = start + candidates[candidates.len() - 1];
        let window: Vec<&str> = units[start..=(last + 1).min(units.len() - 1)]
            .iter()
            .map(|u| u.of(text))
            .collect();
        if candidates.len() == 1 {
            return Ok(start + candidates[0]);
        }
        let chosen = self
            .model
            .choose_break(&self.cx.chained(remaining_kb), &window, &candidates, start)
            .await?;
        Ok(start
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

    #[test]
    fn speculative_walks_give_exactly_the_sequential_pages() {
        let text: String = (0..900)
            .map(|i| {
                let words = 12 + (i * 7) % 23;
                let body = vec!["word"; words].join(" ");
                format!("Paragraph {i} {body}.\n\n")
            })
            .collect();
        let config = PageConfig {
            min_words: 60,
            max_words: 150,
        };
        let sequential = pages(&text, &config, false);
        assert!(sequential.len() > 60, "{} pages", sequential.len());
        assert_eq!(pages(&text, &config, true), sequential);
    }
}
