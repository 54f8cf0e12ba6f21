//! `check_login_body` in the support crate's `properties` (crates/support/src/properties/login_body.rs)
//! holds the properties, `fuzz_login_body` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_login_body(data));
