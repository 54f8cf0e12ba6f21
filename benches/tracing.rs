//! What tracing costs a cache hit (feature `opentelemetry`): `resolve` of a cached token with no
//! subscriber at all (the plain hit, as `--bench resolve` measures it), with tracing off (the
//! binary's subscriber without `--otlp-endpoint`: log lines at WARN on stderr, nothing else),
//! and with tracing on (the same, plus tracing's bridge into the OpenTelemetry SDK, every span
//! sampled and batched to an exporter that drops them: the cost on the resolving thread, not
//! the export's).
//!
//! Rounds of `PER_ROUND` hits of each, in a rotating order; the table's ratios are medians of
//! the per-round ratios to the plain hit. Target: off within noise of the plain hit.
//!
//! `cargo bench --bench tracing --features opentelemetry`; `docs/performance.md` has numbers.

use token_resolver_support::bench as support;

use std::hint::black_box;
use std::time::Instant;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use support::{token, Upstream, UpstreamConfig};
use tracing::Dispatch;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const PER_ROUND: u64 = 100_000;
const ROUNDS: usize = 15;

/// An exporter that takes every batch and keeps nothing.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

/// The binary's subscriber without `--otlp-endpoint`: log lines at WARN, to nowhere here.
fn tracing_off() -> Dispatch {
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(EnvFilter::new("warn"));
    Dispatch::new(tracing_subscriber::registry().with(logs))
}

/// The binary's subscriber with `--otlp-endpoint`: the same log lines, and every span at INFO
/// (the library's at DEBUG) into the SDK.
fn tracing_on(provider: &SdkTracerProvider) -> Dispatch {
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(EnvFilter::new("warn"));
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("bench"))
        .with_filter(
            Targets::new()
                .with_default(tracing::Level::INFO)
                .with_target("token_resolver", tracing::Level::DEBUG),
        );
    Dispatch::new(tracing_subscriber::registry().with(logs).with(spans))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let rt = support::runtime();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    let resolver = support::resolver(&base);
    let hot = token('t', 1);
    rt.block_on(resolver.resolve(&base, &hot)).expect("warm-up");
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let names = ["plain (no subscriber)", "tracing off", "tracing on"];
    // A fresh dispatcher per round: registering one recomputes the levels every callsite is
    // enabled at, so the plain and off rounds do not inherit the on round's DEBUG.
    let time = |which: usize| -> f64 {
        let dispatch = match which {
            0 => {
                // Registering a dispatcher that is off, and dropping it, recomputes the levels
                // with no live subscriber: the on round's DEBUG is not inherited.
                drop(Dispatch::new(
                    tracing_subscriber::registry()
                        .with(tracing_subscriber::filter::LevelFilter::OFF),
                ));
                None
            }
            1 => Some(tracing_off()),
            _ => Some(tracing_on(&provider)),
        };
        let hits = || {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..PER_ROUND {
                    black_box(resolver.resolve(&base, &hot).await.unwrap());
                }
                start.elapsed().as_secs_f64() / PER_ROUND as f64
            })
        };
        match dispatch {
            None => hits(),
            Some(dispatch) => tracing::dispatcher::with_default(&dispatch, hits),
        }
    };
    for which in 0..names.len() {
        time(which);
    }
    let mut times = vec![Vec::new(); names.len()];
    for round in 0..ROUNDS {
        for i in 0..names.len() {
            let which = (i + round) % names.len();
            times[which].push(time(which));
        }
    }
    assert_eq!(
        upstream.calls(),
        1,
        "every resolution after the warm-up is a hit"
    );
    println!(
        "\nhit with tracing: {ROUNDS} rounds x {PER_ROUND} hits of each, rotating order; \
         medians of the per-round values"
    );
    println!("| hit | per hit | / plain |");
    println!("|---|---:|---:|");
    for (i, name) in names.iter().enumerate() {
        let ratio = median((0..ROUNDS).map(|r| times[i][r] / times[0][r]).collect());
        println!(
            "| {name} | {:.1} ns | {ratio:.3}x |",
            median(times[i].clone()) * 1e9
        );
    }
    let _ = provider.shutdown();
}
