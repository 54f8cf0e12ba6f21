//! Telling game servers of revocations: `POST {target}/admin/revoke` with the admin secret as
//! bearer, `{"user_id": N, "session": "…", "auth_url": "…"}` when a session logs out (the `sid`
//! that `/api/user` answers for its tokens: one call however many tokens it took) and
//! `{"user_id": N, "auth_url": "…"}` when a user is banned. `auth_url` is this API's public
//! base URL ([`ApiConfig::public_url`](super::ApiConfig::public_url)), so that a game server
//! revokes the sessions of rooms on this integrator whatever its own default authUrl is.
//!
//! Each target has an outbox and one worker delivering from it, in the background: the logout
//! or the ban never waits for it. The outbox is bounded and coalescing:
//!
//! - bans go first and are never dropped: one per user, and past [`MAX_PENDING_BANS`] they
//!   widen into one `{"all": true}` (every cached answer on the game server re-resolved), which
//!   revokes them all;
//! - logouts wait behind the bans, one per session, at most [`MAX_PENDING_LOGOUTS`]: past that
//!   the oldest is dropped and logged (its tokens still end at their expiry);
//! - a delivery that fails is retried with a doubling backoff (capped at [`MAX_BACKOFF`]) until
//!   it is taken, refused for good (400, 401, 403, 404, 405: logged), or older than the retry
//!   window ([`ApiConfig::notify_retry_for`](super::ApiConfig::notify_retry_for)): then dropped
//!   and logged as undelivered.
//!
//! What is pending per target is in [`Notifier::pending`] (`GET /api/admin/notifications`).
//! Neither the secret nor any token is ever logged.
//!
//! It does not own deciding what to revoke: `handlers` and `admin` do.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};
use serde::Serialize;
use tokio::sync::Notify;
use url::Url;

use super::config::{notify_url, AdminSecret, ApiConfigError};

/// The wait after the first failed try; it doubles after each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between two tries: a healed path is used within this.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Deadline of one try, connection included.
const TRY_TIMEOUT: Duration = Duration::from_secs(2);
/// Deadline to connect, within [`TRY_TIMEOUT`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bans pending for one target before they widen into one revocation of everything.
pub(super) const MAX_PENDING_BANS: usize = 100_000;
/// Logouts pending for one target before the oldest is dropped.
pub(super) const MAX_PENDING_LOGOUTS: usize = 100_000;

/// One revocation, the body of one `/admin/revoke` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Notice {
    /// Every session of one user: a ban.
    User(i64),
    /// One of the user's sessions, by its public id (`sid`): a logout.
    Session { user_id: i64, session: Arc<str> },
    /// Every cached answer: what bans widen into when too many are pending.
    All,
}

impl Notice {
    /// The JSON body, naming `auth_url` when it is known.
    fn body(&self, auth_url: Option<&str>) -> String {
        let mut body = match self {
            Notice::User(user_id) => serde_json::json!({ "user_id": user_id }),
            Notice::Session { user_id, session } => {
                serde_json::json!({ "user_id": user_id, "session": &**session })
            }
            Notice::All => return serde_json::json!({ "all": true }).to_string(),
        };
        if let Some(auth_url) = auth_url {
            body["auth_url"] = auth_url.into();
        }
        body.to_string()
    }
}

/// What waits to be delivered to one target.
#[derive(Default)]
struct Outbox {
    /// Bans waiting, oldest first, with when each was made.
    bans: VecDeque<(i64, Instant)>,
    /// The users in `bans`, so that a second ban of one is not queued twice.
    banned: HashSet<i64>,
    /// Bans widened into one revocation of everything, since this moment.
    all_since: Option<Instant>,
    /// Logouts waiting, oldest first.
    logouts: VecDeque<(Notice, Instant)>,
    /// Revocations taken by the game server so far.
    delivered: u64,
    /// Revocations given up on: logouts dropped at the bound, and any past the retry window.
    dropped: u64,
    /// Why the last failed try failed, without any secret.
    last_error: Option<String>,
}

impl Outbox {
    /// Queues `notice`, coalescing and bounding as the module says.
    fn push(&mut self, notice: Notice, now: Instant) {
        match notice {
            Notice::All => {
                self.all_since.get_or_insert(now);
            }
            Notice::User(_) if self.all_since.is_some() => {}
            Notice::User(user_id) if self.banned.insert(user_id) => {
                self.bans.push_back((user_id, now));
                if self.bans.len() > MAX_PENDING_BANS {
                    let oldest = self.bans.front().map_or(now, |&(_, at)| at);
                    tracing::warn!(
                        pending = self.bans.len(),
                        "too many bans pending for one game server: they become one revocation \
                         of every cached answer"
                    );
                    self.bans.clear();
                    self.banned.clear();
                    self.all_since = Some(oldest);
                }
            }
            Notice::User(_) => {}
            Notice::Session { user_id, .. } if self.banned.contains(&user_id) => {}
            session => {
                if self.logouts.len() >= MAX_PENDING_LOGOUTS {
                    self.logouts.pop_front();
                    self.dropped += 1;
                    tracing::warn!(
                        pending = MAX_PENDING_LOGOUTS,
                        "too many logouts pending for one game server: the oldest is dropped"
                    );
                }
                self.logouts.push_back((session, now));
            }
        }
    }

    /// The next notice to deliver (everything first, then bans, then logouts), after dropping
    /// what is older than `retry_for`.
    fn next(&mut self, now: Instant, retry_for: Duration) -> Option<Notice> {
        let expired = |at: Instant| now.saturating_duration_since(at) > retry_for;
        if self.all_since.is_some_and(expired) {
            self.all_since = None;
            self.give_up(1);
        }
        while let Some(&(user_id, at)) = self.bans.front() {
            if !expired(at) {
                break;
            }
            self.bans.pop_front();
            self.banned.remove(&user_id);
            self.give_up(1);
        }
        let stale = self
            .logouts
            .iter()
            .take_while(|(_, at)| expired(*at))
            .count();
        if stale > 0 {
            self.logouts.drain(..stale);
            self.give_up(stale);
        }
        if self.all_since.is_some() {
            Some(Notice::All)
        } else if let Some(&(user_id, _)) = self.bans.front() {
            Some(Notice::User(user_id))
        } else {
            self.logouts.front().map(|(notice, _)| notice.clone())
        }
    }

    /// Takes `notice` out once it was delivered or refused for good, unless it went meanwhile.
    fn done(&mut self, notice: &Notice) {
        match notice {
            Notice::All => self.all_since = None,
            Notice::User(user_id) => {
                if self.bans.front().is_some_and(|(id, _)| id == user_id) {
                    self.bans.pop_front();
                    self.banned.remove(user_id);
                }
            }
            Notice::Session { .. } => {
                if self.logouts.front().is_some_and(|(n, _)| n == notice) {
                    self.logouts.pop_front();
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
        usize::from(self.all_since.is_some()) + self.bans.len() + self.logouts.len()
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
    /// Notifications given up on so far (dropped at the bound or past the retry window).
    pub dropped: u64,
    /// Why the last failed try failed.
    pub last_error: Option<String>,
}

/// One game server, its outbox and its worker.
struct Target {
    /// Its `/admin/revoke` URL.
    url: Url,
    outbox: Mutex<Outbox>,
    /// Wakes the worker when a notice is queued.
    queued: Notify,
    /// The worker, started by the first notice; aborted when the notifier goes.
    worker: OnceLock<tokio::task::JoinHandle<()>>,
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
            if let Some(worker) = target.worker.get() {
                worker.abort();
            }
        }
    }
}

/// How one try ended.
enum Try {
    /// Taken, or refused for good: the next notice may go.
    Done,
    /// Not taken yet: try again later.
    Again(String),
}

impl Notifier {
    /// A notifier for `targets` (game servers' admin base URLs) with `secret`, retrying each
    /// notice for `retry_for`, naming `public_url` (if known yet) as `auth_url`.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::NotifyUrl`] for a target that is not an admin base URL,
    /// [`ApiConfigError::NotifyClient`] if the HTTP client cannot be built.
    pub(super) fn new(
        targets: &[String],
        secret: AdminSecret,
        retry_for: Duration,
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
                        worker: OnceLock::new(),
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
            }),
        })
    }

    /// Names `base_url` as `auth_url` in every notice, unless a public URL was configured.
    pub(super) fn default_auth_url(&self, base_url: &str) {
        let _ = self.delivery.auth_url.set(Arc::from(base_url));
    }

    /// Queues `notice` for every target. Returns at once.
    pub(super) fn send(&self, notice: Notice) {
        let now = Instant::now();
        for target in &self.targets {
            target.outbox().push(notice.clone(), now);
            target
                .worker
                .get_or_init(|| tokio::spawn(work(target.clone(), self.delivery.clone())));
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
                    outbox.all_since,
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
                    revoke_all: outbox.all_since.is_some(),
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

/// Delivers `target`'s outbox, one notice at a time, for as long as the notifier lives.
async fn work(target: Arc<Target>, delivery: Arc<Delivery>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let next = target.outbox().next(Instant::now(), delivery.retry_for);
        let Some(notice) = next else {
            target.queued.notified().await;
            continue;
        };
        match try_once(&delivery, &target.url, &notice).await {
            Try::Done => {
                let mut outbox = target.outbox();
                outbox.done(&notice);
                outbox.delivered += 1;
                backoff = FIRST_BACKOFF;
            }
            Try::Again(why) => {
                target.outbox().last_error = Some(why);
                let jitter = 0.8 + fastrand::f64() * 0.4;
                tokio::time::sleep(backoff.mul_f64(jitter)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One try at delivering `notice` to `url`.
async fn try_once(delivery: &Delivery, url: &Url, notice: &Notice) -> Try {
    let auth_url = delivery.auth_url.get().map(|url| &**url);
    let sent = delivery
        .client
        .post(url.clone())
        .bearer_auth(delivery.secret.expose())
        .header(header::CONTENT_TYPE, "application/json")
        .body(notice.body(auth_url))
        .send()
        .await;
    match sent.map(|response| response.status()) {
        Ok(status) if status.is_success() => {
            tracing::debug!(target = %url, "revocation delivered");
            Try::Done
        }
        Ok(status) if refused_for_good(status) => {
            tracing::warn!(
                target = %url,
                status = status.as_u16(),
                "game server refused the revocation (check its admin secret and URL)"
            );
            Try::Done
        }
        Ok(status) => {
            tracing::debug!(target = %url, status = status.as_u16(), "revocation not taken yet");
            Try::Again(format!("answered {status}"))
        }
        Err(error) => {
            let error = error.without_url();
            tracing::debug!(target = %url, %error, "revocation not delivered yet");
            Try::Again(error.to_string())
        }
    }
}

/// Statuses that another try would not change.
fn refused_for_good(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_REQUEST
            | StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN
            | StatusCode::NOT_FOUND
            | StatusCode::METHOD_NOT_ALLOWED
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

    #[test]
    fn bans_go_before_logouts_and_a_second_ban_of_one_user_is_not_queued() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(logout(1, "a"), now);
        outbox.push(Notice::User(2), now);
        outbox.push(Notice::User(2), now);
        assert_eq!(outbox.pending(), 2);
        assert_eq!(outbox.next(now, Duration::MAX), Some(Notice::User(2)));
        outbox.done(&Notice::User(2));
        assert_eq!(outbox.next(now, Duration::MAX), Some(logout(1, "a")));
    }

    #[test]
    fn a_logout_of_a_banned_user_waiting_is_covered_by_the_ban() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(Notice::User(7), now);
        outbox.push(logout(7, "s"), now);
        assert_eq!(outbox.pending(), 1);
    }

    #[test]
    fn too_many_bans_widen_into_one_revocation_of_everything_and_none_is_dropped() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for user_id in 0..=MAX_PENDING_BANS as i64 {
            outbox.push(Notice::User(user_id), now);
        }
        assert_eq!((outbox.pending(), outbox.dropped), (1, 0));
        assert_eq!(outbox.next(now, Duration::MAX), Some(Notice::All));
    }

    #[test]
    fn too_many_logouts_drop_the_oldest() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        for i in 0..=MAX_PENDING_LOGOUTS {
            outbox.push(logout(1, &i.to_string()), now);
        }
        assert_eq!((outbox.pending(), outbox.dropped), (MAX_PENDING_LOGOUTS, 1));
        assert_eq!(outbox.next(now, Duration::MAX), Some(logout(1, "1")));
    }

    #[test]
    fn notices_older_than_the_retry_window_are_given_up_on() {
        let mut outbox = Outbox::default();
        let then = Instant::now();
        outbox.push(Notice::User(1), then);
        outbox.push(logout(2, "x"), then);
        let later = then + Duration::from_secs(11);
        outbox.push(logout(3, "y"), later);
        assert_eq!(
            outbox.next(later, Duration::from_secs(10)),
            Some(logout(3, "y"))
        );
        assert_eq!((outbox.pending(), outbox.dropped), (1, 2));
    }

    #[test]
    fn a_notice_that_went_meanwhile_is_not_taken_out_twice() {
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push(logout(1, "a"), now);
        outbox.push(logout(1, "b"), now);
        outbox.done(&logout(1, "b"));
        assert_eq!(outbox.pending(), 2, "b was not at the front");
    }

    #[test]
    fn the_body_names_the_auth_url_and_never_more() {
        assert_eq!(
            logout(4, "sid").body(Some("https://api.example")),
            r#"{"auth_url":"https://api.example","session":"sid","user_id":4}"#
        );
        assert_eq!(Notice::User(4).body(None), r#"{"user_id":4}"#);
        assert_eq!(Notice::All.body(Some("x")), r#"{"all":true}"#);
    }
}
