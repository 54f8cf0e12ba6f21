//! `token-resolver demo --browser`: the three parties for a real browser. The integrator's
//! API serves the page (`/play`) and the login; the game server listens on WebSocket, allowing
//! the page's origin; the URL to open is printed, and everything runs until Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;

use token_resolver::Resolver;
use token_resolver_game_server::{GameServer, GameServerConfig, RoomConfig, WebSocketConfig};
use token_resolver_reference_api::{ApiConfig, ReferenceApi};

use super::narration::DemoError;

/// Starts the parties, prints the page's URL, and serves until Ctrl-C.
pub(super) async fn serve(out: &mut (dyn Write + Send)) -> Result<(), DemoError> {
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    // The API's address first (the game server resolves there), and the API last: the page
    // may open only the game server's WebSocket, whose address comes in between.
    let listener = tokio::net::TcpListener::bind(loopback).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let resolver = Resolver::builder().default_auth_url(&base).build()?;
    let config = GameServerConfig {
        rooms: RoomConfig::defaults(Some(&format!("{base}/"))),
        ..GameServerConfig::default()
    };
    let mut game = GameServer::new(resolver, config)?.spawn(loopback).await?;
    let ws = game
        .listen_websocket(
            loopback,
            WebSocketConfig {
                allowed_origins: vec![base.clone()],
                ..WebSocketConfig::default()
            },
        )
        .await?;
    let api_config = ApiConfig {
        play_game_urls: vec![format!("ws://{ws}/ws")],
        ..ApiConfig::default()
    };
    let api = ReferenceApi::new(api_config)?.spawn_on(listener)?;
    writeln!(
        out,
        "[integrator]  reference web API and the page on {base}"
    )?;
    writeln!(
        out,
        "[game server] ws://{ws}/ws (WebSocket, origin {base} allowed), tcp://{}",
        game.local_addr()
    )?;
    writeln!(
        out,
        "              demo users: alice/wonderland, bob/builder, carol/carolina\n"
    )?;
    writeln!(out, "open {base}/play?game=ws://{ws}/ws")?;
    writeln!(
        out,
        "or let it play by itself: {base}/play?autoplay=1&username=alice&password=wonderland&game=ws://{ws}/ws"
    )?;
    writeln!(out, "\nCtrl-C stops.")?;
    out.flush()?;
    let _ = tokio::signal::ctrl_c().await;
    game.shutdown().await;
    api.shutdown().await;
    Ok(())
}
