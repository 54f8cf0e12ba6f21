//! Allocations on the hit path, counted by a counting global allocator.
//!
//! Counts the heap allocations made on the measuring thread per cache hit of `resolve`,
//! `resolve_connect` and `resolve_join`, next to a bare moka `get` of the same key and value
//! types configured as the resolver's cache (the allocations moka itself makes, if any), and,
//! for scale, per miss. Target: a hit allocates nothing beyond what moka does.
//!
//! Also the live heap bytes per cached entry, for the resolver filled through its public API
//! and for the bare moka cache filled directly, with 43-byte tokens and 16-byte names: what
//! `token-resolver load` measures as RSS, without the allocator's and the process's overhead.
//! A moka cache of `u64 -> u64` with the same expiry shows moka's own share of each entry.
//! The resolver keeps users in a moka cache with one time to live; the row with moka's
//! per-entry expiry shows what that used to cost. The last line is the revocation index's own
//! share of an entry (its slots and tables as allocated, from the resolver's hidden
//! `index_heap_bytes`), which the difference to bare moka does not isolate: the bare rows' key
//! and value are not the resolver's own types.
//!
//! `cargo bench --bench alloc` prints one table; it is not a criterion bench (a global
//! allocator would slow every other bench down). `-- --hits-only` runs only the hit loops, for
//! `valgrind --tool=callgrind`.

use token_resolver_support::bench as support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use support::{token, Key, KeyRef, Upstream, UpstreamConfig, Value};
use token_resolver::{ConnectRequest, JoinRequest, Resolver};

/// Counts allocations made on threads that asked to be counted, and live bytes on all threads.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_ALLOCS: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn note_alloc(size: usize) {
    LIVE_BYTES.fetch_add(size as i64, Ordering::Relaxed);
    LIVE_ALLOCS.fetch_add(1, Ordering::Relaxed);
    if COUNTED.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are atomics
// and a const-initialised thread-local, which allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc(new_size);
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        LIVE_ALLOCS.fetch_sub(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        LIVE_ALLOCS.fetch_sub(1, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn count<R>(f: impl FnOnce() -> R) -> (u64, R) {
    COUNTED.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let result = f();
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTED.with(|c| c.set(false));
    (after - before, result)
}

/// Hits per measurement.
const HITS: u64 = 200_000;
/// Misses per measurement.
const MISSES: u64 = 2_000;
/// Entries for the bytes-per-entry fills.
const FILL: u64 = 100_000;

/// What every row shares: one thread for the runtime, the resolver and the connection tasks,
/// the upstream, and a resolver with one hot token cached.
struct Setup {
    rt: tokio::runtime::Runtime,
    upstream: Upstream,
    base: String,
    resolver: Resolver,
    hot: String,
}

/// A row of the allocations table: what was called, and allocations per call.
type Row = (&'static str, f64);

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` from the harness is ignored.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let upstream = Upstream::start(UpstreamConfig::default()).expect("the upstream starts");
    let base = upstream.base();
    let resolver = support::resolver(&base);
    let hot = token('a', 0);
    rt.block_on(resolver.resolve(&base, &hot)).unwrap();
    let setup = Setup {
        rt,
        upstream,
        base,
        resolver,
        hot,
    };

    let mut rows = hit_rows(&setup);
    let (resolve_hit, moka_hit) = (rows[0].1, rows[3].1);
    // `--hits-only`: stop here, e.g. to run the hit loops under `valgrind --tool=callgrind`.
    let hits_only = std::env::args().any(|a| a == "--hits-only");
    // `--no-fill`: stop after the per-call counts, e.g. to profile misses under callgrind.
    let no_fill = hits_only || std::env::args().any(|a| a == "--no-fill");
    rows.extend(miss_rows(&setup, if hits_only { 0 } else { MISSES }));
    print_per_call(&setup, &rows, resolve_hit, moka_hit);
    if !no_fill {
        print_fills(&setup);
    }
}

/// Allocations per call of `n` calls made by `f`.
fn per_call(n: u64, f: impl FnOnce()) -> f64 {
    let (total, ()) = count(f);
    total as f64 / n as f64
}

/// Allocations per call of [`HITS`] awaited calls of `hit`, all in one `block_on`.
fn per_hit(rt: &tokio::runtime::Runtime, hit: impl AsyncFn()) -> f64 {
    per_call(HITS, || {
        rt.block_on(async {
            for _ in 0..HITS {
                hit().await;
            }
        })
    })
}

/// Allocations per call of one awaited call of `call` per token, all in one `block_on`.
fn per_token(rt: &tokio::runtime::Runtime, tokens: &[String], call: impl AsyncFn(&str)) -> f64 {
    per_call(tokens.len().max(1) as u64, || {
        rt.block_on(async {
            for t in tokens {
                call(t).await;
            }
        })
    })
}

/// Allocations per hit: `resolve`, `resolve_connect` and `resolve_join` of the hot token, a
/// bare moka `get` of the same key and value types, and the hand-written cache's `get`.
fn hit_rows(setup: &Setup) -> Vec<Row> {
    let Setup {
        rt,
        upstream,
        base,
        resolver,
        hot,
    } = setup;
    let connect = ConnectRequest {
        access_token: Some(hot.clone()),
    };
    let join = JoinRequest {
        room_id: "arena-1".into(),
        auth_url: base.clone(),
        access_token: Some(hot.clone()),
    };
    let moka = support::moka_cache(100_000);
    let endpoint = upstream.user_url();
    moka.insert(
        Key::new(&Arc::from(endpoint.as_str()), hot),
        Value::user(1).user_alone().expect("a user"),
    );
    let key = KeyRef::new(&endpoint, hot);
    // The hand-written cache's hit (a moka `Cache<String, Arc<_>>`, default hasher): the hit
    // target's baseline, here so that callgrind sees both in one run.
    let hand_written = support::HandWritten::new(
        upstream.user_url(),
        100_000,
        std::time::Duration::from_secs(3600),
    );
    let naive_user = support::NaiveUser {
        id: 1,
        name: support::name(1),
    };
    hand_written.cache.insert(hot.clone(), Arc::new(naive_user));
    vec![
        (
            "resolve, hit",
            per_hit(rt, async || {
                black_box(resolver.resolve(base, hot).await.unwrap());
            }),
        ),
        (
            "resolve_connect, hit",
            per_hit(rt, async || {
                black_box(resolver.resolve_connect(&connect).await.unwrap());
            }),
        ),
        (
            "resolve_join, hit",
            per_hit(rt, async || {
                black_box(resolver.resolve_join(&join).await.unwrap());
            }),
        ),
        (
            "bare moka get (same key and value types)",
            per_call(HITS, || {
                for _ in 0..HITS {
                    black_box(moka.get(&key).unwrap());
                }
            }),
        ),
        (
            "hand-written moka get (String key, default hasher)",
            per_call(HITS, || {
                for _ in 0..HITS {
                    black_box(hand_written.cache.get(hot.as_str()).unwrap());
                }
            }),
        ),
    ]
}

/// Allocations per miss of `resolve`, and, for scale, per call of the same call by hand (each
/// client's connection open before counting).
fn miss_rows(setup: &Setup, misses: u64) -> Vec<Row> {
    let Setup {
        rt,
        upstream,
        base,
        resolver,
        ..
    } = setup;
    let tokens: Vec<String> = (0..misses).map(|i| token('m', i)).collect();
    let url = upstream.user_url();
    let naive = support::naive_client();
    let hyper = support::hyper_client();
    let uri: axum::http::Uri = url.parse().unwrap();
    rt.block_on(support::naive_resolve(&naive, &url, &token('x', 0)))
        .expect("a user");
    rt.block_on(support::hyper_post(&hyper, &uri, &token('x', 0)))
        .expect("a 200");
    vec![
        (
            "resolve, miss (client side, connection task included)",
            per_token(rt, &tokens, async |t| {
                black_box(resolver.resolve(base, t).await.unwrap());
            }),
        ),
        (
            "naive reqwest POST + serde_json, per call",
            per_token(rt, &tokens, async |t| {
                black_box(
                    support::naive_resolve(&naive, &url, t)
                        .await
                        .expect("a user"),
                );
            }),
        ),
        (
            "bare hyper POST, per call",
            per_token(rt, &tokens, async |t| {
                black_box(support::hyper_post(&hyper, &uri, t).await.expect("a 200"));
            }),
        ),
    ]
}

/// The per-call table, the future's size, and the hit target's verdict.
fn print_per_call(setup: &Setup, rows: &[Row], resolve_hit: f64, moka_hit: f64) {
    // A future is moved by copying all of it, whatever state it is in: on a hit, its size is
    // paid in `memcpy` each time the resolver moves it (e.g. into `tracing::Instrumented`).
    let future_bytes = std::mem::size_of_val(&setup.resolver.resolve(&setup.base, &setup.hot));
    println!("size of the future `resolve` returns: {future_bytes} bytes");
    println!("allocations per call, on the calling thread ({HITS} hits, {MISSES} misses):");
    for (what, n) in rows {
        println!("  {what:<56} {n:>8.2}");
    }
    let extra = resolve_hit - moka_hit;
    println!(
        "target: no allocation per hit beyond moka's: resolve hit {resolve_hit:.2} - moka get \
         {moka_hit:.2} = {extra:.2} -> {}",
        if extra < 0.01 { "met" } else { "MISSED" }
    );
}

/// A row of the fills table: what was filled, live bytes and allocations, and entries.
type Fill = (String, i64, i64, u64);

/// What the resolver's fill leaves in its revocation index: heap bytes, and entries.
type IndexShare = (usize, u64);

/// Live heap bytes and allocations per entry: the resolver filled through `resolve` against
/// the upstream (its connection open and its pool warm before counting, so the delta is the
/// cache), then bare caches of the same types, moka's own share, and quick_cache. Every cache
/// has the same capacity (moka sizes its frequency sketch by it).
fn print_fills(setup: &Setup) {
    let tokens: Vec<String> = (0..FILL).map(|i| token('f', i)).collect();
    let (fill, (index_bytes, indexed)) = resolver_fill(setup, &tokens);
    let mut fills = vec![fill];
    fills.extend(bare_cache_fills(&setup.upstream.user_url(), &tokens));
    println!("per cached entry (43-byte token, 16-byte name), {FILL} entries: live heap bytes, live allocations");
    let per_entry = |(_, bytes, _, entries): &Fill| *bytes as f64 / *entries as f64;
    let (resolver, bare) = (per_entry(&fills[0]), per_entry(&fills[1]));
    for (what, bytes, allocs, entries) in fills {
        println!(
            "  {what:<60} {:>6.0} B {:>6.2}",
            bytes as f64 / entries as f64,
            allocs as f64 / entries as f64
        );
    }
    println!(
        "  the resolver beyond bare moka of its types: {:.0} B per entry",
        resolver - bare
    );
    println!(
        "  the revocation index alone (its slots and tables, as allocated): {:.1} B per entry",
        index_bytes as f64 / indexed as f64
    );
}

/// The resolver filled with `tokens` through `resolve`, and its index's share.
fn resolver_fill(setup: &Setup, tokens: &[String]) -> (Fill, IndexShare) {
    let (rt, base) = (&setup.rt, &setup.base);
    let fill_resolver = fill_resolver(base);
    rt.block_on(fill_resolver.resolve(base, &token('w', 0)))
        .unwrap();
    let before = fill_resolver.stats().entries;
    let (bytes, allocs) = live(|| {
        rt.block_on(async {
            for t in tokens {
                fill_resolver.resolve(base, t).await.unwrap();
            }
        });
        fill_resolver.stats();
    });
    let entries = fill_resolver.stats().entries - before;
    let fill = (
        "resolver, filled through resolve".to_owned(),
        bytes,
        allocs,
        entries,
    );
    (fill, (fill_resolver.index_heap_bytes(), entries + before))
}

/// Bare caches filled with `tokens` directly: moka with the resolver's key and value types
/// (one time to live, then per-entry expiry), moka of `u64 -> u64` (moka's own share, the
/// floor under every row), and quick_cache.
fn bare_cache_fills(endpoint: &str, tokens: &[String]) -> Vec<Fill> {
    let endpoint: Arc<str> = Arc::from(endpoint);
    let mut fills = Vec::new();
    for (what, moka) in [
        (
            "bare moka, same key, a user and its deadline, one time_to_live",
            support::moka_cache(CAPACITY),
        ),
        (
            "bare moka, same key, a user and its deadline, per-entry expiry",
            moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .expire_after(support::PerEntryTtl)
                .build_with_hasher(support::KeyHasher::default()),
        ),
    ] {
        moka.run_pending_tasks();
        let (bytes, allocs) = live(|| {
            for (i, t) in tokens.iter().enumerate() {
                moka.insert(Key::new(&endpoint, t), Value::user(i as i64));
            }
            moka.run_pending_tasks();
        });
        fills.push((what.to_owned(), bytes, allocs, moka.entry_count()));
    }
    let bare: moka::sync::Cache<u64, u64> = moka::sync::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(std::time::Duration::from_secs(3600))
        .build();
    bare.run_pending_tasks();
    let (bytes, allocs) = live(|| {
        for i in 0..FILL {
            bare.insert(i, i);
        }
        bare.run_pending_tasks();
    });
    fills.push((
        "bare moka, u64 -> u64, one time_to_live (moka's own share)".to_owned(),
        bytes,
        allocs,
        bare.entry_count(),
    ));
    let quick = quick_cache::sync::Cache::<Key, Value>::new(CAPACITY as usize);
    let (bytes, allocs) = live(|| {
        for (i, t) in tokens.iter().enumerate() {
            quick.insert(Key::new(&endpoint, t), Value::user(i as i64));
        }
    });
    fills.push((
        "quick_cache, same types (no expiry)".to_owned(),
        bytes,
        allocs,
        quick.len() as u64,
    ));
    fills
}

/// Capacity of every cache in the fills: room for all, so nothing is evicted.
const CAPACITY: u64 = FILL + 16;

/// Heap bytes and allocations still live after `f`, less those live before.
fn live(f: impl FnOnce()) -> (i64, i64) {
    let (bytes, allocs) = (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_ALLOCS.load(Ordering::Relaxed),
    );
    f();
    (
        LIVE_BYTES.load(Ordering::Relaxed) - bytes,
        LIVE_ALLOCS.load(Ordering::Relaxed) - allocs,
    )
}

/// The resolver used for the fill: room for every entry, nothing expires during the run.
fn fill_resolver(base: &str) -> Resolver {
    Resolver::builder()
        .default_auth_url(base)
        .cache_ttl(std::time::Duration::from_secs(3600))
        // Users may hold seven eighths of the bound: room for `CAPACITY` of them.
        .max_cache_entries(CAPACITY + CAPACITY.div_ceil(7))
        .build()
        .unwrap()
}
