//! Revoking across nodes: tombstoning and deleting in Redis, then telling every other node on
//! the revocation stream, for `subscriber` to apply there.
//!
//! Redis first and the stream second, so that a node told to forget an answer cannot read it
//! back from Redis; each step is O(what it names) (a user's or a session's tokens at most), and
//! `invalidate_all` is one `INCR` of the generation: no scan, and nothing the stream's message
//! waits on grows with the keyspace. A revocation keeps trying while Redis fails, rest or not,
//! for as long as any answer it is about can live: a lost one would leave other nodes serving
//! what was revoked.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use redis::RedisResult;
use sha2::Sha256;

use super::conn::Conn;
use super::entry::{fingerprint_of, session_digest, user_digest, SharedEntry};
use super::scripts::UserKeys;
use super::{Core, SharedCache};
use crate::auth_url::Endpoint;
use crate::cache::local::{Local, Target};
use crate::cache::Ack;
use crate::cache::{Revocation, TokenFingerprint};
use crate::telemetry::{self, Scope};

/// A revocation as the stream carries it, for every node to apply locally: a JSON object,
/// `{"node": .., "at": .., "op": .., ...}` with the fields of its `op` (see [`Revoked`]), in the
/// entry's field `m`, authenticated by the entry's field `s` ([`Message::mac`]); the field `p`
/// is the id of the entry before it, for readers to see that they read an unbroken stream.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(super) struct Message {
    /// The node that made it, in hex: its own reader skips it.
    pub(super) node: String,
    /// When the revocation was made, by the wall clock of the node that made it (unix ms).
    pub(super) at: u64,
    /// When whoever asked for it decided it (unix ms; an integrator's ban that its notifier
    /// delivered late), when before `at`: nodes close only the sessions that may hold an answer
    /// from before then. The replay check reads `at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) decided: Option<u64>,
    /// What it revokes.
    #[serde(flatten)]
    pub(super) what: Revoked,
}

/// A revocation read from the stream: what it revokes and when it was made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Told {
    pub(super) what: Revoked,
    /// When the revocation was made, by the wall clock of the node that made it (unix ms): a
    /// revocation applied late closes only what it named then.
    pub(crate) made_at_ms: u64,
    /// When it was decided (unix ms): `made_at_ms`, or the earlier time the message names.
    pub(crate) decided_at_ms: u64,
}

/// The label that keeps the stream's key apart from every other use of the tier's secret.
const STREAM_LABEL: &[u8] = b"token-resolver revocation stream v1";

/// The key that authenticates the stream's messages: `HMAC(secret, label)`, so that no MAC of a
/// message is ever a value's seal or a key's name, whatever the bytes.
pub(super) fn stream_mac(secret: &[u8]) -> Hmac<Sha256> {
    let mut derive = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    derive.update(STREAM_LABEL);
    let key = derive.finalize().into_bytes();
    Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length")
}

impl Message {
    /// The MAC of a message `json` on `stream`, in hex: HMAC-SHA256 under the stream's key
    /// over the stream's name and the message.
    pub(super) fn mac(key: &Hmac<Sha256>, stream: &str, json: &[u8]) -> String {
        super::entry::hex(&feed(key, stream, json).finalize().into_bytes())
    }

    /// Whether `mac` (hex) is the MAC of `json` on `stream`, compared in constant time.
    pub(super) fn authentic(key: &Hmac<Sha256>, stream: &str, json: &[u8], mac: &[u8]) -> bool {
        let mut tag = [0; 32];
        super::entry::unhex(mac, &mut tag).is_some()
            && feed(key, stream, json).verify_slice(&tag).is_ok()
    }

    /// What the message `json` holds revokes, unless `node` made it itself: a reader skips
    /// those without building them. `Err` for one that is not a revocation.
    pub(super) fn read(json: &[u8], node: &str) -> Result<Option<Told>, serde_json::Error> {
        let wire: Wire<'_> = serde_json::from_slice(json)?;
        if wire.node == node {
            return Ok(None);
        }
        let endpoint = || wire.endpoint.as_deref().map(str::to_owned);
        let missing = || serde::de::Error::custom(format!("an incomplete {:?} message", wire.op));
        let made_at_ms = wire.at.ok_or_else(missing)?;
        let what = match &*wire.op {
            "token" => Revoked::Token {
                endpoint: endpoint().ok_or_else(missing)?,
                digest: wire.digest.as_deref().ok_or_else(missing)?.to_owned(),
            },
            "user" => Revoked::User {
                endpoint: endpoint().ok_or_else(missing)?,
                user_id: wire.user_id.ok_or_else(missing)?,
            },
            "session" => Revoked::Session {
                endpoint: endpoint().ok_or_else(missing)?,
                user_id: wire.user_id.ok_or_else(missing)?,
                session: wire.session.as_deref().ok_or_else(missing)?.to_owned(),
            },
            "all" => Revoked::All {
                generation: wire.generation.ok_or_else(missing)?,
            },
            op => return Err(serde::de::Error::custom(format!("no op {op:?}"))),
        };
        let decided_at_ms = wire.decided.map_or(made_at_ms, |d| d.min(made_at_ms));
        Ok(Some(Told {
            what,
            made_at_ms,
            decided_at_ms,
        }))
    }
}

/// The stream's key fed with the domain of a message: the stream's name, then the message.
fn feed(key: &Hmac<Sha256>, stream: &str, json: &[u8]) -> Hmac<Sha256> {
    let mut mac = key.clone();
    mac.update(stream.as_bytes());
    mac.update(&[0]);
    mac.update(json);
    mac
}

/// A [`Message`] as read: every field any `op` has, borrowed where the JSON has no escapes.
/// Read flat rather than through `#[serde(flatten)]`, which buffers the whole object first:
/// every node reads every revocation.
#[derive(serde::Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    node: Cow<'a, str>,
    at: Option<u64>,
    decided: Option<u64>,
    #[serde(borrow)]
    op: Cow<'a, str>,
    #[serde(borrow)]
    endpoint: Option<Cow<'a, str>>,
    #[serde(borrow)]
    digest: Option<Cow<'a, str>>,
    user_id: Option<i64>,
    #[serde(borrow)]
    session: Option<Cow<'a, str>>,
    generation: Option<u64>,
}

/// What a [`Message`] revokes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Revoked {
    /// One token at one endpoint, named by its digest (never the token).
    Token { endpoint: String, digest: String },
    /// Every token of one user at one endpoint.
    User { endpoint: String, user_id: i64 },
    /// Every token of one of the integrator's sessions of one user at one endpoint.
    Session {
        endpoint: String,
        user_id: i64,
        session: String,
    },
    /// Everything: the tier moved to `generation` (0 until it has).
    All { generation: u64 },
}

impl Revoked {
    /// The endpoint it names, as written; `None` for everything.
    pub(super) fn endpoint(&self) -> Option<&str> {
        match self {
            Revoked::Token { endpoint, .. }
            | Revoked::User { endpoint, .. }
            | Revoked::Session { endpoint, .. } => Some(endpoint),
            Revoked::All { .. } => None,
        }
    }

    /// Applies another node's revocation to this node's local tier: drops what it names and
    /// remembers it for look-ups in flight. What to tell the local subscribers, which the
    /// reader does once it has applied a whole read (see [`Local::tell`]); `None` for a
    /// revocation naming nothing usable. `at` is [`endpoint`](Self::endpoint) parsed (the
    /// reader keeps the few it sees parsed).
    pub(super) fn apply(self, at: Option<&Endpoint>, local: &Local) -> Option<Revocation> {
        let scope = match &self {
            Revoked::Token { .. } => Scope::Token,
            Revoked::User { .. } => Scope::User,
            Revoked::Session { .. } => Scope::Session,
            Revoked::All { .. } => Scope::All,
        };
        telemetry::count_invalidation(scope, "remote");
        if self.endpoint().is_some() && at.is_none() {
            tracing::warn!("ignoring a revocation naming no usable endpoint");
            return None;
        }
        match (self, at) {
            (Revoked::Token { endpoint, digest }, Some(at)) => {
                let Some(fingerprint) = fingerprint_of(&digest) else {
                    tracing::warn!("ignoring a revocation naming no usable token");
                    return None;
                };
                local.drop_named(Target::Fingerprint {
                    endpoint: at,
                    fingerprint,
                });
                let token = TokenFingerprint::from_digest(digest);
                Some(Revocation::Token { endpoint, token })
            }
            (Revoked::User { endpoint, user_id }, Some(at)) => {
                local.drop_named(Target::User {
                    endpoint: at,
                    user: user_id,
                });
                Some(Revocation::User { endpoint, user_id })
            }
            (
                Revoked::Session {
                    endpoint,
                    user_id,
                    session,
                },
                Some(at),
            ) => {
                local.drop_named(Target::Session {
                    endpoint: at,
                    user: user_id,
                    session: &session,
                });
                Some(Revocation::Session {
                    endpoint,
                    user_id,
                    session,
                })
            }
            _ => {
                local.drop_all();
                Some(Revocation::All)
            }
        }
    }
}

impl Told {
    /// What it revokes.
    pub(super) fn what(&self) -> &Revoked {
        &self.what
    }

    /// Applies it to this node's local tier: see [`Revoked::apply`].
    pub(super) fn apply(
        self,
        at: Option<&Endpoint>,
        local: &Local,
        now_ms: u64,
    ) -> Option<Revocation> {
        let late_ms = now_ms.saturating_sub(self.made_at_ms);
        tracing::trace!(late_ms, "applying another node's revocation");
        metrics::histogram!(telemetry::REVOCATION_DELAY_SECONDS)
            .record(std::time::Duration::from_millis(late_ms));
        self.what.apply(at, local)
    }
}

impl SharedCache {
    /// Tombstones one token and deletes its entry, then tells every node; in the background.
    pub(crate) fn delete(&self, endpoint: &str, token: &str, decided: u64) -> Ack {
        let digest = self.digest(endpoint, token);
        let endpoint = endpoint.to_owned();
        self.revoke("invalidate", Revoked::Token { endpoint, digest }, decided)
    }

    /// Tombstones a user and deletes every entry its index names, then tells every node; in
    /// the background.
    pub(crate) fn delete_user(&self, endpoint: &str, user_id: i64, decided: u64) -> Ack {
        let endpoint = endpoint.to_owned();
        self.revoke(
            "invalidate_user",
            Revoked::User { endpoint, user_id },
            decided,
        )
    }

    /// Tombstones one of a user's sessions and deletes the user's entries of that session
    /// (and those whose write is still under way), then tells every node; in the background.
    pub(crate) fn delete_session(
        &self,
        endpoint: &str,
        user_id: i64,
        session: &str,
        decided: u64,
    ) -> Ack {
        let what = Revoked::Session {
            endpoint: endpoint.to_owned(),
            user_id,
            session: session.to_owned(),
        };
        self.revoke("invalidate_session", what, decided)
    }

    /// Moves the tier to a new generation, then tells every node; in the background.
    pub(crate) fn delete_all(&self, decided: u64) -> Ack {
        self.delete_all_folding(Arc::new(AtomicU64::new(decided)))
    }

    /// [`delete_all`](Self::delete_all) dated with what `decided` holds when the message is
    /// told (unix ms): the outbox folds later revocations into it by raising it, and one
    /// raised after it was told is told again.
    pub(crate) fn delete_all_folding(&self, decided: Arc<AtomicU64>) -> Ack {
        self.revoke_dated("invalidate_all", Revoked::All { generation: 0 }, decided)
    }

    /// Revokes `what` in Redis, then tells every node; in the background, insisting (that task
    /// is the revocation's place in the outbox). The message carries the time it is made now,
    /// and `decided`, when it was decided (unix ms). The [`Ack`] turns `true` once both are
    /// done.
    fn revoke(&self, op: &'static str, what: Revoked, decided: u64) -> Ack {
        self.revoke_dated(op, what, Arc::new(AtomicU64::new(decided)))
    }

    /// [`revoke`](Self::revoke), dated with what `decided` holds as the message is told.
    fn revoke_dated(&self, op: &'static str, what: Revoked, decided: Arc<AtomicU64>) -> Ack {
        let core = self.core.clone();
        let at = core.now_ms();
        let (done, ack) = tokio::sync::watch::channel(false);
        let done = std::sync::Arc::new(done);
        self.spawn(op, true, self.op_timeout, move |mut conn| {
            let (core, what, done) = (core.clone(), what.clone(), done.clone());
            let decided = decided.clone();
            async move {
                let what = core.revoke(&mut conn, what).await?;
                loop {
                    let sent = decided.load(AtomicOrdering::SeqCst);
                    core.tell(&mut conn, what.clone(), at, sent).await?;
                    done.send_replace(true);
                    // Raised meanwhile (a revocation folded into this one): told again with
                    // its date, so that it closes what that one named.
                    if decided.load(AtomicOrdering::SeqCst) == sent {
                        return Ok(());
                    }
                }
            }
        });
        ack
    }
}

impl Core {
    /// Revokes `what` in Redis: tombstones and deletes at the current generation (read first if
    /// this node has not yet), or moves to the next one. What to tell the other nodes.
    async fn revoke(&self, conn: &mut Conn, what: Revoked) -> RedisResult<Revoked> {
        if let Revoked::All { .. } = what {
            // Past the generation this node knows too: a Redis that lost an `INCR` (a
            // failover) must not make this one a step that nodes already took.
            let known = self.generation().unwrap_or(0);
            let generation = (self.scripts)
                .next_generation(conn, &self.keys.generation(), known)
                .await?;
            self.advance(generation);
            return Ok(Revoked::All { generation });
        }
        // Read from Redis, not only remembered: a node whose reader lost the stream may not
        // know another node's `invalidate_all`, and tombstones at its older generation would
        // not stop entries written at the current one.
        let stored: Option<u64> = redis::cmd("GET")
            .arg(self.keys.generation())
            .query_async(conn)
            .await?;
        let generation = stored.unwrap_or(0).max(self.generation().unwrap_or(0));
        self.advance(generation);
        let ttl = self.tombstone_ms();
        let doomed = match &what {
            Revoked::Token { digest, .. } => vec![digest.clone()],
            Revoked::User { endpoint, user_id } => {
                let keys = self.user_index_keys(generation, endpoint, *user_id, None);
                self.scripts.revoke_user(conn, &keys, ttl).await?
            }
            Revoked::Session {
                endpoint,
                user_id,
                session,
            } => {
                let keys = self.user_index_keys(generation, endpoint, *user_id, Some(session));
                let tombstone = keys.session.as_deref().unwrap_or_default();
                let digests = (self.scripts)
                    .revoke_session(conn, &keys.index, tombstone, ttl)
                    .await?;
                self.of_session(conn, generation, digests, session).await?
            }
            Revoked::All { .. } => unreachable!("moved to the next generation above"),
        };
        for digest in &doomed {
            let key = self.keys.token(generation, digest);
            let tombstone = self.keys.token_tombstone(generation, digest);
            self.scripts
                .revoke_token(conn, &key, &tombstone, ttl)
                .await?;
        }
        Ok(what)
    }

    /// The names of a user's index and tombstones, with `session`'s tombstone when given.
    pub(super) fn user_index_keys(
        &self,
        generation: u64,
        endpoint: &str,
        user: i64,
        session: Option<&str>,
    ) -> UserKeys {
        let by_user = user_digest(&self.mac, endpoint, user);
        UserKeys {
            index: self.keys.user_index(generation, &by_user),
            tombstone: self.keys.user_tombstone(generation, &by_user),
            session: session.map(|session| {
                let by_session = session_digest(&self.mac, endpoint, session);
                self.keys
                    .session_tombstone(generation, &by_user, &by_session)
            }),
        }
    }

    /// Of `digests` (a user's tokens), those of `session`, and those without an entry yet (a
    /// write under way, which may be the session's).
    async fn of_session(
        &self,
        conn: &mut Conn,
        generation: u64,
        digests: Vec<String>,
        session: &str,
    ) -> RedisResult<Vec<String>> {
        let mut doomed = Vec::new();
        for digest in digests {
            let key = self.keys.token(generation, &digest);
            let value: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(conn).await?;
            // Opened as at time 0, whatever its expiry: only the session matters here.
            let of_session = value.is_none_or(|value| {
                SharedEntry::open(&self.mac, &key, &value, 0).is_ok_and(
                    |(e, _)| matches!(e, SharedEntry::User(u) if u.session() == Some(session)),
                )
            });
            if of_session {
                doomed.push(digest);
            }
        }
        Ok(doomed)
    }

    /// Tells every node `what`, made at `at` (unix ms), on the stream, which keeps the last
    /// `stream_len` revocations: the message, its MAC, and the id of the entry before it.
    async fn tell(&self, conn: &mut Conn, what: Revoked, at: u64, decided: u64) -> RedisResult<()> {
        let message = Message {
            node: self.node_id(),
            at,
            decided: (decided < at).then_some(decided),
            what,
        };
        let payload = serde_json::to_string(&message).unwrap_or_default();
        let stream = self.keys.stream();
        let mac = Message::mac(&self.stream_mac, &stream, payload.as_bytes());
        (self.scripts)
            .tell(conn, &stream, self.stream_len, &payload, &mac)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Revoked> {
        let endpoint = "https://a.example/api/user".to_owned();
        vec![
            Revoked::Token {
                endpoint: endpoint.clone(),
                digest: "00ff".repeat(16),
            },
            Revoked::User {
                endpoint: endpoint.clone(),
                user_id: -7,
            },
            Revoked::Session {
                endpoint,
                user_id: 7,
                session: "s\"1\\é".to_owned(),
            },
            Revoked::All { generation: 3 },
        ]
    }

    #[test]
    fn every_kind_of_message_reads_back_as_written_and_a_nodes_own_are_skipped() {
        for what in every_kind() {
            let message = Message {
                node: "00000000000000aa".to_owned(),
                at: 1_764_000_000_123,
                decided: Some(1_764_000_000_000),
                what,
            };
            let json = serde_json::to_vec(&message).unwrap();
            let read = Message::read(&json, "00000000000000bb").unwrap().unwrap();
            assert_eq!(read.what(), &message.what);
            assert_eq!(read.made_at_ms, 1_764_000_000_123);
            assert_eq!(read.decided_at_ms, 1_764_000_000_000);
            assert_eq!(Message::read(&json, "00000000000000aa").unwrap(), None);
        }
    }

    #[test]
    fn messages_missing_their_fields_or_of_unknown_ops_are_errors_and_extra_fields_are_not() {
        for json in [
            r#"{"node":"a","op":"user","endpoint":"e","user_id":1}"#,
            r#"{"node":"a","at":1,"op":"token","endpoint":"e"}"#,
            r#"{"node":"a","at":1,"op":"user","endpoint":"e"}"#,
            r#"{"node":"a","at":1,"op":"session","endpoint":"e","user_id":1}"#,
            r#"{"node":"a","at":1,"op":"all"}"#,
            r#"{"node":"a","at":1,"op":"everything","generation":1}"#,
            r#"{"at":1,"op":"all","generation":1}"#,
            r#"["node","a"]"#,
        ] {
            assert!(Message::read(json.as_bytes(), "b").is_err(), "{json}");
        }
        let newer = r#"{"node":"a","at":1,"op":"user","endpoint":"e","user_id":1,"reason":"ban"}"#;
        let read = Message::read(newer.as_bytes(), "b").unwrap().unwrap();
        assert!(matches!(read.what(), Revoked::User { user_id: 1, .. }));
    }

    #[test]
    fn any_bytes_and_any_change_to_a_message_read_to_an_error_or_fail_its_mac_never_a_panic() {
        let key = stream_mac(b"0123456789abcdef");
        let json =
            br#"{"node":"a","at":1,"op":"session","endpoint":"e","user_id":1,"session":"s"}"#;
        let mac = Message::mac(&key, "p:revocations", json);
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..5_000 {
            let mut changed = json.to_vec();
            let at = rng.usize(..changed.len());
            match rng.u8(..3) {
                0 => changed[at] ^= 1 << rng.u8(..8),
                1 => changed.truncate(at),
                _ => changed.insert(at, rng.u8(..)),
            }
            let _ = Message::read(&changed, "b");
            assert!(!Message::authentic(
                &key,
                "p:revocations",
                &changed,
                mac.as_bytes()
            ));
            let len = rng.usize(..200);
            let random: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
            let _ = Message::read(&random, "b");
            assert!(!Message::authentic(&key, "p:revocations", json, &random));
        }
    }

    #[test]
    fn a_message_is_authentic_only_under_its_streams_key_for_its_stream_and_bytes() {
        let key = stream_mac(b"0123456789abcdef");
        let json = br#"{"node":"a","at":1,"op":"all","generation":2}"#;
        let mac = Message::mac(&key, "p:revocations", json);
        assert_eq!(mac.len(), 64);
        assert!(Message::authentic(
            &key,
            "p:revocations",
            json,
            mac.as_bytes()
        ));
        let other = stream_mac(b"fedcba9876543210");
        assert!(!Message::authentic(
            &other,
            "p:revocations",
            json,
            mac.as_bytes()
        ));
        assert!(!Message::authentic(
            &key,
            "q:revocations",
            json,
            mac.as_bytes()
        ));
        let altered = br#"{"node":"a","at":1,"op":"all","generation":3}"#;
        assert!(!Message::authentic(
            &key,
            "p:revocations",
            altered,
            mac.as_bytes()
        ));
        for bad in [
            &b""[..],
            b"00",
            &mac.as_bytes()[..63],
            mac.to_uppercase().as_bytes(),
        ] {
            assert!(!Message::authentic(&key, "p:revocations", json, bad));
        }
        // Not the value seal's key: the secret itself, used raw, gives another MAC.
        let raw = Hmac::<Sha256>::new_from_slice(b"0123456789abcdef").unwrap();
        assert_ne!(Message::mac(&raw, "p:revocations", json), mac);
    }
}
