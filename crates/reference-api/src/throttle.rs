//! Failed logins counted per username and per client address, so that guessing passwords is
//! slow: past a limit the key is locked out for a while that doubles with each further
//! failure, and an attempt on a locked key is refused before its password is checked.
//!
//! An attempt is admitted first ([`Throttle::admit`]) and reserves its place, so that many
//! concurrent guesses cannot all slip in before the first failure is counted; its
//! [`Attempt`] then records how it ended. Memory is bounded: each map holds at most
//! `max_tracked` keys, forgotten ones are swept, and at the cap the key whose last failure is
//! oldest makes room (one still locked out or with an attempt in progress is passed over a few
//! times first). Both are O(1) per new key: the keys are kept in the order of their last
//! failure, a queue whose outdated entries are skipped when they reach its front, so that
//! nothing scans the map under the lock. (The queue itself is compacted once it holds twice as
//! many entries as there are keys: one pass per as many failures, amortized O(1).)
//!
//! Addresses are counted by host: IPv4 as it is, IPv6 by its /64. One IPv6 /48 holds 65,536
//! /64s: once [`PER_48`] of them are tracked, the /48's further /64s share one record of the
//! /48, which also refuses every address of the /48 while it is locked out, so that one /48
//! can neither fill the map nor guess at a /64's pace.
//!
//! It does not own the password check or the answers; `login` does.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::config::LoginLimits;
use super::store::sha256;
pub(super) use token_resolver_listener::address_key;

/// Forgotten records swept from the front of the queue for each new key, at most.
const SWEEP_STEPS: usize = 2;
/// Records passed over (locked out, or with an attempt in progress) for each new key in a
/// full map, at most, before the first of them that has no attempt in progress makes room.
const EVICT_TRIES: usize = 8;
/// IPv6 /64s of one /48 tracked apart; the /48's others share one record.
pub(super) const PER_48: u32 = 64;
/// The wait asked of an attempt refused because others on its key are still being checked.
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// The failed-login bookkeeping of one reference API.
pub(super) struct Throttle {
    /// The limits, lockouts and caps.
    limits: LoginLimits,
    /// Both maps, under one lock so that an attempt is admitted on both or neither. Never
    /// held across an `.await`.
    maps: Mutex<Maps>,
}

/// The tracked keys.
struct Maps {
    /// By SHA-256 of the username (a username may be kilobytes long; its hash is 32 bytes).
    usernames: Tracker<[u8; 32]>,
    /// By client address, IPv6 by its /64 (one host often holds a whole /64), or by its /48
    /// past [`PER_48`].
    addresses: Tracker<AddressKey>,
}

/// What a client address is counted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum AddressKey {
    /// IPv4 as it is, IPv6 by its /64 ([`address_key`]).
    Host(IpAddr),
    /// An IPv6 /48 whose /64s are counted together, by its first 48 bits.
    Net48(u64),
}

/// A key of a [`Tracker`].
trait Key: Eq + Hash + Copy {
    /// The wider key this one is counted by once its group is full, if it has one.
    fn pool(&self) -> Option<Self> {
        None
    }
}

impl Key for [u8; 32] {}

impl Key for AddressKey {
    fn pool(&self) -> Option<Self> {
        match self {
            AddressKey::Host(IpAddr::V6(v6)) => Some(AddressKey::Net48(prefix48(v6))),
            _ => None,
        }
    }
}

/// The first 48 bits of `address`.
fn prefix48(address: &Ipv6Addr) -> u64 {
    (u128::from(*address) >> 80) as u64
}

/// The records of one kind of key.
struct Tracker<K> {
    /// Live records.
    records: HashMap<K, Record>,
    /// Every key in the order of its record's last failure (or creation), oldest first, with
    /// that touch's stamp: an entry whose stamp is not its record's now is outdated, and
    /// skipped when it reaches the front.
    order: VecDeque<(K, u64)>,
    /// The next touch's stamp.
    stamps: u64,
    /// Records tracked apart in each pool ([`Key::pool`]), by the pool's key.
    pooled: HashMap<K, u32>,
    /// Failures before a lockout.
    limit: u32,
    /// Queue entries looked at to sweep and make room so far: what new keys cost.
    visited: u64,
}

/// What is known of one key.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// Failures not yet forgotten.
    failures: u32,
    /// Attempts admitted whose outcome is not known yet.
    pending: u32,
    /// Locked out until then.
    locked_until: Option<Instant>,
    /// The stamp of its latest entry in the order.
    stamp: u64,
    /// The last failure, or the end of the lockout it caused: the record is forgotten a
    /// window after this.
    quiet_from: Instant,
}

impl Record {
    fn new(now: Instant) -> Self {
        Record {
            failures: 0,
            pending: 0,
            locked_until: None,
            stamp: 0,
            quiet_from: now,
        }
    }

    /// `Err(wait)` when no attempt may start now: locked out, or the attempts in progress
    /// already take every try the limit leaves (once past the limit, one at a time).
    fn admits(&self, limit: u32, now: Instant) -> Result<(), Duration> {
        if let Some(until) = self.locked_until.filter(|until| *until > now) {
            return Err(until - now);
        }
        let room = if self.failures >= limit {
            self.pending == 0
        } else {
            self.failures + self.pending < limit
        };
        if room {
            Ok(())
        } else {
            Err(BUSY_RETRY)
        }
    }

    /// Whether nothing about the key needs remembering any more.
    fn forgotten(&self, window: Duration, now: Instant) -> bool {
        self.pending == 0 && (self.failures == 0 || now >= self.quiet_from + window)
    }
}

/// How an admitted attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Wrong username or password: counted on both keys.
    Failure,
    /// The right password: the username's failures are cleared.
    Success,
    /// Not checked after all (the check was refused as busy, or the client left).
    Abandoned,
}

/// An admitted login attempt. Say how it ended with [`failed`](Self::failed) or
/// [`succeeded`](Self::succeeded); dropped without either, it frees its place uncounted.
pub(super) struct Attempt<'a> {
    /// Where it was admitted.
    throttle: &'a Throttle,
    /// Its username's key.
    username: [u8; 32],
    /// Its address's key, when the address is known.
    address: Option<AddressKey>,
    /// Whether its outcome was recorded.
    finished: bool,
}

impl Attempt<'_> {
    /// The password was wrong, or the username unknown.
    pub(super) fn failed(mut self) {
        self.finish(Outcome::Failure);
    }

    /// The password was right.
    pub(super) fn succeeded(mut self) {
        self.finish(Outcome::Success);
    }

    fn finish(&mut self, outcome: Outcome) {
        self.finished = true;
        let limits = &self.throttle.limits;
        let now = Instant::now();
        let mut maps = self.throttle.lock();
        maps.usernames.record(&self.username, outcome, limits, now);
        if let Some(address) = &self.address {
            let outcome = match outcome {
                // A success from an address does not excuse its failures on other usernames.
                Outcome::Success => Outcome::Abandoned,
                other => other,
            };
            maps.addresses.record(address, outcome, limits, now);
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(Outcome::Abandoned);
        }
    }
}

impl Throttle {
    pub(super) fn new(limits: LoginLimits) -> Self {
        let maps = Maps {
            usernames: Tracker::new(limits.failures_per_username),
            addresses: Tracker::new(limits.failures_per_address),
        };
        Throttle {
            limits,
            maps: Mutex::new(maps),
        }
    }

    /// Admits a login attempt for `username` from `address` (`None` when the server was not
    /// given the connection's address), or `Err(wait)`: how long until one may be admitted.
    pub(super) fn admit(
        &self,
        username: &str,
        address: Option<IpAddr>,
        now: Instant,
    ) -> Result<Attempt<'_>, Duration> {
        let username = sha256(username);
        let limits = &self.limits;
        let mut maps = self.lock();
        let address = address.map(|address| {
            maps.addresses
                .key_for(AddressKey::Host(address_key(address)))
        });
        maps.usernames.admits(&username, now)?;
        if let Some(address) = &address {
            maps.addresses.admits(address, now)?;
        }
        maps.usernames.reserve(username, limits, now)?;
        if let Some(address) = address {
            if let Err(wait) = maps.addresses.reserve(address, limits, now) {
                maps.usernames
                    .record(&username, Outcome::Abandoned, limits, now);
                return Err(wait);
            }
        }
        Ok(Attempt {
            throttle: self,
            username,
            address,
            finished: false,
        })
    }

    /// How many usernames and addresses are tracked now.
    #[cfg(test)]
    fn tracked(&self) -> (usize, usize) {
        let maps = self.lock();
        (maps.usernames.records.len(), maps.addresses.records.len())
    }

    /// Locks the maps; a panic while they were held left only complete map operations.
    fn lock(&self) -> MutexGuard<'_, Maps> {
        self.maps
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<K: Key> Tracker<K> {
    fn new(limit: u32) -> Self {
        Tracker {
            records: HashMap::new(),
            order: VecDeque::new(),
            stamps: 0,
            pooled: HashMap::new(),
            limit,
            visited: 0,
        }
    }

    /// What `key` is counted by: itself, or its pool once the pool is full (or counting
    /// already), unless it has a record of its own.
    fn key_for(&self, key: K) -> K {
        match key.pool() {
            Some(pool)
                if !self.records.contains_key(&key)
                    && (self.records.contains_key(&pool)
                        || self.pooled.get(&pool).is_some_and(|n| *n >= PER_48)) =>
            {
                pool
            }
            _ => key,
        }
    }

    /// Whether the key admits an attempt now (and its pool, which a lockout of refuses every
    /// key of).
    fn admits(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let admits = |key: &K| {
            self.records
                .get(key)
                .map_or(Ok(()), |record| record.admits(self.limit, now))
        };
        admits(key)?;
        key.pool().map_or(Ok(()), |pool| admits(&pool))
    }

    /// Counts an attempt in progress on `key`, making room for a new record if needed.
    /// `Err(wait)` only when the map is full of attempts in progress.
    fn reserve(&mut self, key: K, limits: &LoginLimits, now: Instant) -> Result<(), Duration> {
        if !self.records.contains_key(&key) {
            self.make_room(limits, now)?;
            self.records.insert(key, Record::new(now));
            if let Some(pool) = key.pool() {
                *self.pooled.entry(pool).or_default() += 1;
            }
            self.touch(key);
        }
        if let Some(record) = self.records.get_mut(&key) {
            record.pending += 1;
        }
        Ok(())
    }

    /// Puts `key` at the back of the order. The queue keeps at most about twice as many
    /// entries as there are records: past that its outdated ones are dropped, a pass paid for
    /// by the touches since the last one.
    fn touch(&mut self, key: K) {
        let Some(record) = self.records.get_mut(&key) else {
            return;
        };
        self.stamps += 1;
        record.stamp = self.stamps;
        self.order.push_back((key, self.stamps));
        if self.order.len() > 2 * self.records.len() + 64 {
            let records = &self.records;
            self.order
                .retain(|(key, stamp)| records.get(key).is_some_and(|r| r.stamp == *stamp));
        }
    }

    /// The record at the front of the order, outdated entries dropped on the way; `None` when
    /// the queue is empty.
    fn front(&mut self) -> Option<K> {
        while let Some(&(key, stamp)) = self.order.front() {
            self.visited += 1;
            if self.records.get(&key).is_some_and(|r| r.stamp == stamp) {
                return Some(key);
            }
            self.order.pop_front();
        }
        None
    }

    /// Forgets `key`'s record (its queue entry goes when it reaches the front).
    fn remove(&mut self, key: &K) {
        if self.records.remove(key).is_none() {
            return;
        }
        if let Some(pool) = key.pool() {
            if let Some(n) = self.pooled.get_mut(&pool) {
                *n -= 1;
                if *n == 0 {
                    self.pooled.remove(&pool);
                }
            }
        }
    }

    /// Sweeps up to [`SWEEP_STEPS`] forgotten records from the front of the order; when the
    /// map is still full, the front record makes room: one locked out or with an attempt in
    /// progress goes to the back instead, up to [`EVICT_TRIES`] times, after which the first
    /// of them with no attempt in progress makes room. `Err` when every one tried has an
    /// attempt in progress.
    fn make_room(&mut self, limits: &LoginLimits, now: Instant) -> Result<(), Duration> {
        for _ in 0..SWEEP_STEPS {
            match self.front() {
                Some(key) if self.records[&key].forgotten(limits.window, now) => {
                    self.order.pop_front();
                    self.remove(&key);
                }
                _ => break,
            }
        }
        if self.records.len() < limits.max_tracked {
            return Ok(());
        }
        let mut fallback = None;
        for _ in 0..EVICT_TRIES {
            let Some(key) = self.front() else { break };
            let record = &self.records[&key];
            let (pending, locked) = (
                record.pending > 0,
                record.locked_until.is_some_and(|until| until > now),
            );
            if !pending && !locked {
                self.order.pop_front();
                self.forget_to_make_room(&key);
                return Ok(());
            }
            if !pending {
                fallback.get_or_insert(key);
            }
            self.order.pop_front();
            self.touch(key);
        }
        match fallback {
            Some(key) => {
                self.forget_to_make_room(&key);
                Ok(())
            }
            None => Err(BUSY_RETRY),
        }
    }

    fn forget_to_make_room(&mut self, key: &K) {
        self.remove(key);
        tracing::warn!(
            tracked = self.records.len(),
            "login throttle full: forgot the key quiet the longest to make room"
        );
    }

    /// Records how an attempt on `key` ended.
    fn record(&mut self, key: &K, outcome: Outcome, limits: &LoginLimits, now: Instant) {
        let Some(record) = self.records.get_mut(key) else {
            return;
        };
        record.pending = record.pending.saturating_sub(1);
        match outcome {
            Outcome::Failure => {
                record.failures = record.failures.saturating_add(1);
                record.quiet_from = now;
                if record.failures >= self.limit {
                    let doublings = (record.failures - self.limit).min(24);
                    let lockout = limits
                        .first_lockout
                        .saturating_mul(1 << doublings)
                        .min(limits.max_lockout);
                    record.locked_until = Some(now + lockout);
                    record.quiet_from = now + lockout;
                }
            }
            Outcome::Success => {
                record.failures = 0;
                record.locked_until = None;
            }
            Outcome::Abandoned => {}
        }
        let forget = record.pending == 0 && record.failures == 0;
        if forget {
            self.remove(key);
        } else if outcome == Outcome::Failure {
            self.touch(*key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LoginLimits {
        LoginLimits {
            failures_per_username: 3,
            failures_per_address: 5,
            window: Duration::from_secs(60),
            first_lockout: Duration::from_secs(2),
            max_lockout: Duration::from_secs(16),
            max_tracked: 8,
            ..LoginLimits::default()
        }
    }

    fn fail(throttle: &Throttle, username: &str, address: Option<IpAddr>, now: Instant) {
        let attempt = throttle.admit(username, address, now).expect("admitted");
        attempt.failed();
    }

    #[test]
    fn lockout_starts_at_the_limit_and_doubles_to_the_cap() {
        // The limit-th failure locks the username for the first lockout; each further failure
        // (one per lockout) doubles it, up to the cap.
        let throttle = Throttle::new(limits());
        let now = Instant::now();
        for _ in 0..3 {
            fail(&throttle, "alice", None, now);
        }
        let wait = throttle.admit("alice", None, Instant::now()).err();
        assert!(wait.is_some_and(|w| w > Duration::from_secs(1)), "{wait:?}");
        let mut expected = Duration::from_secs(2);
        for _ in 0..5 {
            let later = Instant::now() + Duration::from_secs(20);
            assert!(throttle.admit("alice", None, later).is_ok());
            throttle
                .admit("alice", None, later)
                .expect("admitted")
                .failed();
            expected = (expected * 2).min(Duration::from_secs(16));
            let wait = throttle
                .admit("alice", None, Instant::now())
                .err()
                .expect("locked");
            assert!(wait <= expected && wait + Duration::from_secs(1) >= expected);
        }
    }

    #[test]
    fn concurrent_attempts_reserve_their_place() {
        // With the limit at 3, only 3 attempts on one username are admitted at once.
        let throttle = Throttle::new(limits());
        let now = Instant::now();
        let held: Vec<_> = (0..3)
            .map(|_| throttle.admit("bob", None, now).expect("admitted"))
            .collect();
        assert_eq!(throttle.admit("bob", None, now).err(), Some(BUSY_RETRY));
        drop(held);
        assert!(throttle.admit("bob", None, now).is_ok());
        assert_eq!(
            throttle.tracked(),
            (0, 0),
            "abandoned attempts leave nothing"
        );
    }

    #[test]
    fn success_clears_the_username_but_not_the_address() {
        // A right password forgets the username's failures; the address keeps its own.
        let throttle = Throttle::new(limits());
        let address = Some("10.0.0.1".parse().unwrap());
        let now = Instant::now();
        fail(&throttle, "carol", address, now);
        fail(&throttle, "carol", address, now);
        throttle.admit("carol", address, now).unwrap().succeeded();
        assert_eq!(throttle.tracked(), (0, 1));
        for _ in 0..3 {
            fail(&throttle, "carol", address, now);
        }
        assert!(throttle.admit("carol", address, now).is_err());
    }

    #[test]
    fn an_address_is_locked_across_usernames() {
        // Five failures from one address on five usernames lock the address for any username.
        let throttle = Throttle::new(limits());
        let address = Some("10.0.0.2".parse().unwrap());
        let now = Instant::now();
        for i in 0..5 {
            fail(&throttle, &format!("user{i}"), address, now);
        }
        assert!(throttle.admit("someone-else", address, now).is_err());
        let other = Some("10.0.0.3".parse().unwrap());
        assert!(throttle.admit("someone-else", other, now).is_ok());
    }

    #[test]
    fn ipv6_addresses_are_tracked_by_their_64() {
        // Two addresses of one /64 share a record; an IPv4-mapped address is its IPv4.
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(address_key(mapped), "10.1.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn failures_are_forgotten_after_a_quiet_window() {
        // Failures a window old (after any lockout) no longer count.
        let throttle = Throttle::new(limits());
        let now = Instant::now();
        fail(&throttle, "dave", None, now);
        fail(&throttle, "dave", None, now);
        let later = now + Duration::from_secs(61);
        let mut maps = throttle.lock();
        let key = sha256("dave");
        assert!(maps.usernames.records[&key].forgotten(Duration::from_secs(60), later));
        maps.usernames
            .reserve(sha256("eve"), &limits(), later)
            .unwrap();
        assert!(!maps.usernames.records.contains_key(&key));
    }

    /// `count` failures of new usernames, each from its own address of `addresses`, at `now`.
    fn fail_many(
        throttle: &Throttle,
        prefix: &str,
        count: u32,
        addresses: impl Fn(u32) -> Option<IpAddr>,
        now: Instant,
    ) {
        for i in 0..count {
            fail(throttle, &format!("{prefix}{i}"), addresses(i), now);
        }
    }

    #[test]
    fn a_new_key_in_a_full_map_costs_a_bounded_number_of_steps() {
        // The cost of a new key once the map is full is counted, not timed: the queue entries
        // it looks at, a handful whatever the cap (a scan looked at every record, twice).
        let cap = 20_000;
        let throttle = Throttle::new(LoginLimits {
            max_tracked: cap,
            ..limits()
        });
        let start = Instant::now();
        let v4 = |i: u32| Some(IpAddr::from(i.to_be_bytes()));
        fail_many(&throttle, "user", cap as u32, v4, start);
        assert_eq!(throttle.tracked(), (cap, cap));
        let visited = |throttle: &Throttle| {
            let maps = throttle.lock();
            (maps.usernames.visited, maps.addresses.visited)
        };
        let before = visited(&throttle);
        let later = start + Duration::from_millis(1);
        fail_many(&throttle, "new", 2_000, |i| v4(cap as u32 + i), later);
        let after = visited(&throttle);
        let per_key = ((after.0 - before.0) / 2_000, (after.1 - before.1) / 2_000);
        assert!(
            per_key.0 <= 4 && per_key.1 <= 4,
            "queue entries looked at per new key: {per_key:?}"
        );
        assert_eq!(throttle.tracked(), (cap, cap), "still at the cap");
        let maps = throttle.lock();
        assert!(!maps.usernames.records.contains_key(&sha256("user0")));
        assert!(maps.usernames.records.contains_key(&sha256("new1999")));
    }

    #[test]
    fn a_locked_key_is_passed_over_when_room_is_made() {
        // At the cap, the key quiet the longest makes room, unless it is locked out: a flood of
        // new keys does not cut a lockout short while unlocked keys can go instead.
        let throttle = Throttle::new(limits());
        let now = Instant::now();
        for _ in 0..3 {
            fail(&throttle, "mallory", None, now);
        }
        fail_many(&throttle, "flood", 30, |_| None, now);
        assert_eq!(throttle.tracked().0, 8);
        assert!(
            throttle.admit("mallory", None, now).is_err(),
            "still locked"
        );
    }

    #[test]
    fn one_ipv6_48_cannot_fill_the_map_nor_guess_at_a_64s_pace() {
        // Every /64 of one /48 failing once: past PER_48 of them they share the /48's record,
        // which locks out the whole /48 at the address limit; another /48 is untouched.
        let throttle = Throttle::new(LoginLimits {
            max_tracked: 10_000,
            ..limits()
        });
        let now = Instant::now();
        let in_48 = |net: u16, i: u32| {
            let address = Ipv6Addr::new(0x2001, 0xdb8, net, i as u16, 0, 0, 0, 1);
            Some(IpAddr::V6(address))
        };
        let admitted = (0..5_000u32)
            .filter(|&i| {
                let attempt = throttle.admit(&format!("u{i}"), in_48(1, i), now);
                attempt.map(Attempt::failed).is_ok()
            })
            .count();
        let (_, addresses) = throttle.tracked();
        assert_eq!(
            addresses,
            PER_48 as usize + 1,
            "the /64s apart, then the /48"
        );
        assert_eq!(
            admitted,
            PER_48 as usize + 5,
            "then the /48's address limit"
        );
        assert!(throttle.admit("x", in_48(1, 60_000), now).is_err());
        assert!(
            throttle.admit("y", in_48(1, 0), now).is_err(),
            "the /48 locks its /64s"
        );
        assert!(throttle.admit("z", in_48(2, 0), now).is_ok());
    }

    #[test]
    fn memory_is_bounded_by_max_tracked() {
        // However many usernames and addresses fail, each map stays at the cap, and the
        // quietest key is the one forgotten.
        let throttle = Throttle::new(limits());
        let start = Instant::now();
        for i in 0..1_000u32 {
            let address = Some(IpAddr::from([10, 1, (i >> 8) as u8, i as u8]));
            let now = start + Duration::from_millis(u64::from(i));
            fail(&throttle, &format!("user{i}"), address, now);
            let (usernames, addresses) = throttle.tracked();
            assert!(usernames <= 8 && addresses <= 8, "{usernames} {addresses}");
        }
        assert_eq!(throttle.tracked(), (8, 8));
        let maps = throttle.lock();
        assert!(maps.usernames.records.contains_key(&sha256("user999")));
        assert!(!maps.usernames.records.contains_key(&sha256("user0")));
    }
}
