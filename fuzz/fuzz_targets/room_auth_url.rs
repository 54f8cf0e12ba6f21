//! `RoomInfo::auth_url()` from arbitrary `node_properties`: `check_room_auth_url` in the
//! support crate's `properties` (crates/support/src/properties.rs) holds the properties.
#![no_main]

use token_resolver_support::properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_room_auth_url(data));
