//! What the checker reads out of a history before judging it: tokens and whose they are,
//! revocations (acknowledged or only attempted), unbans, fault windows, and sessions with the
//! tokens they held and what they were told. It owns that reading; [`crate::checker`] judges.

use std::collections::HashMap;

use crate::history::{Event, FaultKind, Kind, OpKind, Outcome, SessionEventKind, TokenId};

/// A token the run logged in for.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenInfo {
    /// Whose it is, from its login or the admissions that answered it.
    pub(crate) user: Option<i64>,
    /// The integrator's login session that issued it.
    pub(crate) sid: Option<String>,
    /// When its login began and was answered (0, 0 when the history has no login for it).
    pub(crate) login_start: u64,
    pub(crate) login_end: u64,
}

/// What a revocation names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    Token(TokenId),
    User(i64),
    Session { user: i64, sid: String },
    All,
}

/// A revocation: an operation that revokes (any outcome), or a token's expiry.
#[derive(Debug, Clone)]
pub(crate) struct Revocation {
    /// 1-based line of its event.
    pub(crate) line: usize,
    /// When it was begun (an expiry: its `exp`).
    pub(crate) start: u64,
    /// When it counts from: the acknowledgement's time, or an expiry's `exp` plus the skew.
    pub(crate) reference: u64,
    /// Its event's time.
    pub(crate) t_us: u64,
    /// The process that acknowledged it; `None` for an expiry, which each process sees itself.
    pub(crate) by: Option<String>,
    pub(crate) target: Target,
    /// Answered `ok` (or an expiry): the admission and session invariants apply.
    pub(crate) acknowledged: bool,
    /// What made it, for the report (`ban`, `logout`, `revoke`, `expiry`).
    pub(crate) what: &'static str,
}

/// A fault's window.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) id: String,
    pub(crate) what: FaultKind,
    pub(crate) process: String,
    pub(crate) affects: Vec<String>,
    pub(crate) begin: u64,
    pub(crate) begin_line: usize,
    /// When it healed, and the line saying so; `None` while it is open at the history's end.
    pub(crate) end: Option<(u64, usize)>,
}

impl Fault {
    /// Whether it may delay revocations reaching `process`.
    pub(crate) fn affects(&self, process: &str) -> bool {
        if self.affects.is_empty() {
            !self.what.is_local() || self.process == process
        } else {
            self.process == process || self.affects.iter().any(|p| p == process)
        }
    }
}

/// Something a session was told or did that answers a revocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Told {
    pub(crate) t_us: u64,
    pub(crate) line: usize,
    /// What it was; a `closed` whose reason is `revoked` or `token_rejected` is read as
    /// `kicked`.
    pub(crate) kind: SessionEventKind,
}

impl Told {
    /// Whether the session ended with it.
    pub(crate) fn ends(&self) -> bool {
        matches!(
            self.kind,
            SessionEventKind::Kicked | SessionEventKind::Closed | SessionEventKind::Left
        )
    }
}

/// A token a session held, from the admission that brought it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) token: TokenId,
    /// When that admission began and was answered, and its line.
    pub(crate) start: u64,
    pub(crate) t_us: u64,
    pub(crate) line: usize,
}

/// A client's session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) process: String,
    /// When the admission that opened it was answered, and its line.
    pub(crate) opened: u64,
    pub(crate) open_line: usize,
    /// The tokens it held, in order, each from the admission that brought it (the opening
    /// one, then a join or refresh with a new token).
    pub(crate) tokens: Vec<Held>,
    /// What it was told or did, in time order: kicked, closed, left, resync, reauth_required.
    pub(crate) told: Vec<Told>,
    /// When it ended (kicked, closed, left).
    pub(crate) ended: Option<u64>,
}

impl Session {
    /// How it came to hold `token`, and until when (`u64::MAX` while held) and by which line
    /// (the next token's admission, or the end), if it ever held it.
    pub(crate) fn held(&self, token: &TokenId) -> Option<(&Held, u64, Option<usize>)> {
        let at = self.tokens.iter().position(|h| &h.token == token)?;
        let until = match self.tokens.get(at + 1) {
            Some(next) => (next.t_us, Some(next.line)),
            None => match self.told.iter().rev().find(|t| t.ends()) {
                Some(end) => (end.t_us, Some(end.line)),
                None => (u64::MAX, None),
            },
        };
        Some((&self.tokens[at], until.0, until.1))
    }
}

/// An admission.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    pub(crate) line: usize,
    pub(crate) start: u64,
    pub(crate) t_us: u64,
    pub(crate) process: String,
    pub(crate) token: TokenId,
    pub(crate) op: OpKind,
}

/// Everything the invariants are judged on.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) tokens: HashMap<TokenId, TokenInfo>,
    pub(crate) revocations: Vec<Revocation>,
    /// Unbans begun: (user, start).
    pub(crate) unbans: Vec<(i64, u64)>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) sessions: Vec<Session>,
    pub(crate) admissions: Vec<Admission>,
    pub(crate) operations: usize,
    /// Indexes, so that an hour's history is judged in seconds: revocations by what they
    /// name, tokens by user and by login session.
    by_token: HashMap<TokenId, Vec<usize>>,
    by_user: HashMap<i64, Vec<usize>>,
    by_sid: HashMap<String, Vec<usize>>,
    tokens_of_user: HashMap<i64, Vec<TokenId>>,
    tokens_of_sid: HashMap<String, Vec<TokenId>>,
}

impl Model {
    /// Reads the history in time order (events of one time in their line order).
    pub(crate) fn build(events: &[Event], clock_skew_us: u64) -> Self {
        let mut order: Vec<usize> = (0..events.len()).collect();
        order.sort_by_key(|&i| events[i].t_us);
        let mut model = Self::default();
        let mut session_at: HashMap<String, usize> = HashMap::new();
        let mut fault_at: HashMap<String, usize> = HashMap::new();
        for i in order {
            let event = &events[i];
            let line = i + 1;
            let t = event.t_us;
            match &event.kind {
                Kind::Op(op) => {
                    model.operations += 1;
                    if let (Some(token), Some(user)) = (&op.token, op.user) {
                        let info = model.tokens.entry(token.clone()).or_default();
                        info.user.get_or_insert(user);
                    }
                    match op.op {
                        OpKind::Login if op.outcome == Outcome::Ok => {
                            if let Some(token) = &op.token {
                                let info = model.tokens.entry(token.clone()).or_default();
                                info.sid.clone_from(&op.sid);
                                info.login_start = op.start_us;
                                info.login_end = t;
                            }
                        }
                        OpKind::Unban => model
                            .unbans
                            .push((op.user.unwrap_or_default(), op.start_us)),
                        kind if kind.revokes() => {
                            let target = match (kind, &op.token, op.user, &op.sid) {
                                (_, _, _, _) if op.all => Target::All,
                                (OpKind::Logout, Some(token), _, _)
                                | (OpKind::Revoke, Some(token), _, _) => {
                                    Target::Token(token.clone())
                                }
                                (_, _, Some(user), Some(sid)) => Target::Session {
                                    user,
                                    sid: sid.clone(),
                                },
                                (OpKind::Logout, None, None, Some(sid)) => {
                                    // A logout by login session alone: the user is the token's.
                                    let user = model
                                        .tokens
                                        .values()
                                        .find(|i| i.sid.as_ref() == Some(sid))
                                        .and_then(|i| i.user);
                                    Target::Session {
                                        user: user.unwrap_or_default(),
                                        sid: sid.clone(),
                                    }
                                }
                                (_, _, Some(user), None) => Target::User(user),
                                _ => continue,
                            };
                            model.revocations.push(Revocation {
                                line,
                                start: op.start_us,
                                reference: t,
                                t_us: t,
                                by: Some(event.process.clone()),
                                target,
                                acknowledged: op.outcome == Outcome::Ok,
                                what: match kind {
                                    OpKind::Logout => "logout",
                                    OpKind::Ban => "ban",
                                    _ => "revoke",
                                },
                            });
                        }
                        kind if op.is_admission() => {
                            let Some(token) = op.token.clone() else {
                                continue;
                            };
                            model.admissions.push(Admission {
                                line,
                                start: op.start_us,
                                t_us: t,
                                process: event.process.clone(),
                                token: token.clone(),
                                op: kind,
                            });
                            if let Some(id) = &op.session {
                                let live = session_at
                                    .get(id)
                                    .copied()
                                    .filter(|&s| model.sessions[s].ended.is_none());
                                let held = Held {
                                    token,
                                    start: op.start_us,
                                    t_us: t,
                                    line,
                                };
                                match live {
                                    Some(s) => {
                                        let tokens = &mut model.sessions[s].tokens;
                                        if tokens.last().is_none_or(|h| h.token != held.token) {
                                            tokens.push(held);
                                        }
                                    }
                                    None => {
                                        session_at.insert(id.clone(), model.sessions.len());
                                        model.sessions.push(Session {
                                            id: id.clone(),
                                            process: event.process.clone(),
                                            opened: t,
                                            open_line: line,
                                            tokens: vec![held],
                                            told: Vec::new(),
                                            ended: None,
                                        });
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
                Kind::Expiry(e) => model.revocations.push(Revocation {
                    line,
                    start: t,
                    reference: t.saturating_add(clock_skew_us),
                    t_us: t,
                    by: None,
                    target: Target::Token(e.token.clone()),
                    acknowledged: true,
                    what: "expiry",
                }),
                Kind::Session(s) => {
                    let kicked = s.event == SessionEventKind::Closed
                        && matches!(s.reason.as_deref(), Some("revoked" | "token_rejected"));
                    let kind = if kicked {
                        SessionEventKind::Kicked
                    } else {
                        s.event
                    };
                    let told = Told {
                        t_us: t,
                        line,
                        kind,
                    };
                    let ends = told.ends();
                    let targets: Vec<usize> = match &s.session {
                        Some(id) => session_at.get(id).copied().into_iter().collect(),
                        None => (0..model.sessions.len())
                            .filter(|&k| {
                                model.sessions[k].process == event.process
                                    && model.sessions[k].ended.is_none()
                            })
                            .collect(),
                    };
                    for k in targets {
                        let session = &mut model.sessions[k];
                        if session.ended.is_some() {
                            continue;
                        }
                        session.told.push(told);
                        if ends {
                            session.ended = Some(t);
                        }
                    }
                }
                Kind::FaultBegin(f) => {
                    fault_at.insert(f.fault.clone(), model.faults.len());
                    model.faults.push(Fault {
                        id: f.fault.clone(),
                        what: f.what,
                        process: event.process.clone(),
                        affects: f.affects.clone(),
                        begin: t,
                        begin_line: line,
                        end: None,
                    });
                }
                Kind::FaultEnd(f) => {
                    if let Some(&k) = fault_at.get(&f.fault) {
                        model.faults[k].end = Some((t, line));
                    }
                }
            }
        }
        model.index();
        model
    }

    fn index(&mut self) {
        for (r, rev) in self.revocations.iter().enumerate() {
            match &rev.target {
                Target::Token(t) => self.by_token.entry(t.clone()).or_default().push(r),
                Target::User(u) => self.by_user.entry(*u).or_default().push(r),
                Target::Session { sid, .. } => self.by_sid.entry(sid.clone()).or_default().push(r),
                Target::All => {}
            }
        }
        for (token, info) in &self.tokens {
            if let Some(u) = info.user {
                self.tokens_of_user
                    .entry(u)
                    .or_default()
                    .push(token.clone());
            }
            if let Some(sid) = &info.sid {
                self.tokens_of_sid
                    .entry(sid.clone())
                    .or_default()
                    .push(token.clone());
            }
        }
    }

    /// The revocations that may name `token` (those that do among them: [`Self::names`]),
    /// by index, in time order.
    pub(crate) fn revocations_of(&self, token: &TokenId) -> Vec<usize> {
        let info = self.tokens.get(token);
        let mut found: Vec<usize> = self
            .by_token
            .get(token)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        if let Some(u) = info.and_then(|i| i.user) {
            found.extend(self.by_user.get(&u).into_iter().flatten());
        }
        if let Some(sid) = info.and_then(|i| i.sid.as_ref()) {
            found.extend(self.by_sid.get(sid).into_iter().flatten());
        }
        found.sort_unstable();
        found
    }

    /// Whether revocation `r` names `token` (a ban covers the tokens issued before it took
    /// effect; an unban begun while a later login was under way re-allows that login's token).
    pub(crate) fn names(&self, r: &Revocation, token: &TokenId) -> bool {
        let info = self.tokens.get(token);
        match &r.target {
            Target::Token(t) => t == token,
            Target::All => false,
            Target::Session { user, sid } => info
                .is_some_and(|i| i.sid.as_ref() == Some(sid) && i.user.is_none_or(|u| u == *user)),
            Target::User(user) => {
                let Some(info) = info else { return false };
                if info.user != Some(*user) || info.login_start >= r.reference {
                    return false;
                }
                // Logged in while a later unban was already under way: maybe issued after it.
                !self
                    .unbans
                    .iter()
                    .any(|&(u, start)| u == *user && start > r.start && start < info.login_end)
            }
        }
    }

    /// The tokens `r` may name (those it names among them: [`Self::names`]).
    pub(crate) fn candidates(&self, r: &Revocation) -> Vec<TokenId> {
        match &r.target {
            Target::Token(t) => vec![t.clone()],
            Target::All => Vec::new(),
            Target::User(u) => self.tokens_of_user.get(u).cloned().unwrap_or_default(),
            Target::Session { sid, .. } => self.tokens_of_sid.get(sid).cloned().unwrap_or_default(),
        }
    }

    /// Whether a revocation attempt (any outcome) begun by `t_us` names anything `session`
    /// held: what explains a kick.
    pub(crate) fn explains_kick(&self, session: &Session, t_us: u64) -> bool {
        self.revocations
            .iter()
            .filter(|r| r.start <= t_us)
            .any(|r| match &r.target {
                Target::All => true,
                Target::Token(t) => session.tokens.iter().any(|h| &h.token == t),
                Target::User(user) => session
                    .tokens
                    .iter()
                    .any(|h| self.tokens.get(&h.token).and_then(|i| i.user) == Some(*user)),
                Target::Session { sid, .. } => session
                    .tokens
                    .iter()
                    .any(|h| self.tokens.get(&h.token).and_then(|i| i.sid.as_ref()) == Some(sid)),
            })
    }
}
