//! The memory model both backends share: every step is rendered from its paper's
//! template, answered through the call cache, and read by the same parser; a reply
//! that does not parse is asked again at temperature 0.7, up to three tries.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use memweave_operators::model::*;
use memweave_operators::tokens::count_tokens;
use memweave_schemas::{LlmCallRow, now_micros};

use crate::cache::{CallCache, CallParams, call_key};
use crate::extractive::{self, EXTRACTIVE_MODEL};
use crate::parse;
use crate::pool::PoolClient;
use crate::prompts::{Prompt, Prompts};
use crate::step::{PageText, Step};

/// Temperatures of the three tries of a step (QRMeM: 0, then 0.7 on a parse failure).
const TEMPERATURES: [f32; 3] = [0.0, 0.7, 0.7];

/// Where replies come from.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Offline and deterministic: extractive replies in the papers' formats.
    Extractive,
    /// An OpenAI-compatible pool.
    OpenAi(Arc<PoolClient>),
}

/// A [`MemoryModel`] over a backend, the prompt templates and the call cache.
#[derive(Debug, Clone)]
pub struct TaskModel {
    backend: Backend,
    prompts: Arc<Prompts>,
    cache: Arc<CallCache>,
    /// Output budget of a reply, in tokens.
    max_tokens: u32,
}

/// Default output budget of a reply.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

impl TaskModel {
    pub fn new(
        backend: Backend,
        prompts: Arc<Prompts>,
        cache: Arc<CallCache>,
        max_tokens: u32,
    ) -> Self {
        TaskModel {
            backend,
            prompts,
            cache,
            max_tokens,
        }
    }

    /// The extractive backend with built-in prompts and an in-memory cache.
    pub fn extractive() -> Self {
        Self::new(
            Backend::Extractive,
            Arc::new(Prompts::default()),
            CallCache::in_memory(),
            DEFAULT_MAX_TOKENS,
        )
    }

    pub fn cache(&self) -> &Arc<CallCache> {
        &self.cache
    }

    pub fn pool(&self) -> Option<&Arc<PoolClient>> {
        match &self.backend {
            Backend::OpenAi(pool) => Some(pool),
            Backend::Extractive => None,
        }
    }

    fn model_name(&self) -> &str {
        match &self.backend {
            Backend::Extractive => EXTRACTIVE_MODEL,
            Backend::OpenAi(pool) => pool.model(),
        }
    }

    /// Runs `step`: up to three tries, each answered from the cache or the backend,
    /// until `read` accepts a reply.
    async fn run<T>(
        &self,
        cx: &CallContext,
        step: Step,
        read: impl Fn(&str) -> Option<T>,
    ) -> StepResult<T> {
        let task = step.task().name();
        let prompt = self.prompts.render(&step);
        let mut last = String::new();
        for (attempt, temperature) in TEMPERATURES.into_iter().enumerate() {
            let params = CallParams {
                temperature,
                max_tokens: self.max_tokens,
                attempt: attempt as u32,
            };
            let key = call_key(self.backend(), self.model_name(), task, &prompt, &params);
            let reply = self
                .cache
                .reply(cx, &key, task, || {
                    self.call(cx, &step, &prompt, params, key.clone())
                })
                .await?;
            if let Some(value) = read(&reply) {
                return Ok(value);
            }
            tracing::debug!(task, attempt, "unparsable reply: {reply:?}");
            last = reply;
        }
        Err(StepError::Unparsable {
            task: task.to_string(),
            last_reply: last,
        })
    }

    /// One call to the backend, as its ledger row.
    async fn call(
        &self,
        cx: &CallContext,
        step: &Step,
        prompt: &Prompt,
        params: CallParams,
        key: String,
    ) -> StepResult<LlmCallRow> {
        let started = Instant::now();
        let text = prompt.text();
        let (reply, tokens_in, tokens_out) = match &self.backend {
            Backend::Extractive => {
                // Answer the step as the prompt shows it (lists one item per line), so
                // the reply is the one a model reading this prompt would get from the
                // simulator.
                let shown = Step::from_vars(
                    step.task(),
                    &step
                        .vars()
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )
                .unwrap_or_else(|| step.clone());
                let reply = extractive::reply(&shown);
                let tokens = (count_tokens(&text) as u32, count_tokens(&reply) as u32);
                (reply, tokens.0, tokens.1)
            }
            Backend::OpenAi(pool) => {
                let completion = pool
                    .chat(prompt, params.temperature, params.max_tokens, cx.priority)
                    .await
                    .map_err(|e| StepError::Unavailable {
                        task: step.task().name().to_string(),
                        message: e.to_string(),
                    })?;
                (
                    completion.content,
                    completion.tokens_in,
                    completion.tokens_out,
                )
            }
        };
        Ok(LlmCallRow {
            call_key: key,
            backend: self.backend().to_string(),
            model: self.model_name().to_string(),
            task: step.task().name().to_string(),
            stage: cx.stage.to_string(),
            doc_id: cx.doc_id.clone(),
            inputs: text,
            reply,
            tokens_in,
            tokens_out,
            latency_ms: started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32,
            created_at: now_micros(),
        })
    }
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn page_texts(memory: &[PageView<'_>]) -> Vec<PageText> {
    memory
        .iter()
        .map(|p| PageText {
            number: p.number,
            text: p.text.to_string(),
        })
        .collect()
}

#[async_trait]
impl MemoryModel for TaskModel {
    fn backend(&self) -> &str {
        match self.backend {
            Backend::Extractive => "extractive",
            Backend::OpenAi(_) => "openai",
        }
    }

    fn is_remote(&self) -> bool {
        matches!(self.backend, Backend::OpenAi(_))
    }

    async fn summarize_segment(&self, cx: &CallContext, segment: &str) -> StepResult<String> {
        let step = Step::SummarizeSegment {
            segment: segment.to_string(),
        };
        self.run(cx, step, parse::free_text).await
    }

    async fn compress_summaries(&self, cx: &CallContext, summaries: &[&str]) -> StepResult<String> {
        let step = Step::CompressSummaries {
            summaries: owned(summaries),
        };
        self.run(cx, step, parse::free_text).await
    }

    async fn triage(
        &self,
        cx: &CallContext,
        question: &str,
        summaries: &[&str],
    ) -> StepResult<Triage> {
        let n = summaries.len();
        let step = Step::Triage {
            question: question.to_string(),
            summaries: owned(summaries),
        };
        self.run(cx, step, |r| parse::triage(r, n)).await
    }

    async fn read_leaf(
        &self,
        cx: &CallContext,
        question: &str,
        memory: &str,
        segment: &str,
    ) -> StepResult<Judgement> {
        let step = Step::ReadLeaf {
            question: question.to_string(),
            memory: memory.to_string(),
            segment: segment.to_string(),
        };
        self.run(cx, step, parse::judgement).await
    }

    async fn choose_break(
        &self,
        cx: &CallContext,
        units: &[&str],
        candidates: &[usize],
        first_label: usize,
    ) -> StepResult<usize> {
        let step = Step::ChooseBreak {
            units: owned(units),
            candidates: candidates.to_vec(),
            first_label,
        };
        self.run(cx, step, |r| parse::break_point(r, first_label, candidates))
            .await
    }

    async fn gist_page(&self, cx: &CallContext, page: &str) -> StepResult<String> {
        let step = Step::GistPage {
            page: page.to_string(),
        };
        self.run(cx, step, parse::free_text).await
    }

    async fn starts_new_section(
        &self,
        cx: &CallContext,
        previous: &str,
        current: &str,
    ) -> StepResult<Option<bool>> {
        let step = Step::StartsNewSection {
            previous: previous.to_string(),
            current: current.to_string(),
        };
        self.run(cx, step, parse::section_start).await
    }

    async fn lookup_pages(
        &self,
        cx: &CallContext,
        question: &str,
        memory: &[PageView<'_>],
        max_pages: usize,
    ) -> StepResult<Vec<u32>> {
        let known: Vec<u32> = memory.iter().map(|p| p.number).collect();
        let step = Step::LookupPages {
            question: question.to_string(),
            pages: page_texts(memory),
            max_pages,
        };
        self.run(cx, step, |r| parse::pages(r, &known, max_pages))
            .await
    }

    async fn lookup_next_page(
        &self,
        cx: &CallContext,
        question: &str,
        memory: &[PageView<'_>],
        already_read: &[u32],
    ) -> StepResult<Option<u32>> {
        let known: Vec<u32> = memory.iter().map(|p| p.number).collect();
        let step = Step::LookupNextPage {
            question: question.to_string(),
            pages: page_texts(memory),
            already_read: already_read.to_vec(),
        };
        self.run(cx, step, |r| parse::next_page(r, &known, already_read))
            .await
    }

    async fn extract_entities(
        &self,
        cx: &CallContext,
        background: &str,
        segment: &str,
    ) -> StepResult<Vec<String>> {
        let step = Step::ExtractEntities {
            background: background.to_string(),
            segment: segment.to_string(),
        };
        self.run(cx, step, parse::entities).await
    }

    async fn extract_relations(
        &self,
        cx: &CallContext,
        segment: &str,
        entities: &[&str],
    ) -> StepResult<Vec<Relation>> {
        let step = Step::ExtractRelations {
            segment: segment.to_string(),
            entities: owned(entities),
        };
        self.run(cx, step, |r| parse::relations(r, entities)).await
    }

    async fn merge_relations(
        &self,
        cx: &CallContext,
        summary: &str,
        first: RelationEvidence<'_>,
        second: RelationEvidence<'_>,
    ) -> StepResult<String> {
        let step = Step::MergeRelations {
            summary: summary.to_string(),
            segments: [first.segment.to_string(), second.segment.to_string()],
            relations: [first.relation.to_string(), second.relation.to_string()],
        };
        self.run(cx, step, parse::free_text).await
    }

    async fn same_entity(
        &self,
        cx: &CallContext,
        name: &str,
        first: &str,
        others: &[&str],
    ) -> StepResult<Vec<bool>> {
        let step = Step::SameEntity {
            name: name.to_string(),
            first: first.to_string(),
            others: owned(others),
        };
        self.run(cx, step, |r| parse::same_entities(r, others.len()))
            .await
    }

    async fn judge_answerable(
        &self,
        cx: &CallContext,
        question: &str,
        context: &str,
    ) -> StepResult<Judgement> {
        let step = Step::JudgeAnswerable {
            question: question.to_string(),
            context: context.to_string(),
        };
        self.run(cx, step, parse::judgement).await
    }

    async fn summarize_with_facts(&self, cx: &CallContext, chunk: &str) -> StepResult<FactSummary> {
        let step = Step::SummarizeWithFacts {
            chunk: chunk.to_string(),
        };
        self.run(cx, step, parse::fact_summary).await
    }

    async fn update_memory(
        &self,
        cx: &CallContext,
        question: &str,
        retrieved: &str,
        memory: &str,
    ) -> StepResult<String> {
        let step = Step::UpdateMemory {
            question: question.to_string(),
            retrieved: retrieved.to_string(),
            memory: memory.to_string(),
        };
        self.run(cx, step, parse::free_text).await
    }

    async fn answer(&self, cx: &CallContext, question: &str, context: &str) -> StepResult<String> {
        let step = Step::Answer {
            question: question.to_string(),
            context: context.to_string(),
        };
        self.run(cx, step, parse::free_text).await
    }
}
