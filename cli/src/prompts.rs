//! `memweave prompts`: the built-in prompt templates, written out to edit.

use std::path::PathBuf;

use memweave_pipeline::UsageError;

#[derive(clap::Args)]
pub struct PromptsArgs {
    /// Directory to write TASK.txt files into (created if missing).
    dir: PathBuf,
}

impl PromptsArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let dir = self.dir;
        memweave_llm::Prompts::export(&dir)
            .map_err(|e| anyhow::Error::new(UsageError(format!("{}: {e}", dir.display()))))
            .map(|()| tracing::info!(dir = %dir.display(), "wrote the built-in prompt templates"))
    }
}
