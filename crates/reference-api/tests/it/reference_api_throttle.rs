//! The reference login resists guessing, over real HTTP on loopback: failed logins
//! throttled per username and per client address (the connection's, never a header's), a
//! throttled attempt checks no password, and password checks are bounded.

use token_resolver_support as support;

use std::net::IpAddr;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use support::{json_of, reference_api_with, ApiCalls};
use token_resolver_reference_api::{ApiConfig, LoginLimits};

async fn start(limits: LoginLimits) -> token_resolver_reference_api::RunningApi {
    reference_api_with(ApiConfig {
        login_limits: limits,
        ..ApiConfig::default()
    })
    .await
}

/// The number in a `Retry-After` header.
fn retry_after(response: &reqwest::Response) -> u64 {
    response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

#[tokio::test]
async fn sixth_failure_for_a_username_is_429_and_checks_no_password() {
    // Five wrong passwords are each checked and answered 401; the sixth attempt (even with the
    // right password) is 429 too_many_attempts with Retry-After, and runs no argon2.
    let running = start(LoginLimits::default()).await;
    let api = ApiCalls::new(&running.base_url());
    for i in 0..5 {
        let response = api.login("alice", &format!("guess-{i}")).await;
        assert_eq!(response.status(), 401, "guess {i}");
    }
    assert_eq!(running.api().password_verifications(), 5);
    for password in ["guess-5", "wonderland"] {
        let response = api.login("alice", password).await;
        assert_eq!(response.status(), 429, "{password}");
        let wait = retry_after(&response);
        assert!((1..=5).contains(&wait), "Retry-After {wait}");
        assert_eq!(json_of(response).await["error"], "too_many_attempts");
    }
    assert_eq!(running.api().password_verifications(), 5);
}

#[tokio::test]
async fn a_success_resets_the_usernames_count() {
    // Four failures, a success, then four more failures are all checked: the success cleared
    // the count; the fifth after it locks again.
    let running = start(LoginLimits::default()).await;
    let api = ApiCalls::new(&running.base_url());
    for _ in 0..4 {
        assert_eq!(api.login("bob", "wrong").await.status(), 401);
    }
    assert_eq!(api.login("bob", "builder").await.status(), 200);
    for _ in 0..5 {
        assert_eq!(api.login("bob", "wrong").await.status(), 401);
    }
    assert_eq!(api.login("bob", "builder").await.status(), 429);
    assert_eq!(running.api().password_verifications(), 10);
}

#[tokio::test]
async fn another_username_is_not_throttled_by_the_firsts_failures() {
    // alice locked out does not lock bob (below the address's own limit).
    let running = start(LoginLimits::default()).await;
    let api = ApiCalls::new(&running.base_url());
    for _ in 0..5 {
        api.login("alice", "wrong").await;
    }
    assert_eq!(api.login("alice", "wonderland").await.status(), 429);
    assert_eq!(api.login("bob", "wrong").await.status(), 401);
    assert_eq!(api.login("bob", "builder").await.status(), 200);
}

#[tokio::test]
async fn one_address_is_throttled_across_usernames_and_forwarded_for_is_ignored() {
    // Twenty failures from 127.0.0.1 over twenty usernames lock that address for any
    // username, whatever X-Forwarded-For claims; 127.0.0.2 is another address, not locked.
    let running = start(LoginLimits::default()).await;
    let base = running.base_url();
    let first = ApiCalls::from_address(&base, loopback(1));
    for i in 0..20 {
        let response = first.login(&format!("user-{i}"), "wrong").await;
        assert_eq!(response.status(), 401, "user-{i}");
    }
    let response = first.login("bob", "builder").await;
    assert_eq!(response.status(), 429);
    let forwarded = first
        .client
        .post(first.url("/api/login"))
        .header("content-type", "application/json")
        .header("x-forwarded-for", "203.0.113.9")
        .body(json!({ "username": "bob", "password": "builder" }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(forwarded.status(), 429);
    assert_eq!(running.api().password_verifications(), 20);

    let second = ApiCalls::from_address(&base, loopback(2));
    assert_eq!(second.login("bob", "builder").await.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn the_lockout_doubles_with_each_further_failure_up_to_the_cap() {
    // With a 1 s first lockout capped at 2 s: Retry-After 1 at the limit, 2 after one more
    // failure, and still 2 after another. Each lockout is waited out on the paused clock,
    // which the throttle reads.
    let running = start(LoginLimits {
        first_lockout: Duration::from_secs(1),
        max_lockout: Duration::from_secs(2),
        ..LoginLimits::default()
    })
    .await;
    let api = ApiCalls::new(&running.base_url());
    for _ in 0..5 {
        api.login("carol", "wrong").await;
    }
    let mut waits = Vec::new();
    for _ in 0..3 {
        let response = api.login("carol", "wrong").await;
        assert_eq!(response.status(), 429);
        let wait = retry_after(&response);
        waits.push(wait);
        tokio::time::advance(Duration::from_secs(wait) + Duration::from_millis(100)).await;
        assert_eq!(api.login("carol", "wrong").await.status(), 401);
    }
    assert_eq!(waits, [1, 2, 2]);
}

#[tokio::test]
async fn concurrent_guesses_for_one_username_check_five_passwords() {
    // The attacker this guards against: 64 guesses at once for one username are answered with five
    // password checks (401) and 59 refusals (429), not 64 argon2 runs.
    let running = start(LoginLimits::default()).await;
    let base = running.base_url();
    let guesses = (0..64).map(|i| {
        let api = ApiCalls::new(&base);
        async move {
            api.login("alice", &format!("guess-{i}"))
                .await
                .status()
                .as_u16()
        }
    });
    let statuses = join_all(guesses).await;
    let checked = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((checked, refused), (5, 59), "{statuses:?}");
    assert_eq!(running.api().password_verifications(), 5);
}

#[tokio::test]
async fn password_checks_past_the_queue_are_503_with_retry_after() {
    // One check at a time and no queue: of 16 logins at once (16 usernames, 16 addresses) some
    // are refused 503 overloaded with Retry-After, having run no argon2 and counted no failure.
    let running = start(LoginLimits {
        concurrent_verifications: 1,
        queued_verifications: 0,
        ..LoginLimits::default()
    })
    .await;
    let base = running.base_url();
    let logins = (0..16u8).map(|i| {
        let api = ApiCalls::from_address(&base, loopback(10 + i));
        async move {
            let response = api.login(&format!("user-{i}"), "wrong").await;
            let retry = response.headers().get("retry-after").cloned();
            (response.status().as_u16(), retry)
        }
    });
    let answers = join_all(logins).await;
    let busy: Vec<_> = answers.iter().filter(|(s, _)| *s == 503).collect();
    let checked = answers.iter().filter(|(s, _)| *s == 401).count() as u64;
    assert!(!busy.is_empty(), "{answers:?}");
    assert!(busy
        .iter()
        .all(|(_, retry)| retry.as_ref().is_some_and(|r| r == "1")));
    assert_eq!(checked + busy.len() as u64, 16, "{answers:?}");
    assert_eq!(running.api().password_verifications(), checked);
}
