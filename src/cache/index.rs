//! The local tier's [`Index`]: every cached user's key by what a revocation may name it by,
//! so that a revocation finds what it names without walking the cache.
//!
//! Keys are found by their user (at their endpoint), which covers a ban, a logout (a session
//! is one of a user's: the cached answer says which), and by their token's fingerprint when a
//! shared tier sends revocations that name a token without carrying it. The user table holds
//! one entry per key: the user's hash (the user at an endpoint) and the very key the store
//! holds, two words, so that adding or dropping a key costs a look-up among that user's few
//! entries; past [`FEW`] keys a user's keys get a table of their own, found by fingerprint, so
//! that no user's count of tokens makes an insert under the index's lock cost more.
//! Fingerprints are not kept for the few: a ban that takes a key from the token table too
//! computes its fingerprint again. The token table holds one entry per key.
//! A key is indexed once: one equal to a key indexed already (a token cached anew) takes its
//! place. Rejections are not indexed: a revocation has nothing to take from them.
//!
//! The index keeps itself, without the store's help: a moka eviction listener would make moka
//! lock every key it removes and call back for each, which is most of what a revocation costs
//! it. A revocation takes out of the index what it drops from the store. What the store drops
//! on its own (expired, evicted to make room, replaced by a rejection) stays behind until the
//! sweep reaches it: every insert looks at the [`SWEEP`] oldest of a queue of the index's keys,
//! forgets those the store no longer holds and puts the others back at the end. Every key is
//! looked at once in each pass, and a pass takes fewer inserts than the index holds keys, so
//! the keys left behind stay within a small multiple of what the store holds and nothing ever
//! walks the index. A key left behind costs memory and nothing else: a revocation that finds
//! one drops nothing.
//!
//! Every key the store holds as a user is in the index: [`Local::store`] indexes what it stores
//! right after storing it (and checks the revocation log again once it has); the sweep forgets
//! a key only when the store holds nothing equal to it, and both it and a revocation forget a
//! key by identity, never an equal key indexed meanwhile.
//!
//! [`Local::store`]: super::local::Local::store

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;
use smallvec::SmallVec;

use super::key::{CacheKey, KeyHasher, KeyView};

/// Keys of the queue each insert looks at.
const SWEEP: usize = 2;

/// A token's fingerprint, the key it finds, and the hash of the key's user.
type TokenEntry = (u64, CacheKey, u64);

/// A user's hash and one of the user's keys: a user of several keys has as many entries, under
/// one hash. Two words, the least an entry can be: most users hold one token at a time, and
/// every cached user pays for this table's slots.
type UserEntry = (u64, CacheKey);

/// Past this many keys, a user's keys leave `by_user` for a table of their own
/// ([`ManyEntry`]), found by fingerprint: an insert or a removal then costs a look-up, not a
/// walk of the user's entries. A player holds a token or two; a user with thousands (a bot, a
/// load test, someone minting tokens to slow the index's lock for everyone) is the case this
/// is for.
const FEW: usize = 32;

/// A user's hash and the user's keys, more than [`FEW`] of them, hashed by their fingerprint
/// (already a keyed hash). Boxed: a user of the other table costs this one nothing.
type ManyEntry = (u64, Box<HashTable<(CacheKey, u64)>>);

/// The keys of every user: each user is in `by_user` or in `many`, never in both.
#[derive(Default)]
struct Users {
    /// Users with at most [`FEW`] keys.
    by_user: HashTable<UserEntry>,
    /// Users with more than [`FEW`] keys (they stay here until their last key goes).
    many: HashTable<ManyEntry>,
}

/// Every cached user's key, by user and, with a shared tier, by token fingerprint.
pub(crate) struct Index {
    tables: Mutex<Tables>,
    /// Hashes (endpoint, user) pairs; seeded per process (endpoints hash the same on every node
    /// through their URL's hash, but user hashes never leave this process).
    users: KeyHasher,
}

struct Tables {
    users: Users,
    /// Keys in `users`, all users together.
    user_keys: usize,
    /// `None` without a shared tier: nothing names a token without carrying it then.
    by_token: Option<HashTable<TokenEntry>>,
    /// Every key indexed, with its user's hash, oldest first, for the sweep; also keys the
    /// index no longer holds (taken, or replaced by an equal one), dropped when it reaches them.
    queue: VecDeque<(CacheKey, u64)>,
}

impl Index {
    /// An empty index; `by_token` when revocations may name tokens by fingerprint alone.
    pub(crate) fn new(by_token: bool) -> Index {
        Index {
            tables: Mutex::new(Tables {
                users: Users::default(),
                user_keys: 0,
                by_token: by_token.then(HashTable::new),
                queue: VecDeque::new(),
            }),
            users: KeyHasher::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The hash a user is found by at `endpoint`.
    fn user_hash(&self, endpoint: u64, user: i64) -> u64 {
        self.users.hash_one((endpoint, user))
    }

    /// Whether tokens are indexed by fingerprint.
    #[cfg(test)]
    pub(crate) fn by_token(&self) -> bool {
        self.lock().by_token.is_some()
    }

    /// Indexes `key`, just stored for `user`, and by `token` (its fingerprint) when tokens are,
    /// in place of an equal key indexed already; then sweeps, forgetting the keys `held` says
    /// the store no longer holds. `fingerprint` gives a swept key's fingerprint, which the
    /// sweep needs for a user of many keys. Both run under the index's lock: they must not take
    /// it.
    pub(crate) fn insert(
        &self,
        key: &CacheKey,
        user: i64,
        token: u64,
        held: impl Fn(&CacheKey) -> bool,
        fingerprint: impl Fn(&CacheKey) -> u64,
    ) {
        let by_user = self.user_hash(key.endpoint().key_hash(), user);
        let mut guard = self.lock();
        let tables = &mut *guard;
        if tables.users.insert(by_user, key, token, &fingerprint) {
            tables.user_keys += 1;
        }
        if let Some(by_token) = &mut tables.by_token {
            insert(by_token, token, key, by_user);
        }
        tables.queue.push_back((key.clone(), by_user));
        tables.sweep(held, fingerprint);
    }

    /// Takes out of the index, and returns, the keys of `user` at the endpoint hashed
    /// `endpoint` that `is` picks; `fingerprint` gives a key's fingerprint, to take it out of
    /// the token table too (both run under the index's lock: they must not take it). The
    /// caller drops the keys from the store.
    pub(crate) fn take_user(
        &self,
        endpoint: u64,
        user: i64,
        is: impl Fn(&CacheKey) -> bool,
        fingerprint: impl Fn(&CacheKey) -> u64,
    ) -> Vec<CacheKey> {
        let hash = self.user_hash(endpoint, user);
        let mut guard = self.lock();
        let tables = &mut *guard;
        let users = &mut tables.users;
        let mut taken = Vec::new();
        // A few entries at most: finding each from the start again is cheaper than a list.
        while let Ok(entry) = users.by_user.find_entry(hash, |(h, k)| *h == hash && is(k)) {
            let ((_, key), _) = entry.remove();
            taken.push(key);
        }
        if let Ok(mut entry) = users.many.find_entry(hash, |(h, _)| *h == hash) {
            let keys = &mut entry.get_mut().1;
            keys.retain(|(k, _)| {
                let take = is(k);
                if take {
                    taken.push(k.clone());
                }
                !take
            });
            if keys.is_empty() {
                entry.remove();
            } else if keys.len() * 4 < keys.capacity() {
                keys.shrink_to(keys.len() * 2, |(_, t)| *t);
            }
        }
        tables.user_keys -= taken.len();
        if let Some(by_token) = &mut tables.by_token {
            for key in &taken {
                remove(by_token, fingerprint(key), key);
            }
        }
        taken
    }

    /// Takes out of the index, and returns, the keys whose token fingerprint is `token` and
    /// whose endpoint `at` accepts: the caller drops them from the store. None when tokens are
    /// not indexed.
    pub(crate) fn take_token(
        &self,
        token: u64,
        at: impl Fn(&CacheKey) -> bool,
    ) -> SmallVec<[CacheKey; 1]> {
        let mut guard = self.lock();
        let tables = &mut *guard;
        let Some(by_token) = &mut tables.by_token else {
            return SmallVec::new();
        };
        let mut taken = SmallVec::new();
        while let Ok(entry) = by_token.find_entry(token, |(h, k, _)| *h == token && at(k)) {
            let ((_, key, user), _) = entry.remove();
            if tables.users.remove(user, &key, || token) {
                tables.user_keys -= 1;
            }
            taken.push(key);
        }
        taken
    }

    /// Forgets everything: the store was emptied.
    pub(crate) fn clear(&self) {
        let mut tables = self.lock();
        tables.users = Users::default();
        tables.user_keys = 0;
        if let Some(by_token) = &mut tables.by_token {
            by_token.clear();
        }
        tables.queue.clear();
    }

    /// Keys in the user table: one per cached user entry, plus those left behind.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().user_keys
    }
}

impl Tables {
    /// Takes `key` out of the user hashed `user` and out of `by_token`; whether it was there.
    fn forget(&mut self, key: &CacheKey, user: u64, token: impl Fn() -> u64) -> bool {
        if !self.users.remove(user, key, &token) {
            return false;
        }
        self.user_keys -= 1;
        if let Some(by_token) = &mut self.by_token {
            remove(by_token, token(), key);
        }
        true
    }

    /// Looks at the [`SWEEP`] oldest keys of the queue: drops those the index no longer
    /// holds, forgets those the store no longer holds, and puts the others back at the end.
    fn sweep(&mut self, held: impl Fn(&CacheKey) -> bool, fingerprint: impl Fn(&CacheKey) -> u64) {
        for _ in 0..SWEEP {
            let Some((key, user)) = self.queue.pop_front() else {
                return;
            };
            // Computed at most once per key, and only for a user of many keys.
            let token = std::cell::OnceCell::new();
            let token = || *token.get_or_init(|| fingerprint(&key));
            if !self.users.holds(&key, user, token) {
                continue;
            }
            if held(&key) {
                self.queue.push_back((key, user));
            } else {
                self.forget(&key, user, token);
            }
        }
    }
}

impl Users {
    /// Whether `key` (this very key) is indexed under the user hashed `user`; `token` gives
    /// its fingerprint, asked only for a user of many keys.
    fn holds(&self, key: &CacheKey, user: u64, token: impl FnOnce() -> u64) -> bool {
        if (self.by_user)
            .find(user, |(h, k)| *h == user && k.same(key))
            .is_some()
        {
            return true;
        }
        let Some((_, keys)) = self.many.find(user, |(h, _)| *h == user) else {
            return false;
        };
        let token = token();
        keys.find(token, |(k, t)| *t == token && k.same(key))
            .is_some()
    }

    /// Adds `key`, of fingerprint `token`, to the user hashed `hash`, in place of an equal key
    /// there already; whether the user has one key more. A user whose entries would pass
    /// [`FEW`] moves to `many`, where `fingerprint` gives its other keys' fingerprints.
    fn insert(
        &mut self,
        hash: u64,
        key: &CacheKey,
        token: u64,
        fingerprint: impl Fn(&CacheKey) -> u64,
    ) -> bool {
        if let Some((_, equal)) = (self.by_user).find_mut(hash, |(h, k)| *h == hash && k == key) {
            *equal = key.clone();
            return false;
        }
        if let Some((_, keys)) = self.many.find_mut(hash, |(h, _)| *h == hash) {
            return match keys.find_mut(token, |(k, t)| *t == token && k == key) {
                Some(equal) => {
                    *equal = (key.clone(), token);
                    false
                }
                None => {
                    keys.insert_unique(token, (key.clone(), token), |(_, t)| *t);
                    true
                }
            };
        }
        let held = self.by_user.iter_hash(hash).filter(|(h, _)| *h == hash);
        if held.take(FEW).count() < FEW {
            self.by_user
                .insert_unique(hash, (hash, key.clone()), |(h, _)| *h);
            return true;
        }
        let mut many = HashTable::with_capacity(4 * FEW);
        many.insert_unique(token, (key.clone(), token), |(_, t)| *t);
        while let Ok(entry) = self.by_user.find_entry(hash, |(h, _)| *h == hash) {
            let ((_, k), _) = entry.remove();
            let t = fingerprint(&k);
            many.insert_unique(t, (k, t), |(_, t)| *t);
        }
        (self.many).insert_unique(hash, (hash, Box::new(many)), |(h, _)| *h);
        true
    }

    /// Removes `key` (this very key) from the user hashed `hash`, and the user with its last
    /// key; whether the user had it. `token` gives the key's fingerprint, asked only for a user
    /// of many keys.
    fn remove(&mut self, hash: u64, key: &CacheKey, token: impl FnOnce() -> u64) -> bool {
        if let Ok(entry) = (self.by_user).find_entry(hash, |(h, k)| *h == hash && k.same(key)) {
            entry.remove();
            return true;
        }
        let Ok(mut entry) = self.many.find_entry(hash, |(h, _)| *h == hash) else {
            return false;
        };
        let token = token();
        let keys = &mut entry.get_mut().1;
        let Ok(found) = keys.find_entry(token, |(k, t)| *t == token && k.same(key)) else {
            return false;
        };
        found.remove();
        if keys.is_empty() {
            entry.remove();
        } else if keys.len() * 4 < keys.capacity() {
            // A user who held thousands of tokens once does not keep their room for ever.
            keys.shrink_to(keys.len() * 2, |(_, t)| *t);
        }
        true
    }
}

/// Adds `key`, of the user hashed `user`, under `hash`, in place of an equal key there already.
fn insert(table: &mut HashTable<TokenEntry>, hash: u64, key: &CacheKey, user: u64) {
    match table.find_mut(hash, |(h, k, _)| *h == hash && k == key) {
        Some(equal) => *equal = (hash, key.clone(), user),
        None => {
            table.insert_unique(hash, (hash, key.clone(), user), |(h, _, _)| *h);
        }
    }
}

/// Removes `key`'s (this very key's) entry under `hash`.
fn remove(table: &mut HashTable<TokenEntry>, hash: u64, key: &CacheKey) {
    if let Ok(entry) = table.find_entry(hash, |(h, k, _)| *h == hash && k.same(key)) {
        entry.remove();
    }
}

#[cfg(test)]
mod tests {
    use crate::PlainHttp;
    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;
    use crate::auth_url::Endpoint;

    fn key(endpoint: &Arc<Endpoint>, token: &str) -> CacheKey {
        CacheKey::new(endpoint.clone(), token)
    }

    fn endpoint(url: &str) -> Arc<Endpoint> {
        Arc::new(Endpoint::parse(url, PlainHttp::LoopbackOnly).unwrap())
    }

    /// A store that holds everything.
    fn all(_: &CacheKey) -> bool {
        true
    }

    /// The fingerprint the tests give a key: the number after the `t` of its token.
    fn fp(key: &CacheKey) -> u64 {
        let token = std::str::from_utf8(key.token()).unwrap();
        token[1..].parse().unwrap()
    }

    /// The keys indexed for `user` at `endpoint`, left in place.
    fn keys_of(index: &Index, endpoint: &Endpoint, user: i64) -> Vec<CacheKey> {
        let hash = index.user_hash(endpoint.key_hash(), user);
        let tables = index.lock();
        let users = &tables.users;
        let few: Vec<CacheKey> = (users.by_user.iter_hash(hash))
            .filter(|(h, _)| *h == hash)
            .map(|(_, k)| k.clone())
            .collect();
        if !few.is_empty() {
            return few;
        }
        let found = users.many.find(hash, |(h, _)| *h == hash);
        found.map_or_else(Vec::new, |(_, keys)| {
            keys.iter().map(|(k, _)| k.clone()).collect()
        })
    }

    /// Whether `user`'s keys at `endpoint` are in the table for users of many keys.
    fn has_many(index: &Index, endpoint: &Endpoint, user: i64) -> bool {
        let hash = index.user_hash(endpoint.key_hash(), user);
        let tables = index.lock();
        tables.users.many.find(hash, |(h, _)| *h == hash).is_some()
    }

    #[test]
    fn a_users_keys_are_found_by_user_and_a_token_by_fingerprint() {
        let (a, b) = (endpoint("https://a.example"), endpoint("https://b.example"));
        let index = Index::new(true);
        let (k1, k2, k3) = (key(&a, "t101"), key(&a, "t102"), key(&b, "t103"));
        index.insert(&k1, 7, 101, all, fp);
        index.insert(&k2, 7, 102, all, fp);
        index.insert(&k3, 7, 103, all, fp);
        index.insert(&k1, 7, 101, all, fp);
        let at_a = |k: &CacheKey| k.is_at(&a);
        let found = keys_of(&index, &a, 7);
        assert_eq!(found.len(), 2, "each key once, only at endpoint a");
        assert!(found.iter().any(|k| k.same(&k1)) && found.iter().any(|k| k.same(&k2)));
        assert!(keys_of(&index, &a, 8).is_empty());

        let taken = index.take_token(102, at_a);
        assert!(taken.len() == 1 && taken[0].same(&k2));
        assert!(index.take_token(102, at_a).is_empty(), "taken once");
        assert_eq!(keys_of(&index, &a, 7).len(), 1);
        assert!(index.take_token(103, at_a).is_empty(), "k3 is at b");
        let taken = index.take_user(a.key_hash(), 7, |k| k.same(&k1), fp);
        assert!(taken.len() == 1 && taken[0].same(&k1));
        assert_eq!(index.len(), 1, "only k3 left");
        assert!(
            index.take_token(101, at_a).is_empty(),
            "k1 went from both tables"
        );
    }

    #[test]
    fn a_token_cached_anew_takes_its_old_keys_place() {
        let a = endpoint("https://a.example");
        let index = Index::new(true);
        let (old, new) = (key(&a, "t101"), key(&a, "t101"));
        index.insert(&old, 7, 101, all, fp);
        index.insert(&new, 7, 101, all, fp);
        assert_eq!(index.len(), 1);
        let found = keys_of(&index, &a, 7);
        assert!(found.len() == 1 && found[0].same(&new));
        // Taking the old key (as a sweep or revocation that saw it would) leaves the new one.
        assert!(index
            .take_user(a.key_hash(), 7, |k| k.same(&old), fp)
            .is_empty());
        assert_eq!(index.len(), 1);
        let taken = index.take_token(101, all);
        assert!(taken.len() == 1 && taken[0].same(&new));
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn a_user_with_thousands_of_tokens_keeps_one_entry_and_loses_them_as_taken() {
        let a = endpoint("https://a.example");
        let b = endpoint("https://b.example");
        let index = Index::new(true);
        let keys: Vec<CacheKey> = (0..4096).map(|i| key(&a, &format!("t{i}"))).collect();
        for (i, k) in keys.iter().enumerate() {
            index.insert(k, 7, i as u64, all, fp);
        }
        index.insert(&key(&b, "t5000"), 7, 5000, all, fp);
        assert_eq!(index.len(), 4097);
        assert!(has_many(&index, &a, 7) && !has_many(&index, &b, 7));
        for (i, k) in keys.iter().enumerate().step_by(2) {
            assert_eq!(index.take_user(a.key_hash(), 7, |o| o.same(k), fp).len(), 1);
            assert!(index.take_token(i as u64, all).is_empty());
        }
        assert_eq!(index.len(), 2049);
        let at_a = |k: &CacheKey| k.is_at(&a);
        let taken = index.take_user(a.key_hash(), 7, at_a, fp);
        assert_eq!(taken.len(), 2048);
        assert!(taken
            .iter()
            .all(|k| keys.iter().skip(1).step_by(2).any(|o| o.same(k))));
        assert_eq!(index.len(), 1, "only b's key, under another user hash");
        assert!(
            index.take_token(1, all).is_empty(),
            "taken from both tables"
        );
        assert_eq!(index.take_user(b.key_hash(), 7, all, fp).len(), 1);
        let tables = index.lock();
        assert!(
            tables.users.by_user.is_empty() && tables.users.many.is_empty(),
            "the users went with their last keys"
        );
    }

    /// Indexes 10,000 keys at `a` (`t0`, `t1`, ...), the `i`th for user `user_of(i)`, beside a
    /// store of 100 that drops its oldest as each new one comes, checking after each insert
    /// that the index keeps within three times what the store holds; every key, in order.
    fn sweep_beside_a_store_of_100(
        index: &Index,
        a: &Arc<Endpoint>,
        user_of: impl Fn(u64) -> i64,
    ) -> Vec<CacheKey> {
        let mut held: VecDeque<CacheKey> = VecDeque::new();
        let mut every: Vec<CacheKey> = Vec::new();
        for i in 0..10_000u64 {
            let k = key(a, &format!("t{i}"));
            held.push_back(k.clone());
            if held.len() > 100 {
                held.pop_front();
            }
            let now: HashSet<usize> = held.iter().map(CacheKey::id).collect();
            index.insert(&k, user_of(i), i, |k| now.contains(&k.id()), fp);
            every.push(k);
            assert!(
                index.len() <= 300,
                "{} keys indexed for 100 held",
                index.len()
            );
        }
        every
    }

    #[test]
    fn the_sweep_forgets_what_the_store_dropped_on_its_own_and_keeps_what_it_holds() {
        let a = endpoint("https://a.example");
        let index = Index::new(true);
        let every = sweep_beside_a_store_of_100(&index, &a, |i| i as i64 % 50);
        for (i, k) in every.iter().enumerate().rev().take(100) {
            let found = index.take_token(i as u64, all);
            assert!(
                found.len() == 1 && found[0].same(k),
                "a held key is never forgotten"
            );
        }
    }

    #[test]
    fn a_user_past_a_few_keys_gets_a_table_where_a_token_cached_anew_still_takes_its_place() {
        let a = endpoint("https://a.example");
        let index = Index::new(false);
        let keys: Vec<CacheKey> = (0..=FEW).map(|i| key(&a, &format!("t{i}"))).collect();
        for (i, k) in keys.iter().enumerate() {
            assert!(!has_many(&index, &a, 7), "{i} keys are few");
            index.insert(k, 7, i as u64, all, fp);
        }
        assert!(has_many(&index, &a, 7), "{} keys are many", FEW + 1);
        let again = key(&a, "t3");
        index.insert(&again, 7, 3, all, fp);
        assert_eq!(index.len(), FEW + 1, "in place of the equal key");
        let found = keys_of(&index, &a, 7);
        assert!(found.iter().any(|k| k.same(&again)) && !found.iter().any(|k| k.same(&keys[3])));
        let taken = index.take_user(a.key_hash(), 7, |k| k.same(&keys[0]) || k.same(&again), fp);
        assert_eq!(taken.len(), 2);
        assert_eq!(index.len(), FEW - 1);
        assert_eq!(index.take_user(a.key_hash(), 7, all, fp).len(), FEW - 1);
        assert!(!has_many(&index, &a, 7), "the user went with its last key");
    }

    #[test]
    fn the_sweep_keeps_a_user_of_many_keys_to_what_the_store_holds() {
        // One user with 10,000 tokens, of which the store keeps the latest 100: the sweep finds
        // the dropped ones by fingerprint, and never forgets a held one.
        let a = endpoint("https://a.example");
        let index = Index::new(true);
        let every = sweep_beside_a_store_of_100(&index, &a, |_| 7);
        assert!(has_many(&index, &a, 7));
        let before = index.len();
        for (i, k) in every.iter().enumerate().rev().take(100) {
            let found = index.take_token(i as u64, all);
            assert!(
                found.len() == 1 && found[0].same(k),
                "a held key is never forgotten"
            );
        }
        assert_eq!(before - index.len(), 100, "taken from the user's table too");
    }

    #[test]
    fn without_a_shared_tier_tokens_are_not_indexed() {
        let a = endpoint("https://a.example");
        let index = Index::new(false);
        index.insert(&key(&a, "t101"), 7, 101, all, fp);
        assert!(!index.by_token());
        assert!(index.take_token(101, all).is_empty());
        assert_eq!(keys_of(&index, &a, 7).len(), 1);
    }
}
