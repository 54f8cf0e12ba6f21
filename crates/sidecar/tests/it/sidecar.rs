//! The sidecar over real HTTP on loopback, in front of the reference API: resolving, bad input,
//! forward-auth, and live sessions whose revocations and expiries arrive as Server-Sent Events
//! (a ban at the reference API reaches the sidecar's admin listener, as it reaches a game
//! server's).

use token_resolver_support as support;

use std::time::Duration;

use super::common;

use common::Parties;
use serde_json::json;
use support::ApiCalls;
use token_resolver_sidecar::SidecarConfig;

async fn parties() -> Parties {
    Parties::start(
        SidecarConfig::default(),
        token_resolver_reference_api::demo_users(),
    )
    .await
}

#[tokio::test]
async fn a_resolve_answers_the_user_and_expiry_and_never_the_token() {
    let parties = parties().await;
    let token = parties.token("alice").await;
    let (status, answer) = parties.resolve(json!({"access_token": token})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["user"], json!({"id": 1, "name": "Alice"}));
    assert!(
        answer["expires_at"]
            .as_u64()
            .is_some_and(|exp| exp > 1_700_000_000),
        "{answer}"
    );
    assert!(!answer.to_string().contains(&token));
    // The default authUrl spelled out, or empty, is the same.
    let explicit = json!({"access_token": token, "auth_url": parties.api.base_url() + "/"});
    assert_eq!(parties.resolve(explicit).await.0, 200);
}

#[tokio::test]
async fn bad_input_gets_a_specific_error_and_no_upstream_call() {
    let parties = parties().await;
    let calls = || parties.api.api().user_requests();
    let (status, answer) = parties.resolve(json!({"access_token": "not-issued"})).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (401, Some("token_rejected"))
    );
    let before = calls();
    let cases = [
        (
            json!({"access_token": "t", "extra": 1}),
            400,
            "invalid_request",
        ),
        (
            json!({"access_token": "t", "session": "x".repeat(129)}),
            400,
            "invalid_request",
        ),
        (
            json!({"access_token": "t", "session": "has space"}),
            400,
            "invalid_request",
        ),
        (
            json!({"access_token": "t", "auth_url": "https://elsewhere.example"}),
            403,
            "auth_url_not_allowed",
        ),
        (json!({"access_token": "a b"}), 401, "token_malformed"),
    ];
    for (body, status, code) in cases {
        let (got, answer) = parties.resolve(body.clone()).await;
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    let too_big = json!({"access_token": "x".repeat(9_000)});
    assert_eq!(parties.resolve(too_big).await.0, 413);
    let text = parties
        .http
        .post(parties.url("/v1/resolve"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 415);
    assert_eq!(calls(), before, "none of these reached the integrator");
}

#[tokio::test]
async fn authorize_answers_the_user_in_headers_for_a_proxy_and_refuses_as_a_bearer_api_does() {
    let mut users = token_resolver_reference_api::demo_users();
    users[0].name = "Zoë \"Z\" 🎮".to_owned();
    let parties = Parties::start(SidecarConfig::default(), users).await;
    let token = parties.token("alice").await;
    let authorize = |token: Option<String>, auth_url: Option<&str>| {
        let mut request = parties.http.get(parties.url("/v1/authorize"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(url) = auth_url {
            request = request.header("x-auth-url", url);
        }
        request.send()
    };
    let ok = authorize(Some(token.clone()), None).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["x-user-id"], "1");
    let name = ok.headers()["x-user-name"].to_str().unwrap();
    let decoded = percent_decode(name);
    assert_eq!(decoded, "Zoë \"Z\" 🎮", "{name}");

    let missing = authorize(None, None).await.unwrap();
    assert_eq!(missing.status(), 401);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    let rejected = authorize(Some("not-issued".into()), None).await.unwrap();
    assert_eq!(rejected.status(), 401);
    assert_eq!(
        rejected.headers()["www-authenticate"],
        r#"Bearer error="invalid_token""#
    );
    let elsewhere = authorize(Some(token), Some("https://elsewhere.example"))
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 403);
}

/// Envoy's HTTP ext_authz asks `path_prefix` + the client's own path with the client's own
/// method: each must be answered as `/v1/authorize` is, not with a 404 or 405 that Envoy would
/// pass on to the client.
#[tokio::test]
async fn authorize_answers_envoys_http_ext_authz_under_any_method_and_path() {
    let parties = Parties::start(
        SidecarConfig::default(),
        token_resolver_reference_api::demo_users(),
    )
    .await;
    let token = parties.token("alice").await;
    for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let url = parties.url("/v1/authorize/api/rooms/7?x=1");
        let ok = parties
            .http
            .request(method.clone(), &url)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "{method}");
        assert_eq!(ok.headers()["x-user-id"], "1", "{method}");
        let refused = parties
            .http
            .request(method.clone(), &url)
            .bearer_auth("not-issued")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "{method}");
        assert_eq!(
            refused.headers()["www-authenticate"],
            r#"Bearer error="invalid_token""#,
            "{method}"
        );
    }
}

/// `%XX` sequences decoded as UTF-8.
fn percent_decode(text: &str) -> String {
    let mut bytes = Vec::new();
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            bytes.push(u8::from_str_radix(std::str::from_utf8(&tail[..2]).unwrap(), 16).unwrap());
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn a_ban_reaches_the_named_session_as_a_revoked_event() {
    let parties = parties().await;
    let mut events = parties.events(None).await;
    let alice = parties.token("alice").await;
    let bob = parties.token("bob").await;
    for (token, session) in [(&alice, "conn-alice"), (&bob, "conn-bob")] {
        let (status, answer) = parties
            .resolve(json!({"access_token": token, "session": session}))
            .await;
        assert_eq!(
            (status, &answer["refreshed"]),
            (200, &json!(false)),
            "{answer}"
        );
    }
    assert_eq!(parties.sidecar.sidecar().sessions(), 2);
    parties.ban(1).await;
    let revoked = events.next().await;
    assert_eq!(revoked.event, "revoked");
    assert_eq!(
        revoked.data,
        json!({"type": "revoked", "session": "conn-alice", "user_id": 1, "reason": "revoked"})
    );
    support::eventually("alice's session is forgotten", || {
        parties.sidecar.sidecar().sessions() == 1
    })
    .await;
}

#[tokio::test]
async fn the_same_session_with_a_new_token_is_its_refresh_and_another_user_is_refused() {
    let parties = parties().await;
    let first = parties.token("alice").await;
    parties
        .resolve(json!({"access_token": first, "session": "s"}))
        .await;
    let second = parties.token("alice").await;
    let (status, answer) = parties
        .resolve(json!({"access_token": second, "session": "s"}))
        .await;
    assert_eq!(
        (status, &answer["refreshed"]),
        (200, &json!(true)),
        "{answer}"
    );
    let bob = parties.token("bob").await;
    let (status, answer) = parties
        .resolve(json!({"access_token": bob, "session": "s"}))
        .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (409, Some("refresh_mismatch"))
    );
    assert_eq!(parties.sidecar.sidecar().sessions(), 1);
}

#[tokio::test]
async fn a_stream_that_comes_back_is_told_what_was_revoked_meanwhile() {
    let parties = parties().await;
    let mut events = parties.events(None).await;
    for (user, session) in [("alice", "a"), ("bob", "b")] {
        let token = parties.token(user).await;
        parties
            .resolve(json!({"access_token": token, "session": session}))
            .await;
    }
    parties.ban(1).await;
    let first = events.next().await;
    assert_eq!(first.data["session"], "a");
    drop(events);
    parties.ban(2).await;
    support::eventually("bob's session ended", || {
        parties.sidecar.sidecar().sessions() == 0
    })
    .await;
    let mut again = parties.events(Some(&first.id)).await;
    let missed = again.next().await;
    assert_eq!(
        (missed.event.as_str(), &missed.data["session"]),
        ("revoked", &json!("b"))
    );
    let n = |id: &str| id.rsplit_once('-').unwrap().1.parse::<u64>().unwrap();
    assert!(
        n(&missed.id) > n(&first.id),
        "{} after {}",
        missed.id,
        first.id
    );
}

#[tokio::test]
async fn an_expiring_token_asks_for_a_new_one_then_ends_the_session() {
    let parties = Parties::start(
        SidecarConfig {
            reauth_grace: Duration::from_millis(300),
            ..SidecarConfig::default()
        },
        token_resolver_reference_api::demo_users(),
    )
    .await;
    let mut events = parties.events(None).await;
    let api = ApiCalls::new(&parties.api.base_url());
    let cookie = api.session("carol", "carolina").await;
    let short = api
        .token_raw(&cookie, Some(&json!({"expires_in": 1})))
        .await;
    let token = support::json_of(short).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = parties
        .resolve(json!({"access_token": token, "session": "c"}))
        .await;
    assert_eq!(status, 200);
    let reauth = events.next().await;
    assert_eq!(reauth.event, "reauth_required");
    assert_eq!(
        reauth.data,
        json!({"type": "reauth_required", "session": "c", "within_ms": 300})
    );
    let ended = events.next().await;
    assert_eq!(
        (ended.event.as_str(), &ended.data["reason"]),
        ("revoked", &json!("session_expired"))
    );
}

#[tokio::test]
async fn a_forgotten_session_is_not_kept_and_its_id_is_checked() {
    let parties = parties().await;
    let token = parties.token("alice").await;
    parties
        .resolve(json!({"access_token": token, "session": "gone"}))
        .await;
    assert_eq!(parties.sidecar.sidecar().sessions(), 1);
    let delete = |id: &str| {
        parties
            .http
            .delete(parties.url(&format!("/v1/sessions/{id}")))
            .send()
    };
    assert_eq!(delete("gone").await.unwrap().status(), 204);
    assert_eq!(parties.sidecar.sidecar().sessions(), 0);
    assert_eq!(delete("gone").await.unwrap().status(), 204, "idempotent");
    let long = "x".repeat(129);
    assert_eq!(delete(&long).await.unwrap().status(), 400);
}

#[tokio::test]
async fn nginx_may_keep_a_default_answer_no_longer_than_the_resolver_would_and_no_other() {
    use token_resolver::Resolver;
    use token_resolver_sidecar::{NginxCache, Sidecar};

    let api = support::reference_api().await;
    let token = support::login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let resolver = Resolver::builder()
        .default_auth_url(api.base_url())
        .cache_ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let config = SidecarConfig {
        nginx_cache: Some(NginxCache::new("http://127.0.0.1:9/purge").unwrap()),
        ..SidecarConfig::default()
    };
    let sidecar = Sidecar::new(resolver, config)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = format!("http://{}/v1/authorize", sidecar.local_addr());
    let client = reqwest::Client::new();

    let kept = client.get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(kept.status(), 200);
    assert_eq!(
        kept.headers()["x-accel-expires"],
        "10",
        "the resolver's 10 s cache TTL, not nginx's 60 s"
    );
    assert!(kept.headers().get("cache-control").is_none());

    let named = client
        .get(&url)
        .bearer_auth(&token)
        .header("x-auth-url", api.base_url())
        .send()
        .await
        .unwrap();
    assert_eq!(named.status(), 200);
    assert_eq!(
        named.headers()["x-accel-expires"],
        "0",
        "an answer for a named authUrl is not nginx's to keep"
    );
    assert_eq!(named.headers()["cache-control"], "no-store");
}
