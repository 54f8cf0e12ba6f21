//! The reference API's memory: password accounts, and the users, guests, banned users,
//! sessions and access tokens that change while it serves, each capped and swept; and how
//! secrets are made and kept (random, then only their SHA-256 or argon2 hash).
//!
//! Access tokens are derived, not drawn: the `i`-th token of a session is
//! `base64url(HMAC-SHA256(key, "access-token" ‖ session id ‖ i))` under a random key that
//! lives only in this process's memory ([`TokenKey`]). The session keeps only how many it
//! issued, and the token store only their hashes; at logout the client presents the session
//! id (its cookie) and the API derives that session's tokens again to name them to the game
//! servers. Without the session id (never stored) the hashes lead nowhere, and without the key
//! no one can compute a token.
//!
//! Each session also has a public id, its `sid`: `base64url(HMAC-SHA256(key, "session-public"
//! ‖ session id))` cut to 128 bits. `/api/user` answers it with each of the session's tokens,
//! and a logout names it to the game servers, which end every session whose token had it: one
//! notice per logout however many tokens the session took. It says nothing of the session id.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHasher};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Most live sessions at once: device-id logins are cheap, so they must not grow memory freely.
const MAX_SESSIONS: usize = 100_000;
/// Most live access tokens at once.
const MAX_TOKENS: usize = 1_000_000;
/// Most tokens one session issues; then it must log in again. Logout derives them all again,
/// so this bounds its work (a few milliseconds at the cap, outside the lock).
pub const MAX_TOKENS_PER_SESSION: u32 = 4_096;
/// Most users banned at once.
pub(super) const MAX_BANNED: usize = 100_000;
/// Expired sessions and tokens are swept on every this-many-th issuance.
const SWEEP_EVERY: u64 = 256;

/// A SHA-256 digest: how sessions, tokens and device ids are keyed.
type Digest32 = [u8; 32];

/// A password user's credentials.
pub(super) struct Account {
    /// The user's id.
    pub(super) id: i64,
    /// The PHC string of the argon2 hash of the password.
    pub(super) password_hash: String,
}

/// The mutable part of the API.
pub(super) struct Store {
    /// Every user's name by id, password users and guests alike.
    pub(super) names: HashMap<i64, String>,
    /// Guest user id by SHA-256 of the device id.
    pub(super) guests: HashMap<Digest32, i64>,
    /// The id the next guest gets: above every existing id.
    pub(super) next_guest_id: i64,
    /// Live sessions by SHA-256 of the session id.
    pub(super) sessions: HashMap<Digest32, Session>,
    /// Live access tokens by SHA-256 of the token.
    pub(super) tokens: HashMap<Digest32, IssuedToken>,
    /// Users who may not log in, and whose tokens were revoked.
    pub(super) banned: HashSet<i64>,
    /// Sessions and tokens issued so far, to sweep expired ones every [`SWEEP_EVERY`].
    pub(super) issued: u64,
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
}

/// Which map [`Store::make_room`] is about to insert into.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// `sessions`, capped at [`MAX_SESSIONS`].
    Session,
    /// `tokens`, capped at [`MAX_TOKENS`].
    Token,
}

impl Store {
    /// Counts one issuance and sweeps expired sessions and tokens every [`SWEEP_EVERY`] of them
    /// or when the map is full. `false`: the map is full of live entries.
    pub(super) fn make_room(&mut self, now: Instant, kind: Kind) -> bool {
        self.issued += 1;
        let full = match kind {
            Kind::Session => self.sessions.len() >= MAX_SESSIONS,
            Kind::Token => self.tokens.len() >= MAX_TOKENS,
        };
        if full || self.issued % SWEEP_EVERY == 0 {
            self.sessions.retain(|_, s| s.expires > now);
            self.tokens.retain(|_, t| t.expires > now);
        }
        match kind {
            Kind::Session => self.sessions.len() < MAX_SESSIONS,
            Kind::Token => self.tokens.len() < MAX_TOKENS,
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
