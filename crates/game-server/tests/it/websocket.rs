//! The game server's WebSocket transport, from a real WebSocket client on loopback: the same
//! protocol and rules as over TCP, one message per text frame, and the checks only a browser
//! needs (its origin, no token in the URL).

use token_resolver_support as support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::ws::{ask, close_code, next_json, open, open_from};
use support::{
    connect_from, eventually, game_server_with, login_and_take_token, reference_api, resolver_for,
    room, user_answer, Scripted,
};
use token_resolver::Resolver;
use token_resolver_game_server::{
    GameServerConfig, RunningGameServer, WebSocketConfig, RATE_LIMITED, TOO_MANY_CONNECTIONS,
};
use token_resolver_player::{GameClient, RoomInfo};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// A game server with `config`'s rooms and limits, listening on TCP and on WebSocket (with
/// `origins` allowed).
async fn server_with(
    resolver: Resolver,
    config: GameServerConfig,
    origins: &[&str],
) -> (RunningGameServer, SocketAddr) {
    let mut game = game_server_with(resolver, config).await;
    let ws = game
        .listen_websocket(
            "127.0.0.1:0".parse().unwrap(),
            WebSocketConfig {
                allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
                ..WebSocketConfig::default()
            },
        )
        .await
        .unwrap();
    (game, ws)
}

/// A server with auth switched off and the default rooms.
async fn anonymous(config: GameServerConfig) -> (RunningGameServer, SocketAddr) {
    let resolver = Resolver::builder().auth_required(false).build().unwrap();
    server_with(resolver, config, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_connects_searches_and_joins_over_websocket() {
    // Pins down the transport: the same messages as over TCP, one per text frame; the rooms
    // a WebSocket client finds advertise the WebSocket listener.
    let api = reference_api().await;
    let base = api.base_url();
    let token = login_and_take_token(&base, "alice", "wonderland").await;
    let resolver = resolver_for(&base).build().unwrap();
    let config = GameServerConfig {
        rooms: vec![
            room("lobby", None),
            room("arena", Some(&format!("{base}/"))),
        ],
        ..GameServerConfig::default()
    };
    let (_game, addr) = server_with(resolver, config, &[]).await;
    let mut ws = open(addr, "", None).await.unwrap();
    let connected = ask(&mut ws, json!({"type": "connect", "access_token": token})).await;
    assert_eq!(connected["user"], json!({"id": 1, "name": "Alice"}));
    let rooms = ask(&mut ws, json!({"type": "search_room"})).await;
    let rooms: Vec<RoomInfo> = serde_json::from_value(rooms["rooms"].clone()).unwrap();
    assert!(rooms
        .iter()
        .all(|r| r.protocol == "ws" && r.port == addr.port()));
    let arena = rooms.iter().find(|r| r.room_id == "arena").unwrap();
    let joined = ask(
        &mut ws,
        json!({"type": "join", "roomId": "arena", "authUrl": arena.auth_url(),
               "host": arena.host, "port": arena.port, "protocol": "ws",
               "access_token": token}),
    )
    .await;
    assert_eq!(joined["type"], "joined");
    assert_eq!(joined["user"]["id"], 1);
    assert_eq!(api.api().user_requests(), 1, "the join was a cache hit");
}

#[tokio::test]
async fn a_browser_from_an_origin_not_allowed_is_refused_with_403() {
    // Pins down the defence against cross-site WebSocket hijacking: a listed origin (in any
    // case, with or without a trailing slash) is accepted, another refused, and a client
    // without an Origin (not a browser) accepted.
    let resolver = Resolver::builder().auth_required(false).build().unwrap();
    let (_game, addr) = server_with(
        resolver,
        GameServerConfig::default(),
        &["https://play.example.com/"],
    )
    .await;
    assert!(open(addr, "", Some("HTTPS://Play.Example.com"))
        .await
        .is_ok());
    assert!(open(addr, "", None).await.is_ok());
    for origin in [
        "https://evil.example",
        "https://play.example.com.evil.example",
        "null",
    ] {
        match open(addr, "", Some(origin)).await {
            Err(WsError::Http(response)) => assert_eq!(response.status(), 403, "{origin}"),
            other => panic!("{origin}: expected a 403, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_token_in_the_url_is_refused() {
    // Pins down "tokens travel in a message, never in a URL": the upgrade is refused with 400
    // when the query names a token, whatever its case.
    let (_game, addr) = anonymous(GameServerConfig::default()).await;
    for query in [
        "?access_token=abc",
        "?v=1&Token=abc",
        "?AUTHORIZATION=Bearer%20x",
    ] {
        match open(addr, query, None).await {
            Err(WsError::Http(response)) => assert_eq!(response.status(), 400, "{query}"),
            other => panic!("{query}: expected a 400, got {other:?}"),
        }
    }
    assert!(open(addr, "?v=1", None).await.is_ok(), "other queries pass");
}

#[tokio::test]
async fn binary_frames_and_garbage_are_bad_requests_and_the_session_goes_on() {
    // Pins down the answers to frames the protocol cannot use: each is `bad_request`, and the
    // next good message is answered.
    let (_game, addr) = anonymous(GameServerConfig::default()).await;
    let mut ws = open(addr, "", None).await.unwrap();
    ws.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next_json(&mut ws).await["error"], "bad_request");
    assert_eq!(
        ask(&mut ws, json!({"type": "teleport"})).await["error"],
        "bad_request"
    );
    ws.send(Message::text("{not json")).await.unwrap();
    assert_eq!(next_json(&mut ws).await["error"], "bad_request");
    assert_eq!(
        ask(&mut ws, json!({"type": "search_room"})).await["type"],
        "rooms"
    );
}

#[tokio::test]
async fn an_oversized_frame_closes_the_session_with_1009() {
    // Pins down the size cap over WebSocket: a 10 MB frame is not read whole, the client is
    // told `line_too_long`, and the close code is 1009 (message too big).
    let config = GameServerConfig {
        max_line_bytes: 1024,
        ..GameServerConfig::default()
    };
    let (game, addr) = anonymous(config).await;
    let (mut sink, mut stream) = open(addr, "", None).await.unwrap().split();
    // Sent from its own task, as a browser buffers a send: the server reads no more than the
    // frame's head, so the send only ends when the connection does.
    let sending = tokio::spawn(async move { sink.send(Message::text("x".repeat(10 << 20))).await });
    let mut frames = Vec::new();
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(Duration::from_secs(10), stream.next()).await
    {
        frames.push(frame);
    }
    let _ = sending.await;
    match frames.as_slice() {
        [Message::Text(text), Message::Close(Some(close))] => {
            assert_eq!(
                serde_json::from_str::<Value>(text).unwrap()["error"],
                "line_too_long"
            );
            assert_eq!(close.code, CloseCode::Size);
        }
        other => panic!("expected line_too_long then a 1009 close, got {other:?}"),
    }
    let mut tcp = GameClient::open(game.local_addr()).await.unwrap();
    assert!(tcp.search_rooms().await.is_ok(), "the server serves on");
}

#[tokio::test(start_paused = true)]
async fn a_silent_or_only_pinging_client_is_closed_at_the_idle_timeout() {
    // Pins down the idle timeout over WebSocket: pings are answered but are not messages, so
    // a client that only pings is closed like one that never sends. On a paused clock: the
    // timeout and the pings are timers of this runtime, the server in it on loopback.
    let config = GameServerConfig {
        idle_timeout: Duration::from_millis(400),
        ..GameServerConfig::default()
    };
    let (_game, addr) = anonymous(config).await;
    let mut silent = open(addr, "", None).await.unwrap();
    assert_eq!(next_json(&mut silent).await["error"], "idle_timeout");
    let mut pinging = open(addr, "", None).await.unwrap();
    let pinger = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(50));
        loop {
            if pinging.send(Message::Ping(vec![1].into())).await.is_err() {
                return pinging;
            }
            every.tick().await;
            if let Ok(Some(Ok(Message::Text(text)))) =
                tokio::time::timeout(Duration::from_millis(1), pinging.next()).await
            {
                assert!(text.contains("idle_timeout"), "{text}");
                return pinging;
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(5), pinger)
        .await
        .expect("the pinging client is closed")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_is_shared_by_both_transports() {
    // Pins down one cap for TCP and WebSocket: with the only slot held over TCP, a WebSocket
    // client is told `server_busy` (retryable) and closed with 1013; once the TCP client
    // leaves, a WebSocket client gets in.
    let config = GameServerConfig {
        max_connections: 1,
        ..GameServerConfig::default()
    };
    let (game, addr) = anonymous(config).await;
    let mut tcp = GameClient::open(game.local_addr()).await.unwrap();
    tcp.search_rooms().await.unwrap();
    let mut refused = open(addr, "", None).await.unwrap();
    let busy = next_json(&mut refused).await;
    assert_eq!(
        (busy["error"].clone(), busy["retryable"].clone()),
        (json!("server_busy"), json!(true))
    );
    assert_eq!(close_code(&mut refused).await, Some(CloseCode::Again));
    drop(tcp);
    support::eventually_async("a WebSocket client gets the freed slot", || async move {
        let mut ws = open(addr, "", None).await.unwrap();
        ask(&mut ws, json!({"type": "search_room"})).await["type"] == "rooms"
    })
    .await;
}

fn loopback(last: u8) -> std::net::IpAddr {
    std::net::IpAddr::from([127, 0, 0, last])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_past_its_share_is_refused_on_both_transports_and_a_neighbour_gets_in() {
    // Pins down the per-address cap, counted over both transports: 127.0.0.2 holding a TCP and
    // a WebSocket session, its share, is told `too_many_connections` (retryable) on either,
    // while 127.0.0.3 is served; once 127.0.0.2 lets one go it gets in again.
    let config = GameServerConfig {
        max_connections_per_address: 2,
        ..GameServerConfig::default()
    };
    let (game, addr) = anonymous(config).await;
    let crowd = loopback(2);
    let mut tcp = GameClient::over(
        connect_from(game.local_addr(), crowd).await,
        game.local_addr(),
    );
    tcp.search_rooms().await.unwrap();
    let mut ws = open_from(addr, crowd).await.unwrap();
    assert_eq!(
        ask(&mut ws, json!({"type": "search_room"})).await["type"],
        "rooms"
    );

    let mut refused = open_from(addr, crowd).await.unwrap();
    let answer = next_json(&mut refused).await;
    assert_eq!(
        (answer["error"].clone(), answer["retryable"].clone()),
        (json!(TOO_MANY_CONNECTIONS), json!(true))
    );
    assert_eq!(close_code(&mut refused).await, Some(CloseCode::Again));
    let mut over_tcp = GameClient::over(
        connect_from(game.local_addr(), crowd).await,
        game.local_addr(),
    );
    assert_eq!(
        over_tcp.read_answer().await.unwrap()["error"],
        TOO_MANY_CONNECTIONS
    );

    let mut neighbour = open_from(addr, loopback(3)).await.unwrap();
    assert_eq!(
        ask(&mut neighbour, json!({"type": "search_room"})).await["type"],
        "rooms"
    );
    drop(tcp);
    support::eventually_async(
        "127.0.0.2 gets in again once it let a session go",
        || async move {
            let mut ws = open_from(addr, crowd).await.unwrap();
            ask(&mut ws, json!({"type": "search_room"})).await["type"] == "rooms"
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_from_one_address_take_only_its_share_of_the_websocket_listener() {
    // 127.0.0.2 opens three sockets that never send a request head, its share: a fourth from
    // it is answered a quick 503, while 127.0.0.3 upgrades and plays.
    let config = GameServerConfig {
        max_connections_per_address: 3,
        ..GameServerConfig::default()
    };
    let (_game, addr) = anonymous(config).await;
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(connect_from(addr, loopback(2)).await);
    }
    // The listener accepts and counts connections in the order they were made: once the
    // neighbour's, made after them, is answered, the three silent ones hold their places.
    let mut player = open_from(addr, loopback(3)).await.unwrap();
    assert_eq!(
        ask(&mut player, json!({"type": "search_room"})).await["type"],
        "rooms"
    );
    let mut fourth = connect_from(addr, loopback(2)).await;
    let answer = support::read_all(&mut fourth, Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_connections_gets_the_cap_and_refusals_and_the_server_serves_on() {
    // Pins down "opens 2,000 connections": a client opening far more connections than the
    // cap gets exactly the cap in sessions and `server_busy` for every other one, and the
    // server still answers a new client once they are gone.
    let config = GameServerConfig {
        max_connections: 25,
        ..GameServerConfig::default()
    };
    let (game, addr) = anonymous(config).await;
    let mut admitted = Vec::new();
    let mut busy = 0;
    for _ in 0..2_000 {
        let mut ws = open(addr, "", None).await.unwrap();
        if ask(&mut ws, json!({"type": "search_room"})).await["type"] == "rooms" {
            admitted.push(ws);
        } else {
            busy += 1;
        }
    }
    assert_eq!((admitted.len(), busy), (25, 1_975));
    drop(admitted);
    let tcp_addr = game.local_addr();
    support::eventually_async(
        "the server serves a new client once the flood is gone",
        || async move {
            let mut tcp = GameClient::open(tcp_addr).await.unwrap();
            tcp.search_rooms().await.is_ok()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_explains_itself_over_a_bounded_number_of_websockets_and_503s_the_rest() {
    // Pins down the bound on refusals: each `server_busy` over a WebSocket holds a socket until
    // its close handshake (up to half a second with a client that does not answer), so a flood
    // of upgrades at a full server gets a bounded number of them, and plain HTTP 503s beyond.
    let config = GameServerConfig {
        max_connections: 1,
        ..GameServerConfig::default()
    };
    let (_game, addr) = anonymous(config).await;
    let mut held = open(addr, "", None).await.unwrap();
    assert_eq!(
        ask(&mut held, json!({"type": "search_room"})).await["type"],
        "rooms"
    );
    // One after another, each kept open and never answering the close: every upgrade frees
    // its HTTP connection's place, so only the refusals' own bound can stop them.
    let mut flood = Vec::new();
    for _ in 0..200 {
        flood.push(open(addr, "", None).await);
    }
    let upgraded = flood.iter().filter(|r| r.is_ok()).count();
    let refused_by_http = flood
        .iter()
        .filter(|r| matches!(r, Err(WsError::Http(response)) if response.status() == 503))
        .count();
    assert_eq!(upgraded + refused_by_http, 200, "every one answered");
    assert!(
        refused_by_http > 0,
        "{upgraded} upgraded, none refused by HTTP"
    );
}

#[tokio::test(start_paused = true)]
async fn one_message_at_a_time_per_websocket_session() {
    // Pins down "one resolution at a time per connection" over WebSocket: two connects sent
    // back to back are resolved one after the other, never both at once. The integrator
    // answers only when the test lets it; on a paused clock, as everything runs in this runtime.
    let answers = Arc::new(tokio::sync::Semaphore::new(0));
    let upstream = Scripted::start({
        let answers = answers.clone();
        move |n, _| {
            let answers = answers.clone();
            async move {
                answers.acquire().await.unwrap().forget();
                user_answer(n as i64 + 1, "p")
            }
        }
    })
    .await;
    let resolver = resolver_for(&upstream.url()).build().unwrap();
    let (_game, addr) = server_with(resolver, GameServerConfig::default(), &[]).await;
    let mut ws = open(addr, "", None).await.unwrap();
    for token in ["first", "second"] {
        ws.send(Message::text(
            json!({"type": "connect", "access_token": token}).to_string(),
        ))
        .await
        .unwrap();
    }
    eventually("the first connect reaches the integrator", || {
        upstream.requests() == 1
    })
    .await;
    // While the first call is held (the time runs on only once everything else waits), the
    // second connect is not resolved.
    let early = tokio::time::timeout(Duration::from_millis(100), ws.next()).await;
    assert!(
        early.is_err(),
        "an answer while the call was held: {early:?}"
    );
    assert_eq!(
        upstream.requests(),
        1,
        "the second connect waits for the first"
    );
    answers.add_permits(2);
    assert_eq!(next_json(&mut ws).await["user"]["id"], 1);
    assert_eq!(next_json(&mut ws).await["user"]["id"], 2);
    assert_eq!(upstream.max_in_flight(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_tells_websocket_clients_to_go_with_1001() {
    // Pins down the drain over WebSocket: the shutdown message, then close code 1001 (going
    // away), and no new upgrade.
    let (game, addr) = anonymous(GameServerConfig::default()).await;
    let mut ws = open(addr, "", None).await.unwrap();
    ask(&mut ws, json!({"type": "search_room"})).await;
    let drained = tokio::spawn(game.drain(Duration::from_secs(5)));
    assert_eq!(
        next_json(&mut ws).await,
        json!({"type": "shutdown", "retry_after_ms": 1000})
    );
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Away));
    drained.await.unwrap();
    eventually("the WebSocket listener stopped", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
}

#[tokio::test]
async fn an_address_whose_made_up_tokens_keep_being_rejected_is_rate_limited_on_both_transports() {
    // Pins down the rejection budget: three made-up tokens from one address reach the
    // integrator and are rejected; the fourth, over TCP or over WebSocket, is answered
    // rate_limited (retryable) without another call.
    let api = reference_api().await;
    let config = GameServerConfig {
        rejection_budget: 3,
        ..GameServerConfig::default()
    };
    let (game, ws) = server_with(resolver_for(&api.base_url()).build().unwrap(), config, &[]).await;
    let mut client = GameClient::open(game.local_addr()).await.unwrap();
    for i in 0..3 {
        let refused = client
            .connect(Some(&format!("made-up-{i}")))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("token_rejected"), "{refused}");
    }
    assert_eq!(api.api().user_requests(), 3);
    let refused = client.connect(Some("made-up-3")).await.unwrap_err();
    assert_eq!(refused.code(), Some(RATE_LIMITED), "{refused}");
    let mut socket = open(ws, "", None).await.unwrap();
    let answer = ask(
        &mut socket,
        json!({"type": "connect", "access_token": "made-up-4"}),
    )
    .await;
    assert_eq!(answer["error"], RATE_LIMITED, "{answer}");
    assert_eq!(answer["retryable"], true);
    assert_eq!(api.api().user_requests(), 3, "no call past the budget");
}
