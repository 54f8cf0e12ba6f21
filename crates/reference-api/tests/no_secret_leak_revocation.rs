//! The admin secret, the revoked tokens, session ids and passwords never appear in logs: the
//! revocation paths (logout and ban notifying game servers, one failing and retried, one
//! down; a wrong admin secret; throttled logins) run under a TRACE subscriber that captures
//! everything, which is then searched for them.

use token_resolver_support as support;

use std::time::Duration;

use serde_json::json;
use support::{cookie_of, eventually, reference_api_with, ApiCalls, RevokeRecorder};
use token_resolver_reference_api::{AdminSecret, ApiConfig};

const SECRET: &str = "leak-test-admin-secret-5f2b9c0e";
const GUESS: &str = "guessed-password-7d1e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_appear_in_no_log() {
    // Pins down that the revocation paths log what they did and never a secret they handled.
    let (logs, _metrics) = support::capture_everything();
    let recorder =
        RevokeRecorder::scripted(|n| (if n == 0 { 503 } else { 200 }, Duration::ZERO)).await;
    let down = RevokeRecorder::start().await;
    let down_url = down.base_url();
    drop(down);
    let config = ApiConfig {
        notify: vec![recorder.base_url(), down_url],
        notify_retry_for: Duration::from_secs(2),
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        ..ApiConfig::default()
    };
    let printed_config = format!("{config:?}");
    let running = reference_api_with(config).await;
    let secrets = walk_the_revocation_paths(&ApiCalls::new(&running.base_url())).await;

    // The logout (tried twice) and the ban reach the recorder; the target that is down is
    // given up on after the retry window (2 s), and that warning is searched too, as is what
    // the admin endpoint shows of the pending notifications.
    eventually("3 revoke calls", || recorder.calls().len() >= 3).await;
    eventually("the unreachable game server to be given up on", || {
        logs.text().contains("game server unreachable")
    })
    .await;

    let pending = ApiCalls::new(&running.base_url())
        .admin_get("notifications", &format!("Bearer {SECRET}"))
        .await;
    let logs = logs.text();
    assert!(
        logs.contains("revocation"),
        "the capture works: {logs:.500}"
    );
    assert!(logs.contains("user banned"), "{logs:.500}");
    for secret in &secrets {
        assert!(!logs.contains(secret), "{secret:.6}… found in the logs");
        assert!(!printed_config.contains(secret), "in the config's Debug");
        assert!(!pending.contains(secret), "in the pending notifications");
        assert!(
            !format!("{:?}", running.api()).contains(secret),
            "in the API's Debug"
        );
    }
}

/// A logout (two tokens, one notice), a ban refused for a wrong secret then made, a password guessed until
/// throttled, and a short-lived token: every secret these handled.
async fn walk_the_revocation_paths(api: &ApiCalls) -> Vec<String> {
    let login = api.login("alice", "wonderland").await;
    let cookie = cookie_of(&login);
    let tokens = [api.token(&cookie).await, api.token(&cookie).await];
    assert_eq!(api.logout(&cookie).await.status(), 204);
    let bob_cookie = api.session("bob", "builder").await;
    let bob_token = api.token(&bob_cookie).await;
    let bearer = format!("Bearer {SECRET}");
    let wrong = format!("Bearer {}", SECRET.to_uppercase());
    assert_eq!(
        api.admin("ban", Some(&wrong), r#"{"user_id":2}"#)
            .await
            .status(),
        401
    );
    assert_eq!(
        api.admin("ban", Some(&bearer), r#"{"user_id":2}"#)
            .await
            .status(),
        200
    );
    for _ in 0..6 {
        api.login("carol", GUESS).await;
    }
    let again = api.session("alice", "wonderland").await;
    let short = api
        .token_raw(&again, Some(&json!({ "expires_in": 5 })))
        .await;
    assert_eq!(short.status(), 200);
    let session = cookie.trim_start_matches("session=");
    let bob_session = bob_cookie.trim_start_matches("session=");
    let mut secrets: Vec<String> = [SECRET, GUESS, "wonderland", "builder", session, bob_session]
        .map(str::to_owned)
        .into();
    secrets.push(bob_token);
    secrets.extend(tokens);
    secrets
}
