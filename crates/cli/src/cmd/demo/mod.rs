//! `token-resolver demo`: the whole flow (login, token, connect, join) with the three parties talking over real
//! loopback sockets, each step printed, each outcome checked. The integrator's web API is the
//! reference API (HTTP); the game server is a `GameServer` embedding a `Resolver` (TCP, JSON
//! lines); the client is `IntegratorClient` for login and token plus `GameClient` for connect,
//! room search and join.
//!
//! `--browser` starts the parties for a browser instead (`browser`); `--sidecar` shows the flow
//! of a game server in another language, through the sidecar (`sidecar`).
//!
//! The demo is also a smoke test: a step whose outcome is not the expected one ends it with an
//! error, so a zero exit status means the flow works. The token is never printed.
//!
//! - this file: the narrative, from login to the metrics an operator sees;
//! - `parties`: starting the three parties on loopback;
//! - `live`: live sessions (a logout, a ban, a token renewed in place);
//! - `narration`: printing a step and checking what it turned out as;
//! - `browser`: the parties for a browser (`--browser`);
//! - `sidecar`: a foreign game server on the sidecar (`--sidecar`).

mod browser;
mod live;
mod narration;
mod parties;
mod sidecar;

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use serde_json::Map;
use token_resolver::ErrorCode;
use token_resolver_game_server::{RunningAdmin, RunningGameServer};
use token_resolver_player::{GameClient, IntegratorClient, Player, RoomInfo, RoomJoinArgs};

use self::narration::{expect_cache_hit, expect_player, expect_refused, ms, step, DemoError};
use self::parties::{start, Parties};

/// `demo` arguments.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Start the parties for a browser instead: print the URL of the page to open, and serve
    /// until Ctrl-C.
    #[arg(long, conflicts_with = "sidecar")]
    pub(crate) browser: bool,
    /// Show the flow of a game server in another language instead: it resolves through the
    /// sidecar over HTTP/JSON and closes a banned player's socket on a revoked event.
    #[arg(long)]
    pub(crate) sidecar: bool,
}

/// Runs the demo on stdout; exit 1 when a step did not turn out as expected.
pub(crate) async fn run(args: DemoArgs) -> ExitCode {
    let mut out = std::io::stdout();
    let ran = if args.browser {
        browser::serve(&mut out).await
    } else if args.sidecar {
        sidecar::narrate(&mut out).await
    } else {
        narrate(&mut out).await
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the demo, printing to `out`: the parties start, the player logs in, connects, searches
/// and joins; forged and missing credentials are refused; a logout and a ban end live sessions
/// at once; a short-lived token is renewed in place.
///
/// # Errors
///
/// When a server cannot start, or a step's outcome is not the expected one.
async fn narrate(out: &mut (dyn Write + Send)) -> Result<(), DemoError> {
    writeln!(
        out,
        "token-resolver demo: the whole flow, three parties over real loopback sockets\n"
    )?;
    let parties = start(out).await?;
    let mut client = IntegratorClient::new(&parties.base)?;
    let me = client.login_password("alice", "wonderland").await?;
    step(
        out,
        "[client] POST /api/login (alice)",
        &format!("id {} {:?}, session cookie kept", me.id, me.name),
    )?;
    let token = client.fetch_access_token().await?.secret().to_owned();
    step(
        out,
        "[client] POST /api/access_token",
        &format!("access token, {} chars (never printed)", token.len()),
    )?;
    let me = Player {
        id: me.id,
        name: me.name,
    };
    let mut player = GameClient::open(parties.game.local_addr()).await?;
    let arena = connect_search_join(out, &parties, &mut player, &token, &me).await?;
    writeln!(out)?;
    refusals(out, &parties, &mut player, &arena, &token).await?;
    writeln!(out)?;
    live::logout(out, &parties, &mut client, &mut player, &token).await?;
    writeln!(out)?;
    live::ban(out, &parties, &arena).await?;
    writeln!(out)?;
    live::renewal(out, &parties, &arena).await?;

    let s = parties.game.resolver().stats();
    writeln!(
        out,
        "\n[game server] resolver stats: {} hits, {} misses, {} negative hits, {} upstream calls, {} entries",
        s.hits, s.misses, s.negative_hits, s.upstream_calls, s.entries
    )?;
    show_metrics(out, &parties.admin).await?;
    drop(player);
    parties.game.shutdown().await;
    parties.admin.shutdown().await;
    parties.api.shutdown().await;
    writeln!(out, "demo finished: every step turned out as expected")?;
    Ok(())
}

/// ConnectMasterServer (a cache miss: one call), SearchRoom, and JoinRoom with each room's
/// authUrl (cache hits); the arena as SearchRoom listed it.
async fn connect_search_join(
    out: &mut (dyn Write + Send),
    parties: &Parties,
    player: &mut GameClient,
    token: &str,
    me: &Player,
) -> Result<RoomInfo, DemoError> {
    let game = &parties.game;
    let before = game.resolver().stats();
    let started = Instant::now();
    let user = player.connect(Some(token)).await?;
    let elapsed = ms(started);
    let after = game.resolver().stats();
    expect_player(&user, me.id)?;
    let calls = after.upstream_calls - before.upstream_calls;
    if calls != 1 {
        return Err(format!("connect should have made 1 upstream call, made {calls}").into());
    }
    step(
        out,
        "[client] connect (token)",
        &format!("connected as id {} {:?}", me.id, me.name),
    )?;
    step(
        out,
        "  [game server] POST /api/user",
        &format!("cache miss, 1 upstream call, {elapsed:.1} ms"),
    )?;

    let rooms = player.search_rooms().await?;
    step(
        out,
        "[client] SearchRoom",
        &format!("{} rooms", rooms.len()),
    )?;
    for room in &rooms {
        let auth = room.auth_url();
        let shown = if auth.is_empty() {
            "(none: the default)".to_owned()
        } else {
            auth
        };
        writeln!(
            out,
            "           {:<8} {}:{}  authUrl {shown}",
            room.room_id, room.host, room.port
        )?;
    }
    let arena = rooms
        .iter()
        .find(|r| r.room_id == "arena")
        .ok_or("SearchRoom did not list the arena")?
        .clone();
    if arena.auth_url() != parties.arena_auth_url {
        return Err("the arena does not carry its authUrl in nodeProperties".into());
    }

    join_each_room(out, game, player, &rooms, token, me).await?;
    step(
        out,
        "  [game server] members of arena",
        &format!("id {} {:?}", me.id, me.name),
    )?;
    Ok(arena)
}

/// JoinRoom with each room's authUrl: each a cache hit of the connect's resolution; the
/// player ends in the last room, the arena, alone.
async fn join_each_room(
    out: &mut (dyn Write + Send),
    game: &RunningGameServer,
    player: &mut GameClient,
    rooms: &[RoomInfo],
    token: &str,
    me: &Player,
) -> Result<(), DemoError> {
    for room in rooms {
        let args = RoomJoinArgs::new(room, Map::new());
        let before = game.resolver().stats();
        let started = Instant::now();
        let joined = player.join(&args, Some(token)).await?;
        let elapsed = ms(started);
        let after = game.resolver().stats();
        expect_player(&joined.user, me.id)?;
        expect_cache_hit(&before, &after, &room.room_id)?;
        step(
            out,
            &format!("[client] JoinRoom {} with its authUrl", room.room_id),
            &format!(
                "joined as id {} (cache hit, 0 upstream calls, {elapsed:.2} ms)",
                me.id
            ),
        )?;
    }
    // A connection is in one room at a time: the last join moved the player to the arena.
    let in_arena = game.members("arena");
    let in_lobby = game.members("lobby").len();
    match in_arena.as_slice() {
        [m] if in_lobby == 0 && m.identity.user().is_some_and(|u| u.id == me.id) => {}
        _ => {
            return Err(format!(
                "the game server should hold the player in the arena only: arena {in_arena:?}, lobby {in_lobby}"
            )
            .into())
        }
    }
    Ok(())
}

/// A forged authUrl (refused before any request), a made-up token and no token.
async fn refusals(
    out: &mut (dyn Write + Send),
    parties: &Parties,
    player: &mut GameClient,
    arena: &RoomInfo,
    token: &str,
) -> Result<(), DemoError> {
    let (game, api) = (&parties.game, &parties.api);
    let mut forged = RoomJoinArgs::new(arena, Map::new());
    forged.auth_url = "https://vouches-for-anyone.example".to_owned();
    let requests = || {
        (
            game.resolver().stats().upstream_calls,
            api.api().user_requests(),
        )
    };
    let before = requests();
    let code = expect_refused(
        player.join(&forged, Some(token)).await,
        ErrorCode::AuthUrlNotAllowed.as_str(),
    )?;
    if before != requests() {
        return Err("the forged join made an upstream request".into());
    }
    step(
        out,
        "[client] JoinRoom arena, forged authUrl",
        &format!("{code} (no request sent)"),
    )?;

    let mut stranger = GameClient::open(game.local_addr()).await?;
    let code = expect_refused(
        stranger.connect(Some("made-up-token")).await,
        ErrorCode::TokenRejected.as_str(),
    )?;
    step(
        out,
        "[client] connect with a made-up token",
        &format!("{code} (the web API said 401)"),
    )?;
    let code = expect_refused(
        stranger.connect(None).await,
        ErrorCode::TokenMissing.as_str(),
    )?;
    step(
        out,
        "[client] connect without a token",
        &format!("{code} (no request sent)"),
    )?;
    Ok(())
}

/// What an operator scraping the game server sees of this run: a few lines of its `/metrics`,
/// and the hit ratio they give.
async fn show_metrics(out: &mut (dyn Write + Send), admin: &RunningAdmin) -> Result<(), DemoError> {
    let url = format!("http://{}/metrics", admin.local_addr());
    let text = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(&url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    writeln!(
        out,
        "[operator] GET {url} (its non-zero counters of resolutions, calls and messages)"
    )?;
    let shown = [
        "token_resolver_resolutions_total{",
        "token_resolver_upstream_requests_total{",
        "game_server_messages_total{",
        "game_server_sessions_open{",
    ];
    let mut outcomes = (0.0, 0.0);
    for line in text.lines() {
        if shown.iter().any(|prefix| line.starts_with(prefix)) && !line.ends_with(" 0") {
            writeln!(out, "           {line}")?;
        }
        let value = |label: &str| {
            line.strip_prefix(&format!(
                "token_resolver_resolutions_total{{outcome=\"{label}\"}} "
            ))
            .and_then(|v| v.parse::<f64>().ok())
        };
        if let Some(hits) = value("hit") {
            outcomes.0 += hits;
        } else if let Some(misses) = value("miss").or_else(|| value("coalesced")) {
            outcomes.1 += misses;
        }
    }
    let (hits, misses) = outcomes;
    if hits + misses > 0.0 {
        writeln!(
            out,
            "           hit ratio: {hits} / ({hits} + {misses}) = {:.2}",
            hits / (hits + misses)
        )?;
    }
    Ok(())
}
