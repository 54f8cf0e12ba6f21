//! What the checker found: the [`Report`] (summary, worst delays, violations) and how it is
//! printed. It owns the wording; the checker decides what is a violation.

use std::fmt;
use std::time::Duration;

/// The invariants the checker verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Invariant {
    /// No admission of a token or user that begins later than its revocation's bound after
    /// the revocation was acknowledged.
    LateAdmission,
    /// Every live session a revocation names is closed, or told `resync` or
    /// `reauth_required`, within the bound.
    SessionNotTold,
    /// No session is kicked for a user nobody revoked (beyond the tolerated rate after a lost
    /// channel).
    SpuriousKick,
    /// A revocation acknowledged before a process restarted still holds on it after.
    LostOverRestart,
    /// No token in any log line, metric scrape, Redis key or the history itself.
    TokenLeaked,
}

impl Invariant {
    /// The stable name the report prints.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LateAdmission => "late_admission",
            Self::SessionNotTold => "session_not_told",
            Self::SpuriousKick => "spurious_kick",
            Self::LostOverRestart => "lost_over_restart",
            Self::TokenLeaked => "token_leaked",
        }
    }
}

/// An event a violation points at: its 1-based line in the history and its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRef {
    /// 1-based line (the event's index in the slice checked, plus one).
    pub line: usize,
    /// The event's `t_us`.
    pub t_us: u64,
}

/// One broken invariant, explained.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// The events involved (the revocation, the admission or session, the fault...).
    pub events: Vec<EventRef>,
    /// How late it was, where that applies (from the reference the bound counts from).
    pub delay: Option<Duration>,
    /// The bound it broke, where that applies.
    pub bound: Option<Duration>,
    /// What happened, in a sentence; names tokens by their ids only.
    pub explanation: String,
}

/// Which bound a delay was measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BoundKind {
    /// [`Bounds::same_process`](crate::Bounds::same_process), from the acknowledgement (or
    /// an expiry plus the skew).
    SameProcess,
    /// [`Bounds::across_processes`](crate::Bounds::across_processes), from the acknowledgement.
    AcrossProcesses,
    /// [`Bounds::recovery`](crate::Bounds::recovery), from the heal of the last fault that
    /// was open while the revocation travelled.
    Recovery,
}

impl BoundKind {
    fn label(self) -> &'static str {
        match self {
            Self::SameProcess => "same process",
            Self::AcrossProcesses => "across processes",
            Self::Recovery => "after a fault heals",
        }
    }
}

/// The worst delay seen against one bound: the latest an admission of something revoked began,
/// or a named session was told, counted from where the bound counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worst {
    /// The bound.
    pub kind: BoundKind,
    /// Its value.
    pub bound: Duration,
    /// The worst admission after a revocation (its start), if any began after one.
    pub admission: Option<Duration>,
    /// The worst time to tell a named session, if any was named.
    pub session: Option<Duration>,
}

/// Most violations kept per invariant; the rest are counted in [`Report::violation_count`].
pub const MAX_KEPT_PER_INVARIANT: usize = 1000;

/// What the checker found over one history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Events in the history.
    pub events: usize,
    /// Operations made (every `op`).
    pub operations: usize,
    /// Faults begun.
    pub faults: usize,
    /// Admissions (connect, join, refresh, resolve, authorize answered `ok`).
    pub admissions: usize,
    /// Revocations acknowledged (logout, ban, revoke answered `ok`), and tokens expired.
    pub revocations: usize,
    /// Sessions opened.
    pub sessions: usize,
    /// Kicks seen (`kicked`, or `closed` for `revoked` or `token_rejected`).
    pub kicks: usize,
    /// Kicks with no revocation behind them, forgiven within the tolerated rate.
    pub kicks_tolerated: usize,
    /// Revocations that an admission or a session had to be judged against on some process,
    /// but whose window there never ended: a fault open over it never healed in the history.
    pub unjudged: usize,
    /// The worst delay seen against each bound.
    pub worst: Vec<Worst>,
    /// The violations kept (at most [`MAX_KEPT_PER_INVARIANT`] per invariant).
    pub violations: Vec<Violation>,
    /// Violations found, kept or not.
    pub violation_count: usize,
}

impl Report {
    /// Whether no invariant was broken.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.violation_count == 0
    }

    /// Adds a violation, keeping at most [`MAX_KEPT_PER_INVARIANT`] of its invariant.
    pub fn push(&mut self, violation: Violation) {
        self.violation_count += 1;
        let kept = self
            .violations
            .iter()
            .filter(|v| v.invariant == violation.invariant)
            .count();
        if kept < MAX_KEPT_PER_INVARIANT {
            self.violations.push(violation);
        }
    }

    /// The violations kept of one invariant.
    pub fn of(&self, invariant: Invariant) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(move |v| v.invariant == invariant)
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "events: {}, operations: {}, faults: {}, admissions: {}, revocations: {}, sessions: {}, kicks: {} ({} tolerated)",
            self.events,
            self.operations,
            self.faults,
            self.admissions,
            self.revocations,
            self.sessions,
            self.kicks,
            self.kicks_tolerated
        )?;
        for w in &self.worst {
            let show = |d: Option<Duration>| d.map_or_else(|| "none".to_owned(), ms);
            writeln!(
                f,
                "worst {} (bound {}): admission {}, session told {}",
                w.kind.label(),
                ms(w.bound),
                show(w.admission),
                show(w.session)
            )?;
        }
        if self.unjudged > 0 {
            writeln!(
                f,
                "unjudged: {} revocations under a fault that never healed",
                self.unjudged
            )?;
        }
        writeln!(f, "violations: {}", self.violation_count)?;
        for v in &self.violations {
            let lines: Vec<String> = v
                .events
                .iter()
                .map(|e| format!("line {} (t={} us)", e.line, e.t_us))
                .collect();
            write!(
                f,
                "  {}: {} [{}]",
                v.invariant.as_str(),
                v.explanation,
                lines.join(", ")
            )?;
            match (v.delay, v.bound) {
                (Some(d), Some(b)) => writeln!(f, " delay {} > bound {}", ms(d), ms(b))?,
                _ => writeln!(f)?,
            }
        }
        let shown = self.violations.len();
        if shown < self.violation_count {
            writeln!(
                f,
                "  ... and {} more not kept",
                self.violation_count - shown
            )?;
        }
        Ok(())
    }
}
