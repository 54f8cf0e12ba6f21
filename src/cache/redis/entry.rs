//! What the shared tier stores and under which names: an answer as Redis holds it
//! ([`SharedEntry`]), sealed with a MAC of the tier's secret so that a value nobody with the
//! secret wrote is never taken for an answer; and the key names ([`Keys`]), each naming a token,
//! a user or a session by an HMAC, never by itself.
//!
//! Every key carries the tier's generation (`<prefix>g<N>:`), which `invalidate_all` moves on
//! with one `INCR`: the old generation's keys are never read again and expire by themselves. A
//! key's hash tag (`{...}`) is what a Lua script needs on a cluster: a token's entry and its
//! tombstone share the token's tag; a user's index and the user's and sessions' tombstones
//! share the user's.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::answer::parse_user;
use crate::cache::Cached;
use crate::user::User;

/// An answer as Redis holds it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum SharedEntry {
    /// A user.
    User(User),
    /// A rejection (401 or 403).
    Rejected(u16),
}

/// Hex digits of the MAC that seals each value: 128 bits.
const SEAL_HEX: usize = 32;

impl SharedEntry {
    pub(super) fn of(cached: &Cached) -> SharedEntry {
        match cached {
            Cached::User { user, .. } => SharedEntry::User(User::clone(user)),
            Cached::Rejected { status, .. } => SharedEntry::Rejected(*status),
        }
    }

    /// The local entry for this answer, fresh for `left`.
    pub(super) fn cached(self, left: Duration) -> Cached {
        match self {
            SharedEntry::User(user) => Cached::user(Arc::new(user), left),
            SharedEntry::Rejected(status) => Cached::rejected(status, left),
        }
    }

    fn encode(&self) -> String {
        match self {
            SharedEntry::User(user) => {
                format!("u{}", serde_json::to_string(user).unwrap_or_default())
            }
            SharedEntry::Rejected(status) => format!("r{status}"),
        }
    }

    fn decode(value: &[u8]) -> Option<SharedEntry> {
        match value.split_first()? {
            (b'u', json) => parse_user(json).ok().map(SharedEntry::User),
            (b'r', status) => {
                let status = std::str::from_utf8(status).ok()?.parse().ok()?;
                // 401 and 403 as the API answered; 200 for an answer whose `exp` had passed.
                matches!(status, 200 | 401 | 403).then_some(SharedEntry::Rejected(status))
            }
            _ => None,
        }
    }

    /// The value to store under `key`: the encoded answer behind a MAC of both.
    pub(super) fn seal(&self, mac: &Hmac<Sha256>, key: &str) -> String {
        let payload = self.encode();
        format!("{}{payload}", seal_of(mac, key, payload.as_bytes()))
    }

    /// The answer in `value`, read under `key`, if its MAC is this tier's; `Err(())` for a
    /// value that is not (forged, altered, moved from another key, or not this crate's).
    pub(super) fn open(mac: &Hmac<Sha256>, key: &str, value: &[u8]) -> Result<SharedEntry, ()> {
        let (seal, payload) = value.split_at_checked(SEAL_HEX).ok_or(())?;
        if seal != seal_of(mac, key, payload).as_bytes() {
            return Err(());
        }
        SharedEntry::decode(payload).ok_or(())
    }
}

/// The MAC sealing `payload` under `key`, in hex. The `value` prefix keeps it apart from every
/// digest of a name (those begin with an endpoint URL).
fn seal_of(mac: &Hmac<Sha256>, key: &str, payload: &[u8]) -> String {
    let mut mac = mac.clone();
    mac.update(b"value\0");
    mac.update(key.as_bytes());
    mac.update(&[0]);
    mac.update(payload);
    hex(&mac.finalize().into_bytes()[..SEAL_HEX / 2])
}

/// The hex HMAC naming (endpoint, token): the separator keeps `("ab", "c")` from `("a", "bc")`.
pub(super) fn token_digest(mac: &Hmac<Sha256>, endpoint: &str, token: &[u8]) -> String {
    hex(&digest(mac, endpoint, token))
}

/// The first eight bytes of the HMAC naming (endpoint, token): the token's fingerprint in the
/// local index and revocation log, the same on every node.
pub(super) fn token_fingerprint(mac: &Hmac<Sha256>, endpoint: &str, token: &[u8]) -> u64 {
    let digest = digest(mac, endpoint, token);
    u64::from_be_bytes(digest[..8].try_into().expect("a SHA-256 MAC has 32 bytes"))
}

/// [`token_fingerprint`] read back from a [`token_digest`]; `None` for one that is not.
pub(super) fn fingerprint_of(digest: &str) -> Option<u64> {
    u64::from_str_radix(digest.get(..16)?, 16).ok()
}

/// The HMAC of (endpoint, bytes).
fn digest(mac: &Hmac<Sha256>, endpoint: &str, bytes: &[u8]) -> [u8; 32] {
    let mut mac = mac.clone();
    mac.update(endpoint.as_bytes());
    mac.update(&[0]);
    mac.update(bytes);
    mac.finalize().into_bytes().into()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| {
            [
                DIGITS[usize::from(b >> 4)] as char,
                DIGITS[usize::from(b & 15)] as char,
            ]
        })
        .collect()
}

/// The names of the tier's keys, under its prefix.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: String,
}

impl Keys {
    pub(super) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
        }
    }

    /// The tier's generation: `invalidate_all` increments it.
    pub(super) fn generation(&self) -> String {
        format!("{}gen", self.prefix)
    }

    /// The stream every revocation is told on.
    pub(super) fn stream(&self) -> String {
        format!("{}revocations", self.prefix)
    }

    /// A token's entry, by its digest.
    pub(super) fn token(&self, generation: u64, digest: &str) -> String {
        format!("{}g{generation}:tok:{{{digest}}}", self.prefix)
    }

    /// A revoked token's tombstone: no entry is written for it while it lives.
    pub(super) fn token_tombstone(&self, generation: u64, digest: &str) -> String {
        format!("{}g{generation}:tomb:{{{digest}}}", self.prefix)
    }

    /// A user's index: the digests of the user's tokens that have an entry.
    pub(super) fn user_index(&self, generation: u64, user: &str) -> String {
        format!("{}g{generation}:user:{{{user}}}", self.prefix)
    }

    /// A revoked user's tombstone.
    pub(super) fn user_tombstone(&self, generation: u64, user: &str) -> String {
        format!("{}g{generation}:utomb:{{{user}}}", self.prefix)
    }

    /// A revoked session's tombstone, beside its user's index.
    pub(super) fn session_tombstone(&self, generation: u64, user: &str, session: &str) -> String {
        format!("{}g{generation}:stomb:{{{user}}}:{session}", self.prefix)
    }
}

/// The digests naming a user and a session in key names.
pub(super) fn user_digest(mac: &Hmac<Sha256>, endpoint: &str, user: i64) -> String {
    hex(&digest(mac, endpoint, &user.to_be_bytes()))
}

/// A session's digest: `sid:` keeps it apart from every token (no `b64token` has a colon).
pub(super) fn session_digest(mac: &Hmac<Sha256>, endpoint: &str, session: &str) -> String {
    let mut bytes = b"sid:".to_vec();
    bytes.extend_from_slice(session.as_bytes());
    hex(&digest(mac, endpoint, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(secret: &[u8]) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(secret).unwrap()
    }

    fn user() -> User {
        User {
            id: 5,
            name: "n".into(),
            extra: Default::default(),
            stale: false,
            expires_at: None,
        }
    }

    #[test]
    fn entries_round_trip_sealed_expired_rejections_included() {
        let mac = mac(b"0123456789abcdef");
        let rejections = [401, 403, 200].map(SharedEntry::Rejected);
        for entry in [SharedEntry::User(user())].into_iter().chain(rejections) {
            let sealed = entry.seal(&mac, "k");
            assert_eq!(SharedEntry::open(&mac, "k", sealed.as_bytes()), Ok(entry));
        }
    }

    #[test]
    fn a_value_not_sealed_by_this_secret_for_this_key_is_refused() {
        let (mine, theirs) = (mac(b"0123456789abcdef"), mac(b"fedcba9876543210"));
        let sealed = SharedEntry::User(user()).seal(&mine, "k");
        assert!(
            SharedEntry::open(&theirs, "k", sealed.as_bytes()).is_err(),
            "another secret"
        );
        assert!(
            SharedEntry::open(&mine, "other", sealed.as_bytes()).is_err(),
            "moved"
        );
        let forged = sealed.replace("\"id\":5", "\"id\":6");
        assert!(
            SharedEntry::open(&mine, "k", forged.as_bytes()).is_err(),
            "altered"
        );
        for garbage in [&b""[..], b"x", b"u{\"id\":1,\"name\":\"a\"}", b"r401"] {
            assert!(SharedEntry::open(&mine, "k", garbage).is_err());
        }
    }

    #[test]
    fn names_keep_apart_what_they_name_and_show_nothing_of_it() {
        let mac = mac(b"0123456789abcdef");
        assert_ne!(
            token_digest(&mac, "ab", b"c"),
            token_digest(&mac, "a", b"bc")
        );
        let digest = token_digest(&mac, "https://a.example/api/user", b"tok");
        assert_eq!(
            fingerprint_of(&digest),
            Some(token_fingerprint(
                &mac,
                "https://a.example/api/user",
                b"tok"
            ))
        );
        assert_ne!(
            session_digest(&mac, "e", "x"),
            token_digest(&mac, "e", b"x")
        );
        let keys = Keys::new("p:");
        assert_eq!(keys.token(3, "d"), "p:g3:tok:{d}");
        assert_eq!(keys.session_tombstone(3, "u", "s"), "p:g3:stomb:{u}:s");
    }
}
