//! nginx's own cache of `/v1/authorize` answers, kept honest: the sidecar lets nginx keep an
//! answer (`X-Accel-Expires`) only while it can take it back, and takes it back (a purge
//! through `ngx_cache_purge`) when a revocation reaches this node.
//!
//! With [`NginxCache`] set, a `200` for the default authUrl tells nginx how long it may keep
//! the answer (the TTL, shorter when the token expires sooner; counted from this answer, which
//! may itself come from the resolver's cache, so the two windows add up), and the sidecar
//! remembers the grant: nginx's cache key (the `Authorization` header as nginx saw it), the
//! token's fingerprint, the user and the integrator's session. A revocation (a token, a user, a
//! session, everything, or a lost channel) takes the grants it names out of the table and
//! queues a purge of each; the purger (`purger`) asks nginx's purge location to drop the key,
//! retrying until nginx answers or the grant would have expired anyway. The revocations come
//! through `token_resolver_sessions::follow`, which turns a lagging feed into a re-check of all:
//! every grant is purged then. While the node cannot hear the shared tier's revocations (its
//! stream lost, [`Resolver::shared_cache_subscribed`] false), every grant is purged too, and
//! nothing is granted until it hears again: nginx admits without asking. Nothing is granted
//! when the table is full, when the answer is stale, for another integrator (`X-Auth-Url`), or
//! when a revocation arrived while the token was being resolved.
//!
//! One token cannot fill nginx: only the canonical spelling of a token's header
//! (`Bearer <token>`, one space, nothing else; [`is_canonical`]) is granted, so a token has one
//! key in nginx however a client spells it (`bEaReR`, more spaces are answered, uncacheable), and
//! a ban one purge per token. A token may hold [`MAX_GRANTS_PER_TOKEN`] grants and a user
//! [`MAX_GRANTS_PER_USER`]; past those the answer is sent uncacheable. The table is indexed by
//! token and by user, so a revocation finds what it names without looking at any other grant.
//!
//! The table holds raw `Authorization` values, as nginx's cache files do: they never leave
//! this process except to nginx's purge location, in the `X-Token-Resolver-Purge` header.
//! The table lives in this process. With a grants file (`journal`), each grant is recorded
//! there first, and a sidecar started anew takes back everything still in force in it;
//! without one, what a previous process granted stays in nginx until its own expiry (the TTL
//! at most). What an embedder configures is `config`'s ([`NginxCache`]).

mod config;
pub(crate) mod journal;
mod purger;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use token_resolver::{Resolution, Resolver, Revocation, TokenFingerprint};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use self::config::{NginxCache, PurgeUrlError};
use self::journal::Journal;
use self::purger::Owed;
use self::purger::{purge, purge_client, Purges};
pub use self::purger::{PURGES_TOTAL, PURGE_HEADER};

/// A purge of a grant younger than this is sent again once it is this old: nginx stores an
/// answer a moment after the sidecar sends it, and a purge in that moment finds nothing.
const SETTLE: Duration = Duration::from_secs(1);
/// Longest nginx may keep an answer, whatever the configuration says; a grants file's line
/// reaching further than this (and [`SETTLE`]) from now was not written by a sidecar, and is
/// clamped to it.
const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Grants one token may hold. A token has one canonical key, for the one authUrl granted: this
/// bounds what any other key for it could add.
const MAX_GRANTS_PER_TOKEN: usize = 4;
/// Grants one user may hold (one per token: tokens from as many logins).
const MAX_GRANTS_PER_USER: usize = 64;
/// How often the sidecar asks whether its node still hears the shared tier's revocations:
/// nginx answers from its cache without asking the sidecar, so what it keeps is taken back
/// within this much of the resolver's own loss of the stream.
const HEARING_POLL: Duration = Duration::from_millis(250);

/// Whether `authorization`, a request's `Authorization` header, is the canonical spelling of
/// the bearer `token` taken from it: `Bearer`, one space, the token, nothing else (and the token
/// without blanks). Only such a header is granted: nginx keys its cache by the header as sent.
pub(crate) fn is_canonical(authorization: &str, token: &str) -> bool {
    !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_graphic())
        && authorization.strip_prefix("Bearer ") == Some(token)
}

/// The grants of `nginx` for `resolver`'s default authUrl, following its revocations and
/// purging until `cut`, with a purge owed for each grant of a previous process still in force
/// in the grants file; `None`, with an error logged, when no purge client can be built or the
/// grants file cannot be used: nothing is granted unless it can be taken back.
pub(crate) fn start(
    nginx: &NginxCache,
    resolver: &Resolver,
    cut: &CancellationToken,
) -> Option<Arc<Grants>> {
    let client = match purge_client() {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "no client for nginx purges: nginx keeps nothing");
            return None;
        }
    };
    let endpoint = resolver.default_endpoint().map(|e| e.as_str().to_owned());
    // nginx never keeps an answer longer than the resolver itself would, nor than a day.
    let config = nginx
        .clone()
        .ttl(nginx.ttl.min(resolver.cache_ttl()).min(MAX_TTL));
    let grants = Arc::new(Grants::new(&config, endpoint));
    if let Some(path) = &nginx.grants_file {
        let unix = unix_now();
        // A second more: a line outlives its grant by the second nginx may take to store it.
        let latest = unix + MAX_TTL.as_secs() + SETTLE.as_secs();
        match Journal::open(path, unix, latest) {
            Ok((journal, in_force)) => grants.keep_journal(journal, in_force),
            Err(e) => {
                tracing::error!(
                    path = %path.display(),
                    error = %e,
                    "the nginx grants file cannot be used: nginx keeps nothing"
                );
                return None;
            }
        }
    }
    tokio::spawn(token_resolver_sessions::follow(
        resolver.revocations(),
        cut.clone(),
        Arc::downgrade(&grants),
        Grants::revoke,
    ));
    if resolver.has_shared_cache() {
        tokio::spawn(follow_hearing(
            resolver.clone(),
            cut.clone(),
            Arc::downgrade(&grants),
        ));
    }
    let url = nginx.purge_url.clone();
    tokio::spawn(purge(grants.purges(), client, url, cut.clone()));
    Some(grants)
}

/// Keeps `grants` deaf while `resolver` does not hear the shared tier's revocations (its
/// stream lost, or not yet read up to date), until `cut` or the grants are gone.
async fn follow_hearing(resolver: Resolver, cut: CancellationToken, grants: Weak<Grants>) {
    let mut poll = tokio::time::interval(HEARING_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cut.cancelled() => return,
            _ = poll.tick() => {}
        }
        let Some(grants) = grants.upgrade() else {
            return;
        };
        grants.hearing(resolver.shared_cache_subscribed());
    }
}

/// What nginx was allowed to keep, and the purges owed for what it must drop.
pub(crate) struct Grants {
    ttl: Duration,
    max_entries: usize,
    /// The default authUrl's normalised endpoint: the only one granted.
    endpoint: Option<String>,
    /// Revocations applied so far: a grant is refused when one arrived during its resolve.
    epoch: AtomicU64,
    /// Whether the node may have missed a revocation now (its shared tier's stream is lost):
    /// nothing is granted then, since nginx would admit without asking.
    deaf: AtomicBool,
    table: Mutex<Table>,
    purges: Arc<Purges>,
}

/// One answer nginx may keep.
struct Grant {
    fingerprint: TokenFingerprint,
    user_id: i64,
    session: Option<Box<str>>,
    granted: Instant,
    until: Instant,
}

/// The grants, by nginx's cache key, by token and by user; `expiry` in the order granted.
#[derive(Default)]
struct Table {
    by_key: HashMap<Arc<str>, Grant>,
    /// The keys of each token's grants: what a token's revocation takes, without a scan.
    by_token: HashMap<TokenFingerprint, HashSet<Arc<str>>>,
    /// The keys of each user's grants: what a ban or a logout takes, without a scan.
    by_user: HashMap<i64, HashSet<Arc<str>>>,
    expiry: VecDeque<(Instant, Arc<str>)>,
    /// Where each grant is recorded first, when there is a grants file.
    journal: Option<Journal>,
    /// Grants and index entries looked at so far, for the tests that pin a revocation's work
    /// to what it names.
    #[cfg(test)]
    looked_at: usize,
}

/// A ticket taken before a resolve: [`Grants::grant`] refuses it if a revocation came since.
#[derive(Clone, Copy)]
pub(crate) struct Ticket(u64);

impl Grants {
    /// Grants for the default `endpoint` (none without one).
    pub(crate) fn new(config: &NginxCache, endpoint: Option<String>) -> Grants {
        Grants {
            ttl: config.ttl,
            max_entries: config.max_entries,
            endpoint,
            epoch: AtomicU64::new(0),
            deaf: AtomicBool::new(false),
            table: Mutex::default(),
            purges: Arc::default(),
        }
    }

    /// Take before resolving a token that may be granted.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket(self.epoch.load(Ordering::Acquire))
    }

    /// Lets nginx keep `user`, resolved for `token` at the default endpoint and asked for with
    /// `authorization` (the header, nginx's cache key), for the seconds returned; `None`: it
    /// must not keep it (among other reasons: the header is not the canonical spelling of the
    /// token, or the token or the user holds all the grants it may).
    pub(crate) fn grant(
        &self,
        ticket: Ticket,
        authorization: &str,
        token: &str,
        fingerprint: TokenFingerprint,
        user: &Resolution,
    ) -> Option<u64> {
        if !is_canonical(authorization, token) {
            return None;
        }
        self.keep(ticket, authorization, fingerprint, user)
    }

    /// [`grant`](Self::grant) once `key` is known to be canonical.
    fn keep(
        &self,
        ticket: Ticket,
        key: &str,
        fingerprint: TokenFingerprint,
        user: &Resolution,
    ) -> Option<u64> {
        if user.is_stale() {
            return None;
        }
        let mut secs = self.ttl.as_secs();
        let unix = unix_now();
        if let Some(expiry) = user.expires_at() {
            secs = secs.min(expiry.unix_seconds().saturating_sub(unix));
        }
        if secs == 0 {
            return None;
        }
        let now = Instant::now();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock: a revocation bumps the epoch before it takes from the table, and going
        // deaf is such a revocation.
        if self.epoch.load(Ordering::Acquire) != ticket.0 || self.deaf.load(Ordering::Acquire) {
            return None;
        }
        table.forget_expired(now);
        let key: Arc<str> = Arc::from(key);
        // A grant refused keeps the one it would have replaced: nginx may still hold that.
        let replaced = table.by_key.get(&key);
        if replaced.is_none() && table.by_key.len() >= self.max_entries {
            return None;
        }
        // The grant replaced counts against its token and its user no more.
        let of_token = usize::from(replaced.is_some_and(|g| g.fingerprint == fingerprint));
        let of_user = usize::from(replaced.is_some_and(|g| g.user_id == user.id));
        let tokens = table.by_token.get(&fingerprint).map_or(0, HashSet::len);
        let users = table.by_user.get(&user.id).map_or(0, HashSet::len);
        if tokens - of_token >= MAX_GRANTS_PER_TOKEN || users - of_user >= MAX_GRANTS_PER_USER {
            return None;
        }
        if let Some(journal) = &mut table.journal {
            // A second more: nginx stores the answer a moment after it is sent.
            if let Err(e) = journal.record(&key, unix + secs + 1) {
                tracing::error!(
                    error = %e,
                    "the nginx grants file cannot be written: this answer goes uncached"
                );
                return None;
            }
        }
        table.remove(&key);
        let until = now + Duration::from_secs(secs);
        table.insert(
            key,
            Grant {
                fingerprint,
                user_id: user.id,
                session: user.session().map(Box::from),
                granted: now,
                until,
            },
        );
        self.compact_journal(&mut table, now, unix);
        Some(secs)
    }

    /// Uses `journal` from now on, and owes nginx a purge of each grant of a previous process
    /// `in_force` there (cache keys with their end, unix seconds).
    fn keep_journal(&self, journal: Journal, in_force: Vec<(String, u64)>) {
        let (now, unix) = (Instant::now(), unix_now());
        if !in_force.is_empty() {
            tracing::info!(
                grants = in_force.len(),
                "taking back from nginx what a previous sidecar let it keep"
            );
        }
        self.purges.owe(in_force.into_iter().map(|(key, until)| {
            // The grants file clamps its lines; this never overflows, whatever it read.
            let left = Duration::from_secs(until.saturating_sub(unix)).min(MAX_TTL + SETTLE);
            let owed = Owed {
                at: now,
                again: None,
                until: now.checked_add(left).unwrap_or(now),
            };
            (Arc::from(key), owed)
        }));
        self.table.lock().unwrap_or_else(|e| e.into_inner()).journal = Some(journal);
    }

    /// Rewrites the grants file, when it is due, from what nginx may still hold: the grants,
    /// and the purges owed and not yet sent (a crash must not lose those either). A purge in
    /// flight is in neither: should it fail, and the sidecar crash before it is sent again,
    /// the next process does not know of it.
    fn compact_journal(&self, table: &mut Table, now: Instant, unix: u64) {
        // The grants alone first: with fewer live lines counted it is due sooner, so when it is
        // not due now the purger's lock need not be taken, which is the usual grant.
        let Some(journal) = table
            .journal
            .as_mut()
            .filter(|j| j.is_due(table.by_key.len()))
        else {
            return;
        };
        let owed = self.purges.owed.lock().unwrap_or_else(|e| e.into_inner());
        if !journal.is_due(table.by_key.len() + owed.len()) {
            return;
        }
        // Rounded up: a line must not end before nginx lets the answer go.
        let unix_at = |until: Instant| unix + until.saturating_duration_since(now).as_secs() + 1;
        let grants = (table.by_key.iter()).map(|(key, grant)| (&**key, unix_at(grant.until)));
        let owed = owed.iter().map(|(key, owed)| (&**key, unix_at(owed.until)));
        if let Err(e) = journal.compact(grants.chain(owed)) {
            tracing::warn!(
                error = %e,
                "the nginx grants file could not be rewritten; appending to it still"
            );
        }
    }

    /// Takes the grants `revocation` names out of the table and owes nginx a purge of each.
    pub(crate) fn revoke(&self, revocation: &Revocation) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let ours = |endpoint: &str| self.endpoint.as_deref() == Some(endpoint);
        let taken = match revocation {
            Revocation::Token { endpoint, token } if ours(endpoint) => table.take_token(token),
            Revocation::User { endpoint, user_id } if ours(endpoint) => {
                table.take_user(*user_id, |_| true)
            }
            Revocation::Session {
                endpoint,
                user_id,
                session,
            } if ours(endpoint) => {
                table.take_user(*user_id, |g| g.session.as_deref() == Some(session.as_str()))
            }
            Revocation::All | Revocation::Recheck => table.take_all(),
            _ => Vec::new(),
        };
        drop(table);
        self.owe(taken);
    }

    /// Whether the node hears every revocation now. Going deaf takes back everything nginx was
    /// let keep (a revocation may be missed meanwhile, and nginx would admit without asking)
    /// and grants nothing until it hears again.
    pub(crate) fn hearing(&self, hearing: bool) {
        let was_deaf = self.deaf.swap(!hearing, Ordering::AcqRel);
        if !hearing && !was_deaf {
            tracing::warn!(
                "the node cannot hear the shared tier's revocations: nginx's answers are purged, \
                 and none is kept until it hears again"
            );
            self.revoke(&Revocation::Recheck);
        }
    }

    /// Queues a purge of each taken grant, sent again when it settles if it is younger than
    /// [`SETTLE`].
    fn owe(&self, taken: Vec<(Arc<str>, Grant)>) {
        if taken.is_empty() {
            return;
        }
        let now = Instant::now();
        self.purges.owe(taken.into_iter().map(|(key, grant)| {
            let settled = grant.granted + SETTLE;
            let owed = Owed {
                at: now,
                again: (settled > now).then_some(settled),
                until: grant.until,
            };
            (key, owed)
        }));
    }

    /// The purges owed, for the purger.
    fn purges(&self) -> Arc<Purges> {
        self.purges.clone()
    }

    /// Grants held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().unwrap().by_key.len()
    }
}

impl Table {
    fn insert(&mut self, key: Arc<str>, grant: Grant) {
        self.by_token
            .entry(grant.fingerprint.clone())
            .or_default()
            .insert(key.clone());
        self.by_user
            .entry(grant.user_id)
            .or_default()
            .insert(key.clone());
        self.expiry.push_back((grant.until, key.clone()));
        self.by_key.insert(key, grant);
    }

    /// Takes `key`'s grant out of every index.
    fn remove(&mut self, key: &str) -> Option<(Arc<str>, Grant)> {
        let (key, grant) = self.by_key.remove_entry(key)?;
        unlist(&mut self.by_token, &grant.fingerprint, &key);
        unlist(&mut self.by_user, &grant.user_id, &key);
        #[cfg(test)]
        {
            self.looked_at += 3;
        }
        Some((key, grant))
    }

    /// Takes the grants of `token`: the work is in their number alone.
    fn take_token(&mut self, token: &TokenFingerprint) -> Vec<(Arc<str>, Grant)> {
        let keys = self.by_token.remove(token).unwrap_or_default();
        keys.iter().filter_map(|k| self.remove(k)).collect()
    }

    /// Takes the grants of `user_id` that `pick` picks: the work is in the user's number alone.
    fn take_user(&mut self, user_id: i64, pick: impl Fn(&Grant) -> bool) -> Vec<(Arc<str>, Grant)> {
        let Some(keys) = self.by_user.get(&user_id) else {
            return Vec::new();
        };
        let picked: Vec<Arc<str>> = (keys.iter())
            .filter(|k| self.by_key.get(&***k).is_some_and(&pick))
            .cloned()
            .collect();
        #[cfg(test)]
        {
            self.looked_at += self.by_user.get(&user_id).map_or(0, HashSet::len);
        }
        picked.iter().filter_map(|k| self.remove(k)).collect()
    }

    fn take_all(&mut self) -> Vec<(Arc<str>, Grant)> {
        self.by_token.clear();
        self.by_user.clear();
        self.expiry.clear();
        self.by_key.drain().collect()
    }

    /// Forgets grants nginx has let expire, oldest first (a grant cut short by its token's
    /// expiry may wait behind a longer one, at most the TTL).
    fn forget_expired(&mut self, now: Instant) {
        while let Some((until, _)) = self.expiry.front() {
            if *until > now {
                break;
            }
            let (until, key) = self.expiry.pop_front().expect("a front");
            // Granted anew since: that grant has its own place in the queue.
            if self.by_key.get(&key).is_some_and(|g| g.until == until) {
                self.remove(&key);
            }
        }
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Takes `key` out of `index[at]`, and the entry when it is left empty: one lookup, whatever
/// else the entry holds.
fn unlist<K: std::hash::Hash + Eq>(index: &mut HashMap<K, HashSet<Arc<str>>>, at: &K, key: &str) {
    if let Some(keys) = index.get_mut(at) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use token_resolver::{Expiry, Resolver, User};

    const AUTH_URL: &str = "http://127.0.0.1:9";

    /// Grants for `AUTH_URL` bounded to `max_entries`, and the resolver naming tokens there.
    fn grants(max_entries: usize) -> (Grants, Resolver, String) {
        let resolver = Resolver::builder()
            .default_auth_url(AUTH_URL)
            .build()
            .unwrap();
        let endpoint = resolver.default_endpoint().unwrap().as_str().to_owned();
        let config = NginxCache::new("http://127.0.0.1:9/purge")
            .unwrap()
            .max_entries(max_entries);
        (
            Grants::new(&config, Some(endpoint.clone())),
            resolver,
            endpoint,
        )
    }

    fn user(id: i64, session: Option<&str>) -> Resolution {
        user_until(id, session, None)
    }

    fn user_until(id: i64, session: Option<&str>, expires_at: Option<Expiry>) -> Resolution {
        let mut extra = serde_json::Map::new();
        if let Some(sid) = session {
            extra.insert("sid".into(), sid.into());
        }
        let user = User {
            id,
            name: format!("user-{id}"),
            extra: extra.into(),
        };
        Resolution::new(Arc::new(user), expires_at)
    }

    /// Grants `token` to `user` under the key nginx would use.
    fn grant(grants: &Grants, resolver: &Resolver, token: &str, user: &Resolution) -> Option<u64> {
        let fingerprint = resolver.fingerprint(AUTH_URL, token).unwrap();
        grants.grant(
            grants.ticket(),
            &format!("Bearer {token}"),
            token,
            fingerprint,
            user,
        )
    }

    /// The keys a purge is owed for, sorted.
    fn owed(grants: &Grants) -> Vec<String> {
        let owed = grants.purges.owed.lock().unwrap();
        let mut keys: Vec<String> = owed.keys().map(|k| k.to_string()).collect();
        keys.sort();
        keys
    }

    #[test]
    fn a_granted_answer_is_purged_when_its_token_is_revoked() {
        let (grants, resolver, endpoint) = grants(16);
        assert_eq!(grant(&grants, &resolver, "t1", &user(1, None)), Some(60));
        assert_eq!(grant(&grants, &resolver, "t2", &user(1, None)), Some(60));
        grants.revoke(&Revocation::Token {
            endpoint,
            token: resolver.fingerprint(AUTH_URL, "t1").unwrap(),
        });
        assert_eq!(owed(&grants), ["Bearer t1"]);
        assert_eq!(grants.len(), 1, "the other token's answer stays");
        let owed = grants.purges.owed.lock().unwrap();
        assert!(
            owed.values().all(|o| o.again.is_some()),
            "an answer granted this instant is purged again once nginx has surely stored it"
        );
    }

    #[test]
    fn a_node_that_cannot_hear_revocations_takes_back_every_answer_and_grants_none() {
        let (grants, resolver, _) = grants(16);
        assert_eq!(grant(&grants, &resolver, "t1", &user(1, None)), Some(60));
        assert_eq!(grant(&grants, &resolver, "t2", &user(2, None)), Some(60));
        grants.hearing(true);
        assert_eq!(grants.len(), 2, "hearing changes nothing");
        let ticket = grants.ticket();
        grants.hearing(false);
        assert_eq!(owed(&grants), ["Bearer t1", "Bearer t2"]);
        assert_eq!(grants.len(), 0);
        assert_eq!(grant(&grants, &resolver, "t3", &user(3, None)), None);
        let key = "Bearer t4";
        let fingerprint = resolver.fingerprint(AUTH_URL, "t4").unwrap();
        assert_eq!(
            grants.grant(ticket, key, "t4", fingerprint, &user(4, None)),
            None,
            "a resolve begun before the loss is not granted"
        );
        grants.hearing(true);
        assert_eq!(grant(&grants, &resolver, "t3", &user(3, None)), Some(60));
    }

    #[test]
    fn a_ban_purges_every_answer_of_the_user_and_no_other() {
        let (grants, resolver, endpoint) = grants(16);
        grant(&grants, &resolver, "t1", &user(1, None)).unwrap();
        grant(&grants, &resolver, "t2", &user(1, Some("s"))).unwrap();
        grant(&grants, &resolver, "t3", &user(2, None)).unwrap();
        grants.revoke(&Revocation::User {
            endpoint,
            user_id: 1,
        });
        assert_eq!(owed(&grants), ["Bearer t1", "Bearer t2"]);
        assert_eq!(grants.len(), 1);
    }

    #[test]
    fn a_logout_purges_only_the_answers_of_that_session() {
        let (grants, resolver, endpoint) = grants(16);
        grant(&grants, &resolver, "t1", &user(1, Some("phone"))).unwrap();
        grant(&grants, &resolver, "t2", &user(1, Some("laptop"))).unwrap();
        grant(&grants, &resolver, "t3", &user(1, None)).unwrap();
        grants.revoke(&Revocation::Session {
            endpoint,
            user_id: 1,
            session: "phone".into(),
        });
        assert_eq!(owed(&grants), ["Bearer t1"]);
        assert_eq!(grants.len(), 2);
    }

    #[test]
    fn everything_revoked_or_to_be_rechecked_purges_every_answer() {
        for revocation in [Revocation::All, Revocation::Recheck] {
            let (grants, resolver, _) = grants(16);
            grant(&grants, &resolver, "t1", &user(1, None)).unwrap();
            grant(&grants, &resolver, "t2", &user(2, None)).unwrap();
            grants.revoke(&revocation);
            assert_eq!(owed(&grants), ["Bearer t1", "Bearer t2"]);
            assert_eq!(grants.len(), 0);
        }
    }

    #[test]
    fn a_revocation_at_another_integrator_purges_nothing() {
        let (grants, resolver, _) = grants(16);
        grant(&grants, &resolver, "t1", &user(1, None)).unwrap();
        grants.revoke(&Revocation::User {
            endpoint: "https://other.example/".into(),
            user_id: 1,
        });
        assert!(owed(&grants).is_empty());
        assert_eq!(grants.len(), 1);
    }

    #[test]
    fn an_answer_resolved_while_a_revocation_arrived_is_not_granted() {
        let (grants, resolver, endpoint) = grants(16);
        let ticket = grants.ticket();
        grants.revoke(&Revocation::User {
            endpoint,
            user_id: 7,
        });
        let fingerprint = resolver.fingerprint(AUTH_URL, "t1").unwrap();
        assert_eq!(
            grants.grant(ticket, "Bearer t1", "t1", fingerprint, &user(1, None)),
            None
        );
        assert_eq!(grant(&grants, &resolver, "t1", &user(1, None)), Some(60));
    }

    #[test]
    fn a_stale_or_expiring_answer_is_granted_no_longer_than_it_is_valid() {
        let (grants, resolver, _) = grants(16);
        let now = unix_now();
        let stale = user(1, None).into_stale();
        assert_eq!(grant(&grants, &resolver, "t1", &stale), None);
        let expired = user_until(1, None, Some(Expiry::from_unix_seconds(now)));
        assert_eq!(grant(&grants, &resolver, "t2", &expired), None);
        let soon = user_until(1, None, Some(Expiry::from_unix_seconds(now + 10)));
        let secs = grant(&grants, &resolver, "t3", &soon).unwrap();
        assert!((9..=10).contains(&secs), "{secs} s");
        assert_eq!(grants.len(), 1);
    }

    #[test]
    fn a_full_table_grants_nothing_until_nginx_has_let_an_answer_expire() {
        let (grants, resolver, _) = grants(2);
        grant(&grants, &resolver, "t1", &user(1, None)).unwrap();
        grant(&grants, &resolver, "t2", &user(2, None)).unwrap();
        assert_eq!(grant(&grants, &resolver, "t3", &user(3, None)), None);
        assert_eq!(
            grant(&grants, &resolver, "t1", &user(1, None)),
            Some(60),
            "a key granted anew keeps its one place"
        );
        let later = Instant::now() + Duration::from_secs(61);
        grants.table.lock().unwrap().forget_expired(later);
        assert_eq!(grants.len(), 0);
        let table = grants.table.lock().unwrap();
        assert!(table.by_token.is_empty() && table.by_user.is_empty());
        drop(table);
        assert_eq!(grant(&grants, &resolver, "t3", &user(3, None)), Some(60));
    }

    #[tokio::test]
    async fn nothing_is_granted_without_a_usable_grants_file_and_each_grant_is_recorded_there() {
        let (_, resolver, _) = grants(8);
        let cut = CancellationToken::new();
        let nginx = NginxCache::new("http://127.0.0.1:9/purge").unwrap();
        let unusable = nginx.clone().grants_file("/no-such-directory/grants");
        assert!(start(&unusable, &resolver, &cut).is_none());

        let path = std::env::temp_dir().join(format!("grants-start-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let grants = start(&nginx.grants_file(&path), &resolver, &cut).expect("grants");
        assert_eq!(grant(&grants, &resolver, "t1", &user(1, None)), Some(60));
        let recorded = std::fs::read_to_string(&path).unwrap();
        assert!(
            recorded.ends_with(" Bearer t1\n"),
            "recorded before granting"
        );
        cut.cancel();
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn only_the_canonical_spelling_of_a_token_is_granted() {
        let (grants, resolver, _) = grants(1024);
        let fingerprint = resolver.fingerprint(AUTH_URL, "t1").unwrap();
        for spelling in [
            "bearer t1",
            "BEARER t1",
            "bEaReR t1",
            "Bearer  t1",
            "Bearer \tt1",
            "Bearer\tt1",
            " Bearer t1",
            "Bearer t1 ",
            "Bearer t1, Bearer t1",
        ] {
            let token = spelling.trim().rsplit([' ', '\t']).next().unwrap();
            let granted = grants.grant(
                grants.ticket(),
                spelling,
                token,
                fingerprint.clone(),
                &user(1, None),
            );
            assert_eq!(granted, None, "{spelling:?}");
        }
        assert_eq!(grants.len(), 0);
        assert_eq!(grant(&grants, &resolver, "t1", &user(1, None)), Some(60));
        assert!(!is_canonical("Bearer ", ""));
        assert!(!is_canonical("Bearer a b", "a b"));
        assert!(is_canonical("Bearer a.b-c_d~e+f/g=", "a.b-c_d~e+f/g="));
    }

    #[test]
    fn a_token_and_a_user_hold_a_bounded_number_of_grants() {
        let (of_token, resolver, _) = grants(100_000);
        // Keys for one token beyond its canonical one, as no header now makes.
        let fingerprint = resolver.fingerprint(AUTH_URL, "t").unwrap();
        let keep =
            |key: &str| of_token.keep(of_token.ticket(), key, fingerprint.clone(), &user(1, None));
        for i in 0..MAX_GRANTS_PER_TOKEN {
            assert_eq!(keep(&format!("Bearer{} t", " ".repeat(i + 1))), Some(60));
        }
        assert_eq!(keep("Bearer      t"), None, "past the token's cap");
        assert_eq!(keep("Bearer  t"), Some(60), "a key granted anew is no more");
        assert_eq!(of_token.len(), MAX_GRANTS_PER_TOKEN);

        let (grants, resolver, endpoint) = grants(100_000);
        for i in 0..MAX_GRANTS_PER_USER {
            let token = format!("u7-{i}");
            assert_eq!(grant(&grants, &resolver, &token, &user(7, None)), Some(60));
        }
        assert_eq!(
            grant(&grants, &resolver, "u7-more", &user(7, None)),
            None,
            "past the user's cap"
        );
        assert_eq!(grant(&grants, &resolver, "u7-0", &user(7, None)), Some(60));
        assert_eq!(grant(&grants, &resolver, "u8", &user(8, None)), Some(60));
        grants.revoke(&Revocation::User {
            endpoint,
            user_id: 7,
        });
        assert_eq!(
            owed(&grants).len(),
            MAX_GRANTS_PER_USER,
            "a ban: one purge a grant"
        );
        assert_eq!(
            grant(&grants, &resolver, "u7-more", &user(7, None)),
            Some(60)
        );
    }

    #[test]
    fn a_revocation_looks_at_the_grants_it_names_and_no_other() {
        let (grants, resolver, endpoint) = grants(100_000);
        let others = 10_000;
        for id in 0..others {
            let token = format!("other-{id}");
            grant(&grants, &resolver, &token, &user(1000 + id, None)).unwrap();
        }
        grant(&grants, &resolver, "t1", &user(1, Some("phone"))).unwrap();
        grant(&grants, &resolver, "t2", &user(1, Some("laptop"))).unwrap();
        grant(&grants, &resolver, "t3", &user(2, None)).unwrap();
        let before = grants.table.lock().unwrap().looked_at;
        grants.revoke(&Revocation::Session {
            endpoint: endpoint.clone(),
            user_id: 1,
            session: "phone".into(),
        });
        grants.revoke(&Revocation::User {
            endpoint: endpoint.clone(),
            user_id: 1,
        });
        grants.revoke(&Revocation::Token {
            endpoint,
            token: resolver.fingerprint(AUTH_URL, "t3").unwrap(),
        });
        let work = grants.table.lock().unwrap().looked_at - before;
        assert_eq!(owed(&grants), ["Bearer t1", "Bearer t2", "Bearer t3"]);
        assert!(
            work <= 20,
            "{work} grants or index entries looked at for 3 grants"
        );
        assert_eq!(grants.len(), usize::try_from(others).unwrap());
    }

    #[tokio::test]
    async fn a_far_future_end_in_the_grants_file_is_clamped_not_a_panic() {
        use std::os::unix::fs::PermissionsExt;
        let (_, resolver, _) = grants(8);
        let path = std::env::temp_dir().join(format!("grants-far-{}", std::process::id()));
        let text = format!(
            "{} Bearer max\n1000000000000000000 Bearer quintillion\n",
            u64::MAX
        );
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let cut = CancellationToken::new();
        let nginx = NginxCache::new("http://127.0.0.1:9/purge")
            .unwrap()
            .grants_file(&path);
        let grants = start(&nginx, &resolver, &cut).expect("grants");
        let latest = Instant::now() + MAX_TTL + SETTLE;
        let owed = grants.purges.owed.lock().unwrap();
        assert_eq!(owed.len(), 2);
        assert!(owed.values().all(|o| o.until <= latest));
        drop(owed);
        let kept = std::fs::read_to_string(&path).unwrap();
        let latest_unix = unix_now() + MAX_TTL.as_secs() + SETTLE.as_secs();
        for line in kept.lines() {
            let until: u64 = line.split(' ').next().unwrap().parse().unwrap();
            assert!(until <= latest_unix, "{line}");
        }
        cut.cancel();
        let _ = std::fs::remove_file(&path);
    }
}
