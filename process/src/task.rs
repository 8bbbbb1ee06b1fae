//! Tasks, started in one place and named, so that what a task logs says whose
//! it is. `clippy.toml` disallows the raw `tokio::spawn`s elsewhere.

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Starts `future` as the task `name` on the runtime this is called from.
pub fn spawn<F>(name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    spawn_on(&Handle::current(), name, future)
}

/// Starts `future` as the task `name` on `runtime`.
#[allow(clippy::disallowed_methods)]
pub fn spawn_on<F>(runtime: &Handle, name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime.spawn(future.instrument(tracing::info_span!("task", name)))
}
