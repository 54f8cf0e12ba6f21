//! Purging nginx's cache: the purges [`Grants`](super::Grants) owes, sent to nginx's purge
//! location (`ngx_cache_purge`) with the key in [`PURGE_HEADER`], a few at a time, each retried
//! with backoff until nginx answers or the answer it names would have expired anyway, and sent
//! once more when a purge was owed again once settled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The header in which the purger names the cache key to drop.
pub const PURGE_HEADER: &str = "x-token-resolver-purge";
/// `sidecar_nginx_purges_total{outcome}`: purges by what nginx answered (`purged`, `absent`)
/// or `failed` (retried until the grant's end).
pub const PURGES_TOTAL: &str = "sidecar_nginx_purges_total";

/// Purges in flight at once.
const PURGES_AT_ONCE: usize = 16;
/// Longest a purge request may take.
const PURGE_TIMEOUT: Duration = Duration::from_secs(2);
/// First wait before a failed purge is sent again; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// Longest wait between retries of a failed purge.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// A purge owed: not before `at`, once more at `again`, pointless after `until`.
#[derive(Clone, Copy)]
pub(super) struct Owed {
    pub(super) at: Instant,
    pub(super) again: Option<Instant>,
    pub(super) until: Instant,
}

/// The purges owed, one per key (a later one for the same key takes its place), and the
/// purger's bell.
#[derive(Default)]
pub(super) struct Purges {
    pub(super) owed: Mutex<HashMap<Arc<str>, Owed>>,
    bell: Notify,
}

/// The client purges are sent with: loopback, no proxy, each purge bounded.
///
/// # Errors
///
/// reqwest's, when it cannot build a client; then nothing may be granted.
pub(super) fn purge_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(PURGE_TIMEOUT)
        .no_proxy()
        .build()
}

/// Sends the purges owed to nginx's purge location at `url` with `client` until `cut`.
pub(super) async fn purge(
    purges: Arc<Purges>,
    client: reqwest::Client,
    url: reqwest::Url,
    cut: CancellationToken,
) {
    let mut backoff: HashMap<Arc<str>, Duration> = HashMap::new();
    loop {
        let (due, next) = purges.due(Instant::now());
        if due.is_empty() {
            tokio::select! {
                () = cut.cancelled() => return,
                () = purges.bell.notified() => {}
                () = sleep_until(next) => {}
            }
            continue;
        }
        let sent: Vec<(bool, Arc<str>, Owed)> = futures_util::stream::iter(due)
            .map(|(key, owed)| {
                let (client, url) = (&client, &url);
                async move { (send(client, url, &key).await, key, owed) }
            })
            .buffer_unordered(PURGES_AT_ONCE)
            .collect()
            .await;
        for (done, key, owed) in sent {
            let later = if done {
                backoff.remove(&key);
                owed.again.map(|at| Owed {
                    at,
                    again: None,
                    ..owed
                })
            } else {
                let wait = backoff
                    .get(&key)
                    .map_or(RETRY_FIRST, |w| (*w * 2).min(RETRY_MAX));
                backoff.insert(key.clone(), wait);
                Some(Owed {
                    at: Instant::now() + wait,
                    ..owed
                })
            };
            match later {
                Some(later) if later.at < later.until => purges.owe_again(key, later),
                _ => {
                    backoff.remove(&key);
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One purge: `true` when nginx answered (purged, or had nothing under the key).
async fn send(client: &reqwest::Client, url: &reqwest::Url, key: &str) -> bool {
    let outcome = match client
        .get(url.clone())
        .header(PURGE_HEADER, key)
        .send()
        .await
    {
        Ok(answer) if answer.status().is_success() => "purged",
        Ok(answer) if answer.status() == reqwest::StatusCode::NOT_FOUND => "absent",
        Ok(answer) => {
            tracing::warn!(status = %answer.status(), "nginx refused a purge; retrying");
            "failed"
        }
        Err(e) => {
            // reqwest's error names the URL, never a header.
            tracing::warn!(error = %e, "a purge did not reach nginx; retrying");
            "failed"
        }
    };
    metrics::counter!(PURGES_TOTAL, "outcome" => outcome).increment(1);
    outcome != "failed"
}

impl Purges {
    /// Owes each of `purges`, in place of any owed for the same key, and wakes the purger.
    pub(super) fn owe(&self, purges: impl IntoIterator<Item = (Arc<str>, Owed)>) {
        let mut owed = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        owed.extend(purges);
        drop(owed);
        self.bell.notify_one();
    }

    /// Takes the purges due at `now`, and says when the next one is.
    fn due(&self, now: Instant) -> (Vec<(Arc<str>, Owed)>, Option<Instant>) {
        let mut owed = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        owed.retain(|_, o| o.until > now);
        let keys: Vec<Arc<str>> = owed
            .iter()
            .filter(|(_, o)| o.at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let due = keys
            .into_iter()
            .filter_map(|k| owed.remove_entry(&k))
            .collect();
        let next = owed.values().map(|o| o.at).min();
        (due, next)
    }

    /// Owes `key` again (a retry, or the settled purge), unless a purge of it is owed already.
    fn owe_again(&self, key: Arc<str>, again: Owed) {
        let mut owed = self.owed.lock().unwrap_or_else(|e| e.into_inner());
        owed.entry(key).or_insert(again);
    }
}
