//! Every committed fuzz input (`fuzz/regressions/<target>/`: the seeds, the minimised corpus
//! entries worth keeping, and every crash a fuzzer found) replayed through the same property
//! checks the fuzz targets run, on the stable toolchain, on every `cargo test`.

use token_resolver_support::properties::{self, replay};

#[test]
fn answer_regressions_keep_their_properties() {
    // Pins down the answer parser and Cache-Control properties on every committed input.
    replay("answer", properties::fuzz_answer);
}

#[test]
fn token_regressions_keep_their_properties() {
    // Pins down the b64token rule against its reference on every committed input.
    replay("token", properties::fuzz_token);
}

#[test]
fn auth_url_regressions_keep_their_properties() {
    // Pins down authUrl parsing, normalisation and allowlist matching on every committed input.
    replay("auth_url", properties::fuzz_auth_url);
}

#[test]
fn room_auth_url_regressions_keep_their_properties() {
    // Pins down the RoomInfo::auth_url rule on every committed input.
    replay("room_auth_url", properties::fuzz_room_auth_url);
}
