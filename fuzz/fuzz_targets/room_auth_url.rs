//! `RoomInfo::auth_url()` from arbitrary `node_properties`; see `check_room_auth_url` in
//! `../properties.rs`.
#![no_main]

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::fuzz_room_auth_url(data));
