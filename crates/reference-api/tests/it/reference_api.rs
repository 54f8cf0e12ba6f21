//! The reference integrator web API, driven over real HTTP on 127.0.0.1:0.

use std::time::Duration;

use reqwest::header::{
    ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, COOKIE, SET_COOKIE, WWW_AUTHENTICATE,
};
use reqwest::{Client, Response, StatusCode};
use serde_json::{json, Value};
use token_resolver_reference_api::{
    demo_users, ApiConfig, ApiConfigError, ApiUser, ReferenceApi, RunningApi,
};

const PATHS: [&str; 6] = [
    "/api/login",
    "/api/access_token",
    "/api/user",
    "/api/logout",
    "/api/admin/ban",
    "/api/admin/unban",
];

/// Starts the API with the demo users and `token_ttl` on a free loopback port.
async fn start(token_ttl: Duration) -> RunningApi {
    let config = ApiConfig {
        token_ttl,
        ..ApiConfig::default()
    };
    token_resolver_support::reference_api_with(config).await
}

/// Starts the API with the defaults (demo users, 3600 s tokens).
async fn start_default() -> RunningApi {
    start(Duration::from_secs(3600)).await
}

/// A test client against `api`; no cookie store: cookies are passed by hand.
struct Api<'a> {
    client: Client,
    running: &'a RunningApi,
}

impl<'a> Api<'a> {
    fn new(running: &'a RunningApi) -> Self {
        Self {
            client: Client::new(),
            running,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.running.base_url())
    }

    async fn login_raw(&self, body: Value) -> Response {
        self.client
            .post(self.url("/api/login"))
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// Logs in and returns the `Cookie` header value to send back and the answer's body.
    async fn login(&self, body: Value) -> (String, Value) {
        let response = self.login_raw(body).await;
        assert_eq!(response.status(), StatusCode::OK);
        let set_cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        (cookie, json_body(response).await)
    }

    async fn password_login(&self, username: &str, password: &str) -> String {
        self.login(json!({ "username": username, "password": password }))
            .await
            .0
    }

    async fn access_token_raw(&self, cookie: Option<&str>) -> Response {
        let mut request = self.client.post(self.url("/api/access_token"));
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send().await.unwrap()
    }

    async fn access_token(&self, cookie: &str) -> String {
        let response = self.access_token_raw(Some(cookie)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = json_body(response).await;
        body["access_token"].as_str().unwrap().to_owned()
    }

    async fn user_with(&self, authorization: Option<&str>) -> Response {
        let mut request = self.client.post(self.url("/api/user"));
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        request.send().await.unwrap()
    }

    async fn user(&self, token: &str) -> Response {
        self.user_with(Some(&format!("Bearer {token}"))).await
    }

    async fn logout(&self, cookie: Option<&str>) -> Response {
        let mut request = self.client.post(self.url("/api/logout"));
        if let Some(cookie) = cookie {
            request = request.header(COOKIE, cookie);
        }
        request.send().await.unwrap()
    }
}

fn header(response: &Response, name: reqwest::header::HeaderName) -> &str {
    response.headers()[name].to_str().unwrap()
}

/// The `N` of a `Cache-Control: private, max-age=N`.
fn max_age(response: &Response) -> u64 {
    let value = header(response, CACHE_CONTROL);
    assert!(value.starts_with("private, "), "{value}");
    value.rsplit("max-age=").next().unwrap().parse().unwrap()
}

/// The body parsed as JSON (the crate's reqwest has no `json` feature).
async fn json_body(response: Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

async fn error_code(response: Response) -> String {
    let body: Value = json_body(response).await;
    body["error"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn password_login_token_and_user_works() {
    // The documented flow: password login, then a token, then /api/user answers that user, cacheably.
    let running = start_default().await;
    let api = Api::new(&running);
    let (cookie, body) = api
        .login(json!({ "username": "bob", "password": "builder" }))
        .await;
    assert_eq!(body, json!({ "id": 2, "name": "Bob" }));
    let token = api.access_token(&cookie).await;
    let response = api.user(&token).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(max_age(&response) <= 60);
    let mut answer = json_body(response).await;
    assert!(answer["exp"].is_u64(), "{answer}");
    let sid = answer["sid"].as_str().expect("the session's public id");
    assert!(sid.len() == 22 && !cookie.contains(sid), "{sid}");
    answer.as_object_mut().unwrap().remove("exp");
    answer.as_object_mut().unwrap().remove("sid");
    assert_eq!(answer, json!({ "id": 2, "name": "Bob" }));
}

#[tokio::test]
async fn login_sets_an_http_only_strict_session_cookie() {
    // The session cookie is HttpOnly, SameSite=Strict, scoped to /api, with 128+ random bits.
    let running = start_default().await;
    let response = Api::new(&running)
        .login_raw(json!({ "username": "alice", "password": "wonderland" }))
        .await;
    let cookie = header(&response, SET_COOKIE);
    let mut parts = cookie.split("; ");
    let value = parts.next().unwrap().strip_prefix("session=").unwrap();
    assert!(value.len() >= 22, "{value}");
    let attributes: Vec<&str> = parts.collect();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/api"] {
        assert!(attributes.contains(&attribute), "{cookie}");
    }
}

#[tokio::test]
async fn wrong_password_is_401_invalid_credentials() {
    // A wrong password, and an unknown username, both get 401 invalid_credentials and no cookie.
    let running = start_default().await;
    let api = Api::new(&running);
    for body in [
        json!({ "username": "alice", "password": "builder" }),
        json!({ "username": "mallory", "password": "wonderland" }),
    ] {
        let response = api.login_raw(body).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers().get(SET_COOKIE).is_none());
        assert_eq!(error_code(response).await, "invalid_credentials");
    }
}

#[tokio::test]
async fn malformed_login_body_is_400_invalid_request() {
    // A body that is not a login request gets a JSON 400, not axum's plain-text rejection.
    let running = start_default().await;
    let api = Api::new(&running);
    for body in [
        "{not json",
        "[]",
        r#"{"username":"alice"}"#,
        r#"{"username":"alice","password":"wonderland","device_id":"d"}"#,
        r#"{"username":1,"password":"wonderland"}"#,
    ] {
        let response = api
            .client
            .post(api.url("/api/login"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error_code(response).await, "invalid_request", "{body}");
    }
}

#[tokio::test]
async fn login_body_without_json_content_type_is_415_invalid_request() {
    // A login body must be sent as application/json (a cross-site form cannot forge one).
    let running = start_default().await;
    let api = Api::new(&running);
    let response = api
        .client
        .post(api.url("/api/login"))
        .header(CONTENT_TYPE, "text/plain")
        .body(r#"{"device_id":"d"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(error_code(response).await, "invalid_request");
}

#[tokio::test]
async fn login_body_over_4_kib_is_refused() {
    // Request bodies are limited to 4 KiB.
    let running = start_default().await;
    let api = Api::new(&running);
    let response = api
        .login_raw(json!({ "device_id": "x".repeat(5000) }))
        .await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(response).await, "request_too_large");
}

#[tokio::test]
async fn device_id_login_creates_a_guest_and_finds_it_again() {
    // A new device id creates a guest with a fresh id; the same device id logs into that guest.
    let running = start_default().await;
    let api = Api::new(&running);
    let (_, first) = api.login(json!({ "device_id": "device-A" })).await;
    let id = first["id"].as_i64().unwrap();
    assert!(id > 3, "guest id {id} collides with a password user");
    assert_eq!(first["name"], format!("Guest-{id}"));
    let (cookie, again) = api.login(json!({ "device_id": "device-A" })).await;
    assert_eq!(again, first);
    let (_, other) = api.login(json!({ "device_id": "device-B" })).await;
    assert_ne!(other["id"], first["id"]);

    let token = api.access_token(&cookie).await;
    let response = api.user(&token).await;
    let answer = json_body(response).await;
    assert_eq!(
        (&answer["id"], &answer["name"]),
        (&first["id"], &first["name"])
    );
}

#[tokio::test]
async fn invalid_device_id_is_400_invalid_request() {
    // A device id must be 1 to 128 printable ASCII characters.
    let running = start_default().await;
    let api = Api::new(&running);
    for device_id in [
        String::new(),
        "x".repeat(129),
        "caf\u{e9}".into(),
        "a\nb".into(),
    ] {
        let response = api.login_raw(json!({ "device_id": device_id })).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{device_id:?}");
        assert_eq!(error_code(response).await, "invalid_request");
    }
    let (_, body) = api.login(json!({ "device_id": "x".repeat(128) })).await;
    assert!(body["id"].is_i64());
}

#[tokio::test]
async fn access_token_without_session_is_401() {
    // No cookie, or a cookie that is no session, gets 401 invalid_session.
    let running = start_default().await;
    let api = Api::new(&running);
    for cookie in [None, Some("session=forged"), Some("other=1")] {
        let response = api.access_token_raw(cookie).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{cookie:?}");
        assert_eq!(error_code(response).await, "invalid_session");
    }
}

#[tokio::test]
async fn access_token_is_no_store_and_found_among_other_cookies() {
    // The token answer is never cached, and the session cookie is found among others.
    let running = start_default().await;
    let api = Api::new(&running);
    let cookie = api.password_login("carol", "carolina").await;
    let response = api
        .access_token_raw(Some(&format!("theme=dark; {cookie}; x=y")))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, CACHE_CONTROL), "no-store");
}

#[tokio::test]
async fn tokens_are_distinct_43_char_base64url() {
    // Each token is 32 random bytes as base64url without padding: 43 chars, an RFC 6750 b64token.
    let running = start_default().await;
    let api = Api::new(&running);
    let cookie = api.password_login("alice", "wonderland").await;
    let first = api.access_token(&cookie).await;
    let second = api.access_token(&cookie).await;
    assert_ne!(first, second);
    for token in [&first, &second] {
        assert_eq!(token.len(), 43, "{token}");
        assert!(token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }
}

#[tokio::test]
async fn user_without_bearer_is_401_with_bare_challenge() {
    // No Authorization, or another scheme, gets 401 missing_token and `WWW-Authenticate: Bearer`.
    let running = start_default().await;
    let api = Api::new(&running);
    for authorization in [
        None,
        Some("Basic YWxpY2U6d29uZGVybGFuZA=="),
        Some("Bearerabc"),
    ] {
        let response = api.user_with(authorization).await;
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{authorization:?}"
        );
        assert_eq!(header(&response, WWW_AUTHENTICATE), "Bearer");
        assert_eq!(error_code(response).await, "missing_token");
    }
}

#[tokio::test]
async fn user_with_unknown_token_is_401_invalid_token() {
    // An unknown token gets 401 invalid_token and `WWW-Authenticate: Bearer error="invalid_token"`.
    let running = start_default().await;
    let api = Api::new(&running);
    for authorization in ["Bearer unknown-token", "Bearer "] {
        let response = api.user_with(Some(authorization)).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            header(&response, WWW_AUTHENTICATE),
            r#"Bearer error="invalid_token""#
        );
        assert_eq!(error_code(response).await, "invalid_token");
    }
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive_and_allows_several_spaces() {
    // `bearer`, `BEARER` and several spaces before the token are all accepted.
    let running = start_default().await;
    let api = Api::new(&running);
    let cookie = api.password_login("alice", "wonderland").await;
    let token = api.access_token(&cookie).await;
    for scheme in ["bearer ", "BEARER ", "Bearer   "] {
        let response = api.user_with(Some(&format!("{scheme}{token}"))).await;
        assert_eq!(response.status(), StatusCode::OK, "{scheme:?}");
    }
}

#[tokio::test]
async fn logout_revokes_that_sessions_tokens_only() {
    // Logout ends the session and its tokens at once; another session of the same user lives on.
    let running = start_default().await;
    let api = Api::new(&running);
    let ending = api.password_login("alice", "wonderland").await;
    let staying = api.password_login("alice", "wonderland").await;
    let revoked = api.access_token(&ending).await;
    let kept = api.access_token(&staying).await;
    assert_eq!(api.user(&revoked).await.status(), StatusCode::OK);

    let response = api.logout(Some(&ending)).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let response = api.user(&revoked).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(response).await, "invalid_token");
    assert_eq!(
        api.access_token_raw(Some(&ending)).await.status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(api.user(&kept).await.status(), StatusCode::OK);
    assert_eq!(
        api.access_token_raw(Some(&staying)).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn logout_without_session_is_204() {
    // Logout is idempotent: no cookie, an unknown one, or a second logout all get 204.
    let running = start_default().await;
    let api = Api::new(&running);
    let cookie = api.password_login("bob", "builder").await;
    for cookie in [
        None,
        Some("session=forged"),
        Some(cookie.as_str()),
        Some(cookie.as_str()),
    ] {
        assert_eq!(api.logout(cookie).await.status(), StatusCode::NO_CONTENT);
    }
}

#[tokio::test]
async fn token_past_its_ttl_is_rejected() {
    // A token is refused with invalid_token once its ttl has passed.
    let running = start(Duration::ZERO).await;
    let api = Api::new(&running);
    let cookie = api.password_login("alice", "wonderland").await;
    let token = api.access_token(&cookie).await;
    let response = api.user(&token).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        header(&response, WWW_AUTHENTICATE),
        r#"Bearer error="invalid_token""#
    );
    assert_eq!(error_code(response).await, "invalid_token");
}

#[tokio::test(start_paused = true)]
async fn token_works_until_its_ttl_then_stops() {
    // With a 1 s ttl a token works at once, and no longer 1.2 s after it was issued (on the
    // paused clock, which the API's token expiry reads).
    let running = start(Duration::from_secs(1)).await;
    let api = Api::new(&running);
    let cookie = api.password_login("alice", "wonderland").await;
    let token = api.access_token(&cookie).await;
    // A moment passes, as it does in real time: less than the second is left.
    tokio::time::advance(Duration::from_millis(1)).await;
    let response = api.user(&token).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(max_age(&response), 0);
    tokio::time::advance(Duration::from_millis(1200)).await;
    assert_eq!(api.user(&token).await.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn max_age_never_exceeds_remaining_life() {
    // max-age is capped at 60 s and at the token's remaining life, whichever is smaller.
    for (ttl, cap) in [(30, 30), (3600, 60)] {
        let running = start(Duration::from_secs(ttl)).await;
        let api = Api::new(&running);
        let cookie = api.password_login("alice", "wonderland").await;
        let token = api.access_token(&cookie).await;
        let age = max_age(&api.user(&token).await);
        assert!(age <= cap && age + 2 >= cap, "ttl {ttl}: max-age {age}");
    }
}

#[tokio::test]
async fn other_methods_are_405_with_allow_post() {
    // GET, PUT and DELETE on each endpoint get 405 with `Allow: POST`.
    let running = start_default().await;
    let api = Api::new(&running);
    for path in PATHS {
        for method in [
            reqwest::Method::GET,
            reqwest::Method::PUT,
            reqwest::Method::DELETE,
        ] {
            let response = api
                .client
                .request(method.clone(), api.url(path))
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(header(&response, ALLOW), "POST", "{method} {path}");
        }
    }
}

#[tokio::test]
async fn user_requests_counts_every_user_request() {
    // user_requests() counts each POST /api/user whatever its outcome, and nothing else.
    let running = start_default().await;
    let api = Api::new(&running);
    assert_eq!(running.api().user_requests(), 0);
    let cookie = api.password_login("alice", "wonderland").await;
    let token = api.access_token(&cookie).await;
    assert_eq!(running.api().user_requests(), 0);
    api.user(&token).await;
    api.user("unknown").await;
    api.user_with(None).await;
    api.client.get(api.url("/api/user")).send().await.unwrap();
    assert_eq!(running.api().user_requests(), 3);
}

#[tokio::test]
async fn shutdown_stops_serving() {
    // After shutdown the port no longer answers.
    let running = start_default().await;
    let url = format!("{}/api/user", running.base_url());
    assert!(url.starts_with("http://127.0.0.1:"));
    running.shutdown().await;
    let client = Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(client.post(url).send().await.is_err());
}

#[test]
fn api_user_debug_redacts_the_password() {
    // Debug output of a user, a config and the API never shows a password.
    let users = demo_users();
    assert_eq!(users.len(), 3);
    let printed = format!("{users:?} {:?}", ApiConfig::default());
    assert!(printed.contains("[redacted]"));
    for secret in ["wonderland", "builder", "carolina"] {
        assert!(!printed.contains(secret), "{printed}");
    }
}

fn user(id: i64, username: &str) -> ApiUser {
    ApiUser {
        id,
        name: username.to_uppercase(),
        username: username.into(),
        password: "secret".into(),
    }
}

fn write_users_file(name: &str, users: &Value) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "token-resolver-users-{}-{name}.json",
        std::process::id()
    ));
    std::fs::write(&path, users.to_string()).unwrap();
    path
}

#[test]
fn users_file_loads_a_list_of_users() {
    // A JSON list of {id, name, username, password} becomes the config's users.
    let path = write_users_file(
        "ok",
        &json!([{ "id": 7, "name": "Dave", "username": "dave", "password": "pw" }]),
    );
    let config = ApiConfig::from_users_file(&path, Duration::from_secs(5)).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(config.token_ttl, Duration::from_secs(5));
    assert_eq!(config.users.len(), 1);
    assert_eq!(
        (config.users[0].id, config.users[0].name.as_str()),
        (7, "Dave")
    );
}

#[test]
fn users_file_with_duplicates_or_empty_username_is_rejected() {
    // Duplicate ids, duplicate usernames and empty usernames are refused with a clear error.
    let cases = [
        (
            "dup-id",
            json!([{ "id": 1, "name": "A", "username": "a", "password": "p" },
                          { "id": 1, "name": "B", "username": "b", "password": "p" }]),
        ),
        (
            "dup-username",
            json!([{ "id": 1, "name": "A", "username": "a", "password": "p" },
                                { "id": 2, "name": "B", "username": "a", "password": "p" }]),
        ),
        (
            "empty-username",
            json!([{ "id": 1, "name": "A", "username": "", "password": "p" }]),
        ),
    ];
    let mut errors = Vec::new();
    for (name, users) in cases {
        let path = write_users_file(name, &users);
        errors.push(ApiConfig::from_users_file(&path, Duration::from_secs(5)).unwrap_err());
        std::fs::remove_file(&path).unwrap();
    }
    assert!(
        matches!(errors[0], ApiConfigError::DuplicateId { id: 1 }),
        "{:?}",
        errors[0]
    );
    assert!(
        matches!(&errors[1], ApiConfigError::DuplicateUsername { username } if username == "a")
    );
    assert!(matches!(errors[2], ApiConfigError::EmptyUsername { id: 1 }));
    assert!(errors[1].to_string().contains("\"a\""), "{}", errors[1]);
}

#[test]
fn users_file_missing_or_malformed_is_rejected() {
    // An unreadable file or one that is not a list of users names the file in its error.
    let missing = std::env::temp_dir().join("token-resolver-users-does-not-exist.json");
    let error = ApiConfig::from_users_file(&missing, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(error, ApiConfigError::Read { .. }));
    assert!(error.to_string().contains("does-not-exist"), "{error}");

    let path = write_users_file("malformed", &json!({ "users": [] }));
    let error = ApiConfig::from_users_file(&path, Duration::from_secs(5)).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(error, ApiConfigError::Parse { .. }), "{error:?}");
}

#[test]
fn new_rejects_duplicate_users() {
    // ReferenceApi::new refuses a config with two users of one id or one username.
    let config = |users| ApiConfig {
        users,
        token_ttl: Duration::from_secs(1),
        ..ApiConfig::default()
    };
    let error = ReferenceApi::new(config(vec![user(1, "a"), user(1, "b")])).unwrap_err();
    assert!(matches!(error, ApiConfigError::DuplicateId { id: 1 }));
    let error = ReferenceApi::new(config(vec![user(1, "a"), user(2, "a")])).unwrap_err();
    assert!(matches!(error, ApiConfigError::DuplicateUsername { .. }));
}

#[tokio::test]
async fn users_from_config_can_log_in_and_guests_get_ids_above_them() {
    // Configured users log in with their password; guest ids start above the highest user id.
    let config = ApiConfig {
        users: vec![user(41, "dave")],
        token_ttl: Duration::from_secs(60),
        ..ApiConfig::default()
    };
    let running = token_resolver_support::reference_api_with(config).await;
    let api = Api::new(&running);
    let (_, body) = api
        .login(json!({ "username": "dave", "password": "secret" }))
        .await;
    assert_eq!(body, json!({ "id": 41, "name": "DAVE" }));
    let (_, guest) = api.login(json!({ "device_id": "d" })).await;
    assert_eq!(guest["id"], 42);
}

#[tokio::test]
async fn the_play_page_is_served_with_a_policy_that_allows_no_inline_script() {
    // The browser client at /play: the page, its script and its style, each with its content
    // type and a content security policy that allows no inline script; the page may reach its
    // own origin and no game server when none is configured.
    let running = start(Duration::from_secs(3600)).await;
    let api = Api::new(&running);
    for (path, content_type, contains) in [
        ("/play", "text/html", "<output id=\"result\">"),
        ("/play.js", "text/javascript", "authUrlOf"),
        ("/play.css", "text/css", "output"),
    ] {
        let response = api.client.get(api.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
        assert!(header("content-type").starts_with(content_type), "{path}");
        let policy = header("content-security-policy");
        assert!(policy.contains("default-src 'none'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        if path == "/play" {
            assert!(policy.contains("script-src 'self'"), "{policy}");
            assert!(policy.contains("connect-src 'self';"), "{policy}");
        }
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert!(response.text().await.unwrap().contains(contains), "{path}");
    }
}

#[tokio::test]
async fn the_play_page_names_only_the_configured_game_servers_in_its_list_and_policy() {
    // Pins down --play-game-url: the page lists exactly the configured WebSocket URLs (the
    // script opens no other) and its connect-src names them and the API, no `ws:` at large.
    let config = ApiConfig {
        play_game_urls: vec![
            "ws://127.0.0.1:7351/ws".to_owned(),
            "wss://game.example/ws".to_owned(),
        ],
        ..ApiConfig::default()
    };
    let running = token_resolver_support::reference_api_with(config).await;
    let api = Api::new(&running);
    let response = api.client.get(api.url("/play")).send().await.unwrap();
    let policy = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        policy.contains("connect-src 'self' ws://127.0.0.1:7351/ws wss://game.example/ws;"),
        "{policy}"
    );
    let page = response.text().await.unwrap();
    assert!(
        page.contains(r#"<meta name="game-urls" content="[&quot;ws://127.0.0.1:7351/ws&quot;,&quot;wss://game.example/ws&quot;]">"#),
        "{page}"
    );
}

#[test]
fn a_play_game_url_must_be_a_websocket_url_a_policy_can_carry() {
    for bad in [
        "http://game.example/ws",
        "ws://",
        "ws://game.example/ws?x=1",
        "ws://user:pw@game.example/ws",
        "ws://game.example/a;b",
        "not a url",
    ] {
        let config = ApiConfig {
            play_game_urls: vec![bad.to_owned()],
            ..ApiConfig::default()
        };
        assert!(
            matches!(config.validate(), Err(ApiConfigError::PlayGameUrl { .. })),
            "{bad}"
        );
    }
}
