//! What every connection of one server shares (the resolver, the rooms and who is in them),
//! and the handling of one message: the game logic of connect, search and join, written once
//! for every transport.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

use serde_json::json;

use super::config::GameServerConfig;
use super::protocol::{
    blank_quoted, error_line, to_line, JoinMessage, Player, Request, BAD_REQUEST, ROOM_NOT_FOUND,
};
use crate::player::RoomInfo;
use crate::{ConnectRequest, Endpoint, ErrorCode, Identity, JoinRequest, ResolveError, Resolver};

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
    /// The rooms as `search_room` answers them.
    pub(super) room_infos: Vec<RoomInfo>,
    /// Room id -> connection -> who joined.
    pub(super) members: Mutex<HashMap<String, HashMap<u64, Identity>>>,
    /// Limits.
    pub(super) config: GameServerConfig,
    /// The next connection number.
    pub(super) next_connection: AtomicU64,
}

impl Shared {
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

/// Handles one message; the answer line, newline included.
pub(super) async fn handle(shared: &Shared, connection: u64, line: &[u8]) -> Vec<u8> {
    let request = match serde_json::from_slice::<Request>(line) {
        Ok(request) => request,
        Err(e) => {
            let msg = format!(
                "expected {{\"type\": \"connect\" | \"search_room\" | \"join\", ...}}: {}",
                blank_quoted(&e.to_string())
            );
            return error_line(BAD_REQUEST, &msg, false);
        }
    };
    match request {
        Request::Connect { access_token } => {
            let req = ConnectRequest { access_token };
            match shared.resolver.resolve_connect(&req).await {
                Ok(identity) => {
                    tracing::info!(
                        connection,
                        user_id = identity.user().map(|u| u.id),
                        "connected"
                    );
                    to_line(&json!({"type": "connected", "user": Player::of(&identity)}))
                }
                Err(e) => resolve_error_line(connection, "connect", &e),
            }
        }
        Request::SearchRoom => to_line(&json!({"type": "rooms", "rooms": shared.room_infos})),
        Request::Join(JoinMessage { args, access_token }) => {
            let Some(room) = shared.rooms.iter().find(|r| r.id == args.room_id) else {
                return error_line(
                    ROOM_NOT_FOUND,
                    "this server has no room with that roomId; search rooms again",
                    false,
                );
            };
            if !room.accepts(&args.auth_url) {
                tracing::info!(connection, room = %room.id, "join refused: authUrl is not the room's own");
                return error_line(
                    ErrorCode::AuthUrlNotAllowed.as_str(),
                    "the join's authUrl is not the room's own; send the authUrl that SearchRoom gave for this room",
                    false,
                );
            }
            let req = JoinRequest {
                room_id: room.id.clone(),
                auth_url: room.auth_url.clone(),
                access_token,
            };
            match shared.resolver.resolve_join(&req).await {
                Ok(identity) => {
                    tracing::info!(connection, room = %room.id, user_id = identity.user().map(|u| u.id), "joined");
                    let user = Player::of(&identity);
                    shared.enter(connection, &room.id, identity);
                    to_line(&json!({"type": "joined", "room_id": room.id, "user": user}))
                }
                Err(e) => resolve_error_line(connection, "join", &e),
            }
        }
    }
}

/// The normalised endpoint of an authUrl; `None` when it does not parse.
pub(super) fn normalised(auth_url: &str) -> Option<String> {
    Endpoint::parse(auth_url, true)
        .ok()
        .map(|endpoint| endpoint.as_str().to_owned())
}

fn resolve_error_line(connection: u64, what: &str, e: &ResolveError) -> Vec<u8> {
    tracing::info!(connection, code = e.code().as_str(), "{what} refused");
    error_line(e.code().as_str(), &e.to_string(), e.is_retryable())
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
