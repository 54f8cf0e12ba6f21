//! The fuzz targets' properties (`fuzz/properties.rs`) driven by proptest strategies that build
//! structured inputs a byte fuzzer reaches only slowly: well-formed answers and their near
//! misses, Cache-Control lists, tokens around the size limit, and authUrls assembled from
//! hostile parts. Runs on the stable toolchain on every `cargo test`.

use token_resolver_support::properties;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Value};

// --- strategies -------------------------------------------------------------------------------

/// Any JSON value, a few levels deep, floats included.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid answer: `id`, `name` and extra fields in any order, with any spacing, as bytes; and
/// the id and name it carries.
fn valid_answer() -> impl Strategy<Value = (Vec<u8>, i64, String)> {
    (
        any::<i64>(),
        any::<String>(),
        btree_map("[a-z_]{1,8}", json_value(), 0..4),
        prop_oneof![Just(""), Just(" "), Just("\n\t ")],
    )
        .prop_flat_map(|(id, name, extra, space)| {
            let mut fields = vec![
                ("id".to_owned(), Value::from(id)),
                ("name".to_owned(), Value::String(name.clone())),
            ];
            fields.extend(extra.into_iter().filter(|(k, _)| k != "id" && k != "name"));
            (Just(fields).prop_shuffle(), Just((id, name, space)))
        })
        .prop_map(|(fields, (id, name, space))| {
            let members: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{space}{}{space}:{space}{v}", Value::String(k.clone())))
                .collect();
            let body = format!("{space}{{{}}}{space}", members.join(","));
            (body.into_bytes(), id, name)
        })
}

/// A valid answer with one change that may or may not break it.
fn near_miss_answer() -> impl Strategy<Value = Vec<u8>> {
    let id_values = prop_oneof![
        Just("\"42\""),
        Just("42.5"),
        Just("42.0"),
        Just("1e2"),
        Just("true"),
        Just("null"),
        Just("9223372036854775808"),
        Just("-9223372036854775809"),
        Just("-0"),
        Just("[]"),
        Just("{}"),
    ];
    let bytes = prop_oneof![
        Just(b'{'),
        Just(b'}'),
        Just(b'['),
        Just(b'"'),
        Just(b','),
        Just(b':'),
        Just(b'\\'),
        Just(b'0'),
        Just(b'-'),
        Just(b' '),
        Just(0xff),
        Just(0x01),
    ];
    (
        valid_answer(),
        any::<prop::sample::Index>(),
        bytes,
        id_values,
        0..8u8,
    )
        .prop_map(|((mut body, ..), at, byte, id_value, mutation)| {
            let i = at.index(body.len().max(1)).min(body.len());
            match mutation {
                0 if !body.is_empty() => {
                    body.remove(i.min(body.len() - 1));
                }
                1 => body.insert(i, byte),
                2 => body.truncate(i),
                3 => {
                    let text = String::from_utf8_lossy(&body).into_owned();
                    body = format!(r#"{{"id":{id_value},{}"#, &text.trim_start()[1..]).into_bytes();
                }
                4 => {
                    let text = String::from_utf8_lossy(&body).into_owned();
                    body =
                        format!(r#"{{"name":{id_value},{}"#, &text.trim_start()[1..]).into_bytes();
                }
                5 => {
                    let text = String::from_utf8_lossy(&body).into_owned();
                    body = format!(r#"[{text}]"#).into_bytes();
                }
                6 => body.extend_from_slice(b" {}"),
                _ => body.push(byte),
            }
            body
        })
}

/// A Cache-Control value: directives of every kind, in any case, joined with odd spacing.
fn cache_control() -> impl Strategy<Value = String> {
    let directive = prop_oneof![
        any::<u64>().prop_map(|n| format!("max-age={n}")),
        (0u64..100).prop_map(|n| format!("MAX-AGE=\"{n}\"")),
        "[0-9]{20,30}".prop_map(|n| format!("max-age={n}")),
        Just("max-age=".to_owned()),
        Just("max-age=-1".to_owned()),
        Just("max-age=abc".to_owned()),
        Just("max-age = 5".to_owned()),
        Just("no-store".to_owned()),
        Just("No-Cache".to_owned()),
        Just("no-cache=\"set-cookie\"".to_owned()),
        Just("private".to_owned()),
        Just("public".to_owned()),
        Just("s-maxage=5".to_owned()),
        Just("must-revalidate".to_owned()),
        any::<String>(),
    ];
    (
        vec(directive, 0..5),
        prop_oneof![Just(","), Just(", "), Just(" ,  ")],
    )
        .prop_map(|(directives, sep)| directives.join(sep))
}

/// An authUrl assembled from parts that each probe a rule: scheme case and kind, userinfo,
/// loopback spellings, ports, dot and encoded segments, trailing slashes, query and fragment.
fn auth_url() -> impl Strategy<Value = String> {
    let scheme = prop_oneof![
        4 => Just("https"),
        3 => Just("http"),
        1 => Just("HTTPS"),
        1 => Just("HtTp"),
        1 => Just("ftp"),
        1 => Just("ws"),
    ];
    let userinfo = prop_oneof![8 => Just(""), 1 => Just("u@"), 1 => Just("u:p@"), 1 => Just(":@")];
    let host = prop::sample::select(vec![
        "a.example",
        "A.Example",
        "b.example",
        "a.example.evil.com",
        "localhost",
        "LOCALHOST",
        "localhost.",
        "127.0.0.1",
        "127.1",
        "127.255.0.9",
        "0x7f.0.0.1",
        "2130706433",
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
        "[::2]",
        "[::ffff:127.0.0.1]",
        "10.0.0.1",
        "xn--bcher-kva.example",
        "bücher.example",
        "a.example:",
    ]);
    let port = prop::sample::select(vec!["", "", ":443", ":80", ":8080", ":444", ":0"]);
    let segment = prop::sample::select(vec![
        "game", "gamex", "x", "api", "user", "api/user", "..", ".", "%2e%2e", "%2E", "%2F", "",
        "a b", "é", "a\tb",
    ]);
    let trailing = prop::sample::select(vec!["", "/", "//"]);
    let suffix = prop_oneof![8 => Just(""), 1 => Just("?"), 1 => Just("?x=1"), 1 => Just("#"), 1 => Just("#f")];
    (
        scheme,
        userinfo,
        host,
        port,
        vec(segment, 0..4),
        trailing,
        suffix,
    )
        .prop_map(
            |(scheme, userinfo, host, port, segments, trailing, suffix)| {
                let path = segments.iter().map(|s| format!("/{s}")).collect::<String>();
                format!("{scheme}://{userinfo}{host}{port}{path}{trailing}{suffix}")
            },
        )
}

/// A candidate for an allowed URL: an unrelated URL, or the allowed one with something added
/// (a segment, a sibling spelling, a case change, a trailing slash).
fn candidate_for(allowed: String) -> impl Strategy<Value = String> {
    let extra = prop::sample::select(vec![
        "/x",
        "/x/y",
        "x",
        "/../x",
        "/%2e%2e/x",
        "/",
        "//x",
        "/api/user",
        "/x/api/user",
        "?q",
        "#f",
        "%2Fx",
    ]);
    prop_oneof![
        auth_url(),
        extra.prop_map({
            let allowed = allowed.clone();
            move |e| format!("{allowed}{e}")
        }),
        Just(allowed.to_uppercase()),
        Just(allowed),
    ]
}

/// `node_properties`: absent, or a map whose keys are often `authUrl` and values any JSON.
fn node_properties() -> impl Strategy<Value = Option<Map<String, Value>>> {
    let key = prop_oneof![
        3 => Just("authUrl".to_owned()),
        1 => Just("authurl".to_owned()),
        1 => Just("AuthUrl".to_owned()),
        1 => any::<String>(),
    ];
    proptest::option::of(
        btree_map(key, json_value(), 0..4).prop_map(|m| m.into_iter().collect::<Map<_, _>>()),
    )
}

// --- properties -------------------------------------------------------------------------------

proptest! {
    #[test]
    fn valid_answers_are_accepted_with_their_id_and_name((body, id, name) in valid_answer()) {
        // Pins down that every well-formed answer parses, to the id and name it carries.
        let user = token_resolver::answer::parse_user(&body)
            .map_err(|e| TestCaseError::fail(format!("{}: {e}", String::from_utf8_lossy(&body))))?;
        prop_assert_eq!((user.id, user.name.as_str()), (id, name.as_str()));
        properties::check_answer(&body, None);
    }

    #[test]
    fn near_miss_answers_are_judged_like_the_reference(body in near_miss_answer(), cc in proptest::option::of(cache_control())) {
        // Pins down that parse_user accepts exactly the valid answers, and re-serialises them.
        properties::check_answer(&body, cc.as_deref());
    }

    #[test]
    fn cache_control_never_exceeds_the_cap(cc in proptest::option::of(cache_control())) {
        // Pins down Freshness::ttl <= cache_ttl and no-store/no-cache winning.
        properties::check_cache_control(cc.as_deref());
    }

    #[test]
    fn b64tokens_are_accepted(token in "[A-Za-z0-9._~+/-]{1,64}={0,4}") {
        // Pins down that every b64token under the limit passes.
        prop_assert_eq!(properties::reference_token_code(&token), None);
        properties::check_token(&token);
    }

    #[test]
    fn any_string_is_judged_like_the_reference(token in any::<String>()) {
        // Pins down check_syntax against the reference on arbitrary text.
        properties::check_token(&token);
    }

    #[test]
    fn tokens_around_the_size_limit_are_judged_like_the_reference(
        len in 4090usize..4103,
        fill in "[A-Za-z0-9._~+/-]",
        padding in 0usize..3,
    ) {
        // Pins down the 4096-byte limit, padding included.
        let token = format!("{}{}", fill.repeat(len - padding), "=".repeat(padding));
        properties::check_token(&token);
    }

    #[test]
    fn a_hostile_character_anywhere_is_malformed(
        token in "[A-Za-z0-9._~+/-]{1,32}",
        at in any::<prop::sample::Index>(),
        bad in prop::sample::select(vec![" ", "\r", "\n", ",", "\"", "é", "\0", ";", "\u{7f}", "%"]),
    ) {
        // Pins down that a token with a foreign character is token_malformed, wherever it is.
        let mut token = token;
        token.insert_str(at.index(token.len() + 1), bad);
        prop_assert_eq!(
            properties::reference_token_code(&token),
            Some(token_resolver::ErrorCode::TokenMalformed)
        );
        properties::check_token(&token);
    }

    #[test]
    fn auth_urls_parse_normalise_and_match_by_the_rules(
        (allowed, candidate) in auth_url().prop_flat_map(|a| (Just(a.clone()), candidate_for(a))),
        insecure in any::<bool>(),
    ) {
        // Pins down Endpoint::parse, its idempotence, covers and the resolver's allowlist.
        properties::check_auth_url(&allowed, &candidate, insecure);
    }

    #[test]
    fn room_auth_url_follows_the_rule(props in node_properties()) {
        // Pins down RoomInfo::auth_url: string as is, null and absent as "", others as JSON.
        properties::check_room_auth_url(props);
    }
}
