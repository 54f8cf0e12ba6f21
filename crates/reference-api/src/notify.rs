//! Telling game servers of revocations: `POST {target}/admin/revoke` with the admin secret as
//! bearer, `{"user_id": N, "session": "…", "auth_url": "…", "at": T}` when a session logs out
//! (the `sid` that `/api/user` answers for its tokens: one call however many tokens it took)
//! and `{"user_id": N, "auth_url": "…", "at": T}` when a user is banned. `auth_url` is this
//! API's public base URL ([`ApiConfig::public_url`](super::ApiConfig::public_url)), so that a
//! game server revokes the sessions of rooms on this integrator whatever its own default
//! authUrl is; `at` is when the revocation was made, in Unix milliseconds, so that one
//! delivered late closes what it named then, not a session a later login opened.
//!
//! Each target has an outbox and [`WORKERS_PER_TARGET`] workers delivering from it, each one
//! notice at a time, in the background: the logout or the ban never waits for them, and a
//! notice a game server holds (it waits up to a second for its shared tier before answering)
//! does not hold the notices behind it. The outbox is bounded and coalescing:
//!
//! - bans go first and are never dropped: one per user (a second ban of a user still waiting
//!   moves its `at` to the later one), and past [`MAX_PENDING_BANS`] they widen into one
//!   `{"all": true, "at": T}` (every cached answer on the game server re-resolved, `T` the
//!   latest ban's), which revokes them all; a ban queued after that `all` waits behind it and
//!   is delivered too, and the `all` is taken out only once delivered with the `at` it has
//!   then;
//! - logouts wait behind the bans, one per session, at most [`MAX_PENDING_LOGOUTS`]: past that
//!   the oldest is dropped and logged (its tokens still end at their expiry);
//! - a delivery counts only when the game server answers 200 (or another 2xx but 202): a 202
//!   or a 503 (the revocation is pending on that node: its link to the shared tier is down) is
//!   retried after its `Retry-After` (at most [`MAX_RETRY_AFTER`]); when that answer says the
//!   node applied it (a 202, or a 503 with `"pending": true`), the notices behind it go on at
//!   once meanwhile (issue 34: a node's slow shared tier held every later logout a second or
//!   more). 401, 403, 404 are retried
//!   (a secret or an admin URL wrong for now: fixed by a redeploy, logged once per change),
//!   every other status and every transport error, with a doubling backoff (capped at
//!   [`MAX_BACKOFF`]), until it is taken or older than the retry window
//!   ([`ApiConfig::notify_retry_for`](super::ApiConfig::notify_retry_for)): then dropped and
//!   logged as undelivered. Only a status that says the body itself is at fault (400, 405,
//!   413, 415, 422) is given up on at once, logged and counted as dropped.
//!
//! What is pending per target is in [`Notifier::pending`] (`GET /api/admin/notifications`).
//! Neither the secret nor any token is ever logged.
//!
//! It does not own deciding what to revoke: `handlers` and `admin` do.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap, StatusCode};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;
use url::Url;

use super::config::{notify_url, AdminSecret, ApiConfigError};

/// The wait after the first failed try; it doubles after each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between two tries: a healed path is used within this.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured: a game server cannot park its notices for longer.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Deadline of one try, connection included.
const TRY_TIMEOUT: Duration = Duration::from_secs(2);
/// Deadline to connect, within [`TRY_TIMEOUT`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Workers delivering to one target at once: a notice the game server holds (waiting for its
/// shared tier) or asks to retry later does not hold up the notices behind it.
pub(super) const WORKERS_PER_TARGET: usize = 4;
/// Bans pending for one target before they widen into one revocation of everything.
pub(super) const MAX_PENDING_BANS: usize = 100_000;
/// Logouts pending for one target before the oldest is dropped.
pub(super) const MAX_PENDING_LOGOUTS: usize = 100_000;

/// One revocation, the body of one `/admin/revoke` call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Notice {
    /// Every session of one user: a ban.
    User(i64),
    /// One of the user's sessions, by its public id (`sid`): a logout.
    Session { user_id: i64, session: Arc<str> },
    /// Every cached answer: what bans widen into when too many are pending.
    All,
}

/// A notice with when its revocation was made, in Unix milliseconds: what one try sends.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamped {
    notice: Notice,
    at: u64,
}

impl Stamped {
    /// The JSON body, naming `auth_url` when it is known.
    fn body(&self, auth_url: Option<&str>) -> String {
        let mut body = match &self.notice {
            Notice::User(user_id) => serde_json::json!({ "user_id": user_id }),
            Notice::Session { user_id, session } => {
                serde_json::json!({ "user_id": user_id, "session": &**session })
            }
            Notice::All => serde_json::json!({ "all": true }),
        };
        body["at"] = self.at.into();
        if let (Some(auth_url), false) = (auth_url, self.notice == Notice::All) {
            body["auth_url"] = auth_url.into();
        }
        body.to_string()
    }
}

/// Now, in Unix milliseconds.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A revocation of everything waiting.
#[derive(Debug, Clone, Copy)]
struct AllPending {
    /// When the latest revocation it stands for was made (Unix ms): what it is sent with.
    at: u64,
    /// When the first was queued: its age.
    since: Instant,
    /// When the latest was queued: the retry window counts from here.
    renewed: Instant,
}

/// What waits to be delivered to one target.
#[derive(Default)]
struct Outbox {
    /// A revocation of everything waiting, if any: it goes first.
    all: Option<AllPending>,
    /// Bans waiting, oldest first, with when each was queued.
    bans: VecDeque<(i64, Instant)>,
    /// The users in `bans`, each with when its latest ban was made (Unix ms).
    banned: HashMap<i64, u64>,
    /// Logouts waiting, oldest first.
    logouts: VecDeque<(Stamped, Instant)>,
    /// Revocations taken by the game server so far.
    delivered: u64,
    /// Revocations given up on: logouts dropped at the bound, any past the retry window, and
    /// any whose body the game server refused.
    dropped: u64,
    /// Why the last failed try failed, without any secret.
    last_error: Option<String>,
    /// Notices no worker may take now: being tried (`None`), or waiting out a failed try
    /// (`Some`: not before then).
    held: HashMap<Notice, Option<Instant>>,
    /// The wait after the next failed try: doubles with each failure, back to the first after
    /// a delivery (one pace per target, whichever worker tries).
    backoff: Duration,
}

impl Outbox {
    /// Queues `notice`, made at `at` (Unix ms), coalescing and bounding as the module says.
    fn push(&mut self, notice: Notice, at: u64, now: Instant) {
        match notice {
            Notice::All => self.push_all(at, now, now),
            Notice::User(user_id) => {
                if let Some(latest) = self.banned.get_mut(&user_id) {
                    *latest = (*latest).max(at);
                    return;
                }
                self.banned.insert(user_id, at);
                self.bans.push_back((user_id, now));
                if self.bans.len() > MAX_PENDING_BANS {
                    let oldest = self.bans.front().map_or(now, |&(_, queued)| queued);
                    let latest = self.banned.values().copied().max().unwrap_or(at);
                    tracing::warn!(
                        pending = self.bans.len(),
                        "too many bans pending for one game server: they become one revocation \
                         of every cached answer"
                    );
                    self.bans.clear();
                    self.banned.clear();
                    self.held
                        .retain(|notice, _| !matches!(notice, Notice::User(_)));
                    self.push_all(latest, oldest, now);
                }
            }
            session => {
                if self.logouts.len() >= MAX_PENDING_LOGOUTS {
                    if let Some((dropped, _)) = self.logouts.pop_front() {
                        self.held.remove(&dropped.notice);
                    }
                    self.dropped += 1;
                    tracing::warn!(
                        pending = MAX_PENDING_LOGOUTS,
                        "too many logouts pending for one game server: the oldest is dropped"
                    );
                }
                let stamped = Stamped {
                    notice: session,
                    at,
                };
                self.logouts.push_back((stamped, now));
            }
        }
    }

    /// Queues a revocation of everything made at `at`, standing for revocations queued from
    /// `since`, the latest at `now`; merged into one already waiting, which then names the
    /// later `at`.
    fn push_all(&mut self, at: u64, since: Instant, now: Instant) {
        match &mut self.all {
            Some(all) => {
                all.at = all.at.max(at);
                all.since = all.since.min(since);
                all.renewed = now;
            }
            None => {
                self.all = Some(AllPending {
                    at,
                    since,
                    renewed: now,
                });
            }
        }
    }

    /// The next notice to deliver that no worker holds (everything first, then bans, then
    /// logouts), after dropping what is older than `retry_for`.
    fn next(&mut self, now: Instant, retry_for: Duration) -> Option<Stamped> {
        let expired = |queued: Instant| now.saturating_duration_since(queued) > retry_for;
        if self.all.is_some_and(|all| expired(all.renewed)) {
            self.all = None;
            self.held.remove(&Notice::All);
            self.give_up(1);
        }
        while let Some(&(user_id, queued)) = self.bans.front() {
            if !expired(queued) {
                break;
            }
            self.bans.pop_front();
            self.banned.remove(&user_id);
            self.held.remove(&Notice::User(user_id));
            self.give_up(1);
        }
        let stale = self
            .logouts
            .iter()
            .take_while(|(_, queued)| expired(*queued))
            .count();
        if stale > 0 {
            for (stamped, _) in self.logouts.drain(..stale) {
                self.held.remove(&stamped.notice);
            }
            self.give_up(stale);
        }
        let free = |notice: &Notice| match self.held.get(notice) {
            None => true,
            Some(None) => false,
            Some(Some(until)) => *until <= now,
        };
        if let Some(all) = self.all.filter(|_| free(&Notice::All)) {
            return Some(Stamped {
                notice: Notice::All,
                at: all.at,
            });
        }
        let ban = (self.bans.iter()).find(|&&(user_id, _)| free(&Notice::User(user_id)));
        if let Some(&(user_id, _)) = ban {
            return Some(Stamped {
                notice: Notice::User(user_id),
                at: self.banned.get(&user_id).copied().unwrap_or_default(),
            });
        }
        (self.logouts.iter())
            .find(|(stamped, _)| free(&stamped.notice))
            .map(|(stamped, _)| stamped.clone())
    }

    /// [`next`](Self::next), held as being tried until [`release`](Self::release)d or done;
    /// `true` with it when it was tried before (a retry).
    fn take(&mut self, now: Instant, retry_for: Duration) -> Option<(Stamped, bool)> {
        let next = self.next(now, retry_for)?;
        let retry = self.held.insert(next.notice.clone(), None).is_some();
        Some((next, retry))
    }

    /// Lets another try take `notice`, not before `until`.
    fn release(&mut self, notice: &Notice, until: Instant) {
        self.held.insert(notice.clone(), Some(until));
    }

    /// When the first notice waiting out a failed try may go again, if any does.
    fn next_due(&self) -> Option<Instant> {
        self.held.values().flatten().min().copied()
    }

    /// Takes `sent` out once it was delivered or refused for good, unless it went meanwhile
    /// or was made later since (then it goes again, with its later `at`). Another worker may
    /// have delivered the notices before it: it is found wherever it is.
    fn done(&mut self, sent: &Stamped) {
        self.held.remove(&sent.notice);
        match &sent.notice {
            Notice::All => {
                if self.all.is_some_and(|all| all.at == sent.at) {
                    self.all = None;
                }
            }
            Notice::User(user_id) => {
                if self.banned.get(user_id) == Some(&sent.at) {
                    if let Some(at) = self.bans.iter().position(|(id, _)| id == user_id) {
                        self.bans.remove(at);
                    }
                    self.banned.remove(user_id);
                }
            }
            Notice::Session { .. } => {
                if let Some(at) = self.logouts.iter().position(|(n, _)| n == sent) {
                    self.logouts.remove(at);
                }
            }
        }
    }

    fn give_up(&mut self, count: usize) {
        self.dropped += count as u64;
        tracing::warn!(
            undelivered = count,
            "game server unreachable for the whole retry window: revocations not delivered"
        );
    }

    fn pending(&self) -> usize {
        usize::from(self.all.is_some()) + self.bans.len() + self.logouts.len()
    }
}

/// What is pending for one game server: the answer of `GET /api/admin/notifications`.
#[derive(Debug, Clone, Serialize)]
pub struct PendingNotifications {
    /// The target's `/admin/revoke` URL.
    pub target: String,
    /// Bans not delivered yet.
    pub bans: usize,
    /// Logouts not delivered yet.
    pub logouts: usize,
    /// Whether bans overflowed into one revocation of everything, not delivered yet.
    pub revoke_all: bool,
    /// Age of the oldest pending notification, in seconds.
    pub oldest_secs: f64,
    /// Notifications the game server took so far.
    pub delivered: u64,
    /// Notifications given up on so far (dropped at the bound, past the retry window, or
    /// refused for their body).
    pub dropped: u64,
    /// Why the last failed try failed.
    pub last_error: Option<String>,
}

/// One game server, its outbox and its worker.
struct Target {
    /// Its `/admin/revoke` URL.
    url: Url,
    outbox: Mutex<Outbox>,
    /// Wakes a worker when a notice is queued.
    queued: Notify,
    /// The workers, started by the first notice; aborted when the notifier goes.
    workers: OnceLock<Vec<tokio::task::JoinHandle<()>>>,
}

impl Target {
    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What every worker shares.
struct Delivery {
    /// No proxy, no redirects, a deadline per try.
    client: reqwest::Client,
    /// The bearer of every call.
    secret: AdminSecret,
    /// This API's public base URL, the `auth_url` of every notice.
    auth_url: OnceLock<Arc<str>>,
    /// How long a notice is retried before it is given up on.
    retry_for: Duration,
    /// How long after a session's last token expired its logout is still told.
    expired_for: Duration,
}

/// The game servers to tell, and how.
pub(super) struct Notifier {
    targets: Vec<Arc<Target>>,
    delivery: Arc<Delivery>,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let targets: Vec<&str> = self.targets.iter().map(|t| t.url.as_str()).collect();
        f.debug_struct("Notifier")
            .field("targets", &targets)
            .field("auth_url", &self.delivery.auth_url.get())
            .field("retry_for", &self.delivery.retry_for)
            .finish_non_exhaustive()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        for target in &self.targets {
            for worker in target.workers.get().into_iter().flatten() {
                worker.abort();
            }
        }
    }
}

/// How one try ended.
enum Try {
    /// Taken: the next notice may go.
    Delivered,
    /// Refused for its body: another try would not change it; the next notice may go.
    Refused,
    /// Not taken yet: try again later, not before the wait the game server asked for;
    /// `applied` when the game server said it applied it (a 202, or a 503 with
    /// `"pending": true`: only its shared tier lags), so that the next notices may go at once.
    Again {
        why: String,
        retry_after: Option<Duration>,
        applied: bool,
    },
}

impl Notifier {
    /// A notifier for `targets` (game servers' admin base URLs) with `secret`, retrying each
    /// notice for `retry_for`, telling a logout until `expired_for` after the session's last
    /// token expired, naming `public_url` (if known yet) as `auth_url`.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::NotifyUrl`] for a target that is not an admin base URL,
    /// [`ApiConfigError::NotifyClient`] if the HTTP client cannot be built.
    pub(super) fn new(
        targets: &[String],
        secret: AdminSecret,
        retry_for: Duration,
        expired_for: Duration,
        public_url: Option<&str>,
    ) -> Result<Self, ApiConfigError> {
        let targets = targets
            .iter()
            .map(|target| {
                notify_url(target).map(|url| {
                    Arc::new(Target {
                        url,
                        outbox: Mutex::default(),
                        queued: Notify::new(),
                        workers: OnceLock::new(),
                    })
                })
            })
            .collect::<Result<_, _>>()?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TRY_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(ApiConfigError::NotifyClient)?;
        let auth_url = OnceLock::new();
        if let Some(url) = public_url {
            let _ = auth_url.set(Arc::from(url.trim_end_matches('/')));
        }
        Ok(Notifier {
            targets,
            delivery: Arc::new(Delivery {
                client,
                secret,
                auth_url,
                retry_for,
                expired_for,
            }),
        })
    }

    /// Names `base_url` as `auth_url` in every notice, unless a public URL was configured.
    pub(super) fn default_auth_url(&self, base_url: &str) {
        let _ = self.delivery.auth_url.set(Arc::from(base_url));
    }

    /// Whether a logout at `now` of a session whose last token expires at `last_token_expires`
    /// is told: while a token lives, and until `expired_for` after the last one expired (the
    /// game servers honour a token until its `exp` plus their clock skew).
    pub(super) fn tells_logout(&self, last_token_expires: Option<Instant>, now: Instant) -> bool {
        last_token_expires.is_some_and(|expires| expires + self.delivery.expired_for > now)
    }

    /// Queues `notice` for every target, as made now. Returns at once.
    pub(super) fn send(&self, notice: Notice) {
        let (now, at) = (Instant::now(), unix_ms());
        for target in &self.targets {
            target.outbox().push(notice.clone(), at, now);
            target.workers.get_or_init(|| {
                (0..WORKERS_PER_TARGET)
                    .map(|_| tokio::spawn(work(target.clone(), self.delivery.clone())))
                    .collect()
            });
            target.queued.notify_one();
        }
    }

    /// What is pending for each target.
    pub(super) fn pending(&self) -> Vec<PendingNotifications> {
        let now = Instant::now();
        self.targets
            .iter()
            .map(|target| {
                let outbox = target.outbox();
                let oldest = [
                    outbox.all.map(|all| all.since),
                    outbox.bans.front().map(|&(_, at)| at),
                    outbox.logouts.front().map(|&(_, at)| at),
                ]
                .into_iter()
                .flatten()
                .min();
                PendingNotifications {
                    target: target.url.to_string(),
                    bans: outbox.bans.len(),
                    logouts: outbox.logouts.len(),
                    revoke_all: outbox.all.is_some(),
                    oldest_secs: oldest.map_or(0.0, |at| (now - at).as_secs_f64()),
                    delivered: outbox.delivered,
                    dropped: outbox.dropped,
                    last_error: outbox.last_error.clone(),
                }
            })
            .collect()
    }

    /// Notices pending across the targets.
    pub(super) fn pending_count(&self) -> usize {
        self.targets.iter().map(|t| t.outbox().pending()).sum()
    }
}

/// One of `target`'s workers: delivers from its outbox, one notice at a time, for as long as
/// the notifier lives. After a failed try it waits the target's backoff (or the `Retry-After`)
/// before its next try, so that a target that cannot take notices gets at most
/// [`WORKERS_PER_TARGET`] tries a backoff; after a first try the game server applied (only its
/// shared tier lags) it goes on at once with the next notice.
async fn work(target: Arc<Target>, delivery: Arc<Delivery>) {
    loop {
        let (next, due) = {
            let mut outbox = target.outbox();
            let next = outbox.take(Instant::now(), delivery.retry_for);
            (next, outbox.next_due())
        };
        let Some((stamped, retry)) = next else {
            match due {
                Some(due) => {
                    tokio::select! {
                        () = target.queued.notified() => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                None => target.queued.notified().await,
            }
            continue;
        };
        let tried = try_once(&delivery, &target.url, &stamped).await;
        let wait = {
            let mut outbox = target.outbox();
            match tried {
                Try::Delivered | Try::Refused => {
                    outbox.done(&stamped);
                    if let Try::Delivered = tried {
                        outbox.delivered += 1;
                    } else {
                        outbox.dropped += 1;
                    }
                    outbox.backoff = FIRST_BACKOFF;
                    continue;
                }
                Try::Again {
                    why,
                    retry_after,
                    applied,
                } => {
                    if outbox.last_error.as_ref() != Some(&why) {
                        tracing::warn!(
                            target = %target.url,
                            error = %why,
                            "revocation not taken by the game server yet: retrying"
                        );
                    }
                    outbox.last_error = Some(why);
                    let asked = retry_after.unwrap_or_default().min(MAX_RETRY_AFTER);
                    if applied && !retry {
                        // The game server applied it and answered: it is up. This notice waits
                        // out its Retry-After; the next ones, never tried, go now. (Retries are
                        // paced below, so that a node whose shared tier stays down is not sent
                        // the whole outbox again and again.)
                        let until = Instant::now() + asked.max(FIRST_BACKOFF);
                        outbox.release(&stamped.notice, until);
                        continue;
                    }
                    let backoff = outbox.backoff.max(FIRST_BACKOFF);
                    outbox.backoff = (backoff * 2).min(MAX_BACKOFF);
                    let jitter = 0.8 + fastrand::f64() * 0.4;
                    let wait = backoff.mul_f64(jitter).max(asked);
                    outbox.release(&stamped.notice, Instant::now() + wait);
                    wait
                }
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// One try at delivering `stamped` to `url`.
async fn try_once(delivery: &Delivery, url: &Url, stamped: &Stamped) -> Try {
    let auth_url = delivery.auth_url.get().map(|url| &**url);
    let sent = delivery
        .client
        .post(url.clone())
        .bearer_auth(delivery.secret.expose())
        .header(header::CONTENT_TYPE, "application/json")
        .body(stamped.body(auth_url))
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => {
            let error = error.without_url();
            tracing::debug!(target = %url, %error, "revocation not delivered yet");
            return Try::Again {
                why: error.to_string(),
                retry_after: None,
                applied: false,
            };
        }
    };
    let status = response.status();
    if status.is_success() && status != StatusCode::ACCEPTED {
        tracing::debug!(target = %url, "revocation delivered");
        return Try::Delivered;
    }
    if refused_for_good(status) {
        tracing::warn!(
            target = %url,
            status = status.as_u16(),
            "game server refused the revocation's body: not retried"
        );
        return Try::Refused;
    }
    tracing::debug!(target = %url, status = status.as_u16(), "revocation not taken yet");
    let retry_after = retry_after(response.headers());
    let applied = match status {
        StatusCode::ACCEPTED => true,
        StatusCode::SERVICE_UNAVAILABLE => (response.bytes().await.ok())
            .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).ok())
            .is_some_and(|body| body["pending"] == true),
        _ => false,
    };
    let why = match status {
        StatusCode::ACCEPTED | StatusCode::SERVICE_UNAVAILABLE => {
            format!("answered {status}: pending on the game server")
        }
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
            format!("answered {status}: check the game server's admin secret and URL")
        }
        _ => format!("answered {status}"),
    };
    Try::Again {
        why,
        retry_after,
        applied,
    }
}

/// A `Retry-After` in seconds (the HTTP-date form is not used by game servers).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse().ok().map(Duration::from_secs)
}

/// Statuses that say the body is at fault: another try of it would not change them.
fn refused_for_good(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_REQUEST
            | StatusCode::METHOD_NOT_ALLOWED
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNSUPPORTED_MEDIA_TYPE
            | StatusCode::UNPROCESSABLE_ENTITY
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logout(user_id: i64, session: &str) -> Notice {
        Notice::Session {
            user_id,
            session: Arc::from(session),
        }
    }

    fn stamped(notice: Notice, at: u64) -> Stamped {
        Stamped { notice, at }
    }

    #[test]
    fn bans_go_before_logouts_and_a_second_ban_of_one_user_is_not_queued() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(logout(1, "a"), 1, now);
        outbox.push(Notice::User(2), 2, now);
        outbox.push(Notice::User(2), 3, now);
        assert_eq!(outbox.pending(), 2);
        let ban = outbox.next(now, Duration::MAX);
        assert_eq!(
            ban,
            Some(stamped(Notice::User(2), 3)),
            "the later ban's time"
        );
        outbox.done(&stamped(Notice::User(2), 3));
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(logout(1, "a"), 1))
        );
    }

    #[test]
    fn a_ban_made_again_while_the_first_was_being_sent_is_sent_again() {
        // The first try carried the first ban's time; the user was unbanned and banned again
        // meanwhile: taking out the first must leave the second, with its own time.
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(Notice::User(7), 10, now);
        let first = outbox.next(now, Duration::MAX).unwrap();
        outbox.push(Notice::User(7), 20, now);
        outbox.done(&first);
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(Notice::User(7), 20))
        );
    }

    #[test]
    fn a_logout_of_a_banned_user_is_kept_beside_the_ban() {
        // The ban closes what the user held when it was made; a logout made after it may name
        // a session opened since (after an unban): both go.
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(Notice::User(7), 1, now);
        outbox.push(logout(7, "s"), 2, now);
        assert_eq!(outbox.pending(), 2);
    }

    #[test]
    fn too_many_bans_widen_into_one_revocation_of_everything_and_none_is_dropped() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for user_id in 0..=MAX_PENDING_BANS as i64 {
            outbox.push(Notice::User(user_id), 1_000 + user_id as u64, now);
        }
        assert_eq!((outbox.pending(), outbox.dropped), (1, 0));
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(Notice::All, 1_000 + MAX_PENDING_BANS as u64)),
            "the latest ban's time, so that it covers every ban it stands for"
        );
    }

    #[test]
    fn a_ban_that_arrives_during_a_revocation_of_everything_is_kept() {
        // The `all` is being sent (made before the ban): the ban is queued behind it and
        // delivered after it, not swallowed.
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for user_id in 0..=MAX_PENDING_BANS as i64 {
            outbox.push(Notice::User(user_id), 1, now);
        }
        let all = outbox.next(now, Duration::MAX).unwrap();
        assert_eq!(all.notice, Notice::All);
        outbox.push(Notice::User(42), 2, now);
        assert_eq!(outbox.pending(), 2);
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(all.clone()),
            "all first"
        );
        outbox.done(&all);
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(Notice::User(42), 2))
        );
    }

    #[test]
    fn a_revocation_of_everything_made_again_while_one_is_sent_is_sent_again() {
        // Bans that overflow again while the first `all` is on its way widen into an `all` of
        // their later time: delivering the first does not take out the second.
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(Notice::All, 5, now);
        let first = outbox.next(now, Duration::MAX).unwrap();
        outbox.push(Notice::All, 9, now);
        outbox.done(&first);
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(Notice::All, 9))
        );
        outbox.done(&stamped(Notice::All, 9));
        assert_eq!(outbox.pending(), 0);
    }

    #[test]
    fn too_many_logouts_drop_the_oldest() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for i in 0..=MAX_PENDING_LOGOUTS {
            outbox.push(logout(1, &i.to_string()), 1, now);
        }
        assert_eq!((outbox.pending(), outbox.dropped), (MAX_PENDING_LOGOUTS, 1));
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(logout(1, "1"), 1))
        );
    }

    #[test]
    fn notices_older_than_the_retry_window_are_given_up_on() {
        let mut outbox = Outbox::default();
        let then = Instant::now();
        outbox.push(Notice::User(1), 1, then);
        outbox.push(logout(2, "x"), 1, then);
        let later = then + Duration::from_secs(11);
        outbox.push(logout(3, "y"), 2, later);
        assert_eq!(
            outbox.next(later, Duration::from_secs(10)),
            Some(stamped(logout(3, "y"), 2))
        );
        assert_eq!((outbox.pending(), outbox.dropped), (1, 2));
    }

    #[test]
    fn a_notice_delivered_before_those_ahead_of_it_is_taken_out_and_only_it() {
        // Several workers deliver at once: b may be taken while a is still being tried.
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(logout(1, "a"), 1, now);
        outbox.push(logout(1, "b"), 1, now);
        outbox.done(&stamped(logout(1, "b"), 1));
        outbox.done(&stamped(logout(1, "b"), 1));
        assert_eq!(outbox.pending(), 1);
        assert_eq!(
            outbox.next(now, Duration::MAX),
            Some(stamped(logout(1, "a"), 1))
        );
    }

    #[test]
    fn a_notice_being_tried_or_waiting_out_a_try_is_not_taken_again_and_the_next_goes() {
        // What lets a logout go while the one before it waits for a slow game server.
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(logout(1, "a"), 1, now);
        outbox.push(logout(2, "b"), 2, now);
        let (first, retry) = outbox.take(now, Duration::MAX).unwrap();
        assert_eq!((&first, retry), (&stamped(logout(1, "a"), 1), false));
        let (second, _) = outbox.take(now, Duration::MAX).unwrap();
        assert_eq!(second, stamped(logout(2, "b"), 2), "a is being tried");
        assert_eq!(outbox.take(now, Duration::MAX), None, "both are");
        let later = now + Duration::from_secs(1);
        outbox.release(&first.notice, later);
        assert_eq!(outbox.next_due(), Some(later));
        assert_eq!(outbox.take(now, Duration::MAX), None, "not before its time");
        assert_eq!(
            outbox.take(later, Duration::MAX),
            Some((first.clone(), true)),
            "a retry"
        );
        outbox.done(&first);
        outbox.done(&second);
        assert_eq!((outbox.pending(), outbox.next_due()), (0, None));
    }

    #[test]
    fn the_body_names_the_auth_url_and_the_time_and_never_more() {
        assert_eq!(
            stamped(logout(4, "sid"), 17).body(Some("https://api.example")),
            r#"{"at":17,"auth_url":"https://api.example","session":"sid","user_id":4}"#
        );
        assert_eq!(
            stamped(Notice::User(4), 18).body(None),
            r#"{"at":18,"user_id":4}"#
        );
        assert_eq!(
            stamped(Notice::All, 19).body(Some("x")),
            r#"{"all":true,"at":19}"#
        );
    }

    #[test]
    fn a_status_is_given_up_on_only_when_the_body_is_at_fault() {
        for status in [401, 403, 404, 408, 429, 500, 502, 503, 202] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(!refused_for_good(status), "{status}");
        }
        for status in [400, 405, 413, 415, 422] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(refused_for_good(status), "{status}");
        }
    }
}
