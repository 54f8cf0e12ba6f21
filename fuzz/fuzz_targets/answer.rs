//! The `/api/user` answer parser and Cache-Control: `check_answer` in the support crate's
//! `properties` (crates/support/src/properties.rs) holds the properties, `fuzz_answer` the
//! input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_answer(data));
