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

use redis::RedisResult;

use super::conn::Conn;
use super::entry::{fingerprint_of, session_digest, user_digest, SharedEntry};
use super::scripts::UserKeys;
use super::{Core, SharedCache};
use crate::auth_url::Endpoint;
use crate::cache::local::{Local, Target};
use crate::cache::{Revocation, TokenFingerprint};
use crate::telemetry::{self, Scope};

/// A revocation as the stream carries it, for every node to apply locally: a JSON object,
/// `{"node": .., "op": .., ...}` with the fields of its `op` (see [`Revoked`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(super) struct Message {
    /// The node that made it, in hex: its own reader skips it.
    pub(super) node: String,
    /// What it revokes.
    #[serde(flatten)]
    pub(super) what: Revoked,
}

impl Message {
    /// What the message `json` holds revokes, unless `node` made it itself: a reader skips
    /// those without building them. `Err` for one that is not a revocation.
    pub(super) fn read(json: &[u8], node: &str) -> Result<Option<Revoked>, serde_json::Error> {
        let wire: Wire<'_> = serde_json::from_slice(json)?;
        if wire.node == node {
            return Ok(None);
        }
        let endpoint = || wire.endpoint.as_deref().map(str::to_owned);
        let missing = || serde::de::Error::custom(format!("an incomplete {:?} message", wire.op));
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
        Ok(Some(what))
    }
}

/// A [`Message`] as read: every field any `op` has, borrowed where the JSON has no escapes.
/// Read flat rather than through `#[serde(flatten)]`, which buffers the whole object first:
/// every node reads every revocation.
#[derive(serde::Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    node: Cow<'a, str>,
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

impl SharedCache {
    /// Tombstones one token and deletes its entry, then tells every node; in the background.
    pub(crate) fn delete(&self, endpoint: &str, token: &str) {
        let digest = self.digest(endpoint, token);
        let endpoint = endpoint.to_owned();
        self.revoke("invalidate", Revoked::Token { endpoint, digest });
    }

    /// Tombstones a user and deletes every entry its index names, then tells every node; in
    /// the background.
    pub(crate) fn delete_user(&self, endpoint: &str, user_id: i64) {
        let endpoint = endpoint.to_owned();
        self.revoke("invalidate_user", Revoked::User { endpoint, user_id });
    }

    /// Tombstones one of a user's sessions and deletes the user's entries of that session
    /// (and those whose write is still under way), then tells every node; in the background.
    pub(crate) fn delete_session(&self, endpoint: &str, user_id: i64, session: &str) {
        let what = Revoked::Session {
            endpoint: endpoint.to_owned(),
            user_id,
            session: session.to_owned(),
        };
        self.revoke("invalidate_session", what);
    }

    /// Moves the tier to a new generation, then tells every node; in the background.
    pub(crate) fn delete_all(&self) {
        self.revoke("invalidate_all", Revoked::All { generation: 0 });
    }

    /// Revokes `what` in Redis, then tells every node; in the background, insisting.
    fn revoke(&self, op: &'static str, what: Revoked) {
        let core = self.core.clone();
        self.spawn(op, true, self.op_timeout, move |mut conn| {
            let (core, what) = (core.clone(), what.clone());
            async move {
                let what = core.revoke(&mut conn, what).await?;
                core.tell(&mut conn, what).await
            }
        });
    }
}

impl Core {
    /// Revokes `what` in Redis: tombstones and deletes at the current generation (read first if
    /// this node has not yet), or moves to the next one. What to tell the other nodes.
    async fn revoke(&self, conn: &mut Conn, what: Revoked) -> RedisResult<Revoked> {
        if let Revoked::All { .. } = what {
            let generation: u64 = redis::cmd("INCR")
                .arg(self.keys.generation())
                .query_async(conn)
                .await?;
            self.generation
                .fetch_max(generation, std::sync::atomic::Ordering::AcqRel);
            return Ok(Revoked::All { generation });
        }
        let generation = match self.generation() {
            Some(generation) => generation,
            None => {
                let stored: Option<u64> = redis::cmd("GET")
                    .arg(self.keys.generation())
                    .query_async(conn)
                    .await?;
                let stored = stored.unwrap_or(0);
                let known = self.generation.compare_exchange(
                    super::UNKNOWN,
                    stored,
                    std::sync::atomic::Ordering::AcqRel,
                    std::sync::atomic::Ordering::Acquire,
                );
                // Ours, or what the reader or an `invalidate_all` stored meanwhile.
                known.map_or_else(|current| current, |_| stored)
            }
        };
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
            let of_session = value.is_none_or(|value| {
                SharedEntry::open(&self.mac, &key, &value).is_ok_and(
                    |e| matches!(e, SharedEntry::User(u) if u.session() == Some(session)),
                )
            });
            if of_session {
                doomed.push(digest);
            }
        }
        Ok(doomed)
    }

    /// Tells every node `what` on the stream, which keeps the last `stream_len` revocations.
    async fn tell(&self, conn: &mut Conn, what: Revoked) -> RedisResult<()> {
        let message = Message {
            node: self.node_id(),
            what,
        };
        let payload = serde_json::to_string(&message).unwrap_or_default();
        redis::cmd("XADD")
            .arg(self.keys.stream())
            .arg("MAXLEN")
            .arg("~")
            .arg(self.stream_len)
            .arg("*")
            .arg("m")
            .arg(payload)
            .query_async::<()>(conn)
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
                what,
            };
            let json = serde_json::to_vec(&message).unwrap();
            let read = Message::read(&json, "00000000000000bb").unwrap();
            assert_eq!(read.as_ref(), Some(&message.what));
            assert_eq!(Message::read(&json, "00000000000000aa").unwrap(), None);
        }
    }

    #[test]
    fn messages_missing_their_fields_or_of_unknown_ops_are_errors_and_extra_fields_are_not() {
        for json in [
            r#"{"node":"a","op":"token","endpoint":"e"}"#,
            r#"{"node":"a","op":"user","endpoint":"e"}"#,
            r#"{"node":"a","op":"session","endpoint":"e","user_id":1}"#,
            r#"{"node":"a","op":"all"}"#,
            r#"{"node":"a","op":"everything","generation":1}"#,
            r#"{"op":"all","generation":1}"#,
            r#"["node","a"]"#,
        ] {
            assert!(Message::read(json.as_bytes(), "b").is_err(), "{json}");
        }
        let newer = r#"{"node":"a","op":"user","endpoint":"e","user_id":1,"reason":"ban"}"#;
        let read = Message::read(newer.as_bytes(), "b").unwrap().unwrap();
        assert!(matches!(read, Revoked::User { user_id: 1, .. }));
    }
}
