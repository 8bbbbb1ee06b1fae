#![no_main]

use memweave_ingest::Format;

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| memweave_fuzz::read(Format::Epub, bytes));
