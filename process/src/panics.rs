//! Panics as errors, caught in one place: code run over untrusted input (a
//! file's parser, a dataflow operator's logic) must cost that input, not the
//! process. `clippy.toml` disallows the raw `catch_unwind`s elsewhere.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// What a panic said: its `&str` or `String` payload.
pub fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Runs `f`; a panic becomes its message. What `f` touched may be left half
/// changed, so a caller drops it (a parser's state, a reader).
#[allow(clippy::disallowed_methods)]
pub fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| message(payload.as_ref()))
}

/// `future`, with a panic while it runs turned into its message.
#[allow(clippy::disallowed_methods)]
pub async fn caught_async<F: Future>(future: F) -> Result<F::Output, String> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|payload| message(payload.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_its_message_and_a_return_its_value() {
        assert_eq!(caught(|| 7), Ok(7));
        assert_eq!(
            caught(|| -> u8 { panic!("bad {}", "bytes") }),
            Err("bad bytes".into())
        );
        let failed = futures::executor::block_on(caught_async(async { panic!("in a future") }));
        assert_eq!(failed, Err::<(), _>("in a future".to_string()));
    }
}
