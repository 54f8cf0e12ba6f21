//! Every committed input of the fuzz targets whose parsers live outside the library's core
//! (`fuzz/regressions/<target>/`: the seeds, the corpus entries worth keeping, and every crash a
//! fuzzer found) replayed through the same property checks the targets run, on the stable
//! toolchain, on every `cargo test --all-features` (each target's inputs under the feature its
//! properties need). The four targets of the first round replay in the library's
//! `tests/it/fuzz_regressions.rs`.

#[cfg(feature = "fuzz-redis")]
mod redis {
    use token_resolver_support::properties;
    use token_resolver_support::properties::replay;

    #[test]
    fn redis_reply_regressions_keep_their_properties() {
        // Pins down the XREAD and XINFO STREAM readers on every committed reply.
        replay("redis_reply", properties::fuzz_redis_reply);
    }

    #[test]
    fn redis_reply_seeds_are_replies() {
        // Pins down that the seeds reach the readers: the target skips what is no reply.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/regressions/redis_reply");
        for seed in [
            "xread-resp2",
            "xread-resp3-map",
            "xinfo-resp2-redis7",
            "xinfo-resp3-trimmed",
        ] {
            let data = std::fs::read(dir.join(seed)).unwrap();
            let reply = ::redis::parse_redis_value(&data).unwrap();
            assert!(
                !token_resolver::fuzzing::xread_entries(reply.clone()).is_empty()
                    || token_resolver::fuzzing::xinfo_stream(reply)
                        .length
                        .is_some(),
                "{seed} reads as neither an XREAD nor an XINFO reply"
            );
        }
    }

    #[test]
    fn stream_message_regressions_keep_their_properties() {
        // Pins down the revocation message reader and its MAC on every committed message.
        replay("stream_message", properties::fuzz_stream_message);
    }
}

#[cfg(feature = "fuzz-sidecar")]
mod sidecar {
    use token_resolver_support::properties;
    use token_resolver_support::properties::replay;

    #[test]
    fn grants_file_regressions_keep_their_properties() {
        // Pins down the grants file reader on every committed file.
        replay("grants_file", properties::fuzz_grants_file);
    }

    #[test]
    fn last_event_id_regressions_keep_their_properties() {
        // Pins down the Last-Event-ID reader on every committed header.
        replay("last_event_id", properties::fuzz_last_event_id);
    }

    #[test]
    fn resolve_body_regressions_keep_their_properties() {
        // Pins down the resolve body reader on every committed body.
        replay("resolve_body", properties::fuzz_resolve_body);
    }
}

#[cfg(feature = "fuzz-game-server")]
#[test]
fn game_message_regressions_keep_their_properties() {
    // Pins down the game server's reader of client messages on every committed message.
    token_resolver_support::properties::replay(
        "game_message",
        token_resolver_support::properties::fuzz_game_message,
    );
}

#[cfg(feature = "fuzz-listener")]
#[test]
fn forwarded_regressions_keep_their_properties() {
    // Pins down the client address behind trusted proxies on every committed header set.
    token_resolver_support::properties::replay(
        "forwarded",
        token_resolver_support::properties::fuzz_forwarded,
    );
}

#[cfg(feature = "fuzz-reference-api")]
#[test]
fn login_body_regressions_keep_their_properties() {
    // Pins down the reference API's reader of login bodies on every committed body.
    token_resolver_support::properties::replay(
        "login_body",
        token_resolver_support::properties::fuzz_login_body,
    );
}

#[cfg(feature = "fuzz-sidecar")]
#[test]
fn ext_authz_regressions_keep_their_properties() {
    // Pins down the ext_authz check's reading of CheckRequest headers on every committed input.
    token_resolver_support::properties::replay(
        "ext_authz",
        token_resolver_support::properties::fuzz_ext_authz,
    );
}

/// Generated inputs shaped like the real ones, beside the committed ones: cheap cases that
/// reach the valid paths more often than raw bytes do.
mod generated {
    #[allow(unused_imports)]
    use proptest::prelude::*;

    #[cfg(feature = "fuzz-sidecar")]
    proptest! {
        #[test]
        fn grants_files_of_plausible_lines_keep_their_properties(
            lines in proptest::collection::vec(
                (0u64..3_000_000_000, "[ -~]{0,12}", any::<bool>()), 0..8),
            now in 1_764_149_000u64..1_764_151_000,
            ahead in 0u64..3_000,
        ) {
            // Pins down the grants reader on files of grant-like lines, some cut short.
            let mut file = Vec::new();
            for (until, key, whole) in &lines {
                file.extend_from_slice(format!("{until} {key}").as_bytes());
                if *whole {
                    file.push(b'\n');
                }
            }
            token_resolver_support::properties::check_grants_file(&file, now, now + ahead);
        }

        #[test]
        fn resolve_bodies_of_plausible_fields_keep_their_properties(
            token in proptest::option::of("[A-Za-z0-9._~+/-]{0,24}"),
            auth_url in proptest::option::of(proptest::option::of("https://[a-z]{1,8}\\.example(/[a-z]{0,4})?")),
            session in proptest::option::of(proptest::option::of("[ -~]{0,4}|[!-~]{120,130}")),
            extra in any::<bool>(),
        ) {
            // Pins down the resolve body reader on objects with and without each field.
            let mut body = serde_json::Map::new();
            if let Some(token) = token {
                body.insert("access_token".into(), token.into());
            }
            if let Some(url) = auth_url {
                body.insert("auth_url".into(), url.map_or(serde_json::Value::Null, Into::into));
            }
            if let Some(session) = session {
                body.insert("session".into(), session.map_or(serde_json::Value::Null, Into::into));
            }
            if extra {
                body.insert("room".into(), 1.into());
            }
            let bytes = serde_json::to_vec(&body).unwrap();
            token_resolver_support::properties::check_resolve_body(&bytes);
        }
    }

    #[cfg(feature = "fuzz-redis")]
    proptest! {
        #[test]
        fn revocation_messages_of_every_op_keep_their_properties(
            op in "token|user|session|all|other",
            at in proptest::option::of(any::<u64>()),
            decided in proptest::option::of(any::<u64>()),
            user_id in proptest::option::of(any::<i64>()),
            generation in proptest::option::of(any::<u64>()),
            mine in any::<bool>(),
        ) {
            // Pins down the message reader on messages of every op, complete or not.
            let message = serde_json::json!({
                "node": "0a1b", "op": op, "at": at, "decided": decided,
                "endpoint": "https://auth.example/api/user", "digest": "ab".repeat(32),
                "user_id": user_id, "session": "s1", "generation": generation,
            });
            let node = if mine { "0a1b" } else { "ffee" };
            token_resolver_support::properties::check_stream_message(
                &serde_json::to_vec(&message).unwrap(),
                node,
            );
        }
    }
}
