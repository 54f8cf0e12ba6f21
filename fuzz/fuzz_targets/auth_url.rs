//! authUrl parsing, normalisation and allowlist matching (an allowed URL and a candidate):
//! `check_auth_url` in the support crate's `properties` (crates/support/src/properties.rs)
//! holds the properties, `fuzz_auth_url` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_auth_url(data));
