#![no_main]

use memweave_ingest::Format;

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    if let Some((format, bytes)) = memweave_fuzz::pick(&[Format::Mbox, Format::Eml], input) {
        memweave_fuzz::read(format, bytes);
    }
});
