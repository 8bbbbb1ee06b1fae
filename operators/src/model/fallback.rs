//! A build's model: a step whose replies could not be read after their
//! retries stands in with its [`Step::fallback`], and the document is built
//! (an unreadable page break no longer costs a whole document).

use std::sync::Mutex;

use async_trait::async_trait;
use memweave_schemas::ErrorRow;

use super::{CallContext, MemoryModel, Reply, Step, StepError, StepResult, Task, UNPARSABLE};

/// `model`, with each build step's fallback in place of its
/// [`StepError::Unparsable`]; what fell back is kept for the errors rows.
#[derive(Debug)]
pub struct WithFallbacks<'m> {
    model: &'m dyn MemoryModel,
    /// Per step that fell back: its task, its last reply, and what stood in.
    fell_back: Mutex<Vec<(Task, String, &'static str)>>,
}

impl<'m> WithFallbacks<'m> {
    pub fn new(model: &'m dyn MemoryModel) -> Self {
        WithFallbacks {
            model,
            fell_back: Mutex::new(Vec::new()),
        }
    }

    /// One `llm_unparsable` row per task that fell back while building the
    /// document `doc_id` read from `source`, naming the step, how many of
    /// its calls fell back and to what. The same whatever order the calls
    /// ended in: the reply shown is the least of the task's last replies.
    pub fn errors(self, source: &str, doc_id: &str) -> Vec<ErrorRow> {
        let mut fell_back = self
            .fell_back
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        fell_back.sort();
        let mut rows = Vec::new();
        for group in fell_back.chunk_by(|a, b| a.0 == b.0) {
            let (task, last_reply, stood_in) = &group[0];
            let shown: String = last_reply.chars().take(160).collect();
            let message = format!(
                "{task}: {n} call(s) got no readable reply after their retries (one: {shown:?}); \
                 each stood in with {stood_in}, and the rest of the document was built",
                n = group.len(),
            );
            rows.push(ErrorRow::new(
                "build",
                source,
                Some(doc_id.to_string()),
                UNPARSABLE,
                &message,
            ));
        }
        rows
    }
}

#[async_trait]
impl MemoryModel for WithFallbacks<'_> {
    fn backend(&self) -> &str {
        self.model.backend()
    }

    fn is_remote(&self) -> bool {
        self.model.is_remote()
    }

    async fn reply(&self, cx: &CallContext, step: Step) -> StepResult<Reply> {
        let task = step.task();
        let fallback = step.fallback();
        match (self.model.reply(cx, step).await, fallback) {
            (Err(StepError::Unparsable { last_reply, .. }), Some((reply, stood_in))) => {
                let mut fell_back = self.fell_back.lock().unwrap_or_else(|e| e.into_inner());
                fell_back.push((task, last_reply, stood_in));
                Ok(reply)
            }
            (replied, _) => replied,
        }
    }
}
