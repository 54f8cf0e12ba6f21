//! `check_forwarded` in the support crate's `properties` (crates/support/src/properties/forwarded.rs)
//! holds the properties, `fuzz_forwarded` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_forwarded(data));
