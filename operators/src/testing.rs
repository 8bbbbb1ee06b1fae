//! A stand-in model for the unit tests of tree grouping and pagination: answers
//! every step from the text's first sentence, so structure can be tested without a
//! backend (the real ones live in `memweave-llm`).

use async_trait::async_trait;

use crate::extract::sentence_list;
use crate::model::*;

#[derive(Debug, Default)]
pub struct FirstSentence {
    remote: bool,
}

impl FirstSentence {
    pub fn remote(remote: bool) -> Self {
        FirstSentence { remote }
    }
}

fn first(text: &str) -> String {
    sentence_list(text)
        .first()
        .map_or_else(String::new, |s| s.to_string())
}

#[async_trait]
impl MemoryModel for FirstSentence {
    fn backend(&self) -> &str {
        "first-sentence"
    }
    fn is_remote(&self) -> bool {
        self.remote
    }
    async fn summarize_segment(&self, _: &CallContext, segment: &str) -> StepResult<String> {
        Ok(first(segment))
    }
    async fn compress_summaries(&self, _: &CallContext, s: &[&str]) -> StepResult<String> {
        Ok(format!("compressed: {}", first(s[0])))
    }
    async fn triage(&self, _: &CallContext, _: &str, _: &[&str]) -> StepResult<Triage> {
        Ok(Triage {
            reasoning: String::new(),
            choice: 0,
        })
    }
    async fn read_leaf(&self, _: &CallContext, _: &str, _: &str, _: &str) -> StepResult<Judgement> {
        Ok(Judgement {
            reasoning: String::new(),
            answer: None,
        })
    }
    /// The candidate after the longest unit: depends on the window, like a model would.
    async fn choose_break(
        &self,
        _: &CallContext,
        units: &[&str],
        candidates: &[usize],
        _: usize,
    ) -> StepResult<usize> {
        Ok(*candidates
            .iter()
            .max_by_key(|&&c| (units[c].len(), std::cmp::Reverse(c)))
            .expect("at least one candidate"))
    }
    async fn gist_page(&self, _: &CallContext, page: &str) -> StepResult<String> {
        Ok(first(page))
    }
    async fn lookup_pages(
        &self,
        _: &CallContext,
        _: &str,
        m: &[PageView<'_>],
        _: usize,
    ) -> StepResult<Vec<u32>> {
        Ok(m.iter().take(1).map(|p| p.number).collect())
    }
    async fn lookup_next_page(
        &self,
        _: &CallContext,
        _: &str,
        _: &[PageView<'_>],
        _: &[u32],
    ) -> StepResult<Option<u32>> {
        Ok(None)
    }
    async fn extract_entities(&self, _: &CallContext, _: &str, _: &str) -> StepResult<Vec<String>> {
        Ok(Vec::new())
    }
    async fn extract_relations(
        &self,
        _: &CallContext,
        _: &str,
        _: &[&str],
    ) -> StepResult<Vec<Relation>> {
        Ok(Vec::new())
    }
    async fn merge_relations(
        &self,
        _: &CallContext,
        _: &str,
        a: RelationEvidence<'_>,
        _: RelationEvidence<'_>,
    ) -> StepResult<String> {
        Ok(a.relation.to_string())
    }
    async fn judge_answerable(&self, _: &CallContext, _: &str, _: &str) -> StepResult<Judgement> {
        Ok(Judgement {
            reasoning: String::new(),
            answer: None,
        })
    }
    async fn summarize_with_facts(&self, _: &CallContext, chunk: &str) -> StepResult<FactSummary> {
        Ok(FactSummary {
            summary: first(chunk),
            surprise: String::new(),
        })
    }
    async fn update_memory(
        &self,
        _: &CallContext,
        _: &str,
        r: &str,
        _: &str,
    ) -> StepResult<String> {
        Ok(first(r))
    }
    async fn answer(&self, _: &CallContext, _: &str, context: &str) -> StepResult<String> {
        Ok(first(context))
    }
}
