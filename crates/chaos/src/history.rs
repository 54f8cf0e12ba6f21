//! The history of a chaos run: what happened, where and when, one [`Event`] per JSON line.
//!
//! It owns the event types, their line format ([`write_history`], [`Event::write_to`]) and the
//! strict reader ([`read_history`]). It does not judge anything: the checker does.
//!
//! A line is one JSON object: `t_us` (microseconds since the run's start), `process` (where it
//! happened or whom it asked: `node-1`, `node-2`, `sidecar`, `api`, `redis`, `relay-...`), and
//! `kind` with the fields of that kind:
//!
//! ```text
//! {"t_us":1500,"process":"api","kind":"op","op":"login","start_us":900,"outcome":"ok","token":"t1","user":7}
//! {"t_us":2100,"process":"node-1","kind":"op","op":"connect","start_us":1600,"outcome":"ok","token":"t1","session":"s1"}
//! {"t_us":9000,"process":"api","kind":"op","op":"ban","start_us":8700,"outcome":"ok","user":7}
//! {"t_us":9300,"process":"node-1","kind":"session","session":"s1","event":"kicked","reason":"token_rejected"}
//! {"t_us":9900,"process":"redis","kind":"fault_begin","fault":"f1","what":"redis_killed"}
//! {"t_us":12000,"process":"redis","kind":"fault_end","fault":"f1"}
//! ```
//!
//! **Never a token.** A token is named by the opaque id the run gave it ([`TokenId`], `t17`);
//! the real tokens stay in the run's memory and reach only the leak check.

use std::collections::HashSet;
use std::io::{BufRead, Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest line [`read_history`] reads: a longer one is refused, with its line number.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// A token by the opaque id the run gave it (`t17`), never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TokenId(pub String);

impl TokenId {
    /// The id as written in the history.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for TokenId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Microseconds since the run's start, by the run's clock: when the run saw it happen (an
    /// operation's answer, a session's message, a fault made or healed).
    pub t_us: u64,
    /// Where it happened, or which process the operation asked: `node-1`, `sidecar`, `api`...
    pub process: String,
    /// What happened.
    pub kind: Kind,
}

/// What an [`Event`] records; `kind` in the line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// An operation the run made, and its outcome.
    Op(Op),
    /// A token's `exp` passed (by the run's clock): a revocation of that token at `t_us`.
    Expiry(Expiry),
    /// Something a client saw on one of its sessions (or on all of them, for `resync`).
    Session(SessionEvent),
    /// A fault the run made begins.
    FaultBegin(FaultBegin),
    /// A fault the run made is healed (Redis restarted, link healed, process restarted...).
    FaultEnd(FaultEnd),
}

/// An operation and its outcome: the event's `t_us` is its answer, `start_us` its start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Op {
    /// Which operation.
    pub op: OpKind,
    /// When the run began it (microseconds since the run's start); at most the event's `t_us`.
    pub start_us: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The error code or HTTP status that came back when it was not `ok` (`token_rejected`,
    /// `503`, `timeout`...), for the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The token used (connect, join, refresh, resolve, authorize), issued (login) or logged
    /// out (logout); a revoke of one token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenId>,
    /// The user logged in (login), banned or unbanned; a revoke of one user; the user an
    /// admission answered, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<i64>,
    /// The client's session: a game connection, or the sidecar session a resolve names. The
    /// run makes its ids unique within the run (`g17`, `c17`), whatever process holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The integrator's login session (its `sid`), on login and logout, and a revoke of one
    /// session of `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sid: Option<String>,
    /// The authUrl of a join (`""`: the default), a resolve or an authorize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_url: Option<String>,
    /// A revoke of everything (`{"all": true}` at the admin endpoint).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

impl Op {
    /// An operation with no names yet: set the fields it needs.
    #[must_use]
    pub fn new(op: OpKind, start_us: u64, outcome: Outcome) -> Self {
        Self {
            op,
            start_us,
            outcome,
            code: None,
            token: None,
            user: None,
            session: None,
            sid: None,
            auth_url: None,
            all: false,
        }
    }

    /// Whether this is an admission: a connect, join, refresh, resolve or authorize that
    /// answered `ok`.
    #[must_use]
    pub fn is_admission(&self) -> bool {
        self.outcome == Outcome::Ok && self.op.admits()
    }
}

/// The operations a run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A player logs in and takes an access token (`token`, for `user`, in login session `sid`).
    Login,
    /// A game connection's `connect` (`token`, `session`).
    Connect,
    /// A room join on a game connection (`token`, `session`, `auth_url`).
    Join,
    /// A session's `refresh` with a new token (`token`, `session`).
    Refresh,
    /// The sidecar's `POST /v1/resolve` (`token`, optional `session`, `auth_url`).
    Resolve,
    /// The sidecar's `/v1/authorize` (`token`, optional `auth_url`).
    Authorize,
    /// The integrator's logout: of `token`; or, without one, of every token of login
    /// session `sid`.
    Logout,
    /// The integrator bans `user`: all their tokens.
    Ban,
    /// The integrator unbans `user`: new logins work again.
    Unban,
    /// `POST /admin/revoke` on the event's process (`token`, `user`, `user` + `sid`, or `all`),
    /// made after the integrator revoked the same at its side.
    Revoke,
}

impl OpKind {
    /// Whether an `ok` answer to this operation lets a player in.
    #[must_use]
    pub fn admits(self) -> bool {
        matches!(
            self,
            Self::Connect | Self::Join | Self::Refresh | Self::Resolve | Self::Authorize
        )
    }

    /// Whether this operation revokes something (logout, ban, revoke).
    #[must_use]
    pub fn revokes(self) -> bool {
        matches!(self, Self::Logout | Self::Ban | Self::Revoke)
    }

    fn name(self) -> &'static str {
        match self {
            Self::Login => "login",
            Self::Connect => "connect",
            Self::Join => "join",
            Self::Refresh => "refresh",
            Self::Resolve => "resolve",
            Self::Authorize => "authorize",
            Self::Logout => "logout",
            Self::Ban => "ban",
            Self::Unban => "unban",
            Self::Revoke => "revoke",
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Success: a 200, `connected`, `joined`, `refreshed`; for a revocation, its
    /// acknowledgement.
    Ok,
    /// A definite no: 401, 403, `token_rejected`, `refresh_mismatch`, `banned`.
    Refused,
    /// No verdict: a 5xx, a timeout, a retryable code, the connection lost, a revocation
    /// answered `pending`. It may or may not have taken effect.
    Failed,
}

/// A token's `exp` passed. The event's `t_us` is the `exp` on the run's clock, its process the
/// integrator that issued the token (`api`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expiry {
    /// The token that expired.
    pub token: TokenId,
}

/// What a client saw on a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEvent {
    /// The session; absent only for a `resync`, which then tells every session of the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// What it saw.
    pub event: SessionEventKind,
    /// The reason or code the message carried (`token_rejected`, `session_expired`,
    /// `shutdown`, `connection_lost`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The session events a client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEventKind {
    /// The server closed the session because it was revoked (`revoked` on the game protocol
    /// or the sidecar's events).
    Kicked,
    /// The session ended for another reason the server or the network gave (`reason` says).
    Closed,
    /// Told to resolve again (`resync`): the server could not show it missed nothing.
    Resync,
    /// Told the token expired (`reauth_required`): refresh within the grace.
    ReauthRequired,
    /// The client itself ended the session (closed the connection, `DELETE /v1/sessions`).
    Left,
}

/// The faults a run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Redis killed (healed: restarted).
    RedisKilled,
    /// A link (a relay the run controls) frozen half-open (healed: thawed).
    LinkFrozen,
    /// A link refusing connections (healed: accepting again).
    LinkRefused,
    /// A node or the sidecar killed (healed: restarted).
    ProcessKilled,
    /// The integrator answers slowly (`detail`: how slow).
    IntegratorSlow,
    /// The integrator answers 5xx.
    #[serde(rename = "integrator_5xx")]
    Integrator5xx,
    /// The integrator does not answer in time.
    IntegratorTimeout,
    /// A process's clock offset (`detail`: by how much).
    ClockOffset,
}

impl FaultKind {
    /// Whether this fault can cut a process off the revocations (the Redis stream, the
    /// notifications, the sidecar's event stream): after it, sessions are re-checked.
    #[must_use]
    pub fn loses_channel(self) -> bool {
        matches!(
            self,
            Self::RedisKilled | Self::LinkFrozen | Self::LinkRefused | Self::ProcessKilled
        )
    }

    /// Whether the fault concerns only its own process when `affects` is empty (a kill, a
    /// clock offset), rather than every process (Redis, links, the integrator).
    #[must_use]
    pub fn is_local(self) -> bool {
        matches!(self, Self::ProcessKilled | Self::ClockOffset)
    }
}

/// A fault begins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultBegin {
    /// The run's id for this fault (`f3`), which its `fault_end` names.
    pub fault: String,
    /// What the fault is; the event's process is what it strikes (`redis`, `relay-node-1-redis`).
    pub what: FaultKind,
    /// The processes whose revocations it may delay. Empty: the fault's own process for a
    /// kill or a clock offset, every process otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affects: Vec<String>,
    /// A free note for the report (`"+2s"`, `"800ms"`); never a token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A fault heals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultEnd {
    /// The id its `fault_begin` gave.
    pub fault: String,
}

/// Why a history could not be read. Messages name the line, never more of it than serde's
/// own message quotes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// Reading failed (the file is missing, unreadable...).
    #[error("reading the history: {0}")]
    Io(#[from] std::io::Error),
    /// A line is longer than [`MAX_LINE_BYTES`]: not a history this crate wrote.
    #[error("line {line}: longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong {
        /// 1-based line number.
        line: usize,
    },
    /// A line's `kind` is not one this version knows.
    #[error("line {line}: unknown kind `{kind}`")]
    UnknownKind {
        /// 1-based line number.
        line: usize,
        /// The kind it named (cut to 64 characters).
        kind: String,
    },
    /// A line is not a valid event: not UTF-8, not JSON, a field missing, unknown or of the
    /// wrong type, or a field its operation needs is absent.
    #[error("line {line}: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl HistoryError {
    /// The 1-based line at fault, when there is one.
    #[must_use]
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Io(_) => None,
            Self::LineTooLong { line }
            | Self::UnknownKind { line, .. }
            | Self::Malformed { line, .. } => Some(*line),
        }
    }
}

const KINDS: [&str; 5] = ["op", "expiry", "session", "fault_begin", "fault_end"];

impl Event {
    /// Writes the event as one line (`{"t_us":…,"process":…,"kind":…}` and a newline).
    ///
    /// # Errors
    ///
    /// The writer's error.
    pub fn write_to(&self, mut out: impl Write) -> std::io::Result<()> {
        let kind = serde_json::to_string(&self.kind).map_err(std::io::Error::other)?;
        let process = serde_json::to_string(&self.process).map_err(std::io::Error::other)?;
        // `kind` is an object that starts with `{"kind":`: the two fields go before it.
        writeln!(
            out,
            "{{\"t_us\":{},\"process\":{},{}",
            self.t_us,
            process,
            &kind[1..]
        )
    }

    /// The event as its line, without the newline.
    #[must_use]
    pub fn to_line(&self) -> String {
        let mut line = Vec::new();
        self.write_to(&mut line).expect("writing to memory");
        line.pop();
        String::from_utf8(line).expect("serde_json writes UTF-8")
    }

    /// Reads one line (without its newline); `line` is its number, for the error.
    ///
    /// # Errors
    ///
    /// [`HistoryError::UnknownKind`] or [`HistoryError::Malformed`].
    pub fn from_line(bytes: &[u8], line: usize) -> Result<Self, HistoryError> {
        let malformed = |message: String| HistoryError::Malformed { line, message };
        let text = std::str::from_utf8(bytes).map_err(|_| malformed("not UTF-8".into()))?;
        let mut map: Map<String, Value> =
            serde_json::from_str(text).map_err(|e| malformed(format!("not a JSON object: {e}")))?;
        let t_us = match map.remove("t_us") {
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| malformed("`t_us` is not a u64".into()))?,
            Some(_) => return Err(malformed("`t_us` is not a u64".into())),
            None => return Err(malformed("missing field `t_us`".into())),
        };
        let process = match map.remove("process") {
            Some(Value::String(p)) if !p.is_empty() => p,
            Some(_) => return Err(malformed("`process` is not a non-empty string".into())),
            None => return Err(malformed("missing field `process`".into())),
        };
        match map.get("kind") {
            Some(Value::String(kind)) if KINDS.contains(&kind.as_str()) => {}
            Some(Value::String(kind)) => {
                return Err(HistoryError::UnknownKind {
                    line,
                    kind: kind.chars().take(64).collect(),
                })
            }
            Some(_) => return Err(malformed("`kind` is not a string".into())),
            None => return Err(malformed("missing field `kind`".into())),
        }
        let kind = Kind::deserialize(Value::Object(map)).map_err(|e| malformed(e.to_string()))?;
        let event = Self {
            t_us,
            process,
            kind,
        };
        event.validate().map_err(malformed)?;
        Ok(event)
    }

    /// The rules serde cannot say: what each operation must name, times in order.
    fn validate(&self) -> Result<(), String> {
        let Kind::Op(op) = &self.kind else {
            if let Kind::Session(s) = &self.kind {
                if s.session.is_none() && s.event != SessionEventKind::Resync {
                    return Err(
                        "a session event other than `resync` must name its `session`".into(),
                    );
                }
            }
            return Ok(());
        };
        if op.start_us > self.t_us {
            return Err(format!(
                "`start_us` {} is after the answer's `t_us` {}",
                op.start_us, self.t_us
            ));
        }
        let name = op.op.name();
        let need = |what: &str, present: bool| {
            if present {
                Ok(())
            } else {
                Err(format!("a `{name}` must name its `{what}`"))
            }
        };
        match op.op {
            OpKind::Login => {
                need("user", op.user.is_some())?;
                need("token", op.token.is_some() || op.outcome != Outcome::Ok)
            }
            OpKind::Connect | OpKind::Refresh => {
                need("token", op.token.is_some())?;
                need("session", op.session.is_some())
            }
            OpKind::Join => {
                need("token", op.token.is_some())?;
                need("session", op.session.is_some())?;
                need("auth_url", op.auth_url.is_some())
            }
            OpKind::Resolve | OpKind::Authorize => need("token", op.token.is_some()),
            OpKind::Logout => need("token", op.token.is_some() || op.sid.is_some()),
            OpKind::Ban | OpKind::Unban => need("user", op.user.is_some()),
            OpKind::Revoke => {
                let named = [op.token.is_some(), op.user.is_some(), op.all]
                    .iter()
                    .filter(|n| **n)
                    .count();
                if named != 1 {
                    return Err("a `revoke` names exactly one of `token`, `user` (with `sid`: one session) or `all`".into());
                }
                need("user", op.sid.is_none() || op.user.is_some())
            }
        }
    }
}

/// Reads a whole history, strictly: every line one valid event, at most [`MAX_LINE_BYTES`]
/// long, every `fault_end` after its `fault_begin`, no fault id begun twice.
///
/// # Errors
///
/// The first bad line, by its 1-based number ([`HistoryError::line`]); or the reader's error.
pub fn read_history(mut reader: impl BufRead) -> Result<Vec<Event>, HistoryError> {
    let mut events = Vec::new();
    let mut buf = Vec::new();
    let mut begun = HashSet::new();
    let mut ended = HashSet::new();
    for line in 1.. {
        buf.clear();
        let limit = u64::try_from(MAX_LINE_BYTES + 1).unwrap_or(u64::MAX);
        let read = Read::take(&mut reader, limit).read_until(b'\n', &mut buf)?;
        if read == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        } else if buf.len() > MAX_LINE_BYTES {
            return Err(HistoryError::LineTooLong { line });
        }
        if buf.len() > MAX_LINE_BYTES {
            return Err(HistoryError::LineTooLong { line });
        }
        let event = Event::from_line(&buf, line)?;
        let malformed = |message: String| HistoryError::Malformed { line, message };
        match &event.kind {
            Kind::FaultBegin(f) if !begun.insert(f.fault.clone()) => {
                return Err(malformed(format!("fault `{}` begun twice", f.fault)));
            }
            Kind::FaultEnd(f) if !begun.contains(&f.fault) => {
                return Err(malformed(format!(
                    "fault `{}` ends before it began",
                    f.fault
                )));
            }
            Kind::FaultEnd(f) if !ended.insert(f.fault.clone()) => {
                return Err(malformed(format!("fault `{}` ended twice", f.fault)));
            }
            _ => {}
        }
        events.push(event);
    }
    Ok(events)
}

/// Writes a whole history, one line per event.
///
/// # Errors
///
/// The writer's error.
pub fn write_history(mut out: impl Write, events: &[Event]) -> std::io::Result<()> {
    for event in events {
        event.write_to(&mut out)?;
    }
    out.flush()
}
