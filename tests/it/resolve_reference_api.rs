//! The resolver against the reference integrator API over real loopback HTTP: the whole flow
//! from login to a verified user, caching, rejection and invalidation.

use token_resolver_support as support;

use std::time::Duration;

use support::{logged_in, login_and_take_token, reference_api, resolver_for};
use token_resolver::{ConnectRequest, ErrorCode, Identity, JoinRequest};

#[tokio::test]
async fn resolves_a_logged_in_users_token_to_id_and_name() {
    // Pins down the whole seed flow: login -> access_token -> POST /api/user -> {id, name}.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let resolver = resolver_for(&api.base_url()).build().unwrap();

    let user = resolver.resolve(&api.base_url(), &token).await.unwrap();
    assert_eq!((user.id, user.name.as_str()), (1, "Alice"));
    assert_eq!(api.api().user_requests(), 1);
}

#[tokio::test]
async fn second_resolution_is_a_cache_hit_with_no_call() {
    // Pins down caching: the reference API's max-age lets the answer be reused.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "bob", "builder").await;
    let resolver = resolver_for(&api.base_url()).build().unwrap();

    let first = resolver.resolve(&api.base_url(), &token).await.unwrap();
    let second = resolver.resolve(&api.base_url(), &token).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(api.api().user_requests(), 1);
    let stats = resolver.stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
}

#[tokio::test]
async fn connect_and_join_without_auth_url_use_the_default() {
    // Pins down resolve_connect and resolve_join with an empty authUrl going to the default.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "carol", "carolina").await;
    let resolver = resolver_for(&api.base_url()).build().unwrap();

    let connect = ConnectRequest {
        access_token: Some(token.clone()),
    };
    let id = resolver.resolve_connect(&connect).await.unwrap();
    assert_eq!(id.user().map(|u| u.id), Some(3));
    let join = JoinRequest {
        room_id: "lobby".into(),
        access_token: Some(token),
        ..Default::default()
    };
    assert!(
        matches!(resolver.resolve_join(&join).await.unwrap(), Identity::Authenticated(u) if u.name == "Carol")
    );
    assert_eq!(
        api.api().user_requests(),
        1,
        "the join was a cache hit of the connect"
    );
}

#[tokio::test]
async fn unknown_token_is_rejected_and_the_rejection_is_cached() {
    // Pins down 401 -> token_rejected, and negative caching sparing the API a second call.
    let api = reference_api().await;
    let resolver = resolver_for(&api.base_url()).build().unwrap();

    for _ in 0..3 {
        let err = resolver
            .resolve(&api.base_url(), "no-such-token")
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::TokenRejected);
        assert!(!err.is_retryable());
    }
    assert_eq!(api.api().user_requests(), 1);
    assert_eq!(resolver.stats().negative_hits, 2);
}

#[tokio::test]
async fn negative_cache_ttl_zero_asks_again_every_time() {
    // Pins down that negative caching can be switched off.
    let api = reference_api().await;
    let resolver = resolver_for(&api.base_url())
        .negative_cache_ttl(Duration::ZERO)
        .build()
        .unwrap();
    for _ in 0..2 {
        let err = resolver
            .resolve(&api.base_url(), "no-such-token")
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::TokenRejected);
    }
    assert_eq!(api.api().user_requests(), 2);
}

#[tokio::test]
async fn invalidate_makes_a_revoked_token_fail() {
    // Pins down invalidate(): after logout at the API, dropping the cached answer makes the
    // resolver ask again and learn of the revocation.
    let api = reference_api().await;
    let base = api.base_url();
    let mut client = logged_in(&base, "alice", "wonderland").await;
    let token = client
        .authorization_access_token
        .clone()
        .expect("a token was taken");
    let token = token.secret();
    let resolver = resolver_for(&base).build().unwrap();
    resolver.resolve(&base, token).await.unwrap();

    client.logout().await.unwrap();
    assert!(resolver.resolve(&base, token).await.is_ok(), "still cached");
    resolver.invalidate(&base, token);
    let err = resolver.resolve(&base, token).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::TokenRejected);
}

#[tokio::test]
async fn invalidate_user_drops_every_token_of_that_user_only() {
    // Pins down invalidate_user(): all of one user's tokens leave the cache, others stay.
    let api = reference_api().await;
    let base = api.base_url();
    let a1 = login_and_take_token(&base, "alice", "wonderland").await;
    let a2 = login_and_take_token(&base, "alice", "wonderland").await;
    let b = login_and_take_token(&base, "bob", "builder").await;
    let resolver = resolver_for(&base).build().unwrap();
    for t in [&a1, &a2, &b] {
        resolver.resolve(&base, t).await.unwrap();
    }
    assert_eq!(api.api().user_requests(), 3);

    resolver.invalidate_user(&format!("{base}/"), 1);
    for t in [&a1, &a2, &b] {
        resolver.resolve(&base, t).await.unwrap();
    }
    assert_eq!(
        api.api().user_requests(),
        5,
        "alice's two tokens were asked again, bob's was not"
    );
}

#[tokio::test]
async fn invalidate_all_empties_the_cache() {
    // Pins down invalidate_all().
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = resolver_for(&base).build().unwrap();
    resolver.resolve(&base, &token).await.unwrap();
    resolver.invalidate_all();
    assert_eq!(resolver.stats().entries, 0);
    resolver.resolve(&base, &token).await.unwrap();
    assert_eq!(api.api().user_requests(), 2);
}

#[tokio::test]
async fn auth_switched_off_makes_joins_anonymous_with_no_call() {
    // Pins down auth_required(false): the options-screen switch is off.
    let api = reference_api().await;
    let resolver = resolver_for(&api.base_url())
        .auth_required(false)
        .build()
        .unwrap();
    let join = JoinRequest {
        room_id: "r".into(),
        auth_url: api.base_url(),
        access_token: None,
    };
    assert_eq!(
        resolver.resolve_join(&join).await.unwrap(),
        Identity::Anonymous
    );
    assert_eq!(api.api().user_requests(), 0);
}

#[tokio::test]
async fn a_token_taken_for_a_short_lifetime_carries_its_expiry_to_the_user() {
    // Pins down IntegratorClient::fetch_access_token_for and the answer's exp: the user the
    // resolver returns expires when the token does, not at the session's default lifetime.
    let api = reference_api().await;
    let mut client = token_resolver_player::IntegratorClient::new(api.base_url()).unwrap();
    client.login_password("carol", "carolina").await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = client
        .fetch_access_token_for(Duration::from_secs(5))
        .await
        .unwrap()
        .secret()
        .to_owned();
    let resolver = resolver_for(&api.base_url()).build().unwrap();
    let user = resolver
        .resolve_in_full(&api.base_url(), &token)
        .await
        .unwrap();
    let exp = user.expires_at().expect("the answer's exp").unix_seconds();
    assert!((now + 4..=now + 6).contains(&exp), "exp {exp}, now {now}");
}
