//! The authUrl: parsing it into an [`Endpoint`] (where `/api/user` lives) and the [`AllowList`]
//! that decides which endpoints the resolver may call.
//!
//! A join carries a client-supplied authUrl. A server that calls whatever URL a client names can
//! be made to call internal addresses, or an attacker's server that vouches for anyone, so every
//! authUrl passes [`AllowList::check`] before any traffic. This module owns those rules; it makes
//! no network calls.
//!
//! Rules: the scheme is `https`, or `http` for loopback hosts (`localhost`, `127.0.0.0/8`,
//! `[::1]`) unless insecure http is allowed; no userinfo, query or fragment; scheme and host
//! compare case-insensitively and default ports are elided; the endpoint is the path with
//! trailing slashes trimmed plus `/api/user`, unless the path already ends in `/api/user`; an
//! allowed URL covers candidates on the same origin whose path lies under its path at a segment
//! boundary.

use std::borrow::Cow;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

use url::{Host, Url};

use crate::error::ResolveError;

/// The path of the user information acquisition API under an authUrl.
const USER_PATH: &str = "/api/user";

/// The longest authUrl looked at; a longer one is refused unparsed.
pub const MAX_AUTH_URL_BYTES: usize = 2048;

/// Where an authUrl may use plain `http://`, which sends every token in the clear.
///
/// What [`Endpoint::parse`] takes, rather than a `bool`, so that a call says which it means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlainHttp {
    /// Only to a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`): the resolver's default.
    #[default]
    LoopbackOnly,
    /// To any host: what [`ResolverBuilder::allow_insecure_http`](crate::ResolverBuilder::allow_insecure_http)
    /// turns on, and what names an endpoint already allowed (a revocation's authUrl, say).
    Anywhere,
}

impl PlainHttp {
    /// The policy a setting named `allow_insecure_http` asks for (the builder's setter, the
    /// command line's `--allow-insecure-http`): [`Anywhere`](Self::Anywhere) when it is on.
    pub fn allowed_if(allow_insecure_http: bool) -> PlainHttp {
        if allow_insecure_http {
            PlainHttp::Anywhere
        } else {
            PlainHttp::LoopbackOnly
        }
    }
}

/// A parsed, normalised authUrl: the `/api/user` URL to call, and what the allowlist compares.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The full URL to POST to, e.g. `https://a.example/game/api/user`.
    url: Url,
    /// `scheme://host[:port]`, lower-case, default port elided: compared for equality.
    origin: String,
    /// The URL's host, shared with every error that names it.
    host: Arc<String>,
    /// The path the authUrl names, without trailing slashes and without `/api/user`: `""` or
    /// `"/game"`. Compared at segment boundaries.
    base_path: String,
    /// `url` hashed once, here, with a seed random to this process: what a cache key hashes in
    /// place of the URL, so that a cache hit hashes the token and eight bytes.
    key_hash: u64,
}

impl Endpoint {
    /// Parses and normalises an authUrl.
    ///
    /// # Errors
    ///
    /// A [`ResolveError::AuthUrlNotAllowed`] saying which rule the URL breaks (never quoting the
    /// URL itself, which a client may have filled with anything): unparsable, longer than
    /// [`MAX_AUTH_URL_BYTES`], not `http`/`https`, userinfo, a query, a fragment, an encoded
    /// slash, or `http` to a non-loopback host under [`PlainHttp::LoopbackOnly`].
    ///
    /// # Example
    ///
    /// ```
    /// use token_resolver::{Endpoint, PlainHttp};
    ///
    /// let e = Endpoint::parse("HTTPS://Auth.Example.com:443/game/", PlainHttp::LoopbackOnly).unwrap();
    /// assert_eq!(e.as_str(), "https://auth.example.com/game/api/user");
    /// assert!(Endpoint::parse("http://auth.example.com", PlainHttp::LoopbackOnly).is_err());
    /// assert!(Endpoint::parse("http://auth.example.com", PlainHttp::Anywhere).is_ok());
    /// assert!(Endpoint::parse("http://127.0.0.1:8080", PlainHttp::LoopbackOnly).is_ok());
    /// ```
    pub fn parse(auth_url: &str, plain_http: PlainHttp) -> Result<Endpoint, ResolveError> {
        Endpoint::try_parse(auth_url, plain_http).map_err(ResolveError::auth_url_not_allowed)
    }

    /// [`parse`](Self::parse), saying which rule failed as an [`AuthUrlError`].
    pub(crate) fn try_parse(
        auth_url: &str,
        plain_http: PlainHttp,
    ) -> Result<Endpoint, AuthUrlError> {
        if auth_url.len() > MAX_AUTH_URL_BYTES {
            return Err(AuthUrlError::TooLong);
        }
        let mut url = Url::parse(auth_url).map_err(AuthUrlError::NotAUrl)?;
        match url.scheme() {
            "https" => {}
            "http" if plain_http == PlainHttp::Anywhere || is_loopback(&url) => {}
            "http" => {
                return Err(AuthUrlError::Insecure {
                    host: host_of(&url).to_owned(),
                })
            }
            _ => return Err(AuthUrlError::Scheme),
        }
        if url.host().is_none() {
            return Err(AuthUrlError::NoHost);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(AuthUrlError::Userinfo);
        }
        if url.query().is_some() {
            return Err(AuthUrlError::Query);
        }
        if url.fragment().is_some() {
            return Err(AuthUrlError::Fragment);
        }
        // An upstream that decodes %2F or %5C before routing would see other segments than the
        // allowlist did: `/game/..%2Fadmin` is one segment here, two there.
        let lower = url.path().to_ascii_lowercase();
        if lower.contains("%2f") || lower.contains("%5c") {
            return Err(AuthUrlError::EncodedSlash);
        }
        let path = url.path().trim_end_matches('/');
        let (base_path, endpoint_path) = match path.strip_suffix(USER_PATH) {
            Some(base) => (base.to_owned(), path.to_owned()),
            None => (path.to_owned(), format!("{path}{USER_PATH}")),
        };
        url.set_path(&endpoint_path);
        // Normalising lengthens a URL (`/api/user`, percent-encoding): the limit holds for the
        // endpoint too, so that an endpoint always parses again to itself.
        if url.as_str().len() > MAX_AUTH_URL_BYTES {
            return Err(AuthUrlError::TooLongNormalised);
        }
        Ok(Endpoint {
            origin: url.origin().ascii_serialization(),
            host: Arc::new(url.host_str().unwrap_or_default().to_owned()),
            base_path,
            key_hash: url_hash(url.as_str()),
            url,
        })
    }

    /// The normalised URL's hash, the same for every `Endpoint` of one URL in this process.
    pub(crate) fn key_hash(&self) -> u64 {
        self.key_hash
    }

    /// The URL to POST to.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The URL to POST to, as a string: the normalised form two authUrls share when they name
    /// the same endpoint.
    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// `scheme://host[:port]`, lower-case, default port elided.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The host, for log lines and error messages.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host, shared: what an error about this endpoint names, at the cost of a count.
    pub(crate) fn shared_host(&self) -> &Arc<String> {
        &self.host
    }

    /// Whether `self`, as an allowed URL, covers `candidate`: same origin, and the candidate's
    /// path is this one's or lies under it at a segment boundary.
    pub fn covers(&self, candidate: &Endpoint) -> bool {
        self.origin == candidate.origin
            && candidate
                .base_path
                .strip_prefix(&self.base_path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Endpoint").field(&self.as_str()).finish()
    }
}

/// Why an authUrl cannot be used: the reason of the `auth_url_not_allowed` that
/// [`Endpoint::parse`] returns. The message names the rule and at most the host, never the rest
/// of the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AuthUrlError {
    /// Longer than [`MAX_AUTH_URL_BYTES`]; not parsed at all.
    #[error("longer than {MAX_AUTH_URL_BYTES} bytes")]
    TooLong,
    /// Not a URL.
    #[error("not a URL ({0})")]
    NotAUrl(#[source] url::ParseError),
    /// `http://` to a host other than loopback, while insecure http is not allowed.
    #[error("http:// to the non-loopback host {host} would expose tokens; use https")]
    Insecure {
        /// The host named.
        host: String,
    },
    /// A scheme other than `http` or `https`.
    #[error("the scheme is not http or https")]
    Scheme,
    /// No host.
    #[error("no host")]
    NoHost,
    /// `user:password@` in the URL.
    #[error("it carries userinfo (user:password@)")]
    Userinfo,
    /// A query (`?...`).
    #[error("it carries a query (?...)")]
    Query,
    /// A fragment (`#...`).
    #[error("it carries a fragment (#...)")]
    Fragment,
    /// `%2F` or `%5C` in the path, which an upstream could decode into other segments.
    #[error("its path has an encoded slash or backslash (%2F, %5C)")]
    EncodedSlash,
    /// Longer than [`MAX_AUTH_URL_BYTES`] once `/api/user` is appended and it is normalised.
    #[error("longer than {MAX_AUTH_URL_BYTES} bytes once normalised")]
    TooLongNormalised,
}

/// The hash of a normalised endpoint URL, with a seed drawn once per process.
fn url_hash(url: &str) -> u64 {
    static SEED: OnceLock<foldhash::quality::RandomState> = OnceLock::new();
    SEED.get_or_init(Default::default).hash_one(url)
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d == "localhost",
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

fn host_of(url: &Url) -> &str {
    url.host_str().unwrap_or("(none)")
}

/// The endpoints a resolver may call: the default authUrl plus every `allow_auth_url`.
///
/// Each configured URL is remembered as written too, so the common case (a room's authUrl is
/// one of them, byte for byte) costs a string comparison, not a parse.
#[derive(Debug, Clone)]
pub(crate) struct AllowList {
    /// The configured URLs as written, each with its parsed endpoint.
    entries: Vec<(Box<str>, Arc<Endpoint>)>,
    /// Where `http://` passes.
    plain_http: PlainHttp,
}

impl AllowList {
    /// An allowlist over already-validated endpoints.
    pub(crate) fn new(entries: Vec<(Box<str>, Arc<Endpoint>)>, plain_http: PlainHttp) -> Self {
        AllowList {
            entries,
            plain_http,
        }
    }

    /// Parses `auth_url` and checks that an allowed URL covers it.
    ///
    /// # Errors
    ///
    /// [`NotAllowed`] when it is unparsable, insecure, or covered by no allowed URL.
    #[inline(always)]
    pub(crate) fn check(&self, auth_url: &str) -> Result<Cow<'_, Arc<Endpoint>>, NotAllowed> {
        // Borrowed, not cloned: on the hit path a shared refcount bouncing between cores costs
        // more than the comparison.
        if let Some((_, endpoint)) = self.entries.iter().find(|(raw, _)| **raw == *auth_url) {
            return Ok(Cow::Borrowed(endpoint));
        }
        self.check_parsed(auth_url)
    }

    /// [`check`](Self::check) for a URL that is not written as one of the allowed ones.
    #[inline(never)]
    fn check_parsed(&self, auth_url: &str) -> Result<Cow<'_, Arc<Endpoint>>, NotAllowed> {
        let candidate =
            Endpoint::try_parse(auth_url, self.plain_http).map_err(NotAllowed::Unusable)?;
        if let Some((_, endpoint)) = self.entries.iter().find(|(_, e)| **e == candidate) {
            return Ok(Cow::Borrowed(endpoint));
        }
        if self.entries.iter().any(|(_, e)| e.covers(&candidate)) {
            return Ok(Cow::Owned(Arc::new(candidate)));
        }
        Err(NotAllowed::NotCovered {
            host: candidate.host().to_owned(),
        })
    }
}

/// Why [`AllowList::check`] refused an authUrl; the resolver reports it as
/// `auth_url_not_allowed`, with this as the reason.
#[derive(Debug)]
pub(crate) enum NotAllowed {
    /// Not a usable authUrl at all.
    Unusable(AuthUrlError),
    /// A usable authUrl, on this host, that no allowed URL covers.
    NotCovered { host: String },
}

impl fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotAllowed::Unusable(error) => error.fmt(f),
            NotAllowed::NotCovered { host } => {
                write!(f, "no allowed authUrl covers this URL on host {host}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(s: &str) -> Endpoint {
        Endpoint::parse(s, PlainHttp::LoopbackOnly).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn allow(urls: &[&str]) -> AllowList {
        let entries = urls
            .iter()
            .map(|u| (Box::from(*u), Arc::new(endpoint(u))))
            .collect();
        AllowList::new(entries, PlainHttp::LoopbackOnly)
    }

    #[test]
    fn an_error_about_an_endpoint_names_its_host_alone() {
        let endpoint = endpoint("https://auth.example/game/x");
        let e = ResolveError::rejected(endpoint.shared_host(), 401);
        assert_eq!(e.host(), Some("auth.example"));
        assert_eq!(e.status(), Some(401));
        assert!(!e.to_string().contains("/game"), "{e}");
        assert!(format!("{e:?}").contains("\"auth.example\""), "{e:?}");
        assert!(!format!("{e:?}").contains("/game"), "{e:?}");
    }

    #[test]
    fn endpoint_appends_api_user_to_trimmed_base() {
        assert_eq!(
            endpoint("https://a.example").as_str(),
            "https://a.example/api/user"
        );
        assert_eq!(
            endpoint("https://a.example/game/").as_str(),
            "https://a.example/game/api/user"
        );
        assert_eq!(
            endpoint("https://a.example/game//").as_str(),
            "https://a.example/game/api/user"
        );
    }

    #[test]
    fn endpoint_keeps_a_path_already_ending_in_api_user() {
        assert_eq!(
            endpoint("https://a.example/x/api/user").as_str(),
            "https://a.example/x/api/user"
        );
        assert_eq!(
            endpoint("https://a.example/api/user/").as_str(),
            "https://a.example/api/user"
        );
    }

    #[test]
    fn scheme_host_and_default_port_normalise() {
        assert_eq!(
            endpoint("HTTPS://A.EXAMPLE:443/g"),
            endpoint("https://a.example/g")
        );
        assert_ne!(
            endpoint("https://a.example:8443/g"),
            endpoint("https://a.example/g")
        );
    }

    #[test]
    fn http_only_to_loopback_unless_insecure_is_allowed() {
        for ok in [
            "http://localhost:1",
            "http://127.0.0.1",
            "http://127.9.9.9",
            "http://[::1]:8080",
        ] {
            assert!(Endpoint::parse(ok, PlainHttp::LoopbackOnly).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com",
            "http://10.0.0.1",
            "http://localhost.evil.com",
            "http://[::2]",
        ] {
            assert!(
                Endpoint::parse(bad, PlainHttp::LoopbackOnly).is_err(),
                "{bad}"
            );
            assert!(Endpoint::parse(bad, PlainHttp::Anywhere).is_ok(), "{bad}");
        }
    }

    #[test]
    fn refuses_userinfo_query_fragment_and_other_schemes() {
        for bad in [
            "https://u:p@a.example",
            "https://u@a.example",
            "https://a.example/?",
            "https://a.example/?x=1",
            "https://a.example/#",
            "ftp://a.example",
            "file:///etc/passwd",
            "a.example",
            "",
        ] {
            assert!(Endpoint::parse(bad, PlainHttp::Anywhere).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_endpoint_lengthened_past_the_limit_by_normalising_is_refused() {
        let url = format!("https://a.example/{}", "a".repeat(MAX_AUTH_URL_BYTES - 20));
        assert!(url.len() <= MAX_AUTH_URL_BYTES);
        assert_eq!(
            Endpoint::try_parse(&url, PlainHttp::LoopbackOnly).unwrap_err(),
            AuthUrlError::TooLongNormalised
        );
    }

    #[test]
    fn refuses_an_overlong_url_without_parsing() {
        let long = format!("https://a.example/{}", "a".repeat(MAX_AUTH_URL_BYTES));
        assert_eq!(
            Endpoint::try_parse(&long, PlainHttp::LoopbackOnly).unwrap_err(),
            AuthUrlError::TooLong
        );
    }

    #[test]
    fn allowlist_matches_paths_at_segment_boundaries_only() {
        let list = allow(&["https://a.example/game"]);
        assert!(list.check("https://a.example/game").is_ok());
        assert!(list.check("https://a.example/game/").is_ok());
        assert!(list.check("https://a.example/game/x").is_ok());
        assert!(list.check("https://A.example:443/game/x/api/user").is_ok());
        for bad in [
            "https://a.example/gamex",
            "https://a.example/",
            "https://a.example/gam",
            "https://a.example/game/../admin",
            "https://a.example/game/%2e%2e/admin",
            "https://a.example/game/%2e%2e%2Fadmin",
            "https://a.example/game/x%5c..%5cadmin",
            "https://a.example:444/game",
            "https://b.example/game",
            "http://a.example/game",
            "https://a.example.evil.com/game",
        ] {
            // Refused, with a reason that quotes none of the path a client chose.
            let refused = list.check(bad).expect_err(bad).to_string();
            assert!(
                !refused.contains("admin") && !refused.contains("gam"),
                "{bad}: {refused}"
            );
        }
    }

    #[test]
    fn root_allowed_url_covers_its_whole_origin() {
        let list = allow(&["https://a.example"]);
        assert!(list.check("https://a.example/anything/below").is_ok());
        assert!(list.check("https://b.example/").is_err());
    }

    #[test]
    fn exact_configured_string_skips_parsing_and_shares_the_endpoint() {
        let list = allow(&["https://a.example/game"]);
        let a = list.check("https://a.example/game").unwrap();
        let b = list.check("https://a.example/game").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(matches!(a, Cow::Borrowed(_)), "an exact match is borrowed");
        let c = list.check("HTTPS://a.example/game/").unwrap();
        assert!(
            Arc::ptr_eq(&a, &c),
            "a normalised equal URL shares the configured endpoint"
        );
    }

    #[test]
    fn refusal_reason_never_echoes_the_path() {
        let list = allow(&["https://a.example/game"]);
        let err = list
            .check("https://a.example/secret-looking-path")
            .unwrap_err();
        assert!(!err.to_string().contains("secret-looking-path"), "{err}");
    }
}
