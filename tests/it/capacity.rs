//! `max_cache_entries` bounds everything the resolver holds: valid users, rejections and users
//! kept stale, together. Runs on tokio's paused clock, which the entries' freshness reads (moka's
//! own time to live, on real time, keeps the stale ones held meanwhile).

use token_resolver_support as support;

use std::time::Duration;

use support::{resolver_for, respond, user_answer, Scripted};
use token_resolver::{ErrorCode, Resolver};

const BOUND: u64 = 80;

/// An upstream that vouches for `ok<N>` as user N and rejects anything else with a 401.
async fn upstream() -> Scripted {
    Scripted::start(|_, seen| async move {
        let token = seen.header("authorization").unwrap_or_default();
        match token.strip_prefix("Bearer ok") {
            Some(n) => user_answer(n.parse().unwrap(), "player"),
            None => respond(401, &[("www-authenticate", "Bearer")], b""),
        }
    })
    .await
}

/// Resolves `tokens`, each once, and checks after each that the resolver holds no more than
/// the bound; the most it held.
async fn fill(resolver: &Resolver, url: &str, tokens: impl Iterator<Item = String>) -> u64 {
    let mut most = 0;
    for token in tokens {
        let _ = resolver.resolve(url, &token).await;
        // `entries` applies moka's pending work first: what is held now.
        let held = resolver.stats().entries;
        assert!(
            held <= BOUND,
            "{held} entries held under a bound of {BOUND}"
        );
        most = most.max(held);
    }
    most
}

#[tokio::test(start_paused = true)]
async fn users_rejections_and_stale_users_together_stay_within_max_cache_entries() {
    let api = upstream().await;
    let url = api.url();
    let resolver = resolver_for(&url)
        .max_cache_entries(BOUND)
        .cache_ttl(Duration::from_secs(1))
        .serve_stale_for(Duration::from_secs(600))
        .negative_cache_ttl(Duration::from_secs(600))
        .build()
        .unwrap();

    let users = fill(&resolver, &url, (0..3 * BOUND).map(|i| format!("ok{i}"))).await;
    assert!(users >= BOUND / 2, "users fill most of the bound: {users}");
    let rejected = resolver.resolve(&url, "no0").await.unwrap_err();
    assert_eq!(rejected.code(), ErrorCode::TokenRejected);
    fill(&resolver, &url, (1..3 * BOUND).map(|i| format!("no{i}"))).await;
    // Past their freshness, the users are kept only as a fallback: still held, still counted.
    tokio::time::advance(Duration::from_secs(2)).await;
    fill(
        &resolver,
        &url,
        (3 * BOUND..6 * BOUND).map(|i| format!("ok{i}")),
    )
    .await;
    fill(
        &resolver,
        &url,
        (3 * BOUND..6 * BOUND).map(|i| format!("no{i}")),
    )
    .await;
    assert!(resolver.stats().entries > 0, "the resolver still caches");
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_rejected_tokens_evicts_no_cached_user() {
    // The users fit in their share of the bound; then a flood of bad tokens, three times the
    // bound, fills the rejections' share over and over. Every user is still answered from the
    // cache: the flood never took their room.
    let api = upstream().await;
    let url = api.url();
    let resolver = resolver_for(&url)
        .max_cache_entries(BOUND)
        .negative_cache_ttl(Duration::from_secs(600))
        .build()
        .unwrap();
    let players: Vec<String> = (0..BOUND / 2).map(|i| format!("ok{i}")).collect();
    fill(&resolver, &url, players.iter().cloned()).await;
    fill(&resolver, &url, (0..3 * BOUND).map(|i| format!("no{i}"))).await;
    let calls = api.requests();
    fill(&resolver, &url, players.iter().cloned()).await;
    assert_eq!(api.requests(), calls, "every player was still cached");
}
