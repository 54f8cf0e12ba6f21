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
//! where it calls and listens. The router is built by [`router`], which `tests/axum_api.rs`
//! serves on loopback against the reference API, so the example is what the tests run.

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
