//! The invariants of issue 34, judged over what `model` reads out of a history. It owns
//! their semantics:
//!
//! - **When a revocation holds.** A revocation counts from its acknowledgement: the event
//!   time of a logout, ban or `POST /admin/revoke` answered `ok` (the integrator's or the admin
//!   endpoint's success answer); a token's expiry counts from its `exp` plus the clock skew.
//!   It must hold [`Bounds::same_process`] later on the process that acknowledged it (and for
//!   an expiry, on every process, which each sees itself), [`Bounds::across_processes`] later
//!   elsewhere. When a fault that may delay it on that process (see `affects`) is open at any
//!   moment of that window, or healed less than [`Bounds::recovery`] before it (the process
//!   may still be catching up), the window runs to `recovery` after the fault heals, and again
//!   for any fault open in the window so extended. A fault that never heals leaves the
//!   revocation unjudged there.
//! - **Admissions** (connect, join, refresh, resolve, authorize answered `ok`) are judged by
//!   their *start*: one begun before the window's end and answered after it raced the
//!   revocation and is not a violation; one begun after is. A ban names every token of its
//!   user whose login began before the ban's acknowledgement, except one whose login was
//!   still under way when an unban began (unban re-allows); a logout names its token; an
//!   expiry its token. A revocation answered other than `ok` is not acknowledged: it binds
//!   nothing, but it does explain a kick.
//! - **Sessions** holding a named token at or after the acknowledgement must be kicked,
//!   closed, left, told `resync` or `reauth_required`, or move to another token by a refresh,
//!   at a time no earlier than the revocation began and no later than the window's end. A
//!   session told `reauth_required` while it held the token, before the revocation (its
//!   expiry came first), has been told already: it cannot go on without a new token.
//! - **Spurious kicks**: a kick (`kicked`, or `closed` with reason `revoked` or
//!   `token_rejected`) with no revocation begun before it naming a token, user or login
//!   session the session held. Within a lost channel's window (a Redis kill, a frozen or
//!   refused link, a process kill, until `recovery` after the heal) up to
//!   [`Bounds::spurious_kick_rate`] of the sessions live at the loss are forgiven.
//! - **Everything**: a `revoke` of `all` empties caches and makes sessions re-check; it binds
//!   no admission and names no session, but it explains any kick after it.
//! - **Restarts**: a late admission on a process restarted (a `process_killed` fault healed)
//!   after the revocation's window had ended is reported as lost over the restart.
//!
//! It does not read texts for tokens: [`crate::leaks`] does.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::bounds::{micros, Bounds};
use crate::history::{Event, FaultKind, SessionEventKind, TokenId};
use crate::model::{Model, Revocation, Session};
use crate::report::{BoundKind, EventRef, Invariant, Report, Violation, Worst};

/// Checks a history against the invariants, with these bounds.
///
/// Events may come in any order; they are judged by their times, and named in the report by
/// their 1-based position in `events` (the line of the file they were read from).
#[must_use]
pub fn check(events: &[Event], bounds: &Bounds) -> Report {
    let model = Model::build(events, micros(bounds.clock_skew));
    let mut judge = Judge {
        model: &model,
        bounds,
        windows: HashMap::new(),
        worst: HashMap::new(),
    };
    let mut report = Report {
        events: events.len(),
        operations: model.operations,
        faults: model.faults.len(),
        admissions: model.admissions.len(),
        revocations: model.revocations.iter().filter(|r| r.acknowledged).count(),
        sessions: model.sessions.len(),
        ..Report::default()
    };
    judge.admissions(&mut report);
    judge.sessions(&mut report);
    judge.kicks(&mut report);
    let unjudged: HashSet<usize> = judge
        .windows
        .iter()
        .filter(|(_, w)| w.is_none())
        .map(|((r, _), _)| *r)
        .collect();
    report.unjudged = unjudged.len();
    for kind in [
        BoundKind::SameProcess,
        BoundKind::AcrossProcesses,
        BoundKind::Recovery,
    ] {
        let (admission, session) = judge.worst.get(&kind).copied().unwrap_or((None, None));
        let bound = match kind {
            BoundKind::SameProcess => bounds.same_process,
            BoundKind::AcrossProcesses => bounds.across_processes,
            BoundKind::Recovery => bounds.recovery,
        };
        report.worst.push(Worst {
            kind,
            bound,
            admission,
            session,
        });
    }
    report
}

/// When a revocation must hold on one process.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// The moment from which it must hold.
    end: u64,
    /// Which bound made `end`, and the time it counts from: the acknowledgement, or the heal
    /// of the fault that set `end` (the acknowledgement when it came after the heal).
    kind: BoundKind,
    from: u64,
    /// `end - from`: the bound a delay counted from `from` is held to.
    bound: u64,
    /// The line of the fault whose heal set `end`, when one did.
    fault_line: Option<usize>,
}

struct Judge<'a> {
    model: &'a Model,
    bounds: &'a Bounds,
    /// Windows by (revocation index, process); `None`: a fault open over it never healed.
    windows: HashMap<(usize, String), Option<Window>>,
    /// The worst admission and session delays per bound.
    worst: HashMap<BoundKind, (Option<Duration>, Option<Duration>)>,
}

fn us(d: u64) -> Duration {
    Duration::from_micros(d)
}

fn at(line: usize, t_us: u64) -> EventRef {
    EventRef { line, t_us }
}

impl Judge<'_> {
    /// The window of revocation `r` (its index) on `process`.
    fn window(&mut self, r: usize, process: &str) -> Option<Window> {
        if let Some(w) = self.windows.get(&(r, process.to_owned())) {
            return *w;
        }
        let rev = &self.model.revocations[r];
        let (kind, bound) = if rev.by.as_deref().is_none_or(|by| by == process) {
            (BoundKind::SameProcess, micros(self.bounds.same_process))
        } else {
            (
                BoundKind::AcrossProcesses,
                micros(self.bounds.across_processes),
            )
        };
        let recovery = micros(self.bounds.recovery);
        let mut w = Window {
            end: rev.reference.saturating_add(bound),
            kind,
            from: rev.reference,
            bound,
            fault_line: None,
        };
        // Every fault open at some moment of the window moves its end to `recovery` after
        // the fault heals; the window so extended may take in further faults.
        let mut extended = true;
        while extended {
            extended = false;
            for f in self.model.faults.iter().filter(|f| f.affects(process)) {
                let open_in_window = f.begin <= w.end
                    && f.end
                        .is_none_or(|(end, _)| end.saturating_add(recovery) >= rev.reference);
                if !open_in_window {
                    continue;
                }
                let Some((end, line)) = f.end else {
                    self.windows.insert((r, process.to_owned()), None);
                    return None;
                };
                if end.saturating_add(recovery) > w.end {
                    // Counted from the heal, or from the acknowledgement when that came after
                    // it: a delay is the revocation's, not the fault's.
                    let from = end.max(rev.reference);
                    let until = end.saturating_add(recovery);
                    w = Window {
                        end: until,
                        kind: BoundKind::Recovery,
                        from,
                        bound: until - from,
                        fault_line: Some(line),
                    };
                    extended = true;
                }
            }
        }
        let w = Some(w);
        self.windows.insert((r, process.to_owned()), w);
        w
    }

    fn note(&mut self, kind: BoundKind, delay: u64, session: bool) {
        let entry = self.worst.entry(kind).or_insert((None, None));
        let slot = if session { &mut entry.1 } else { &mut entry.0 };
        *slot = Some((*slot).map_or(us(delay), |d: Duration| d.max(us(delay))));
    }

    /// The revocations naming `token`, acknowledged, by index.
    fn naming(&self, token: &TokenId) -> Vec<usize> {
        let model = self.model;
        model
            .revocations_of(token)
            .into_iter()
            .filter(|&r| {
                model.revocations[r].acknowledged && model.names(&model.revocations[r], token)
            })
            .collect()
    }

    fn admissions(&mut self, report: &mut Report) {
        let mut naming_cache: HashMap<TokenId, Vec<usize>> = HashMap::new();
        for a in &self.model.admissions {
            let revs = naming_cache
                .entry(a.token.clone())
                .or_insert_with(|| self.naming(&a.token))
                .clone();
            let mut worst: Option<(usize, Window)> = None;
            for r in revs {
                let rev = &self.model.revocations[r];
                if a.start <= rev.reference {
                    continue;
                }
                let Some(w) = self.window(r, &a.process) else {
                    continue;
                };
                self.note(w.kind, a.start.saturating_sub(w.from), false);
                if a.start > w.end
                    && worst.is_none_or(|(_, prev)| a.start - w.end > a.start - prev.end)
                {
                    worst = Some((r, w));
                }
            }
            let Some((r, w)) = worst else { continue };
            let rev = &self.model.revocations[r];
            let restart = self.model.faults.iter().find(|f| {
                f.what == FaultKind::ProcessKilled
                    && f.affects(&a.process)
                    && f.begin > w.end
                    && f.end.is_some_and(|(end, _)| end <= a.start)
            });
            let mut events = vec![at(rev.line, rev.t_us), at(a.line, a.t_us)];
            events.extend(w.fault_line.map(|l| at(l, w.from)));
            let (invariant, explanation) = match restart {
                Some(f) => {
                    events.push(at(f.begin_line, f.begin));
                    (
                        Invariant::LostOverRestart,
                        format!(
                            "{} of {} on {} after {} was restarted (fault {} at t={} us), though the {} ({}) held before it",
                            op_name(a.op),
                            a.token.as_str(),
                            a.process,
                            f.process,
                            f.id,
                            f.begin,
                            rev.what,
                            describe(rev)
                        ),
                    )
                }
                None => (
                    Invariant::LateAdmission,
                    format!(
                        "{} of {} on {} began {} after the {} ({}) was acknowledged",
                        op_name(a.op),
                        a.token.as_str(),
                        a.process,
                        fmt_us(a.start - rev.reference),
                        rev.what,
                        describe(rev)
                    ),
                ),
            };
            report.push(Violation {
                invariant,
                events,
                delay: Some(us(a.start - w.from)),
                bound: Some(us(w.bound)),
                explanation,
            });
        }
    }

    fn sessions(&mut self, report: &mut Report) {
        let model = self.model;
        let mut by_token: HashMap<&TokenId, Vec<&Session>> = HashMap::new();
        for session in &model.sessions {
            for held in &session.tokens {
                let holders = by_token.entry(&held.token).or_default();
                // A token held twice (t1, t2, t1 again) names the session once.
                if !holders.last().is_some_and(|s| std::ptr::eq(*s, session)) {
                    holders.push(session);
                }
            }
        }
        for (r, rev) in model.revocations.iter().enumerate() {
            if !rev.acknowledged {
                continue;
            }
            for token in model.candidates(rev).iter().filter(|t| model.names(rev, t)) {
                for session in by_token.get(token).into_iter().flatten() {
                    let Some((held, until, until_line)) = session.held(token) else {
                        continue;
                    };
                    if until <= rev.reference {
                        continue;
                    }
                    let Some(w) = self.window(r, &session.process) else {
                        continue;
                    };
                    // Brought in by an admission begun after the window: a late admission,
                    // reported as such.
                    if held.start > w.end {
                        continue;
                    }
                    let since = rev.start.max(held.t_us);
                    // A session already told `reauth_required` while it held the token (its
                    // expiry came first) has been told: it must bring a new token, whatever
                    // revokes the old one meanwhile. It counts as told at the revocation.
                    let reauth = session
                        .told
                        .iter()
                        .find(|t| {
                            t.kind == SessionEventKind::ReauthRequired
                                && t.t_us >= held.t_us
                                && t.t_us < since
                                && t.t_us < until
                        })
                        .map(|t| (rev.reference.max(since), t.line));
                    let told = reauth.or_else(|| {
                        session
                            .told
                            .iter()
                            .find(|t| t.t_us >= since)
                            .map(|t| (t.t_us, t.line))
                    });
                    let left = until_line.map(|line| (until, line));
                    let answer = match (told, left) {
                        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                        (a, b) => a.or(b),
                    };
                    if let Some((t, _)) = answer {
                        self.note(w.kind, t.saturating_sub(w.from), true);
                        if t <= w.end {
                            continue;
                        }
                    }
                    let mut events = vec![at(rev.line, rev.t_us), at(held.line, held.t_us)];
                    events.extend(w.fault_line.map(|l| at(l, w.from)));
                    let (delay, how) = match answer {
                        Some((t, line)) => {
                            events.push(at(line, t));
                            (
                                Some(us(t - w.from)),
                                format!(
                                    "told only {} after",
                                    fmt_us(t.saturating_sub(rev.reference))
                                ),
                            )
                        }
                        None => (None, "never closed or told after".to_owned()),
                    };
                    report.push(Violation {
                        invariant: Invariant::SessionNotTold,
                        events,
                        delay,
                        bound: Some(us(w.bound)),
                        explanation: format!(
                            "session {} on {} holding {} was {} the {} ({})",
                            session.id,
                            session.process,
                            token.as_str(),
                            how,
                            rev.what,
                            describe(rev)
                        ),
                    });
                }
            }
        }
    }

    fn kicks(&mut self, report: &mut Report) {
        let model = self.model;
        let recovery = micros(self.bounds.recovery);
        // Per lost channel (fault index): the kicks it may excuse, and those it excused.
        let mut forgiven: HashMap<usize, (usize, usize)> = HashMap::new();
        for session in &model.sessions {
            for kick in session
                .told
                .iter()
                .filter(|t| t.kind == SessionEventKind::Kicked)
            {
                report.kicks += 1;
                if model.explains_kick(session, kick.t_us) {
                    continue;
                }
                let window = model.faults.iter().enumerate().find(|(_, f)| {
                    f.what.loses_channel()
                        && f.affects(&session.process)
                        && f.begin <= kick.t_us
                        && f.end
                            .is_none_or(|(end, _)| kick.t_us <= end.saturating_add(recovery))
                });
                if let Some((k, f)) = window {
                    let rate = self.bounds.spurious_kick_rate;
                    let (allowed, used) = forgiven.entry(k).or_insert_with(|| {
                        let live = model
                            .sessions
                            .iter()
                            .filter(|s| {
                                f.affects(&s.process)
                                    && s.opened <= f.begin
                                    && s.ended.is_none_or(|e| e > f.begin)
                            })
                            .count();
                        #[allow(
                            clippy::cast_precision_loss,
                            clippy::cast_possible_truncation,
                            clippy::cast_sign_loss
                        )]
                        let allowed = (live as f64 * rate).floor() as usize;
                        (allowed, 0)
                    });
                    if *used < *allowed {
                        *used += 1;
                        report.kicks_tolerated += 1;
                        continue;
                    }
                }
                let mut events = vec![
                    at(session.open_line, session.opened),
                    at(kick.line, kick.t_us),
                ];
                let after = match window {
                    Some((_, f)) => {
                        events.push(at(f.begin_line, f.begin));
                        format!(
                            ", beyond the tolerated rate after the lost channel of fault {}",
                            f.id
                        )
                    }
                    None => String::new(),
                };
                let tokens: Vec<&str> = session.tokens.iter().map(|h| h.token.as_str()).collect();
                report.push(Violation {
                    invariant: Invariant::SpuriousKick,
                    events,
                    delay: None,
                    bound: None,
                    explanation: format!(
                        "session {} on {} (tokens {}) was kicked though nobody revoked its token, user or login session{}",
                        session.id,
                        session.process,
                        tokens.join(", "),
                        after
                    ),
                });
            }
        }
    }
}

fn describe(rev: &Revocation) -> String {
    use crate::model::Target;
    let what = match &rev.target {
        Target::Token(t) => format!("token {}", t.as_str()),
        Target::User(u) => format!("user {u}"),
        Target::Session { user, sid } => format!("login session {sid} of user {user}"),
        Target::All => "everything".to_owned(),
    };
    match &rev.by {
        Some(by) => format!("{what}, by {by}"),
        None => what,
    }
}

fn op_name(op: crate::history::OpKind) -> &'static str {
    use crate::history::OpKind;
    match op {
        OpKind::Connect => "connect",
        OpKind::Join => "join",
        OpKind::Refresh => "refresh",
        OpKind::Resolve => "resolve",
        OpKind::Authorize => "authorize",
        _ => "operation",
    }
}

fn fmt_us(d: u64) -> String {
    format!("{:.1} ms", d as f64 / 1000.0)
}
