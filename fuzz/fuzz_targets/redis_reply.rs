//! `check_redis_reply` in the support crate's `properties` (crates/support/src/properties/redis_reply.rs)
//! holds the properties, `fuzz_redis_reply` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_redis_reply(data));
