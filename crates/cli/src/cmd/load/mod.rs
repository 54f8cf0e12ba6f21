//! `token-resolver load`: a side-by-side throughput run of the resolver and of the baselines a
//! game server could use instead, printed as one table, and a fill of the cache that measures
//! the memory of one entry.
//!
//! Every row resolves the same request stream: a Zipf(s) draw over a set of players' tokens,
//! with a share of tokens never seen before (players who just logged in), from a number of
//! concurrent tasks. Rows with a cache are warmed with the token set first, so the run is the
//! steady state; they run `--rounds` times each (default 5), alternately and each time with a
//! fresh cache, and the table shows each one's median round: a row of 200,000 resolutions lasts
//! a fifth of a second, and one run of it moves by 15% on a shared machine. Their ratio is the
//! median of the per-round ratios. For each row: resolutions/s, p50 and p99 latency of one resolution, the
//! upstream calls made, the process's peak RSS during the row (`VmHWM`, reset before each
//! row), and the process's CPU time per resolution (every thread, the in-process upstream's
//! included), whose per-round ratio for the two cached rows is printed too: what a resolution
//! costs, which the machine's other tenants move less than the rate. The rows:
//!
//! - `token-resolver`: `Resolver::resolve`.
//! - `reqwest + moka (hand-written)`: a moka cache keyed by the token `String`, a reqwest POST
//!   and a serde_json parse on a miss: no coalescing, no validation, no slot limit.
//! - `reqwest, no cache`: a reqwest POST and a serde_json parse per resolution.
//! - `hyper, no cache`: a bare hyper POST per resolution, the body read but not parsed: the
//!   floor for a resolution that goes to the network (`http://` targets only).
//!
//! The target is the reference API (`reference_api`) served in-process on `127.0.0.1:0` from
//! its own thread, with tokens minted by logging in once and asking `/api/access_token` for
//! many; or an external API given by `--auth-url`, with tokens from `--tokens-file` or minted
//! the same way if it speaks the reference API's login.
//!
//! The fill resolves `--fill` distinct 43-byte tokens through the public API against an
//! in-process upstream that answers any token with a user of a 16-byte name, and reports the
//! RSS delta per entry. This module is the harness only; it changes nothing in the resolver.
//!
//! - this file: the arguments, the request stream and the table;
//! - `plan`: the request stream every row replays (Zipf over the token set, new tokens);
//! - `rows`: who resolves in a row, and running one;
//! - `fill`: the bytes-per-entry fill;
//! - `progress`: the progress bar and the process's memory readings;
//! - `storm` (`--storm`): a cold start over HTTPS, its own table;
//! - the loopback upstream and the hand-written baselines come from the binary's
//!   `token_resolver_loadgen::baselines`, which the benches measure against too.

mod fill;
mod plan;
mod progress;
mod rows;
mod storm;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use token_resolver::{Endpoint, PlainHttp, Resolver};
use token_resolver_player::IntegratorClient;
use token_resolver_reference_api::{
    ApiConfig, ReferenceApi, ServeLimits, SessionLimits, MAX_TOKENS_PER_SESSION,
};

use self::plan::{stream, Plan};
use self::progress::Progress;
use self::rows::{run_row, Subject};
use token_resolver_loadgen::baselines::{hyper_client, naive_client, HandWritten, LoopbackServer};

/// `load` arguments.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// Base URL of an external integrator API; default: the reference API, in-process.
    #[arg(long, value_name = "URL")]
    pub(crate) auth_url: Option<String>,
    /// Access tokens, one per line, for an external API that has no reference-API login.
    #[arg(long, value_name = "FILE")]
    pub(crate) tokens_file: Option<PathBuf>,
    /// User to log in as to mint tokens (reference-API login).
    #[arg(long, default_value = "alice")]
    pub(crate) username: String,
    /// Password of that user (or set TOKEN_RESOLVER_PASSWORD, which keeps it out of `ps`).
    #[arg(
        long,
        env = "TOKEN_RESOLVER_PASSWORD",
        hide_env_values = true,
        default_value = "wonderland"
    )]
    pub(crate) password: String,
    /// Permit http:// to a non-loopback --auth-url.
    #[arg(long)]
    pub(crate) allow_insecure_http: bool,
    /// Resolutions per row.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) requests: usize,
    /// Rounds of the two cached rows (the resolver, the hand-written cache), run alternately,
    /// each with a fresh cache; the table shows each one's median round, and the ratio is the
    /// median of the per-round ratios. With --storm: rounds of its three rows, likewise.
    #[arg(long, default_value_t = 5)]
    pub(crate) rounds: usize,
    /// Concurrent tasks per row.
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Distinct tokens the Zipf stream draws from.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) tokens: usize,
    /// Zipf exponent s.
    #[arg(long, default_value_t = 1.1)]
    pub(crate) zipf: f64,
    /// Share of resolutions that are of a token never seen before.
    #[arg(long, default_value_t = 0.01)]
    pub(crate) new_share: f64,
    /// Cache entries for the bytes-per-entry fill; 0 skips it.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) fill: u64,
    /// Run the cold-start storm over HTTPS instead of the table and the fill: an empty cache,
    /// --storm-tokens distinct tokens at --storm-concurrency, against the reference API over TLS.
    #[arg(long)]
    pub(crate) storm: bool,
    /// Distinct tokens in the storm, each resolved once.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) storm_tokens: usize,
    /// Concurrent tasks in the storm.
    #[arg(long, default_value_t = 512)]
    pub(crate) storm_concurrency: usize,
    /// Service time of /api/user in the storm, in milliseconds.
    #[arg(long, default_value_t = 2)]
    pub(crate) storm_latency_ms: u64,
    /// The resolver's max_concurrent_requests in the storm, and the floor's connections.
    #[arg(long, default_value_t = 64)]
    pub(crate) storm_slots: usize,
}

/// Runs the table and the fill, printing them on stdout.
pub(crate) async fn run(args: LoadArgs) -> ExitCode {
    match run_inner(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_inner(args: LoadArgs) -> Result<(), String> {
    if args.storm {
        if args.storm_tokens == 0 || args.storm_concurrency == 0 || args.storm_slots == 0 {
            return Err(
                "--storm-tokens, --storm-concurrency and --storm-slots must be at least 1".into(),
            );
        }
        return storm::run(storm::Storm {
            tokens: args.storm_tokens,
            concurrency: args.storm_concurrency,
            latency: Duration::from_millis(args.storm_latency_ms),
            slots: args.storm_slots,
            rounds: args.rounds.max(1),
        })
        .await;
    }
    if args.tokens == 0 || args.requests == 0 || args.concurrency == 0 {
        return Err("--tokens, --requests and --concurrency must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&args.new_share) || args.zipf <= 0.0 {
        return Err("--new-share must be in [0, 1] and --zipf above 0".into());
    }
    let (base, target, _server) = match &args.auth_url {
        Some(url) => (url.clone(), format!("{url} (external)"), None),
        None => {
            let api = ReferenceApi::new(loopback_api_config()).map_err(|e| e.to_string())?;
            let server = LoopbackServer::start("reference-api", move || api.router())?;
            let target = format!("{} (in-process reference API)", server.base());
            (server.base(), target, Some(server))
        }
    };
    let endpoint = Endpoint::parse(&base, PlainHttp::allowed_if(args.allow_insecure_http))
        .map_err(|e| format!("--auth-url: {e}"))?;
    let plan = Arc::new(plan(&args, &base).await?);

    println!(
        "token-resolver load: {} resolutions per row, Zipf(s={}) over {} tokens, {}% new, \
         concurrency {}, against {target}; {} cores",
        args.requests,
        args.zipf,
        args.tokens,
        args.new_share * 100.0,
        args.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!();
    println!(
        "| row | resolutions/s | p50 | p99 | upstream calls | errors | peak RSS | CPU per resolution |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let Rounds {
        ours,
        theirs,
        ratios,
        cpu_ratios,
    } = cached_rounds(&args, &base, &endpoint, &plan).await?;
    let mut throughput = Vec::new();
    for rows in [ours, theirs] {
        let row = median_row(rows);
        println!("{}", row.line());
        throughput.push((row.label, row.per_second));
    }
    for subject in uncached_subjects(&endpoint)? {
        let row = run_row(Arc::new(subject), &plan, args.concurrency).await;
        println!("{}", row.line());
        throughput.push((row.label, row.per_second));
    }
    print_ratios(&ratios, &cpu_ratios, &throughput);

    if args.fill > 0 {
        fill::fill(args.fill, args.concurrency).await?;
    }
    Ok(())
}

/// The stream every row resolves, with the tokens it names: read from `--tokens-file` or
/// minted at `base`.
async fn plan(args: &LoadArgs, base: &str) -> Result<Plan, String> {
    let new_needed = (args.requests as f64 * args.new_share).ceil() as usize;
    let needed = args.tokens + new_needed.max(1);
    let mut all_tokens = match &args.tokens_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => mint(base, &args.username, &args.password, needed).await?,
    };
    if all_tokens.len() <= args.tokens {
        return Err(format!(
            "{} tokens, need more than --tokens ({})",
            all_tokens.len(),
            args.tokens
        ));
    }
    let pool = all_tokens.split_off(args.tokens);
    if pool.len() < new_needed {
        eprintln!(
            "warning: {} new tokens for {new_needed} new-token resolutions; they repeat",
            pool.len()
        );
    }
    Ok(Plan {
        stream: stream(args.requests, args.tokens, args.zipf, args.new_share),
        tokens: all_tokens,
        pool,
    })
}

/// The ratio lines under the table: the resolver to the hand-written cache (the per-round
/// ratios, sorted: of throughput, then of CPU per resolution), and its median round to each
/// uncached row.
fn print_ratios(ratios: &[f64], cpu_ratios: &[f64], throughput: &[(&str, f64)]) {
    let rounds = ratios.len();
    let median = ratios[rounds / 2];
    println!();
    println!(
        "token-resolver / reqwest + moka (hand-written), same rounds: median {median:.2}x over \
         {rounds} rounds ({:.2}x-{:.2}x); target >= 1.0x -> {}",
        ratios[0],
        ratios[rounds - 1],
        if median >= 1.0 { "met" } else { "MISSED" }
    );
    if let (Some(low), Some(high)) = (cpu_ratios.first(), cpu_ratios.last()) {
        println!(
            "CPU per resolution, token-resolver / reqwest + moka (hand-written), same rounds: \
             median {:.2}x ({low:.2}x-{high:.2}x); lower is cheaper",
            cpu_ratios[cpu_ratios.len() / 2]
        );
    }
    if let [(_, ours), _, rest @ ..] = throughput {
        let ratios: Vec<String> = rest
            .iter()
            .map(|(label, theirs)| format!("{:.1}x {label}", ours / theirs))
            .collect();
        println!(
            "token-resolver throughput (median round): {}",
            ratios.join(", ")
        );
    }
}

/// The resolver's and the hand-written cache's rows over `--rounds` rounds.
async fn cached_rounds(
    args: &LoadArgs,
    base: &str,
    endpoint: &Endpoint,
    plan: &Arc<Plan>,
) -> Result<Rounds, String> {
    let rounds = args.rounds.max(1);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Each round with fresh caches, in alternating order, so that neither row always runs
        // on a warmer or a busier machine.
        let [resolver, hand_written] = cached_subjects(args, base, endpoint)?;
        let mut pair = [(true, resolver), (false, hand_written)];
        if round % 2 == 1 {
            pair.reverse();
        }
        for (is_ours, subject) in pair {
            let row = run_row(Arc::new(subject), plan, args.concurrency).await;
            if is_ours {
                ours.push(row)
            } else {
                theirs.push(row)
            }
        }
    }
    let ratios = sorted_per_round(&ours, &theirs, |row| Some(row.per_second));
    let cpu_ratios = sorted_per_round(&ours, &theirs, |row| {
        Some(row.cpu_per_resolution?.as_secs_f64())
    });
    Ok(Rounds {
        ours,
        theirs,
        ratios,
        cpu_ratios,
    })
}

/// `value` of the resolver's row over the hand-written cache's, round by round, sorted; rounds
/// where either has none, or the hand-written cache's is zero, are left out.
fn sorted_per_round(
    ours: &[rows::Row],
    theirs: &[rows::Row],
    value: impl Fn(&rows::Row) -> Option<f64>,
) -> Vec<f64> {
    let mut ratios: Vec<f64> = (ours.iter().zip(theirs))
        .filter_map(|(ours, theirs)| {
            let (ours, theirs) = (value(ours)?, value(theirs)?);
            (theirs > 0.0).then(|| ours / theirs)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

/// The cached rows' rounds: each row's, and the sorted per-round ratios of the resolver's
/// throughput and of its CPU per resolution to the hand-written cache's.
struct Rounds {
    ours: Vec<rows::Row>,
    theirs: Vec<rows::Row>,
    ratios: Vec<f64>,
    /// Empty where the process's CPU time cannot be read.
    cpu_ratios: Vec<f64>,
}

/// The cached rows, each with a fresh cache: the resolver and the hand-written cache.
fn cached_subjects(
    args: &LoadArgs,
    base: &str,
    endpoint: &Endpoint,
) -> Result<[Subject; 2], String> {
    let resolver = Resolver::builder()
        .default_auth_url(base)
        .allow_insecure_http(args.allow_insecure_http)
        .build()
        .map_err(|e| e.to_string())?;
    let url = endpoint.as_str().to_owned();
    Ok([
        Subject::Resolver {
            resolver,
            base: base.to_owned(),
        },
        Subject::HandWritten(HandWritten::new(url, 100_000, Duration::from_secs(60))),
    ])
}

/// The rows without a cache: the naive call, and the hyper floor for `http://` targets only.
fn uncached_subjects(endpoint: &Endpoint) -> Result<Vec<Subject>, String> {
    let url = endpoint.as_str().to_owned();
    let mut subjects = vec![Subject::Naive {
        http: naive_client(),
        url: url.clone(),
    }];
    if endpoint.url().scheme() == "http" {
        let uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        subjects.push(Subject::Hyper {
            client: Box::new(hyper_client()),
            uri,
        });
    }
    Ok(subjects)
}

/// The round whose throughput is the median of `rows`.
fn median_row(mut rows: Vec<rows::Row>) -> rows::Row {
    rows.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    let middle = rows.len() / 2;
    rows.swap_remove(middle)
}

/// Mints `n` access tokens at a reference-API-compatible `base`: a few concurrent minters over
/// enough sessions that none issues more than the reference API lets one session issue
/// ([`MAX_TOKENS_PER_SESSION`]). The logins go one after another: the reference API bounds
/// concurrent password checks and answers 429 beyond.
async fn mint(base: &str, username: &str, password: &str, n: usize) -> Result<Vec<String>, String> {
    const MINTERS: usize = 8;
    let sessions = MINTERS.max(n.div_ceil(MAX_TOKENS_PER_SESSION as usize));
    let mut clients = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let mut client = IntegratorClient::new(base).map_err(|e| e.to_string())?;
        client
            .login_password(username, password)
            .await
            .map_err(|e| format!("login as {username} at {base}: {e}"))?;
        clients.push(client);
    }
    let minted = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("minting tokens", n as u64, minted.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for m in 0..MINTERS {
        // Sessions m, m + MINTERS, ...: each mints its share of `n`, at most the cap.
        let mine: Vec<(usize, IntegratorClient)> = clients
            .iter()
            .enumerate()
            .skip(m)
            .step_by(MINTERS)
            .map(|(i, c)| (n / sessions + usize::from(i < n % sessions), c.clone()))
            .collect();
        let minted = minted.clone();
        tasks.spawn(async move {
            let mut tokens = Vec::new();
            for (count, mut client) in mine {
                for _ in 0..count {
                    let token = client
                        .fetch_access_token()
                        .await
                        .map_err(|e| format!("minting a token: {e}"))?;
                    tokens.push(token.secret().to_owned());
                    minted.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, String>(tokens)
        });
    }
    let mut tokens = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        tokens.extend(done.map_err(|e| e.to_string())??);
    }
    progress.finish();
    Ok(tokens)
}

/// The in-process reference API's configuration for a load run: every client is on loopback,
/// one address, so the per-address cap is the whole listener's; and one user mints every
/// token, over as many sessions as it takes.
pub(super) fn loopback_api_config() -> ApiConfig {
    let serve = ServeLimits::default();
    ApiConfig {
        serve: ServeLimits {
            max_connections_per_address: serve.max_connections,
            ..serve
        },
        session_limits: SessionLimits {
            sessions_per_user: usize::MAX,
            ..SessionLimits::default()
        },
        ..ApiConfig::default()
    }
}
