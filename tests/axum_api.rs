//! The example game API (`examples/axum_api.rs`, its very router) on loopback, its players
//! logged in at the reference integrator API on loopback: what `cargo run --example axum_api`
//! serves, end to end.

mod support;

#[allow(dead_code)]
#[path = "../examples/axum_api.rs"]
mod axum_api;

use std::time::Duration;

use serde_json::{json, Value};
use support::{logged_in, login_and_take_token, reference_api, resolver_for, serve_app};
use token_resolver::reference_api::RunningApi;
use token_resolver::ResolverBuilder;

/// The reference API, and the example's router on a resolver for it (configured by
/// `configure`), both on loopback.
async fn game_api(
    configure: impl FnOnce(ResolverBuilder) -> ResolverBuilder,
) -> (RunningApi, support::ServedApp) {
    let api = reference_api().await;
    let resolver = configure(resolver_for(&api.base_url())).build().unwrap();
    let app = serve_app(axum_api::router(resolver)).await;
    (api, app)
}

/// `GET url`, with `token` as the bearer token when there is one: the status and the body.
async fn get(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// `POST /scores` with `score`, as the player holding `token`.
async fn post_score(app: &support::ServedApp, token: &str, score: u64) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(app.url("/scores"))
        .bearer_auth(token)
        .json(&json!({ "score": score }))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn profile_answers_the_logged_in_player() {
    // A player's token from the reference API opens their own profile.
    let (api, app) = game_api(|b| b).await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let (status, body) = get(&app.url("/profile"), Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({ "id": 1, "name": "Alice" }));
}

#[tokio::test]
async fn posted_scores_rank_players_on_the_leaderboard() {
    // Scores are kept per verified user (best one wins), and the caller's line is marked.
    let (api, app) = game_api(|b| b).await;
    let alice = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let bob = login_and_take_token(&api.base_url(), "bob", "builder").await;
    assert_eq!(
        post_score(&app, &alice, 1200).await.1,
        json!({ "best": 1200, "rank": 1 })
    );
    assert_eq!(
        post_score(&app, &bob, 1500).await.1,
        json!({ "best": 1500, "rank": 1 })
    );
    assert_eq!(
        post_score(&app, &alice, 900).await.1,
        json!({ "best": 1200, "rank": 2 })
    );

    let (status, board) = get(&app.url("/leaderboard"), Some(&alice)).await;
    assert_eq!(status, 200, "{board}");
    let lines: Vec<_> = board["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| {
            (
                line["name"].clone(),
                line["score"].clone(),
                line["you"].clone(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (json!("Bob"), json!(1500), json!(false)),
            (json!("Alice"), json!(1200), json!(true)),
        ]
    );
}

#[tokio::test]
async fn the_leaderboard_is_public_and_scores_are_not() {
    // No token: the leaderboard answers, a score is refused with token_missing.
    let (_api, app) = game_api(|b| b).await;
    let (status, board) = get(&app.url("/leaderboard"), None).await;
    assert_eq!((status, board), (200, json!({ "top": [] })));
    let response = reqwest::Client::new()
        .post(app.url("/scores"))
        .json(&json!({ "score": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "token_missing");
}

#[tokio::test]
async fn the_layer_and_the_extractor_call_the_api_once_per_request() {
    // With positive caching off, every request behind AuthLayer makes exactly one call to
    // /api/user: the handler's `Authenticated` takes the layer's identity.
    let (api, app) = game_api(|b| b.cache_ttl(Duration::ZERO)).await;
    let token = login_and_take_token(&api.base_url(), "carol", "carolina").await;
    let before = api.api().user_requests();
    for round in 1..=3 {
        assert_eq!(get(&app.url("/profile"), Some(&token)).await.0, 200);
        assert_eq!(post_score(&app, &token, round * 10).await.0, 200);
        assert_eq!(api.api().user_requests() - before, 2 * round);
    }
}

#[tokio::test]
async fn cached_players_cost_the_api_one_call() {
    // With the cache on (the API's max-age), repeated requests of one player are cache hits.
    let (api, app) = game_api(|b| b).await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let before = api.api().user_requests();
    for _ in 0..5 {
        assert_eq!(get(&app.url("/profile"), Some(&token)).await.0, 200);
    }
    assert_eq!(api.api().user_requests() - before, 1);
}

#[tokio::test]
async fn a_logged_out_players_token_is_refused_as_rejected() {
    // After logout the API rejects the token, and the game API answers 401 invalid_token.
    let (api, app) = game_api(|b| b.cache_ttl(Duration::ZERO)).await;
    let mut player = logged_in(&api.base_url(), "bob", "builder").await;
    let token = player
        .authorization_access_token
        .as_ref()
        .unwrap()
        .secret()
        .to_owned();
    assert_eq!(get(&app.url("/profile"), Some(&token)).await.0, 200);
    player.logout().await.unwrap();
    let response = reqwest::Client::new()
        .get(app.url("/profile"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()["www-authenticate"],
        r#"Bearer error="invalid_token""#
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "token_rejected");
}
