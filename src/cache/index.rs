//! The local tier's [`Index`]: every cached user's key by what a revocation may name it by,
//! so that a revocation finds what it names without walking the cache.
//!
//! Keys are found by their user (at their endpoint), which covers a ban, a logout (a session
//! is one of a user's: the cached answer says which), and by their token's fingerprint when a
//! shared tier sends revocations that name a token without carrying it.
//!
//! # Layout
//!
//! The keys themselves sit in one list of slots ([`Keys`]), each the very key the store holds
//! and its user's hash (two words); a slot freed is reused by the next key. The tables hold
//! slot positions (four bytes each):
//! - `by_user`, by the user's hash, one entry per key, so that adding or dropping a key costs a
//!   look-up among that user's few entries. Past [`FEW`] keys a user's keys get a table of
//!   their own in `many`, by the key's own hash (kept beside each position, eight bytes a key),
//!   so that no user's count of tokens makes an insert under the index's lock cost more.
//! - `by_token`, with a shared tier only, by fingerprint; the fingerprints are then kept in a
//!   column beside the slots, so that nothing computes one (an HMAC) under the lock.
//!
//! A key is indexed once per user: one equal to a key the same user has indexed already (a
//! token cached anew) takes its slot. Rejections are not indexed: a revocation has nothing to
//! take from them.
//!
//! # The sweep
//!
//! The index keeps itself, without the store's help: a moka eviction listener would make moka
//! lock every key it removes and call back for each, which is most of what a revocation costs
//! it. A revocation takes out of the index what it drops from the store. What the store drops
//! on its own (expired, evicted to make room, replaced by a rejection) stays behind until the
//! sweep reaches it: every insert walks the slots on from where the last one stopped, looking
//! at [`SWEEP`] keys (or [`SWEEP_SLOTS`] slots, free ones included), and forgets those the
//! store no longer holds. Every key is looked at once in each pass. A pass takes at most as
//! many sweeping inserts as there are slots over [`SWEEP_SLOTS`], so that slots mostly free
//! would let keys pile up behind the cursor: once fewer than a quarter of the slots hold a key,
//! the index is compacted (the keys moved together, the tables built anew, the rest given
//! back), which keeps the slots, and so the keys left behind, within a small multiple of what
//! the store holds. A key left behind costs memory and nothing else: a revocation that finds
//! one drops nothing.
//!
//! An insert sweeps only while the index holds more keys than the store counts users, by more
//! than a 64th of them plus 64 (moka's count is behind by the writes it has not applied yet:
//! 64 between its applications, more under contention, which costs sweeps, never a key).
//! While the store holds every key indexed (below its bound, before its entries expire) a
//! sweep would find nothing, and it would cost each miss two look-ups of cold keys in the
//! store: a few percent of the miss. Past the margin, the sweep runs as above.
//!
//! Every key the store holds as a user is in the index: [`Local::store`] indexes what it stores
//! right after storing it (and checks the revocation log again once it has); the sweep forgets
//! a key only when the store holds nothing equal to it, and both it and a revocation forget a
//! key by its slot, never an equal key indexed meanwhile in another.
//!
//! [`Local::store`]: super::local::Local::store

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;
use smallvec::SmallVec;

use super::key::{CacheKey, KeyHasher, KeyView};

/// Keys each insert's sweep looks at.
const SWEEP: usize = 2;

/// Slots each insert's sweep looks at, at most, free ones included: a pass over slots mostly
/// freed (after the store emptied) still ends in fewer inserts than there are slots.
const SWEEP_SLOTS: usize = 8;

/// How many more keys than the store counts the index may hold before an insert sweeps: moka's
/// count is behind by the writes it has not applied yet, and a sweep of keys all held would
/// only cost its probes.
fn lag(users_held: u64) -> u64 {
    users_held / 64 + 64
}

/// Slots below which the index is never compacted: a small index costs little however sparse.
const COMPACT_MIN_SLOTS: usize = 1024;

/// Past this many keys, a user's keys leave `by_user` for a table of their own in `many`, found
/// by the key's hash: an insert or a removal then costs a look-up, not a walk of the user's
/// entries. A player holds a token or two; a user with thousands (a bot, a load test, someone
/// minting tokens to slow the index's lock for everyone) is the case this is for.
const FEW: usize = 32;

/// A slot's position in [`Keys`]: four bytes in each table rather than a key's eight, with the
/// user's hash kept once, in the slot.
type Pos = u32;

/// No slot: the end of the free list.
const NONE: Pos = Pos::MAX;

/// One of [`Keys`]' slots.
enum Slot {
    /// An indexed key and its user's hash.
    Key(CacheKey, u64),
    /// A free slot, and the next free one ([`NONE`] for none).
    Free(Pos),
}

/// Every indexed key, in slots the tables point to by position.
struct Keys {
    slots: Vec<Slot>,
    /// The first free slot, [`NONE`] when every slot holds a key.
    free: Pos,
    /// Each slot's token fingerprint, when tokens are indexed (`None` otherwise): the token
    /// table's hash, kept so that removing a key computes nothing.
    fingerprints: Option<Vec<u64>>,
    /// Slots that hold a key.
    len: usize,
}

impl Keys {
    fn new(by_token: bool) -> Keys {
        Keys {
            slots: Vec::new(),
            free: NONE,
            fingerprints: by_token.then(Vec::new),
            len: 0,
        }
    }

    /// The key at `pos` and its user's hash; `None` for a free slot.
    fn get(&self, pos: Pos) -> Option<(&CacheKey, u64)> {
        match self.slots.get(pos as usize)? {
            Slot::Key(key, user) => Some((key, *user)),
            Slot::Free(_) => None,
        }
    }

    /// The hash of the user whose key is at `pos` (a table's hash for it).
    fn user(&self, pos: Pos) -> u64 {
        self.get(pos).map_or(0, |(_, user)| user)
    }

    /// Whether the key at `pos` is of the user hashed `user` and equal to `key`.
    fn is(&self, pos: Pos, user: u64, key: &CacheKey) -> bool {
        self.get(pos).is_some_and(|(k, u)| u == user && k == key)
    }

    /// The fingerprint of the key at `pos`, when tokens are indexed.
    fn fingerprint(&self, pos: Pos) -> u64 {
        (self.fingerprints.as_ref()).map_or(0, |fps| fps[pos as usize])
    }

    /// Puts `key`, of the user hashed `user` and of fingerprint `token`, in a free slot (or a
    /// new one); its position.
    fn add(&mut self, key: CacheKey, user: u64, token: u64) -> Pos {
        self.len += 1;
        if self.free == NONE {
            // Four billion keys would take some two terabytes of cache first.
            let pos = Pos::try_from(self.slots.len())
                .ok()
                .filter(|&pos| pos < NONE)
                .expect("fewer than 2^32 - 1 keys indexed");
            self.slots.push(Slot::Key(key, user));
            if let Some(fps) = &mut self.fingerprints {
                fps.push(token);
            }
            pos
        } else {
            let pos = self.free;
            let slot = std::mem::replace(&mut self.slots[pos as usize], Slot::Key(key, user));
            self.free = match slot {
                Slot::Free(next) => next,
                Slot::Key(..) => NONE,
            };
            if let Some(fps) = &mut self.fingerprints {
                fps[pos as usize] = token;
            }
            pos
        }
    }

    /// Frees the slot at `pos` (which holds a key); the key it held.
    fn remove(&mut self, pos: Pos) -> Option<CacheKey> {
        let slot = self.slots.get_mut(pos as usize)?;
        match std::mem::replace(slot, Slot::Free(self.free)) {
            Slot::Key(key, _) => {
                self.free = pos;
                self.len -= 1;
                Some(key)
            }
            free @ Slot::Free(_) => {
                *slot = free;
                None
            }
        }
    }
}

/// A user's hash and the user's keys, more than [`FEW`] of them, by the key's own hash. Boxed:
/// a user of the other table costs this one nothing.
type ManyEntry = (u64, Box<ManyKeys>);

/// One user's many keys: each key's hash (32 bits of it, see [`spread`]) beside its position,
/// so that growing the table, or adding a key no other equals, reads no key: a user's keys are
/// cold in memory, and a table of thousands rehashed from the keys themselves cost the insert
/// that grew it a cache miss per key.
type ManyKeys = HashTable<(u32, Pos)>;

/// The keys of every user: each user is in `by_user` or in `many`, never in both.
#[derive(Default)]
struct Users {
    /// Positions of the keys of users with at most [`FEW`] keys, by the user's hash.
    by_user: HashTable<Pos>,
    /// Users with more than [`FEW`] keys (they stay here until their last key goes).
    many: HashTable<ManyEntry>,
}

/// Every cached user's key, by user and, with a shared tier, by token fingerprint.
pub(crate) struct Index {
    tables: Mutex<Tables>,
    /// Hashes (endpoint, user) pairs, and a user's keys once they are many; seeded per process
    /// (endpoints hash the same on every node through their URL's hash, but these hashes never
    /// leave this process).
    hasher: KeyHasher,
}

struct Tables {
    /// The keys the tables point to.
    keys: Keys,
    users: Users,
    /// Positions by token fingerprint; `None` without a shared tier: nothing names a token
    /// without carrying it then.
    by_token: Option<HashTable<Pos>>,
    /// The slot the sweep looks at next.
    cursor: usize,
}

impl Index {
    /// An empty index; `by_token` when revocations may name tokens by fingerprint alone.
    pub(crate) fn new(by_token: bool) -> Index {
        Index {
            tables: Mutex::new(Tables {
                keys: Keys::new(by_token),
                users: Users::default(),
                by_token: by_token.then(HashTable::new),
                cursor: 0,
            }),
            hasher: KeyHasher::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The hash a user is found by at `endpoint`.
    fn user_hash(&self, endpoint: u64, user: i64) -> u64 {
        self.hasher.hash_one((endpoint, user))
    }

    /// Whether tokens are indexed by fingerprint.
    #[cfg(test)]
    pub(crate) fn by_token(&self) -> bool {
        self.lock().by_token.is_some()
    }

    /// Indexes `key`, just stored for `user`, and by `token` (its fingerprint) when tokens are,
    /// in place of an equal key the user has indexed already; then, when the index holds more
    /// keys than `users_held` (the store's count) by more than that count's lag, sweeps,
    /// forgetting the keys `held` says the store no longer holds. `held` runs under the index's
    /// lock: it must not take it.
    pub(crate) fn insert(
        &self,
        key: &CacheKey,
        user: i64,
        token: u64,
        users_held: u64,
        held: impl Fn(&CacheKey) -> bool,
    ) {
        let by_user = self.user_hash(key.endpoint().key_hash(), user);
        let mut guard = self.lock();
        let tables = &mut *guard;
        let Tables {
            keys,
            users,
            by_token,
            ..
        } = &mut *tables;
        let hasher = &self.hasher;
        match users.find(keys, hasher, by_user, key) {
            Some(pos) => keys.slots[pos as usize] = Slot::Key(key.clone(), by_user),
            None => {
                let pos = keys.add(key.clone(), by_user, token);
                users.add(keys, hasher, pos);
                if let Some(by_token) = by_token {
                    by_token.insert_unique(token, pos, |&p| keys.fingerprint(p));
                }
            }
        }
        if tables.keys.len as u64 > users_held.saturating_add(lag(users_held)) {
            tables.sweep(hasher, held);
        }
        tables.compact_if_sparse(hasher);
    }

    /// Takes out of the index, and returns, the keys of `user` at the endpoint hashed
    /// `endpoint` that `is` picks (it runs under the index's lock: it must not take it). The
    /// caller drops the keys from the store.
    pub(crate) fn take_user(
        &self,
        endpoint: u64,
        user: i64,
        is: impl Fn(&CacheKey) -> bool,
    ) -> Vec<CacheKey> {
        let hash = self.user_hash(endpoint, user);
        let mut guard = self.lock();
        let Tables {
            keys,
            users,
            by_token,
            ..
        } = &mut *guard;
        let mut taken: Vec<Pos> = Vec::new();
        let picks = |pos: Pos| keys.get(pos).is_some_and(|(k, u)| u == hash && is(k));
        // A few entries at most: finding each from the start again is cheaper than a list.
        while let Ok(entry) = users.by_user.find_entry(hash, |&p| picks(p)) {
            taken.push(entry.remove().0);
        }
        if let Ok(mut entry) = users.many.find_entry(hash, |(h, _)| *h == hash) {
            let user_keys = &mut entry.get_mut().1;
            user_keys.retain(|&mut (_, p)| {
                let take = picks(p);
                if take {
                    taken.push(p);
                }
                !take
            });
            if user_keys.is_empty() {
                entry.remove();
            } else {
                shrink(user_keys);
            }
        }
        let mut found = Vec::with_capacity(taken.len());
        for pos in taken {
            if let Some(by_token) = by_token.as_mut() {
                remove(by_token, keys.fingerprint(pos), pos);
            }
            found.extend(keys.remove(pos));
        }
        found
    }

    /// Takes out of the index, and returns, the keys whose token fingerprint is `token` and
    /// whose endpoint `at` accepts (it runs under the index's lock: it must not take it): the
    /// caller drops them from the store. None when tokens are not indexed.
    pub(crate) fn take_token(
        &self,
        token: u64,
        at: impl Fn(&CacheKey) -> bool,
    ) -> SmallVec<[CacheKey; 1]> {
        let mut guard = self.lock();
        let Tables {
            keys,
            users,
            by_token,
            ..
        } = &mut *guard;
        let Some(by_token) = by_token else {
            return SmallVec::new();
        };
        let picks =
            |p: Pos| keys.fingerprint(p) == token && keys.get(p).is_some_and(|(k, _)| at(k));
        let mut found: SmallVec<[Pos; 1]> = SmallVec::new();
        while let Ok(entry) = by_token.find_entry(token, |&p| picks(p)) {
            found.push(entry.remove().0);
        }
        let mut taken = SmallVec::new();
        for pos in found {
            users.remove(keys, &self.hasher, pos);
            taken.extend(keys.remove(pos));
        }
        taken
    }

    /// Forgets everything: the store was emptied.
    pub(crate) fn clear(&self) {
        let mut tables = self.lock();
        let by_token = tables.by_token.is_some();
        tables.keys = Keys::new(by_token);
        tables.users = Users::default();
        tables.by_token = by_token.then(HashTable::new);
        tables.cursor = 0;
    }

    /// The heap the index holds (its slots, fingerprints and tables, as allocated, the
    /// allocator's own overhead aside), for the benches.
    pub(crate) fn heap_bytes(&self) -> usize {
        let tables = self.lock();
        let (keys, users) = (&tables.keys, &tables.users);
        let many = (users.many.iter())
            .map(|(_, user_keys)| size_of::<ManyKeys>() + user_keys.allocation_size())
            .sum::<usize>();
        keys.slots.capacity() * size_of::<Slot>()
            + keys
                .fingerprints
                .as_ref()
                .map_or(0, |f| f.capacity() * size_of::<u64>())
            + users.by_user.allocation_size()
            + users.many.allocation_size()
            + many
            + tables
                .by_token
                .as_ref()
                .map_or(0, HashTable::allocation_size)
    }

    /// Keys indexed: one per cached user entry, plus those left behind.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().keys.len
    }
}

impl Tables {
    /// Looks at the slots from the cursor on, [`SWEEP`] keys or [`SWEEP_SLOTS`] slots, and
    /// forgets the keys the store no longer holds.
    fn sweep(&mut self, hasher: &KeyHasher, held: impl Fn(&CacheKey) -> bool) {
        let slots = self.keys.slots.len();
        let mut looked_at = 0;
        for _ in 0..SWEEP_SLOTS.min(slots) {
            if self.cursor >= slots {
                self.cursor = 0;
            }
            let pos = self.cursor as Pos;
            self.cursor += 1;
            let Some((key, _)) = self.keys.get(pos) else {
                continue;
            };
            if !held(key) {
                self.forget(hasher, pos);
            }
            looked_at += 1;
            if looked_at == SWEEP {
                return;
            }
        }
    }

    /// Moves the keys into as many slots as they need, and builds the tables anew, once fewer
    /// than a quarter of the slots hold a key: slots are reused, never given back, so after the
    /// store shrank (a peak passed, `cache_ttl` emptied it) they would keep the peak's memory;
    /// and the sweep, which walks slots, would reach a new key only after a pass over them all,
    /// leaving behind the keys the store dropped meanwhile. It costs a look-up per key kept,
    /// paid for by the three quarters of the slots freed since the last time.
    fn compact_if_sparse(&mut self, hasher: &KeyHasher) {
        let slots = self.keys.slots.len();
        if slots < COMPACT_MIN_SLOTS || self.keys.len >= slots / 4 {
            return;
        }
        let by_token = self.by_token.is_some();
        let old = std::mem::replace(&mut self.keys, Keys::new(by_token));
        self.keys.slots.reserve_exact(old.len);
        if let Some(fps) = &mut self.keys.fingerprints {
            fps.reserve_exact(old.len);
        }
        self.users = Users::default();
        self.by_token = by_token.then(HashTable::new);
        self.cursor = 0;
        let Tables {
            keys,
            users,
            by_token,
            ..
        } = self;
        for (pos, slot) in old.slots.into_iter().enumerate() {
            if let Slot::Key(key, user) = slot {
                let token = old.fingerprints.as_ref().map_or(0, |fps| fps[pos]);
                let pos = keys.add(key, user, token);
                users.add(keys, hasher, pos);
                if let Some(by_token) = by_token {
                    by_token.insert_unique(token, pos, |&p| keys.fingerprint(p));
                }
            }
        }
    }

    /// Takes the key at `pos` out of every table and frees its slot.
    fn forget(&mut self, hasher: &KeyHasher, pos: Pos) {
        self.users.remove(&self.keys, hasher, pos);
        if let Some(by_token) = &mut self.by_token {
            remove(by_token, self.keys.fingerprint(pos), pos);
        }
        self.keys.remove(pos);
    }
}

/// The hash a key is kept under in a user's [`ManyKeys`]: 32 bits of its own.
fn short_hash(hasher: &KeyHasher, key: &CacheKey) -> u32 {
    (hasher.hash_one(key) >> 32) as u32
}

/// The table hash of a key hashed `short` in a [`ManyKeys`]: its 32 bits in both halves, so
/// that the bucket (the low bits) and the tag (the top seven) both come from them.
fn spread(short: u32) -> u64 {
    u64::from(short) << 32 | u64::from(short)
}

/// The [`short_hash`] of the key at `pos`.
fn key_hash(hasher: &KeyHasher, keys: &Keys, pos: Pos) -> u32 {
    keys.get(pos).map_or(0, |(key, _)| short_hash(hasher, key))
}

impl Users {
    /// The position of a key equal to `key` that the user hashed `user` holds.
    fn find(&self, keys: &Keys, hasher: &KeyHasher, user: u64, key: &CacheKey) -> Option<Pos> {
        if let Some(&pos) = self.by_user.find(user, |&p| keys.is(p, user, key)) {
            return Some(pos);
        }
        let (_, user_keys) = self.many.find(user, |(h, _)| *h == user)?;
        let short = short_hash(hasher, key);
        let found = user_keys.find(spread(short), |&(h, p)| h == short && keys.is(p, user, key));
        found.map(|&(_, pos)| pos)
    }

    /// Adds the key at `pos` to its user. A user whose entries would pass [`FEW`] moves to
    /// `many`.
    fn add(&mut self, keys: &Keys, hasher: &KeyHasher, pos: Pos) {
        let user = keys.user(pos);
        // A key goes into a table of many under the hash it is then kept with.
        let put = |user_keys: &mut ManyKeys, p: Pos| {
            let short = key_hash(hasher, keys, p);
            user_keys.insert_unique(spread(short), (short, p), |&(h, _)| spread(h));
        };
        if let Some((_, user_keys)) = self.many.find_mut(user, |(h, _)| *h == user) {
            put(user_keys, pos);
            return;
        }
        let held = self
            .by_user
            .iter_hash(user)
            .filter(|&&p| keys.user(p) == user);
        if held.take(FEW).count() < FEW {
            (self.by_user).insert_unique(user, pos, |&p| keys.user(p));
            return;
        }
        let mut user_keys = ManyKeys::with_capacity(4 * FEW);
        put(&mut user_keys, pos);
        while let Ok(found) = self.by_user.find_entry(user, |&p| keys.user(p) == user) {
            put(&mut user_keys, found.remove().0);
        }
        (self.many).insert_unique(user, (user, Box::new(user_keys)), |(h, _)| *h);
    }

    /// Removes the key at `pos` from its user, and the user with its last key.
    fn remove(&mut self, keys: &Keys, hasher: &KeyHasher, pos: Pos) {
        let user = keys.user(pos);
        if let Ok(entry) = self.by_user.find_entry(user, |&p| p == pos) {
            entry.remove();
            return;
        }
        let Ok(mut entry) = self.many.find_entry(user, |(h, _)| *h == user) else {
            return;
        };
        let user_keys = &mut entry.get_mut().1;
        let short = key_hash(hasher, keys, pos);
        if let Ok(found) = user_keys.find_entry(spread(short), |&(_, p)| p == pos) {
            found.remove();
        }
        if user_keys.is_empty() {
            entry.remove();
        } else {
            shrink(user_keys);
        }
    }
}

/// Gives back most of a user's table once it holds a quarter of its room: a user who held
/// thousands of tokens once does not keep their room for ever.
fn shrink(user_keys: &mut ManyKeys) {
    if user_keys.len() * 4 < user_keys.capacity() {
        user_keys.shrink_to(user_keys.len() * 2, |&(h, _)| spread(h));
    }
}

/// Removes `pos` from the token table, where it is under `hash`.
fn remove(table: &mut HashTable<Pos>, hash: u64, pos: Pos) {
    if let Ok(entry) = table.find_entry(hash, |&p| p == pos) {
        entry.remove();
    }
}

#[cfg(test)]
mod tests {
    use crate::PlainHttp;
    use std::collections::{HashSet, VecDeque};
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

    /// The keys indexed for `user` at `endpoint`, left in place.
    fn keys_of(index: &Index, endpoint: &Endpoint, user: i64) -> Vec<CacheKey> {
        let hash = index.user_hash(endpoint.key_hash(), user);
        let tables = index.lock();
        let (users, keys) = (&tables.users, &tables.keys);
        let key = |p: &Pos| keys.get(*p).map(|(k, _)| k.clone());
        let few: Vec<CacheKey> = (users.by_user.iter_hash(hash))
            .filter(|&&p| keys.user(p) == hash)
            .filter_map(key)
            .collect();
        if !few.is_empty() {
            return few;
        }
        let found = users.many.find(hash, |(h, _)| *h == hash);
        found.map_or_else(Vec::new, |(_, user_keys)| {
            user_keys.iter().filter_map(|(_, p)| key(p)).collect()
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
        index.insert(&k1, 7, 101, 0, all);
        index.insert(&k2, 7, 102, 0, all);
        index.insert(&k3, 7, 103, 0, all);
        index.insert(&k1, 7, 101, 0, all);
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
        let taken = index.take_user(a.key_hash(), 7, |k| k.same(&k1));
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
        index.insert(&old, 7, 101, 0, all);
        index.insert(&new, 7, 101, 0, all);
        assert_eq!(index.len(), 1);
        let found = keys_of(&index, &a, 7);
        assert!(found.len() == 1 && found[0].same(&new));
        // Taking the old key (as a sweep or revocation that saw it would) leaves the new one.
        assert!(index
            .take_user(a.key_hash(), 7, |k| k.same(&old))
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
            index.insert(k, 7, i as u64, 0, all);
        }
        index.insert(&key(&b, "t5000"), 7, 5000, 0, all);
        assert_eq!(index.len(), 4097);
        assert!(has_many(&index, &a, 7) && !has_many(&index, &b, 7));
        for (i, k) in keys.iter().enumerate().step_by(2) {
            assert_eq!(index.take_user(a.key_hash(), 7, |o| o.same(k)).len(), 1);
            assert!(index.take_token(i as u64, all).is_empty());
        }
        assert_eq!(index.len(), 2049);
        let at_a = |k: &CacheKey| k.is_at(&a);
        let taken = index.take_user(a.key_hash(), 7, at_a);
        assert_eq!(taken.len(), 2048);
        assert!(taken
            .iter()
            .all(|k| keys.iter().skip(1).step_by(2).any(|o| o.same(k))));
        assert_eq!(index.len(), 1, "only b's key, under another user hash");
        assert!(
            index.take_token(1, all).is_empty(),
            "taken from both tables"
        );
        assert_eq!(index.take_user(b.key_hash(), 7, all).len(), 1);
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
            // The store's count is what it holds: the gate is the one the resolver has.
            let users_held = held.len() as u64;
            index.insert(&k, user_of(i), i, users_held, |k| now.contains(&k.id()));
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
            index.insert(k, 7, i as u64, 0, all);
        }
        assert!(has_many(&index, &a, 7), "{} keys are many", FEW + 1);
        let again = key(&a, "t3");
        index.insert(&again, 7, 3, 0, all);
        assert_eq!(index.len(), FEW + 1, "in place of the equal key");
        let found = keys_of(&index, &a, 7);
        assert!(found.iter().any(|k| k.same(&again)) && !found.iter().any(|k| k.same(&keys[3])));
        let taken = index.take_user(a.key_hash(), 7, |k| k.same(&keys[0]) || k.same(&again));
        assert_eq!(taken.len(), 2);
        assert_eq!(index.len(), FEW - 1);
        assert_eq!(index.take_user(a.key_hash(), 7, all).len(), FEW - 1);
        assert!(!has_many(&index, &a, 7), "the user went with its last key");
    }

    #[test]
    fn a_user_of_thousands_of_keys_finds_each_again_after_its_table_grew() {
        // The user's table grows from 128 to 8,192 places on the way, each time rehashed from
        // the hashes it keeps: an equal key cached anew must still find its place, whenever it
        // was added.
        let a = endpoint("https://a.example");
        let index = Index::new(false);
        let keys: Vec<CacheKey> = (0..5_000).map(|i| key(&a, &format!("t{i}"))).collect();
        for (i, k) in keys.iter().enumerate() {
            index.insert(k, 7, i as u64, 0, all);
        }
        let again: Vec<CacheKey> = (0..5_000)
            .step_by(97)
            .map(|i| key(&a, &format!("t{i}")))
            .collect();
        for k in &again {
            index.insert(k, 7, 0, 0, all);
        }
        assert_eq!(index.len(), 5_000, "each in place of its equal key");
        let found = keys_of(&index, &a, 7);
        for (k, old) in again.iter().zip(keys.iter().step_by(97)) {
            assert!(found.iter().any(|f| f.same(k)), "the new key is indexed");
            assert!(!found.iter().any(|f| f.same(old)), "the old one is not");
        }
        let taken = index.take_user(a.key_hash(), 7, |k| k.same(&keys[1]));
        assert!(taken.len() == 1 && taken[0].same(&keys[1]));
        assert_eq!(index.len(), 4_999);
    }

    #[test]
    fn the_sweep_keeps_a_user_of_many_keys_to_what_the_store_holds() {
        // One user with 10,000 tokens, of which the store keeps the latest 100: the sweep forgets
        // the dropped ones (taking each out of the user's own table, by the key's hash), and
        // never forgets a held one.
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
    fn a_slot_is_two_words() {
        // Every cached user pays for one slot, and four bytes in each table.
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }

    #[test]
    fn slots_freed_are_used_again_and_fingerprints_follow_their_keys() {
        // Keys come and go 10,000 times with at most 10 indexed at once: the slots stay 10,
        // and each token is still found by its own fingerprint in a slot another key had.
        let a = endpoint("https://a.example");
        let index = Index::new(true);
        let mut held: VecDeque<(u64, CacheKey)> = VecDeque::new();
        for i in 0..10_000u64 {
            if held.len() == 10 {
                let (fp, old) = held.pop_front().unwrap();
                let taken = index.take_token(fp, all);
                assert!(taken.len() == 1 && taken[0].same(&old), "token {fp}");
            }
            let k = key(&a, &format!("t{i}"));
            index.insert(&k, i as i64 % 3, i, 0, all);
            held.push_back((i, k));
        }
        assert_eq!(index.len(), 10);
        assert_eq!(
            index.lock().keys.slots.len(),
            10,
            "no slot beyond the most held"
        );
        for (user, count) in [(0, 4), (1, 3), (2, 3)] {
            assert_eq!(
                index.take_user(a.key_hash(), user, all).len(),
                count,
                "user {user}"
            );
        }
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn the_sweep_reaches_the_last_keys_past_slots_mostly_freed() {
        // 1,000 keys, all but the last 100 taken: the sweep's pass over the freed slots ends
        // within the 1,000 / SWEEP_SLOTS inserts it takes to walk them, and then forgets the
        // keys the store dropped, down to the margin the store's count allows (64 over none).
        let a = endpoint("https://a.example");
        let index = Index::new(false);
        let keys: Vec<CacheKey> = (0..1000).map(|i| key(&a, &format!("t{i}"))).collect();
        for (i, k) in keys.iter().enumerate() {
            index.insert(k, i as i64, i as u64, 0, all);
        }
        for i in 0..900 {
            assert_eq!(index.take_user(a.key_hash(), i, all).len(), 1);
        }
        let fresh = key(&a, "fresh");
        let only_fresh = |k: &CacheKey| k.same(&fresh);
        for _ in 0..(1000 / SWEEP_SLOTS + 100 / SWEEP) {
            index.insert(&fresh, 5000, 5000, 0, only_fresh);
        }
        assert_within_the_margin(&index);
        assert_eq!(keys_of(&index, &a, 5000).len(), 1, "the held key stays");
    }

    /// The index was swept down to the margin a store counting no users allows, and no further:
    /// the last insert's sweep may have taken its [`SWEEP`] keys from one over it.
    fn assert_within_the_margin(index: &Index) {
        let left = index.len() as u64;
        let margin = lag(0);
        assert!(
            (margin + 1 - SWEEP as u64..=margin).contains(&left),
            "{left} keys left, the margin is {margin}"
        );
    }

    /// An index at `a` of `n` keys, one per user, which the store is said to count
    /// `users_held` of and to hold none of.
    fn none_held(a: &Arc<Endpoint>, n: u64, users_held: u64) -> Index {
        let index = Index::new(false);
        for i in 0..n {
            let none = |_: &CacheKey| false;
            index.insert(&key(a, &format!("t{i}")), i as i64, i, users_held, none);
        }
        index
    }

    #[test]
    fn the_margin_grows_with_the_stores_count() {
        // 1,000 users counted: a 64th of them (15) and 64 more may be indexed past the count
        // before an insert sweeps; the next one does.
        let a = endpoint("https://a.example");
        let margin = 1000 + 1000 / 64 + 64;
        let index = none_held(&a, margin, 1000);
        assert_eq!(index.len() as u64, margin, "nothing swept up to the margin");
        index.insert(&key(&a, "one-more"), -1, 0, 1000, |_| false);
        assert_eq!(
            index.len() as u64,
            margin + 1 - SWEEP as u64,
            "one past it sweeps"
        );
    }

    #[test]
    fn an_index_within_the_stores_count_and_its_lag_is_not_swept() {
        // While the store counts as many users as the index holds keys (less its lag), an
        // insert looks at none of them: here the store is said to hold none of the 1,000, and
        // they all stay until its count says otherwise; then they are forgotten, down to the
        // margin.
        let a = endpoint("https://a.example");
        let index = none_held(&a, 1000, 1000);
        assert_eq!(index.len(), 1000, "nothing swept within the store's count");
        let fresh = key(&a, "fresh");
        for _ in 0..1000 {
            index.insert(&fresh, 5000, 5000, 0, |k: &CacheKey| k.same(&fresh));
        }
        assert_within_the_margin(&index);
        assert_eq!(keys_of(&index, &a, 5000).len(), 1, "the held key stays");
    }

    #[test]
    fn after_the_store_shrank_the_slots_follow_and_every_held_key_is_still_found() {
        // 20,000 keys at the peak, then a store of 100 that keeps turning over (each new key
        // dropped from the store 300 inserts later). Without the compaction the slots stay at
        // the peak and the keys left behind pile up behind the cursor (2,500 and more here).
        let a = endpoint("https://a.example");
        let index = Index::new(true);
        for i in 0..20_000_i64 {
            let users_held = i as u64 + 1;
            index.insert(&key(&a, &format!("peak{i}")), i, i as u64, users_held, all);
        }
        let held: std::cell::RefCell<VecDeque<CacheKey>> = Default::default();
        for i in 0..20_000_i64 {
            let k = key(&a, &format!("new{i}"));
            {
                let mut held = held.borrow_mut();
                held.push_back(k.clone());
                if held.len() > 100 {
                    held.pop_front();
                }
            }
            let user = 1_000_000 + i;
            let fingerprint = 1_000_000 + i as u64;
            let users_held = held.borrow().len() as u64;
            index.insert(&k, user, fingerprint, users_held, |k| {
                held.borrow().iter().any(|h| h == k)
            });
        }
        let (slots, len) = {
            let tables = index.lock();
            (tables.keys.slots.len(), tables.keys.len)
        };
        assert!(len < 1_000, "{len} keys indexed for a store of 100");
        assert!(
            slots <= 4 * COMPACT_MIN_SLOTS,
            "{slots} slots for {len} keys"
        );
        for (n, k) in held.borrow().iter().enumerate() {
            let i = 20_000 - 100 + n as i64;
            assert!(keys_of(&index, &a, 1_000_000 + i).iter().any(|f| f == k));
            let taken = index.take_token(1_000_000 + i as u64, all);
            assert!(
                taken.iter().any(|t| t == k),
                "held key {i} found by fingerprint"
            );
        }
    }

    #[test]
    fn without_a_shared_tier_tokens_are_not_indexed() {
        let a = endpoint("https://a.example");
        let index = Index::new(false);
        index.insert(&key(&a, "t101"), 7, 101, 0, all);
        assert!(!index.by_token());
        assert!(index.take_token(101, all).is_empty());
        assert_eq!(keys_of(&index, &a, 7).len(), 1);
    }
}
