//! Finding the sessions a revocation names, in the live-session registry, and how that grows
//! with the sessions registered: 10,000 then 1,000,000 (each holding one token; two sessions per
//! user, each on its own integrator session). For each size, `Registry::find` for a token, a
//! user and an integrator session, each named at random among those registered: the median of
//! 15 samples of 20,000 look-ups, per look-up, and the ratio of the two sizes in the same run.
//! Target: under 10 µs at 1,000,000.
//!
//! `cargo bench -p token-resolver-sessions --bench registry`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use token_resolver::{AccessToken, Resolution, Resolver, Revocation, User};
use token_resolver_sessions::{Credential, Purpose, Registry, SessionCredentials};

const AT: &str = "https://integrator.example/api/user";
const SAMPLES: usize = 15;
const LOOKUPS: usize = 20_000;

fn token(i: u64) -> String {
    format!("registry-bench-token-{i:016}")
}

/// A registry of `sessions` sessions: session `i` holds token `i` of user `i / 2`, on the
/// integrator session `s{i}`.
fn registry(resolver: &Resolver, sessions: u64) -> Registry {
    let registry = Registry::default();
    for i in 0..sessions {
        let mut user = User {
            id: (i / 2) as i64,
            name: "p".into(),
            extra: Default::default(),
        };
        user.extra.insert("sid".into(), format!("s{i}").into());
        let fingerprint = resolver.fingerprint(AT, &token(i)).expect("a usable token");
        let access_token = AccessToken::new(token(i)).expect("a usable token");
        let user = Resolution::new(Arc::new(user), None);
        let credential = Credential::new(Purpose::Connect, AT, access_token, fingerprint, &user);
        registry.enrol(i);
        let holdings = SessionCredentials {
            credentials: vec![credential],
        };
        registry.update(i, &holdings, registry.cursor());
    }
    registry
}

/// The median time of one `find` of what `named(i)` names, `i` at random below `sessions`.
fn median_find(registry: &Registry, sessions: u64, named: impl Fn(u64) -> Revocation) -> f64 {
    let targets: Vec<Revocation> = (0..LOOKUPS)
        .map(|_| named(fastrand::u64(0..sessions)))
        .collect();
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let started = Instant::now();
            for target in &targets {
                let found = registry.find(black_box(target));
                assert!(found.is_some_and(|f| !f.is_empty()), "finds the session");
            }
            started.elapsed().as_secs_f64() * 1e9 / LOOKUPS as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[SAMPLES / 2]
}

/// One row per kind of revocation at `sessions`: nanoseconds per find.
fn rows(resolver: &Resolver, sessions: u64) -> [f64; 3] {
    let built = Instant::now();
    let registry = registry(resolver, sessions);
    eprintln!(
        "  {sessions} sessions registered in {:.1?}",
        built.elapsed()
    );
    let endpoint = AT.to_owned();
    [
        median_find(&registry, sessions, |i| Revocation::Token {
            endpoint: endpoint.clone(),
            token: resolver.fingerprint(AT, &token(i)).expect("a usable token"),
        }),
        median_find(&registry, sessions, |i| Revocation::User {
            endpoint: endpoint.clone(),
            user_id: (i / 2) as i64,
        }),
        median_find(&registry, sessions, |i| Revocation::Session {
            endpoint: endpoint.clone(),
            user_id: (i / 2) as i64,
            session: format!("s{i}"),
        }),
    ]
}

fn main() {
    let resolver = Resolver::builder()
        .default_auth_url(AT)
        .build()
        .expect("a resolver");
    let small = rows(&resolver, 10_000);
    let large = rows(&resolver, 1_000_000);
    println!("| revocation | find, 10,000 sessions (ns) | find, 1,000,000 sessions (ns) | ratio |");
    println!("|---|---:|---:|---:|");
    for (i, kind) in ["token", "user", "session"].into_iter().enumerate() {
        println!(
            "| {kind} | {:.0} | {:.0} | {:.2}x |",
            small[i],
            large[i],
            large[i] / small[i]
        );
    }
}
