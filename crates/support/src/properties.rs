//! The properties the fuzz targets check, shared with the stable-toolchain tests.
//!
//! Each fuzz target in `fuzz/fuzz_targets/` is one line calling a `fuzz_*` function here on the
//! raw bytes libFuzzer hands it; the library's `tests/fuzz_regressions.rs` replays every
//! committed corpus and crash file through the same function, and `tests/properties.rs` drives
//! the `check_*` functions with proptest strategies. This module is built without the crate's
//! `servers` feature for the fuzz targets, so it uses only the crate's plain dependencies:
//! `token_resolver`, `token_resolver_player`, `serde`, `serde_json`, `url`, `arbitrary` and
//! `tokio`.
//!
//! Every check panics with the offending input when a property fails; "no panic" is the
//! weakest of them.

use std::cell::RefCell;
use std::fmt;
use std::time::Duration;

use arbitrary::Unstructured;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Number, Value};
use token_resolver::answer::{parse_cache_control, parse_user, Freshness};
use token_resolver::{check_syntax, MAX_TOKEN_BYTES};
use token_resolver::{AccessToken, Endpoint, ErrorCode, Resolver};
use token_resolver_player::{RoomInfo, RoomJoinArgs};

// ---------------------------------------------------------------------------------------------
// answer: the /api/user body parser and Cache-Control
// ---------------------------------------------------------------------------------------------

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
                user.expires_at.map(|e| e.unix_seconds()),
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
fn top_level_keys(body: &[u8]) -> Option<Vec<String>> {
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
fn token_like_runs(bytes: &[u8], min: usize) -> Vec<&str> {
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

// ---------------------------------------------------------------------------------------------
// token: the b64token rule
// ---------------------------------------------------------------------------------------------

/// Input of the `token` target: the bytes as a token (when they are UTF-8), and the same token
/// left-padded with `A` to 4095, 4096 and 4097 bytes, so every input also probes the size limit.
pub fn fuzz_token(data: &[u8]) {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    check_token(token);
    for total in [MAX_TOKEN_BYTES - 1, MAX_TOKEN_BYTES, MAX_TOKEN_BYTES + 1] {
        if let Some(pad) = total.checked_sub(token.len()) {
            check_token(&format!("{}{token}", "A".repeat(pad)));
        }
    }
}

/// `check_syntax` and `AccessToken::new` agree with [`reference_token_code`]; their errors and
/// `Debug` never show the token.
pub fn check_token(token: &str) {
    let want = reference_token_code(token);
    let got = check_syntax(token);
    assert_eq!(
        got.as_ref().err().map(|e| e.code()),
        want,
        "check_syntax on {token:?}"
    );
    match AccessToken::new(token) {
        Ok(held) => {
            assert_eq!(want, None, "AccessToken::new accepted {token:?}");
            assert_eq!(held.secret(), token);
            assert_eq!(format!("{held:?}"), "AccessToken([redacted])");
        }
        Err(e) => assert_eq!(Some(e.code()), want, "AccessToken::new on {token:?}"),
    }
    if let Err(e) = got {
        // A refusal's text depends on which rule failed, never on the token: it is one of the
        // texts the refusals of a few fixed tokens give.
        static FIXED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let fixed = FIXED.get_or_init(|| {
            ["", " ", "a ", &"a".repeat(MAX_TOKEN_BYTES + 1)]
                .iter()
                .filter_map(|t| check_syntax(t).err())
                .flat_map(|e| [e.to_string(), format!("{e:?}")])
                .collect()
        });
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(
                fixed.contains(&shown),
                "refusal of {token:?} reads {shown:?}, not a fixed text"
            );
        }
    }
}

/// RFC 6750 `b64token` (`1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`) of
/// at most 4096 bytes, written as a two-state scan with no regex: `None` when valid, else the
/// code a resolution must fail with.
pub fn reference_token_code(token: &str) -> Option<ErrorCode> {
    if token.is_empty() {
        return Some(ErrorCode::TokenMissing);
    }
    if token.len() > 4096 {
        return Some(ErrorCode::TokenMalformed);
    }
    let mut characters = 0usize;
    let mut padding = false;
    for c in token.chars() {
        if c == '=' {
            padding = true;
        } else if reference_is_token_char(c) && !padding {
            characters += 1;
        } else {
            return Some(ErrorCode::TokenMalformed);
        }
        if padding && characters == 0 {
            return Some(ErrorCode::TokenMalformed);
        }
    }
    None
}

fn reference_is_token_char(c: char) -> bool {
    const SET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/";
    SET.contains(c)
}

// ---------------------------------------------------------------------------------------------
// auth_url: parsing, normalisation and the allowlist
// ---------------------------------------------------------------------------------------------

/// Input of the `auth_url` target: a flags byte (bit 0: `allow_insecure_http`; bit 1: also
/// check the allowlist through a resolver, which costs building one), a length byte `n`, then
/// the allowed URL (`n` bytes, lossy UTF-8) and the candidate (the rest).
pub fn fuzz_auth_url(data: &[u8]) {
    let [flags, n, rest @ ..] = data else {
        return;
    };
    let n = usize::from(*n).min(rest.len());
    let allowed = String::from_utf8_lossy(&rest[..n]);
    let candidate = String::from_utf8_lossy(&rest[n..]);
    check_auth_url_with(&allowed, &candidate, flags & 1 == 1, flags & 2 == 2);
}

/// The authUrl properties, for an allowed URL and a candidate:
///
/// - [`check_endpoint`] on both, with and without insecure http;
/// - `covers` is exactly "same scheme, host and port, and the candidate's base path is the
///   allowed one or lies under it at a segment boundary", computed from the endpoint URLs;
/// - a resolver whose default authUrl is `allowed` lets the candidate through (the empty token
///   then fails `token_missing`, with no traffic) exactly when that holds or the strings are
///   equal, and refuses it with `auth_url_not_allowed` otherwise.
pub fn check_auth_url(allowed: &str, candidate: &str, allow_insecure_http: bool) {
    check_auth_url_with(allowed, candidate, allow_insecure_http, true);
}

/// [`check_auth_url`], with the resolver's allowlist check only when `via_resolver`.
pub fn check_auth_url_with(
    allowed: &str,
    candidate: &str,
    allow_insecure_http: bool,
    via_resolver: bool,
) {
    for raw in [allowed, candidate] {
        check_endpoint(raw, allow_insecure_http);
        check_endpoint(raw, !allow_insecure_http);
    }
    let parsed_allowed = Endpoint::parse(allowed, allow_insecure_http).ok();
    let parsed_candidate = Endpoint::parse(candidate, allow_insecure_http).ok();
    if let (Some(a), Some(c)) = (&parsed_allowed, &parsed_candidate) {
        check_covers(a, c);
        check_covers(c, a);
        assert!(a.covers(a), "{a:?} does not cover itself");
    }
    if !via_resolver {
        return;
    }
    check_allowlist(
        allowed,
        candidate,
        allow_insecure_http,
        parsed_allowed,
        parsed_candidate,
    );
}

/// What `Endpoint::parse` accepts, checked against an independent parse of the raw string:
/// http(s) with a host, no userinfo, query or fragment, http only to loopback unless insecure
/// is allowed; the endpoint keeps the scheme, host and port and its path is the raw path with
/// trailing slashes trimmed, plus `/api/user` unless already there; parsing its own URL again
/// gives the same endpoint; allowing insecure http only ever widens what is accepted.
pub fn check_endpoint(raw: &str, allow_insecure_http: bool) {
    let parsed = Endpoint::parse(raw, allow_insecure_http);
    let widened = Endpoint::parse(raw, true);
    let endpoint = match parsed {
        Ok(endpoint) => endpoint,
        Err(reason) => {
            check_url_refusal(raw, &reason.to_string());
            return;
        }
    };
    assert_eq!(
        widened.as_ref().ok(),
        Some(&endpoint),
        "insecure http narrowed {raw:?}"
    );
    assert!(
        raw.len() <= token_resolver::MAX_AUTH_URL_BYTES,
        "accepted an overlong URL"
    );
    let source = url::Url::parse(raw)
        .unwrap_or_else(|e| panic!("accepted {raw:?}, which the url crate refuses: {e}"));
    for (what, url) in [("raw", &source), ("endpoint", endpoint.url())] {
        assert!(
            matches!(url.scheme(), "http" | "https"),
            "{what} scheme of {raw:?}"
        );
        assert!(url.host().is_some(), "{what} of {raw:?} has no host");
        assert!(
            url.username().is_empty() && url.password().is_none(),
            "{what} of {raw:?} has userinfo"
        );
        assert!(url.query().is_none(), "{what} of {raw:?} has a query");
        assert!(url.fragment().is_none(), "{what} of {raw:?} has a fragment");
        if url.scheme() == "http" && !allow_insecure_http {
            assert!(
                reference_is_loopback(url),
                "{what} of {raw:?}: http to a non-loopback host"
            );
        }
    }
    let url = endpoint.url();
    assert_eq!(url.scheme(), source.scheme(), "scheme of {raw:?}");
    assert_eq!(url.host_str(), source.host_str(), "host of {raw:?}");
    assert_eq!(endpoint.host(), source.host_str().unwrap_or_default());
    assert_eq!(
        url.port_or_known_default(),
        source.port_or_known_default(),
        "port of {raw:?}"
    );
    let trimmed = source.path().trim_end_matches('/');
    let expected_path = if trimmed.ends_with("/api/user") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/api/user")
    };
    assert_eq!(url.path(), expected_path, "endpoint path of {raw:?}");
    assert_eq!(endpoint.as_str(), url.as_str());
    assert!(
        endpoint.as_str().len() <= token_resolver::MAX_AUTH_URL_BYTES,
        "the endpoint of {raw:?} is longer than the limit"
    );
    let again = Endpoint::parse(endpoint.as_str(), allow_insecure_http)
        .unwrap_or_else(|e| panic!("the endpoint {endpoint:?} of {raw:?} does not parse: {e}"));
    assert_eq!(again, endpoint, "normalising {raw:?} is not idempotent");
    assert_eq!(again.as_str(), endpoint.as_str());
}

/// A refusal names the reason in a few words. It may name the host (and the scheme, when that
/// is not http or https), but echoes nothing else of the URL: a client may have hidden anything
/// in a path or a query.
fn check_url_refusal(raw: &str, reason: &str) {
    assert!(!reason.is_empty(), "empty refusal for {raw:?}");
    let source = url::Url::parse(raw).ok();
    let named = source
        .as_ref()
        .map(|u| format!("{}://{}", u.scheme(), u.host_str().unwrap_or_default()))
        .unwrap_or_default()
        .to_ascii_lowercase();
    for run in raw
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|run| run.len() >= 12)
    {
        let lower = run.to_ascii_lowercase();
        if named.contains(&lower) || refusal_vocabulary().contains(&lower) {
            continue;
        }
        assert!(
            !reason.contains(run),
            "refusal of {raw:?} echoes {run:?}: {reason:?}"
        );
    }
}

/// Every fixed text a refusal can be made of, lower-case: the url crate's parse errors and the
/// reasons for one URL of each kind. A run of the input found here proves no echo.
fn refusal_vocabulary() -> &'static str {
    static VOCABULARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VOCABULARY.get_or_init(|| {
        use url::ParseError as E;
        let mut texts: Vec<String> = [
            E::EmptyHost,
            E::IdnaError,
            E::InvalidPort,
            E::InvalidIpv4Address,
            E::InvalidIpv6Address,
            E::InvalidDomainCharacter,
            E::RelativeUrlWithoutBase,
            E::RelativeUrlWithCannotBeABaseBase,
            E::SetHostOnCannotBeABaseUrl,
            E::Overflow,
        ]
        .iter()
        .map(|e| e.to_string())
        .collect();
        let overlong = format!("https://a.example/{}", "a".repeat(4096));
        for raw in [
            "",
            "ftp://a.example",
            "https://u:p@a.example",
            "https://a.example/?q",
            "https://a.example/#f",
            "http://a.example",
            "data:text/plain,x",
            &overlong,
        ] {
            texts.extend(Endpoint::parse(raw, false).err().map(|e| e.to_string()));
        }
        texts.join("\n").to_ascii_lowercase()
    })
}

/// Loopback as the spec lists it, read off the URL's serialised host: `localhost`,
/// `127.0.0.0/8`, `[::1]`.
fn reference_is_loopback(url: &url::Url) -> bool {
    match url.host_str() {
        Some("localhost") | Some("[::1]") => true,
        Some(host) => host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.octets()[0] == 127),
        None => false,
    }
}

/// `allowed.covers(candidate)` exactly when the endpoint URLs share scheme, host and port and
/// the candidate's base path equals or lies under the allowed one at a segment boundary.
pub fn check_covers(allowed: &Endpoint, candidate: &Endpoint) {
    let (a, c) = (allowed.url(), candidate.url());
    let same_origin = a.scheme() == c.scheme()
        && a.host_str() == c.host_str()
        && a.port_or_known_default() == c.port_or_known_default();
    let base = |u: &url::Url| {
        u.path()
            .strip_suffix("/api/user")
            .unwrap_or_else(|| panic!("endpoint {u} does not end in /api/user"))
            .to_owned()
    };
    let (allowed_base, candidate_base) = (base(a), base(c));
    let under =
        candidate_base == allowed_base || candidate_base.starts_with(&format!("{allowed_base}/"));
    assert_eq!(
        allowed.covers(candidate),
        same_origin && under,
        "{allowed:?} covers {candidate:?}?"
    );
}

thread_local! {
    /// A runtime to drive resolutions on; none of them touches the network.
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        let runtime = slot.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a current-thread runtime")
        });
        runtime.block_on(future)
    })
}

thread_local! {
    /// The last resolver built, by its settings: mutated inputs often keep the allowed URL, and
    /// building one (its HTTP client) costs more than the check itself.
    static LAST_RESOLVER: RefCell<Option<(String, bool, Resolver)>> = const { RefCell::new(None) };
}

fn build_resolver(
    allowed: &str,
    allow_insecure_http: bool,
) -> Result<Resolver, token_resolver::ConfigError> {
    LAST_RESOLVER.with(|cell| {
        let mut last = cell.borrow_mut();
        if let Some((url, insecure, resolver)) = &*last {
            if url == allowed && *insecure == allow_insecure_http {
                return Ok(resolver.clone());
            }
        }
        let resolver = Resolver::builder()
            .default_auth_url(allowed)
            .allow_insecure_http(allow_insecure_http)
            .build()?;
        *last = Some((allowed.to_owned(), allow_insecure_http, resolver.clone()));
        Ok(resolver)
    })
}

/// The allowlist as a resolver applies it (`AllowList` cannot be built outside the crate): a
/// resolver configured with `allowed` resolves `candidate` with an empty token.
fn check_allowlist(
    allowed: &str,
    candidate: &str,
    allow_insecure_http: bool,
    parsed_allowed: Option<Endpoint>,
    parsed_candidate: Option<Endpoint>,
) {
    let built = build_resolver(allowed, allow_insecure_http);
    let Some(allowed_endpoint) = parsed_allowed else {
        assert!(
            built.is_err(),
            "a resolver was built with the unparsable authUrl {allowed:?}"
        );
        return;
    };
    let resolver = built.unwrap_or_else(|e| panic!("{allowed:?} parses but cannot be built: {e}"));
    let should_pass =
        candidate == allowed || parsed_candidate.is_some_and(|c| allowed_endpoint.covers(&c));
    let code = block_on(resolver.resolve(candidate, ""))
        .expect_err("an empty token never resolves")
        .code();
    let want = if should_pass {
        ErrorCode::TokenMissing
    } else {
        ErrorCode::AuthUrlNotAllowed
    };
    assert_eq!(
        code, want,
        "allowed {allowed:?}, candidate {candidate:?}, insecure {allow_insecure_http}"
    );
    assert_eq!(resolver.stats().upstream_calls, 0, "a check made a call");
}

// ---------------------------------------------------------------------------------------------
// room_auth_url: RoomInfo::auth_url
// ---------------------------------------------------------------------------------------------

/// Input of the `room_auth_url` target. First byte even: the rest is the JSON text of
/// `nodeProperties` in a room's wire form (`null`, an object, or something that fails to
/// parse). First byte odd: the rest drives a generator of `node_properties` maps whose keys are
/// often `authUrl` and whose values are arbitrary JSON.
pub fn fuzz_room_auth_url(data: &[u8]) {
    let [mode, rest @ ..] = data else {
        return;
    };
    if mode & 1 == 0 {
        let mut wire =
            br#"{"host":"h","port":1,"protocol":"tcp","roomId":"r","nodeProperties":"#.to_vec();
        wire.extend_from_slice(rest);
        wire.push(b'}');
        if let Ok(room) = serde_json::from_slice::<RoomInfo>(&wire) {
            check_room_auth_url(room.node_properties);
        }
    } else if let Ok(props) = arbitrary_node_properties(&mut Unstructured::new(rest)) {
        check_room_auth_url(props);
    }
}

/// `RoomInfo::auth_url` follows the rule: absent properties or key, or `null`: `""`; a JSON
/// string: as it is; anything else: its compact JSON text (written here by a reference writer);
/// and `RoomJoinArgs` carries the same value.
pub fn check_room_auth_url(node_properties: Option<Map<String, Value>>) {
    let want = match node_properties.as_ref().and_then(|p| p.get("authUrl")) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            let mut text = String::new();
            reference_json_text(other, &mut text);
            text
        }
    };
    let room = RoomInfo {
        host: "h".into(),
        port: 1,
        protocol: "tcp".into(),
        room_id: "r".into(),
        node_properties,
    };
    let got = room.auth_url();
    assert_eq!(got, want, "auth_url of {:?}", room.node_properties);
    assert_eq!(RoomJoinArgs::new(&room, Map::new()).auth_url, got);
}

/// Compact JSON, as RFC 8259 writes it with serde_json's escapes: `\"`, `\\`, `\b`, `\f`,
/// `\n`, `\r`, `\t`, other control characters as `\u00xx`, everything else as it is.
fn reference_json_text(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference_json_text(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference_json_text(&Value::String(key.clone()), out);
                out.push(':');
                reference_json_text(item, out);
            }
            out.push('}');
        }
    }
}

fn arbitrary_node_properties(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Option<Map<String, Value>>> {
    if !u.arbitrary::<bool>()? {
        return Ok(None);
    }
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let key = match u.int_in_range(0..=3)? {
            0 | 1 => "authUrl".to_owned(),
            2 => "authurl".to_owned(),
            _ => u.arbitrary::<String>()?,
        };
        map.insert(key, arbitrary_json(u, 0)?);
    }
    Ok(Some(map))
}

fn arbitrary_json(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    let last_kind = if depth >= 4 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=last_kind)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.arbitrary::<u64>()?),
        4 => Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        5 => Value::String(u.arbitrary()?),
        6 => {
            let mut items = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                items.push(arbitrary_json(u, depth + 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                map.insert(u.arbitrary()?, arbitrary_json(u, depth + 1)?);
            }
            Value::Object(map)
        }
    })
}

// ---------------------------------------------------------------------------------------------
// shared helpers
// ---------------------------------------------------------------------------------------------

/// JSON equality where two floats are equal within a relative 1e-15: serde_json's default
/// float parsing is not always correctly rounded, so a float may move by one unit in the last
/// place over a text round trip. Ids and names are compared exactly elsewhere.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-15 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => json_map_eq(x, y),
        _ => a == b,
    }
}

fn json_map_eq(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| json_eq(v, w)))
}

/// An input shown in a failure message: lossy text, cut to 300 bytes.
fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
    format!("{text:?} ({} bytes)", bytes.len())
}
