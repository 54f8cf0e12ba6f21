//! `check_stream_message` in the support crate's `properties` (crates/support/src/properties/stream_message.rs)
//! holds the properties, `fuzz_stream_message` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_stream_message(data));
