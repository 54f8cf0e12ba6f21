//! The `/api/user` answer: strict parsing of its body into a [`User`] ([`parse_user`]), and of
//! its `Cache-Control` into a [`Freshness`] ([`parse_cache_control`]).
//!
//! The body must be one JSON object with `id` a JSON integer that fits `i64` and `name` a JSON
//! string; extra fields are kept, duplicate keys, trailing bytes and invalid UTF-8 are refused.
//! Refusals ([`AnswerError`]) say what was wrong without quoting the body, which a broken API
//! might fill with anything (the token included). Reading the body under a size cap is the
//! resolver's job.
//!
//! The resolver applies these rules to every answer. They are reachable from outside, hidden
//! from the docs and outside semver, only so that a tool judging an integrator's API (the
//! workspace's conformance checker) and the fuzzers apply exactly the same: an embedder has no
//! use for them.
//!
//! ```
//! use token_resolver::answer::{parse_cache_control, parse_user, Freshness};
//! use std::time::Duration;
//!
//! let user = parse_user(br#"{"id": 42, "name": "alice", "level": 7}"#).unwrap();
//! assert_eq!((user.id, user.name.as_str()), (42, "alice"));
//! assert!(parse_user(br#"{"id": "42", "name": "alice"}"#).is_err());
//! assert_eq!(
//!     parse_cache_control(Some("private, max-age=30")),
//!     Freshness::MaxAge(Duration::from_secs(30))
//! );
//! ```

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::user::{Expiry, User};

/// Why an answer body is not a valid `/api/user` answer. The message names the rule broken,
/// and for JSON syntax the line and column, never a value of the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// No bytes at all.
    #[error("the body is empty")]
    Empty,
    /// Not JSON, or JSON followed by trailing bytes, or nested too deep: serde_json's message,
    /// which gives the position only.
    #[error("the body is not a valid answer: {0}")]
    Syntax(String),
    /// Valid JSON, but not an object, e.g. `"a JSON array"`.
    #[error("the body is {0}, expected an object")]
    NotAnObject(&'static str),
    /// `id` or `name` is absent.
    #[error("field \"{0}\" is missing")]
    MissingField(&'static str),
    /// A key appears twice (`id`, `name`, or `None` for one of the extra fields).
    #[error("duplicate key {}", .0.map_or("among the extra fields".to_owned(), |k| format!("\"{k}\"")))]
    DuplicateKey(Option<&'static str>),
    /// `id` or `name` has the wrong JSON type.
    #[error("field \"{field}\" is {found}, expected {expected}")]
    WrongType {
        /// `id` or `name`.
        field: &'static str,
        /// The JSON type found, e.g. `"a string"`.
        found: &'static str,
        /// What the protocol says, e.g. `"an integer"`.
        expected: &'static str,
    },
    /// `id` is a number with a fraction or an exponent.
    #[error("field \"id\" is not an integer (it has a fraction or an exponent)")]
    IdNotAnInteger,
    /// `id` is an integer beyond `i64`.
    #[error("field \"id\" does not fit in a 64-bit signed integer")]
    IdOutOfRange,
}

/// Parses an answer body strictly.
///
/// # Errors
///
/// An [`AnswerError`] naming what was wrong, e.g. `field "id" is a string, expected an
/// integer`, or the JSON syntax error with its line and column. It never quotes the body.
///
/// # Example
///
/// ```
/// use token_resolver::answer::{parse_user, AnswerError};
///
/// let user = parse_user(br#"{"id": 42, "name": "alice", "level": 7}"#).unwrap();
/// assert_eq!((user.id, user.name.as_str()), (42, "alice"));
/// assert_eq!(user.extra["level"], 7);
/// assert!(matches!(
///     parse_user(br#"{"id": "42", "name": "alice"}"#),
///     Err(AnswerError::WrongType { field: "id", .. })
/// ));
/// ```
pub fn parse_user(body: &[u8]) -> Result<User, AnswerError> {
    // The visitor leaves its own, typed, error here and hands serde_json a placeholder.
    let refusal = Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = de
        .deserialize_any(UserVisitor { refusal: &refusal })
        .and_then(|user| de.end().map(|()| user));
    parsed.map_err(|e| refusal.take().unwrap_or_else(|| syntax(&e)))
}

fn syntax(e: &serde_json::Error) -> AnswerError {
    if e.is_eof() && e.line() == 1 && e.column() == 0 {
        return AnswerError::Empty;
    }
    // serde_json's own messages carry a position, never the input, since the visitor below
    // reports every type mismatch itself.
    AnswerError::Syntax(e.to_string())
}

/// Builds a [`User`] from a JSON object, refusing duplicate keys and wrong types.
struct UserVisitor<'a> {
    /// Where a refusal is left for [`parse_user`].
    refusal: &'a Cell<Option<AnswerError>>,
}

impl UserVisitor<'_> {
    /// Leaves `refusal` for [`parse_user`] and stops the parse.
    fn refuse<E: de::Error>(&self, refusal: AnswerError) -> E {
        self.refusal.set(Some(refusal));
        E::custom("refused")
    }
}

impl<'de> Visitor<'de> for UserVisitor<'_> {
    type Value = User;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with integer \"id\" and string \"name\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<User, A::Error> {
        let mut id = None;
        let mut name = None;
        let mut extra = Map::new();
        while let Some(key) = map.next_key::<FieldName>()? {
            let value: Value = map.next_value()?;
            match key {
                FieldName::Id if id.is_some() => {
                    return Err(self.refuse(AnswerError::DuplicateKey(Some("id"))))
                }
                FieldName::Name if name.is_some() => {
                    return Err(self.refuse(AnswerError::DuplicateKey(Some("name"))))
                }
                FieldName::Id => id = Some(integer_id(&value).map_err(|e| self.refuse(e))?),
                FieldName::Name => match value {
                    Value::String(s) => name = Some(s),
                    other => {
                        return Err(self.refuse(AnswerError::WrongType {
                            field: "name",
                            found: kind_of(&other),
                            expected: "a string",
                        }))
                    }
                },
                FieldName::Other(key) => {
                    if extra.insert(key, value).is_some() {
                        return Err(self.refuse(AnswerError::DuplicateKey(None)));
                    }
                }
            }
        }
        let id = id.ok_or_else(|| self.refuse(AnswerError::MissingField("id")))?;
        let name = name.ok_or_else(|| self.refuse(AnswerError::MissingField("name")))?;
        Ok(User {
            id,
            name,
            extra: extra.into(),
        })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<User, A::Error> {
        Err(self.refuse(AnswerError::NotAnObject("a JSON array")))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<User, E> {
        Err(self.refuse(AnswerError::NotAnObject("a JSON string")))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<User, E> {
        Err(self.refuse(AnswerError::NotAnObject("a JSON number")))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<User, E> {
        Err(self.refuse(AnswerError::NotAnObject("a JSON number")))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<User, E> {
        Err(self.refuse(AnswerError::NotAnObject("a JSON number")))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<User, E> {
        Err(self.refuse(AnswerError::NotAnObject("a JSON boolean")))
    }

    fn visit_unit<E: de::Error>(self) -> Result<User, E> {
        Err(self.refuse(AnswerError::NotAnObject("JSON null")))
    }
}

/// A key of the answer object: `id` and `name` are recognised without allocating (a key
/// string per field was two of a miss's allocations); any other key is kept as a `String` for
/// [`User::extra`].
enum FieldName {
    Id,
    Name,
    Other(String),
}

impl<'de> serde::Deserialize<'de> for FieldName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldNameVisitor;

        impl<'de> Visitor<'de> for FieldNameVisitor {
            type Value = FieldName;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<FieldName, E> {
                Ok(match key {
                    "id" => FieldName::Id,
                    "name" => FieldName::Name,
                    other => FieldName::Other(other.to_owned()),
                })
            }

            fn visit_string<E: de::Error>(self, key: String) -> Result<FieldName, E> {
                Ok(match key.as_str() {
                    "id" => FieldName::Id,
                    "name" => FieldName::Name,
                    _ => FieldName::Other(key),
                })
            }
        }

        deserializer.deserialize_str(FieldNameVisitor)
    }
}

/// When the answer `user` came from says its token stops being valid: its integer `exp`
/// (Unix seconds, RFC 7662), kept among the extra fields as it came; one at or before the epoch
/// is the epoch (long passed). Any other `exp` says nothing about expiry.
///
/// ```
/// use token_resolver::answer::{answer_expiry, parse_user};
///
/// let user = parse_user(br#"{"id": 1, "name": "a", "exp": 1900000000}"#).unwrap();
/// assert_eq!(answer_expiry(&user).map(|e| e.unix_seconds()), Some(1_900_000_000));
/// let user = parse_user(br#"{"id": 1, "name": "a", "exp": "soon"}"#).unwrap();
/// assert_eq!(answer_expiry(&user), None);
/// ```
pub fn answer_expiry(user: &User) -> Option<Expiry> {
    user.extra.get("exp").and_then(expiry)
}

fn expiry(value: &Value) -> Option<Expiry> {
    let Value::Number(n) = value else { return None };
    match (n.as_i64(), n.as_u64()) {
        (_, Some(secs)) => Some(Expiry::from_unix_seconds(secs)),
        (Some(_negative), None) => Some(Expiry::from_unix_seconds(0)),
        (None, None) => None,
    }
}

fn integer_id(value: &Value) -> Result<i64, AnswerError> {
    match value {
        Value::Number(n) => n.as_i64().ok_or(if n.is_u64() {
            AnswerError::IdOutOfRange
        } else {
            AnswerError::IdNotAnInteger
        }),
        other => Err(AnswerError::WrongType {
            field: "id",
            found: kind_of(other),
            expected: "an integer",
        }),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How long an answer may be cached, by its `Cache-Control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// `no-store` or `no-cache`: do not cache (concurrent waiters still share the answer).
    NoStore,
    /// `max-age=N`: cache for at most this long (the smallest when several are given; an
    /// unparsable one counts as zero).
    MaxAge(Duration),
    /// No directive about freshness: the resolver's `cache_ttl` applies.
    Unspecified,
}

impl Freshness {
    /// How long to cache an answer with this freshness when the resolver allows `cache_ttl`.
    pub fn ttl(self, cache_ttl: Duration) -> Duration {
        match self {
            Freshness::NoStore => Duration::ZERO,
            Freshness::MaxAge(max_age) => max_age.min(cache_ttl),
            Freshness::Unspecified => cache_ttl,
        }
    }
}

/// Reads the freshness out of a `Cache-Control` value (several header lines joined by `,`).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use token_resolver::answer::{parse_cache_control, Freshness};
///
/// assert_eq!(parse_cache_control(Some("private, max-age=30")), Freshness::MaxAge(Duration::from_secs(30)));
/// assert_eq!(parse_cache_control(Some("No-Store")), Freshness::NoStore);
/// assert_eq!(parse_cache_control(None), Freshness::Unspecified);
/// ```
pub fn parse_cache_control(value: Option<&str>) -> Freshness {
    let mut freshness = Freshness::Unspecified;
    for directive in pieces(value.unwrap_or_default(), b',') {
        let (name, arg) = match directive.bytes().position(|b| b == b'=') {
            Some(at) => (
                directive[..at].trim(),
                Some(directive[at + 1..].trim().trim_matches('"')),
            ),
            None => (directive.trim(), None),
        };
        if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
            return Freshness::NoStore;
        }
        if name.eq_ignore_ascii_case("max-age") {
            let secs = arg.and_then(parse_delta_seconds).unwrap_or(0);
            let age = Duration::from_secs(secs);
            freshness = match freshness {
                Freshness::MaxAge(prev) => Freshness::MaxAge(prev.min(age)),
                _ => Freshness::MaxAge(age),
            };
        }
    }
    freshness
}

/// `value` split at each `separator`, an ASCII byte, as `str::split` would: found with a byte
/// search, where `str`'s char searcher cost this parse, which runs on every miss, half its
/// instructions. Slicing at an ASCII byte always falls on a character's boundary.
fn pieces(value: &str, separator: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let current = rest?;
        match current.bytes().position(|b| b == separator) {
            Some(at) => {
                rest = Some(&current[at + 1..]);
                Some(&current[..at])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

/// RFC 9111 delta-seconds: digits only; too large a value saturates.
fn parse_delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> String {
        parse_user(body.as_bytes()).expect_err(body).to_string()
    }

    #[test]
    fn accepts_id_and_name_and_keeps_extra_fields() {
        let user = parse_user(br#" {"name":"bob","id":-7,"roles":["gm"]} "#).unwrap();
        assert_eq!(user.id, -7);
        assert_eq!(user.name, "bob");
        assert_eq!(user.extra["roles"][0], "gm");
    }

    #[test]
    fn accepts_the_extremes_of_i64() {
        let max = format!(r#"{{"id":{},"name":""}}"#, i64::MAX);
        assert_eq!(parse_user(max.as_bytes()).unwrap().id, i64::MAX);
        let min = format!(r#"{{"id":{},"name":""}}"#, i64::MIN);
        assert_eq!(parse_user(min.as_bytes()).unwrap().id, i64::MIN);
    }

    #[test]
    fn refuses_id_of_the_wrong_type_naming_it() {
        assert!(err(r#"{"id":"42","name":"a"}"#).contains("\"id\" is a string"));
        assert!(err(r#"{"id":42.5,"name":"a"}"#).contains("not an integer"));
        assert!(err(r#"{"id":42.0,"name":"a"}"#).contains("not an integer"));
        assert!(err(r#"{"id":1e3,"name":"a"}"#).contains("not an integer"));
        assert!(err(r#"{"id":null,"name":"a"}"#).contains("\"id\" is null"));
        assert!(err(r#"{"id":true,"name":"a"}"#).contains("\"id\" is a boolean"));
        assert!(err(r#"{"id":9223372036854775808,"name":"a"}"#).contains("does not fit"));
    }

    #[test]
    fn refuses_name_of_the_wrong_type_naming_it() {
        assert!(err(r#"{"id":1,"name":5}"#).contains("\"name\" is a number"));
        assert!(err(r#"{"id":1,"name":null}"#).contains("\"name\" is null"));
    }

    #[test]
    fn refuses_missing_fields() {
        assert!(err(r#"{"name":"a"}"#).contains("\"id\" is missing"));
        assert!(err(r#"{"id":1}"#).contains("\"name\" is missing"));
    }

    #[test]
    fn refuses_duplicate_keys() {
        assert!(err(r#"{"id":1,"id":2,"name":"a"}"#).contains("duplicate key \"id\""));
        assert!(err(r#"{"id":1,"name":"a","name":"b"}"#).contains("duplicate key \"name\""));
        assert!(err(r#"{"id":1,"name":"a","x":1,"x":2}"#).contains("duplicate key"));
    }

    #[test]
    fn refuses_non_objects_trailing_bytes_and_bad_utf8() {
        assert!(err(r#"[{"id":1,"name":"a"}]"#).contains("array"));
        assert!(err("\"eve\"").contains("string"));
        assert!(err("null").contains("null"));
        assert!(err("").contains("empty"));
        assert!(err(r#"{"id":1,"name":"a"} x"#).contains("trailing"));
        assert!(err(r#"{"id":1,"name":"a"}{}"#).contains("trailing"));
        assert!(parse_user(b"{\"id\":1,\"name\":\"\xff\"}").is_err());
    }

    #[test]
    fn refuses_deep_nesting_without_overflowing_the_stack() {
        let deep = format!(
            r#"{{"id":1,"name":"a","x":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(err(&deep).contains("recursion limit"));
    }

    #[test]
    fn messages_never_quote_the_body() {
        for body in [
            r#""SECRET""#,
            r#"{"id":"SECRET","name":"a"}"#,
            r#"{"id":1,"name":"a","SECRET":1,"SECRET":2}"#,
            r#"{"id":1,"name":["SECRET"]}"#,
        ] {
            assert!(!err(body).contains("SECRET"), "{body}: {}", err(body));
        }
    }

    #[test]
    fn cache_control_directives() {
        let secs = |s| Freshness::MaxAge(Duration::from_secs(s));
        let cases = [
            ("max-age=60", secs(60)),
            ("MAX-AGE=\"5\"", secs(5)),
            ("max-age=60, max-age=10", secs(10)),
            ("max-age=abc", secs(0)),
            ("max-age=-1", secs(0)),
            ("max-age=99999999999999999999999", secs(u64::MAX)),
            ("max-age=18446744073709551615", secs(u64::MAX)),
            ("max-age=18446744073709551616", secs(u64::MAX)),
            // Digits are ASCII digits only.
            ("max-age=\u{663}", secs(0)),
            // Spaces and tabs around a directive and its `=`, and quotes around its argument,
            // do not change it.
            ("private,\tmax-age = 9 ", secs(9)),
            ("max-age=\"\"7\"\"", secs(7)),
            ("max-age=\"\"", secs(0)),
            ("max-age=\"", secs(0)),
            ("private, no-cache", Freshness::NoStore),
            ("max-age=60, no-store", Freshness::NoStore),
            (" No-Store ,max-age=9", Freshness::NoStore),
            ("max-agex=5", Freshness::Unspecified),
            ("private", Freshness::Unspecified),
            ("", Freshness::Unspecified),
        ];
        for (value, freshness) in cases {
            assert_eq!(parse_cache_control(Some(value)), freshness, "{value:?}");
        }
    }

    #[test]
    fn ttl_is_the_smaller_of_max_age_and_cache_ttl() {
        let cap = Duration::from_secs(60);
        assert_eq!(
            Freshness::MaxAge(Duration::from_secs(10)).ttl(cap),
            Duration::from_secs(10)
        );
        assert_eq!(Freshness::MaxAge(Duration::from_secs(600)).ttl(cap), cap);
        assert_eq!(Freshness::Unspecified.ttl(cap), cap);
        assert_eq!(Freshness::NoStore.ttl(cap), Duration::ZERO);
    }
}
