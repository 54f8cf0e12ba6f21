//! nginx answers from its cache without asking the sidecar: while the sidecar's node cannot hear
//! the shared tier's revocations, nothing it let nginx keep may stay there. With a real
//! redis-server behind a relay the test freezes, a real API and a loopback recorder standing in
//! for nginx's purge location: the link goes half-open, and within 5 s every granted answer is
//! purged and new answers are sent uncacheable; once the link heals, answers are granted again.

use token_resolver_support as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::redis::RedisServer;
use support::{
    eventually, eventually_async, eventually_within, respond, user_answer, Relay, Scripted,
};
use token_resolver::{RedisTier, Resolver};
use token_resolver_sidecar::{NginxCache, Sidecar, SidecarConfig, PURGE_HEADER};

const REDIS_SECRET: &str = "a-redis-secret-of-32-bytes-long!";

/// `/v1/authorize` for `token`: its status and `X-Accel-Expires`.
async fn authorize(http: &reqwest::Client, base: &str, token: &str) -> (u16, String) {
    let answer = http
        .get(format!("{base}/v1/authorize"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let expires = answer
        .headers()
        .get("x-accel-expires")
        .map_or("", |v| v.to_str().unwrap())
        .to_owned();
    (answer.status().as_u16(), expires)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_hear_revocations_takes_back_what_nginx_keeps_and_grants_nothing() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let relay = Relay::start(redis.addr()).await;
    let api = Scripted::start(|_, seen| async move {
        match seen.header("authorization") {
            Some("Bearer alice") => user_answer(1, "Alice"),
            _ => respond(401, &[], b""),
        }
    })
    .await;
    let purged: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = {
        let purged = purged.clone();
        Scripted::start(move |_, seen| {
            let purged = purged.clone();
            async move {
                if let Some(key) = seen.header(PURGE_HEADER) {
                    purged.lock().unwrap().push(key.to_owned());
                }
                respond(200, &[], b"")
            }
        })
        .await
    };
    let tier = RedisTier::new(format!("redis://{}", relay.addr()), REDIS_SECRET)
        .op_timeout(Duration::from_millis(200));
    let resolver = Resolver::builder()
        .default_auth_url(api.url())
        .shared_cache(tier)
        .build()
        .unwrap();
    let config = SidecarConfig {
        nginx_cache: Some(NginxCache::new(&format!("{}/purge", recorder.url())).unwrap()),
        ..SidecarConfig::default()
    };
    let sidecar = Sidecar::new(resolver.clone(), config)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let base = format!("http://{}", sidecar.local_addr());
    let http = reqwest::Client::new();
    eventually("the node reads the revocation stream", || {
        resolver.shared_cache_subscribed()
    })
    .await;
    // The sidecar learns it hears within its poll: wait until an answer is granted.
    eventually_async("an answer is granted", || async {
        let (status, expires) = authorize(&http, &base, "alice").await;
        assert_eq!(status, 200);
        expires != "0"
    })
    .await;
    assert!(purged.lock().unwrap().is_empty());

    relay.refuse(true);
    relay.silence_open_connections();
    let frozen = Instant::now();
    // Real time: the loss is a real socket's silence, noticed by the reader's own timeout.
    eventually("alice's answer is purged", || {
        purged.lock().unwrap().iter().any(|k| k == "Bearer alice")
    })
    .await;
    assert!(
        frozen.elapsed() < Duration::from_secs(5),
        "nginx still kept alice's answer 5 s into the loss: {:?}",
        frozen.elapsed()
    );
    eprintln!("purged {:?} into the loss", frozen.elapsed());
    let (status, expires) = authorize(&http, &base, "alice").await;
    assert_eq!(
        (status, expires.as_str()),
        (200, "0"),
        "answered, never kept"
    );

    relay.refuse(false);
    let healed = Instant::now();
    // Within 15 s: the reader notices the heal on its own schedule, then reads up to date.
    eventually_within(
        "an answer is granted after the link healed",
        Duration::from_secs(15),
        || async {
            let (status, expires) = authorize(&http, &base, "alice").await;
            assert_eq!(status, 200);
            expires != "0"
        },
    )
    .await;
    eprintln!("granted {:?} after the link healed", healed.elapsed());
}
