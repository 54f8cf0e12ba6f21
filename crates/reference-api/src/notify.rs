//! Telling game servers of revocations: `POST {target}/admin/revoke` with the admin secret as
//! bearer, `{"access_token": "…"}` for each live token of a session that logged out and
//! `{"user_id": N}` for a banned user (no `auth_url`: each game server's default).
//!
//! Notifications run in the background: the logout or the ban that caused them never waits
//! for them and never fails because of them. Each is tried up to [`TRIES`] times with a
//! doubling backoff (about 7.5 s of waiting in all), each try with a short deadline; a game
//! server that refuses the call for good (400, 401, 403, 404) is not retried. A batch (one
//! logout's tokens, or one ban) is one task per target, and at most
//! [`MAX_BATCHES_IN_FLIGHT`] are in flight per target: past that a batch is dropped for that
//! target and logged. The bound is per target so that one game server that is down (whose
//! batches each wait out every try) cannot take the places of the others.
//! Neither the tokens nor the secret are ever logged.
//!
//! It does not own deciding what to revoke: `handlers` and `admin` do.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, StatusCode};
use tokio::sync::Semaphore;
use url::Url;

use super::config::{notify_url, AdminSecret, ApiConfigError};

/// Tries per revocation and target.
pub(super) const TRIES: u32 = 5;
/// The wait after the first failed try; it doubles after each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Deadline of one try, connection included.
const TRY_TIMEOUT: Duration = Duration::from_secs(2);
/// Deadline to connect, within [`TRY_TIMEOUT`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Batches being delivered to one target at once, at most.
pub(super) const MAX_BATCHES_IN_FLIGHT: usize = 256;

/// One revocation, the body of one `/admin/revoke` call. `Debug` never shows the token.
pub(super) enum Revocation {
    /// One access token, and every session it opened.
    Token(String),
    /// Every session of one user.
    User(i64),
}

impl Revocation {
    /// The JSON body.
    fn body(&self) -> String {
        match self {
            Revocation::Token(token) => serde_json::json!({ "access_token": token }),
            Revocation::User(id) => serde_json::json!({ "user_id": id }),
        }
        .to_string()
    }
}

impl fmt::Debug for Revocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revocation::Token(_) => f.write_str("Token([redacted])"),
            Revocation::User(id) => write!(f, "User({id})"),
        }
    }
}

/// The game servers to tell, and how.
pub(super) struct Notifier {
    /// No proxy, no redirects, a deadline per try.
    client: reqwest::Client,
    /// Each target's `/admin/revoke` URL, and one permit per batch in flight to it.
    targets: Vec<(Url, Arc<Semaphore>)>,
    /// The bearer of every call.
    secret: AdminSecret,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let targets: Vec<&str> = self.targets.iter().map(|(url, _)| url.as_str()).collect();
        f.debug_struct("Notifier")
            .field("targets", &targets)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// How one revocation's delivery to one target ended.
enum Delivery {
    /// The game server took it.
    Taken,
    /// The game server refused it for good; the next ones may still be taken.
    Refused,
    /// Every try failed: the target is down or overloaded.
    Unreachable,
}

impl Notifier {
    /// A notifier for `targets` (game servers' admin base URLs) with `secret`.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::NotifyUrl`] for a target that is not an admin base URL,
    /// [`ApiConfigError::NotifyClient`] if the HTTP client cannot be built.
    pub(super) fn new(targets: &[String], secret: AdminSecret) -> Result<Self, ApiConfigError> {
        let targets = targets
            .iter()
            .map(|target| {
                let in_flight = Arc::new(Semaphore::new(MAX_BATCHES_IN_FLIGHT));
                notify_url(target).map(|url| (url, in_flight))
            })
            .collect::<Result<_, _>>()?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TRY_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(ApiConfigError::NotifyClient)?;
        Ok(Notifier {
            client,
            targets,
            secret,
        })
    }

    /// Delivers `revocations` to every target in the background, in order. Returns at once.
    pub(super) fn send(&self, revocations: Vec<Revocation>) {
        if revocations.is_empty() {
            return;
        }
        let batch: Arc<[Revocation]> = revocations.into();
        for (target, in_flight) in &self.targets {
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                tracing::warn!(
                    target = %target,
                    revocations = batch.len(),
                    "too many notifications in flight: these revocations are dropped for this \
                     game server"
                );
                continue;
            };
            let (client, target) = (self.client.clone(), target.clone());
            let (secret, batch) = (self.secret.clone(), batch.clone());
            tokio::spawn(async move {
                let _permit = permit;
                deliver_batch(&client, &target, &secret, &batch).await;
            });
        }
    }
}

/// Delivers a batch to one target in order; gives up on the rest once one is undeliverable.
async fn deliver_batch(
    client: &reqwest::Client,
    target: &Url,
    secret: &AdminSecret,
    batch: &[Revocation],
) {
    for (i, revocation) in batch.iter().enumerate() {
        if let Delivery::Unreachable = deliver(client, target, secret, revocation).await {
            tracing::warn!(
                target = %target,
                undelivered = batch.len() - i,
                tries = TRIES,
                "game server unreachable: revocations not delivered"
            );
            return;
        }
    }
}

/// Delivers one revocation to one target, retrying what may pass later.
async fn deliver(
    client: &reqwest::Client,
    target: &Url,
    secret: &AdminSecret,
    revocation: &Revocation,
) -> Delivery {
    let body = revocation.body();
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=TRIES {
        let sent = client
            .post(target.clone())
            .bearer_auth(secret.expose())
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        match sent.map(|response| response.status()) {
            Ok(status) if status.is_success() => {
                tracing::debug!(target = %target, attempt, "revocation delivered");
                return Delivery::Taken;
            }
            Ok(status) if refused_for_good(status) => {
                tracing::warn!(
                    target = %target,
                    status = status.as_u16(),
                    "game server refused the revocation (check its admin secret and URL)"
                );
                return Delivery::Refused;
            }
            Ok(status) => {
                tracing::debug!(target = %target, attempt, status = status.as_u16(), "revocation not taken yet");
            }
            Err(error) => {
                tracing::debug!(target = %target, attempt, error = %error.without_url(), "revocation not delivered yet");
            }
        }
        if attempt < TRIES {
            let jitter = 0.8 + fastrand::f64() * 0.4;
            tokio::time::sleep(backoff.mul_f64(jitter)).await;
            backoff *= 2;
        }
    }
    Delivery::Unreachable
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
