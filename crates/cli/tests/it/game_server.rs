//! The game server end to end, three parties on loopback: the reference API (HTTP), the game
//! server embedding a resolver (TCP, JSON lines), and a client using `IntegratorClient` and
//! `GameClient`.

use token_resolver_support as support;

/// The `token-resolver` binary these tests run.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

use std::time::Duration;

use serde_json::{json, Map};
use support::{
    game_server, game_server_with, login_and_take_token, reference_api, resolver_for, room,
    user_answer, Scripted,
};
use token_resolver::Identity;
use token_resolver_game_server::{
    GameServerConfig, BAD_REQUEST, IDLE_TIMEOUT, LINE_TOO_LONG, LOGIN_TIMEOUT, ROOM_NOT_FOUND,
    SERVER_BUSY,
};
use token_resolver_player::{GameClient, RoomInfo, RoomJoinArgs};

fn find<'a>(rooms: &'a [RoomInfo], id: &str) -> &'a RoomInfo {
    rooms.iter().find(|r| r.room_id == id).expect("room listed")
}

#[tokio::test]
async fn valid_token_joins_a_protected_room_and_the_server_sees_id_and_name() {
    // Pins down the whole flow: login -> token -> connect -> search -> join with the room's
    // authUrl, and the game server holding the right user in the room.
    let api = reference_api().await;
    let base = api.base_url();
    let resolver = resolver_for(&base).build().unwrap();
    let game = game_server(resolver, vec![room("arena", Some(&base))]).await;

    let mut integrator = token_resolver_player::IntegratorClient::new(&base).unwrap();
    integrator.login_password("bob", "builder").await.unwrap();
    let token = integrator
        .fetch_access_token()
        .await
        .unwrap()
        .secret()
        .to_owned();

    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let me = client.connect(Some(&token)).await.unwrap().unwrap();
    assert_eq!((me.id, me.name.as_str()), (2, "Bob"));

    let rooms = client.search_rooms().await.unwrap();
    let arena = find(&rooms, "arena");
    assert_eq!(arena.auth_url(), base);
    let joined = client
        .join(&RoomJoinArgs::new(arena, Map::new()), Some(&token))
        .await
        .unwrap();
    assert_eq!(joined.room_id, "arena");
    assert_eq!(joined.user.unwrap().id, 2);

    let members = game.members("arena");
    assert_eq!(members.len(), 1);
    let user = members[0].identity.user().expect("authenticated").clone();
    assert_eq!((user.id, user.name.as_str()), (2, "Bob"));
    // The join was served from the connect's cached answer.
    assert_eq!(api.api().user_requests(), 1);
}

#[tokio::test]
async fn search_room_sends_room_infos_in_camel_case_with_node_properties_auth_url() {
    // Pins down the SearchRoom wire shape: camelCase RoomInfo, protected rooms carry
    // nodeProperties.authUrl, open rooms carry none.
    let api = reference_api().await;
    let base = api.base_url();
    let game = game_server(
        resolver_for(&base).build().unwrap(),
        vec![room("lobby", None), room("arena", Some(&base))],
    )
    .await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let answer = client
        .request(&json!({"type": "search_room"}))
        .await
        .unwrap();
    assert_eq!(answer["type"], "rooms");
    let rooms = answer["rooms"].as_array().unwrap();
    assert_eq!(rooms[0]["roomId"], "lobby");
    assert!(rooms[0]["nodeProperties"].is_null());
    assert_eq!(rooms[1]["roomId"], "arena");
    assert_eq!(rooms[1]["nodeProperties"]["authUrl"], base);
    assert_eq!(rooms[1]["port"], game.local_addr().port());
    assert_eq!(rooms[1]["protocol"], "tcp");
}

#[tokio::test]
async fn rejected_or_missing_token_cannot_join() {
    // Pins down fail-closed joins: a made-up token is token_rejected, no token is
    // token_missing, a malformed one token_malformed; nobody ends up in the room.
    let api = reference_api().await;
    let base = api.base_url();
    let game = game_server(
        resolver_for(&base).build().unwrap(),
        vec![room("arena", Some(&base))],
    )
    .await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let arena = find(&client.search_rooms().await.unwrap(), "arena").clone();
    let args = RoomJoinArgs::new(&arena, Map::new());

    for (token, code) in [
        (Some("made-up-token"), "token_rejected"),
        (None, "token_missing"),
        (Some(""), "token_missing"),
        (Some("not a token"), "token_malformed"),
    ] {
        let err = client.join(&args, token).await.unwrap_err();
        assert_eq!(err.code(), Some(code), "{token:?}: {err}");
        let err = client.connect(token).await.unwrap_err();
        assert_eq!(err.code(), Some(code), "connect {token:?}");
    }
    assert!(game.members("arena").is_empty());
}

#[tokio::test]
async fn forged_auth_url_is_refused_with_no_request_reaching_the_forged_server() {
    // Pins down the game server's own check: a join naming another authUrl than the room's is
    // auth_url_not_allowed before any traffic, even when that URL is on the resolver's
    // allowlist (here it is another room's), and when it is not.
    let api = reference_api().await;
    let base = api.base_url();
    let forged = Scripted::start(|_, _| async { user_answer(666, "mallory") }).await;
    let resolver = resolver_for(&base)
        .allow_auth_url(forged.url())
        .build()
        .unwrap();
    let game = game_server(
        resolver,
        vec![
            room("arena", Some(&base)),
            room("mallorys-room", Some(&forged.url())),
        ],
    )
    .await;
    let token = login_and_take_token(&base, "alice", "wonderland").await;

    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let arena = find(&client.search_rooms().await.unwrap(), "arena").clone();
    for claimed in [
        forged.url(),
        format!("{}/", forged.url()),
        "https://vouches-for-anyone.example".to_owned(),
        String::new(),
        format!("{base}/elsewhere"),
    ] {
        let mut args = RoomJoinArgs::new(&arena, Map::new());
        args.auth_url = claimed.clone();
        let err = client.join(&args, Some(&token)).await.unwrap_err();
        assert_eq!(err.code(), Some("auth_url_not_allowed"), "{claimed:?}");
    }
    assert_eq!(forged.requests(), 0);
    assert_eq!(api.api().user_requests(), 0);
    assert_eq!(game.resolver().stats().upstream_calls, 0);
    assert!(game.members("arena").is_empty());
}

#[tokio::test]
async fn the_rooms_auth_url_in_another_spelling_is_accepted() {
    // Pins down the comparison rule: the join's authUrl matches the room's after
    // normalisation (scheme and host case, trailing slash).
    let api = reference_api().await;
    let base = api.base_url();
    let game = game_server(
        resolver_for(&base).build().unwrap(),
        vec![room("arena", Some(&base))],
    )
    .await;
    let token = login_and_take_token(&base, "carol", "carolina").await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let arena = find(&client.search_rooms().await.unwrap(), "arena").clone();
    let mut args = RoomJoinArgs::new(&arena, Map::new());
    args.auth_url = format!("{}/", base.replace("http://", "HTTP://"));
    let joined = client.join(&args, Some(&token)).await.unwrap();
    assert_eq!(joined.user.unwrap().name, "Carol");
}

#[tokio::test]
async fn rooms_without_auth_url_resolve_against_the_default_url() {
    // Pins down the client rule for rooms without nodeProperties.authUrl: the client sends ""
    // and the server resolves against the default URL, not against another room's.
    let api = reference_api().await;
    let base = api.base_url();
    let other = Scripted::start(|_, _| async { user_answer(666, "mallory") }).await;
    let resolver = resolver_for(&base)
        .allow_auth_url(other.url())
        .build()
        .unwrap();
    let game = game_server(
        resolver,
        vec![room("lobby", None), room("other", Some(&other.url()))],
    )
    .await;
    let token = login_and_take_token(&base, "alice", "wonderland").await;

    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let lobby = find(&client.search_rooms().await.unwrap(), "lobby").clone();
    assert_eq!(lobby.auth_url(), "");
    let joined = client
        .join(&RoomJoinArgs::new(&lobby, Map::new()), Some(&token))
        .await
        .unwrap();
    assert_eq!(joined.user.unwrap().id, 1);
    assert_eq!(api.api().user_requests(), 1);
    assert_eq!(other.requests(), 0);
}

#[tokio::test]
async fn with_auth_switched_off_joins_are_anonymous() {
    // Pins down auth_required(false): connect and join succeed with "user": null, whatever
    // the token, and no request reaches any auth API.
    let upstream = Scripted::start(|_, _| async { user_answer(1, "x") }).await;
    let resolver = resolver_for(&upstream.url())
        .auth_required(false)
        .build()
        .unwrap();
    let game = game_server(
        resolver,
        vec![room("lobby", None), room("arena", Some(&upstream.url()))],
    )
    .await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    assert_eq!(client.connect(None).await.unwrap(), None);
    let answer = client
        .request(&json!({"type": "connect", "access_token": "anything"}))
        .await
        .unwrap();
    assert_eq!(answer, json!({"type": "connected", "user": null}));
    for r in client.search_rooms().await.unwrap() {
        let joined = client
            .join(&RoomJoinArgs::new(&r, Map::new()), None)
            .await
            .unwrap();
        assert_eq!(joined.user, None);
    }
    assert_eq!(upstream.requests(), 0);
    assert_eq!(game.members("arena")[0].identity, Identity::Anonymous);
}

#[tokio::test]
async fn unknown_room_is_room_not_found_without_a_request() {
    // Pins down the game-server-level code room_not_found.
    let api = reference_api().await;
    let base = api.base_url();
    let game = game_server(
        resolver_for(&base).build().unwrap(),
        vec![room("lobby", None)],
    )
    .await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let args = RoomJoinArgs {
        room_id: "nowhere".into(),
        ..Default::default()
    };
    let err = client.join(&args, Some("some-token")).await.unwrap_err();
    assert_eq!(err.code(), Some(ROOM_NOT_FOUND));
    assert_eq!(api.api().user_requests(), 0);
}

#[tokio::test]
async fn over_long_line_is_refused_and_the_connection_closed() {
    // Pins down the line bound: past max_line_bytes the server answers line_too_long and
    // closes, without buffering the rest.
    let api = reference_api().await;
    let config = GameServerConfig {
        max_line_bytes: 1024,
        ..Default::default()
    };
    let game = game_server_with(resolver_for(&api.base_url()).build().unwrap(), config).await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let mut line = format!(
        r#"{{"type":"connect","access_token":"{}"}}"#,
        "a".repeat(4096)
    )
    .into_bytes();
    line.push(b'\n');
    let answer = client.request_line(&line).await.unwrap();
    assert_eq!(answer["error"], LINE_TOO_LONG);
    let closed = client.request(&json!({"type": "search_room"})).await;
    assert!(closed.is_err(), "{closed:?}");
    assert_eq!(api.api().user_requests(), 0);
}

#[tokio::test]
async fn malformed_messages_are_bad_request_and_the_connection_stays_open() {
    // Pins down bad_request: not JSON, unknown type, wrong field type; the error does not
    // echo the client's values, and the next message is served.
    let api = reference_api().await;
    let game = game_server(
        resolver_for(&api.base_url()).build().unwrap(),
        vec![room("lobby", None)],
    )
    .await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    for line in [
        &b"not json\n"[..],
        b"{\"type\":\"dance\"}\n",
        b"{\"type\":\"connect\",\"access_token\":5}\n",
        b"{\"type\":\"join\",\"roomId\":\"lobby\",\"host\":\"h\",\"port\":\"SECRET-VALUE\",\"protocol\":\"tcp\",\"authUrl\":\"\"}\n",
    ] {
        let answer = client.request_line(line).await.unwrap();
        assert_eq!(answer["error"], BAD_REQUEST, "{}", String::from_utf8_lossy(line));
        assert!(!answer["message"].as_str().unwrap().contains("SECRET"), "{answer}");
    }
    assert_eq!(client.search_rooms().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_idle_timeout() {
    // Pins down the idle bound: no complete message within idle_timeout -> idle_timeout, close.
    let api = reference_api().await;
    let config = GameServerConfig {
        idle_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let game = game_server_with(resolver_for(&api.base_url()).build().unwrap(), config).await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let answer = client.read_answer().await.unwrap();
    assert_eq!(answer["error"], IDLE_TIMEOUT);
    assert!(client.read_answer().await.is_err());
}

// Paused: the game server and the API run in-process, and the login timeout is on tokio's clock.
#[tokio::test(start_paused = true)]
async fn a_squatter_that_chats_but_never_logs_in_is_closed_at_the_login_timeout() {
    // Pins down "authenticate or leave": with one slot, a client that sends search_room every
    // 100 ms and never connects is told login_timeout and closed once the login timeout from
    // accept has passed (its messages do not extend it), and a real player takes the slot.
    const LOGIN: Duration = Duration::from_millis(700);
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let config = GameServerConfig {
        max_connections: 1,
        login_timeout: LOGIN,
        ..Default::default()
    };
    let game = game_server_with(resolver_for(&api.base_url()).build().unwrap(), config).await;
    let started = tokio::time::Instant::now();
    let mut squatter = GameClient::open(game.local_addr()).await.unwrap();
    let chatting = async {
        loop {
            match squatter.search_rooms().await {
                Ok(_) => tokio::time::advance(Duration::from_millis(100)).await,
                Err(e) => break e,
            }
        }
    };
    let refused = tokio::time::timeout(LOGIN + Duration::from_secs(5), chatting)
        .await
        .expect("the squatter was never closed");
    let held = started.elapsed();
    assert_eq!(refused.code(), Some(LOGIN_TIMEOUT), "{refused}");
    assert!(
        held >= LOGIN && held < LOGIN + Duration::from_secs(2),
        "closed after {held:?}, login timeout {LOGIN:?}"
    );
    assert!(squatter.read_answer().await.is_err(), "and closed");

    let player = std::sync::Mutex::new(None);
    support::eventually_async("the real player gets the slot", || async {
        let mut client = GameClient::open(game.local_addr()).await.unwrap();
        let me = client.connect(Some(&token)).await;
        let connected = me.is_ok();
        *player.lock().unwrap() = me.ok().flatten();
        connected
    })
    .await;
    assert_eq!(
        player.into_inner().unwrap().map(|p| p.id),
        Some(1),
        "the real player got the slot"
    );
}

// Paused: the game server and the API run in-process, and the login timeout is on tokio's clock.
#[tokio::test(start_paused = true)]
async fn a_player_who_logged_in_outlives_the_login_timeout() {
    // Pins down that the login timeout ends with a login: a connected player stays past it.
    let api = reference_api().await;
    let token = login_and_take_token(&api.base_url(), "alice", "wonderland").await;
    let config = GameServerConfig {
        login_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let game = game_server_with(resolver_for(&api.base_url()).build().unwrap(), config).await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    client.connect(Some(&token)).await.unwrap();
    // On the paused clock (no real time): a sleep rather than advance(), so that a login
    // timeout left running would have closed the session before the request below is sent.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(client.search_rooms().await.is_ok(), "still served");
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_with_server_busy() {
    // Pins down max_connections: one more connection is told server_busy and closed; a slot
    // frees when a connection closes.
    let api = reference_api().await;
    let config = GameServerConfig {
        max_connections: 1,
        ..Default::default()
    };
    let game = game_server_with(resolver_for(&api.base_url()).build().unwrap(), config).await;
    let mut first = GameClient::open(game.local_addr()).await.unwrap();
    first.search_rooms().await.unwrap();
    let mut second = GameClient::open(game.local_addr()).await.unwrap();
    let answer = second.read_answer().await.unwrap();
    assert_eq!(answer["error"], SERVER_BUSY);
    assert_eq!(answer["retryable"], true);
    drop(first);
    support::eventually_async("the slot is freed", || async {
        let mut c = GameClient::open(game.local_addr()).await.unwrap();
        c.search_rooms().await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn a_closed_connection_leaves_its_room() {
    // Pins down membership: one room per connection, and closing the connection leaves it.
    let upstream = Scripted::start(|_, _| async { user_answer(1, "x") }).await;
    let resolver = resolver_for(&upstream.url())
        .auth_required(false)
        .build()
        .unwrap();
    let game = game_server(resolver, vec![room("lobby", None), room("arena", None)]).await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    let rooms = client.search_rooms().await.unwrap();
    client
        .join(&RoomJoinArgs::new(find(&rooms, "lobby"), Map::new()), None)
        .await
        .unwrap();
    client
        .join(&RoomJoinArgs::new(find(&rooms, "arena"), Map::new()), None)
        .await
        .unwrap();
    assert_eq!(
        (game.members("lobby").len(), game.members("arena").len()),
        (0, 1)
    );
    drop(client);
    support::eventually("the closed connection leaves the arena", || {
        game.members("arena").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_game_server_subcommand_serves_the_protocol() {
    // Pins down `token-resolver game-server` as a real process: it listens, lists the default
    // rooms (the arena protected by --auth-url) and resolves a join against the reference API.
    let api = reference_api().await;
    let base = api.base_url();
    let server = support::GameServerProcess::start(BIN, &["--auth-url", &base], &[]).await;
    let addr = server.addr;

    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let mut client = GameClient::open(addr).await.unwrap();
    let rooms = client.search_rooms().await.unwrap();
    let arena = find(&rooms, "arena");
    assert_eq!(arena.auth_url(), base);
    let joined = client
        .join(&RoomJoinArgs::new(arena, Map::new()), Some(&token))
        .await;
    assert_eq!(joined.unwrap().user.unwrap().name, "Alice");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_game_server_subcommand_refuses_rooms_whose_auth_url_is_not_allowed() {
    // Pins down the startup check: a rooms file naming an authUrl outside the allowlist is a
    // usage error (exit 2) naming the flag to add, not a server whose joins all fail.
    let dir = std::env::temp_dir().join(format!("token-resolver-rooms-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rooms.json");
    std::fs::write(
        &file,
        r#"[{"roomId": "eu", "authUrl": "https://eu.auth.example"}]"#,
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_token-resolver"))
            .args([
                "game-server",
                "--listen",
                "127.0.0.1:0",
                "--auth-url",
                "https://auth.example",
            ])
            .arg("--rooms")
            .arg(&file)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allow-auth-url https://eu.auth.example")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_listener_runs_from_the_command_line() {
    // Pins down `game-server --ws-listen ADDR --allow-origin ORIGIN` as a real process.
    let server = support::GameServerProcess::start(
        BIN,
        &[
            "--auth-required",
            "false",
            "--ws-listen",
            "127.0.0.1:0",
            "--allow-origin",
            "http://play.example",
        ],
        &[],
    )
    .await;
    let addr: std::net::SocketAddr = server
        .banner
        .lines()
        .find(|l| l.starts_with("WebSocket listener on ws://"))
        .and_then(|l| l.split("ws://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{}", server.banner));
    let mut ws = support::ws::open(addr, "", Some("http://play.example"))
        .await
        .unwrap();
    assert_eq!(
        support::ws::ask(&mut ws, json!({"type": "search_room"})).await["type"],
        "rooms"
    );
}
