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
fn joined_cache_control_directives_keep_their_properties() {
    // Pins down the Cache-Control parse's byte split against the property's reference (which
    // splits and trims as `str` does) on every join of three directives, whitespace outside
    // ASCII included: the `answer` target's crash-cache-control-vertical-tab, generalised.
    let parts = [
        "max-age=5",
        " max-age = 7 ",
        "\tMAX-AGE=\"3\"",
        "max-age=",
        "max-age=-1",
        "max-age=99999999999999999999999",
        "no-store",
        " No-Cache\t",
        "private",
        "=",
        "",
        " ",
        "x=\"y\"",
        // Whitespace to `str::trim` that ASCII's trim would keep; the first found by the
        // `answer` fuzz target.
        "no-store\t\u{b}\t",
        "\u{a0}max-age=4\u{3000}",
        "max-age=\u{85}\"2\"",
    ];
    for a in parts {
        for b in parts {
            for c in parts {
                properties::check_cache_control(Some(&format!("{a},{b},{c}")));
            }
        }
    }
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
