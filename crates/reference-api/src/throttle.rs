//! Failed logins counted per username and per client address, so that guessing passwords is
//! slow: past a limit the key is locked out for a while that doubles with each further
//! failure, and an attempt on a locked key is refused before its password is checked.
//!
//! An attempt is admitted first ([`Throttle::admit`]) and reserves its place, so that many
//! concurrent guesses cannot all slip in before the first failure is counted; its
//! [`Attempt`] then records how it ended. Memory is bounded: each map holds at most
//! `max_tracked` keys, forgotten ones are swept, and at the cap the key that would be
//! forgotten first makes room.
//!
//! It does not own the password check or the answers; `login` does.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::config::LoginLimits;
use super::store::sha256;
pub(super) use token_resolver_listener::address_key;

/// Keys are swept of forgotten records on every this-many-th new one, or when a map is full.
const SWEEP_EVERY: u64 = 256;
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
    /// By client address, IPv6 by its /64 (one host often holds a whole /64).
    addresses: Tracker<IpAddr>,
}

/// The records of one kind of key.
struct Tracker<K> {
    /// Live records.
    records: HashMap<K, Record>,
    /// Failures before a lockout.
    limit: u32,
    /// Records created so far, to sweep every [`SWEEP_EVERY`].
    created: u64,
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
    address: Option<IpAddr>,
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
        let address = address.map(address_key);
        let limits = &self.limits;
        let mut maps = self.lock();
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

impl<K: Eq + Hash + Copy> Tracker<K> {
    fn new(limit: u32) -> Self {
        Tracker {
            records: HashMap::new(),
            limit,
            created: 0,
        }
    }

    /// Whether the key admits an attempt now.
    fn admits(&self, key: &K, now: Instant) -> Result<(), Duration> {
        self.records
            .get(key)
            .map_or(Ok(()), |record| record.admits(self.limit, now))
    }

    /// Counts an attempt in progress on `key`, making room for a new record if needed.
    /// `Err(wait)` only when the map is full of attempts in progress.
    fn reserve(&mut self, key: K, limits: &LoginLimits, now: Instant) -> Result<(), Duration> {
        if !self.records.contains_key(&key) {
            self.make_room(limits, now)?;
            self.records.insert(key, Record::new(now));
        }
        if let Some(record) = self.records.get_mut(&key) {
            record.pending += 1;
        }
        Ok(())
    }

    /// Sweeps forgotten records every [`SWEEP_EVERY`] new ones or when full; at the cap,
    /// drops the record that would be forgotten first.
    fn make_room(&mut self, limits: &LoginLimits, now: Instant) -> Result<(), Duration> {
        self.created += 1;
        let full = self.records.len() >= limits.max_tracked;
        if full || self.created % SWEEP_EVERY == 0 {
            self.records
                .retain(|_, record| !record.forgotten(limits.window, now));
        }
        if self.records.len() < limits.max_tracked {
            return Ok(());
        }
        let first_forgotten = self
            .records
            .iter()
            .filter(|(_, record)| record.pending == 0)
            .min_by_key(|(_, record)| record.quiet_from)
            .map(|(key, _)| *key);
        match first_forgotten {
            Some(key) => {
                self.records.remove(&key);
                tracing::warn!(
                    tracked = self.records.len(),
                    "login throttle full: forgot the quietest key to make room"
                );
                Ok(())
            }
            None => Err(BUSY_RETRY),
        }
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
        if record.pending == 0 && record.failures == 0 {
            self.records.remove(key);
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
        maps.usernames.created = SWEEP_EVERY - 1;
        maps.usernames
            .reserve(sha256("eve"), &limits(), later)
            .unwrap();
        assert!(!maps.usernames.records.contains_key(&key));
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
