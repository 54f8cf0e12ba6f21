//! The `answer` target: the `/api/user` body parser and Cache-Control.

use super::token::reference_is_token_char;
use super::*;

/// Input of the `answer` target: `CC:<Cache-Control value>\n<body>`, or just `<body>` for an
/// answer without Cache-Control. The value is decoded as upstream decodes header bytes
/// (lossy UTF-8), so corpus files stay readable and any bytes are still a valid input.
pub fn fuzz_answer(data: &[u8]) {
    let (cache_control, body) = match data.strip_prefix(b"CC:") {
        Some(rest) => {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            let value = String::from_utf8_lossy(&rest[..end]).into_owned();
            (Some(value), rest.get(end + 1..).unwrap_or_default())
        }
        None => (None, data),
    };
    check_answer(body, cache_control.as_deref());
}

/// The answer properties:
///
/// - `parse_user` accepts exactly what an independent reading with `serde_json::Value` calls a
///   valid answer (one object, no duplicate top-level key, `id` an integer in `i64`, `name` a
///   string), and then agrees on id, name and the extra fields;
/// - an accepted answer re-serialises to the same id and name and parses again to the same
///   user;
/// - a refusal's message is short, ASCII and quotes nothing of the body;
/// - the Cache-Control properties of [`check_cache_control`].
pub fn check_answer(body: &[u8], cache_control: Option<&str>) {
    check_cache_control(cache_control);
    let parsed = parse_user(body);
    let reference = reference_user(body);
    match (&parsed, &reference) {
        (Ok(user), Some((id, name, extra))) => {
            assert_eq!(user.id, *id, "id of {}", show(body));
            assert_eq!(&user.name, name, "name of {}", show(body));
            assert!(
                json_map_eq(&user.extra, extra),
                "extra fields of {}",
                show(body)
            );
            // An integer `exp` is the expiry (one at or before the epoch counts as the epoch);
            // any other `exp`, or none, is no expiry.
            let expected = match extra.get("exp") {
                Some(Value::Number(n)) if n.is_u64() => n.as_u64(),
                Some(Value::Number(n)) if n.is_i64() => Some(0),
                _ => None,
            };
            assert_eq!(
                token_resolver::answer::answer_expiry(user).map(|e| e.unix_seconds()),
                expected.map(|secs| secs.clamp(1, u64::from(u32::MAX))),
                "expiry of {}",
                show(body)
            );
        }
        (Err(refusal), None) => check_refusal_message(&refusal.to_string(), body),
        (Ok(user), None) => panic!(
            "parse_user accepted {user:?} from {}, which is not a valid answer",
            show(body)
        ),
        (Err(message), Some(_)) => panic!(
            "parse_user refused the valid answer {}: {message}",
            show(body)
        ),
    }
    if let Ok(user) = parsed {
        let again = serde_json::to_vec(&user).expect("a parsed user serialises");
        let reparsed = parse_user(&again)
            .unwrap_or_else(|e| panic!("the re-serialised {} does not parse: {e}", show(&again)));
        assert_eq!(reparsed.id, user.id, "id after a round trip");
        assert_eq!(reparsed.name, user.name, "name after a round trip");
        assert!(
            json_map_eq(&reparsed.extra, &user.extra),
            "extra fields after a round trip of {}",
            show(body)
        );
    }
}

/// What a valid answer holds, read without `parse_user`: `None` for anything it must refuse.
fn reference_user(body: &[u8]) -> Option<(i64, String, Map<String, Value>)> {
    // serde_json::from_slice refuses trailing bytes, invalid UTF-8 and over-deep nesting, and
    // keeps the last of duplicate keys, which the rule forbids at the top level.
    let value: Value = serde_json::from_slice(body).ok()?;
    let Value::Object(mut object) = value else {
        return None;
    };
    let keys = top_level_keys(body)?;
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != keys.len() {
        return None;
    }
    let id = object.remove("id")?.as_i64()?;
    let name = match object.remove("name")? {
        Value::String(name) => name,
        _ => return None,
    };
    Some((id, name, object))
}

/// The top-level keys of a JSON object in the order written, duplicates kept.
pub(super) fn top_level_keys(body: &[u8]) -> Option<Vec<String>> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    de.deserialize_map(Keys).ok()
}

/// A refusal names what was wrong in a few words and never quotes the body.
fn check_refusal_message(message: &str, body: &[u8]) {
    assert!(
        message.len() <= 256 && message.is_ascii(),
        "refusal message too long or not ASCII for {}: {message:?}",
        show(body)
    );
    for run in token_like_runs(body, 16) {
        assert!(
            !message.contains(run),
            "refusal message quotes the body ({run:?}): {message:?}"
        );
    }
}

/// The maximal runs of b64token characters of at least `min` bytes: what a token looks like.
pub(super) fn token_like_runs(bytes: &[u8], min: usize) -> Vec<&str> {
    bytes
        .split(|&b| !reference_is_token_char(b as char))
        .filter(|run| run.len() >= min)
        .map(|run| std::str::from_utf8(run).expect("token characters are ASCII"))
        .collect()
}

/// Cache-Control properties: `Freshness::ttl` never exceeds the resolver's cap, `no-store` and
/// `no-cache` always win, and the freshness is the one an independent reading gives.
pub fn check_cache_control(value: Option<&str>) {
    let freshness = parse_cache_control(value);
    for cap in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_secs(1),
        Duration::from_secs(60),
        Duration::from_secs(86_400),
        Duration::MAX,
    ] {
        let ttl = freshness.ttl(cap);
        assert!(ttl <= cap, "ttl {ttl:?} over the cap {cap:?} for {value:?}");
        if freshness == Freshness::NoStore {
            assert_eq!(ttl, Duration::ZERO, "no-store is cached for {value:?}");
        }
    }
    assert_eq!(
        freshness,
        reference_freshness(value),
        "Cache-Control {value:?}"
    );
}

/// RFC 9111, as the crate documents it: `no-store`/`no-cache` anywhere means not cached; else
/// the smallest `max-age` (a malformed one counts as 0, a huge one saturates); else none.
fn reference_freshness(value: Option<&str>) -> Freshness {
    let Some(value) = value else {
        return Freshness::Unspecified;
    };
    let mut smallest: Option<u64> = None;
    for directive in value.split(',') {
        let mut halves = directive.splitn(2, '=');
        let name = halves
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let argument = halves.next();
        match name.as_str() {
            "no-store" | "no-cache" => return Freshness::NoStore,
            "max-age" => {
                let digits = argument.map(|a| a.trim().trim_matches('"')).unwrap_or("");
                let seconds = if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
                    digits
                        .chars()
                        .try_fold(0u64, |acc, c| {
                            acc.checked_mul(10)?.checked_add(u64::from(c as u8 - b'0'))
                        })
                        .unwrap_or(u64::MAX)
                } else {
                    0
                };
                smallest = Some(smallest.map_or(seconds, |s| s.min(seconds)));
            }
            _ => {}
        }
    }
    smallest.map_or(Freshness::Unspecified, |s| {
        Freshness::MaxAge(Duration::from_secs(s))
    })
}
