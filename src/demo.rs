//! `token-resolver demo`: the seed's whole flow on loopback, each step printed, each outcome
//! checked. The integrator's web API is the [reference API](crate::reference_api); the client
//! is [`IntegratorClient`]; the game server is a [`Resolver`].
//!
//! The demo is also a smoke test: a step whose outcome is not the expected one ends it with an
//! error, so a zero exit status means the flow works.

use std::io::Write;
use std::time::Instant;

use serde_json::{json, Map};

use crate::client::{IntegratorClient, RoomInfo, RoomJoinArgs};
use crate::reference_api::{ApiConfig, ReferenceApi};
use crate::{ConnectRequest, ErrorCode, Identity, JoinRequest, ResolveError, Resolver};

/// A demo step that did not turn out as expected.
pub type DemoError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the demo, printing to `out`.
///
/// # Errors
///
/// When the reference API cannot start, or a step's outcome is not the expected one.
pub async fn run(out: &mut (dyn Write + Send)) -> Result<(), DemoError> {
    let api = ReferenceApi::new(ApiConfig::default())?
        .spawn(([127, 0, 0, 1], 0).into())
        .await?;
    let base = api.base_url();
    writeln!(
        out,
        "token-resolver demo: the seed's flow, three parties on loopback\n"
    )?;
    writeln!(out, "[integrator] reference web API on {base}")?;
    writeln!(
        out,
        "             demo users: alice/wonderland, bob/builder, carol/carolina\n"
    )?;

    let resolver = Resolver::builder().default_auth_url(&base).build()?;
    writeln!(
        out,
        "[game server] resolver: default authUrl {base}, allowlist = the default only\n"
    )?;

    let mut client = IntegratorClient::new(&base);
    let me = client.login_password("alice", "wonderland").await?;
    writeln!(
        out,
        "[client] POST /api/login (alice)          -> id {} \"{}\", session cookie kept",
        me.id, me.name
    )?;
    let token_len = client.fetch_access_token().await?.secret().len();
    writeln!(out, "[client] POST /api/access_token           -> access token, {token_len} chars (never printed)")?;
    let token = client
        .authorization_access_token
        .as_ref()
        .map(|t| t.secret().to_owned());

    let connect = ConnectRequest {
        access_token: token.clone(),
    };
    let started = Instant::now();
    let who = resolver.resolve_connect(&connect).await?;
    let user = expect_user(&who, me.id)?;
    writeln!(
        out,
        "[game server] connect -> POST /api/user     -> authenticated: id {} \"{}\" ({} upstream call, {:.1} ms)",
        user.id,
        user.name,
        api.api().user_requests(),
        ms(started)
    )?;

    let rooms = [
        room("lobby", None),
        room("arena", Some(json!(format!("{base}/")))),
    ];
    writeln!(
        out,
        "\n[client] SearchRoom                       -> {} rooms",
        rooms.len()
    )?;
    for r in &rooms {
        let auth = r.auth_url();
        let shown = if auth.is_empty() {
            "(none: the default)".to_owned()
        } else {
            auth
        };
        writeln!(out, "           {:<8} authUrl {shown}", r.room_id)?;
    }

    for r in &rooms {
        let args = RoomJoinArgs::new(r, Map::new());
        let join = JoinRequest {
            room_id: args.room_id.clone(),
            auth_url: args.auth_url.clone(),
            access_token: token.clone(),
        };
        let calls_before = api.api().user_requests();
        let started = Instant::now();
        let who = resolver.resolve_join(&join).await?;
        let user = expect_user(&who, me.id)?;
        let calls = api.api().user_requests() - calls_before;
        if calls != 0 {
            return Err(format!(
                "join {} should have been a cache hit, made {calls} calls",
                r.room_id
            )
            .into());
        }
        writeln!(
            out,
            "[game server] join {:<8} with its authUrl -> id {} \"{}\" (cache hit, 0 calls, {:.3} ms)",
            r.room_id,
            user.id,
            user.name,
            ms(started)
        )?;
    }

    writeln!(out)?;
    let forged = JoinRequest {
        room_id: "arena".into(),
        auth_url: "https://vouches-for-anyone.example".into(),
        access_token: token.clone(),
    };
    let err = expect_code(
        resolver.resolve_join(&forged).await,
        ErrorCode::AuthUrlNotAllowed,
    )?;
    writeln!(
        out,
        "[client] join with a forged authUrl        -> {} (no request sent): {err}",
        err.code()
    )?;

    let made_up = ConnectRequest {
        access_token: Some("made-up-token".into()),
    };
    let err = expect_code(
        resolver.resolve_connect(&made_up).await,
        ErrorCode::TokenRejected,
    )?;
    writeln!(
        out,
        "[client] connect with a made-up token      -> {}: {err}",
        err.code()
    )?;

    let no_token = ConnectRequest::default();
    let err = expect_code(
        resolver.resolve_connect(&no_token).await,
        ErrorCode::TokenMissing,
    )?;
    writeln!(
        out,
        "[client] connect without a token           -> {}",
        err.code()
    )?;

    client.logout().await?;
    if let Some(t) = &token {
        resolver.invalidate(&base, t);
    }
    let err = expect_code(
        resolver.resolve_connect(&connect).await,
        ErrorCode::TokenRejected,
    )?;
    writeln!(
        out,
        "[client] logout; server invalidates; connect -> {} (the token was revoked)",
        err.code()
    )?;

    let s = resolver.stats();
    writeln!(
        out,
        "\n[game server] stats: {} hits, {} misses, {} negative hits, {} upstream calls, {} entries",
        s.hits, s.misses, s.negative_hits, s.upstream_calls, s.entries
    )?;
    api.shutdown().await;
    writeln!(out, "demo finished: every step turned out as expected")?;
    Ok(())
}

fn room(id: &str, auth_url: Option<serde_json::Value>) -> RoomInfo {
    RoomInfo {
        host: "127.0.0.1".into(),
        port: 5055,
        protocol: "tcp".into(),
        room_id: id.into(),
        node_properties: auth_url.map(|u| Map::from_iter([("authUrl".to_owned(), u)])),
    }
}

fn expect_user(who: &Identity, id: i64) -> Result<&crate::User, DemoError> {
    match who.user() {
        Some(user) if user.id == id => Ok(user),
        other => Err(format!("expected user {id}, got {other:?}").into()),
    }
}

fn expect_code<T: std::fmt::Debug>(
    result: Result<T, ResolveError>,
    code: ErrorCode,
) -> Result<ResolveError, DemoError> {
    match result {
        Err(e) if e.code() == code => Ok(e),
        other => Err(format!("expected {code}, got {other:?}").into()),
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
