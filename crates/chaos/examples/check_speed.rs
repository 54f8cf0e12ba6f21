//! How long the checker takes over a history the size of a long run: a synthetic one shaped
//! like issue 34's first sign (per player: a login, a connect, a join, a sidecar resolve with a
//! session, an authorize; a ban every 97th player, its session kicked; a Redis kill every
//! 30 s), then the leak search over a log of one line per operation.
//!
//! `cargo run --release -p token-resolver-chaos --example check_speed -- [PLAYERS]` (default
//! 180,000: 300 players a second for 10 minutes).

use std::time::Instant;

use token_resolver_chaos::{
    check, check_leaks, read_history, write_history, Bounds, Collected, Event, FaultBegin,
    FaultEnd, FaultKind, Kind, Op, OpKind, Outcome, Secrets, SessionEvent, SessionEventKind,
};

fn op(
    t: u64,
    process: &str,
    kind: OpKind,
    token: &str,
    user: i64,
    session: Option<String>,
) -> Event {
    let mut op = Op::new(kind, t - 200, Outcome::Ok);
    op.token = Some(token.into());
    op.user = Some(user);
    op.session = session;
    if kind == OpKind::Join {
        op.auth_url = Some(String::new());
    }
    Event {
        t_us: t,
        process: process.to_owned(),
        kind: Kind::Op(op),
    }
}

fn main() {
    let players: u64 = std::env::args()
        .nth(1)
        .map_or(180_000, |n| n.parse().expect("a number of players"));
    let mut events = Vec::new();
    let mut secrets = Secrets::new();
    let mut log = String::new();
    for p in 0..players {
        let t = p * 3333 + 1000; // 300 a second
        let token = format!("t{p}");
        let user = i64::try_from(p).unwrap();
        let node = if p % 2 == 0 { "node-1" } else { "node-2" };
        secrets.insert(
            token.as_str().into(),
            format!("real-{p:08}-Zm9vYmFyYmF6cXV4cXV1eA"),
        );
        let mut login = Op::new(OpKind::Login, t - 500, Outcome::Ok);
        login.token = Some(token.as_str().into());
        login.user = Some(user);
        events.push(Event {
            t_us: t - 300,
            process: "api".into(),
            kind: Kind::Op(login),
        });
        events.push(op(
            t,
            node,
            OpKind::Connect,
            &token,
            user,
            Some(format!("g{p}")),
        ));
        events.push(op(
            t + 400,
            node,
            OpKind::Join,
            &token,
            user,
            Some(format!("g{p}")),
        ));
        events.push(op(
            t + 800,
            "sidecar",
            OpKind::Resolve,
            &token,
            user,
            Some(format!("c{p}")),
        ));
        events.push(op(
            t + 1200,
            "sidecar",
            OpKind::Authorize,
            &token,
            user,
            None,
        ));
        if p % 97 == 0 {
            let mut ban = Op::new(OpKind::Ban, t + 1300, Outcome::Ok);
            ban.user = Some(user);
            events.push(Event {
                t_us: t + 1500,
                process: "api".into(),
                kind: Kind::Op(ban),
            });
            for (session, process) in [(format!("g{p}"), node), (format!("c{p}"), "sidecar")] {
                let kicked = SessionEvent {
                    session: Some(session),
                    event: SessionEventKind::Kicked,
                    reason: Some("token_rejected".into()),
                };
                events.push(Event {
                    t_us: t + 1800,
                    process: process.into(),
                    kind: Kind::Session(kicked),
                });
            }
        }
        if p % 9000 == 0 {
            let fault = format!("f{p}");
            let begin = FaultBegin {
                fault: fault.clone(),
                what: FaultKind::RedisKilled,
                affects: vec![],
                detail: None,
            };
            events.push(Event {
                t_us: t,
                process: "redis".into(),
                kind: Kind::FaultBegin(begin),
            });
            events.push(Event {
                t_us: t + 2_000_000,
                process: "redis".into(),
                kind: Kind::FaultEnd(FaultEnd { fault }),
            });
        }
        for _ in 0..5 {
            log.push_str("{\"level\":\"INFO\",\"msg\":\"resolution\",\"outcome\":\"hit\",\"conn\":12345,\"user_id\":42}\n");
        }
    }
    let mut file = Vec::new();
    write_history(&mut file, &events).unwrap();
    let started = Instant::now();
    let read = read_history(&file[..]).unwrap();
    let reading = started.elapsed();
    let started = Instant::now();
    let mut report = check(&read, &Bounds::default());
    let checking = started.elapsed();
    let started = Instant::now();
    check_leaks(
        &mut report,
        &secrets,
        &read,
        &[Collected {
            source: "log",
            text: &log,
        }],
    );
    let leaks = started.elapsed();
    print!("{report}");
    println!(
        "{} events ({:.1} MB): read {:.2} s, checked {:.2} s; leak search of {} tokens over the history and {:.1} MB of log: {:.2} s",
        read.len(),
        file.len() as f64 / 1e6,
        reading.as_secs_f64(),
        checking.as_secs_f64(),
        secrets.len(),
        log.len() as f64 / 1e6,
        leaks.as_secs_f64()
    );
}
