//! A small game HTTP API whose players are authenticated by their access token, with the
//! resolver's axum integration (feature `axum`).
//!
//! - `GET /profile`: the player behind the token (`Authenticated`, behind `AuthLayer`).
//! - `POST /scores` with `{"score": N}`: records the player's best score and answers their
//!   rank (`Authenticated`, behind `AuthLayer`).
//! - `GET /leaderboard`: the top ten, public; with a token, the player's own entry is marked
//!   (`Option<Authenticated>`, resolved by the extractor).
//!
//! Run it against the reference integrator API:
//!
//! ```text
//! cargo run -- serve-api                          # the integrator's API on 127.0.0.1:8080
//! cargo run --example axum_api --features axum    # this API on 127.0.0.1:3000
//! ```
//!
//! `AUTH_URL` (default `http://127.0.0.1:8080`) and `LISTEN` (default `127.0.0.1:3000`) change
//! where it calls and listens. The router is built by [`router`], which the tests at the end of this file
//! serve on loopback against the reference API, so the example is what the tests run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{FromRef, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use token_resolver::axum::{AuthLayer, Authenticated};
use token_resolver::Resolver;

/// How many entries `GET /leaderboard` lists.
const TOP: usize = 10;

/// What every handler shares.
#[derive(Clone)]
pub struct GameApi {
    /// Resolves the players' tokens; the extractors find it through `FromRef`.
    resolver: Resolver,
    /// Each player's best score, in memory.
    scores: Arc<Mutex<HashMap<i64, Entry>>>,
}

impl FromRef<GameApi> for Resolver {
    fn from_ref(api: &GameApi) -> Resolver {
        api.resolver.clone()
    }
}

/// A player's line on the leaderboard.
#[derive(Clone)]
struct Entry {
    /// The user id the auth API vouched for: the key of a player's line.
    id: i64,
    /// Their name as the auth API gave it when they scored.
    name: String,
    /// Their best score.
    score: u64,
}

/// The body of `POST /scores`.
#[derive(Deserialize)]
struct Submitted {
    /// The score of one game.
    score: u64,
}

/// The game API, authenticating its players with `resolver`.
pub fn router(resolver: Resolver) -> Router {
    let api = GameApi {
        resolver: resolver.clone(),
        scores: Arc::default(),
    };
    Router::new()
        .route("/profile", get(profile))
        .route("/scores", post(submit_score))
        // Every route above resolves before its handler; the handlers' `Authenticated` takes
        // the identity the layer left in the request, without a second resolution.
        .route_layer(AuthLayer::new(resolver))
        .route("/leaderboard", get(leaderboard))
        .with_state(api)
}

/// `GET /profile`: who the token belongs to.
async fn profile(Authenticated(user): Authenticated) -> Json<Value> {
    Json(json!({ "id": user.id, "name": user.name }))
}

/// `POST /scores`: keeps the player's best score; answers it and the player's rank.
async fn submit_score(
    State(api): State<GameApi>,
    Authenticated(user): Authenticated,
    Json(submitted): Json<Submitted>,
) -> Json<Value> {
    let mut scores = api.scores.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = scores.entry(user.id).or_insert_with(|| Entry {
        id: user.id,
        name: user.name.clone(),
        score: 0,
    });
    entry.score = entry.score.max(submitted.score);
    let best = entry.score;
    let rank = 1 + scores.values().filter(|e| e.score > best).count();
    Json(json!({ "best": best, "rank": rank }))
}

/// `GET /leaderboard`: the top scores, best first; the caller's own line marked `"you"`.
async fn leaderboard(State(api): State<GameApi>, player: Option<Authenticated>) -> Json<Value> {
    let mut entries: Vec<Entry> = api
        .scores
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .cloned()
        .collect();
    entries.sort_by(|a, b| b.score.cmp(&a.score).then(a.id.cmp(&b.id)));
    let you = player.map(|Authenticated(user)| user.id);
    let top: Vec<Value> = entries
        .iter()
        .take(TOP)
        .enumerate()
        .map(|(i, e)| {
            json!({
                "rank": i + 1, "id": e.id, "name": e.name, "score": e.score,
                "you": Some(e.id) == you,
            })
        })
        .collect();
    Json(json!({ "top": top }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let auth_url = std::env::var("AUTH_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let resolver = Resolver::builder().default_auth_url(&auth_url).build()?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let here = listener.local_addr()?;
    println!("game API on http://{here}, players authenticated at {auth_url}");
    println!("  GET  /profile      Authorization: Bearer <token>");
    println!("  POST /scores       Authorization: Bearer <token>, {{\"score\": 1200}}");
    println!("  GET  /leaderboard  (a token is optional)");
    println!("a token from the reference API (cargo run -- serve-api):");
    println!("  curl -c jar -H 'content-type: application/json' \\");
    println!(
        "       -d '{{\"username\":\"alice\",\"password\":\"wonderland\"}}' {auth_url}/api/login"
    );
    println!("  curl -b jar -X POST {auth_url}/api/access_token");
    axum::serve(listener, router(resolver)).await?;
    Ok(())
}

/// The example's very router on loopback, its players logged in at the reference integrator API
/// on loopback: what `cargo run --example axum_api` serves, end to end (`cargo test
/// --all-features` runs these).
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{json, Value};
    use token_resolver::ResolverBuilder;
    use token_resolver_reference_api::RunningApi;
    use token_resolver_support::{
        logged_in, login_and_take_token, reference_api, resolver_for, serve_app, ServedApp,
    };

    use super::router;

    /// The reference API, and the example's router on a resolver for it (configured by
    /// `configure`), both on loopback.
    async fn game_api(
        configure: impl FnOnce(ResolverBuilder) -> ResolverBuilder,
    ) -> (RunningApi, ServedApp) {
        let api = reference_api().await;
        let resolver = configure(resolver_for(&api.base_url())).build().unwrap();
        let app = serve_app(router(resolver)).await;
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
    async fn post_score(app: &ServedApp, token: &str, score: u64) -> (u16, Value) {
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
}
