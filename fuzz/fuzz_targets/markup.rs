#![no_main]

use memweave_ingest::Format;

const MARKUPS: [Format; 5] = [
    Format::Text,
    Format::Markdown,
    Format::ReStructuredText,
    Format::AsciiDoc,
    Format::Org,
];

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    if let Some((format, bytes)) = memweave_fuzz::pick(&MARKUPS, input) {
        memweave_fuzz::read(format, bytes);
    }
});
