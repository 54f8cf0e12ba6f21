//! The leak search: a real token in a collected text or in the history is reported by its id,
//! its source and its line, and the report never repeats the token.

use token_resolver_chaos::{
    check, check_leaks, Bounds, Collected, Invariant, Kind, Report, Secrets,
};

use crate::{ms, H};

const REAL: &str = "mF_9.B5f-4.1JqM-real-token-0001";
const OTHER: &str = "Zx81~other+token/0002==";

fn secrets() -> Secrets {
    let mut s = Secrets::new();
    s.insert("t1".into(), REAL);
    s.insert("t2".into(), OTHER);
    s
}

/// A token in the second line of a node's log is reported with the log and the line; the
/// clean metric scrape and Redis keys are not.
#[test]
fn a_token_in_a_log_line_is_reported_by_id_source_and_line() {
    let log =
        format!("INFO connected user=7\nWARN upstream said Bearer {REAL} was odd\nINFO bye\n");
    let texts = [
        Collected {
            source: "log node-1",
            text: &log,
        },
        Collected {
            source: "metrics sidecar",
            text: "token_resolver_resolutions_total{outcome=\"hit\"} 3\n",
        },
        Collected {
            source: "redis keys",
            text: "tr:v:5f2a9c\ntr:revocations\n",
        },
    ];
    let mut h = H::default();
    h.login(ms(1), "t1", 7);
    let mut report = check(&h.events, &Bounds::default());
    check_leaks(&mut report, &secrets(), &h.events, &texts);
    assert_eq!(report.violation_count, 1, "{report}");
    let v = &report.violations[0];
    assert_eq!(v.invariant, Invariant::TokenLeaked);
    assert_eq!(v.explanation, "token t1 is in log node-1, line 2");
    let printed = report.to_string();
    assert!(
        !printed.contains(REAL) && !printed.contains(OTHER),
        "{printed}"
    );
}

/// A token written into the history itself (here in a fault's note) is reported by its line.
#[test]
fn a_token_in_the_history_is_reported_by_its_line() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).fault(
        ms(2),
        "api",
        "f1",
        token_resolver_chaos::FaultKind::IntegratorSlow,
        &[],
    );
    if let Kind::FaultBegin(f) = &mut h.events[1].kind {
        f.detail = Some(format!("slow for {OTHER}"));
    }
    let mut report = Report::default();
    check_leaks(&mut report, &secrets(), &h.events, &[]);
    assert_eq!(report.violation_count, 1, "{report}");
    assert_eq!(
        report.violations[0].explanation,
        "token t2 is written in the history"
    );
    assert_eq!(report.violations[0].events[0].line, 2);
}

/// The secrets' `Debug` shows ids, never tokens.
#[test]
fn secrets_debug_shows_ids_only() {
    let shown = format!("{:?}", secrets());
    assert!(
        shown.contains("t1") && shown.contains("[redacted]"),
        "{shown}"
    );
    assert!(!shown.contains(REAL) && !shown.contains(OTHER), "{shown}");
}
