//! How a game server is configured: its rooms ([`RoomConfig`], from a rooms file or code) and
//! its limits ([`GameServerConfig`]), checked before anything listens ([`GameServerError`]).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::protocol::{
    IDLE_TIMEOUT, LINE_TOO_LONG, LOGIN_TIMEOUT, RATE_LIMITED, SERVER_BUSY, TOO_MANY_CONNECTIONS,
};
#[cfg(doc)]
use super::GameServer;
use token_resolver::{Endpoint, PlainHttp};

/// Longest room id accepted in a rooms file.
const MAX_ROOM_ID_BYTES: usize = 256;
/// One room in a rooms file or a [`GameServerConfig`]: `{"roomId": "arena", "authUrl": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoomConfig {
    /// The room's identifier, unique on this server.
    pub room_id: String,
    /// The room's authUrl, advertised as `nodeProperties.authUrl`. `None`: the room is
    /// checked against the resolver's default authUrl and advertises no authUrl.
    #[serde(default)]
    pub auth_url: Option<String>,
}

impl RoomConfig {
    /// The built-in rooms: `lobby`, without an authUrl (so checked against the default), and
    /// `arena`, protected by `arena_auth_url` when one is given.
    pub fn defaults(arena_auth_url: Option<&str>) -> Vec<RoomConfig> {
        vec![
            RoomConfig {
                room_id: "lobby".to_owned(),
                auth_url: None,
            },
            RoomConfig {
                room_id: "arena".to_owned(),
                auth_url: arena_auth_url.map(str::to_owned),
            },
        ]
    }

    /// Reads a rooms file: a JSON list of `{"roomId": "…", "authUrl": "…"}` (`authUrl`
    /// optional), and checks it as [`GameServer::new`] would.
    ///
    /// # Errors
    ///
    /// [`GameServerError::Read`] or [`GameServerError::Parse`] for the file,
    /// [`GameServerError::Rooms`] for a room that cannot be served.
    pub fn load(path: &Path) -> Result<Vec<RoomConfig>, GameServerError> {
        let text = std::fs::read(path).map_err(|source| GameServerError::Read {
            path: path.to_owned(),
            source,
        })?;
        let rooms: Vec<RoomConfig> =
            serde_json::from_slice(&text).map_err(|source| GameServerError::Parse {
                path: path.to_owned(),
                source,
            })?;
        validate_rooms(&rooms)?;
        Ok(rooms)
    }

    /// The authUrls of `rooms` that no URL of `allowed` covers (by [`Endpoint::covers`]): a
    /// resolver allowing only `allowed` would refuse every join to those rooms. Startup code
    /// uses it to fail early, before the first player meets the misconfiguration.
    pub fn uncovered_auth_urls(
        rooms: &[RoomConfig],
        allowed: &[&str],
        plain_http: PlainHttp,
    ) -> Vec<String> {
        let allowed: Vec<Endpoint> = allowed
            .iter()
            .filter_map(|u| Endpoint::parse(u, plain_http).ok())
            .collect();
        rooms
            .iter()
            .filter_map(|r| r.auth_url.as_deref())
            .filter(|url| match Endpoint::parse(url, plain_http) {
                Ok(endpoint) => !allowed.iter().any(|a| a.covers(&endpoint)),
                Err(_) => true,
            })
            .map(str::to_owned)
            .collect()
    }
}

/// Why a game server could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GameServerError {
    /// The rooms file could not be read: check its path and permissions.
    #[error("cannot read the rooms file {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The rooms file is not a JSON list of `{"roomId", "authUrl"?}`.
    #[error("the rooms file {} is not a JSON list of {{\"roomId\", \"authUrl\"?}}: {source}", path.display())]
    Parse {
        /// The file named.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A room cannot be served: no rooms, an empty, long or duplicate id, or an authUrl that is
    /// not a valid authUrl. Fix the room list.
    #[error("invalid rooms: {reason}")]
    Rooms {
        /// What is wrong, naming the room.
        reason: String,
    },
    /// A limit of the [`GameServerConfig`] is zero.
    #[error("invalid game server setting `{setting}`: must be greater than zero")]
    Limit {
        /// The field at fault.
        setting: &'static str,
    },
}

pub(super) fn validate_rooms(rooms: &[RoomConfig]) -> Result<(), GameServerError> {
    let bad = |reason: String| GameServerError::Rooms { reason };
    if rooms.is_empty() {
        return Err(bad("the list is empty".to_owned()));
    }
    let mut seen = std::collections::HashSet::new();
    for room in rooms {
        if room.room_id.is_empty() || room.room_id.len() > MAX_ROOM_ID_BYTES {
            return Err(bad(format!(
                "room id {:?} must have 1 to {MAX_ROOM_ID_BYTES} bytes",
                room.room_id
            )));
        }
        if !seen.insert(room.room_id.as_str()) {
            return Err(bad(format!("room id {:?} appears twice", room.room_id)));
        }
        if let Some(url) = &room.auth_url {
            // Only the URL's form is checked here; whether it may be called is the
            // resolver's allowlist's business.
            Endpoint::parse(url, PlainHttp::Anywhere)
                .map_err(|reason| bad(format!("room {:?}: authUrl {reason}", room.room_id)))?;
        }
    }
    Ok(())
}

/// What a [`GameServer`] serves and the limits it keeps.
#[derive(Debug, Clone)]
pub struct GameServerConfig {
    /// The rooms `search_room` lists and `join` accepts. Default: [`RoomConfig::defaults`]
    /// without an arena authUrl (both rooms checked against the default authUrl).
    pub rooms: Vec<RoomConfig>,
    /// Longest message line, newline excluded; a longer one is answered [`LINE_TOO_LONG`]
    /// and the connection closed. Default: 16 KiB.
    pub max_line_bytes: usize,
    /// Longest time from accept to a `connect` (or a `join`) that resolves; then
    /// [`LOGIN_TIMEOUT`] and close. Other messages do not extend it, so a client that never
    /// logs in cannot hold a connection slot with chatter. Default: 10 s.
    pub login_timeout: Duration,
    /// Tokens of one client address the integrator may reject per
    /// [`rejection_window`](Self::rejection_window); past it the address's connects, joins
    /// and refreshes are answered [`RATE_LIMITED`] without a call, so that made-up tokens
    /// cannot be turned into a flood on the integrator. 0 turns it off. Default: 20.
    pub rejection_budget: u32,
    /// The window [`rejection_budget`](Self::rejection_budget) counts in. Default: 60 s.
    pub rejection_window: Duration,
    /// Longest wait for the next complete message; then [`IDLE_TIMEOUT`] and close.
    /// Default: 60 s.
    pub idle_timeout: Duration,
    /// Longest wait for the client to take an answer off the socket; then close.
    /// Default: 10 s.
    pub write_timeout: Duration,
    /// Connections open at once; one more is answered [`SERVER_BUSY`] and closed.
    /// Default: 1024.
    pub max_connections: usize,
    /// Sessions one client address (an IPv6 /64) holds open at once, on both transports
    /// together, and HTTP connections it holds on the WebSocket listener; one more is answered
    /// [`TOO_MANY_CONNECTIONS`] (a quick 503 before an upgrade) and closed, so that one
    /// address cannot take every slot. Default: 64 (a household, a LAN party, a small office
    /// behind one NAT).
    pub max_connections_per_address: usize,
    /// The host rooms advertise in `search_room` (e.g. a public DNS name when listening on
    /// `0.0.0.0`). Default: `None`, the bound IP address.
    pub advertised_host: Option<String>,
    /// The `retry_after_ms` of the `shutdown` message a draining server sends: how long a
    /// client should wait before it reconnects. Default: 1 s.
    pub shutdown_retry_after: Duration,
    /// How long a session whose token expired has to send a `refresh` after
    /// `reauth_required`; then `session_expired` and close. Default: 60 s.
    pub reauth_grace: Duration,
    /// How often each session resolves its tokens again (through the cache, coalesced) and is
    /// closed if one is rejected. Default: `None` (off).
    pub revalidate: Option<Duration>,
    /// Re-checks begun per second across the server's sessions, at most: after revocations may
    /// have been missed every session checks its tokens again, as a steady trickle to the
    /// integrator rather than all at once. Default: 200.
    pub recheck_rate: u32,
    /// How long a session whose re-check cannot get an answer (the integrator `overloaded`,
    /// timing out or unavailable) stays connected; then it is closed with `auth_unavailable`.
    /// Such a check is tried again until an answer comes, and an outage never counts as "still
    /// valid". Default: `None`, as long as the outage lasts (an outage of the integrator does
    /// not close every game).
    pub unverified_grace: Option<Duration>,
}

impl Default for GameServerConfig {
    fn default() -> Self {
        GameServerConfig {
            rooms: RoomConfig::defaults(None),
            max_line_bytes: 16 * 1024,
            login_timeout: Duration::from_secs(10),
            rejection_budget: 20,
            rejection_window: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_connections_per_address: 64,
            advertised_host: None,
            shutdown_retry_after: Duration::from_secs(1),
            reauth_grace: Duration::from_secs(60),
            revalidate: None,
            recheck_rate: 200,
            unverified_grace: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_must_have_unique_nonempty_ids_and_valid_auth_urls() {
        let room = |id: &str, url: Option<&str>| RoomConfig {
            room_id: id.into(),
            auth_url: url.map(Into::into),
        };
        assert!(validate_rooms(&[]).is_err());
        assert!(validate_rooms(&[room("", None)]).is_err());
        assert!(validate_rooms(&[room("a", None), room("a", None)]).is_err());
        assert!(validate_rooms(&[room("a", Some("ftp://x"))]).is_err());
        assert!(validate_rooms(&[room("a", Some("https://x.example/game/"))]).is_ok());
    }

    #[test]
    fn uncovered_auth_urls_names_rooms_the_allowlist_misses() {
        let rooms = vec![
            RoomConfig {
                room_id: "a".into(),
                auth_url: Some("https://auth.example/game/eu".into()),
            },
            RoomConfig {
                room_id: "b".into(),
                auth_url: Some("https://other.example".into()),
            },
            RoomConfig {
                room_id: "c".into(),
                auth_url: None,
            },
        ];
        assert_eq!(
            RoomConfig::uncovered_auth_urls(
                &rooms,
                &["https://auth.example/game"],
                PlainHttp::LoopbackOnly
            ),
            ["https://other.example"]
        );
    }
}
