//! The access token syntax rule: `check_syntax` against a regex-free reference of RFC 6750
//! `b64token` and the 4096-byte limit; `check_token` in the support crate's `properties`
//! (crates/support/src/properties.rs) holds the properties.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_token(data));
