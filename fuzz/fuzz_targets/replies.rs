#![no_main]

libfuzzer_sys::fuzz_target!(|reply: &str| memweave_fuzz::read_reply(reply));
