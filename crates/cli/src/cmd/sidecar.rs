//! `token-resolver sidecar`: the resolver as a loopback service for game servers in other
//! languages, with the game server's settings where they apply, an optional
//! ext_authz gRPC listener and admin listener, a banner on stdout, until SIGTERM or Ctrl-C,
//! which drain it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use token_resolver::Resolver;
use token_resolver_sessions::telemetry::Metrics;
use token_resolver_sessions::{spawn_admin, AdminConfig, RunningAdmin};
use token_resolver_sidecar::{NginxCache, RunningGrpc, RunningSidecar, Sidecar, SidecarConfig};

use super::redis::{check_at_start, RedisArgs};
use super::serving::{admin_secret, stop_signal, LiveArgs, ResolverArgs, StartFailed};

/// `sidecar` arguments.
#[derive(Debug, Args)]
pub(crate) struct SidecarArgs {
    /// A TOML file of settings: its keys are these flags' long names (`auth-url = "…"`,
    /// `allow-auth-url = ["…"]`); a flag given here wins over the file.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Address of the HTTP API (/v1/resolve, /v1/events, /v1/sessions, /v1/authorize). Keep it
    /// on loopback: the game servers of this host are its callers.
    #[arg(long, default_value = "127.0.0.1:7360")]
    pub(crate) listen: SocketAddr,
    /// Address of Envoy's ext_authz gRPC service (Authorization/Check); off unless given.
    #[arg(long, value_name = "ADDR")]
    pub(crate) grpc_listen: Option<SocketAddr>,
    /// Let --listen and --grpc-listen take an address beyond loopback. Whoever reaches them
    /// can read every session's user on /v1/events, stop revocations with DELETE
    /// /v1/sessions, and test tokens on /v1/resolve: without this flag such an address is a
    /// usage error.
    #[arg(long)]
    pub(crate) allow_non_loopback: bool,
    /// Address of the admin listener (/metrics, /healthz, /readyz, /admin/revoke); off unless
    /// given.
    #[arg(long, value_name = "ADDR")]
    pub(crate) admin_listen: Option<SocketAddr>,
    /// nginx's purge location (examples/nginx, ngx_cache_purge), on loopback: nginx may then
    /// keep /v1/authorize answers, which the sidecar purges there when a revocation comes.
    /// Off unless given: every answer says `Cache-Control: no-store`.
    #[arg(long, value_name = "URL")]
    pub(crate) nginx_purge_url: Option<String>,
    /// Longest nginx may keep an answer, in seconds (shorter when the token expires sooner).
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) nginx_cache_secs: u64,
    /// Answers nginx may hold at once; past it, answers are sent uncacheable.
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    pub(crate) nginx_cache_entries: usize,
    /// A file (on tmpfs, e.g. /run/token-resolver/nginx-grants) where each answer nginx may
    /// keep is recorded first: a sidecar started anew with it takes back from nginx everything
    /// a previous one granted. Without it, those answers stay in nginx until they expire.
    #[arg(long, value_name = "PATH")]
    pub(crate) nginx_grants_file: Option<PathBuf>,
    /// Longest, in seconds, a session goes without its tokens being resolved again (through
    /// the cache) when they do not expire before: a token with no exp is checked this often.
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_unchecked: u64,
    /// Seconds the sessions are kept while no game server reads /v1/events (one that crashed
    /// without DELETE); then they are forgotten and resync is sent to the next stream. 0: kept
    /// until their tokens expire.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub(crate) reclaim_after: u64,
    /// Seconds a draining sidecar (SIGTERM, Ctrl-C) lets requests finish.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub(crate) drain_secs: u64,
    /// Where the resolver may resolve: the default authUrl and the allowlist.
    #[command(flatten)]
    pub(crate) resolver: ResolverArgs,
    /// How live sessions are kept: expiry, refresh, re-checks.
    #[command(flatten)]
    pub(crate) live: LiveArgs,
    /// The shared cache tier on Redis.
    #[command(flatten)]
    pub(crate) redis: RedisArgs,
}

/// What a started sidecar runs (`run` starts one too, before its game server).
pub(super) struct Running {
    pub(super) sidecar: RunningSidecar,
    pub(super) grpc: Option<RunningGrpc>,
    pub(super) admin: Option<RunningAdmin>,
}

/// Serves until SIGTERM or Ctrl-C, then drains and exits 0; exit 2 on a usage error, 1 when a
/// port cannot be bound.
pub(crate) async fn run(args: SidecarArgs) -> ExitCode {
    // Before anything can say it is ready: see `stop_signal`.
    let stop = stop_signal();
    let running = match start(&args).await {
        Ok(running) => running,
        Err(failed) => {
            eprintln!("error: {}", failed.message);
            return ExitCode::from(failed.exit);
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(banner(&args, &running).as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    stop.await;
    drain(running, args.drain_secs).await;
    ExitCode::SUCCESS
}

/// Lets requests in progress finish for up to `drain_secs`, then stops the admin listener.
pub(super) async fn drain(running: Running, drain_secs: u64) {
    let drain = Duration::from_secs(drain_secs);
    let _ = tokio::time::timeout(drain, async {
        if let Some(grpc) = running.grpc {
            grpc.shutdown().await;
        }
        running.sidecar.shutdown().await;
    })
    .await;
    if let Some(admin) = running.admin {
        admin.shutdown().await;
    }
}

/// The listeners' addresses checked, the metrics recorder, the secrets, the shared tier, then
/// the listeners.
pub(super) async fn start(args: &SidecarArgs) -> Result<Running, StartFailed> {
    loopback_only(args)?;
    let metrics = Metrics::install().map_err(|e| StartFailed::fatal(e.to_string()))?;
    let revoke_secret = admin_secret().map_err(StartFailed::usage)?;
    let tier = args.redis.tier().map_err(StartFailed::usage)?;
    if let Some(tier) = &tier {
        check_at_start(tier)
            .await
            .map_err(|e| StartFailed::usage(format!("shared cache (Redis): {e}")))?;
    }
    let resolver = (args.resolver)
        .build(Resolver::builder(), &args.live, tier)
        .map_err(StartFailed::usage)?;
    let nginx_cache = match (&args.nginx_purge_url, &args.nginx_grants_file) {
        (None, None) => None,
        (None, Some(_)) => {
            return Err(StartFailed::usage(
                "--nginx-grants-file needs --nginx-purge-url: without it nginx keeps nothing",
            ))
        }
        (Some(url), grants_file) => {
            let mut nginx = NginxCache::new(url)
                .map_err(|e| StartFailed::usage(format!("--nginx-purge-url: {e}")))?
                .ttl(Duration::from_secs(args.nginx_cache_secs))
                .max_entries(args.nginx_cache_entries);
            if let Some(path) = grants_file {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
                if !dir.unwrap_or(Path::new(".")).is_dir() {
                    return Err(StartFailed::usage(format!(
                        "--nginx-grants-file: the directory of {} does not exist",
                        path.display()
                    )));
                }
                nginx = nginx.grants_file(path);
            }
            Some(nginx)
        }
    };
    let config = SidecarConfig {
        nginx_cache,
        reauth_grace: Duration::from_secs(args.live.reauth_grace),
        revalidate: args.live.revalidate.map(Duration::from_secs),
        recheck_rate: args.live.recheck_rate,
        unverified_grace: args.live.unverified_grace.map(Duration::from_secs),
        max_unchecked: Duration::from_secs(args.max_unchecked),
        reclaim_after: (args.reclaim_after > 0).then(|| Duration::from_secs(args.reclaim_after)),
        ..SidecarConfig::default()
    };
    let sidecar = Sidecar::new(resolver, config);
    let bound = |flag: &'static str, addr: SocketAddr| {
        move |e: std::io::Error| {
            StartFailed::fatal(format!("cannot listen on {addr} ({flag}): {e}"))
        }
    };
    let served = sidecar.spawn(args.listen).await;
    let running = served.map_err(bound("--listen", args.listen))?;
    let grpc = match args.grpc_listen {
        Some(addr) => Some(
            sidecar
                .spawn_grpc(addr)
                .await
                .map_err(bound("--grpc-listen", addr))?,
        ),
        None => None,
    };
    let admin = match args.admin_listen {
        Some(addr) => {
            let config = AdminConfig {
                metrics: Some(metrics),
                revoke_secret,
                ..AdminConfig::default()
            };
            let admin = spawn_admin(addr, sidecar.admin_node(), config).await;
            Some(admin.map_err(bound("--admin-listen", addr))?)
        }
        None => None,
    };
    Ok(Running {
        sidecar: running,
        grpc,
        admin,
    })
}

/// `--listen` and `--grpc-listen` on loopback, or a usage error naming the flag; beyond
/// loopback with `--allow-non-loopback`, a warning naming what is then exposed.
fn loopback_only(args: &SidecarArgs) -> Result<(), StartFailed> {
    let listeners = [
        ("--listen", Some(args.listen)),
        ("--grpc-listen", args.grpc_listen),
    ];
    for (flag, addr) in listeners {
        let Some(addr) = addr.filter(|addr| !addr.ip().to_canonical().is_loopback()) else {
            continue;
        };
        if !args.allow_non_loopback {
            return Err(StartFailed::usage(format!(
                "{flag} {addr} is not a loopback address: the sidecar serves the game servers \
                 of this host; give --allow-non-loopback (allow-non-loopback = true in \
                 --config) if it must be reached from elsewhere"
            )));
        }
        tracing::warn!(
            flag,
            %addr,
            "listening beyond loopback (--allow-non-loopback): whoever reaches it can read \
             every session's id and user id on /v1/events, stop revocations with DELETE \
             /v1/sessions, and use /v1/resolve (and /v1/authorize, gRPC Check) as a token oracle"
        );
    }
    Ok(())
}

/// What the sidecar prints once it listens.
fn banner(args: &SidecarArgs, running: &Running) -> String {
    let mut banner = listening(args, running);
    banner.push_str("SIGTERM or Ctrl-C drains and stops\n");
    banner
}

/// The banner's lines on what listens where, and the default authUrl.
pub(super) fn listening(args: &SidecarArgs, running: &Running) -> String {
    let mut banner = format!(
        "sidecar listening on http://{} (POST /v1/resolve, GET /v1/events, DELETE /v1/sessions/ID, GET|POST /v1/authorize)\n",
        running.sidecar.local_addr()
    );
    if let Some(grpc) = &running.grpc {
        banner.push_str(&format!(
            "ext_authz gRPC listener on {} (envoy.service.auth.v3.Authorization/Check)\n",
            grpc.local_addr()
        ));
    }
    if let Some(admin) = &running.admin {
        banner.push_str(&format!(
            "admin listener on http://{} (/metrics, /healthz, /readyz, /admin/revoke)\n",
            admin.local_addr()
        ));
    }
    if let Some(url) = &args.resolver.auth_url {
        banner.push_str(&format!("default authUrl {url}\n"));
    }
    banner
}
