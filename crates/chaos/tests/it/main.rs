//! The chaos crate's tests: hand-made histories fed to the checker, the history's line format,
//! and the leak search. One test binary; one module per concern.

mod checker;
mod history;
mod leaks;
mod soak;

use token_resolver_chaos::{
    Event, Expiry, FaultBegin, FaultEnd, FaultKind, Kind, Op, OpKind, Outcome, SessionEvent,
    SessionEventKind,
};

/// Milliseconds in the history's unit.
pub(crate) const fn ms(n: u64) -> u64 {
    n * 1000
}

/// A history written by hand, event by event, times in microseconds.
#[derive(Default)]
pub(crate) struct H {
    pub(crate) events: Vec<Event>,
}

impl H {
    pub(crate) fn push(&mut self, t_us: u64, process: &str, kind: Kind) -> &mut Self {
        self.events.push(Event {
            t_us,
            process: process.to_owned(),
            kind,
        });
        self
    }

    /// The 1-based line of the last event pushed.
    pub(crate) fn line(&self) -> usize {
        self.events.len()
    }

    fn op(&mut self, process: &str, start: u64, t: u64, op: Op) -> &mut Self {
        let op = Op {
            start_us: start,
            ..op
        };
        self.push(t, process, Kind::Op(op))
    }

    pub(crate) fn login(&mut self, t: u64, token: &str, user: i64) -> &mut Self {
        let mut op = Op::new(OpKind::Login, 0, Outcome::Ok);
        op.token = Some(token.into());
        op.user = Some(user);
        self.op("api", t.saturating_sub(ms(1)), t, op)
    }

    /// An admission (`ok`) of `token` on `process`, begun at `start`, answered at `t`.
    pub(crate) fn admit(
        &mut self,
        kind: OpKind,
        process: &str,
        start: u64,
        t: u64,
        token: &str,
        session: Option<&str>,
    ) -> &mut Self {
        let mut op = Op::new(kind, 0, Outcome::Ok);
        op.token = Some(token.into());
        op.session = session.map(str::to_owned);
        if kind == OpKind::Join {
            op.auth_url = Some(String::new());
        }
        self.op(process, start, t, op)
    }

    pub(crate) fn connect(
        &mut self,
        process: &str,
        start: u64,
        t: u64,
        token: &str,
        session: &str,
    ) -> &mut Self {
        self.admit(OpKind::Connect, process, start, t, token, Some(session))
    }

    pub(crate) fn ban(&mut self, start: u64, t: u64, user: i64) -> &mut Self {
        let mut op = Op::new(OpKind::Ban, 0, Outcome::Ok);
        op.user = Some(user);
        self.op("api", start, t, op)
    }

    pub(crate) fn unban(&mut self, start: u64, t: u64, user: i64) -> &mut Self {
        let mut op = Op::new(OpKind::Unban, 0, Outcome::Ok);
        op.user = Some(user);
        self.op("api", start, t, op)
    }

    pub(crate) fn logout(&mut self, start: u64, t: u64, token: &str) -> &mut Self {
        let mut op = Op::new(OpKind::Logout, 0, Outcome::Ok);
        op.token = Some(token.into());
        self.op("api", start, t, op)
    }

    /// `POST /admin/revoke {"user_id"}` on `process`.
    pub(crate) fn revoke_user(
        &mut self,
        process: &str,
        start: u64,
        t: u64,
        user: i64,
    ) -> &mut Self {
        let mut op = Op::new(OpKind::Revoke, 0, Outcome::Ok);
        op.user = Some(user);
        self.op(process, start, t, op)
    }

    pub(crate) fn told(
        &mut self,
        t: u64,
        process: &str,
        session: Option<&str>,
        event: SessionEventKind,
    ) -> &mut Self {
        let reason = (event == SessionEventKind::Kicked).then(|| "token_rejected".to_owned());
        self.push(
            t,
            process,
            Kind::Session(SessionEvent {
                session: session.map(str::to_owned),
                event,
                reason,
            }),
        )
    }

    pub(crate) fn fault(
        &mut self,
        t: u64,
        process: &str,
        id: &str,
        what: FaultKind,
        affects: &[&str],
    ) -> &mut Self {
        let begin = FaultBegin {
            fault: id.to_owned(),
            what,
            affects: affects.iter().map(|p| (*p).to_owned()).collect(),
            detail: None,
        };
        self.push(t, process, Kind::FaultBegin(begin))
    }

    pub(crate) fn heal(&mut self, t: u64, process: &str, id: &str) -> &mut Self {
        self.push(
            t,
            process,
            Kind::FaultEnd(FaultEnd {
                fault: id.to_owned(),
            }),
        )
    }

    pub(crate) fn expiry(&mut self, t: u64, token: &str) -> &mut Self {
        self.push(
            t,
            "api",
            Kind::Expiry(Expiry {
                token: token.into(),
            }),
        )
    }
}
