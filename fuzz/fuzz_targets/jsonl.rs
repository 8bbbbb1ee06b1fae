#![no_main]

use memweave_ingest::{Compression, Format};

const JSON_LINES: [Format; 3] = [
    Format::JsonLines(Compression::None),
    Format::JsonLines(Compression::Gzip),
    Format::JsonLines(Compression::Zstd),
];

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    if let Some((format, bytes)) = memweave_fuzz::pick(&JSON_LINES, input) {
        memweave_fuzz::read(format, bytes);
    }
});
