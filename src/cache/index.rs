//! The local tier's [`Index`]: every cached user's key by what a revocation may name it by,
//! so that a revocation finds what it names without walking the cache.
//!
//! Keys are found by their user (at their endpoint), which covers a ban, a logout (a session
//! is one of a user's: the cached answer says which), and by their token's fingerprint when a
//! shared tier sends revocations that name a token without carrying it. The user table holds
//! one entry per user (at an endpoint) with the very keys the store holds (one pointer each),
//! so that adding or dropping a key costs a look-up and a walk of that user's keys alone, not
//! of every key sharing its hash; the token table one entry per key. Rejections are not
//! indexed: a revocation has nothing to take from them.
//!
//! The store tells the index when it drops a key (its eviction listener); a drop that races
//! with an insert of the same key can leave an entry behind, which at worst evicts a key that
//! needed no eviction, and [`Index::prune`] sweeps such leftovers once they could matter.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;

use super::key::{CacheKey, KeyHasher, KeyView};

/// A hash and the key it finds.
type Entry = (u64, CacheKey);

/// A user's hash and the user's keys.
type UserEntry = (u64, Vec<CacheKey>);

/// Every cached user's key, by user and, with a shared tier, by token fingerprint.
pub(crate) struct Index {
    tables: Mutex<Tables>,
    /// Hashes (endpoint, user) pairs; seeded per process (endpoints hash the same on every node
    /// through their URL's hash, but user hashes never leave this process).
    users: KeyHasher,
}

struct Tables {
    by_user: HashTable<UserEntry>,
    /// Keys in `by_user`, all users together.
    user_keys: usize,
    /// `None` without a shared tier: nothing names a token without carrying it then.
    by_token: Option<HashTable<Entry>>,
}

impl Index {
    /// An empty index; `by_token` when revocations may name tokens by fingerprint alone.
    pub(crate) fn new(by_token: bool) -> Index {
        Index {
            tables: Mutex::new(Tables {
                by_user: HashTable::new(),
                user_keys: 0,
                by_token: by_token.then(HashTable::new),
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
    pub(crate) fn by_token(&self) -> bool {
        self.lock().by_token.is_some()
    }

    /// Indexes `key`, cached for `user`, and by `token` (its fingerprint) when tokens are.
    pub(crate) fn insert(&self, key: &CacheKey, user: i64, token: u64) {
        let by_user = self.user_hash(key.endpoint().key_hash(), user);
        let mut tables = self.lock();
        if insert_for_user(&mut tables.by_user, by_user, key) {
            tables.user_keys += 1;
        }
        if let Some(by_token) = &mut tables.by_token {
            insert(by_token, token, key);
        }
    }

    /// Forgets `key`, cached for `user` with `token`'s fingerprint: the store dropped it.
    pub(crate) fn remove(&self, key: &CacheKey, user: i64, token: impl FnOnce() -> u64) {
        let by_user = self.user_hash(key.endpoint().key_hash(), user);
        let mut tables = self.lock();
        let removed = remove_for_user(&mut tables.by_user, by_user, |k| k.same(key));
        tables.user_keys -= removed;
        if let Some(by_token) = &mut tables.by_token {
            remove(by_token, token(), |k| k.same(key));
        }
    }

    /// The keys of `user` at the endpoint hashed `endpoint` whose endpoint `at` accepts.
    pub(crate) fn of_user(
        &self,
        endpoint: u64,
        user: i64,
        at: impl Fn(&CacheKey) -> bool,
    ) -> Vec<CacheKey> {
        let hash = self.user_hash(endpoint, user);
        let tables = self.lock();
        let Some((_, keys)) = tables.by_user.find(hash, |(h, _)| *h == hash) else {
            return Vec::new();
        };
        keys.iter().filter(|k| at(k)).cloned().collect()
    }

    /// The keys whose token fingerprint is `token` and that `is` accepts (it checks the whole
    /// fingerprint); none when tokens are not indexed.
    pub(crate) fn of_token(&self, token: u64, is: impl Fn(&CacheKey) -> bool) -> Vec<CacheKey> {
        let tables = self.lock();
        let Some(by_token) = &tables.by_token else {
            return Vec::new();
        };
        let found = by_token.iter_hash(token).filter(|(h, _)| *h == token);
        found.map(|(_, k)| k).filter(|k| is(k)).cloned().collect()
    }

    /// Forgets everything: the store was emptied.
    pub(crate) fn clear(&self) {
        let mut tables = self.lock();
        tables.by_user.clear();
        tables.user_keys = 0;
        if let Some(by_token) = &mut tables.by_token {
            by_token.clear();
        }
    }

    /// Entries in the user table: one per cached user entry, plus leftovers.
    pub(crate) fn len(&self) -> usize {
        self.lock().user_keys
    }

    /// Drops the entries whose key `cached` says the store no longer holds: leftovers of drops
    /// that raced with inserts. Walks the index; the caller makes it rare. `cached` runs
    /// without the index's lock (it asks the store, whose eviction listener takes it).
    pub(crate) fn prune(&self, cached: impl Fn(&CacheKey) -> bool) {
        let keys: Vec<CacheKey> = (self.lock().by_user.iter())
            .flat_map(|(_, keys)| keys.iter().cloned())
            .collect();
        let gone: HashSet<usize> = keys
            .iter()
            .filter(|k| !cached(k))
            .map(CacheKey::id)
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut tables = self.lock();
        tables.by_user.retain(|(_, keys)| {
            keys.retain(|k| !gone.contains(&k.id()));
            !keys.is_empty()
        });
        tables.user_keys = tables.by_user.iter().map(|(_, keys)| keys.len()).sum();
        if let Some(by_token) = &mut tables.by_token {
            by_token.retain(|(_, k)| !gone.contains(&k.id()));
        }
    }
}

/// Adds `key` to the user hashed `hash`, unless that very key is there already; whether it
/// added it.
fn insert_for_user(table: &mut HashTable<UserEntry>, hash: u64, key: &CacheKey) -> bool {
    match table.find_mut(hash, |(h, _)| *h == hash) {
        Some((_, keys)) if keys.iter().any(|k| k.same(key)) => false,
        Some((_, keys)) => {
            keys.push(key.clone());
            true
        }
        None => {
            table.insert_unique(hash, (hash, vec![key.clone()]), |(h, _)| *h);
            true
        }
    }
}

/// Removes the keys `is` picks from the user hashed `hash`, and the user with its last key;
/// how many it removed.
fn remove_for_user(
    table: &mut HashTable<UserEntry>,
    hash: u64,
    is: impl Fn(&CacheKey) -> bool,
) -> usize {
    let Ok(mut entry) = table.find_entry(hash, |(h, _)| *h == hash) else {
        return 0;
    };
    let keys = &mut entry.get_mut().1;
    let before = keys.len();
    keys.retain(|k| !is(k));
    let removed = before - keys.len();
    if keys.is_empty() {
        entry.remove();
    }
    removed
}

/// Adds `key` under `hash`, unless that very key is there already.
fn insert(table: &mut HashTable<Entry>, hash: u64, key: &CacheKey) {
    if table
        .find(hash, |(h, k)| *h == hash && k.same(key))
        .is_none()
    {
        table.insert_unique(hash, (hash, key.clone()), |(h, _)| *h);
    }
}

/// Removes every entry under `hash` whose key `is` picks.
fn remove(table: &mut HashTable<Entry>, hash: u64, is: impl Fn(&CacheKey) -> bool) {
    while let Ok(entry) = table.find_entry(hash, |(h, k)| *h == hash && is(k)) {
        entry.remove();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::auth_url::Endpoint;

    fn key(endpoint: &Arc<Endpoint>, token: &str) -> CacheKey {
        CacheKey::new(endpoint.clone(), token)
    }

    #[test]
    fn a_users_keys_are_found_by_user_and_a_token_by_fingerprint() {
        let a = Arc::new(Endpoint::parse("https://a.example", false).unwrap());
        let b = Arc::new(Endpoint::parse("https://b.example", false).unwrap());
        let index = Index::new(true);
        let (k1, k2, k3) = (key(&a, "t1"), key(&a, "t2"), key(&b, "t3"));
        index.insert(&k1, 7, 101);
        index.insert(&k2, 7, 102);
        index.insert(&k3, 7, 103);
        index.insert(&k1, 7, 101);
        let at_a = |k: &CacheKey| k.endpoint().as_str() == a.as_str();
        let found = index.of_user(a.key_hash(), 7, at_a);
        assert_eq!(found.len(), 2, "each key once, only at endpoint a");
        assert!(found.iter().any(|k| k.same(&k1)) && found.iter().any(|k| k.same(&k2)));
        assert!(index.of_user(a.key_hash(), 8, at_a).is_empty());
        assert!(index.of_token(102, |_| true)[0].same(&k2));

        index.remove(&k2, 7, || 102);
        assert!(index.of_token(102, |_| true).is_empty());
        assert_eq!(index.of_user(a.key_hash(), 7, at_a).len(), 1);
        index.prune(|k| !k.same(&k1));
        assert_eq!(index.len(), 1, "only k3 left");
    }

    #[test]
    fn a_user_with_thousands_of_tokens_keeps_one_entry_and_loses_them_one_by_one() {
        let a = Arc::new(Endpoint::parse("https://a.example", false).unwrap());
        let index = Index::new(true);
        let keys: Vec<CacheKey> = (0..4096).map(|i| key(&a, &format!("t{i}"))).collect();
        for (i, k) in keys.iter().enumerate() {
            index.insert(k, 7, i as u64);
        }
        assert_eq!(index.len(), 4096);
        assert_eq!(index.lock().by_user.len(), 1, "one entry for the user");
        for (i, k) in keys.iter().enumerate().step_by(2) {
            index.remove(k, 7, || i as u64);
        }
        assert_eq!(index.len(), 2048);
        let left = index.of_user(a.key_hash(), 7, |_| true);
        assert_eq!(left.len(), 2048);
        assert!(left
            .iter()
            .all(|k| keys.iter().skip(1).step_by(2).any(|o| o.same(k))));
        for (i, k) in keys.iter().enumerate().skip(1).step_by(2) {
            index.remove(k, 7, || i as u64);
        }
        assert_eq!(index.len(), 0);
        assert!(
            index.lock().by_user.is_empty(),
            "the user went with its last key"
        );
    }

    #[test]
    fn without_a_shared_tier_tokens_are_not_indexed() {
        let a = Arc::new(Endpoint::parse("https://a.example", false).unwrap());
        let index = Index::new(false);
        index.insert(&key(&a, "t1"), 7, 101);
        assert!(!index.by_token());
        assert!(index.of_token(101, |_| true).is_empty());
        assert_eq!(index.of_user(a.key_hash(), 7, |_| true).len(), 1);
    }
}
