//! The `/api/user` answer parser: any bytes, any Cache-Control. An accepted answer must
//! re-serialise to the same id and name and parse again to the same user.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use token_resolver::answer::{parse_cache_control, parse_user};

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    body: &'a [u8],
    cache_control: Option<&'a str>,
}

fuzz_target!(|input: Input<'_>| {
    let _ = parse_cache_control(input.cache_control);
    if let Ok(user) = parse_user(input.body) {
        let again = serde_json::to_vec(&user).expect("a parsed user serialises");
        let reparsed = parse_user(&again).expect("a serialised user parses");
        assert_eq!(reparsed, user);
    }
});
