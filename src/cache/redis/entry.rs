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

use crate::answer::{answer_expiry, parse_user};
use crate::cache::Cached;
use crate::user::{Resolution, User};

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

/// Why a value read from Redis is no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unsealed {
    /// Not sealed with this tier's secret under this key: forged, altered, moved from another
    /// key (another generation's included), or not this crate's.
    Forged,
    /// Sealed, but its sealed expiry (unix ms) has passed: whatever Redis's TTL says, it
    /// admits nobody (a value written back without an expiry, or a clock a little ahead).
    Expired { expired_at_ms: u64 },
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
            SharedEntry::User(user) => {
                let expires_at = answer_expiry(&user);
                Cached::user(Resolution::new(Arc::new(user), expires_at), left)
            }
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

    /// The value to store under `key` until `expires_at_ms` (unix ms): a MAC of the key, the
    /// expiry and the encoded answer, then the expiry and the answer
    /// (`<32 hex MAC><expiry ms>.<answer>`). The key names the generation, so a value is
    /// sealed to the generation it was written in, too.
    pub(super) fn seal(&self, mac: &Hmac<Sha256>, key: &str, expires_at_ms: u64) -> String {
        let sealed = format!("{expires_at_ms}.{}", self.encode());
        let mut tag = [0; SEAL_HEX];
        hex_into(&seal_of(mac, key, sealed.as_bytes()), &mut tag);
        let mut value = String::with_capacity(SEAL_HEX + sealed.len());
        value.push_str(std::str::from_utf8(&tag).expect("hex digits"));
        value.push_str(&sealed);
        value
    }

    /// The answer in `value`, read under `key` at `now_ms` (unix ms), with its sealed expiry,
    /// if its MAC is this tier's (compared in constant time) and that expiry is still ahead.
    ///
    /// # Errors
    ///
    /// [`Unsealed`]: why it is no answer.
    pub(super) fn open(
        mac: &Hmac<Sha256>,
        key: &str,
        value: &[u8],
        now_ms: u64,
    ) -> Result<(SharedEntry, u64), Unsealed> {
        let (seal, sealed) = value.split_at_checked(SEAL_HEX).ok_or(Unsealed::Forged)?;
        let mut tag = [0; SEAL_HEX / 2];
        unhex(seal, &mut tag).ok_or(Unsealed::Forged)?;
        let mut check = mac.clone();
        feed_seal(&mut check, key, sealed);
        check
            .verify_truncated_left(&tag)
            .map_err(|_| Unsealed::Forged)?;
        let dot = sealed
            .iter()
            .position(|&b| b == b'.')
            .ok_or(Unsealed::Forged)?;
        let expires_at_ms: u64 = std::str::from_utf8(&sealed[..dot])
            .ok()
            .and_then(|ms| ms.parse().ok())
            .ok_or(Unsealed::Forged)?;
        if now_ms >= expires_at_ms {
            return Err(Unsealed::Expired {
                expired_at_ms: expires_at_ms,
            });
        }
        let entry = SharedEntry::decode(&sealed[dot + 1..]).ok_or(Unsealed::Forged)?;
        Ok((entry, expires_at_ms))
    }
}

/// The MAC sealing `sealed` (expiry and answer) under `key`, its first 16 bytes. The `value`
/// prefix keeps it apart from every digest of a name (those begin with an endpoint URL).
fn seal_of(mac: &Hmac<Sha256>, key: &str, sealed: &[u8]) -> [u8; SEAL_HEX / 2] {
    let mut mac = mac.clone();
    feed_seal(&mut mac, key, sealed);
    let full = mac.finalize().into_bytes();
    full[..SEAL_HEX / 2]
        .try_into()
        .expect("a SHA-256 MAC has 32 bytes")
}

fn feed_seal(mac: &mut Hmac<Sha256>, key: &str, sealed: &[u8]) {
    mac.update(b"value\0");
    mac.update(key.as_bytes());
    mac.update(&[0]);
    mac.update(sealed);
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` in lowercase hex into `out` (twice as long).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
}

/// Lowercase hex `text` into `out` (half as long); `None` for anything else.
pub(super) fn unhex(text: &[u8], out: &mut [u8]) -> Option<()> {
    if text.len() != out.len() * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (pair, b) in text.chunks_exact(2).zip(out.iter_mut()) {
        *b = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(())
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

    /// A wall-clock time, unix ms.
    const NOW: u64 = 1_764_000_000_000;

    fn mac(secret: &[u8]) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(secret).unwrap()
    }

    fn user() -> User {
        User {
            id: 5,
            name: "n".into(),
            extra: Default::default(),
        }
    }

    #[test]
    fn entries_round_trip_sealed_expired_rejections_included() {
        let mac = mac(b"0123456789abcdef");
        let rejections = [401, 403, 200].map(SharedEntry::Rejected);
        for entry in [SharedEntry::User(user())].into_iter().chain(rejections) {
            let sealed = entry.seal(&mac, "k", NOW + 5);
            assert_eq!(
                SharedEntry::open(&mac, "k", sealed.as_bytes(), NOW),
                Ok((entry, NOW + 5))
            );
        }
    }

    #[test]
    fn a_value_not_sealed_by_this_secret_for_this_key_is_refused() {
        let (mine, theirs) = (mac(b"0123456789abcdef"), mac(b"fedcba9876543210"));
        let sealed = SharedEntry::User(user()).seal(&mine, "k", NOW + 5);
        let open = |mac: &Hmac<Sha256>, key: &str, value: &str| {
            SharedEntry::open(mac, key, value.as_bytes(), NOW)
        };
        assert_eq!(
            open(&theirs, "k", &sealed),
            Err(Unsealed::Forged),
            "another secret"
        );
        assert_eq!(
            open(&mine, "other", &sealed),
            Err(Unsealed::Forged),
            "moved"
        );
        let forged = sealed.replace("\"id\":5", "\"id\":6");
        assert_eq!(open(&mine, "k", &forged), Err(Unsealed::Forged), "altered");
        let later = sealed.replace(&format!("{}.", NOW + 5), &format!("{}.", NOW + 9_999));
        assert_eq!(
            open(&mine, "k", &later),
            Err(Unsealed::Forged),
            "expiry moved"
        );
        let upper = format!("{}{}", sealed[..32].to_uppercase(), &sealed[32..]);
        assert_eq!(
            open(&mine, "k", &upper),
            Err(Unsealed::Forged),
            "not our hex"
        );
        for garbage in ["", "x", "u{\"id\":1,\"name\":\"a\"}", "r401"] {
            assert_eq!(open(&mine, "k", garbage), Err(Unsealed::Forged));
        }
    }

    #[test]
    fn a_value_past_its_sealed_expiry_admits_nobody_whatever_redis_keeps() {
        let mac = mac(b"0123456789abcdef");
        let sealed = SharedEntry::User(user()).seal(&mac, "k", NOW);
        assert_eq!(
            SharedEntry::open(&mac, "k", sealed.as_bytes(), NOW),
            Err(Unsealed::Expired { expired_at_ms: NOW })
        );
        assert!(SharedEntry::open(&mac, "k", sealed.as_bytes(), NOW - 1).is_ok());
    }

    #[test]
    fn any_bytes_and_any_change_to_a_sealed_value_open_to_nothing_and_never_panic() {
        let mac = mac(b"0123456789abcdef");
        let sealed = SharedEntry::User(user())
            .seal(&mac, "k", NOW + 5)
            .into_bytes();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..5_000 {
            let mut changed = sealed.clone();
            let at = rng.usize(..changed.len());
            match rng.u8(..3) {
                0 => changed[at] ^= 1 << rng.u8(..8),
                1 => changed.truncate(at),
                _ => changed.insert(at, rng.u8(..)),
            }
            assert!(SharedEntry::open(&mac, "k", &changed, NOW).is_err());
            let len = rng.usize(..80);
            let random: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
            assert!(SharedEntry::open(&mac, "k", &random, NOW).is_err());
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
