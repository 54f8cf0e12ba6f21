//! `demo --sidecar`: the flow of a game server not written in Rust. The foreign server here is
//! written in Rust only to run in this process: it uses nothing of the library, only what a C#,
//! Go or Node.js server would, HTTP/JSON to the sidecar (`POST /v1/resolve` with its connection
//! id as the session) and its Server-Sent Events (`GET /v1/events`), and closes a player's
//! socket when told `revoked`. The player, the integrator (the reference API, which tells the
//! sidecar's admin listener of bans) and a proxy's `/v1/authorize` call take part too.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};
use token_resolver::Resolver;
use token_resolver_loadgen::SseReader;
use token_resolver_player::IntegratorClient;
use token_resolver_reference_api::{ApiConfig, ReferenceApi};
use token_resolver_sessions::{spawn_admin, AdminConfig, AdminSecret};
use token_resolver_sidecar::{Sidecar, SidecarConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::narration::{ms, step, DemoError};

/// The secret the integrator sends to the sidecar's admin listener.
const ADMIN_SECRET: &str = "demo-sidecar-admin-secret-32-bytes";

/// Runs the sidecar demo, printing to `out`.
///
/// # Errors
///
/// When a server cannot start, or a step's outcome is not the expected one.
pub(super) async fn narrate(out: &mut (dyn Write + Send)) -> Result<(), DemoError> {
    writeln!(
        out,
        "token-resolver demo --sidecar: a game server in another language, through the sidecar\n"
    )?;
    // The integrator's address first: the sidecar resolves there, and it notifies the sidecar.
    let api_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let base = format!("http://{api_addr}");
    let resolver = Resolver::builder().default_auth_url(&base).build()?;
    let sidecar = Sidecar::new(resolver, SidecarConfig::default());
    let admin = spawn_admin(
        "127.0.0.1:0".parse()?,
        sidecar.admin_node(),
        AdminConfig {
            revoke_secret: Some(AdminSecret::new(ADMIN_SECRET)?),
            ..AdminConfig::default()
        },
    )
    .await?;
    let api = ReferenceApi::new(ApiConfig {
        notify: vec![format!("http://{}", admin.local_addr())],
        admin_secret: Some(AdminSecret::new(ADMIN_SECRET)?),
        ..ApiConfig::default()
    })?
    .spawn(api_addr)
    .await?;
    let running = sidecar.spawn("127.0.0.1:0".parse()?).await?;
    let sidecar_url = format!("http://{}", running.local_addr());
    step(out, "[integrator] reference API", &base)?;
    step(out, "[sidecar] token-resolver sidecar", &sidecar_url)?;
    let foreign = ForeignServer::start(&sidecar_url).await?;
    step(
        out,
        "[foreign server] TCP, JSON lines",
        &format!(
            "{} (speaks only HTTP/JSON and SSE to the sidecar)",
            foreign.addr
        ),
    )?;
    writeln!(out)?;

    let mut client = IntegratorClient::new(&base)?;
    client.login_password("alice", "wonderland").await?;
    let token = client.fetch_access_token().await?.secret().to_owned();
    step(
        out,
        "[client] login, access token",
        "alice; token never printed",
    )?;
    let started = Instant::now();
    let mut player = BufReader::new(TcpStream::connect(foreign.addr).await?);
    let hello = json!({"type": "connect", "access_token": token}).to_string() + "\n";
    player.get_mut().write_all(hello.as_bytes()).await?;
    let answer = read(&mut player).await?;
    if answer["type"] != "connected" || answer["user"]["id"] != 1 {
        return Err(format!("expected alice connected, got {answer}").into());
    }
    step(
        out,
        "[foreign server] POST /v1/resolve (session)",
        &format!("connected {} ({:.2} ms)", answer["user"], ms(started)),
    )?;
    let authorized = reqwest::Client::new()
        .get(format!("{sidecar_url}/v1/authorize"))
        .bearer_auth(&token)
        .send()
        .await?;
    let user_id = authorized.headers().get("x-user-id").cloned();
    if authorized.status() != 200 || user_id.as_ref().is_none_or(|id| id != "1") {
        return Err(format!("expected /v1/authorize 200 for user 1, got {authorized:?}").into());
    }
    step(
        out,
        "[proxy] GET /v1/authorize (nginx's way)",
        "200, X-User-Id: 1",
    )?;
    writeln!(out)?;

    let banned_at = Instant::now();
    let ban = reqwest::Client::new()
        .post(format!("{base}/api/admin/ban"))
        .bearer_auth(ADMIN_SECRET)
        .json(&json!({"user_id": 1}))
        .send()
        .await?;
    if ban.status() != 200 {
        return Err(format!("the ban was answered {}", ban.status()).into());
    }
    step(
        out,
        "[integrator] POST /api/admin/ban (alice)",
        "200; the sidecar is told",
    )?;
    let told = read(&mut player).await?;
    let mut rest = String::new();
    let closed = player.read_line(&mut rest).await? == 0;
    if told["type"] != "revoked" || !closed {
        return Err(format!("expected revoked and a closed socket, got {told}").into());
    }
    step(
        out,
        "[foreign server] event: revoked -> close",
        &format!(
            "player told {told}, socket closed ({:.2} ms after the ban)",
            ms(banned_at)
        ),
    )?;
    running.shutdown().await;
    admin.shutdown().await;
    api.shutdown().await;
    writeln!(out, "\ndemo finished: every step turned out as expected")?;
    Ok(())
}

/// The next JSON line from the player's side, within five seconds.
async fn read(player: &mut BufReader<TcpStream>) -> Result<Value, DemoError> {
    let mut line = String::new();
    let within = std::time::Duration::from_secs(5);
    tokio::time::timeout(within, player.read_line(&mut line)).await??;
    Ok(serde_json::from_str(&line)?)
}

/// A game server as one written in another language would be: JSON lines over TCP, each
/// connection a sidecar session, closed on `revoked`.
struct ForeignServer {
    addr: SocketAddr,
}

/// The foreign server's open sockets' closers, by session id.
type Open = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

impl ForeignServer {
    async fn start(sidecar: &str) -> Result<ForeignServer, DemoError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let open: Open = Arc::default();
        let events = reqwest::get(format!("{sidecar}/v1/events")).await?;
        tokio::spawn(follow(events, open.clone()));
        let sidecar = sidecar.to_owned();
        tokio::spawn(async move {
            let mut next = 0u64;
            while let Ok((socket, _)) = listener.accept().await {
                next += 1;
                let session = format!("conn-{next}");
                tokio::spawn(serve(socket, session, sidecar.clone(), open.clone()));
            }
        });
        Ok(ForeignServer { addr })
    }
}

/// One player's connection: resolve its connect through the sidecar, then wait to be told.
async fn serve(socket: TcpStream, session: String, sidecar: String, open: Open) {
    let mut socket = BufReader::new(socket);
    let mut line = String::new();
    if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
        return;
    }
    let token = serde_json::from_str::<Value>(&line)
        .ok()
        .and_then(|m| m["access_token"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let body = json!({"access_token": token, "session": session});
    let answer = async {
        let response = reqwest::Client::new()
            .post(format!("{sidecar}/v1/resolve"))
            .json(&body)
            .send()
            .await?;
        response.json::<Value>().await
    };
    let reply = match answer.await {
        Ok(answer) if answer["user"].is_object() => {
            json!({"type": "connected", "user": answer["user"]})
        }
        Ok(answer) => json!({"type": "error", "error": answer["error"]}),
        Err(_) => json!({"type": "error", "error": "auth_unavailable"}),
    };
    let (closer, told) = oneshot::channel();
    if reply["type"] == "connected" {
        open.lock()
            .expect("the open sockets")
            .insert(session, closer);
    }
    let _ = socket
        .get_mut()
        .write_all(format!("{reply}\n").as_bytes())
        .await;
    if let Ok(event) = told.await {
        let _ = socket
            .get_mut()
            .write_all(format!("{event}\n").as_bytes())
            .await;
        let _ = socket.get_mut().shutdown().await;
    }
}

/// Reads the sidecar's events and closes the sockets of revoked sessions.
async fn follow(events: reqwest::Response, open: Open) {
    let mut events = SseReader::new(events);
    while let Some(event) = events.next().await {
        if event.event != "revoked" {
            continue;
        }
        let session = event.data["session"].as_str().unwrap_or_default();
        let closer = open.lock().expect("the open sockets").remove(session);
        if let Some(closer) = closer {
            let _ = closer.send(json!({"type": "revoked", "reason": event.data["reason"]}));
        }
    }
}
