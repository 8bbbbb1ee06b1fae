//! ReadAgent's look-up (Lee et al. 2024): the gists of a document's pages are the
//! memory; the model picks the pages to read again in full, which are expanded in
//! place among the gists, and answers from that.

use memweave_operators::model::PageView;

use super::{Navigation, Navigator, Signal, Walked, navigator_over_context};
use crate::snapshot::Page;

/// Pages ReadAgent may look up when a request does not say.
const DEFAULT_MAX_PAGES: usize = 3;

/// How ReadAgent looks pages up: several at once (ReadAgent-P) or one at a
/// time until the model stops (ReadAgent-S).
#[derive(Debug, Clone, Copy)]
pub(super) enum LookUp {
    Parallel,
    Sequential,
}

/// ReadAgent: how it looks pages up, over the shared context.
pub(super) struct ReadAgent<'n, 'a> {
    nav: &'n mut Navigation<'a>,
    look_up: LookUp,
}

navigator_over_context!(ReadAgent);

impl<'n, 'a> ReadAgent<'n, 'a> {
    pub(super) fn over(nav: &'n mut Navigation<'a>, look_up: LookUp) -> Self {
        ReadAgent { nav, look_up }
    }
}

impl Navigator for ReadAgent<'_, '_> {
    async fn navigate(&mut self) -> Walked {
        match self.look_up {
            LookUp::Parallel => self.parallel().await,
            LookUp::Sequential => self.sequential().await,
        }
    }
}

impl ReadAgent<'_, '_> {
    /// ReadAgent reads one long document: the one whose gists match the question
    /// best (BM25), among those the request allows.
    async fn readagent_document(&mut self) -> Walked<Option<String>> {
        let (best, candidates) = self
            .snapshot
            .document_by_gists(&self.query, self.documents())
            .await?;
        let Some((doc_id, doc_score)) = best else {
            self.record(
                "no_answer",
                "",
                None,
                0.0,
                "no document's gists mention the question's terms".into(),
            );
            return Ok(None);
        };
        let title = self.title_of(&doc_id).await?;
        self.by(Signal::Text).record(
            "choose_document",
            &doc_id,
            None,
            doc_score,
            format!("\"{title}\": its gists match the question best of {candidates} documents"),
        );
        Ok(Some(doc_id))
    }

    fn max_pages(&self) -> usize {
        self.request
            .options
            .max_pages
            .unwrap_or(DEFAULT_MAX_PAGES)
            .max(1)
    }

    /// ReadAgent-P: the model names 1..k pages at once from the gists.
    async fn parallel(&mut self) -> Walked {
        let Some(doc_id) = self.readagent_document().await? else {
            return Ok(());
        };
        let pages = self.snapshot.pages_of(&doc_id).await?;
        let chosen = self
            .model
            .lookup_pages(
                &self.cx,
                &self.request.question,
                &memory(&pages, &[]),
                self.max_pages(),
            )
            .await?;
        for &number in &chosen {
            self.record_lookup(&pages, number, "chosen with the others at once");
        }
        self.answer_from_pages(&pages, &chosen).await
    }

    /// ReadAgent-S: one page at a time, the pages already read shown, until the
    /// model says STOP or k pages are read.
    async fn sequential(&mut self) -> Walked {
        let Some(doc_id) = self.readagent_document().await? else {
            return Ok(());
        };
        let pages = self.snapshot.pages_of(&doc_id).await?;
        let mut read: Vec<u32> = Vec::new();
        while read.len() < self.max_pages() {
            let next = self
                .model
                .lookup_next_page(
                    &self.cx,
                    &self.request.question,
                    &memory(&pages, &read),
                    &read,
                )
                .await?;
            let Some(number) = next else {
                self.recorder.depth = 1;
                self.by(Signal::Model).record(
                    "stop",
                    &doc_id,
                    None,
                    0.0,
                    format!("the model read enough after {} pages (STOP)", read.len()),
                );
                break;
            };
            read.push(number);
            self.record_lookup(&pages, number, &format!("look-up {}", read.len()));
        }
        self.answer_from_pages(&pages, &read).await
    }

    fn record_lookup(&mut self, pages: &[Page], number: u32, how: &str) {
        self.recorder.depth = 1;
        if let Some(page) = pages.iter().find(|p| p.row.ordinal == number) {
            let id = page.row.page_id.clone();
            self.by(Signal::Model).record(
                "lookup",
                &id,
                None,
                0.0,
                format!(
                    "page {number} of {}: {how}; expanded in place among the gists",
                    pages.len()
                ),
            );
        }
    }

    /// The gists with the pages read expanded in place, as the model answers from
    /// them; the pages read are the citation.
    async fn answer_from_pages(&mut self, pages: &[Page], read: &[u32]) -> Walked {
        let context = memory(pages, read)
            .iter()
            .map(|p| format!("<Page {}>\n{}", p.number, p.text))
            .collect::<Vec<_>>()
            .join("\n\n");
        let mut passages = Vec::new();
        for p in read
            .iter()
            .filter_map(|n| pages.iter().find(|p| p.row.ordinal == *n))
        {
            let row = &p.row;
            let (start, end) = (row.start_char, row.end_char);
            passages.push(
                self.passage(&row.doc_id, &row.page_id, &p.text, start, end)
                    .await?,
            );
        }
        self.answer_with_context(context, passages, "from the gists and the pages read")
            .await
    }
}

/// The gists, with the pages in `expanded` in full.
fn memory<'a>(pages: &'a [Page], expanded: &[u32]) -> Vec<PageView<'a>> {
    pages
        .iter()
        .map(|p| PageView {
            number: p.row.ordinal,
            text: if expanded.contains(&p.row.ordinal) {
                &p.text
            } else {
                p.gist()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{answer, memory, request, steps};
    use crate::request::Strategy;

    #[tokio::test]
    async fn the_document_is_chosen_by_its_gists_and_its_pages_looked_up() {
        let snapshot = memory().await;
        for strategy in [Strategy::ReadagentP, Strategy::ReadagentS] {
            let answer = answer(&snapshot, &request("What taught patience?", strategy)).await;
            let trace = steps(&answer);
            assert_eq!(trace[0], ("choose_document".into(), "paint".into()));
            assert!(
                trace.iter().any(|(action, _)| action == "lookup"),
                "{strategy:?}: {trace:?}"
            );
            assert!(answer.answered, "{strategy:?}");
            assert!(
                answer
                    .supporting
                    .iter()
                    .all(|p| p.doc_id == "paint" && p.title == "PAINT")
            );
        }
    }

    #[tokio::test]
    async fn no_document_is_read_when_no_gist_shares_a_word() {
        let snapshot = memory().await;
        let answer = answer(
            &snapshot,
            &request("Quantum chromodynamics?", Strategy::ReadagentP),
        )
        .await;
        assert!(!answer.answered);
        assert_eq!(answer.trace.len(), 1);
        assert_eq!(answer.trace[0].action, "no_answer");
        assert_eq!(answer.usage.model_calls, 0);
    }
}
