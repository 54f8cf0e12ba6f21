//! The four connection forms, from a [`RedisTier`] to the `redis` crate's clients: one server
//! (`redis://` or `rediss://`, through a `ConnectionManager`), a master found through
//! Sentinel (`SentinelClient`, asked again after a failover), and a Redis Cluster
//! (`cluster_async::ClusterConnection`, which follows `MOVED`/`ASK` by itself).
//!
//! It owns building the clients (credentials filled in where a URL has none, the private CA,
//! timeouts), establishing a connection off the caller's deadline, forgetting one that broke,
//! the revocation stream's reading connection, and [`RedisTier::check`], which connects once on
//! demand. What is stored where is the rest of the `redis` module's business.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError,
    RedisResult, TlsCertificates, TlsMode,
};

use super::conn::Conn;
use super::error::RedisTierError;
use super::tier::{redact_url, RedisTier, Target};
use crate::error::ConfigError;

impl RedisTier {
    /// Connects once, within `timeout`, and asks Redis for a `PING`: what a game server does at
    /// start to refuse a configuration that cannot work (an untrusted certificate, a wrong
    /// password, a master name no sentinel knows) before it takes players.
    ///
    /// # Errors
    ///
    /// A [`RedisTierError`] saying what is wrong; [`RedisTierError::is_config`] tells a
    /// configuration to fix from a Redis that is only down for now (the tier, once running,
    /// keeps trying by itself and resolutions go on through the API meanwhile).
    pub async fn check(&self, timeout: Duration) -> Result<(), RedisTierError> {
        let backend = Backend::new(self).map_err(RedisTierError::Config)?;
        match tokio::time::timeout(timeout, backend.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(RedisTierError::from_redis(&e, self.master_name())),
            Err(_) => Err(RedisTierError::Unreachable {
                detail: format!("no answer within {timeout:?}"),
            }),
        }
    }

    /// The master's name, in Sentinel form.
    fn master_name(&self) -> Option<&str> {
        match &self.target {
            Target::Sentinel { master, .. } => Some(master),
            Target::Server(_) | Target::Cluster(_) => None,
        }
    }
}

/// The longest a blocking read of the revocation stream waits for its answer: it blocks for
/// a second or two, far less than this.
pub(super) const READ_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How this node reaches Redis, with its connection once made.
pub(super) struct Backend {
    form: Form,
    /// Deadline for one command (the caller's deadline bounds the whole operation too).
    op_timeout: Duration,
}

/// The per-form clients.
enum Form {
    /// One server; the manager reconnects to it by itself when its connection fails, and is
    /// made anew when it goes silent (a half-open link, which it would keep for ever).
    Server {
        /// Boxed: the largest of the forms' clients.
        client: Box<Client>,
        manager: Mutex<Option<ConnectionManager>>,
    },
    /// The master the sentinels name; asked again whenever its connection breaks.
    Sentinel {
        sentinel: Arc<tokio::sync::Mutex<SentinelClient>>,
        live: Slot<MultiplexedConnection>,
    },
    /// A cluster; the connection keeps its slot map and its node connections by itself.
    Cluster {
        /// Boxed: far larger than the other forms' clients.
        client: Box<ClusterClient>,
        /// The same nodes, with a response deadline long enough for the revocation stream's
        /// blocking reads.
        reader: Box<ClusterClient>,
        live: Slot<ClusterConnection>,
    },
}

impl Backend {
    /// The clients `tier` describes; nothing is connected yet.
    pub(super) fn new(tier: &RedisTier) -> Result<Backend, ConfigError> {
        let certs = certificates(tier)?;
        let form = match &tier.target {
            Target::Server(url) => Form::Server {
                client: Box::new(client_for(node_info(url, tier)?, certs.as_ref())?),
                manager: Mutex::new(None),
            },
            Target::Sentinel { sentinels, master } => Form::Sentinel {
                sentinel: Arc::new(tokio::sync::Mutex::new(sentinel_client(
                    sentinels, master, tier, certs,
                )?)),
                live: Slot::default(),
            },
            Target::Cluster(urls) => {
                let infos = urls
                    .iter()
                    .map(|url| node_info(url, tier))
                    .collect::<Result<Vec<_>, _>>()?;
                if infos.is_empty() {
                    return Err(invalid("a cluster needs at least one node URL"));
                }
                let build = |response_timeout: Duration| {
                    let mut builder = ClusterClientBuilder::new(infos.clone())
                        .connection_timeout(connect_timeout(tier.op_timeout))
                        .response_timeout(response_timeout)
                        .retries(3)
                        .min_retry_wait(10)
                        .max_retry_wait(tier.op_timeout.as_millis().max(20) as u64);
                    if let Some(certs) = certs.clone() {
                        builder = builder.certs(certs);
                    }
                    builder
                        .build()
                        .map_err(|e| invalid(format!("cluster nodes: {e}")))
                };
                Form::Cluster {
                    client: Box::new(build(tier.op_timeout)?),
                    reader: Box::new(build(READ_RESPONSE_TIMEOUT)?),
                    live: Slot::default(),
                }
            }
        };
        Ok(Backend {
            form,
            op_timeout: tier.op_timeout,
        })
    }

    /// A connection, made now if there is none: the connecting runs in a task of its own, so
    /// a caller that gives up waiting does not waste it for the next one.
    pub(super) async fn connection(&self) -> RedisResult<Conn> {
        let op_timeout = self.op_timeout;
        match &self.form {
            Form::Server { client, manager } => {
                let mut manager = manager.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(manager) = &*manager {
                    return Ok(Conn::Manager(manager.clone()));
                }
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout(op_timeout)))
                    .set_response_timeout(Some(op_timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(op_timeout);
                let made = ConnectionManager::new_lazy_with_config(Client::clone(client), config)?;
                Ok(Conn::Manager(manager.insert(made).clone()))
            }
            Form::Sentinel { sentinel, live } => {
                let sentinel = sentinel.clone();
                live.get(move || {
                    within(connect_timeout(op_timeout), async move {
                        let client = sentinel.lock().await.async_get_client().await?;
                        let config = AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(connect_timeout(op_timeout)))
                            .set_response_timeout(Some(op_timeout));
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                    })
                })
                .await
                .map(Conn::Multiplexed)
            }
            Form::Cluster { client, live, .. } => {
                let client = ClusterClient::clone(client);
                live.get(move || {
                    within(connect_timeout(op_timeout), async move {
                        client.get_async_connection().await
                    })
                })
                .await
                .map(Conn::Cluster)
            }
        }
    }

    /// Forgets the connection after `error` (or a timeout, `None`) showed it may be gone, so the
    /// next operation asks the sentinels where the master is now; says whether it did. One
    /// server's manager reconnects by itself after an error, but not after a silence: it is
    /// dropped then, and the next operation connects anew (without a retry within this one's
    /// deadline). A cluster reconnects by itself.
    pub(super) fn lost(&self, error: Option<&RedisError>) -> bool {
        if let Form::Server { manager, .. } = &self.form {
            if error.is_none_or(RedisError::is_timeout) {
                *manager.lock().unwrap_or_else(PoisonError::into_inner) = None;
            }
            return false;
        }
        if let Form::Sentinel { live, .. } = &self.form {
            let broken = error.is_none_or(|e| {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_unrecoverable_error()
                    || e.is_timeout()
                    || e.code() == Some("READONLY")
            });
            if broken {
                live.forget();
            }
            return broken;
        }
        false
    }

    /// One `PING` through a connection made for it.
    pub(super) async fn ping(&self) -> RedisResult<()> {
        let mut conn = self.connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok(())
    }

    /// A connection of its own for the revocation stream's blocking reads, each answered within
    /// `response_timeout`: a blocked read on the shared connection would hold up every other
    /// operation queued behind it.
    pub(super) async fn reader(&self, response_timeout: Duration) -> RedisResult<Conn> {
        let connect = connect_timeout(self.op_timeout);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(response_timeout));
        within(connect, async {
            match &self.form {
                Form::Server { client, .. } => client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(Conn::Multiplexed),
                Form::Sentinel { sentinel, .. } => {
                    let client = sentinel.lock().await.async_get_client().await?;
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map(Conn::Multiplexed)
                }
                Form::Cluster { reader, .. } => {
                    reader.get_async_connection().await.map(Conn::Cluster)
                }
            }
        })
        .await
    }
}

/// Long enough to make a connection (TLS, Sentinel look-up) that one operation's deadline may
/// not cover; the operation itself still waits no longer than its deadline.
fn connect_timeout(op_timeout: Duration) -> Duration {
    (op_timeout * 20).max(Duration::from_secs(1))
}

/// `connecting`, failed with a timeout error past `limit`.
async fn within<C>(
    limit: Duration,
    connecting: impl std::future::Future<Output = RedisResult<C>>,
) -> RedisResult<C> {
    tokio::time::timeout(limit, connecting)
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {limit:?}"),
            )))
        })
}

fn invalid(message: impl Into<String>) -> ConfigError {
    ConfigError::new("shared_cache", message)
}

/// The private CA, checked to hold at least one PEM certificate.
fn certificates(tier: &RedisTier) -> Result<Option<TlsCertificates>, ConfigError> {
    let Some(pem) = &tier.root_certificate else {
        return Ok(None);
    };
    if !String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(invalid("root_certificate holds no PEM certificate"));
    }
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.clone()),
    }))
}

/// A node's URL parsed, with the tier's user and password where the URL has none.
fn node_info(url: &str, tier: &RedisTier) -> Result<ConnectionInfo, ConfigError> {
    let scheme_ok = url.starts_with("redis://") || url.starts_with("rediss://");
    let info = url
        .into_connection_info()
        .ok()
        .filter(|_| scheme_ok)
        .ok_or_else(|| {
            invalid(format!(
                "not a redis:// or rediss:// URL: {}",
                redact_url(url)
            ))
        })?;
    let mut settings = info.redis_settings().clone();
    if settings.username().is_none() {
        if let Some(user) = &tier.username {
            settings = settings.set_username(user);
        }
    }
    if settings.password().is_none() {
        if let Some(password) = &tier.password {
            settings = settings.set_password(password);
        }
    }
    Ok(info.set_redis_settings(settings))
}

/// A client for one node, trusting the private CA when it speaks TLS.
fn client_for(
    info: ConnectionInfo,
    certs: Option<&TlsCertificates>,
) -> Result<Client, ConfigError> {
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    let client = match certs {
        Some(certs) if tls => Client::build_with_tls(info, certs.clone()),
        _ => Client::open(info),
    };
    client.map_err(|e| invalid(format!("Redis client: {e}")))
}

/// The sentinel client: the sentinels' own credentials from their URLs, the master's from the
/// tier, TLS to the master when the sentinels speak it.
fn sentinel_client(
    urls: &[String],
    master: &str,
    tier: &RedisTier,
    certs: Option<TlsCertificates>,
) -> Result<SentinelClient, ConfigError> {
    if urls.is_empty() {
        return Err(invalid("Sentinel needs at least one sentinel URL"));
    }
    if master.is_empty() {
        return Err(invalid("Sentinel needs the master's name"));
    }
    let sentinels = urls
        .iter()
        .map(|url| {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|e| invalid(format!("sentinel {}: {e}", redact_url(url))))?;
            let auth = info.redis_settings().clone();
            let client = client_for(info, certs.as_ref())?;
            Ok((client.get_connection_info().addr().clone(), auth))
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    let tls = matches!(sentinels[0].0, ConnectionAddr::TcpTls { .. });
    let mut builder = SentinelClientBuilder::new(
        sentinels.iter().map(|(addr, _)| addr.clone()),
        master,
        SentinelServerType::Master,
    )
    .map_err(|e| invalid(format!("Sentinel: {e}")))?;
    if let Some(auth) = sentinels
        .iter()
        .map(|(_, auth)| auth)
        .find(|a| a.password().is_some())
    {
        if let Some(user) = auth.username() {
            builder = builder.set_client_to_sentinel_username(user);
        }
        builder = builder.set_client_to_sentinel_password(auth.password().unwrap_or_default());
    }
    if tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
        if let Some(certs) = certs {
            builder = builder.set_client_to_redis_certificates(certs);
        }
    }
    if let Some(user) = &tier.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &tier.password {
        builder = builder.set_client_to_redis_password(password);
    }
    builder
        .build()
        .map_err(|e| invalid(format!("Sentinel: {e}")))
}

/// A connection being made or made, shared by every caller until it is forgotten.
type Pending<C> = Shared<BoxFuture<'static, RedisResult<C>>>;

/// Holds the connection of a form whose client does not reconnect by itself.
struct Slot<C> {
    current: Mutex<Option<Pending<C>>>,
}

impl<C> Default for Slot<C> {
    fn default() -> Self {
        Slot {
            current: Mutex::new(None),
        }
    }
}

impl<C: Clone + Send + Sync + 'static> Slot<C> {
    /// The connection, starting `connect` in a task when there is none; a failed attempt is
    /// forgotten so the next call tries again.
    async fn get<F, Fut>(&self, connect: F) -> RedisResult<C>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = RedisResult<C>> + Send + 'static,
    {
        let pending = {
            let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            match &*current {
                Some(pending) => pending.clone(),
                None => {
                    let task = tokio::spawn(connect());
                    let pending = async move {
                        task.await.unwrap_or_else(|_| {
                            Err(RedisError::from(std::io::Error::other(
                                "the connecting task stopped",
                            )))
                        })
                    }
                    .boxed()
                    .shared();
                    *current = Some(pending.clone());
                    pending
                }
            }
        };
        let made = pending.clone().await;
        if made.is_err() {
            let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            if current.as_ref().is_some_and(|c| c.ptr_eq(&pending)) {
                *current = None;
            }
        }
        made
    }

    fn forget(&self) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_take_the_tier_password_only_where_they_have_none() {
        let tier = RedisTier::new("redis://h", "0123456789abcdef").password("from-env");
        let own = node_info("redis://u:p%40ss@h:1", &tier).unwrap();
        assert_eq!(own.redis_settings().password(), Some("p@ss"));
        let filled = node_info("redis://h:1", &tier).unwrap();
        assert_eq!(filled.redis_settings().password(), Some("from-env"));
        assert!(node_info("http://h:1", &tier).is_err());
    }
}
