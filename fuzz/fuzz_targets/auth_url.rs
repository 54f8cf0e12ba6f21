//! authUrl parsing, normalisation and allowlist matching (an allowed URL and a candidate); see
//! `check_auth_url` in `../properties.rs` for the properties and `fuzz_auth_url` for the input.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_auth_url(data));
