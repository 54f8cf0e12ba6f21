//! Model check of a refresh racing a ban, explored by shuttle over many schedules: whatever
//! the order, a ban that lands while a session's token is being refreshed ends with the
//! session closed, never refreshed back to life.
//!
//! The [`Registry`] is the real one (each of its calls one step, as it does all under one
//! lock); around it, the sidecar's `keep` (crates/sidecar/src/sessions.rs), which refreshes a
//! kept session or keeps a new one, is copied step for step, with the lock it holds over its
//! sessions as a shuttle lock. A twin runs a protocol broken on purpose and must fail.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use shuttle::sync::Mutex;
use shuttle::{thread, Config, Runner};
use token_resolver::{AccessToken, Resolution, Resolver, Revocation, User};
use token_resolver_sessions::{
    Credential, Purpose, Registry, RevocationCursor, RevocationsSince, SessionCredentials,
};
use tokio_util::sync::CancellationToken;

const AT: &str = "https://a.example/api/user";
const USER: i64 = 7;
const SESSION: &str = "s";

/// How many schedules each scheduler explores of the real protocol.
const SCHEDULES: usize = 20_000;

/// The protocol the model runs: the sidecar's, or one broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// The cursor is taken before the refresh's token is resolved.
    Real,
    /// The cursor is taken once the refresh's token has resolved: a ban in between is before
    /// it, and a session kicked by it is kept anew.
    CursorAfterResolve,
}

/// A point where shuttle may run another thread.
fn step() {
    thread::yield_now();
}

/// A kept session, as the sidecar's `Entry` (what the model needs of it).
struct Entry {
    connection: u64,
    user_id: i64,
    holdings: SessionCredentials,
    kick: CancellationToken,
}

/// The sidecar node as the model has it, and the integrator's state.
struct Node {
    protocol: Protocol,
    registry: Registry,
    sessions: Mutex<HashMap<&'static str, Entry>>,
    next: AtomicU64,
    /// The integrator has banned the user: its API refuses the user's tokens from then on.
    banned: AtomicBool,
    /// The ban's revocation was applied to the registry: it is acknowledged.
    acked: AtomicBool,
    trace: std::sync::Mutex<Vec<String>>,
}

impl Node {
    fn note(&self, what: impl Into<String>) {
        self.trace.lock().unwrap().push(what.into());
    }

    fn violated(&self, property: &str) -> ! {
        let trace = self.trace.lock().unwrap().join(" -> ");
        panic!("VIOLATION: {property}; schedule: {trace}")
    }

    fn cursor(&self) -> RevocationCursor {
        step();
        self.registry.cursor()
    }

    /// The sidecar's `keep`: `credential`, resolved since `cursor`, for the session `id`: the
    /// refresh of a live session, or a new one (a kicked session's id starts afresh). `Ok` with
    /// whether it was a refresh; `Err` when it is refused.
    fn keep(
        &self,
        id: &'static str,
        credential: Credential,
        cursor: RevocationCursor,
    ) -> Result<bool, &'static str> {
        let mut by_id = self.sessions.lock().unwrap();
        if let Some(entry) = by_id.get_mut(id) {
            step();
            if !entry.kick.is_cancelled() {
                if entry.user_id != credential.user_id {
                    return Err("mismatch");
                }
                let mut holdings = entry.holdings.clone();
                holdings.hold(credential);
                step();
                match self.registry.update(entry.connection, &holdings, cursor) {
                    RevocationsSince::Named => {
                        entry.kick.cancel();
                        return Err("revoked meanwhile");
                    }
                    RevocationsSince::Unknown | RevocationsSince::Nothing => {}
                }
                entry.holdings = holdings;
                return Ok(true);
            }
            let ended = by_id.remove(id).expect("just found");
            step();
            self.registry.remove(ended.connection);
        }
        let connection = self.next.fetch_add(1, Ordering::SeqCst);
        step();
        let signals = self.registry.enrol(connection);
        let user_id = credential.user_id;
        let mut holdings = SessionCredentials::default();
        holdings.hold(credential);
        step();
        match self.registry.update(connection, &holdings, cursor) {
            RevocationsSince::Named => {
                step();
                self.registry.remove(connection);
                return Err("revoked meanwhile");
            }
            RevocationsSince::Unknown | RevocationsSince::Nothing => {}
        }
        by_id.insert(
            id,
            Entry {
                connection,
                user_id,
                holdings,
                kick: signals.kick,
            },
        );
        Ok(false)
    }
}

/// The two tokens of user 7: the one the session connected with, and its refresh.
fn credentials() -> [Credential; 2] {
    let resolver = Resolver::builder().default_auth_url(AT).build().unwrap();
    ["first-token", "refreshed-token"].map(|token| {
        let user = User {
            id: USER,
            name: "n".into(),
            extra: Default::default(),
        };
        let answer = Resolution::new(Arc::new(user), None);
        let fingerprint = resolver.fingerprint(AT, token).unwrap();
        let token = AccessToken::new(token.to_owned()).unwrap();
        Credential::new(Purpose::Connect, AT, token, fingerprint, &answer)
    })
}

/// A session of user 7 is kept; its token is refreshed while the integrator bans user 7 and
/// the ban's revocation reaches the registry.
fn refresh_racing_a_ban(protocol: Protocol) -> impl Fn() + Send + Sync + 'static {
    let [first, refreshed] = credentials();
    move || {
        let node = Arc::new(Node {
            protocol,
            registry: Registry::default(),
            sessions: Mutex::default(),
            next: AtomicU64::new(1),
            banned: AtomicBool::new(false),
            acked: AtomicBool::new(false),
            trace: std::sync::Mutex::default(),
        });
        let cursor = node.registry.cursor();
        assert_eq!(node.keep(SESSION, first.clone(), cursor), Ok(false));
        let refresh = {
            let (node, refreshed) = (node.clone(), refreshed.clone());
            thread::spawn(move || {
                let early = node.cursor();
                step();
                let banned = node.banned.load(Ordering::SeqCst);
                let cursor = match node.protocol {
                    Protocol::CursorAfterResolve => node.cursor(),
                    Protocol::Real => early,
                };
                if banned {
                    node.note("the refresh's token is refused");
                    return;
                }
                node.note("the refresh's token resolves");
                // Read before keeping: a ban acknowledged by then must stop it.
                let acked_before = node.acked.load(Ordering::SeqCst);
                let kept = node.keep(SESSION, refreshed, cursor);
                node.note(format!("keep: {kept:?}"));
                if kept.is_ok() && acked_before {
                    node.violated("the session was refreshed after the ban was acknowledged");
                }
            })
        };
        let ban = {
            let node = node.clone();
            thread::spawn(move || {
                node.banned.store(true, Ordering::SeqCst);
                node.note("API bans user 7");
                step();
                let kicked = node.registry.revoke(&Revocation::User {
                    endpoint: AT.into(),
                    user_id: USER,
                });
                node.acked.store(true, Ordering::SeqCst);
                node.note(format!("ban applied, {kicked} kicked"));
            })
        };
        refresh.join().unwrap();
        ban.join().unwrap();
        let sessions = node.sessions.lock().unwrap();
        if sessions.values().any(|entry| !entry.kick.is_cancelled()) {
            node.violated("a session of user 7 is live after the ban");
        }
    }
}

/// What exploring the model found: schedules run, time taken, the first violation.
struct Explored {
    schedules: usize,
    took: Duration,
    violation: Option<String>,
}

fn explore<S: Scheduler + 'static>(scheduler: S, protocol: Protocol) -> Explored {
    let model = refresh_racing_a_ban(protocol);
    let started = Instant::now();
    let run = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(scheduler, Config::new()).run(model)
    }));
    let took = started.elapsed();
    let (schedules, violation) = match run {
        Ok(schedules) => (schedules, None),
        Err(panic) => {
            let message = (panic.downcast_ref::<String>().cloned())
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (0, Some(message))
        }
    };
    Explored {
        schedules,
        took,
        violation,
    }
}

#[test]
fn a_refresh_racing_a_ban_never_brings_the_session_back_to_life() {
    let runs = [
        (
            "random",
            explore(
                RandomScheduler::new_from_seed(34, SCHEDULES),
                Protocol::Real,
            ),
        ),
        (
            "pct",
            explore(
                PctScheduler::new_from_seed(34, 3, SCHEDULES),
                Protocol::Real,
            ),
        ),
    ];
    for (scheduler, explored) in runs {
        eprintln!(
            "refresh vs ban: {scheduler}: {} schedules in {:?}",
            explored.schedules, explored.took
        );
        if let Some(violation) = explored.violation {
            panic!("refresh vs ban: {scheduler} found {violation}");
        }
    }
}

#[test]
fn the_refresh_model_finds_a_cursor_taken_after_the_token_resolved() {
    let protocol = Protocol::CursorAfterResolve;
    let found = [
        explore(PctScheduler::new_from_seed(34, 3, SCHEDULES), protocol),
        explore(RandomScheduler::new_from_seed(34, SCHEDULES), protocol),
    ]
    .into_iter()
    .find_map(|explored| {
        let violation = explored.violation?;
        eprintln!(
            "refresh vs ban ({protocol:?}) found in {:?}: {violation}",
            explored.took
        );
        Some(violation)
    })
    .expect("no schedule of the broken protocol brought the session back");
    assert!(found.contains("VIOLATION"), "{found}");
}
