//! The reference API's memory: password accounts, and the users, guests, banned users,
//! sessions and access tokens that change while it serves, each capped ([`SessionLimits`])
//! and expired through an index; and how secrets are made and kept (random, then only their
//! SHA-256 or argon2 hash).
//!
//! Everything that expires is also kept in order of expiry, so that expiring it takes a
//! bounded slice of work per issuance ([`SWEEP_SLICE`]), never a scan of the maps under the lock
//! that `/api/user` needs; every cap makes room by ending the oldest (or the first to expire)
//! of its kind, and a session's end takes its tokens with it.
//!
//! Access tokens are derived, not drawn: the `i`-th token of a session is
//! `base64url(HMAC-SHA256(key, "access-token" ‖ session id ‖ i))` under a random key that
//! lives only in this process's memory ([`TokenKey`]). Only their hashes are stored, each
//! session keeping its own; without the key no one can compute a token.
//!
//! Each session also has a public id, its `sid`: `base64url(HMAC-SHA256(key, "session-public"
//! ‖ session id))` cut to 128 bits. `/api/user` answers it with each of the session's tokens,
//! and a logout names it to the game servers, which end every session whose token had it: one
//! notice per logout however many tokens the session took. It says nothing of the session id.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHasher};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::config::SessionLimits;

/// Most tokens one session issues; then it must log in again. This bounds the hashes a session
/// keeps, and what its logout removes.
pub const MAX_TOKENS_PER_SESSION: u32 = 4_096;
/// Most users banned at once.
pub(super) const MAX_BANNED: usize = 100_000;
/// Most expired entries of each kind (tokens, sessions, guests) one sweep removes.
const SWEEP_SLICE: usize = 64;

/// A SHA-256 digest: how sessions, tokens and device ids are keyed.
pub(super) type Digest32 = [u8; 32];

/// Entries in order of expiry: the first is the one to expire, or to end at a cap, first.
type ExpiryIndex<K> = BTreeSet<(Instant, K)>;

/// A password user's credentials.
pub(super) struct Account {
    /// The user's id.
    pub(super) id: i64,
    /// The PHC string of the argon2 hash of the password.
    pub(super) password_hash: String,
}

/// The mutable part of the API.
pub(super) struct Store {
    /// The caps.
    limits: SessionLimits,
    /// Every user's name by id, password users and guests alike.
    names: HashMap<i64, String>,
    /// Guests by SHA-256 of their device id.
    guests: HashMap<Digest32, Guest>,
    /// Guests' devices by when they are forgotten.
    guest_expiry: ExpiryIndex<Digest32>,
    /// The id the next guest gets: above every existing id.
    next_guest_id: i64,
    /// Live sessions by SHA-256 of the session id.
    sessions: HashMap<Digest32, Session>,
    /// Every session by expiry.
    session_expiry: ExpiryIndex<Digest32>,
    /// Guest sessions by expiry (all sessions live as long: oldest first).
    guest_session_expiry: ExpiryIndex<Digest32>,
    /// Each user's sessions, oldest first.
    by_user: HashMap<i64, VecDeque<Digest32>>,
    /// The guest sessions opened from each client address, oldest first.
    by_address: HashMap<IpAddr, VecDeque<Digest32>>,
    /// Live access tokens by SHA-256 of the token.
    tokens: HashMap<Digest32, IssuedToken>,
    /// Every token by expiry.
    token_expiry: ExpiryIndex<Digest32>,
    /// Guest tokens by expiry.
    guest_token_expiry: ExpiryIndex<Digest32>,
    /// Users who may not log in, and whose tokens were revoked.
    pub(super) banned: HashSet<i64>,
}

/// A guest: the user a device id logs in as.
struct Guest {
    /// The user's id.
    id: i64,
    /// When it is forgotten unless its device logs in again.
    expires: Instant,
}

/// Who opens a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opener {
    /// A password user.
    Password,
    /// A device's guest, from this client address (when known).
    Guest(Option<IpAddr>),
}

/// A logged-in session (the `session` cookie).
pub(super) struct Session {
    /// Whose session it is.
    pub(super) user_id: i64,
    /// When it stops working; its tokens stop then at the latest.
    pub(super) expires: Instant,
    /// How many tokens it issued: the indexes its tokens are derived from.
    pub(super) tokens_issued: u32,
    /// Its public id, the `sid` of its tokens' answers.
    pub(super) sid: Arc<str>,
    /// Who opened it.
    opener: Opener,
    /// The hashes of the tokens it issued, some perhaps expired or ended since.
    tokens: Vec<Digest32>,
    /// When the last of its tokens to expire expires (`None`: it issued none): a logout is
    /// told while this is within the products' clock skew, even once every token expired.
    last_token_expires: Option<Instant>,
}

/// An access token issued by `/api/access_token`.
pub(super) struct IssuedToken {
    /// Whom it identifies.
    pub(super) user_id: i64,
    /// When it stops working.
    pub(super) expires: Instant,
    /// The same moment as Unix seconds (rounded down), the `exp` that `/api/user` answers.
    pub(super) exp: u64,
    /// The public id of the session that issued it, the `sid` that `/api/user` answers.
    pub(super) sid: Arc<str>,
    /// Whether a guest's session issued it.
    guest: bool,
}

/// What a reference API holds in memory: sessions, access tokens and guests not yet expired or
/// ended ([`ReferenceApi::held`](super::ReferenceApi::held)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// Sessions (login cookies).
    pub sessions: usize,
    /// Access tokens.
    pub tokens: usize,
    /// Guest users (devices).
    pub guests: usize,
}

/// A session that [`Store::end_session`] ended.
pub(super) struct Ended {
    /// Whose it was.
    pub(super) user_id: i64,
    /// Its public id.
    pub(super) sid: Arc<str>,
    /// Its tokens that were still live.
    pub(super) live_tokens: usize,
    /// When the last of its tokens to expire expires (or expired); `None` when it issued none.
    pub(super) last_token_expires: Option<Instant>,
}

impl Store {
    /// A store of the users in `names` (password users), none logged in.
    pub(super) fn new(names: HashMap<i64, String>, limits: SessionLimits) -> Self {
        let next_guest_id = names.keys().max().map_or(1, |max| max.saturating_add(1));
        Store {
            limits,
            names,
            guests: HashMap::new(),
            guest_expiry: BTreeSet::new(),
            next_guest_id,
            sessions: HashMap::new(),
            session_expiry: BTreeSet::new(),
            guest_session_expiry: BTreeSet::new(),
            by_user: HashMap::new(),
            by_address: HashMap::new(),
            tokens: HashMap::new(),
            token_expiry: BTreeSet::new(),
            guest_token_expiry: BTreeSet::new(),
            banned: HashSet::new(),
        }
    }

    /// The name of user `id` (empty for a user no longer known).
    pub(super) fn name(&self, id: i64) -> String {
        self.names.get(&id).cloned().unwrap_or_default()
    }

    /// What the store holds now.
    pub(super) fn held(&self) -> Held {
        Held {
            sessions: self.sessions.len(),
            tokens: self.tokens.len(),
            guests: self.guests.len(),
        }
    }

    /// The guest of the device whose id hashes to `device`, created on first sight (ending the
    /// guest that would be forgotten first at the cap); its lifetime starts again. `None` only
    /// when guest ids have run out.
    pub(super) fn guest(&mut self, device: Digest32, now: Instant) -> Option<i64> {
        self.sweep(now);
        let expires = now + self.limits.guest_ttl;
        if let Some(guest) = self.guests.get_mut(&device) {
            self.guest_expiry.remove(&(guest.expires, device));
            guest.expires = expires;
            self.guest_expiry.insert((expires, device));
            return Some(guest.id);
        }
        let id = self.next_guest_id;
        self.next_guest_id = id.checked_add(1)?;
        while self.guests.len() >= self.limits.guests {
            let Some(&(_, oldest)) = self.guest_expiry.first() else {
                break;
            };
            self.forget_guest(oldest);
        }
        self.guests.insert(device, Guest { id, expires });
        self.guest_expiry.insert((expires, device));
        self.names.insert(id, format!("Guest-{id}"));
        tracing::debug!(user_id = id, "guest user created");
        Some(id)
    }

    /// Opens the session `key` of `user_id` at `now`, to expire at `expires`, ending whichever
    /// sessions a cap asks to make room.
    pub(super) fn open_session(
        &mut self,
        key: Digest32,
        user_id: i64,
        sid: Arc<str>,
        opener: Opener,
        (now, expires): (Instant, Instant),
    ) {
        self.sweep(now);
        let per_user = match opener {
            Opener::Password => self.limits.sessions_per_user,
            Opener::Guest(_) => self.limits.sessions_per_device,
        };
        self.end_oldest(|store| store.by_user.get(&user_id), per_user, now);
        if let Opener::Guest(address) = opener {
            if let Some(address) = address {
                let cap = self.limits.guest_sessions_per_address;
                self.end_oldest(|store| store.by_address.get(&address), cap, now);
                self.by_address.entry(address).or_default().push_back(key);
            }
            while self.guest_session_expiry.len() >= self.limits.guest_sessions {
                let Some(&(_, oldest)) = self.guest_session_expiry.first() else {
                    break;
                };
                self.end_session(&oldest, now);
            }
            self.guest_session_expiry.insert((expires, key));
        }
        self.by_user.entry(user_id).or_default().push_back(key);
        self.session_expiry.insert((expires, key));
        let session = Session {
            user_id,
            expires,
            tokens_issued: 0,
            sid,
            opener,
            tokens: Vec::new(),
            last_token_expires: None,
        };
        self.sessions.insert(key, session);
    }

    /// Ends the oldest sessions of the queue `queue` picks until it holds fewer than `cap`.
    fn end_oldest(
        &mut self,
        queue: impl Fn(&Self) -> Option<&VecDeque<Digest32>>,
        cap: usize,
        now: Instant,
    ) {
        while let Some(&oldest) = queue(self)
            .filter(|q| q.len() >= cap)
            .and_then(|q| q.front())
        {
            tracing::debug!("oldest session ended to make room");
            self.end_session(&oldest, now);
        }
    }

    /// The live session `key`; an expired one is ended.
    pub(super) fn session(&mut self, key: &Digest32, now: Instant) -> Option<&mut Session> {
        if self.sessions.get(key)?.expires <= now {
            self.end_session(key, now);
            return None;
        }
        self.sessions.get_mut(key)
    }

    /// Stores `token` (its hash), the next token of the live session `session`, issued at `now`
    /// to expire at `expires` (`exp` in Unix seconds), ending the guest token that would expire
    /// first when guest tokens are at their cap. `false`: the session is gone (its guest was
    /// forgotten by this very sweep), and nothing was stored.
    #[must_use]
    pub(super) fn issue(
        &mut self,
        session: &Digest32,
        token: Digest32,
        (now, expires): (Instant, Instant),
        exp: u64,
    ) -> bool {
        self.sweep(now);
        let Some(owner) = self.sessions.get_mut(session) else {
            return false;
        };
        owner.tokens_issued += 1;
        owner.tokens.push(token);
        owner.last_token_expires = owner.last_token_expires.max(Some(expires));
        let guest = matches!(owner.opener, Opener::Guest(_));
        let issued = IssuedToken {
            user_id: owner.user_id,
            expires,
            exp,
            sid: owner.sid.clone(),
            guest,
        };
        if guest {
            while self.guest_token_expiry.len() >= self.limits.guest_tokens {
                let Some(&(_, first)) = self.guest_token_expiry.first() else {
                    break;
                };
                self.remove_token(&first);
            }
            self.guest_token_expiry.insert((expires, token));
        }
        self.token_expiry.insert((expires, token));
        self.tokens.insert(token, issued);
        true
    }

    /// The live token `key`; an expired one is removed.
    pub(super) fn token(&mut self, key: &Digest32, now: Instant) -> Option<&IssuedToken> {
        if self.tokens.get(key)?.expires <= now {
            self.remove_token(key);
            return None;
        }
        self.tokens.get(key)
    }

    /// Removes the token `key`.
    fn remove_token(&mut self, key: &Digest32) -> Option<IssuedToken> {
        let token = self.tokens.remove(key)?;
        self.token_expiry.remove(&(token.expires, *key));
        if token.guest {
            self.guest_token_expiry.remove(&(token.expires, *key));
        }
        Some(token)
    }

    /// Ends the session `key` and removes its tokens, counting those still live at `now`.
    pub(super) fn end_session(&mut self, key: &Digest32, now: Instant) -> Option<Ended> {
        let session = self.sessions.remove(key)?;
        self.session_expiry.remove(&(session.expires, *key));
        forget_in(&mut self.by_user, session.user_id, key);
        if let Opener::Guest(address) = session.opener {
            self.guest_session_expiry.remove(&(session.expires, *key));
            if let Some(address) = address {
                forget_in(&mut self.by_address, address, key);
            }
        }
        let live_tokens = (session.tokens.iter())
            .filter_map(|token| self.remove_token(token))
            .filter(|token| token.expires > now)
            .count();
        Some(Ended {
            user_id: session.user_id,
            sid: session.sid,
            live_tokens,
            last_token_expires: session.last_token_expires,
        })
    }

    /// Ends every session of `user_id`: how many tokens and sessions went.
    pub(super) fn end_user(&mut self, user_id: i64) -> (usize, usize) {
        let sessions = self.by_user.get(&user_id).cloned().unwrap_or_default();
        let tokens = self.tokens.len();
        let now = Instant::now();
        for key in &sessions {
            self.end_session(key, now);
        }
        (tokens - self.tokens.len(), sessions.len())
    }

    /// Forgets the guest of `device`, its name and its sessions.
    fn forget_guest(&mut self, device: Digest32) {
        let Some(guest) = self.guests.remove(&device) else {
            return;
        };
        self.guest_expiry.remove(&(guest.expires, device));
        self.names.remove(&guest.id);
        self.end_user(guest.id);
        tracing::debug!(user_id = guest.id, "guest forgotten");
    }

    /// Removes up to [`SWEEP_SLICE`] expired tokens, sessions and guests each.
    fn sweep(&mut self, now: Instant) {
        for _ in 0..SWEEP_SLICE {
            match self.token_expiry.first() {
                Some(&(expires, key)) if expires <= now => self.remove_token(&key),
                _ => break,
            };
        }
        for _ in 0..SWEEP_SLICE {
            match self.session_expiry.first() {
                Some(&(expires, key)) if expires <= now => self.end_session(&key, now),
                _ => break,
            };
        }
        for _ in 0..SWEEP_SLICE {
            match self.guest_expiry.first() {
                Some(&(expires, device)) if expires <= now => self.forget_guest(device),
                _ => break,
            };
        }
    }
}

/// Removes `key` from the queue of `owner` in `queues`, and the queue once empty.
fn forget_in<K: std::hash::Hash + Eq>(
    queues: &mut HashMap<K, VecDeque<Digest32>>,
    owner: K,
    key: &Digest32,
) {
    if let Some(queue) = queues.get_mut(&owner) {
        queue.retain(|k| k != key);
        if queue.is_empty() {
            queues.remove(&owner);
        }
    }
}

/// The key access tokens are derived under: random per process, never stored or shown.
pub(super) struct TokenKey(Hmac<Sha256>);

impl TokenKey {
    /// A fresh random key.
    pub(super) fn random() -> Self {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        Self(Hmac::new_from_slice(&key).unwrap_or_else(|_| unreachable!("HMAC takes any key")))
    }

    /// The `index`-th access token of the session `session_id`: 43 base64url characters.
    pub(super) fn token(&self, session_id: &str, index: u32) -> String {
        let mut mac = self.0.clone();
        mac.update(b"access-token\0");
        mac.update(&(session_id.len() as u64).to_be_bytes());
        mac.update(session_id.as_bytes());
        mac.update(&index.to_be_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// The public id (`sid`) of the session `session_id`: 22 base64url characters.
    pub(super) fn public_session_id(&self, session_id: &str) -> Arc<str> {
        let mut mac = self.0.clone();
        mac.update(b"session-public\0");
        mac.update(session_id.as_bytes());
        Arc::from(URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..16]))
    }
}

/// 32 random bytes from the OS, base64url without padding (43 characters).
pub(super) fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The SHA-256 digest of a secret: the only form in which secrets are stored.
pub(super) fn sha256(secret: impl AsRef<[u8]>) -> Digest32 {
    Sha256::digest(secret.as_ref()).into()
}

/// The argon2 PHC string of `password`, with a random salt.
pub(super) fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| e.to_string())
}
