//! What every session of one server shares (the resolver, the rooms and who is in them, the
//! connection cap and the drain signals), and the handling of one message: the game logic of
//! connect, search and join, written once for every transport.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::GameServerConfig;
use super::live::{Credential, Holdings, Purpose, Registry};
use super::protocol::{
    blank_quoted, encode, refusal, JoinMessage, Player, Request, BAD_REQUEST, REFRESH_MISMATCH,
    ROOM_NOT_FOUND,
};
use super::telemetry::MESSAGES_TOTAL;
use token_resolver::{
    AccessToken, ConnectRequest, Endpoint, ErrorCode, Identity, JoinRequest, ResolveError, Resolver,
};
use token_resolver_player::RoomInfo;

/// A room as the server keeps it.
#[derive(Debug)]
pub(super) struct Room {
    /// The room's id.
    pub(super) id: String,
    /// The configured authUrl as written, or `""`: what the resolver is asked with.
    pub(super) auth_url: String,
    /// The normalised endpoint of `auth_url` (`None` without one): what a join's authUrl is
    /// compared with.
    pub(super) endpoint: Option<String>,
}

impl Room {
    /// Whether a join's `authUrl` names this room's auth server: both empty, or both the same
    /// endpoint after normalisation.
    fn accepts(&self, claimed: &str) -> bool {
        match (&self.endpoint, claimed) {
            (None, "") => true,
            (Some(own), claimed) if !claimed.is_empty() => {
                normalised(claimed).as_ref() == Some(own)
            }
            _ => false,
        }
    }
}

/// What every connection task of one server shares.
#[derive(Debug)]
pub(super) struct Shared {
    /// Resolves connect and join tokens.
    pub(super) resolver: Resolver,
    /// The rooms, for join.
    pub(super) rooms: Vec<Room>,
    /// The rooms as `search_room` answers them over TCP.
    pub(super) room_infos: Vec<RoomInfo>,
    /// The rooms as `search_room` answers them over the WebSocket listener, once it listens.
    pub(super) ws_room_infos: OnceLock<Vec<RoomInfo>>,
    /// Room id -> connection -> who joined.
    pub(super) members: Mutex<HashMap<String, HashMap<u64, Identity>>>,
    /// Limits.
    pub(super) config: GameServerConfig,
    /// The next connection number.
    pub(super) next_connection: AtomicU64,
    /// One permit per open session, on any transport: `max_connections` in all.
    pub(super) slots: Arc<Semaphore>,
    /// Every session's task, to wait for them while draining.
    pub(super) sessions: TaskTracker,
    /// Fires when the server starts draining: idle sessions say `shutdown` and close, busy
    /// ones after the message in progress.
    pub(super) draining: CancellationToken,
    /// Fires when draining is over: every session still open closes at once.
    pub(super) cut: CancellationToken,
    /// Whether the TCP listener accepts connections now.
    pub(super) accepting: AtomicBool,
    /// The sessions that resolved a token, for revocations to find.
    pub(super) registry: Registry,
}

impl Shared {
    /// What every session of a new server shares.
    pub(super) fn new(
        resolver: Resolver,
        rooms: Vec<Room>,
        room_infos: Vec<RoomInfo>,
        config: GameServerConfig,
    ) -> Shared {
        Shared {
            resolver,
            rooms,
            room_infos,
            ws_room_infos: OnceLock::new(),
            members: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(1),
            slots: Arc::new(Semaphore::new(config.max_connections)),
            sessions: TaskTracker::new(),
            draining: CancellationToken::new(),
            cut: CancellationToken::new(),
            accepting: AtomicBool::new(false),
            registry: Registry::default(),
            config,
        }
    }

    /// A number for a new connection, unique on this server, counting from 1.
    pub(super) fn next_connection(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn set_accepting(&self, accepting: bool) {
        self.accepting.store(accepting, Ordering::Release);
    }

    /// Whether the TCP listener accepts connections now.
    pub(super) fn is_accepting(&self) -> bool {
        self.accepting.load(Ordering::Acquire)
    }

    /// Locks the member table; a panic while holding it leaves only whole map operations
    /// behind, so a poisoned lock is still usable.
    pub(super) fn members(&self) -> MutexGuard<'_, HashMap<String, HashMap<u64, Identity>>> {
        self.members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `connection` in `room`, taking it out of any other.
    pub(super) fn enter(&self, connection: u64, room: &str, identity: Identity) {
        let mut members = self.members();
        leave_all(&mut members, connection);
        members
            .entry(room.to_owned())
            .or_default()
            .insert(connection, identity);
    }

    pub(super) fn leave(&self, connection: u64) {
        leave_all(&mut self.members(), connection);
    }
}

fn leave_all(members: &mut HashMap<String, HashMap<u64, Identity>>, connection: u64) {
    members.retain(|_, room| {
        room.remove(&connection);
        !room.is_empty()
    });
}

/// What handling a message gives the session: the answer, and whether the session ends
/// after it.
pub(super) struct Reply {
    pub(super) message: Vec<u8>,
    pub(super) close: bool,
}

impl From<Vec<u8>> for Reply {
    fn from(message: Vec<u8>) -> Reply {
        Reply {
            message,
            close: false,
        }
    }
}

/// Handles one message of `connection`, which came over `transport` (`tcp`, `ws`), keeping in
/// `holdings` what its resolutions vouched for. Every resolution is logged with the connection
/// and its outcome (`ok` or the error code).
pub(super) async fn handle(
    shared: &Shared,
    connection: u64,
    holdings: &mut Holdings,
    transport: &'static str,
    message: &[u8],
) -> Reply {
    let request = match serde_json::from_slice::<Request>(message) {
        Ok(request) => request,
        Err(e) => {
            metrics::counter!(MESSAGES_TOTAL, "type" => "invalid").increment(1);
            let msg = format!(
                "expected {{\"type\": \"connect\" | \"search_room\" | \"join\" | \"refresh\", ...}}: {}",
                blank_quoted(&e.to_string())
            );
            return refusal(BAD_REQUEST, &msg, false).into();
        }
    };
    metrics::counter!(MESSAGES_TOTAL, "type" => request.kind()).increment(1);
    match request {
        Request::Connect { access_token } => {
            let req = ConnectRequest {
                access_token: access_token.clone(),
            };
            match shared.resolver.resolve_connect(&req).await {
                Ok(identity) => {
                    let user_id = identity.user().map(|u| u.id);
                    tracing::info!(
                        connection,
                        request = "connect",
                        outcome = "ok",
                        user_id,
                        "connected"
                    );
                    if let Some(endpoint) = shared.resolver.default_endpoint() {
                        hold(
                            shared,
                            holdings,
                            Purpose::Connect,
                            endpoint.as_str(),
                            access_token,
                            &identity,
                        );
                    }
                    encode(&json!({"type": "connected", "user": Player::of(&identity)})).into()
                }
                Err(e) => resolve_refusal(connection, "connect", &e).into(),
            }
        }
        Request::SearchRoom => {
            let rooms = match transport {
                "ws" => shared.ws_room_infos.get().unwrap_or(&shared.room_infos),
                _ => &shared.room_infos,
            };
            encode(&json!({"type": "rooms", "rooms": rooms})).into()
        }
        Request::Join(join) => self::join(shared, connection, holdings, join).await.into(),
        Request::Refresh { access_token } => {
            refresh(shared, connection, holdings, access_token).await
        }
    }
}

/// Keeps the credential a successful resolution gave, when it resolved a user with a token.
fn hold(
    shared: &Shared,
    holdings: &mut Holdings,
    purpose: Purpose,
    endpoint: &str,
    token: Option<String>,
    identity: &Identity,
) {
    let (Some(user), Some(token)) = (identity.user(), token) else {
        return;
    };
    let (Ok(token), Some(fingerprint)) = (
        AccessToken::new(token.clone()),
        shared.resolver.fingerprint(endpoint, &token),
    ) else {
        return;
    };
    holdings.hold(Credential {
        purpose,
        endpoint: endpoint.to_owned(),
        token,
        fingerprint,
        user_id: user.id,
        expires_at: user.expires_at,
    });
}

/// A join: the room by its id, its own authUrl, then the resolution; the player enters it.
async fn join(
    shared: &Shared,
    connection: u64,
    holdings: &mut Holdings,
    join: JoinMessage,
) -> Vec<u8> {
    let JoinMessage { args, access_token } = join;
    let Some(room) = shared.rooms.iter().find(|r| r.id == args.room_id) else {
        tracing::info!(
            connection,
            request = "join",
            outcome = ROOM_NOT_FOUND,
            "join refused"
        );
        return refusal(
            ROOM_NOT_FOUND,
            "this server has no room with that roomId; search rooms again",
            false,
        );
    };
    if !room.accepts(&args.auth_url) {
        let outcome = ErrorCode::AuthUrlNotAllowed.as_str();
        tracing::info!(connection, request = "join", room = %room.id, outcome, "join refused: authUrl is not the room's own");
        return refusal(
            outcome,
            "the join's authUrl is not the room's own; send the authUrl that SearchRoom gave for this room",
            false,
        );
    }
    let req = JoinRequest {
        room_id: room.id.clone(),
        auth_url: room.auth_url.clone(),
        access_token: access_token.clone(),
    };
    match shared.resolver.resolve_join(&req).await {
        Ok(identity) => {
            let user_id = identity.user().map(|u| u.id);
            tracing::info!(connection, request = "join", room = %room.id, outcome = "ok", user_id, "joined");
            let endpoint = room
                .endpoint
                .as_deref()
                .or(shared.resolver.default_endpoint().map(|e| e.as_str()));
            if let Some(endpoint) = endpoint {
                hold(
                    shared,
                    holdings,
                    Purpose::Join,
                    endpoint,
                    access_token,
                    &identity,
                );
            }
            let user = Player::of(&identity);
            shared.enter(connection, &room.id, identity);
            encode(&json!({"type": "joined", "room_id": room.id, "user": user}))
        }
        Err(e) => resolve_refusal(connection, "join", &e),
    }
}

/// A refresh: the new token, resolved at the endpoint of every credential the session holds,
/// must vouch for the same user; then it replaces their tokens. Another user ends the session
/// (`refresh_mismatch`); a token the API refuses is refused, and the session may try again.
async fn refresh(
    shared: &Shared,
    connection: u64,
    holdings: &mut Holdings,
    token: Option<String>,
) -> Reply {
    if holdings.credentials.is_empty() {
        return refusal(
            BAD_REQUEST,
            "nothing to refresh: connect or join with a token first",
            false,
        )
        .into();
    }
    let token = token.unwrap_or_default();
    let mut refreshed = Vec::with_capacity(holdings.credentials.len());
    for credential in &holdings.credentials {
        let user = match shared.resolver.resolve(&credential.endpoint, &token).await {
            Ok(user) => user,
            Err(e) => return resolve_refusal(connection, "refresh", &e).into(),
        };
        if user.id != credential.user_id {
            tracing::info!(
                connection,
                request = "refresh",
                outcome = REFRESH_MISMATCH,
                "refresh refused"
            );
            return Reply {
                message: refusal(
                    REFRESH_MISMATCH,
                    "the new token belongs to another user; closing",
                    false,
                ),
                close: true,
            };
        }
        refreshed.push((credential.purpose, credential.endpoint.clone(), user));
    }
    let player = refreshed.first().map(|(_, _, user)| Player {
        id: user.id,
        name: user.name.clone(),
    });
    for (purpose, endpoint, user) in refreshed {
        let identity = Identity::Authenticated(user);
        hold(
            shared,
            holdings,
            purpose,
            &endpoint,
            Some(token.clone()),
            &identity,
        );
    }
    tracing::info!(connection, request = "refresh", outcome = "ok", "refreshed");
    encode(&json!({"type": "refreshed", "user": player})).into()
}

/// The normalised endpoint of an authUrl; `None` when it does not parse.
pub(super) fn normalised(auth_url: &str) -> Option<String> {
    Endpoint::parse(auth_url, true)
        .ok()
        .map(|endpoint| endpoint.as_str().to_owned())
}

/// The refusal of a request whose resolution failed, logged with its outcome.
fn resolve_refusal(connection: u64, request: &'static str, e: &ResolveError) -> Vec<u8> {
    let outcome = e.code().as_str();
    tracing::info!(connection, request, outcome, "{request} refused");
    refusal(outcome, &e.to_string(), e.is_retryable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_accepts_its_own_auth_url_in_any_spelling_and_nothing_else() {
        let room = |url: Option<&str>| Room {
            id: "r".into(),
            auth_url: url.unwrap_or_default().into(),
            endpoint: url.and_then(normalised),
        };
        let protected = room(Some("http://127.0.0.1:8080/game"));
        assert!(protected.accepts("HTTP://127.0.0.1:8080/game/"));
        assert!(!protected.accepts(""));
        assert!(!protected.accepts("http://127.0.0.1:8080/gamex"));
        assert!(!protected.accepts("http://127.0.0.1:8080/game/x"));
        assert!(!protected.accepts("not a url"));
        let open = room(None);
        assert!(open.accepts(""));
        assert!(!open.accepts("http://127.0.0.1:8080"));
    }
}
