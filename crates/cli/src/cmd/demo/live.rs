//! The demo's live sessions: what reaches a player already in a room. A logout and a ban at
//! the integrator end the session at once (the reference API tells the game server's admin
//! listener, which closes the sessions holding the token or the user), and a short-lived token
//! is renewed in place, the player staying in the room.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::Map;
use token_resolver::ErrorCode;
use token_resolver_player::{
    ClientError, GameClient, GameClientError, IntegratorClient, Push, RoomInfo, RoomJoinArgs,
};

use super::narration::{expect_refused, ms, step, DemoError};
use super::parties::Parties;

/// How long the renewed player's first token lives.
const SHORT_LIVED: Duration = Duration::from_secs(2);

/// How long the demo waits for the server to say something on its own.
const PUSH_WAIT: Duration = Duration::from_secs(10);

/// Alice logs out while in the arena: her session is closed with `revoked`, and her token is
/// refused from then on.
pub(super) async fn logout(
    out: &mut (dyn Write + Send),
    parties: &Parties,
    client: &mut IntegratorClient,
    player: &mut GameClient,
    token: &str,
) -> Result<(), DemoError> {
    let started = Instant::now();
    client.logout().await?;
    step(
        out,
        "[client] POST /api/logout",
        "the session and its tokens end; the API tells the game server",
    )?;
    expect_revoked(player).await?;
    step(
        out,
        "[client] (still in arena)",
        &format!(
            "revoked {:.2} ms after the logout, connection closed",
            ms(started)
        ),
    )?;
    let mut again = GameClient::open(parties.game.local_addr()).await?;
    let code = expect_refused(
        again.connect(Some(token)).await,
        ErrorCode::TokenRejected.as_str(),
    )?;
    step(
        out,
        "[client] reconnect with the revoked token",
        &format!("{code} (the web API said 401)"),
    )?;
    Ok(())
}

/// Bob joins the arena; the integrator bans him: he is kicked at once and cannot log in again.
pub(super) async fn ban(
    out: &mut (dyn Write + Send),
    parties: &Parties,
    arena: &RoomInfo,
) -> Result<(), DemoError> {
    let mut bob = IntegratorClient::new(&parties.base)?;
    let me = bob.login_password("bob", "builder").await?;
    let token = bob.fetch_access_token().await?.secret().to_owned();
    let mut player = in_arena(parties, arena, &token).await?;
    step(
        out,
        "[client] bob: login, token, connect, join",
        &format!("in arena as id {} {:?}", me.id, me.name),
    )?;
    let started = Instant::now();
    let banned = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .post(format!("{}/api/admin/ban", parties.base))
        .bearer_auth(parties.admin_secret.as_str())
        .header("content-type", "application/json")
        .body(format!(r#"{{"user_id": {}}}"#, me.id))
        .send()
        .await?;
    if !banned.status().is_success() {
        return Err(format!("the ban was answered {}", banned.status()).into());
    }
    step(
        out,
        "[integrator] POST /api/admin/ban (bob)",
        "banned; the API tells the game server",
    )?;
    expect_revoked(&mut player).await?;
    step(
        out,
        "[client] bob (in arena)",
        &format!(
            "revoked {:.2} ms after the ban, connection closed",
            ms(started)
        ),
    )?;
    match bob.login_password("bob", "builder").await {
        Err(ClientError::Status { status: 403, .. }) => {
            step(
                out,
                "[client] bob: POST /api/login",
                "403 banned (until POST /api/admin/unban)",
            )?;
            Ok(())
        }
        other => Err(format!("a banned login should be refused with 403, got {other:?}").into()),
    }
}

/// Carol plays on a token that lives two seconds: when it expires the server asks for a fresh
/// one, she takes it from the integrator and sends it, and stays in the arena.
pub(super) async fn renewal(
    out: &mut (dyn Write + Send),
    parties: &Parties,
    arena: &RoomInfo,
) -> Result<(), DemoError> {
    let mut carol = IntegratorClient::new(&parties.base)?;
    let me = carol.login_password("carol", "carolina").await?;
    let token = carol
        .fetch_access_token_for(SHORT_LIVED)
        .await?
        .secret()
        .to_owned();
    let mut player = in_arena(parties, arena, &token).await?;
    let joined = Instant::now();
    step(
        out,
        "[client] carol: a 2 s token, connect, join",
        &format!("in arena as id {} {:?}", me.id, me.name),
    )?;
    let within = match tokio::time::timeout(PUSH_WAIT, player.next_push()).await {
        Ok(Ok(Push::ReauthRequired(within))) => within,
        other => return Err(format!("expected reauth_required, got {other:?}").into()),
    };
    step(
        out,
        "  [game server] the token expires",
        &format!(
            "reauth_required {:.1} s after the join, {} s to refresh",
            joined.elapsed().as_secs_f64(),
            within.as_secs()
        ),
    )?;
    let fresh = carol.fetch_access_token().await?.secret().to_owned();
    let user = player.refresh(&fresh).await?;
    if user.as_ref().map(|u| u.id) != Some(me.id) {
        return Err(format!("the refresh should keep carol, got {user:?}").into());
    }
    let still_there = parties
        .game
        .members("arena")
        .iter()
        .any(|m| m.identity.user().is_some_and(|u| u.id == me.id));
    if !still_there {
        return Err("carol should still be in the arena after her refresh".into());
    }
    step(
        out,
        "[client] carol: new token, refresh",
        &format!("refreshed as id {} {:?}, still in arena", me.id, me.name),
    )?;
    Ok(())
}

/// A new connection, connected and in `arena` with `token`.
async fn in_arena(
    parties: &Parties,
    arena: &RoomInfo,
    token: &str,
) -> Result<GameClient, DemoError> {
    let mut player = GameClient::open(parties.game.local_addr()).await?;
    player.connect(Some(token)).await?;
    player
        .join(&RoomJoinArgs::new(arena, Map::new()), Some(token))
        .await?;
    Ok(player)
}

/// Waits for `player` to be told `revoked`.
async fn expect_revoked(player: &mut GameClient) -> Result<(), DemoError> {
    match tokio::time::timeout(PUSH_WAIT, player.next_push()).await {
        Ok(Err(GameClientError::Revoked(_))) => Ok(()),
        other => Err(format!("expected the session to be revoked, got {other:?}").into()),
    }
}
