//! The shared Redis tier over TLS (`rediss://`, a CA made at run time) and with ACL users,
//! against real `redis-server` processes on free loopback ports: two resolvers in one process
//! act as two game-server nodes. Also the `game-server` binary's Redis flags and its check at
//! start.

use token_resolver_support as support;

/// The `token-resolver` binary these tests run.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

use std::time::Duration;

use support::{eventually, login_and_take_token, reference_api, resolver_for, Scripted};
use token_resolver::{RedisTier, RedisTierError, Resolver};
use token_resolver_support::redis::RedisServer;
use token_resolver_support::redis::RedisTls;

const SECRET: &str = "test-secret-of-32-bytes-length!!";
/// A password with every character a URL or a shell treats specially.
const ODD_PASSWORD: &str = "p@ss:w/rd %20#?&=\"'ü\\ end";

/// A node on `tier`. Its first operation makes the connection (TLS and the ACL login
/// included) within the op timeout, and a loaded machine must not turn that into an outage:
/// nothing here measures the bound.
fn node(api_url: &str, tier: RedisTier) -> Resolver {
    resolver_for(api_url)
        .shared_cache(tier.op_timeout(Duration::from_secs(2)))
        .build()
        .unwrap()
}

/// `s` percent-encoded for a URL's userinfo.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Adds ACL user `game` with `password` to `server`, allowed everything.
fn add_user(server: &RedisServer, password: &str) {
    let pass = format!(">{password}");
    server
        .command(&["ACL", "SETUSER", "game", "on", &pass, "~*", "&*", "+@all"])
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_answers_and_invalidations_over_tls_as_an_acl_user() {
    // Pins down rediss:// with a private CA and user:password@: node B answers from what node
    // A stored, and A's invalidation reaches B, all through the TLS port.
    let Some(tls) = RedisTls::start(&[]) else {
        return;
    };
    add_user(&tls.server, ODD_PASSWORD);
    let url = tls.url(&format!("game:{}@", encode(ODD_PASSWORD)));
    let tier = || RedisTier::new(&url, SECRET).root_certificate(&tls.ca_pem);
    tier().check(Duration::from_secs(2)).await.unwrap();
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let (a, b) = (node(&base, tier()), node(&base, tier()));

    a.resolve(&base, &token).await.unwrap();
    eventually("A's answer reaches Redis", || tls.server.entry_count() >= 1).await;
    assert_eq!(b.resolve(&base, &token).await.unwrap().name, "Alice");
    assert_eq!(api.api().user_requests(), 1, "B answered from Redis");
    assert_eq!(b.stats().shared_hits, 1);

    eventually("B listens", || b.shared_cache_subscribed()).await;
    a.invalidate(&base, &token);
    eventually("B evicts the token", || b.stats().entries == 0).await;
    assert_eq!((a.stats().shared_errors, b.stats().shared_errors), (0, 0));
    let shown = format!("{:?}", tier());
    assert!(!shown.contains("p@ss") && !shown.contains("%40"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_refused_and_resolutions_go_on_through_the_api() {
    // Pins down TLS verification: without the private CA the server's certificate is refused
    // (check says so, naming TLS), nothing is stored, and every resolution still succeeds.
    let Some(tls) = RedisTls::start(&[]) else {
        return;
    };
    let tier = || RedisTier::new(tls.url(""), SECRET);
    let err = tier().check(Duration::from_secs(2)).await.unwrap_err();
    assert!(matches!(err, RedisTierError::Tls { .. }), "{err:?}");
    assert!(err.is_config());
    assert!(err.to_string().contains("certificate"), "{err}");

    let api = Scripted::start(|n, _| async move { support::user_answer(n as i64, "p") }).await;
    let a = node(&api.url(), tier());
    for i in 0..5 {
        a.resolve(&api.url(), &format!("t{i}")).await.unwrap();
    }
    assert!(a.stats().shared_errors >= 1);
    assert_eq!(
        tls.server.entry_count(),
        0,
        "nothing crossed an untrusted TLS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_odd_password_works_percent_encoded_in_the_url_and_set_apart() {
    // Pins down passwords with reserved characters: percent-encoded in the URL, and raw
    // through `password` (as TOKEN_RESOLVER_REDIS_PASSWORD gives it) for a URL without one.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    add_user(&redis, ODD_PASSWORD);
    let port = redis.port();
    let by_url = RedisTier::new(
        format!("redis://game:{}@127.0.0.1:{port}", encode(ODD_PASSWORD)),
        SECRET,
    );
    let set_apart =
        RedisTier::new(format!("redis://game@127.0.0.1:{port}"), SECRET).password(ODD_PASSWORD);
    by_url.check(Duration::from_secs(2)).await.unwrap();
    set_apart.check(Duration::from_secs(2)).await.unwrap();

    let api = Scripted::start(|_, _| async { support::user_answer(7, "odd") }).await;
    let (a, b) = (node(&api.url(), by_url), node(&api.url(), set_apart));
    a.resolve(&api.url(), "t").await.unwrap();
    eventually("A's answer reaches Redis", || redis.entry_count() >= 1).await;
    b.resolve(&api.url(), "t").await.unwrap();
    assert_eq!(api.requests(), 1, "B answered from Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_reported_counted_and_never_logged() {
    // Pins down a refused ACL login: check says so, resolutions go on through the API, the
    // error is counted by op, and the password shows in no log line, metric or Debug output.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (logs, snapshotter) = support::capture_everything();
    add_user(&redis, "the-right-one");
    let wrong = "WRONG-pass-word";
    let url = format!("redis://game:{wrong}@127.0.0.1:{}", redis.port());
    let err = RedisTier::new(&url, SECRET)
        .check(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, RedisTierError::Auth { .. }), "{err:?}");

    let api = Scripted::start(|n, _| async move { support::user_answer(n as i64, "p") }).await;
    let a = node(&api.url(), RedisTier::new(&url, SECRET));
    for i in 0..5 {
        a.resolve(&api.url(), &format!("t{i}")).await.unwrap();
    }
    a.invalidate_all();
    assert!(a.stats().shared_errors >= 1);
    eventually("the error is logged", || {
        logs.text().contains("shared cache")
    })
    .await;

    let ops = || -> Vec<String> {
        (snapshotter.snapshot().into_vec().iter())
            .filter(|(k, ..)| {
                k.key().name() == token_resolver::telemetry::SHARED_CACHE_ERRORS_TOTAL
            })
            .flat_map(|(k, ..)| {
                k.key()
                    .labels()
                    .map(|l| l.value().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    // A node's look-up reads the tier's generation, then the entry. The tier rests after a
    // failure, and look-ups skip it meanwhile: when the revocation stream's failed first, they
    // skipped it, so fresh ones are made until one reaches Redis.
    let fresh = std::sync::atomic::AtomicUsize::new(5);
    support::eventually_async("a look-up's error is counted by op", || async {
        let counted = ops().iter().any(|op| op == "generation" || op == "get");
        if !counted {
            let n = fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            a.resolve(&api.url(), &format!("t{n}")).await.unwrap();
        }
        counted
    })
    .await;
    let ops = ops();
    for shown in [
        logs.text(),
        format!("{err} {err:?}"),
        format!("{a:?}"),
        format!("{ops:?}"),
    ] {
        assert!(!shown.contains(wrong), "the password leaked: {shown}");
    }
}

/// Runs `token-resolver game-server` with `args` until it exits or 10 s pass: its status and
/// stderr, or `None` if it was still running (then it is killed).
fn game_server_exit(args: &[&str], envs: &[(&str, &str)]) -> Option<(i32, String)> {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_token-resolver"))
        .args(["game-server", "--listen", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output().unwrap()));
    match exited.recv_timeout(Duration::from_secs(10)) {
        Ok(output) => Some((
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )),
        Err(_) => {
            // Still running: the waiting thread reaps it.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = exited.recv();
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn game_server_refuses_an_untrusted_redis_certificate_at_start() {
    // Pins down the binary's check at start: an untrusted certificate exits 2 naming TLS and
    // the certificate; with --redis-ca and the password from the environment it starts.
    let Some(tls) = RedisTls::start(&[]) else {
        return;
    };
    add_user(&tls.server, ODD_PASSWORD);
    let url = tls.url("game@");
    let secret = [("TOKEN_RESOLVER_REDIS_SECRET", SECRET)];
    let api = "http://127.0.0.1:9/";
    let refused = game_server_exit(&["--auth-url", api, "--redis-url", &url], &secret);
    let (code, stderr) = refused.expect("game-server exits");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("certificate"), "{stderr}");
    assert!(!stderr.contains(ODD_PASSWORD));

    let ca = std::env::temp_dir().join(format!("token-resolver-ca-{}.pem", tls.tls_port()));
    std::fs::write(&ca, &tls.ca_pem).unwrap();
    let ca_path = ca.to_string_lossy().into_owned();
    let envs = [
        ("TOKEN_RESOLVER_REDIS_SECRET", SECRET),
        ("TOKEN_RESOLVER_REDIS_PASSWORD", ODD_PASSWORD),
    ];
    let args = [
        "--auth-url",
        api,
        "--redis-url",
        &url,
        "--redis-ca",
        &ca_path,
    ];
    let server = support::GameServerProcess::start(BIN, &args, &envs).await;
    drop(server);
    let wrong = [
        ("TOKEN_RESOLVER_REDIS_SECRET", SECRET),
        ("TOKEN_RESOLVER_REDIS_PASSWORD", "not-it"),
    ];
    let refused = game_server_exit(&args, &wrong);
    let _ = std::fs::remove_file(&ca);
    let (code, stderr) = refused.expect("game-server exits");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("credentials"), "{stderr}");
    assert!(!stderr.contains("not-it"), "{stderr}");
}

/// A `token-resolver game-server` process sharing `redis`.
struct Node(support::GameServerProcess);

impl Node {
    async fn start(api_url: &str, redis: &RedisServer) -> Node {
        let args = ["--auth-url", api_url, "--redis-url", &redis.url()];
        Node(
            support::GameServerProcess::start(
                BIN,
                &args,
                &[("TOKEN_RESOLVER_REDIS_SECRET", SECRET)],
            )
            .await,
        )
    }

    /// Joins the arena (protected by the default authUrl) with `token`; the user's name.
    async fn join_arena(&self, token: &str) -> String {
        use token_resolver_player::{GameClient, RoomJoinArgs};
        let mut client = GameClient::open(self.0.addr).await.unwrap();
        let rooms = client.search_rooms().await.unwrap();
        let arena = rooms
            .iter()
            .find(|r| r.room_id == "arena")
            .expect("an arena");
        let joined = client
            .join(&RoomJoinArgs::new(arena, Default::default()), Some(token))
            .await
            .unwrap();
        joined.user.expect("auth is on").name
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_game_server_processes_share_one_redis() {
    // Pins down the deployment the tier exists for: a player joins on one game-server process,
    // then on another, and the integrator's API is called once.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let one = Node::start(&api.base_url(), &redis).await;
    let two = Node::start(&api.base_url(), &redis).await;

    assert_eq!(one.join_arena(&token).await, "Alice");
    eventually("node one's answer reaches Redis", || {
        redis.entry_count() > 0
    })
    .await;
    assert_eq!(two.join_arena(&token).await, "Alice");
    assert_eq!(
        api.api().user_requests(),
        1,
        "the second process answered from Redis"
    );
}
