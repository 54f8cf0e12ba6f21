//! Cache keys: (normalised endpoint, token), owned ([`CacheKey`]) or borrowed ([`KeyRef`]), and
//! the keyed hasher of the cache and the in-flight map ([`KeyHasher`]).
//!
//! A look-up builds no key: [`KeyRef`] borrows the endpoint and the token. The hit path's moka
//! `get` finds the owned [`CacheKey`] from it through `moka::Equivalent`, with plain calls.
//! The other look-ups, off the hit path (the in-flight map, a std `HashMap` that knows only
//! `Borrow`; moka's `invalidate` and `contains_key`), go through `Borrow<dyn KeyView>`, whose
//! `dyn` calls the hit path is kept free of. Both ways hash and compare through the same two
//! functions. Keys hold the whole token, so two tokens never share an entry; a token of up to
//! [`INLINE_TOKEN_BYTES`] is kept inside the key, without an allocation of its own.
//!
//! # Hashing
//!
//! A hit hashes its key once, with [`KeyHasher`]: foldhash, seeded at random for each cache
//! (and each in-flight map), over the endpoint's own hash (computed once when the authUrl was
//! parsed, see [`Endpoint::key_hash`]) and the token's bytes. Players choose their tokens, and
//! rejected ones are cached too, so the hasher must be keyed: a fixed hash would let a client
//! pick tokens that all land in one bucket. foldhash is keyed, already in the dependency tree
//! (through hashbrown), and far cheaper per token than SipHash-1-3, std's default (see
//! `docs/performance.md`). Its resistance is the "minimal" kind its authors describe: an
//! attacker who does not know the hasher's key cannot make keys collide, one who could watch
//! hash outputs could learn it. The cache never shows a hash, and
//! an attacker's keys each cost an upstream call under the slot limit, so we take that trade;
//! equality always compares the whole token and endpoint, so a collision only ever costs time.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;

use crate::auth_url::Endpoint;

/// The keyed hasher of the cache and of the in-flight map: foldhash with a random seed per
/// instance (see the module docs for why this one).
pub(crate) type KeyHasher = foldhash::fast::RandomState;

/// Tokens up to this many bytes live inside their key: a 32-byte secret in base64url is 43.
/// Longer ones take one allocation more.
pub(crate) const INLINE_TOKEN_BYTES: usize = 48;

/// The two parts of a key, whether owned or borrowed.
pub(crate) trait KeyView {
    /// The normalised endpoint.
    fn endpoint(&self) -> &Endpoint;
    /// The access token's bytes.
    fn token(&self) -> &[u8];
}

/// A key's hash: the endpoint's precomputed hash and the token, one pass over the token's
/// bytes. Every form of a key hashes through this, so that each finds the others.
#[inline]
fn hash_key<H: Hasher>(endpoint: &Endpoint, token: &[u8], state: &mut H) {
    state.write_u64(endpoint.key_hash());
    state.write(token);
}

/// Whether two keys' parts are equal: the whole token, and the endpoint.
#[inline]
fn same_key(a: (&Endpoint, &[u8]), b: (&Endpoint, &[u8])) -> bool {
    a.1 == b.1 && same_endpoint(a.0, b.0)
}

/// Whether two endpoints are equal. Keys of one configured authUrl share its `Endpoint`: no
/// string comparison then.
#[inline]
fn same_endpoint(a: &Endpoint, b: &Endpoint) -> bool {
    std::ptr::eq(a, b) || a.as_str() == b.as_str()
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_key(self.endpoint(), self.token(), state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        same_key(
            (self.endpoint(), self.token()),
            (other.endpoint(), other.token()),
        )
    }
}

impl Eq for dyn KeyView + '_ {}

/// An owned key, stored in the cache and the in-flight map: one pointer to the endpoint and
/// the token, so that the index revocations search (`index`) holds the very key the cache
/// holds, at the cost of a word.
#[derive(Clone)]
pub(crate) struct CacheKey(Arc<KeyParts>);

/// What a [`CacheKey`] points to.
struct KeyParts {
    /// Shared with every key of the same endpoint.
    endpoint: Arc<Endpoint>,
    /// The whole token, not a hash of it: a hash could let two tokens collide.
    token: SmallVec<[u8; INLINE_TOKEN_BYTES]>,
}

impl CacheKey {
    pub(crate) fn new(endpoint: Arc<Endpoint>, token: &str) -> Self {
        CacheKey(Arc::new(KeyParts {
            endpoint,
            token: SmallVec::from_slice(token.as_bytes()),
        }))
    }

    /// Whether this key is at `endpoint`.
    pub(crate) fn is_at(&self, endpoint: &Endpoint) -> bool {
        same_endpoint(&self.0.endpoint, endpoint)
    }

    /// Whether `self` and `other` are the same key value, not merely equal ones.
    #[cfg(test)]
    pub(crate) fn same(&self, other: &CacheKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// What tells this key value from every other one alive: its address.
    #[cfg(test)]
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl KeyView for CacheKey {
    fn endpoint(&self) -> &Endpoint {
        &self.0.endpoint
    }
    fn token(&self) -> &[u8] {
        &self.0.token
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for CacheKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn KeyView) == (other as &dyn KeyView)
    }
}

impl Eq for CacheKey {}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheKey")
            .field("endpoint", &self.0.endpoint.as_str())
            .field("token", &"[redacted]")
            .finish()
    }
}

/// A borrowed key, for look-ups that allocate nothing.
pub(crate) struct KeyRef<'a> {
    pub(crate) endpoint: &'a Endpoint,
    pub(crate) token: &'a str,
}

/// The hit path's look-up: moka finds a [`CacheKey`] from a `KeyRef` directly, with no
/// `dyn` call for the hash or the comparison.
impl Hash for KeyRef<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_key(self.endpoint, self.token.as_bytes(), state);
    }
}

impl moka::Equivalent<CacheKey> for KeyRef<'_> {
    #[inline]
    fn equivalent(&self, key: &CacheKey) -> bool {
        same_key(
            (self.endpoint, self.token.as_bytes()),
            (&key.0.endpoint, &key.0.token),
        )
    }
}

impl KeyView for KeyRef<'_> {
    fn endpoint(&self) -> &Endpoint {
        self.endpoint
    }
    fn token(&self) -> &[u8] {
        self.token.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::Cached;
    use crate::cache::store::Store as Cache;
    use crate::cache::{Lookup, Verdict};
    use crate::user::{Resolution, User};
    use crate::PlainHttp;
    use std::time::Duration;

    fn key(endpoint: &str, token: &str) -> CacheKey {
        CacheKey::new(
            Arc::new(Endpoint::parse(endpoint, PlainHttp::LoopbackOnly).unwrap()),
            token,
        )
    }

    fn user(id: i64) -> Cached {
        let user = Arc::new(User {
            id,
            name: format!("u{id}"),
            extra: Default::default(),
        });
        Cached::user(Resolution::new(user, None), Duration::from_secs(60))
    }

    /// The fresh user's id for `token` at `https://a.example`, looked up by a borrowed key.
    fn id_at_a(cache: &Cache, token: &str) -> Option<i64> {
        let endpoint = Endpoint::parse("https://a.example", PlainHttp::LoopbackOnly).unwrap();
        match cache.get(&KeyRef {
            endpoint: &endpoint,
            token,
        }) {
            Lookup::Fresh(Verdict::User(user)) => Some(user.id),
            _ => None,
        }
    }

    #[test]
    fn short_tokens_live_inside_the_key_and_long_ones_still_match() {
        let short = "a".repeat(43);
        assert!(!key("https://a.example", &short).0.token.spilled());
        let long = "b".repeat(INLINE_TOKEN_BYTES + 1);
        assert!(key("https://a.example", &long).0.token.spilled());
        let cache = Cache::new(
            10,
            Duration::from_secs(60),
            Duration::from_secs(5),
            Duration::ZERO,
        );
        for (id, t) in [(1, &short), (2, &long)] {
            cache.insert(key("https://a.example", t), &user(id));
        }
        let get = |t: &str| id_at_a(&cache, t);
        assert_eq!((get(&short), get(&long)), (Some(1), Some(2)));
        assert_eq!(get(&long[..INLINE_TOKEN_BYTES]), None);
    }

    #[test]
    fn debug_of_a_key_is_redacted() {
        let shown = format!("{:?}", key("https://a.example", "SECRET-TOKEN"));
        assert!(!shown.contains("SECRET-TOKEN"), "{shown}");
    }
}
