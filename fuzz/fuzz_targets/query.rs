#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| retagfs_fuzzing::query(data));
