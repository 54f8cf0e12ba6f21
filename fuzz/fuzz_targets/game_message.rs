//! `check_game_message` in the support crate's `properties` (crates/support/src/properties/game_message.rs)
//! holds the properties, `fuzz_game_message` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_game_message(data));
