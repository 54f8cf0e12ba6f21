//! What every session of one server shares, [`Shared`]: the resolver, the rooms and who is in
//! them, the connection cap, the drain signals and the registry of live sessions.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::GameServerConfig;
use super::protocol::{LOGIN_TIMEOUT, RATE_LIMITED, SERVER_BUSY, TOO_MANY_CONNECTIONS};
use token_resolver::{Endpoint, Identity, PlainHttp, Resolver};
use token_resolver_listener::{AddressSlot, Budget, PerAddress};
use token_resolver_player::RoomInfo;
use token_resolver_sessions::{AdminNode, Pacer, Registry};

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
    pub(super) fn accepts(&self, claimed: &str) -> bool {
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
    /// Rejected resolutions per client address.
    pub(super) rejections: Budget<IpAddr>,
    /// The next connection number.
    pub(super) next_connection: AtomicU64,
    /// One permit per open session, on any transport: `max_connections` in all.
    pub(super) slots: Arc<Semaphore>,
    /// Open sessions per client address, on any transport: `max_connections_per_address`.
    pub(super) per_address: Arc<PerAddress>,
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
    pub(super) registry: Arc<Registry>,
    /// The pace of the sessions' re-checks.
    pub(super) rechecks: Pacer,
}

/// A session's places, held while it is open: one under `max_connections`, one under its
/// address's `max_connections_per_address`.
pub(super) struct Place {
    _server: OwnedSemaphorePermit,
    _address: Option<AddressSlot>,
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
            per_address: PerAddress::new(config.max_connections_per_address),
            sessions: TaskTracker::new(),
            draining: CancellationToken::new(),
            cut: CancellationToken::new(),
            accepting: AtomicBool::new(false),
            registry: Arc::default(),
            rechecks: Pacer::new(config.recheck_rate),
            rejections: Budget::new(config.rejection_budget, config.rejection_window),
            config,
        }
    }

    /// A place for a new session of `peer` (when its address is known), under the address's
    /// cap and the server's; otherwise the error code that refuses it:
    /// [`TOO_MANY_CONNECTIONS`] or [`SERVER_BUSY`].
    pub(super) fn take_place(&self, peer: Option<IpAddr>) -> Result<Place, &'static str> {
        let address = match peer {
            Some(peer) => Some(self.per_address.admit(peer).ok_or(TOO_MANY_CONNECTIONS)?),
            None => None,
        };
        let server = (self.slots.clone().try_acquire_owned()).map_err(|_| SERVER_BUSY)?;
        Ok(Place {
            _server: server,
            _address: address,
        })
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

/// The normalised endpoint of an authUrl; `None` when it does not parse.
pub(super) fn normalised(auth_url: &str) -> Option<String> {
    Endpoint::parse(auth_url, PlainHttp::Anywhere)
        .ok()
        .map(|endpoint| endpoint.as_str().to_owned())
}

/// The admin listener serves a game server through what its sessions share.
impl AdminNode for Shared {
    fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    fn registry(&self) -> &Registry {
        &self.registry
    }

    /// `draining`, `game_listener` (not accepting).
    fn not_ready(&self) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        if self.draining.is_cancelled() {
            reasons.push("draining");
        }
        if !self.is_accepting() {
            reasons.push("game_listener");
        }
        reasons
    }

    /// The game server's own metrics, at zero under their fixed label values (the error codes
    /// a flood or a full node brings; every other code appears when first sent).
    fn register_metrics(&self) {
        let refusals = [SERVER_BUSY, TOO_MANY_CONNECTIONS];
        let errors = [
            RATE_LIMITED,
            LOGIN_TIMEOUT,
            SERVER_BUSY,
            TOO_MANY_CONNECTIONS,
        ];
        super::telemetry::register(&refusals, &errors);
    }
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
