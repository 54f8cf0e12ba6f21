//! The [`Registry`] of live sessions: what each session holds (by endpoint, token fingerprint,
//! user and the integrator's session; never a token), indexed so that a revocation finds the
//! sessions it names without walking the others, and the latest revocations, so that a session
//! that was resolving while one came still finds it. A revocation that comes with the time it
//! was made spares the sessions resolved well after it (a fresh token after an unban).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::credential::SessionCredentials;
use crate::telemetry::REVOKED_TOTAL;
use token_resolver::{DatedRevocation, Revocation, TokenFingerprint};

/// How many revocations the registry remembers for sessions that were resolving meanwhile.
const RECENT: usize = 256;

/// One credential as the registry keeps it: what a revocation may name it by.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    /// The normalised endpoint, shared by every credential of it.
    endpoint: Arc<str>,
    token: TokenFingerprint,
    user_id: i64,
    /// The integrator's session, when its answer said.
    session: Option<Box<str>>,
    /// When it was resolved here; `None` for a stale answer.
    resolved_at: Option<SystemTime>,
}

/// What the registry keeps of a session: what it holds, and the signals that reach its task.
#[derive(Debug)]
struct Registered {
    held: Vec<Held>,
    /// Fired when a revocation names the session: it says `revoked` and closes.
    kick: CancellationToken,
    /// Notified when revocations may have been missed: it checks its tokens again.
    recheck: Arc<Notify>,
}

/// Every open session of one server that resolved a token, by connection and by what its
/// credentials may be revoked by, and the latest revocations.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    by_connection: HashMap<u64, Registered>,
    /// Sessions holding a token, by endpoint and fingerprint.
    by_token: HashMap<(Arc<str>, TokenFingerprint), Vec<u64>>,
    /// Sessions holding a user's token, by endpoint and user.
    by_user: HashMap<(Arc<str>, i64), Vec<u64>>,
    /// Every endpoint seen, shared by the keys above.
    endpoints: HashMap<Box<str>, Arc<str>>,
    /// The last [`RECENT`] revocations, by sequence number.
    recent: VecDeque<(u64, Revocation)>,
    /// The sequence number the next revocation gets.
    next: u64,
}

/// The two signals by which the registry reaches one session's task, from
/// [`Registry::enrol`]: the session waits on both.
#[derive(Debug)]
pub struct SessionSignals {
    /// Fired when a revocation names the session: it says `revoked` and closes.
    pub kick: CancellationToken,
    /// Notified when revocations may have been missed: it checks its tokens again.
    pub recheck: Arc<Notify>,
}

/// A position in the registry's sequence of revocations (the number the next one gets): taken
/// by [`Registry::cursor`] before a message is handled, given back to [`Registry::update`]
/// after, so that the revocations that came in between are found.
#[derive(Debug, Clone, Copy)]
pub struct RevocationCursor(u64);

/// What the revocations since a [`RevocationCursor`] mean for one session, by
/// [`Registry::update`]: those that came while it was handling a message.
#[derive(Debug, PartialEq, Eq)]
pub enum RevocationsSince {
    /// No revocation that names what the session holds.
    Nothing,
    /// A revocation named it: the session is revoked.
    Named,
    /// More revocations than the registry remembers, or a re-check for everyone: the session
    /// checks its tokens again.
    Unknown,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Sessions> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enrols a new session, numbered `connection` (unique on this server); the signals that
    /// reach its task.
    pub fn enrol(&self, connection: u64) -> SessionSignals {
        let kick = CancellationToken::new();
        let recheck = Arc::new(Notify::new());
        self.lock().by_connection.insert(
            connection,
            Registered {
                held: Vec::new(),
                kick: kick.clone(),
                recheck: recheck.clone(),
            },
        );
        SessionSignals { kick, recheck }
    }

    /// Where revocations stand now.
    pub fn cursor(&self) -> RevocationCursor {
        RevocationCursor(self.lock().next)
    }

    /// Records what the session holds now, and says whether a revocation since `since` names
    /// it: one that came while the message was handled found the session's old holdings.
    pub fn update(
        &self,
        connection: u64,
        holdings: &SessionCredentials,
        since: RevocationCursor,
    ) -> RevocationsSince {
        let mut sessions = self.lock();
        let held: Vec<Held> = holdings
            .credentials
            .iter()
            .map(|c| Held {
                endpoint: sessions.endpoint(&c.endpoint),
                token: c.fingerprint.clone(),
                user_id: c.user_id,
                session: c.session.as_deref().map(Box::from),
                resolved_at: c.resolved_at,
            })
            .collect();
        let meanwhile = sessions.meanwhile(&held, since);
        sessions.unindex(connection);
        if let Some(registered) = sessions.by_connection.get_mut(&connection) {
            registered.held = held;
        }
        sessions.index(connection);
        meanwhile
    }

    /// Forgets a session that ended.
    pub fn remove(&self, connection: u64) {
        let mut sessions = self.lock();
        sessions.unindex(connection);
        sessions.by_connection.remove(&connection);
    }

    /// Kicks every session `revocation` names (a re-check, or a kind of revocation this server
    /// does not know, makes every session that holds a token check it again instead); how many
    /// were kicked now. Finding them costs what the revocation names, not what the registry
    /// holds (but for revoking everything, or a re-check).
    pub fn revoke(&self, revocation: &Revocation) -> usize {
        self.revoke_sparing(revocation, None)
    }

    /// [`revoke`](Self::revoke), sparing the sessions whose every credential it names was
    /// resolved long enough after it was made ([`DatedRevocation::spares`]): a revocation that
    /// arrives late closes what it named then, not a session a fresh token opened since.
    pub fn revoke_dated(&self, revocation: &DatedRevocation) -> usize {
        self.revoke_sparing(revocation, Some(revocation))
    }

    fn revoke_sparing(&self, revocation: &Revocation, dated: Option<&DatedRevocation>) -> usize {
        let mut sessions = self.lock();
        let seq = sessions.next;
        sessions.next += 1;
        if sessions.recent.len() == RECENT {
            sessions.recent.pop_front();
        }
        sessions.recent.push_back((seq, revocation.clone()));
        let named = match sessions.named(revocation) {
            Some(named) => named,
            None => {
                for registered in sessions.by_connection.values() {
                    if !registered.held.is_empty() {
                        registered.recheck.notify_one();
                    }
                }
                return 0;
            }
        };
        let mut kicked = 0;
        for connection in named {
            if let Some(registered) = sessions.by_connection.get(&connection) {
                let spared = dated.is_some_and(|dated| {
                    (registered.held.iter())
                        .filter(|held| names_one(revocation, held) != Some(false))
                        .all(|held| held.resolved_at.is_some_and(|at| dated.spares(at)))
                });
                if !spared && !registered.kick.is_cancelled() {
                    registered.kick.cancel();
                    kicked += 1;
                }
            }
        }
        metrics::counter!(REVOKED_TOTAL).increment(kicked as u64);
        kicked
    }

    /// The connections `revocation` names, without kicking them (`None` for one that names
    /// nobody in particular): what [`revoke`](Self::revoke) kicks.
    pub fn find(&self, revocation: &Revocation) -> Option<Vec<u64>> {
        self.lock().named(revocation)
    }
}

impl Sessions {
    /// The shared copy of `endpoint`.
    fn endpoint(&mut self, endpoint: &str) -> Arc<str> {
        if let Some(shared) = self.endpoints.get(endpoint) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(endpoint);
        self.endpoints.insert(endpoint.into(), shared.clone());
        shared
    }

    /// The connections `revocation` names; `None` for one that names nobody in particular (a
    /// re-check, or a kind this server does not know yet).
    fn named(&self, revocation: &Revocation) -> Option<Vec<u64>> {
        let holders = |found: Option<&Vec<u64>>| found.cloned().unwrap_or_default();
        Some(match revocation {
            Revocation::Token { endpoint, token } => {
                let key = (Arc::from(endpoint.as_str()), token.clone());
                holders(self.by_token.get(&key))
            }
            Revocation::User { endpoint, user_id } => {
                holders(self.by_user.get(&(Arc::from(endpoint.as_str()), *user_id)))
            }
            Revocation::Session {
                endpoint,
                user_id,
                session,
            } => {
                let of_user = holders(self.by_user.get(&(Arc::from(endpoint.as_str()), *user_id)));
                of_user
                    .into_iter()
                    .filter(|connection| {
                        self.by_connection.get(connection).is_some_and(|r| {
                            r.held.iter().any(|h| {
                                *h.endpoint == **endpoint
                                    && h.user_id == *user_id
                                    && h.session.as_deref() == Some(session)
                            })
                        })
                    })
                    .collect()
            }
            Revocation::All => self
                .by_connection
                .iter()
                .filter(|(_, r)| !r.held.is_empty())
                .map(|(c, _)| *c)
                .collect(),
            _ => return None,
        })
    }

    /// What the revocations since `since` mean for a session that now holds `held`.
    fn meanwhile(&self, held: &[Held], since: RevocationCursor) -> RevocationsSince {
        if held.is_empty() || self.next == since.0 {
            return RevocationsSince::Nothing;
        }
        if self.recent.front().is_none_or(|(seq, _)| *seq > since.0) {
            return RevocationsSince::Unknown;
        }
        let came = self.recent.iter().filter(|(seq, _)| *seq >= since.0);
        let mut unknown = false;
        for (_, revocation) in came {
            match names(revocation, held) {
                Some(true) => return RevocationsSince::Named,
                Some(false) => {}
                None => unknown = true,
            }
        }
        if unknown {
            RevocationsSince::Unknown
        } else {
            RevocationsSince::Nothing
        }
    }

    /// Adds `connection`'s credentials to the indexes.
    fn index(&mut self, connection: u64) {
        let Some(registered) = self.by_connection.get(&connection) else {
            return;
        };
        for held in &registered.held {
            let by_token = (held.endpoint.clone(), held.token.clone());
            let holders = self.by_token.entry(by_token).or_default();
            if !holders.contains(&connection) {
                holders.push(connection);
            }
            let by_user = (held.endpoint.clone(), held.user_id);
            let holders = self.by_user.entry(by_user).or_default();
            if !holders.contains(&connection) {
                holders.push(connection);
            }
        }
    }

    /// Takes `connection`'s credentials out of the indexes.
    fn unindex(&mut self, connection: u64) {
        let Some(registered) = self.by_connection.get(&connection) else {
            return;
        };
        for held in &registered.held {
            let by_token = (held.endpoint.clone(), held.token.clone());
            forget(&mut self.by_token, &by_token, connection);
            forget(
                &mut self.by_user,
                &(held.endpoint.clone(), held.user_id),
                connection,
            );
        }
    }
}

/// Takes `connection` out of `key`'s holders, and the key out when none is left.
fn forget<K: std::hash::Hash + Eq>(index: &mut HashMap<K, Vec<u64>>, key: &K, connection: u64) {
    if let Some(holders) = index.get_mut(key) {
        holders.retain(|c| *c != connection);
        if holders.is_empty() {
            index.remove(key);
        }
    }
}

/// Whether `revocation` names one of the credentials `held`; `None` for a re-check, which names
/// nobody and asks everybody to check again, and for a kind of revocation this server does not
/// know yet, which is treated the same way.
fn names(revocation: &Revocation, held: &[Held]) -> Option<bool> {
    let mut named = false;
    for h in held {
        named |= names_one(revocation, h)?;
    }
    Some(named || matches!(revocation, Revocation::All))
}

/// Whether `revocation` names the credential `h`; `None` as for [`names`].
fn names_one(revocation: &Revocation, h: &Held) -> Option<bool> {
    Some(match revocation {
        Revocation::Token { endpoint, token } => *h.endpoint == **endpoint && h.token == *token,
        Revocation::User { endpoint, user_id } => {
            *h.endpoint == **endpoint && h.user_id == *user_id
        }
        Revocation::Session {
            endpoint,
            user_id,
            session,
        } => {
            *h.endpoint == **endpoint
                && h.user_id == *user_id
                && h.session.as_deref() == Some(session.as_str())
        }
        Revocation::All => true,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credential::{Credential, Purpose};
    use token_resolver::{AccessToken, Resolution, Resolver, User};

    const AT: &str = "https://a.example/api/user";

    fn credential(resolver: &Resolver, token: &str, user: i64, sid: Option<&str>) -> Credential {
        let mut answer = User {
            id: user,
            name: "n".into(),
            extra: Default::default(),
        };
        if let Some(sid) = sid {
            answer.extra.insert("sid".into(), sid.into());
        }
        let fingerprint = resolver.fingerprint(AT, token).unwrap();
        let token = AccessToken::new(token.to_owned()).unwrap();
        let answer = Resolution::new(std::sync::Arc::new(answer), None);
        Credential::new(Purpose::Connect, AT, token, fingerprint, &answer)
    }

    /// Sessions 1 to 3: user 7 on two of the integrator's sessions, user 8 on one.
    fn registry() -> (Registry, Resolver) {
        let resolver = Resolver::builder().default_auth_url(AT).build().unwrap();
        let registry = Registry::default();
        for (connection, token, user, sid) in
            [(1, "t1", 7, "s1"), (2, "t2", 7, "s2"), (3, "t3", 8, "s3")]
        {
            registry.enrol(connection);
            let holdings = SessionCredentials {
                credentials: vec![credential(&resolver, token, user, Some(sid))],
            };
            registry.update(connection, &holdings, registry.cursor());
        }
        (registry, resolver)
    }

    fn found(registry: &Registry, revocation: Revocation) -> Vec<u64> {
        let mut found = registry.find(&revocation).unwrap();
        found.sort_unstable();
        found
    }

    #[test]
    fn each_revocation_finds_exactly_the_sessions_it_names() {
        let (registry, resolver) = registry();
        let endpoint = AT.to_owned();
        let user = |user_id| Revocation::User {
            endpoint: endpoint.clone(),
            user_id,
        };
        assert_eq!(found(&registry, user(7)), [1, 2]);
        assert_eq!(found(&registry, user(9)), Vec::<u64>::new());
        let session = Revocation::Session {
            endpoint: endpoint.clone(),
            user_id: 7,
            session: "s2".into(),
        };
        assert_eq!(found(&registry, session), [2]);
        let token = Revocation::Token {
            endpoint: endpoint.clone(),
            token: resolver.fingerprint(AT, "t3").unwrap(),
        };
        assert_eq!(found(&registry, token), [3]);
        assert_eq!(found(&registry, Revocation::All), [1, 2, 3]);
        assert_eq!(registry.find(&Revocation::Recheck), None);
        let elsewhere = Revocation::User {
            endpoint: "https://b.example/api/user".into(),
            user_id: 7,
        };
        assert_eq!(found(&registry, elsewhere), Vec::<u64>::new());
    }

    #[test]
    fn a_session_that_leaves_or_changes_what_it_holds_leaves_the_indexes() {
        let (registry, resolver) = registry();
        registry.remove(1);
        let user = Revocation::User {
            endpoint: AT.into(),
            user_id: 7,
        };
        assert_eq!(found(&registry, user.clone()), [2]);
        let holdings = SessionCredentials {
            credentials: vec![credential(&resolver, "t4", 8, None)],
        };
        registry.update(2, &holdings, registry.cursor());
        assert_eq!(found(&registry, user), Vec::<u64>::new());
        let old = Revocation::Token {
            endpoint: AT.into(),
            token: resolver.fingerprint(AT, "t2").unwrap(),
        };
        assert_eq!(found(&registry, old), Vec::<u64>::new());
    }

    #[test]
    fn a_revocation_while_a_session_was_resolving_is_found_when_it_records_what_it_holds() {
        let (registry, resolver) = registry();
        registry.enrol(4);
        let since = registry.cursor();
        registry.revoke(&Revocation::User {
            endpoint: AT.into(),
            user_id: 9,
        });
        let holdings = SessionCredentials {
            credentials: vec![credential(&resolver, "t5", 9, None)],
        };
        assert_eq!(
            registry.update(4, &holdings, since),
            RevocationsSince::Named
        );
        assert_eq!(
            registry.update(4, &holdings, registry.cursor()),
            RevocationsSince::Nothing
        );
    }

    #[tokio::test]
    async fn a_late_revocation_spares_only_sessions_resolved_well_after_it_was_made() {
        use std::time::{Duration, SystemTime};
        use token_resolver::Revoke;
        let (registry, resolver) = registry();
        let mut dated = resolver.dated_revocations();
        let ban = || Revoke::User {
            auth_url: AT.into(),
            user_id: 7,
        };
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let within = Duration::from_secs(1);
        resolver.revoke(ban(), an_hour_ago, within).await.unwrap();
        let late = dated.recv().await.unwrap();
        assert_eq!(late.made_at(), Some(an_hour_ago));
        assert_eq!(
            registry.revoke_dated(&late),
            0,
            "resolved an hour after the ban"
        );
        resolver
            .revoke(ban(), SystemTime::now(), within)
            .await
            .unwrap();
        let now = dated.recv().await.unwrap();
        assert_eq!(registry.revoke_dated(&now), 2, "both of user 7's sessions");
    }
}
