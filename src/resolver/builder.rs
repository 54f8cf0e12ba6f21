//! [`ResolverBuilder`]: every setting of a [`Resolver`], its default, and the checks `build`
//! makes before anything is started.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::flight::Flights;
#[cfg(doc)]
use super::request::Identity;
use super::stats::Counters;
use super::{Inner, Resolver};
use crate::auth_url::{AllowList, Endpoint, PlainHttp};
use crate::cache::{RedisTier, TierSettings, Tiers};
use crate::error::ConfigError;
use crate::telemetry;
use crate::upstream::breaker::{BreakerConfig, Breakers};
use crate::upstream::{FirstContacts, Upstream};
#[cfg(doc)]
use crate::user::User;

/// Configures a [`Resolver`]. Every setter takes and returns the builder; [`build`](Self::build)
/// checks the whole configuration.
///
/// | setter | default |
/// |---|---|
/// | [`default_auth_url`](Self::default_auth_url) | none (required while `auth_required`) |
/// | [`allow_auth_url`](Self::allow_auth_url) | none |
/// | [`auth_required`](Self::auth_required) | `true` |
/// | [`allow_insecure_http`](Self::allow_insecure_http) | `false` |
/// | [`cache_ttl`](Self::cache_ttl) | 60 s |
/// | [`negative_cache_ttl`](Self::negative_cache_ttl) | 5 s |
/// | [`max_cache_entries`](Self::max_cache_entries) | 100 000 |
/// | [`max_concurrent_requests`](Self::max_concurrent_requests) | 64 |
/// | [`queue_timeout`](Self::queue_timeout) | 1 s |
/// | [`request_timeout`](Self::request_timeout) | 5 s |
/// | [`connect_timeout`](Self::connect_timeout) | 2 s |
/// | [`max_response_bytes`](Self::max_response_bytes) | 64 KiB |
/// | [`retries`](Self::retries) | 1 |
/// | [`serve_stale_for`](Self::serve_stale_for) | zero (off) |
/// | [`clock_skew`](Self::clock_skew) | 30 s |
/// | [`add_root_certificate`](Self::add_root_certificate) | none |
/// | [`tls_built_in_roots`](Self::tls_built_in_roots) | `true` |
/// | [`http2`](Self::http2) | `false` (HTTP/1.1) |
/// | [`circuit_breaker`](Self::circuit_breaker) | 5 failures, 2 s cool-down |
#[derive(Debug, Clone)]
#[must_use]
pub struct ResolverBuilder {
    default_auth_url: Option<String>,
    allowed_auth_urls: Vec<String>,
    auth_required: bool,
    plain_http: PlainHttp,
    cache_ttl: Duration,
    negative_cache_ttl: Duration,
    max_cache_entries: u64,
    max_concurrent_requests: usize,
    queue_timeout: Duration,
    request_timeout: Duration,
    connect_timeout: Duration,
    max_response_bytes: usize,
    retries: u32,
    serve_stale_for: Duration,
    clock_skew: Duration,
    breaker: BreakerConfig,
    /// PEM certificates trusted besides (or instead of) the built-in roots.
    root_certificates: Vec<Vec<u8>>,
    tls_built_in_roots: bool,
    http2: bool,
    shared_cache: Option<RedisTier>,
}

impl Default for ResolverBuilder {
    fn default() -> Self {
        ResolverBuilder {
            default_auth_url: None,
            allowed_auth_urls: Vec::new(),
            auth_required: true,
            plain_http: PlainHttp::LoopbackOnly,
            cache_ttl: Duration::from_secs(60),
            negative_cache_ttl: Duration::from_secs(5),
            max_cache_entries: 100_000,
            max_concurrent_requests: 64,
            queue_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            max_response_bytes: 64 * 1024,
            retries: 1,
            serve_stale_for: Duration::ZERO,
            clock_skew: Duration::from_secs(30),
            breaker: BreakerConfig {
                threshold: 5,
                cool_down: Duration::from_secs(2),
            },
            root_certificates: Vec::new(),
            tls_built_in_roots: true,
            http2: false,
            shared_cache: None,
        }
    }
}

impl ResolverBuilder {
    /// The platform option "user resource acquisition API URL": used for connects, and for
    /// joins whose room has no authUrl. Always allowed. Default: none.
    pub fn default_auth_url(self, url: impl AsRef<str>) -> Self {
        ResolverBuilder {
            default_auth_url: Some(url.as_ref().to_owned()),
            ..self
        }
    }

    /// Allows a room authUrl, and every URL under its path at a segment boundary. Repeatable.
    /// Default: none (only the default authUrl is allowed).
    pub fn allow_auth_url(mut self, url: impl AsRef<str>) -> Self {
        self.allowed_auth_urls.push(url.as_ref().to_owned());
        self
    }

    /// The options-screen switch. When `false`, connects and joins resolve to
    /// [`Identity::Anonymous`] with no network call. Default: `true`.
    pub fn auth_required(self, required: bool) -> Self {
        ResolverBuilder {
            auth_required: required,
            ..self
        }
    }

    /// Permits `http://` to non-loopback hosts, which sends tokens in the clear. Default:
    /// `false` (`http://` only to `localhost`, `127.0.0.0/8` and `[::1]`).
    pub fn allow_insecure_http(self, allow: bool) -> Self {
        ResolverBuilder {
            plain_http: PlainHttp::allowed_if(allow),
            ..self
        }
    }

    /// Upper bound on how long a user stays cached; an answer's `max-age` may shorten it.
    /// Zero disables positive caching. Default: 60 s.
    pub fn cache_ttl(self, ttl: Duration) -> Self {
        ResolverBuilder {
            cache_ttl: ttl,
            ..self
        }
    }

    /// How long a token the API rejected (401/403) stays rejected without a call. Zero
    /// disables negative caching. Default: 5 s.
    pub fn negative_cache_ttl(self, ttl: Duration) -> Self {
        ResolverBuilder {
            negative_cache_ttl: ttl,
            ..self
        }
    }

    /// How many answers the local tier holds, in all: users (fresh, or kept stale for
    /// [`serve_stale_for`](Self::serve_stale_for)) and rejections together. Rejections may take
    /// an eighth of it and no more, so that a flood of bad tokens cannot evict the players'
    /// entries. moka applies the bound as it applies writes: between its passes, an entry whose
    /// eviction is due may still be held. Each entry costs about 0.5 KB (one
    /// `ExtraFields`-free user with a 43-byte token: 452 B of heap at 100 000, 504-514 B of
    /// resident memory at 1 000 000), so the default holds in about 50 MB. Default: 100 000.
    pub fn max_cache_entries(self, entries: u64) -> Self {
        ResolverBuilder {
            max_cache_entries: entries,
            ..self
        }
    }

    /// Upstream calls in flight at once, for the whole resolver and its clones. Must be at
    /// least 1. Default: 64.
    pub fn max_concurrent_requests(self, n: usize) -> Self {
        ResolverBuilder {
            max_concurrent_requests: n,
            ..self
        }
    }

    /// Longest wait for an upstream slot before failing with `overloaded`. Default: 1 s.
    pub fn queue_timeout(self, timeout: Duration) -> Self {
        ResolverBuilder {
            queue_timeout: timeout,
            ..self
        }
    }

    /// Deadline for one resolution's upstream work: every try, the backoff between them and
    /// reading the body. Must be non-zero. Default: 5 s.
    pub fn request_timeout(self, timeout: Duration) -> Self {
        ResolverBuilder {
            request_timeout: timeout,
            ..self
        }
    }

    /// Deadline for the TCP and TLS connect. Must be non-zero. Default: 2 s.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        ResolverBuilder {
            connect_timeout: timeout,
            ..self
        }
    }

    /// Largest answer body accepted; a larger one is refused without reading it all. Must be
    /// non-zero. Default: 64 KiB.
    pub fn max_response_bytes(self, bytes: usize) -> Self {
        ResolverBuilder {
            max_response_bytes: bytes,
            ..self
        }
    }

    /// Extra tries on transient failures (connect errors, resets, 408, 429, 500, 502, 503,
    /// 504), with jittered exponential backoff, within `request_timeout`. Default: 1.
    pub fn retries(self, retries: u32) -> Self {
        ResolverBuilder { retries, ..self }
    }

    /// Serve an answer up to this long past its freshness when the auth API is unavailable or
    /// times out; the answer is then [`stale`](crate::Resolution::is_stale) and counted in
    /// `token_resolver_stale_served_total`. Never when the API rejects the token or breaks the
    /// protocol, nor when something the answer stands for (its token, user or session, or
    /// everything) was revoked while the failed call was under way: every caller of that call
    /// is then refused with `token_rejected`. Default: zero (off).
    ///
    /// **The trade-off:** during an outage a token revoked at the API may still be accepted for
    /// up to this window, and an answer's `max-age` no longer bounds how long it is used. Turn
    /// it on when keeping players in the game through an auth outage matters more than revoking
    /// them to the second; keep the window short (minutes, not hours).
    pub fn serve_stale_for(self, window: Duration) -> Self {
        ResolverBuilder {
            serve_stale_for: window,
            ..self
        }
    }

    /// Leeway on every expiry (RFC 7519): a token whose answer (integer `exp`, RFC 7662) or
    /// JWT payload (`exp`) says it expires at `t` is valid until `t` plus this; an answer
    /// whose expiry has passed so is `token_rejected`, and none is cached past it. A JWT is
    /// read only to shorten caching, never to accept anything: no signature is checked.
    /// Default: 30 s.
    pub fn clock_skew(self, skew: Duration) -> Self {
        ResolverBuilder {
            clock_skew: skew,
            ..self
        }
    }

    /// The per-API circuit breaker: after `failures` transient failures in a row (connect
    /// errors, resets, timeouts, 408/429/5xx) resolutions that need that API fail at once with
    /// `auth_unavailable` for `cool_down` (cache hits are still served), then one probe call
    /// decides whether it closes. `failures == 0` disables it. Default: 5 failures, 2 s.
    pub fn circuit_breaker(self, failures: u32, cool_down: Duration) -> Self {
        ResolverBuilder {
            breaker: BreakerConfig {
                threshold: failures,
                cool_down,
            },
            ..self
        }
    }

    /// Trusts the certificate(s) in `pem` (PEM, one or several) as roots for `https://`
    /// authUrls, besides the built-in ones: the integrator's private CA, or a self-signed
    /// certificate in a test. Repeatable. Default: none.
    pub fn add_root_certificate(mut self, pem: &[u8]) -> Self {
        self.root_certificates.push(pem.to_vec());
        self
    }

    /// Whether the built-in public roots (Mozilla's, through webpki-roots) are trusted. `false`
    /// trusts only the certificates given to
    /// [`add_root_certificate`](Self::add_root_certificate): for a deployment whose auth API
    /// has a private CA and should never be reached through a public one. Default: `true`.
    pub fn tls_built_in_roots(self, enabled: bool) -> Self {
        ResolverBuilder {
            tls_built_in_roots: enabled,
            ..self
        }
    }

    /// Offers HTTP/2 to `https://` auth APIs (through ALPN; an API that does not take it is
    /// spoken to in HTTP/1.1, and `http://` stays HTTP/1.1). With HTTP/2 every call to one API
    /// shares one connection, so a cold start costs one TLS handshake instead of one per slot.
    /// Default: `false` (HTTP/1.1; `docs/performance.md` has the measurement behind it).
    pub fn http2(self, enabled: bool) -> Self {
        ResolverBuilder {
            http2: enabled,
            ..self
        }
    }

    /// A second cache tier on Redis shared by every game-server node (feature `redis`): a local
    /// miss looks there before calling the API, answers are written there with the same time
    /// to live, and invalidations reach every node. Redis being down, slow or answering garbage
    /// never fails a resolution. Default: none.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn shared_cache(self, tier: RedisTier) -> Self {
        ResolverBuilder {
            shared_cache: Some(tier),
            ..self
        }
    }

    /// Checks the configuration and builds the resolver.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting at fault when an authUrl is unparsable, has userinfo,
    /// a query or a fragment, or is `http://` to a non-loopback host without
    /// `allow_insecure_http(true)`; when `auth_required` is on without a `default_auth_url`;
    /// when `max_concurrent_requests`, `request_timeout`, `connect_timeout` or
    /// `max_response_bytes` is zero; when a duration (a time to live, a timeout, the clock
    /// skew, the breaker's cool-down) is over a year; when a certificate given to
    /// `add_root_certificate` is not PEM; or when the TLS backend cannot start.
    ///
    /// # Example
    ///
    /// ```
    /// use token_resolver::Resolver;
    ///
    /// let err = Resolver::builder().default_auth_url("http://auth.example.com").build().unwrap_err();
    /// assert_eq!(err.setting(), "default_auth_url");
    /// assert!(Resolver::builder().default_auth_url("https://auth.example.com").build().is_ok());
    /// ```
    pub fn build(self) -> Result<Resolver, ConfigError> {
        let (allow, default_endpoint) = self.allow_list()?;
        self.check_limits()?;
        let upstream = Upstream {
            http: self.http_client()?,
            request_timeout: self.request_timeout,
            retries: self.retries,
            max_response_bytes: self.max_response_bytes,
            breakers: Breakers::new(self.breaker),
            slots: Semaphore::new(self.max_concurrent_requests),
            queue_timeout: self.queue_timeout,
            first_contacts: self.http2.then(FirstContacts::default),
        };
        // How much older than its revocation an answer still admitted can be: cached for up to
        // `cache_ttl`, served stale for up to `serve_stale_for` past that, and the clocks.
        let late_margin = self
            .cache_ttl
            .saturating_add(self.serve_stale_for)
            .saturating_add(self.clock_skew);
        let cache = Tiers::new(TierSettings {
            capacity: self.max_cache_entries,
            stale_for: self.serve_stale_for,
            cache_ttl: self.cache_ttl,
            negative_ttl: self.negative_cache_ttl,
            // Longer than a look-up can last: its wait for a slot, its deadline, and a Redis
            // read-through, twice over and at least half a minute.
            horizon: (self.queue_timeout + self.request_timeout)
                .saturating_mul(2)
                .max(Duration::from_secs(30)),
            late_margin,
            shared: self.shared_cache,
        })?;
        let slots = self.max_concurrent_requests;
        let resolver = Resolver {
            inner: Arc::new(Inner {
                allow,
                default_endpoint,
                auth_required: self.auth_required,
                cache,
                flights: Flights::new(),
                upstream,
                cache_ttl: self.cache_ttl,
                clock_skew: self.clock_skew,
                late_margin,
                negative_cache_ttl: self.negative_cache_ttl,
                counters: Counters::default(),
                resolutions: telemetry::Resolutions::default(),
            }),
        };
        // Only once nothing can fail: a refused configuration must not show its bound.
        metrics::gauge!(crate::telemetry::UPSTREAM_SLOTS).set(slots as f64);
        Ok(resolver)
    }

    /// The allowlist (the default authUrl and every `allow_auth_url`) and the default endpoint.
    fn allow_list(&self) -> Result<(AllowList, Option<Arc<Endpoint>>), ConfigError> {
        let parse = |setting: &'static str, url: &str| {
            Endpoint::try_parse(url, self.plain_http)
                .map(|e| (Box::<str>::from(url), Arc::new(e)))
                .map_err(|reason| ConfigError::new(setting, format!("{url:?}: {reason}")))
        };
        let default = self
            .default_auth_url
            .as_deref()
            .map(|u| parse("default_auth_url", u))
            .transpose()?;
        if self.auth_required && default.is_none() {
            return Err(ConfigError::new(
                "default_auth_url",
                "required while auth_required is on: set the platform's user resource acquisition API URL",
            ));
        }
        let mut entries: Vec<_> = default.iter().cloned().collect();
        for url in &self.allowed_auth_urls {
            entries.push(parse("allow_auth_url", url)?);
        }
        let allow = AllowList::new(entries, self.plain_http);
        Ok((allow, default.map(|(_, endpoint)| endpoint)))
    }

    /// Refuses limits that cannot work: zero, more slots than a semaphore holds, or a duration
    /// past [`MAX_DURATION`].
    fn check_limits(&self) -> Result<(), ConfigError> {
        for (setting, duration) in [
            ("cache_ttl", self.cache_ttl),
            ("negative_cache_ttl", self.negative_cache_ttl),
            ("serve_stale_for", self.serve_stale_for),
            ("queue_timeout", self.queue_timeout),
            ("request_timeout", self.request_timeout),
            ("connect_timeout", self.connect_timeout),
            ("clock_skew", self.clock_skew),
            ("circuit_breaker", self.breaker.cool_down),
        ] {
            if duration > MAX_DURATION {
                return Err(ConfigError::new(
                    setting,
                    "must be at most a year (365 days)",
                ));
            }
        }
        for (setting, zero) in [
            ("max_concurrent_requests", self.max_concurrent_requests == 0),
            ("request_timeout", self.request_timeout.is_zero()),
            ("connect_timeout", self.connect_timeout.is_zero()),
            ("max_response_bytes", self.max_response_bytes == 0),
        ] {
            if zero {
                return Err(ConfigError::new(setting, "must be greater than zero"));
            }
        }
        let max_slots = Semaphore::MAX_PERMITS;
        if self.max_concurrent_requests > max_slots {
            return Err(ConfigError::new(
                "max_concurrent_requests",
                format!("must be at most {max_slots}"),
            ));
        }
        Ok(())
    }

    /// The HTTP client of the upstream calls.
    fn http_client(&self) -> Result<reqwest::Client, ConfigError> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.connect_timeout)
            // A proxy from the environment would see every token; the allowlist decides where
            // tokens go, not HTTPS_PROXY.
            .no_proxy()
            .tls_built_in_root_certs(self.tls_built_in_roots)
            .user_agent(concat!("token-resolver/", env!("CARGO_PKG_VERSION")));
        for pem in &self.root_certificates {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .ok()
                .filter(|certs| !certs.is_empty())
                .ok_or_else(|| ConfigError::new("add_root_certificate", "not a PEM certificate"))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        builder = if self.http2 {
            // reqwest's default retry policy stays: it resends only a request an HTTP/2 server
            // refused at the protocol level (REFUSED_STREAM, or a graceful GOAWAY that came
            // before it was processed), which is safe and is not a try of ours.
            builder
        } else {
            // The resolver retries transient failures itself, within its deadline. reqwest's
            // own retry layer (for HTTP/2 refusals, which an HTTP/1 client never sees) would
            // clone every request's headers in case; with no retries allowed it clones nothing.
            builder
                .http1_only()
                .retry(reqwest::retry::never().max_retries_per_request(0))
        };
        builder.build().map_err(|e| {
            ConfigError::new("http client", format!("cannot start the HTTP client: {e}"))
        })
    }
}

/// The longest duration a setting takes: a year. Longer ones mean "forever" to a game server,
/// and would overflow the clocks and the cache's time to live (moka's limit is 1,000 years).
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    fn build(b: ResolverBuilder) -> Result<Resolver, ConfigError> {
        b.build()
    }

    #[test]
    fn the_upstream_slots_gauge_is_set_only_by_a_resolver_that_is_built() {
        // A configuration refused late (a root certificate that is not PEM fails in the HTTP
        // client, after every limit is checked) leaves the gauge alone; a built one sets it.
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let slots = || {
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .find(|(key, ..)| key.key().name() == crate::telemetry::UPSTREAM_SLOTS)
                .map(|(.., value)| match value {
                    DebugValue::Gauge(v) => v.into_inner(),
                    other => panic!("a gauge, not {other:?}"),
                })
        };
        metrics::with_local_recorder(&recorder, || {
            let refused = Resolver::builder()
                .default_auth_url("https://a.example")
                .max_concurrent_requests(7)
                .add_root_certificate(b"not a certificate")
                .build();
            assert!(refused.is_err());
        });
        assert_eq!(slots(), None, "a refused configuration sets no bound");
        metrics::with_local_recorder(&recorder, || {
            Resolver::builder()
                .default_auth_url("https://a.example")
                .max_concurrent_requests(9)
                .build()
                .unwrap();
        });
        assert_eq!(slots(), Some(9.0));
    }

    #[test]
    fn a_dated_revocation_spares_only_what_began_past_the_stale_window_too() {
        // A stale-served answer can be `serve_stale_for` older than a cached one: a session
        // resolved within that of a revocation may hold an answer from before it.
        let resolver = Resolver::builder()
            .default_auth_url("https://a.example")
            .cache_ttl(Duration::from_secs(60))
            .serve_stale_for(Duration::from_secs(120))
            .clock_skew(Duration::from_secs(30))
            .build()
            .unwrap();
        let made_at = std::time::SystemTime::now();
        let dated = resolver.dated(crate::Revocation::All, made_at);
        assert!(!dated.spares(made_at + Duration::from_secs(200)));
        assert!(dated.spares(made_at + Duration::from_secs(211)));
    }

    #[test]
    fn build_requires_a_default_url_while_auth_is_required() {
        let err = build(Resolver::builder()).unwrap_err();
        assert_eq!(err.setting(), "default_auth_url");
        assert!(build(Resolver::builder().auth_required(false)).is_ok());
    }

    #[test]
    fn build_refuses_bad_urls_naming_the_setter() {
        let base = || Resolver::builder().default_auth_url("https://a.example");
        for (b, setting) in [
            (
                Resolver::builder().default_auth_url("not a url"),
                "default_auth_url",
            ),
            (
                Resolver::builder().default_auth_url("https://u:p@a.example"),
                "default_auth_url",
            ),
            (
                Resolver::builder().default_auth_url("https://a.example/?q"),
                "default_auth_url",
            ),
            (
                Resolver::builder().default_auth_url("https://a.example/#f"),
                "default_auth_url",
            ),
            (base().allow_auth_url("http://b.example"), "allow_auth_url"),
        ] {
            assert_eq!(build(b).unwrap_err().setting(), setting);
        }
        assert!(build(
            base()
                .allow_auth_url("http://b.example")
                .allow_insecure_http(true)
        )
        .is_ok());
    }

    #[test]
    fn build_refuses_a_root_certificate_that_is_not_pem() {
        let base = || Resolver::builder().default_auth_url("https://a.example");
        let err = build(base().add_root_certificate(b"not a certificate")).unwrap_err();
        assert_eq!(err.setting(), "add_root_certificate");
        assert!(build(base().tls_built_in_roots(false).http2(true)).is_ok());
    }

    #[test]
    fn build_refuses_zero_limits() {
        let base = || Resolver::builder().default_auth_url("https://a.example");
        assert_eq!(
            build(base().max_concurrent_requests(0))
                .unwrap_err()
                .setting(),
            "max_concurrent_requests"
        );
        assert_eq!(
            build(base().request_timeout(Duration::ZERO))
                .unwrap_err()
                .setting(),
            "request_timeout"
        );
        assert_eq!(
            build(base().connect_timeout(Duration::ZERO))
                .unwrap_err()
                .setting(),
            "connect_timeout"
        );
        assert_eq!(
            build(base().max_response_bytes(0)).unwrap_err().setting(),
            "max_response_bytes"
        );
    }

    #[test]
    fn build_refuses_durations_past_a_year_instead_of_panicking_later() {
        let base = || Resolver::builder().default_auth_url("https://a.example");
        let forever = Duration::MAX;
        let refused = |b: ResolverBuilder| build(b).unwrap_err().setting().to_owned();
        assert_eq!(refused(base().cache_ttl(forever)), "cache_ttl");
        assert_eq!(
            refused(base().negative_cache_ttl(forever)),
            "negative_cache_ttl"
        );
        assert_eq!(refused(base().serve_stale_for(forever)), "serve_stale_for");
        assert_eq!(refused(base().request_timeout(forever)), "request_timeout");
        assert_eq!(refused(base().clock_skew(forever)), "clock_skew");
        assert_eq!(
            refused(base().circuit_breaker(5, forever)),
            "circuit_breaker"
        );
        assert!(build(base().cache_ttl(super::MAX_DURATION)).is_ok());
    }
}
