//! How an embedder asks for nginx's cache of `/v1/authorize` answers ([`NginxCache`]): where
//! nginx takes purges (loopback only), how long and how many answers it may keep, and the
//! grants file; and why a purge URL is refused ([`PurgeUrlError`]).

use std::path::PathBuf;
use std::time::Duration;

/// Lets nginx cache `/v1/authorize` answers and purges them on revocation (see
/// `examples/nginx`, which needs Debian's `libnginx-mod-http-cache-purge`).
///
/// ```
/// use std::time::Duration;
/// use token_resolver_sidecar::NginxCache;
///
/// let nginx = NginxCache::new("http://127.0.0.1:7362/purge")?.ttl(Duration::from_secs(30));
/// assert!(NginxCache::new("https://cache.example.com/purge").is_err());
/// # Ok::<(), token_resolver_sidecar::PurgeUrlError>(())
/// ```
#[derive(Debug, Clone)]
pub struct NginxCache {
    /// nginx's purge location, on loopback.
    pub(crate) purge_url: reqwest::Url,
    pub(crate) ttl: Duration,
    pub(crate) max_entries: usize,
    pub(crate) grants_file: Option<PathBuf>,
}

impl NginxCache {
    /// Purges at `purge_url`, nginx's purge location (`proxy_cache_purge ZONE
    /// $http_x_token_resolver_purge;`), e.g. `http://127.0.0.1:7362/purge`; with the default
    /// TTL and bound.
    ///
    /// # Errors
    ///
    /// When `purge_url` is not an `http://` URL on loopback (an IP address or `localhost`): the
    /// purges carry `Authorization` headers, which must not leave the host.
    pub fn new(purge_url: &str) -> Result<NginxCache, PurgeUrlError> {
        let url = reqwest::Url::parse(purge_url)
            .map_err(|e| PurgeUrlError(format!("not a URL ({e})")))?;
        if url.scheme() != "http" {
            return Err(PurgeUrlError("the scheme must be http://".to_owned()));
        }
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            None => false,
        };
        if !loopback {
            return Err(PurgeUrlError(
                "the host must be a loopback address or localhost".to_owned(),
            ));
        }
        Ok(NginxCache {
            purge_url: url,
            ttl: Duration::from_secs(60),
            max_entries: 65_536,
            grants_file: None,
        })
    }

    /// nginx's purge location.
    pub fn purge_url(&self) -> &str {
        self.purge_url.as_str()
    }

    /// Longest nginx may keep an answer; shorter when the token expires sooner, and never
    /// longer than the resolver's own cache TTL, nor than a day. Default: 60 s.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> NginxCache {
        self.ttl = ttl;
        self
    }

    /// Answers nginx may hold at once; past it, answers are sent uncacheable. Each costs the
    /// length of its `Authorization` header and about 200 bytes here. Default: 65,536. Within
    /// it, nginx keeps one answer per token (the canonical `Bearer <token>` alone) and 64 per
    /// user at most.
    #[must_use]
    pub fn max_entries(mut self, max_entries: usize) -> NginxCache {
        self.max_entries = max_entries;
        self
    }

    /// Records each grant in the file at `path` before nginx is told it may keep the answer,
    /// so that the next sidecar to start with the same file takes back (purges) everything
    /// still in force there: without it, what a previous process granted stays in nginx until
    /// it expires, out of reach of any revocation. The file holds `Authorization` values, as
    /// nginx's cache does: it is created readable by its owner alone (0600) and never opened
    /// through a symbolic link; a file found there that others may read or write is refused
    /// (the sidecar then lets nginx keep nothing, and logs the path and the mode). Keep it on
    /// tmpfs, in a directory only the sidecar's user may write. Off by default.
    #[must_use]
    pub fn grants_file(mut self, path: impl Into<PathBuf>) -> NginxCache {
        self.grants_file = Some(path.into());
        self
    }
}

/// Why a purge URL was refused: it must be `http://` on loopback, since purges carry
/// `Authorization` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeUrlError(String);

impl std::fmt::Display for PurgeUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the nginx purge URL was refused: {}", self.0)
    }
}

impl std::error::Error for PurgeUrlError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_url_off_loopback_or_not_http_is_refused() {
        for url in [
            "http://127.0.0.1:7362/purge",
            "http://[::1]:7361/purge",
            "http://localhost:7361/purge",
        ] {
            assert_eq!(NginxCache::new(url).unwrap().purge_url(), url);
        }
        for url in [
            "http://10.0.0.1/purge",
            "https://127.0.0.1/purge",
            "http://cache.example.com/purge",
            "127.0.0.1:7362",
        ] {
            assert!(NginxCache::new(url).is_err(), "{url}");
        }
    }
}
