//! The access token syntax rule: `check_syntax` against a regex-free reference of RFC 6750
//! `b64token` and the 4096-byte limit; see `check_token` in `../properties.rs`.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_token(data));
