//! The memweave indexing pipeline: a timely + differential dataflow that builds
//! every memory from a source (the `memweave` command around it is `cli/`).

mod async_map;
pub mod cluster;
pub mod dataflow;
pub mod index;
pub mod kafka;
pub mod metrics;
mod origins;
mod positions;
pub mod progress;
pub mod source;
mod spill;
mod workers;
mod write;

/// A mistake in what the user asked for (a missing source, an unwritable tables
/// root, bad sizes): the command reports it in one line and exits with code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The run was stopped by a signal after saving its model calls; nothing was
/// committed. The command exits with 130, as shells do for Ctrl-C.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted: the model calls made so far are saved; re-run to resume")
    }
}

impl std::error::Error for Interrupted {}
