//! The bytes-per-entry fill: distinct tokens resolved through the public API against the
//! loopback upstream, and the RSS they cost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use token_resolver::Resolver;

use super::progress::{proc_status_kib, Progress};
use token_resolver_loadgen::baselines::{Upstream, UpstreamConfig};

/// Fills a resolver with `entries` distinct tokens through `resolve`, against an in-process
/// upstream that answers any token, and prints the RSS delta per entry.
pub(super) async fn fill(entries: u64, concurrency: usize) -> Result<(), String> {
    let upstream = Upstream::start(UpstreamConfig::default())?;
    let base = upstream.base();
    let resolver = Resolver::builder()
        .default_auth_url(&base)
        .cache_ttl(Duration::from_secs(3600))
        // Room for the warm-up and the fill, no more: moka sizes its frequency sketch by this.
        // Users may hold seven eighths of the bound (rejections the rest).
        .max_cache_entries(bound_for_users(
            entries + WARM_UP_PER_TASK * concurrency as u64,
        ))
        .build()
        .map_err(|e| e.to_string())?;
    // Connections and buffers exist before the first measurement: a concurrent warm-up opens
    // as many connections as the fill will use, on both sides.
    let mut warm_up = tokio::task::JoinSet::new();
    for task in 0..concurrency as u64 {
        let (resolver, base) = (resolver.clone(), base.clone());
        warm_up.spawn(async move {
            for i in 0..WARM_UP_PER_TASK {
                resolver
                    .resolve(&base, &fill_token(u64::MAX - task * WARM_UP_PER_TASK - i))
                    .await?;
            }
            Ok::<(), token_resolver::ResolveError>(())
        });
    }
    while let Some(done) = warm_up.join_next().await {
        done.map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    let rss_before = proc_status_kib("VmRSS:").ok_or("no /proc/self/status")?;
    let entries_before = resolver.stats().entries;
    let cursor = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("fill", entries, cursor.clone());
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (resolver, base, cursor) = (resolver.clone(), base.clone(), cursor.clone());
        tasks.spawn(async move {
            loop {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                if i >= entries {
                    return Ok::<(), String>(());
                }
                resolver
                    .resolve(&base, &fill_token(i))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let elapsed = start.elapsed();
    progress.finish();
    let filled = resolver.stats().entries - entries_before;
    let rss_after = proc_status_kib("VmRSS:").ok_or("no /proc/self/status")?;
    let delta = rss_after.saturating_sub(rss_before) * 1024;
    println!(
        "fill: {filled} entries (43-byte tokens, 16-byte names) through resolve in {:.1} s: \
         RSS +{:.1} MiB = {:.0} bytes/entry (target <= 512)",
        elapsed.as_secs_f64(),
        delta as f64 / (1024.0 * 1024.0),
        delta as f64 / filled.max(1) as f64,
    );
    Ok(())
}

/// The least `max_cache_entries` under which `users` users fit: they may hold seven eighths
/// of it.
fn bound_for_users(users: u64) -> u64 {
    users + users.div_ceil(7)
}

/// Resolutions each task of the fill makes before the first reading (and entries they leave).
const WARM_UP_PER_TASK: u64 = 4;

/// The fill's `i`th token: 43 bytes, like 32 random bytes in base64url.
fn fill_token(i: u64) -> String {
    format!("f{i:042}")
}
