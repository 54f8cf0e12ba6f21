//! `examples/nginx` in real nginx, with a real sidecar and a backend that records every header
//! value it receives: a client that sends its own `X-User-Id` (twice, and as `X_User_Id`),
//! `X-User-Name` and `X-Auth-Url` beside a valid token reaches the backend as the resolver's
//! user alone, with no `X-Auth-Url` of its own, and the sidecar is asked at the default
//! integrator; the same when nginx answers from its cache of the sidecar's answers. Needs
//! nginx and its purge module: skipped with a note without them, a failure under CI, which
//! installs them.

use super::common;

use token_resolver_support as support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::routing::get;
use axum::Router;
use common::Parties;
use support::redis::free_port;
use support::{serve_app, Nginx, ServedApp};
use token_resolver_sidecar::{NginxCache, SidecarConfig};

/// The headers each request reached the backend with, every value of each.
type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// A backend answering `/api/whoami` with 200, recording the headers it was sent.
async fn recording_backend() -> (ServedApp, Seen) {
    let seen = Seen::default();
    let recorded = seen.clone();
    let backend = serve_app(Router::new().route(
        "/api/whoami",
        get(move |headers: HeaderMap| {
            recorded.lock().unwrap().push(headers);
            async { "ok" }
        }),
    ))
    .await;
    (backend, seen)
}

/// Every value of `name` in `headers`.
fn values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    (headers.get_all(name).iter())
        .map(|v| v.to_str().unwrap_or("<not visible ASCII>"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_sees_the_resolvers_user_and_none_of_the_clients_claims() {
    if !Nginx::installed_with_purge() {
        return;
    }
    // Asked of the sidecar each time, then answered from nginx's cache of its answers.
    for cached in [false, true] {
        let purge = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = SidecarConfig {
            nginx_cache: cached.then(|| NginxCache::new(&format!("http://{purge}/purge")).unwrap()),
            ..SidecarConfig::default()
        };
        let parties = Parties::start(config, token_resolver_reference_api::demo_users()).await;
        let (backend, seen) = recording_backend().await;
        let http = Nginx::sidecar_example_showing_hits(
            parties.sidecar.local_addr(),
            backend.addr(),
            purge,
        );
        let nginx = Nginx::start_with(
            &Nginx::binary().unwrap(),
            1,
            &Nginx::load_purge_module(),
            &http,
        );
        let token = parties.token("bob").await;
        for attempt in 0..2 {
            let answer = reqwest::Client::new()
                .get(format!("http://{}/api/whoami", nginx.addr))
                .bearer_auth(&token)
                .header("X-User-Id", "1")
                .header("X-User-Id", "1")
                .header("x-user-name", "mallory")
                .header("X-Auth-Url", "http://evil")
                .header("X_User_Id", "1")
                .send()
                .await
                .unwrap();
            let hit = (answer.headers().get("x-token-resolver-cache")).is_some_and(|v| v == "HIT");
            let case = format!("cached: {cached}, attempt {attempt}");
            assert_eq!(
                answer.status(),
                200,
                "{case}: resolved at the default integrator, not the client's X-Auth-Url"
            );
            assert_eq!(
                hit,
                cached && attempt == 1,
                "{case}: answered from nginx's cache"
            );
            let seen = seen.lock().unwrap();
            assert_eq!(
                seen.len(),
                attempt + 1,
                "{case}: each request reached the backend"
            );
            let headers = seen.last().unwrap();
            assert_eq!(
                values(headers, "x-user-id"),
                ["2"],
                "{case}: Bob's id alone"
            );
            assert_eq!(values(headers, "x-user-name"), ["Bob"], "{case}");
            assert!(
                values(headers, "x_user_id").is_empty(),
                "{case}: nginx drops a header with an underscore, which some frameworks read as \
                 X-User-Id"
            );
            assert!(
                values(headers, "x-auth-url").is_empty(),
                "{case}: the client's X-Auth-Url: {:?}",
                values(headers, "x-auth-url")
            );
        }
    }
}
