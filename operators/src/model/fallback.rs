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
    /// Per call that fell back: its task, and what stood in.
    fell_back: Mutex<Vec<(Task, &'static str)>>,
}

impl<'m> WithFallbacks<'m> {
    pub fn new(model: &'m dyn MemoryModel) -> Self {
        WithFallbacks {
            model,
            fell_back: Mutex::new(Vec::new()),
        }
    }

    /// One `llm_unparsable` row per task that fell back while building the
    /// document `doc_id` read from `source`, naming the step and what stood
    /// in. Not how many calls fell back, nor what they said: a build from
    /// the call cache can make a different number of them, and the row
    /// must be the same.
    pub fn errors(self, source: &str, doc_id: &str) -> Vec<ErrorRow> {
        let mut fell_back = self
            .fell_back
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        fell_back.sort();
        fell_back.dedup();
        fell_back
            .into_iter()
            .map(|(task, stood_in)| {
                let message = format!(
                    "{task}: replies could not be read after their retries; the step stood in \
                     with {stood_in}, and the rest of the document was built"
                );
                ErrorRow::new(
                    "build",
                    source,
                    Some(doc_id.to_string()),
                    UNPARSABLE,
                    &message,
                )
            })
            .collect()
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
            (Err(StepError::Unparsable { .. }), Some((reply, stood_in))) => {
                let mut fell_back = self.fell_back.lock().unwrap_or_else(|e| e.into_inner());
                fell_back.push((task, stood_in));
                Ok(reply)
            }
            (replied, _) => replied,
        }
    }
}
