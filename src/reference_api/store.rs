//! The reference API's memory: password accounts, and the users, guests, sessions and access
//! tokens that change while it serves, each capped and swept; and how secrets are made and
//! kept (random, then only their SHA-256 or argon2 hash).

use std::collections::HashMap;
use std::time::Instant;

use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHasher};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Most live sessions at once: device-id logins are cheap, so they must not grow memory freely.
const MAX_SESSIONS: usize = 100_000;
/// Most live access tokens at once.
const MAX_TOKENS: usize = 1_000_000;
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
    /// Sessions and tokens issued so far, to sweep expired ones every [`SWEEP_EVERY`].
    pub(super) issued: u64,
}

/// A logged-in session (the `session` cookie).
pub(super) struct Session {
    /// Whose session it is.
    pub(super) user_id: i64,
    /// When it stops working.
    pub(super) expires: Instant,
}

/// An access token issued by `/api/access_token`.
pub(super) struct IssuedToken {
    /// Whom it identifies.
    pub(super) user_id: i64,
    /// SHA-256 of the session that issued it, so logout can revoke it.
    pub(super) session: Digest32,
    /// When it stops working.
    pub(super) expires: Instant,
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
