//! The `auth_url` target: parsing, normalisation and the allowlist.

use super::*;

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
    let parsed_allowed = Endpoint::parse(allowed, PlainHttp::allowed_if(allow_insecure_http)).ok();
    let parsed_candidate =
        Endpoint::parse(candidate, PlainHttp::allowed_if(allow_insecure_http)).ok();
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
    let parsed = Endpoint::parse(raw, PlainHttp::allowed_if(allow_insecure_http));
    let widened = Endpoint::parse(raw, PlainHttp::Anywhere);
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
    let again = Endpoint::parse(
        endpoint.as_str(),
        PlainHttp::allowed_if(allow_insecure_http),
    )
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
            texts.extend(
                Endpoint::parse(raw, PlainHttp::LoopbackOnly)
                    .err()
                    .map(|e| e.to_string()),
            );
        }
        texts.join("\n").to_ascii_lowercase()
    })
}

/// Loopback as the authUrl rule lists it, read off the URL's serialised host: `localhost`,
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
