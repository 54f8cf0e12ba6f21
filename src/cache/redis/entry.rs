//! What the shared tier stores: an answer as Redis holds it ([`SharedEntry`]), and the HMAC
//! that names a token's key without the token.

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

    pub(super) fn encode(&self) -> String {
        match self {
            SharedEntry::User(user) => {
                format!("u{}", serde_json::to_string(user).unwrap_or_default())
            }
            SharedEntry::Rejected(status) => format!("r{status}"),
        }
    }

    pub(super) fn decode(value: &[u8]) -> Option<SharedEntry> {
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
}

/// The hex HMAC naming (endpoint, token): the separator keeps `("ab", "c")` from `("a", "bc")`.
pub(super) fn token_digest(mac: &Hmac<Sha256>, endpoint: &str, token: &[u8]) -> String {
    let mut mac = mac.clone();
    mac.update(endpoint.as_bytes());
    mac.update(&[0]);
    mac.update(token);
    hex(&mac.finalize().into_bytes())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_expired_rejections_included_and_garbage_is_refused() {
        let user = User {
            id: 5,
            name: "n".into(),
            extra: Default::default(),
            stale: false,
            expires_at: None,
        };
        let rejections = [401, 403, 200].map(SharedEntry::Rejected);
        for entry in [SharedEntry::User(user)].into_iter().chain(rejections) {
            assert_eq!(SharedEntry::decode(entry.encode().as_bytes()), Some(entry));
        }
        for garbage in [&b""[..], b"x", b"u{", b"r500", b"r", b"u[1]"] {
            assert_eq!(SharedEntry::decode(garbage), None);
        }
    }

    #[test]
    fn the_separator_keeps_endpoint_and_token_apart() {
        let mac = Hmac::<Sha256>::new_from_slice(b"0123456789abcdef").unwrap();
        assert_ne!(
            token_digest(&mac, "ab", b"c"),
            token_digest(&mac, "a", b"bc")
        );
    }
}
