//! The run's clock and what it records: the history's events (one clock for all of them, in
//! microseconds since the run's start), the ids it gives tokens, sessions and login sessions,
//! and the real tokens, kept in memory for the leak check only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use token_resolver_chaos::{
    Event, Expiry, FaultBegin, FaultEnd, FaultKind, Kind, Op, Secrets, SessionEvent,
    SessionEventKind, TokenId,
};

/// The history being written.
#[derive(Debug)]
pub(crate) struct Recorder {
    /// The run's start: every `t_us` counts from it.
    start: Instant,
    events: Mutex<Vec<Event>>,
    secrets: Mutex<Secrets>,
    /// The next id of each sort (tokens, game sessions, sidecar sessions, login sessions).
    next: AtomicU64,
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
            secrets: Mutex::new(Secrets::new()),
            next: AtomicU64::new(1),
        }
    }

    /// Microseconds since the run's start.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A fresh id with this prefix (`t17`, `g17`, `c17`, `l17`).
    pub(crate) fn id(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Names a real token by a fresh id, and keeps it for the leak check.
    pub(crate) fn token(&self, secret: &str) -> TokenId {
        let id = TokenId(self.id("t"));
        lock(&self.secrets).insert(id.clone(), secret);
        id
    }

    fn push(&self, t_us: u64, process: &str, kind: Kind) {
        lock(&self.events).push(Event {
            t_us,
            process: process.to_owned(),
            kind,
        });
    }

    /// An operation answered now.
    pub(crate) fn op(&self, process: &str, op: Op) {
        let now = self.now().max(op.start_us);
        self.push(now, process, Kind::Op(op));
    }

    /// An operation answered at `t_us` (0: now).
    pub(crate) fn op_at(&self, t_us: u64, process: &str, op: Op) {
        let t = if t_us == 0 { self.now() } else { t_us };
        self.push(t.max(op.start_us), process, Kind::Op(op));
    }

    /// A token's `exp`, on the run's clock.
    pub(crate) fn expiry(&self, t_us: u64, token: TokenId) {
        self.push(t_us, "api", Kind::Expiry(Expiry { token }));
    }

    /// What a session was told, now.
    pub(crate) fn session(
        &self,
        process: &str,
        session: Option<String>,
        event: SessionEventKind,
        reason: Option<String>,
    ) {
        let now = self.now();
        self.push(
            now,
            process,
            Kind::Session(SessionEvent {
                session,
                event,
                reason,
            }),
        );
    }

    pub(crate) fn fault_begin(
        &self,
        process: &str,
        fault: String,
        what: FaultKind,
        affects: Vec<String>,
        detail: Option<String>,
    ) {
        let now = self.now();
        self.push(
            now,
            process,
            Kind::FaultBegin(FaultBegin {
                fault,
                what,
                affects,
                detail,
            }),
        );
    }

    pub(crate) fn fault_end(&self, process: &str, fault: String) {
        let now = self.now();
        self.push(now, process, Kind::FaultEnd(FaultEnd { fault }));
    }

    /// The history so far, in time order.
    pub(crate) fn events(&self) -> Vec<Event> {
        let mut events = lock(&self.events).clone();
        events.sort_by_key(|e| e.t_us);
        events
    }

    pub(crate) fn secrets(&self) -> Secrets {
        lock(&self.secrets).clone()
    }
}

/// A lock that a panicked holder does not poison for the rest of the run.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
