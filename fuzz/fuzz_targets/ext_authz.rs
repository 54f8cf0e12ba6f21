//! `check_ext_authz` in the support crate's `properties` (crates/support/src/properties/ext_authz.rs)
//! holds the properties, `fuzz_ext_authz` the input format.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_ext_authz(data));
