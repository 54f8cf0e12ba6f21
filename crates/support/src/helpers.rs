//! What every suite uses: a resolver fit for tests, a resolution expected to fail within a
//! bound, and waiting for a condition. Skipping (or, under CI, failing) without a program is
//! `present`, crate `token-resolver-loopback`'s, re-exported at the crate root.

use std::time::Duration;

use token_resolver::Resolver;

/// A resolver whose default authUrl is `url`, with short timeouts fit for tests.
pub fn resolver_for(url: &str) -> token_resolver::ResolverBuilder {
    Resolver::builder()
        .default_auth_url(url)
        .request_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(500))
}

/// Resolves `token` at `url` and asserts that it fails with `code` within `bound`; a hang
/// fails the test rather than the CI run. Returns the error and how long the call took.
pub async fn fails_within(
    resolver: &Resolver,
    url: &str,
    token: &str,
    code: token_resolver::ErrorCode,
    bound: Duration,
) -> (token_resolver::ResolveError, Duration) {
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        bound + Duration::from_secs(30),
        resolver.resolve(url, token),
    )
    .await
    .unwrap_or_else(|_| panic!("the resolution hung past {bound:?} + 30 s"));
    let elapsed = started.elapsed();
    let error = match result {
        Ok(user) => panic!("resolved {user:?}, expected {}", code.as_str()),
        Err(error) => error,
    };
    assert_eq!(error.code(), code, "{error}");
    assert!(
        elapsed <= bound,
        "{} took {elapsed:?}, over the bound of {bound:?}",
        code.as_str()
    );
    (error, elapsed)
}

/// Waits for `condition`, polling every few milliseconds; fails the test naming `what` if it
/// does not hold within 10 s. The limit only ends a test that would otherwise hang: a test
/// that pins down how soon something happens asserts that itself.
///
/// The limit and the polls are on tokio's clock, so on a paused clock (`start_paused`) a wait
/// costs no real time.
pub async fn eventually(what: &str, condition: impl Fn() -> bool) {
    eventually_async(what, || std::future::ready(condition())).await;
}

/// [`eventually`] for a condition that has to await to find out (an HTTP call, a Redis read):
/// `condition` is called again every few milliseconds until its future yields `true`.
pub async fn eventually_async<F, Fut>(what: &str, condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_within(what, Duration::from_secs(10), condition).await;
}

/// [`eventually_async`] with its own limit, for what may take longer than 10 s by design (a
/// process's drain, a link's heal after its keepalives give up).
pub async fn eventually_within<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
