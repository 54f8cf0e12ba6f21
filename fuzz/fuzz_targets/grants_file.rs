//! `check_grants_file` in the support crate's `properties` (crates/support/src/properties/grants_file.rs)
//! holds the properties, `fuzz_grants_file` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_grants_file(data));
