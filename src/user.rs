//! What a resolution yields: the [`User`] the auth API vouched for, with the [`ExtraFields`]
//! of its answer, and the [`Resolution`] that says what one answer knows of itself (its
//! [`Expiry`], whether it was served stale). Parsing an answer into one is `answer`'s business.

use std::fmt;
use std::num::NonZeroU32;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// A user as the integrator's `/api/user` answered, validated: `id` was a JSON integer that fits
/// `i64`, `name` a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct User {
    /// The user's id in the integrator's system.
    pub id: i64,
    /// The user's display name.
    pub name: String,
    /// Any further top-level fields of the answer, kept as they came (e.g. roles or a level);
    /// read it as a [`serde_json::Map`]: `user.extra["level"]`, `user.extra.get("roles")`.
    #[serde(flatten)]
    pub extra: ExtraFields,
}

impl User {
    /// The integrator's session this answer belongs to, when the answer says: its `sid` field
    /// (as OpenID Connect names a session), a string. A logout can then be revoked as one
    /// session ([`Resolver::invalidate_session`](crate::Resolver::invalidate_session)) rather
    /// than token by token.
    pub fn session(&self) -> Option<&str> {
        self.extra.get("sid").and_then(serde_json::Value::as_str)
    }
}

/// A moment a token stops being valid, in whole Unix seconds (until 2106, where it saturates):
/// four bytes, so that it costs a cached [`User`] no space.
///
/// ```
/// use std::time::Duration;
/// use token_resolver::Expiry;
///
/// let exp = Expiry::from_unix_seconds(1_700_000_000);
/// assert_eq!(exp.unix_seconds(), 1_700_000_000);
/// assert!(exp.has_passed(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Expiry(NonZeroU32);

impl Expiry {
    /// The moment `secs` seconds after the Unix epoch; 0 counts as the first second, anything
    /// past 2106 as the last representable one.
    pub fn from_unix_seconds(secs: u64) -> Expiry {
        let secs = u32::try_from(secs).unwrap_or(u32::MAX).max(1);
        Expiry(NonZeroU32::new(secs).unwrap_or(NonZeroU32::MIN))
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(self) -> u64 {
        u64::from(self.0.get())
    }

    /// As a [`SystemTime`].
    pub fn system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.unix_seconds())
    }

    /// How long from now until this moment plus `leeway` (clock skew, RFC 7519); zero once
    /// that has passed.
    pub fn remaining(self, leeway: Duration) -> Duration {
        // Checked: the leeway is configuration, and a huge one must not panic.
        match self.system_time().checked_add(leeway) {
            Some(until) => until
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO),
            None => Duration::MAX,
        }
    }

    /// Whether this moment plus `leeway` has passed.
    pub fn has_passed(self, leeway: Duration) -> bool {
        self.remaining(leeway).is_zero()
    }
}

/// One resolution of a token: the [`User`] it stands for, and what this answer says of
/// itself, which is the token's and not the user's: when the token stops being valid, and
/// whether the answer was served stale. What
/// [`Resolver::resolve_in_full`](crate::Resolver::resolve_in_full) and the other `_in_full`
/// methods return; it reads as the user it holds (`resolution.id`, `resolution.name`).
///
/// ```
/// use std::sync::Arc;
/// use token_resolver::{Expiry, Resolution, User};
///
/// let user = Arc::new(User { id: 7, name: "ann".into(), extra: Default::default() });
/// let resolution = Resolution::new(user, Some(Expiry::from_unix_seconds(1_900_000_000)));
/// assert_eq!(resolution.id, 7);
/// assert!(!resolution.is_stale());
/// assert_eq!(resolution.expires_at().map(|e| e.unix_seconds()), Some(1_900_000_000));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    user: Arc<User>,
    expires_at: Option<Expiry>,
    stale: bool,
}

impl Resolution {
    /// A fresh answer for `user`, whose token stops being valid at `expires_at` when it says.
    pub fn new(user: Arc<User>, expires_at: Option<Expiry>) -> Resolution {
        Resolution {
            user,
            expires_at,
            stale: false,
        }
    }

    /// This answer, marked as served past its freshness because the auth API was unavailable.
    pub fn into_stale(self) -> Resolution {
        Resolution {
            stale: true,
            ..self
        }
    }

    /// The user.
    pub fn user(&self) -> &Arc<User> {
        &self.user
    }

    /// The user, without the rest.
    pub fn into_user(self) -> Arc<User> {
        self.user
    }

    /// When the token stops being valid, when it says: the earlier of the answer's integer
    /// `exp` (RFC 7662) and, for a JWT, its payload's `exp`; the clock skew is not added. The
    /// answer's `exp` also stays in the user's [`extra`](User::extra) as it came.
    pub fn expires_at(&self) -> Option<Expiry> {
        self.expires_at
    }

    /// Whether this answer expired and was served only because the auth API was unavailable
    /// (see `ResolverBuilder::serve_stale_for`): the API did not confirm it just now.
    pub fn is_stale(&self) -> bool {
        self.stale
    }
}

impl Deref for Resolution {
    type Target = User;

    fn deref(&self) -> &User {
        &self.user
    }
}

/// The fields of an answer beyond `id` and `name`: a JSON object that is read and written
/// through [`Deref`] to [`serde_json::Map`].
///
/// Most answers have none, and then no map is held: the field is one word instead of a map's
/// three, which keeps every cached [`User`] a size class smaller. Two `ExtraFields` are equal
/// when their maps are, whether empty or absent.
///
/// ```
/// use serde_json::{json, Map};
/// use token_resolver::ExtraFields;
///
/// let mut extra = ExtraFields::default();
/// assert!(extra.is_empty());
/// extra.insert("level".to_owned(), json!(7));
/// assert_eq!(extra["level"], 7);
/// assert_eq!(extra, ExtraFields::from(Map::from_iter([("level".to_owned(), json!(7))])));
/// ```
#[derive(Clone, Default)]
pub struct ExtraFields(Option<Box<Map<String, Value>>>);

impl Deref for ExtraFields {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl DerefMut for ExtraFields {
    /// The map, made on first write.
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.0.get_or_insert_default()
    }
}

impl From<Map<String, Value>> for ExtraFields {
    /// Holds `map`, or nothing when it is empty.
    fn from(map: Map<String, Value>) -> Self {
        ExtraFields((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl From<ExtraFields> for Map<String, Value> {
    /// The map, owned; empty when none was held.
    fn from(extra: ExtraFields) -> Self {
        extra.0.map(|map| *map).unwrap_or_default()
    }
}

impl PartialEq for ExtraFields {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for ExtraFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for ExtraFields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_user_without_extra_fields_holds_no_map() {
        // Every cached user pays this: 40 bytes (56 with the map inline), so its `Arc`
        // allocation is 56 bytes instead of 72. What one answer says of itself (its expiry,
        // staleness) is the `Resolution`'s, kept by the cache entry that needs it.
        assert_eq!(std::mem::size_of::<User>(), 40);
        assert!(ExtraFields::from(Map::new()).0.is_none());
    }

    #[test]
    fn extra_fields_read_and_compare_like_their_map() {
        let map = Map::from_iter([("roles".to_owned(), json!(["gm"]))]);
        let extra = ExtraFields::from(map.clone());
        assert_eq!(extra["roles"][0], "gm");
        assert_eq!(*extra, map);
        assert_eq!(ExtraFields::default(), ExtraFields::from(Map::new()));
        assert_ne!(ExtraFields::default(), extra);
        assert_eq!(format!("{extra:?}"), format!("{map:?}"));
        assert_eq!(Map::from(extra), map);
        assert_eq!(Map::from(ExtraFields::default()), Map::new());
    }

    #[test]
    fn a_user_serialises_with_its_extra_fields_flattened() {
        let user = User {
            id: 7,
            name: "ann".to_owned(),
            extra: Map::from_iter([("level".to_owned(), json!(3))]).into(),
        };
        assert_eq!(
            serde_json::to_value(&user).unwrap(),
            json!({"id": 7, "name": "ann", "level": 3})
        );
        let plain = User {
            extra: ExtraFields::default(),
            ..user
        };
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            json!({"id": 7, "name": "ann"})
        );
    }
}
