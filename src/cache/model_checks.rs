//! Model checks of the local tier's in-process races, explored by shuttle over many schedules:
//! a revocation landing while a look-up is in flight (the mark/since protocol and the flight's
//! hand-off to its waiters), and a store racing an `invalidate_all`. Tests only.
//!
//! What runs is the real [`RevocationLog`] (its calls are the steps); around it, the store,
//! the index and the flight are a model written step for step after [`Local::store`],
//! [`Local::drop_named`], [`Local::drop_all`] and `resolver::miss`, each step a point where
//! shuttle may switch threads (moka's map and the index cannot run under shuttle's primitives,
//! and a lock held across a step is what the model must see). `real_local_tier_*` ties the
//! model to the code: the same threads, on the real [`Local`], at the granularity of its calls.
//!
//! Each property has a twin run on a protocol broken on purpose (a [`Protocol`] other than
//! [`Protocol::Real`]), which must find a bad schedule: a check that cannot fail proves nothing.
//!
//! [`Local`]: super::local::Local
//! [`Local::store`]: super::local::Local::store
//! [`Local::drop_named`]: super::local::Local::drop_named
//! [`Local::drop_all`]: super::local::Local::drop_all

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::sync::atomic::{AtomicBool, Ordering};
use shuttle::sync::{mpsc, Mutex, RwLock};
use shuttle::{thread, Config, Runner};

use super::revoked::{Mark, Named, RevocationLog};

/// The one endpoint, token and user of the models, as the log names them.
const ENDPOINT: u64 = 1;
const TOKEN: u64 = 11;
const USER: i64 = 7;
const NAMES: [Named; 2] = [
    Named::Token {
        endpoint: ENDPOINT,
        token: TOKEN,
    },
    Named::User {
        endpoint: ENDPOINT,
        user: USER,
    },
];

/// The protocol a model runs: the code's, or one broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// As the code does it.
    Real,
    /// The flight takes its mark once the API has answered, not before it asks.
    MarkAfterFetch,
    /// A waiter checks the flight's answer against a mark of its own, taken when it joined,
    /// not against the mark the flight's call began with.
    WaiterOwnMark,
    /// A store checks, inserts and checks again, without the lock that keeps revocations out
    /// while it inserts (the local tier before the lock was added).
    Unlocked,
}

/// A point where shuttle may run another thread.
fn step() {
    thread::yield_now();
}

/// The local tier as the model has it: the real log, and the store and index each behind a lock
/// of its own (as moka's map and `Index` are), and the lock between stores and revocations.
struct Tier {
    protocol: Protocol,
    log: RevocationLog,
    /// Answers by token: the user, and whether the call that fetched it began before the
    /// `invalidate_all` of the run (the property of [`store_racing_invalidate_all`]).
    store: Mutex<HashMap<u64, (i64, bool)>>,
    /// Tokens by user: what a revocation of a user finds.
    index: Mutex<HashMap<i64, Vec<u64>>>,
    /// Held shared by a store from its check to its index entry, and alone by a revocation
    /// from its record to its last drop.
    applying: RwLock<()>,
}

impl Tier {
    fn new(protocol: Protocol) -> Tier {
        Tier {
            protocol,
            log: RevocationLog::new(Duration::from_secs(60)),
            store: Mutex::default(),
            index: Mutex::default(),
            applying: RwLock::new(()),
        }
    }

    fn mark(&self) -> Mark {
        step();
        self.log.mark()
    }

    fn revoked_since(&self, since: Mark) -> bool {
        step();
        self.log.revoked_since(since, NAMES)
    }

    /// `Local::store`: caches the answer unless something it names was revoked since `since`.
    fn store(&self, token: u64, answer: (i64, bool), since: Mark) -> bool {
        if self.protocol == Protocol::Unlocked {
            return self.store_unlocked(token, answer, since);
        }
        let _applying = self.applying.read().unwrap();
        if self.revoked_since(since) {
            return false;
        }
        self.store.lock().unwrap().insert(token, answer);
        let mut index = self.index.lock().unwrap();
        index.entry(answer.0).or_default().push(token);
        true
    }

    /// `Local::store` before the lock: check, insert, index, check again and take it back.
    fn store_unlocked(&self, token: u64, answer: (i64, bool), since: Mark) -> bool {
        if self.revoked_since(since) {
            return false;
        }
        self.store.lock().unwrap().insert(token, answer);
        self.index
            .lock()
            .unwrap()
            .entry(answer.0)
            .or_default()
            .push(token);
        if self.revoked_since(since) {
            self.store.lock().unwrap().remove(&token);
            return false;
        }
        true
    }

    /// `Local::drop_named` of a user: remembered, then every key the index has dropped.
    fn revoke_user(&self, user: i64) {
        let _applying = self.write();
        step();
        self.log.record(Some(Named::User {
            endpoint: ENDPOINT,
            user,
        }));
        let keys = self.index.lock().unwrap().remove(&user);
        for key in keys.into_iter().flatten() {
            self.store.lock().unwrap().remove(&key);
        }
    }

    /// `Local::drop_all`: remembered, then the store and the index emptied.
    fn invalidate_all(&self) {
        let _applying = self.write();
        step();
        self.log.record(None);
        self.store.lock().unwrap().clear();
        self.index.lock().unwrap().clear();
    }

    /// The lock a revocation holds, but in the unlocked protocol.
    fn write(&self) -> Option<shuttle::sync::RwLockWriteGuard<'_, ()>> {
        (self.protocol != Protocol::Unlocked).then(|| self.applying.write().unwrap())
    }

    /// A cache hit: what the store serves for `token`.
    fn lookup(&self, token: u64) -> Option<(i64, bool)> {
        self.store.lock().unwrap().get(&token).copied()
    }
}

/// One run of a lookup model: the tier, the integrator's state, and what happened.
struct World {
    tier: Tier,
    /// The integrator has banned the user: its API refuses the token from then on.
    banned: AtomicBool,
    /// The revocation has returned: it is acknowledged.
    acked: AtomicBool,
    /// The steps of this schedule, for the report of a bad one.
    trace: std::sync::Mutex<Vec<String>>,
}

impl World {
    fn new(protocol: Protocol) -> Arc<World> {
        Arc::new(World {
            tier: Tier::new(protocol),
            banned: AtomicBool::new(false),
            acked: AtomicBool::new(false),
            trace: std::sync::Mutex::default(),
        })
    }

    fn note(&self, what: impl Into<String>) {
        self.trace.lock().unwrap().push(what.into());
    }

    /// Fails the schedule with what broke and the steps that led there.
    fn violated(&self, property: &str) -> ! {
        let trace = self.trace.lock().unwrap().join(" -> ");
        panic!("VIOLATION: {property}; schedule: {trace}")
    }

    /// One flight's call (`Resolver::fetch`): the mark, the API's answer, the store.
    fn fetch(&self, who: &str) -> (Option<i64>, Mark) {
        let early = self.tier.mark();
        step();
        let banned = self.banned.load(Ordering::SeqCst);
        let since = match self.tier.protocol {
            Protocol::MarkAfterFetch => self.tier.mark(),
            _ => early,
        };
        if banned {
            self.note(format!("{who} fetches: rejected"));
            return (None, since);
        }
        self.note(format!("{who} fetches user 7 (mark {since:?})"));
        let stored = self.tier.store(TOKEN, (USER, false), since);
        self.note(format!("{who} stores: {stored}"));
        (Some(USER), since)
    }

    /// `resolve_miss`'s check of a flight's answer: handed out unless revoked since `since`.
    /// Says whether it was handed out.
    fn hand_out(&self, who: &str, answer: Option<i64>, since: Mark) -> bool {
        if answer.is_none() {
            return false;
        }
        // Read before the check: a revocation acknowledged by then must be seen by it.
        let acked_before = self.acked.load(Ordering::SeqCst);
        if self.tier.revoked_since(since) {
            self.note(format!("{who}: revoked since its mark, starts over"));
            return false;
        }
        self.note(format!("{who} hands out user 7"));
        if acked_before {
            self.violated(&format!(
                "{who} handed out an answer fetched before a revocation acknowledged before it"
            ));
        }
        true
    }
}

/// Property 1: a revocation during a look-up in flight. A leader runs the flight, a waiter
/// takes its answer through the hand-off, a ban lands (the API first, then the revocation), and
/// a cache hit comes once the ban is acknowledged. Whatever the order: no answer fetched before
/// the ban is handed out or served after it was acknowledged, and none stays cached.
fn lookup_in_flight(protocol: Protocol) -> impl Fn() + Send + Sync + 'static {
    move || {
        let world = World::new(protocol);
        let (flight, joined) = mpsc::channel::<(Option<i64>, Mark)>();
        let (acked, heard) = mpsc::channel::<()>();
        let leader = {
            let world = world.clone();
            thread::spawn(move || {
                let (answer, since) = world.fetch("leader");
                let _ = flight.send((answer, since));
                if !world.hand_out("leader", answer, since) && answer.is_some() {
                    let (answer, since) = world.fetch("leader again");
                    world.hand_out("leader again", answer, since);
                }
            })
        };
        let waiter = {
            let world = world.clone();
            thread::spawn(move || {
                let own = world.tier.mark();
                world.note("waiter joins");
                let (answer, flight_since) = joined.recv().unwrap();
                let since = match world.tier.protocol {
                    Protocol::WaiterOwnMark => own,
                    _ => flight_since,
                };
                if !world.hand_out("waiter", answer, since) && answer.is_some() {
                    let (answer, since) = world.fetch("waiter again");
                    world.hand_out("waiter again", answer, since);
                }
            })
        };
        let ban = {
            let world = world.clone();
            thread::spawn(move || {
                world.banned.store(true, Ordering::SeqCst);
                world.note("API bans user 7");
                world.tier.revoke_user(USER);
                world.acked.store(true, Ordering::SeqCst);
                world.note("ban acknowledged");
                acked.send(()).unwrap();
            })
        };
        let hit = {
            let world = world.clone();
            thread::spawn(move || {
                heard.recv().unwrap();
                if world.tier.lookup(TOKEN).is_some() {
                    world.violated("a cache hit after the ban was acknowledged served user 7");
                }
            })
        };
        for thread in [leader, waiter, ban, hit] {
            thread.join().unwrap();
        }
        if world.tier.lookup(TOKEN).is_some() {
            world.violated("user 7, fetched before the ban, stays cached after it");
        }
    }
}

/// Property 2: a store racing an `invalidate_all`. A look-up stores its answer while everything
/// is invalidated, and a cache hit comes once `invalidate_all` has returned. Whatever the
/// order: once it has returned, no entry stored by a call that began before it is served.
fn store_racing_invalidate_all(protocol: Protocol) -> impl Fn() + Send + Sync + 'static {
    move || {
        let world = World::new(protocol);
        let started = Arc::new(AtomicBool::new(false));
        let (returned, heard) = mpsc::channel::<()>();
        let lookup = {
            let (world, started) = (world.clone(), started.clone());
            thread::spawn(move || {
                let since = world.tier.mark();
                // Read after the mark: `false` means the call began before `invalidate_all`.
                let began_before = !started.load(Ordering::SeqCst);
                world.note(format!("look-up marks (began before: {began_before})"));
                step();
                let stored = world.tier.store(TOKEN, (USER, began_before), since);
                world.note(format!("look-up stores: {stored}"));
            })
        };
        let invalidate = {
            let world = world.clone();
            thread::spawn(move || {
                started.store(true, Ordering::SeqCst);
                world.note("invalidate_all begins");
                world.tier.invalidate_all();
                world.note("invalidate_all returns");
                returned.send(()).unwrap();
            })
        };
        let hit = {
            let world = world.clone();
            thread::spawn(move || {
                heard.recv().unwrap();
                if world.tier.lookup(TOKEN).is_some_and(|(_, before)| before) {
                    world.violated("a hit after invalidate_all returned served an older store");
                }
            })
        };
        for thread in [lookup, invalidate, hit] {
            thread.join().unwrap();
        }
        if world.tier.lookup(TOKEN).is_some_and(|(_, before)| before) {
            world.violated("an entry stored by a call begun before invalidate_all outlived it");
        }
    }
}

/// What exploring a model found: how many schedules ran, in how long, and the first violation.
#[derive(Debug)]
struct Explored {
    schedules: usize,
    took: Duration,
    violation: Option<String>,
}

/// Explores `model` with `scheduler`; a violation ends it (shuttle prints the failing schedule,
/// and the seed that replays it, to the test's output).
fn explore<S: Scheduler + 'static>(scheduler: S, model: Model) -> Explored {
    let started = Instant::now();
    let mut config = Config::new();
    config.max_steps = shuttle::MaxSteps::FailAfter(10_000);
    let run = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(scheduler, config).run(model)
    }));
    let took = started.elapsed();
    match run {
        Ok(schedules) => Explored {
            schedules,
            took,
            violation: None,
        },
        Err(panic) => Explored {
            schedules: 0,
            took,
            violation: Some(
                (panic.downcast_ref::<String>().cloned())
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
            ),
        },
    }
}

/// A model of one protocol, as shuttle runs it.
type Model = Box<dyn Fn() + Send + Sync>;

/// How many schedules each scheduler explores of the real protocol: random, then PCT (depth
/// 3, which finds any bug that needs at most two forced switches with a known probability).
const SCHEDULES: usize = 20_000;

/// Explores the real protocol of `model` over [`SCHEDULES`] random and as many PCT schedules;
/// panics on the first violation.
fn check(name: &str, model: fn(Protocol) -> Model) {
    let runs = [
        (
            "random",
            explore(
                RandomScheduler::new_from_seed(34, SCHEDULES),
                model(Protocol::Real),
            ),
        ),
        (
            "pct",
            explore(
                PctScheduler::new_from_seed(34, 3, SCHEDULES),
                model(Protocol::Real),
            ),
        ),
    ];
    for (scheduler, explored) in runs {
        eprintln!(
            "{name}: {scheduler}: {} schedules in {:?}",
            explored.schedules, explored.took
        );
        if let Some(violation) = explored.violation {
            panic!("{name}: {scheduler} found {violation}");
        }
    }
}

/// Explores `model` on a protocol broken on purpose until a scheduler finds the violation;
/// what it found.
fn find_violation(name: &str, model: fn(Protocol) -> Model, protocol: Protocol) -> String {
    let tries = [
        explore(
            PctScheduler::new_from_seed(34, 3, SCHEDULES),
            model(protocol),
        ),
        explore(
            RandomScheduler::new_from_seed(34, SCHEDULES),
            model(protocol),
        ),
    ];
    for explored in tries {
        if let Some(violation) = explored.violation {
            eprintln!(
                "{name} ({protocol:?}) found in {:?}: {violation}",
                explored.took
            );
            return violation;
        }
    }
    panic!("{name}: no schedule of the {protocol:?} protocol broke the property")
}

fn lookup_model(protocol: Protocol) -> Model {
    Box::new(lookup_in_flight(protocol))
}

fn invalidate_model(protocol: Protocol) -> Model {
    Box::new(store_racing_invalidate_all(protocol))
}

#[test]
fn a_revocation_during_a_lookup_in_flight_is_neither_cached_nor_handed_out_after_its_ack() {
    check("lookup in flight", lookup_model);
}

#[test]
fn a_store_racing_invalidate_all_is_not_served_once_it_returns() {
    check("store vs invalidate_all", invalidate_model);
}

#[test]
fn the_lookup_model_finds_a_mark_taken_after_the_fetch() {
    let found = find_violation("lookup in flight", lookup_model, Protocol::MarkAfterFetch);
    assert!(found.contains("VIOLATION"), "{found}");
}

#[test]
fn the_lookup_model_finds_a_waiter_checked_against_its_own_mark() {
    let found = find_violation("lookup in flight", lookup_model, Protocol::WaiterOwnMark);
    assert!(found.contains("waiter handed out"), "{found}");
}

#[test]
fn the_lookup_model_finds_a_hit_in_the_window_of_an_unlocked_store() {
    let found = find_violation("lookup in flight", lookup_model, Protocol::Unlocked);
    assert!(found.contains("cache hit after the ban"), "{found}");
}

#[test]
fn the_invalidate_all_model_finds_a_hit_in_the_window_of_an_unlocked_store() {
    let found = find_violation(
        "store vs invalidate_all",
        invalidate_model,
        Protocol::Unlocked,
    );
    assert!(found.contains("after invalidate_all returned"), "{found}");
}

/// The real local tier, in the orders a schedule can put its calls in: the model's
/// [`Tier`] decides as it does.
mod real_local_tier {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::entry::{Cached, Lookup};
    use super::super::index::Index;
    use super::super::key::{CacheKey, KeyRef};
    use super::super::local::{Local, Target};
    use super::super::store::Store;
    use super::{Protocol, Tier, USER};
    use crate::auth_url::Endpoint;
    use crate::user::{Resolution, User};
    use crate::PlainHttp;

    const EP: &str = "https://a.example/api/user";

    fn local() -> Local {
        let ttl = Duration::from_secs(60);
        let store = Store::new(100, ttl, ttl, Duration::ZERO);
        let fingerprint = super::super::local_fingerprint();
        Local::new(store, Arc::new(Index::new(false)), fingerprint, ttl, ttl)
    }

    fn answer() -> Cached {
        let user = User {
            id: USER,
            name: "n".into(),
            extra: Default::default(),
        };
        Cached::user(
            Resolution::new(Arc::new(user), None),
            Duration::from_secs(60),
        )
    }

    fn cached(local: &Local, endpoint: &Endpoint) -> bool {
        let key = KeyRef {
            endpoint,
            token: "t",
        };
        matches!(local.store.get(&key), Lookup::Fresh(_))
    }

    /// For each order of a store (its mark, then its insert) and a revocation: whether the
    /// real tier and the model's keep the answer (in one shuttle execution, where the model's
    /// primitives run).
    #[test]
    fn real_local_tier_decides_as_the_model_for_every_order_of_store_and_revocation() {
        shuttle::check_random(same_decisions, 1);
    }

    fn same_decisions() {
        let endpoint = Arc::new(Endpoint::parse(EP, PlainHttp::LoopbackOnly).unwrap());
        // 0: revocation before the mark; 1: between the mark and the store; 2: after the store.
        for at in 0..3 {
            for everything in [false, true] {
                let (real, model) = (local(), Tier::new(Protocol::Real));
                let revoke = || {
                    if everything {
                        real.drop_all();
                        model.invalidate_all();
                    } else {
                        real.drop_named(Target::User {
                            endpoint: &endpoint,
                            user: USER,
                        });
                        model.revoke_user(USER);
                    }
                };
                if at == 0 {
                    revoke();
                }
                let (real_since, model_since) = (real.mark(), model.log.mark());
                if at == 1 {
                    revoke();
                }
                let stored = real.store(
                    &CacheKey::new(endpoint.clone(), "t"),
                    "t",
                    &answer(),
                    real_since,
                );
                let model_stored = model.store(super::TOKEN, (USER, false), model_since);
                if at == 2 {
                    revoke();
                }
                let real_kept = cached(&real, &endpoint);
                let model_kept = model.lookup(super::TOKEN).is_some();
                assert_eq!(
                    stored, model_stored,
                    "stored: revocation at {at}, all: {everything}"
                );
                assert_eq!(
                    real_kept, model_kept,
                    "kept: revocation at {at}, all: {everything}"
                );
                assert_eq!(real_kept, at == 0, "kept only when revoked before the mark");
            }
        }
    }
}
