//! What anonymous callers can take from the reference API, over real HTTP on
//! loopback: device-id logins are throttled per client address and per device id, sessions
//! and tokens are capped per device, per address and in all with the oldest ended rather than
//! anyone refused, guests expire, and `X-Forwarded-For` is read only from a trusted proxy.

use token_resolver_support as support;

use std::net::IpAddr;
use std::time::Duration;

use support::{cookie_of, json_of, reference_api_with, ApiCalls};
use token_resolver_reference_api::{ApiConfig, RunningApi, SessionLimits, TrustedProxies};

/// A reference API with `limits`, trusting 127.0.0.1 as a proxy.
async fn start(limits: SessionLimits) -> RunningApi {
    reference_api_with(ApiConfig {
        session_limits: limits,
        trusted_proxies: TrustedProxies::parse(&["127.0.0.1"]).unwrap(),
        ..ApiConfig::default()
    })
    .await
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// Logs `device` in (asserting 200): its guest id and session cookie.
async fn guest(api: &ApiCalls, device: &str, forwarded_for: Option<&str>) -> (i64, String) {
    let response = api.device_login(device, forwarded_for).await;
    assert_eq!(response.status(), 200, "login of {device}");
    let cookie = cookie_of(&response);
    (json_of(response).await["id"].as_i64().unwrap(), cookie)
}

/// Whether `token` still resolves at `/api/user`.
async fn resolves(api: &ApiCalls, token: &str) -> bool {
    match api.user(token).await.status().as_u16() {
        200 => true,
        401 => false,
        other => panic!("/api/user answered {other}"),
    }
}

#[tokio::test]
async fn device_logins_past_an_addresss_budget_are_429_and_other_addresses_are_not_held_back() {
    let running = start(SessionLimits {
        device_logins_per_address: 3,
        ..SessionLimits::default()
    })
    .await;
    let base = running.base_url();
    let squatter = ApiCalls::from_address(&base, loopback(2));
    for i in 0..3 {
        guest(&squatter, &format!("device-{i}"), None).await;
    }
    let refused = squatter.device_login("device-3", None).await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    assert_eq!(json_of(refused).await["error"], "too_many_attempts");

    let neighbour = ApiCalls::from_address(&base, loopback(3));
    guest(&neighbour, "device-3", None).await;
    assert_eq!(running.api().held().guests, 4);
}

#[tokio::test]
async fn one_device_id_past_its_budget_is_429_from_any_address() {
    let running = start(SessionLimits {
        device_logins_per_device: 2,
        ..SessionLimits::default()
    })
    .await;
    let base = running.base_url();
    for last in [2, 3] {
        guest(
            &ApiCalls::from_address(&base, loopback(last)),
            "shared",
            None,
        )
        .await;
    }
    let fourth = ApiCalls::from_address(&base, loopback(4));
    assert_eq!(fourth.device_login("shared", None).await.status(), 429);
    guest(&fourth, "another", None).await;
}

#[tokio::test]
async fn a_devices_oldest_session_ends_with_its_tokens_when_it_opens_one_too_many() {
    let running = start(SessionLimits {
        sessions_per_device: 2,
        ..SessionLimits::default()
    })
    .await;
    let api = ApiCalls::from_address(&running.base_url(), loopback(2));
    let (id, first) = guest(&api, "console", None).await;
    let first_token = api.token(&first).await;
    let (_, second) = guest(&api, "console", None).await;
    assert!(resolves(&api, &first_token).await, "two sessions fit");
    let (again, third) = guest(&api, "console", None).await;
    assert_eq!(again, id, "the same guest");
    assert!(
        !resolves(&api, &first_token).await,
        "the oldest session's token ended"
    );
    assert_eq!(api.token_raw(&first, None).await.status(), 401);
    for cookie in [&second, &third] {
        let token = api.token(cookie).await;
        assert!(resolves(&api, &token).await);
    }
    assert_eq!(running.api().held().sessions, 2);
}

#[tokio::test]
async fn an_addresss_guest_sessions_past_its_cap_end_its_own_oldest_not_a_neighbours() {
    let running = start(SessionLimits {
        guest_sessions_per_address: 3,
        ..SessionLimits::default()
    })
    .await;
    let base = running.base_url();
    let neighbour = ApiCalls::from_address(&base, loopback(3));
    let (_, kept) = guest(&neighbour, "neighbour", None).await;
    let kept_token = neighbour.token(&kept).await;

    let crowd = ApiCalls::from_address(&base, loopback(2));
    let (_, oldest) = guest(&crowd, "crowd-0", None).await;
    let oldest_token = crowd.token(&oldest).await;
    for i in 1..6 {
        guest(&crowd, &format!("crowd-{i}"), None).await;
    }
    assert!(!resolves(&crowd, &oldest_token).await, "ended to make room");
    assert!(resolves(&neighbour, &kept_token).await, "another address");
    assert_eq!(running.api().held().sessions, 3 + 1);
}

#[tokio::test]
async fn a_flood_of_guests_from_many_addresses_ends_old_guests_never_a_password_users_session() {
    // Through the trusted proxy, 200 made-up addresses each log a device in and take a token:
    // the global caps keep memory bounded by ending the oldest guests, while alice's session
    // and token, older than all of them, still work and she can log in again.
    let running = start(SessionLimits {
        guest_sessions: 20,
        guest_tokens: 15,
        guests: 25,
        ..SessionLimits::default()
    })
    .await;
    let api = ApiCalls::from_address(&running.base_url(), loopback(1));
    let alice = api.session("alice", "wonderland").await;
    let alice_token = api.token(&alice).await;
    let mut first_guest_token = None;
    for i in 0..200u32 {
        let address = format!("198.51.{}.{}", i / 250, i % 250 + 1);
        let (_, cookie) = guest(&api, &format!("flood-{i}"), Some(&address)).await;
        let token = api.token(&cookie).await;
        first_guest_token.get_or_insert(token);
    }
    let held = running.api().held();
    assert_eq!(held.guests, 25, "{held:?}");
    assert_eq!(held.sessions, 20 + 1, "{held:?}");
    assert_eq!(held.tokens, 15 + 1, "{held:?}");
    assert!(!resolves(&api, &first_guest_token.unwrap()).await);
    assert!(
        resolves(&api, &alice_token).await,
        "a password user's token"
    );
    assert_eq!(api.login("alice", "wonderland").await.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn a_guest_unseen_for_its_lifetime_is_forgotten_and_its_device_comes_back_as_a_new_guest() {
    // The guest's lifetime passes on the paused clock, which the API's store reads.
    let running = start(SessionLimits {
        guest_ttl: Duration::from_millis(300),
        ..SessionLimits::default()
    })
    .await;
    let api = ApiCalls::from_address(&running.base_url(), loopback(2));
    let (first_id, cookie) = guest(&api, "tablet", None).await;
    let token = api.token(&cookie).await;
    tokio::time::advance(Duration::from_millis(400)).await;
    let (second_id, _) = guest(&api, "tablet", None).await;
    assert_ne!(second_id, first_id, "the guest was forgotten");
    assert!(!resolves(&api, &token).await, "with its sessions");
    assert_eq!(running.api().held().guests, 1);
}

#[tokio::test]
async fn forwarded_for_names_the_client_only_when_the_peer_is_a_trusted_proxy() {
    let running = start(SessionLimits {
        device_logins_per_address: 2,
        ..SessionLimits::default()
    })
    .await;
    let base = running.base_url();
    let proxy = ApiCalls::from_address(&base, loopback(1));
    for i in 0..2 {
        guest(&proxy, &format!("p-{i}"), Some("198.51.100.1")).await;
    }
    let over = proxy.device_login("p-2", Some("198.51.100.1")).await;
    assert_eq!(over.status(), 429, "198.51.100.1 spent its budget");
    guest(&proxy, "p-3", Some("198.51.100.2")).await;

    // 127.0.0.2 is not a trusted proxy: what it forwards is ignored and it is counted itself.
    let client = ApiCalls::from_address(&base, loopback(2));
    for i in 0..2 {
        let forged = format!("203.0.113.{i}");
        guest(&client, &format!("c-{i}"), Some(&forged)).await;
    }
    let over = client.device_login("c-2", Some("203.0.113.9")).await;
    assert_eq!(over.status(), 429);
}

#[tokio::test(start_paused = true)]
async fn a_session_whose_guest_was_forgotten_gets_no_token_rather_than_a_dead_one() {
    // The guest's lifetime passes on the paused clock, which the API's store reads.
    let running = start(SessionLimits {
        guest_ttl: Duration::from_millis(300),
        ..SessionLimits::default()
    })
    .await;
    let api = ApiCalls::from_address(&running.base_url(), loopback(2));
    let (_, cookie) = guest(&api, "phone", None).await;
    tokio::time::advance(Duration::from_millis(400)).await;
    let refused = api.token_raw(&cookie, None).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(json_of(refused).await["error"], "invalid_session");
    let held = running.api().held();
    assert_eq!((held.sessions, held.tokens, held.guests), (0, 0, 0));
}
