//! The integrator's side of live revocation and expiry, over real HTTP on
//! loopback: logout and ban tell the game servers (`--notify`, here a recording stand-in for a
//! game server's admin listener), the admin endpoints and their secret, `exp` in `/api/user`
//! and `expires_in` at `/api/access_token`.

use token_resolver_support as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use support::{
    eventually, eventually_async, json_of, reference_api_with, ApiCalls, RevokeRecorder,
};
use token_resolver_reference_api::{
    AdminSecret, ApiConfig, RunningApi, SessionLimits, MAX_TOKENS_PER_SESSION,
};
use tokio::time::Instant;

const SECRET: &str = "s3cret-admin-token-of-32-bytes!!";

/// The API with the demo users, the admin secret, and `targets` to notify.
async fn api_notifying(targets: &[&RevokeRecorder]) -> RunningApi {
    reference_api_with(ApiConfig {
        notify: targets.iter().map(|t| t.base_url()).collect(),
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        ..ApiConfig::default()
    })
    .await
}

fn bearer() -> String {
    format!("Bearer {SECRET}")
}

/// Waits until `recorder` has `n` calls and `running` has nothing left to send: every notice
/// was taken or given up on, so no further call can come (every call comes from an outbox).
async fn settled_calls(
    running: &RunningApi,
    recorder: &RevokeRecorder,
    n: usize,
) -> Vec<support::RevokeCall> {
    eventually(&format!("{n} revoke calls"), || recorder.calls().len() >= n).await;
    eventually("nothing left to send", || {
        running.api().pending_notifications() == 0
    })
    .await;
    recorder.calls()
}

/// When each call reached a recorder, on tokio's clock (paused in the tests of pauses): a
/// recorder's script is called as each call arrives, and marks it.
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<Vec<Instant>>>);

impl Arrivals {
    fn mark(&self) {
        self.0.lock().unwrap().push(Instant::now());
    }

    fn all(&self) -> Vec<Instant> {
        self.0.lock().unwrap().clone()
    }
}

/// Now, in Unix milliseconds.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `body` without its `at`, which must be a time in Unix milliseconds within `made`: when the
/// revocation it tells of was made.
fn dated(body: &Value, made: std::ops::RangeInclusive<u64>) -> Value {
    let at = body["at"]
        .as_u64()
        .unwrap_or_else(|| panic!("no at: {body}"));
    assert!(made.contains(&at), "at {at} outside {made:?}");
    let mut body = body.clone();
    body.as_object_mut().unwrap().remove("at");
    body
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn logout_notifies_the_session_once_by_its_sid_with_the_auth_url_and_the_secret() {
    // Logout tells the game server of the session, once, by the `sid` that `/api/user`
    // answered for its tokens (and not another session's), with this API's base URL as
    // `auth_url`, as POST with the secret; the session's tokens fail at once.
    let recorder = RevokeRecorder::start().await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let ending = api.session("alice", "wonderland").await;
    let staying = api.session("alice", "wonderland").await;
    let live = [api.token(&ending).await, api.token(&ending).await];
    let other = api.token(&staying).await;
    let sid_of = |token: &str| {
        let api = &api;
        let token = token.to_owned();
        async move { json_of(api.user(&token).await).await["sid"].clone() }
    };
    let sid = sid_of(&live[0]).await;
    assert!(sid.is_string(), "{sid}");
    assert_eq!(sid_of(&live[1]).await, sid, "one sid per session");
    assert_ne!(sid_of(&other).await, sid, "another session, another sid");

    let before = unix_ms();
    assert_eq!(api.logout(&ending).await.status(), 204);
    let after = unix_ms();

    let calls = settled_calls(&running, &recorder, 1).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        dated(&calls[0].body, before..=after),
        json!({ "user_id": 1, "session": sid, "auth_url": running.base_url() })
    );
    assert_eq!(calls[0].method, "POST");
    assert_eq!(calls[0].authorization.as_deref(), Some(bearer().as_str()));
    for token in &live {
        assert_eq!(api.user(token).await.status(), 401);
    }
    assert_eq!(api.user(&other).await.status(), 200);
}

#[tokio::test]
async fn a_logout_of_a_session_that_took_every_token_it_may_is_one_notification() {
    // Pins down "a logout costs each node one message": a session that took the most tokens a
    // session may ([`MAX_TOKENS_PER_SESSION`]) logs out, and the game server is called once.
    let recorder = RevokeRecorder::start().await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let login = api
        .post_json("/api/login", &json!({ "device_id": "hoarder" }))
        .await;
    let cookie = support::cookie_of(&login);
    for _ in 0..MAX_TOKENS_PER_SESSION {
        api.token(&cookie).await;
    }
    assert_eq!(api.token_raw(&cookie, None).await.status(), 403);
    assert_eq!(api.logout(&cookie).await.status(), 204);
    let calls = settled_calls(&running, &recorder, 1).await;
    assert_eq!(calls.len(), 1, "one notice, not one per token");
    assert!(calls[0].body["session"].is_string(), "{:?}", calls[0].body);
}

#[tokio::test]
async fn the_public_url_is_the_auth_url_of_every_notification() {
    // With `public_url` set (the API behind a proxy), notifications name it, not the listen
    // address.
    let recorder = RevokeRecorder::start().await;
    let running = reference_api_with(ApiConfig {
        notify: vec![recorder.base_url()],
        public_url: Some("https://auth.example.test".to_owned()),
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        ..ApiConfig::default()
    })
    .await;
    let api = ApiCalls::new(&running.base_url());
    api.admin("ban", Some(&bearer()), r#"{"user_id":2}"#).await;
    let calls = settled_calls(&running, &recorder, 1).await;
    assert_eq!(
        dated(&calls[0].body, 0..=unix_ms()),
        json!({ "user_id": 2, "auth_url": "https://auth.example.test" })
    );
}

#[tokio::test(start_paused = true)]
async fn a_game_server_down_for_longer_than_the_old_tries_still_gets_the_ban() {
    // A game server refusing with 503 for 10 s (longer than the five tries of old): the ban
    // is retried until it is taken, and what is pending shows meanwhile. The 10 s pass on the
    // paused clock, which the notifier's waits read.
    let started = Instant::now();
    let arrivals = Arrivals::default();
    let marks = arrivals.clone();
    let recorder = RevokeRecorder::scripted(move |_| {
        marks.mark();
        let status = if started.elapsed() < Duration::from_secs(10) {
            503
        } else {
            200
        };
        (status, Duration::ZERO)
    })
    .await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let banned = unix_ms();
    api.admin("ban", Some(&bearer()), r#"{"user_id":3}"#).await;
    let made = banned..=unix_ms();
    eventually("a failed try", || !recorder.calls().is_empty()).await;
    assert_eq!(running.api().pending_notifications(), 1);
    // The recorder counts the call before the API has read its answer: wait for the API to
    // show it.
    let target = &target_once(&api, |t| {
        t["last_error"].as_str().is_some_and(|e| e.contains("503"))
    })
    .await;
    assert_eq!(
        (target["bans"].clone(), target["logouts"].clone()),
        (json!(1), json!(0))
    );
    assert!(
        target["last_error"].as_str().unwrap().contains("503"),
        "{target}"
    );
    tokio::time::sleep_until(started + Duration::from_secs(10)).await;
    assert_eq!(
        running.api().pending_notifications(),
        1,
        "still pending, not given up on"
    );
    eventually("the ban is taken", || {
        (arrivals.all().last()).is_some_and(|at| *at >= started + Duration::from_secs(10))
    })
    .await;
    eventually("nothing pending", || {
        running.api().pending_notifications() == 0
    })
    .await;
    assert!(recorder.calls().iter().all(|c| {
        dated(&c.body, made.clone()) == json!({"user_id": 3, "auth_url": running.base_url()})
    }));
}

#[tokio::test]
async fn logout_does_not_wait_for_a_slow_or_dead_game_server() {
    // A game server that answers after 5 s and one that is down: logout still answers at once,
    // and the slow one still gets its call.
    let slow = RevokeRecorder::scripted(|_| (200, Duration::from_secs(5))).await;
    let dead = RevokeRecorder::start().await;
    let dead_url = dead.base_url();
    drop(dead);
    let running = reference_api_with(ApiConfig {
        notify: vec![slow.base_url(), dead_url],
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        ..ApiConfig::default()
    })
    .await;
    let api = ApiCalls::new(&running.base_url());
    let cookie = api.session("bob", "builder").await;
    let token = api.token(&cookie).await;

    let started = Instant::now();
    assert_eq!(api.logout(&cookie).await.status(), 204);
    let took = started.elapsed();
    // Half the slow game server's 5 s: a loaded machine's scheduling stays well under it, a
    // logout that waited for it would not.
    assert!(took < Duration::from_millis(2500), "logout took {took:?}");
    assert_eq!(
        api.user(&token).await.status(),
        401,
        "revoked locally at once"
    );
    eventually("the slow game server is called", || slow.calls().len() == 1).await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_game_server_is_retried_until_it_takes_the_revocation() {
    // Two 503s, then 200: the same revocation arrives three times, with growing pauses (on
    // the paused clock, which the notifier's backoff reads), and no more after it is taken.
    let arrivals = Arrivals::default();
    let marks = arrivals.clone();
    let recorder = RevokeRecorder::scripted(move |n| {
        marks.mark();
        (if n < 2 { 503 } else { 200 }, Duration::ZERO)
    })
    .await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let cookie = api.session("carol", "carolina").await;
    let token = api.token(&cookie).await;
    assert_eq!(api.logout(&cookie).await.status(), 204);

    let calls = settled_calls(&running, &recorder, 3).await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(api.user(&token).await.status() == 401);
    for call in &calls {
        assert_eq!(call.body, calls[0].body, "the same notice each time");
    }
    let at = arrivals.all();
    let first_pause = at[1] - at[0];
    let second_pause = at[2] - at[1];
    assert!(first_pause >= Duration::from_millis(350), "{first_pause:?}");
    assert!(
        second_pause > first_pause,
        "{first_pause:?} then {second_pause:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_game_server_answering_401_404_or_503_has_not_taken_the_ban_yet() {
    // 401 (a secret the game server does not know yet), 404 (an authUrl it does not serve yet,
    // or an admin URL wrong for now) and 503 with Retry-After (pending on that node: its link
    // to the shared tier is down) are not deliveries: the ban stays pending, shown as such,
    // and is tried again (not before the Retry-After, waited out on the paused clock) until a
    // 200 takes it.
    let arrivals = Arrivals::default();
    let marks = arrivals.clone();
    let recorder = RevokeRecorder::scripted_retry_after(move |n| {
        marks.mark();
        match n {
            0 => (401, Duration::ZERO, None),
            1 => (404, Duration::ZERO, None),
            2 => (503, Duration::ZERO, Some(3)),
            _ => (200, Duration::ZERO, None),
        }
    })
    .await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let before = unix_ms();
    api.admin("ban", Some(&bearer()), r#"{"user_id":1}"#).await;
    let after = unix_ms();
    eventually("the 401", || !recorder.calls().is_empty()).await;
    let pending = || async {
        let answer = api.admin_get("notifications", &bearer()).await;
        serde_json::from_str::<Value>(&answer).unwrap()["targets"][0].clone()
    };
    let target = pending().await;
    assert_eq!(
        (target["bans"].clone(), target["delivered"].clone()),
        (json!(1), json!(0)),
        "{target}"
    );
    eventually("the 503", || recorder.calls().len() == 3).await;
    // The recorder counts the call before the API has read its answer: wait for the API to
    // show it (the next try waits out the 503's Retry-After, so it stays the last error).
    let target = target_once(&api, |t| {
        t["last_error"].as_str().is_some_and(|e| e.contains("503"))
    })
    .await;
    assert_eq!(target["bans"], 1, "{target}");

    let calls = settled_calls(&running, &recorder, 4).await;
    assert_eq!(calls.len(), 4, "delivered once, then no more: {calls:?}");
    for call in &calls {
        assert_eq!(
            dated(&call.body, before..=after),
            json!({ "user_id": 1, "auth_url": running.base_url() }),
            "the same ban, made when it was, each time"
        );
    }
    assert_eq!(calls[0].body, calls[3].body);
    let at = arrivals.all();
    let after_503 = at[3] - at[2];
    assert!(
        after_503 >= Duration::from_secs(3),
        "Retry-After honoured: {after_503:?}"
    );
    let target = pending().await;
    assert_eq!(
        (target["bans"].clone(), target["delivered"].clone()),
        (json!(0), json!(1)),
        "{target}"
    );
}

/// The first game server's entry in `GET /api/admin/notifications` once `holds` holds of it;
/// fails after 10 s.
async fn target_once(api: &ApiCalls, holds: impl Fn(&Value) -> bool) -> Value {
    let last = Arc::new(Mutex::new(Value::Null));
    eventually_async("the game server's entry to hold", || {
        let last = last.clone();
        let holds = &holds;
        async move {
            let answer = api.admin_get("notifications", &bearer()).await;
            let target = serde_json::from_str::<Value>(&answer).unwrap()["targets"][0].clone();
            let held = holds(&target);
            *last.lock().unwrap() = target;
            held
        }
    })
    .await;
    let target = last.lock().unwrap().clone();
    target
}

#[tokio::test]
async fn a_game_server_refusing_the_body_is_not_retried() {
    // A 400 (the body is at fault) will not pass later: one call, no retries, counted as
    // dropped rather than delivered.
    let recorder = RevokeRecorder::scripted(|_| (400, Duration::ZERO)).await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let cookie = api.session("alice", "wonderland").await;
    api.token(&cookie).await;
    api.logout(&cookie).await;
    eventually("one call", || recorder.calls().len() == 1).await;
    // Given up on: counted as dropped and out of the outbox, so no try can follow (a retry
    // would have left it pending and not dropped).
    let target = target_once(&api, |t| t["dropped"] == 1).await;
    assert_eq!(recorder.calls().len(), 1);
    assert_eq!(
        (
            target["logouts"].clone(),
            target["dropped"].clone(),
            target["delivered"].clone()
        ),
        (json!(0), json!(1), json!(0)),
        "{target}"
    );
}

#[tokio::test]
async fn ban_revokes_at_once_refuses_login_notifies_and_unban_lets_in() {
    // A ban: the user's tokens fail at once, their sessions end, login answers 403 banned
    // (a wrong password still 401), the game servers get {"user_id"}; unban lets them in.
    let recorder = RevokeRecorder::start().await;
    let running = api_notifying(&[&recorder]).await;
    let api = ApiCalls::new(&running.base_url());
    let cookie = api.session("alice", "wonderland").await;
    let token = api.token(&cookie).await;
    let bob = api.token(&api.session("bob", "builder").await).await;

    let before = unix_ms();
    let response = api.admin("ban", Some(&bearer()), r#"{"user_id":1}"#).await;
    let after = unix_ms();
    assert_eq!(response.status(), 200);
    let body = json_of(response).await;
    assert_eq!(
        (body["user_id"].clone(), body["banned"].clone()),
        (json!(1), json!(true))
    );
    assert_eq!(body["tokens_revoked"], 1);

    assert_eq!(api.user(&token).await.status(), 401);
    assert_eq!(api.token_raw(&cookie, None).await.status(), 401);
    assert_eq!(api.user(&bob).await.status(), 200);
    let response = api.login("alice", "wonderland").await;
    assert_eq!(response.status(), 403);
    assert_eq!(json_of(response).await, json!({ "error": "banned" }));
    assert_eq!(api.login("alice", "wrong").await.status(), 401);

    let calls = settled_calls(&running, &recorder, 1).await;
    assert_eq!(calls.len(), 1);
    assert_eq!(
        dated(&calls[0].body, before..=after),
        json!({ "user_id": 1, "auth_url": running.base_url() })
    );
    assert_eq!(calls[0].authorization.as_deref(), Some(bearer().as_str()));

    let response = api
        .admin("unban", Some(&bearer()), r#"{"user_id":1}"#)
        .await;
    assert_eq!(response.status(), 200);
    let cookie = api.session("alice", "wonderland").await;
    let token = api.token(&cookie).await;
    assert_eq!(api.user(&token).await.status(), 200);
}

#[tokio::test]
async fn a_banned_guest_cannot_log_in_with_its_device() {
    // A ban holds for device-id logins too.
    let running = api_notifying(&[]).await;
    let api = ApiCalls::new(&running.base_url());
    let response = api
        .post_json("/api/login", &json!({ "device_id": "d-1" }))
        .await;
    let id = json_of(response).await["id"].as_i64().unwrap();
    let response = api
        .admin(
            "ban",
            Some(&bearer()),
            &json!({ "user_id": id }).to_string(),
        )
        .await;
    assert_eq!(response.status(), 200);
    let response = api
        .post_json("/api/login", &json!({ "device_id": "d-1" }))
        .await;
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn admin_endpoints_need_the_secret() {
    // A wrong, missing or non-Bearer credential is 401 on both admin endpoints, and bans no one.
    let running = api_notifying(&[]).await;
    let api = ApiCalls::new(&running.base_url());
    let token = api.token(&api.session("alice", "wonderland").await).await;
    let wrong_same_length = format!("Bearer {}", "x".repeat(SECRET.len()));
    let prefix = format!("Bearer {}", &SECRET[..SECRET.len() - 1]);
    let basic = format!("Basic {SECRET}");
    for action in ["ban", "unban"] {
        for authorization in [
            None,
            Some("Bearer "),
            Some(wrong_same_length.as_str()),
            Some(prefix.as_str()),
            Some(basic.as_str()),
        ] {
            let response = api.admin(action, authorization, r#"{"user_id":1}"#).await;
            assert_eq!(response.status(), 401, "{action} {authorization:?}");
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
        }
    }
    assert_eq!(api.user(&token).await.status(), 200);
    assert_eq!(api.login("alice", "wonderland").await.status(), 200);
}

#[tokio::test]
async fn admin_endpoints_are_404_without_a_secret() {
    // With no admin secret configured the admin endpoints do not exist, whatever is sent.
    let running = reference_api_with(ApiConfig::default()).await;
    let api = ApiCalls::new(&running.base_url());
    for action in ["ban", "unban"] {
        let response = api.admin(action, Some(&bearer()), r#"{"user_id":1}"#).await;
        assert_eq!(response.status(), 404, "{action}");
    }
}

#[tokio::test]
async fn admin_bad_body_is_400_naming_the_field() {
    // A body that is not {"user_id": <integer>} is 400 invalid_request naming the field.
    let running = api_notifying(&[]).await;
    let api = ApiCalls::new(&running.base_url());
    for (body, field) in [
        ("", "user_id"),
        ("not json", "user_id"),
        ("[]", "user_id"),
        ("{}", "user_id"),
        (r#"{"user_id":"1"}"#, "user_id"),
        (r#"{"user_id":1.5}"#, "user_id"),
        (r#"{"user_id":null}"#, "user_id"),
        (r#"{"user_id":1,"all":true}"#, "all"),
    ] {
        for action in ["ban", "unban"] {
            let response = api.admin(action, Some(&bearer()), body).await;
            assert_eq!(response.status(), 400, "{action} {body}");
            let answer = json_of(response).await;
            assert_eq!(answer["error"], "invalid_request", "{body}");
            assert_eq!(answer["field"], field, "{body}");
        }
    }
}

#[tokio::test]
async fn user_answers_exp_in_unix_seconds() {
    // /api/user answers `exp`, the token's expiry in whole Unix seconds (RFC 7662).
    let running = reference_api_with(ApiConfig::default()).await;
    let api = ApiCalls::new(&running.base_url());
    let before = unix_now();
    let token = api.token(&api.session("bob", "builder").await).await;
    let body = json_of(api.user(&token).await).await;
    let exp = body["exp"].as_u64().expect("an integer exp");
    assert!(
        (before + 3599..=unix_now() + 3600).contains(&exp),
        "exp {exp}, now {before}"
    );
    assert_eq!(
        (body["id"].clone(), body["name"].clone()),
        (json!(2), json!("Bob"))
    );
}

#[tokio::test(start_paused = true)]
async fn expires_in_asks_for_a_shorter_token_capped_at_the_ttl() {
    // {"expires_in": 2} gives a token that lives 2 s (exp and max-age say so, and it stops,
    // on the paused clock the API's store reads); more than the API's token lifetime is cut
    // to it.
    let running = reference_api_with(ApiConfig::default()).await;
    let api = ApiCalls::new(&running.base_url());
    let cookie = api.session("carol", "carolina").await;
    let before = unix_now();
    let response = api
        .token_raw(&cookie, Some(&json!({ "expires_in": 2 })))
        .await;
    let answer = json_of(response).await;
    assert_eq!(answer["expires_in"], 2);
    let token = answer["access_token"].as_str().unwrap().to_owned();
    let response = api.user(&token).await;
    let max_age = response.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        max_age.ends_with("max-age=1") || max_age.ends_with("max-age=2"),
        "{max_age}"
    );
    let exp = json_of(response).await["exp"].as_u64().unwrap();
    assert!(
        (before + 1..=unix_now() + 2).contains(&exp),
        "exp {exp}, now {before}"
    );
    tokio::time::advance(Duration::from_millis(2100)).await;
    assert_eq!(api.user(&token).await.status(), 401);

    let answer = json_of(
        api.token_raw(&cookie, Some(&json!({ "expires_in": 999_999 })))
            .await,
    )
    .await;
    assert_eq!(answer["expires_in"], 3600);
    let answer = json_of(api.token_raw(&cookie, Some(&json!({}))).await).await;
    assert_eq!(answer["expires_in"], 3600);
}

#[tokio::test]
async fn bad_expires_in_is_400_naming_the_field() {
    // expires_in must be a whole number of seconds, at least 1; other fields are refused, and
    // a body must be JSON.
    let running = reference_api_with(ApiConfig::default()).await;
    let api = ApiCalls::new(&running.base_url());
    let cookie = api.session("alice", "wonderland").await;
    for (body, field) in [
        (json!({ "expires_in": 0 }), "expires_in"),
        (json!({ "expires_in": -5 }), "expires_in"),
        (json!({ "expires_in": 1.5 }), "expires_in"),
        (json!({ "expires_in": "60" }), "expires_in"),
        (json!([60]), "expires_in"),
        (json!({ "expires_in": 60, "scope": "x" }), "scope"),
    ] {
        let response = api.token_raw(&cookie, Some(&body)).await;
        assert_eq!(response.status(), 400, "{body}");
        assert_eq!(json_of(response).await["field"], field, "{body}");
    }
    let response = api
        .client
        .post(api.url("/api/access_token"))
        .header("cookie", &cookie)
        .header("content-type", "text/plain")
        .body(r#"{"expires_in":5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
}

#[test]
fn notify_needs_a_secret_and_admin_base_urls() {
    // ApiConfig refuses notify targets without a secret, or that are not http(s) base URLs;
    // a short or unprintable secret is refused; Debug never shows the secret.
    let with = |notify: &str, secret: Option<AdminSecret>| ApiConfig {
        notify: vec![notify.to_owned()],
        admin_secret: secret,
        ..ApiConfig::default()
    };
    let secret = || Some(AdminSecret::new(SECRET).unwrap());
    let error = with("http://10.0.0.5:9350", None).validate().unwrap_err();
    assert!(
        error.to_string().contains("TOKEN_RESOLVER_ADMIN_TOKEN"),
        "{error}"
    );
    for bad in ["ftp://h", "not a url", "http://h/?q=1", "http://u:p@h"] {
        assert!(with(bad, secret()).validate().is_err(), "{bad}");
    }
    assert!(with("https://gs.internal:9350/base/", secret())
        .validate()
        .is_ok());
    let error = AdminSecret::new("short").unwrap_err();
    assert!(error.to_string().contains("at least 16"), "{error}");
    assert!(AdminSecret::new("sixteen bytes!! with space").is_err());
    let printed = format!("{:?}", with("http://h", secret()));
    assert!(
        !printed.contains(SECRET) && printed.contains("[redacted]"),
        "{printed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_game_server_that_is_down_does_not_take_the_notices_of_the_others() {
    // Pins down one outbox per target: a game server that never answers holds up its own
    // notifications only, and one that is up is told of every logout.
    let down = RevokeRecorder::scripted(|_| (200, Duration::from_secs(120))).await;
    let up = RevokeRecorder::start().await;
    let logouts = 300;
    let running = reference_api_with(ApiConfig {
        notify: vec![down.base_url(), up.base_url()],
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        session_limits: SessionLimits {
            device_logins_per_address: logouts as u32,
            ..SessionLimits::default()
        },
        ..ApiConfig::default()
    })
    .await;
    let api = ApiCalls::new(&running.base_url());
    for i in 0..logouts {
        let login = api
            .post_json("/api/login", &json!({ "device_id": format!("device-{i}") }))
            .await;
        assert_eq!(login.status(), 200);
        let cookie = support::cookie_of(&login);
        api.token(&cookie).await;
        assert_eq!(api.logout(&cookie).await.status(), 204);
    }
    eventually(
        "the game server that is up was told of every logout",
        || up.calls().len() == logouts,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_logout_after_exp_is_told_while_within_the_game_servers_clock_skew() {
    // Issue 34: a game server honours a token until its `exp` plus its clock skew, so the
    // logout of a session whose every token passed `exp` less than `notify_expired_for` ago is
    // still told (it was not: only sessions with a live token were); one whose tokens expired
    // longer ago than that is not.
    let recorder = RevokeRecorder::start().await;
    let running = reference_api_with(ApiConfig {
        notify: vec![recorder.base_url()],
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        notify_expired_for: Duration::from_secs(30),
        ..ApiConfig::default()
    })
    .await;
    let api = ApiCalls::new(&running.base_url());
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let cookie = api.session("carol", "carolina").await;
        let answer = json_of(
            api.token_raw(&cookie, Some(&json!({ "expires_in": 2 })))
                .await,
        )
        .await;
        let token = answer["access_token"].as_str().unwrap().to_owned();
        let sid = json_of(api.user(&token).await).await["sid"].clone();
        sessions.push((cookie, token, sid));
    }
    // 10 s past exp: within the skew of a game server (5 s in the chaos run, 30 s by default).
    tokio::time::advance(Duration::from_secs(12)).await;
    // A new client: the API closed the idle kept-alive connections meanwhile (10 s).
    let api = ApiCalls::new(&running.base_url());
    let (cookie, token, sid) = &sessions[0];
    assert_eq!(api.user(token).await.status(), 401, "expired at the API");
    assert_eq!(api.logout(cookie).await.status(), 204);
    let calls = settled_calls(&running, &recorder, 1).await;
    assert_eq!(calls[0].body["session"], *sid, "{calls:?}");

    // 40 s past exp: beyond any game server's skew here, so nothing is sent.
    tokio::time::advance(Duration::from_secs(30)).await;
    let api = ApiCalls::new(&running.base_url());
    assert_eq!(api.logout(&sessions[1].0).await.status(), 204);
    assert_eq!(running.api().pending_notifications(), 0, "nothing queued");
    assert_eq!(recorder.calls().len(), 1, "{:?}", recorder.calls());
}

/// How long [`SlowSharedTier`] holds its one slow notice: under the notifier's 2 s per try, and
/// long enough that a logout queued behind it is told apart from one that went at once, with
/// room on both sides for a loaded machine.
const HOLD: Duration = Duration::from_millis(1500);

/// A game server's admin listener whose shared tier is slow for one session's logout: that
/// notice is held [`HOLD`] and answered as a node answers then (503, `"pending": true`: applied
/// here, not yet in the shared tier, `Retry-After: 1`); every other call, and that one again,
/// is taken at once. Each call is recorded with when it arrived.
struct SlowSharedTier {
    base_url: String,
    calls: Arc<Mutex<Vec<(Instant, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowSharedTier {
    async fn start(slow_session: Arc<Mutex<Option<Value>>>) -> Self {
        use axum::http::{header, StatusCode};
        use axum::response::IntoResponse;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let held_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let router = axum::Router::new().route(
            "/admin/revoke",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (seen, slow_session, held_once) =
                    (seen.clone(), slow_session.clone(), held_once.clone());
                async move {
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    seen.lock().unwrap().push((Instant::now(), body.clone()));
                    let slow = slow_session.lock().unwrap().clone();
                    if slow.is_some_and(|sid| body["session"] == sid)
                        && !held_once.swap(true, std::sync::atomic::Ordering::SeqCst)
                    {
                        tokio::time::sleep(HOLD).await;
                        let pending = json!({
                            "error": "revocation_pending", "pending": true, "sessions_closed": 1
                        });
                        return (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(header::RETRY_AFTER, "1")],
                            axum::Json(pending),
                        )
                            .into_response();
                    }
                    axum::Json(json!({ "sessions_closed": 1 })).into_response()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        SlowSharedTier {
            base_url,
            calls,
            task,
        }
    }

    /// When the first call naming `sid` arrived, if one did.
    fn arrived(&self, sid: &Value) -> Option<Instant> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .find(|(_, body)| body["session"] == *sid)
            .map(|(at, _)| *at)
    }
}

impl Drop for SlowSharedTier {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn a_logout_is_not_held_behind_one_a_game_server_holds_for_its_shared_tier() {
    // Issue 34 (seed 2027's late notices): a node answers /admin/revoke only once its shared
    // tier took the revocation, or 503 pending after 1 s, and the notifier then waited its
    // Retry-After: every logout queued behind reached the node 1-2 s late although the node
    // had closed its sessions at once. Now the next logout goes while that one is held, and
    // the held one is still retried until taken. Real time: the node's hold is the scenario.
    let slow_session = Arc::new(Mutex::new(None));
    let node = SlowSharedTier::start(slow_session.clone()).await;
    let running = reference_api_with(ApiConfig {
        notify: vec![node.base_url.clone()],
        admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
        ..ApiConfig::default()
    })
    .await;
    let api = ApiCalls::new(&running.base_url());
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let cookie = api.session("alice", "wonderland").await;
        let token = api.token(&cookie).await;
        let sid = json_of(api.user(&token).await).await["sid"].clone();
        sessions.push((cookie, sid));
    }
    let (held, next) = (&sessions[0], &sessions[1]);
    *slow_session.lock().unwrap() = Some(held.1.clone());

    assert_eq!(api.logout(&held.0).await.status(), 204);
    eventually("the held logout at the node", || {
        node.arrived(&held.1).is_some()
    })
    .await;
    let logged_out = Instant::now();
    assert_eq!(api.logout(&next.0).await.status(), 204);
    eventually("the next logout at the node", || {
        node.arrived(&next.1).is_some()
    })
    .await;
    let late = node.arrived(&next.1).unwrap() - logged_out;
    assert!(
        // Half a second under the held one's 1.5 s, and a second over what it takes at once.
        late < Duration::from_secs(1),
        "the next logout reached the node {late:?} after it was made (the held one takes \
         {HOLD:?}, then its Retry-After 1 s)"
    );

    eventually("nothing left to send", || {
        running.api().pending_notifications() == 0
    })
    .await;
    let calls = node.calls.lock().unwrap().clone();
    let tries = |sid: &Value| calls.iter().filter(|(_, b)| b["session"] == *sid).count();
    assert_eq!((tries(&held.1), tries(&next.1)), (2, 1), "{calls:?}");
}
