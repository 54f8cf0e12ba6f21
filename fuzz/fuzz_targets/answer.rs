//! The `/api/user` answer parser and Cache-Control: see `check_answer` in `../properties.rs`
//! for the properties and `fuzz_answer` for the input format.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_answer(data));
