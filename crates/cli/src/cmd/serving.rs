//! What the serving subcommands (`game-server`, `sidecar`) share: why a start failed and with
//! which exit code, the admin secret from the environment, the stop signal, and the resolver
//! their flags describe, and the flags of live sessions.

use std::time::Duration;

use clap::Args;

use token_resolver::{PlainHttp, RedisTier, Resolver, ResolverBuilder};
use token_resolver_game_server::AdminSecret;

/// Why the server did not start: what to print, and the exit code.
pub(crate) struct StartFailed {
    pub(crate) message: String,
    pub(crate) exit: u8,
}

impl StartFailed {
    /// A usage error (exit 2): a flag, the environment or the shared tier is wrong.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        StartFailed {
            message: message.into(),
            exit: 2,
        }
    }

    /// The process cannot do its job (exit 1): a port cannot be bound, a recorder installed.
    pub(crate) fn fatal(message: impl Into<String>) -> Self {
        StartFailed {
            message: message.into(),
            exit: 1,
        }
    }
}

/// The secret of `POST /admin/revoke`, from `TOKEN_RESOLVER_ADMIN_TOKEN`; none when unset
/// (revocation is off), a usage error when too short.
pub(crate) fn admin_secret() -> Result<Option<AdminSecret>, String> {
    match std::env::var("TOKEN_RESOLVER_ADMIN_TOKEN") {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err("TOKEN_RESOLVER_ADMIN_TOKEN is not valid UTF-8".to_owned())
        }
        Ok(secret) => AdminSecret::new(secret)
            .map(Some)
            .map_err(|e| format!("TOKEN_RESOLVER_ADMIN_TOKEN: {e}")),
    }
}

/// SIGTERM (what an orchestrator sends) or Ctrl-C. On unix the handlers are installed when this
/// is called, not when the future is first polled: a caller takes it before it says it is ready
/// (its banner), so that a SIGTERM sent as soon as the banner is read drains the process
/// instead of killing it. One sent during start-up waits for the start to finish (it is
/// bounded), then drains.
pub(crate) fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        // Each stream that could be installed is waited on; one that could not never fires.
        // tokio keeps a handler once installed, so a stream must not be dropped while the
        // process runs: a SIGTERM it caught would then be ignored.
        let term = signal(SignalKind::terminate()).ok();
        let interrupt = signal(SignalKind::interrupt()).ok();
        async move {
            let term = async {
                match term {
                    Some(mut term) => {
                        term.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let interrupt = async {
                match interrupt {
                    Some(mut interrupt) => {
                        interrupt.recv().await;
                    }
                    None => {
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
            };
            tokio::select! {
                () = term => {}
                () = interrupt => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Where the resolver may resolve, in `game-server` and `sidecar` alike.
#[derive(Debug, Args)]
pub(crate) struct ResolverArgs {
    /// The default authUrl ("user resource acquisition API URL"): for connects, rooms and
    /// resolves without one. Required while auth is required.
    #[arg(long, value_name = "URL")]
    pub(crate) auth_url: Option<String>,
    /// A further authUrl rooms and resolves may name (repeatable); every room's authUrl must
    /// be allowed.
    #[arg(long, value_name = "URL")]
    pub(crate) allow_auth_url: Vec<String>,
    /// Permit http:// to non-loopback auth APIs (sends tokens in the clear).
    #[arg(long)]
    pub(crate) allow_insecure_http: bool,
}

impl ResolverArgs {
    /// Where `--allow-insecure-http` lets an authUrl use plain `http://`.
    pub(crate) fn plain_http(&self) -> PlainHttp {
        PlainHttp::allowed_if(self.allow_insecure_http)
    }
}

impl ResolverArgs {
    /// `builder` with these flags, the leeway of `live` on expiries, and the shared tier when
    /// one is given; a usage error names what is wrong.
    pub(crate) fn build(
        &self,
        builder: ResolverBuilder,
        live: &LiveArgs,
        tier: Option<RedisTier>,
    ) -> Result<Resolver, String> {
        let mut builder = builder
            .allow_insecure_http(self.allow_insecure_http)
            .clock_skew(Duration::from_secs(live.clock_skew));
        if let Some(url) = &self.auth_url {
            builder = builder.default_auth_url(url);
        }
        for url in &self.allow_auth_url {
            builder = builder.allow_auth_url(url);
        }
        if let Some(tier) = tier {
            builder = builder.shared_cache(tier);
        }
        builder.build().map_err(|e| e.to_string())
    }
}

/// How live sessions are kept, in `game-server` and `sidecar` alike.
#[derive(Debug, Args)]
pub(crate) struct LiveArgs {
    /// Leeway, in seconds, on every token expiry (an answer's `exp`, a JWT's `exp`): a token
    /// is valid until its expiry plus this, and a session is asked to refresh then.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub(crate) clock_skew: u64,
    /// Seconds a session whose token expired has to refresh after reauth_required.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) reauth_grace: u64,
    /// Re-resolve each session's tokens every SECS seconds (through the cache) and end the
    /// sessions whose token is rejected; off unless given.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) revalidate: Option<u64>,
    /// Re-checks begun per second across the sessions, at most, after revocations may have
    /// been missed (a lost channel, a gap past the stream): a steady trickle, not a stampede.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) recheck_rate: u32,
    /// Seconds a session whose re-check gets no answer (the integrator overloaded, timing out
    /// or down) stays live before it is ended with auth_unavailable; without it, as long as the
    /// outage lasts. An outage never counts as "still valid".
    #[arg(long, value_name = "SECS")]
    pub(crate) unverified_grace: Option<u64>,
}
