//! What every fuzz target runs: bytes through one of the document readers the
//! indexer's parser workers run, or a string through every reply parser.
//!
//! A reader's panic is a handled outcome (the indexer catches it as a
//! `corrupt` row), so the targets keep panics quiet and let them be caught;
//! what they find is what would cost a parser worker its life: a crash, a
//! stack overflow, memory past libFuzzer's `-rss_limit_mb`, or a hang past
//! its `-timeout`, and any panic a reader lets escape.

use std::sync::Once;

use memweave_ingest::{Format, ReadOptions, SourceFile};

/// What one fuzzed file may inflate to: small, so that a decompression bomb
/// is found as a `too_large` row long before libFuzzer's memory limit.
const MAX_INFLATED_BYTES: u64 = 64 << 20;

/// `bytes` read as a file of `format`, every document and error taken.
pub fn read(format: Format, bytes: &[u8]) {
    quiet_panics();
    let file = SourceFile {
        uri: "fuzz-input".into(),
        key: "fuzz-input".into(),
        format,
        version: None,
    };
    let options = ReadOptions {
        max_inflated_bytes: MAX_INFLATED_BYTES,
        ..ReadOptions::default()
    };
    for parsed in memweave_ingest::parse(&file, Ok(bytes.to_vec()), &options) {
        std::hint::black_box(parsed.ok());
    }
}

/// The format `choice` picks from `formats` (a target's first input byte), and
/// the bytes after it: one target covers a reader's variants.
pub fn pick<'a>(formats: &[Format], input: &'a [u8]) -> Option<(Format, &'a [u8])> {
    let (&choice, bytes) = input.split_first()?;
    Some((formats[usize::from(choice) % formats.len()], bytes))
}

/// `reply` through every model-reply parser.
pub fn read_reply(reply: &str) {
    memweave_operators::model::parse::read_with_every_parser(reply);
}

/// libFuzzer's panic hook aborts before a reader's `catch_unwind` can catch;
/// the indexer's own behaviour is to catch, so the targets do too.
fn quiet_panics() {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}
