//! `check_last_event_id` in the support crate's `properties` (crates/support/src/properties/last_event_id.rs)
//! holds the properties, `fuzz_last_event_id` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_last_event_id(data));
