//! The checker on hand-made histories: each test pins one behaviour, a history it must report
//! or one it must pass.

use std::time::Duration;

use token_resolver_chaos::{
    check, BoundKind, Bounds, FaultKind, Invariant, OpKind, Report, SessionEventKind,
};

use crate::{ms, H};

fn only(report: &Report, invariant: Invariant) -> &token_resolver_chaos::Violation {
    assert_eq!(
        report.violation_count, 1,
        "one violation expected:\n{report}"
    );
    let v = &report.violations[0];
    assert_eq!(v.invariant, invariant, "{report}");
    v
}

fn lines(v: &token_resolver_chaos::Violation) -> Vec<usize> {
    v.events.iter().map(|e| e.line).collect()
}

/// A player banned, then let in on another node 400 ms after the ban was acknowledged: a late
/// admission, named by both lines, 400 ms against the 250 ms bound.
#[test]
fn an_admission_begun_past_the_bound_after_a_ban_is_reported() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).ban(ms(90), ms(100), 7);
    let ban = h.line();
    h.connect("node-2", ms(500), ms(510), "t1", "s1");
    let connect = h.line();
    h.told(ms(520), "node-2", Some("s1"), SessionEventKind::Kicked);
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LateAdmission);
    assert_eq!(lines(v), [ban, connect]);
    assert_eq!(v.delay, Some(Duration::from_millis(400)));
    assert_eq!(v.bound, Some(Duration::from_millis(250)));
    assert!(
        v.explanation.contains("t1") && v.explanation.contains("user 7"),
        "{}",
        v.explanation
    );
}

/// An admission begun before the acknowledgement and answered after it raced the ban; one
/// begun within the bound after it is allowed too, however late its answer. Neither is a
/// violation, and the session the racing connect opened is kicked within the bound.
#[test]
fn a_race_within_the_bound_passes() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .connect("node-1", ms(95), ms(130), "t1", "s1")
        .ban(ms(90), ms(100), 7)
        .admit(OpKind::Authorize, "sidecar", ms(300), ms(301), "t1", None)
        .told(ms(140), "node-1", Some("s1"), SessionEventKind::Kicked)
        // Begun within the bound, answered long after it (a slow integrator): judged by its start.
        .admit(OpKind::Resolve, "node-2", ms(340), ms(2000), "t1", None);
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
    let across = report
        .worst
        .iter()
        .find(|w| w.kind == BoundKind::AcrossProcesses)
        .unwrap();
    assert_eq!(
        across.admission,
        Some(Duration::from_millis(240)),
        "the worst admission after the ack"
    );
    assert_eq!(
        across.session,
        Some(Duration::from_millis(40)),
        "the kick after the ack"
    );
}

/// A revocation acknowledged by a node's admin endpoint holds on that node within 100 ms and
/// on the others within 250 ms: 150 ms later, the same node is late and another is not.
#[test]
fn the_acknowledging_process_is_held_to_the_same_process_bound() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .revoke_user("node-1", ms(95), ms(100), 7);
    h.admit(OpKind::Join, "node-2", ms(250), ms(251), "t1", Some("s2"));
    h.admit(OpKind::Join, "node-1", ms(250), ms(251), "t1", Some("s1"));
    let late = h.line();
    h.told(ms(260), "node-1", Some("s1"), SessionEventKind::Kicked);
    h.told(ms(260), "node-2", Some("s2"), SessionEventKind::Kicked);
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LateAdmission);
    assert_eq!(v.events[1].line, late);
    assert_eq!(v.bound, Some(Duration::from_millis(100)));
}

/// A session holding the banned user's token that is never kicked nor told anything.
#[test]
fn a_session_never_closed_is_reported() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .connect("node-1", ms(10), ms(12), "t1", "s1");
    let connect = h.line();
    // Told before the ban began: no answer to it.
    h.told(ms(50), "node-1", None, SessionEventKind::Resync);
    h.ban(ms(90), ms(100), 7);
    let ban = h.line();
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::SessionNotTold);
    assert_eq!(lines(v), [ban, connect]);
    assert!(v.explanation.contains("never"), "{}", v.explanation);
}

/// A session kicked 600 ms after the logout of its token: told, but too late.
#[test]
fn a_session_told_past_the_bound_is_reported_with_its_delay() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .connect("node-1", ms(10), ms(12), "t1", "s1")
        .logout(ms(90), ms(100), "t1");
    h.told(ms(700), "node-1", Some("s1"), SessionEventKind::Kicked);
    let kick = h.line();
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::SessionNotTold);
    assert_eq!(v.events.last().unwrap().line, kick);
    assert_eq!(v.delay, Some(Duration::from_millis(600)));
}

/// A session kicked when nobody revoked its token, user or login session, on healthy links.
#[test]
fn a_spurious_kick_is_reported() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .login(ms(2), "t2", 8)
        .connect("node-1", ms(10), ms(12), "t1", "s1");
    h.connect("node-1", ms(10), ms(12), "t2", "s2")
        .ban(ms(90), ms(100), 8);
    h.told(ms(110), "node-1", Some("s2"), SessionEventKind::Kicked);
    h.told(ms(110), "node-1", Some("s1"), SessionEventKind::Kicked);
    let kick = h.line();
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::SpuriousKick);
    assert_eq!(v.events[1].line, kick);
    assert!(v.explanation.contains("s1"), "{}", v.explanation);
    assert_eq!(report.kicks, 2);
}

/// Redis dies, a ban is acknowledged meanwhile; once Redis is back, node-1 tells its sessions
/// `resync`, and the re-check kicks the banned player and keeps the other. Another node lets
/// the banned token in while Redis is down and within the recovery bound after: all allowed.
#[test]
fn a_kick_after_a_lost_channel_rechecked_with_resync_passes() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).login(ms(2), "t2", 8);
    h.connect("node-1", ms(10), ms(12), "t1", "s1")
        .connect("node-1", ms(10), ms(12), "t2", "s2");
    h.fault(ms(50), "redis", "f1", FaultKind::RedisKilled, &[])
        .ban(ms(90), ms(100), 7);
    h.admit(OpKind::Resolve, "sidecar", ms(1000), ms(1001), "t1", None);
    h.heal(ms(2000), "redis", "f1");
    h.told(ms(2500), "node-1", None, SessionEventKind::Resync);
    h.told(ms(2600), "node-1", Some("s1"), SessionEventKind::Kicked);
    h.admit(OpKind::Authorize, "sidecar", ms(9000), ms(9001), "t1", None);
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.kicks, 1);
    let recovery = report
        .worst
        .iter()
        .find(|w| w.kind == BoundKind::Recovery)
        .unwrap();
    assert_eq!(recovery.admission, Some(Duration::from_millis(7000)));
    assert_eq!(
        recovery.session,
        Some(Duration::from_millis(500)),
        "the resync, 500 ms after the heal"
    );
}

/// The same lost channel with a kick nobody's revocation explains: a violation by default
/// (a node re-checks, it does not kick), forgiven under a stated rate.
#[test]
fn a_kick_in_a_lost_channel_is_forgiven_only_within_the_stated_rate() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).login(ms(2), "t2", 8);
    h.connect("node-1", ms(10), ms(12), "t1", "s1")
        .connect("node-1", ms(10), ms(12), "t2", "s2");
    h.fault(
        ms(50),
        "relay-node-1-redis",
        "f1",
        FaultKind::LinkFrozen,
        &["node-1"],
    );
    h.heal(ms(4000), "relay-node-1-redis", "f1");
    h.told(ms(5000), "node-1", Some("s2"), SessionEventKind::Kicked);
    let strict = check(&h.events, &Bounds::default());
    let v = only(&strict, Invariant::SpuriousKick);
    assert!(v.explanation.contains("f1"), "{}", v.explanation);
    // Half of two sessions is one kick: a second one is not forgiven.
    h.told(ms(5000), "node-1", Some("s1"), SessionEventKind::Kicked);
    let report = check(
        &h.events,
        &Bounds {
            spurious_kick_rate: 0.5,
            ..Bounds::default()
        },
    );
    assert_eq!(
        (report.kicks_tolerated, report.violation_count),
        (1, 1),
        "{report}"
    );
    h.events.pop();
    let lenient = Bounds {
        spurious_kick_rate: 0.5,
        ..Bounds::default()
    };
    let report = check(&h.events, &lenient);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.kicks_tolerated, 1);
}

/// A ban acknowledged long before node-1 is killed and restarted must still hold on it after:
/// a connect there after the restart is a revocation lost over the restart.
#[test]
fn a_revocation_lost_over_a_restart_is_reported() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).ban(ms(90), ms(100), 7);
    let ban = h.line();
    h.fault(ms(1000), "node-1", "f1", FaultKind::ProcessKilled, &[]);
    let kill = h.line();
    h.heal(ms(2000), "node-1", "f1");
    h.connect("node-1", ms(2100), ms(2102), "t1", "s1");
    let connect = h.line();
    h.told(ms(2110), "node-1", Some("s1"), SessionEventKind::Kicked);
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LostOverRestart);
    assert_eq!(lines(v), [ban, connect, kill]);
    assert!(v.explanation.contains("restarted"), "{}", v.explanation);
}

/// A kill of another process does not excuse node-1, and a kill of node-1 that began while
/// the ban travelled extends its bound to the recovery after the restart.
#[test]
fn a_restart_during_the_revocation_extends_only_its_own_process() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).ban(ms(90), ms(100), 7);
    h.fault(ms(150), "node-1", "f1", FaultKind::ProcessKilled, &[])
        .heal(ms(1000), "node-1", "f1");
    h.admit(OpKind::Authorize, "node-1", ms(3000), ms(3001), "t1", None);
    h.admit(OpKind::Authorize, "node-2", ms(3000), ms(3001), "t1", None);
    let late = h.line();
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LateAdmission);
    assert_eq!(v.events[1].line, late);
    // Past the recovery after that restart, node-1 is late too: late, not lost over a restart
    // that came before the ban had to hold.
    h.admit(
        OpKind::Authorize,
        "node-1",
        ms(12_000),
        ms(12_001),
        "t1",
        None,
    );
    let report = check(&h.events, &Bounds::default());
    assert_eq!(report.violation_count, 2, "{report}");
    assert_eq!(report.of(Invariant::LateAdmission).count(), 2, "{report}");
}

/// Unban re-allows: a token from a login after the unban is admitted; the banned token is not.
#[test]
fn an_unban_then_a_new_login_admits_but_the_banned_token_stays_revoked() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .ban(ms(90), ms(100), 7)
        .unban(ms(1000), ms(1001), 7)
        .login(ms(1100), "t2", 7);
    h.connect("node-1", ms(1200), ms(1201), "t2", "s2");
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
    h.admit(OpKind::Authorize, "sidecar", ms(1300), ms(1301), "t1", None);
    let old = h.line();
    let report = check(&h.events, &Bounds::default());
    assert_eq!(only(&report, Invariant::LateAdmission).events[1].line, old);
}

/// A revocation of a user names the tokens they held then, not those of a later login.
#[test]
fn a_user_revocation_does_not_name_a_later_login() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .revoke_user("node-1", ms(95), ms(100), 7)
        .login(ms(500), "t2", 7);
    h.connect("node-1", ms(600), ms(601), "t2", "s2");
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
}

/// A login under way when an unban began may have been answered after it: its token is not
/// taken for one the ban revoked, though the login began before the ban's acknowledgement.
#[test]
fn a_login_under_way_when_an_unban_began_is_not_held_to_the_ban() {
    let mut h = H::default();
    h.ban(ms(90), ms(100), 7).unban(ms(1000), ms(1001), 7);
    h.login(ms(1100), "t2", 7);
    if let token_resolver_chaos::Kind::Op(op) = &mut h.events.last_mut().unwrap().kind {
        op.start_us = ms(95);
    }
    h.admit(OpKind::Authorize, "sidecar", ms(1200), ms(1201), "t2", None);
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
}

/// A link frozen while a ban travels: node-2 may admit until 10 s after the heal, not later;
/// the violation counts from the heal, against the recovery bound.
#[test]
fn during_a_fault_the_bound_is_the_recovery_from_its_heal() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7);
    h.fault(
        ms(50),
        "relay-api-node-2",
        "f1",
        FaultKind::LinkFrozen,
        &["node-2"],
    )
    .ban(ms(90), ms(100), 7);
    h.heal(ms(3000), "relay-api-node-2", "f1");
    let heal = h.line();
    h.admit(OpKind::Resolve, "node-2", ms(5000), ms(5001), "t1", None);
    h.admit(OpKind::Resolve, "node-1", ms(400), ms(401), "t1", None);
    let fast = h.line();
    h.admit(
        OpKind::Resolve,
        "node-2",
        ms(14_000),
        ms(14_001),
        "t1",
        None,
    );
    let slow = h.line();
    let report = check(&h.events, &Bounds::default());
    assert_eq!(report.violation_count, 2, "{report}");
    let node1 = report
        .violations
        .iter()
        .find(|v| v.events[1].line == fast)
        .unwrap();
    assert_eq!(
        node1.bound,
        Some(Duration::from_millis(250)),
        "node-1 is not behind the frozen link"
    );
    let node2 = report
        .violations
        .iter()
        .find(|v| v.events[1].line == slow)
        .unwrap();
    assert_eq!(node2.bound, Some(Duration::from_secs(10)));
    assert_eq!(node2.delay, Some(Duration::from_secs(11)));
    assert!(
        node2.events.iter().any(|e| e.line == heal),
        "names the heal"
    );
}

/// A fault that never heals leaves the revocations it covers unjudged, not violated.
#[test]
fn a_fault_that_never_heals_leaves_its_revocations_unjudged() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .fault(ms(50), "redis", "f1", FaultKind::RedisKilled, &[])
        .ban(ms(90), ms(100), 7);
    h.admit(
        OpKind::Resolve,
        "node-2",
        ms(60_000),
        ms(60_001),
        "t1",
        None,
    );
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.unjudged, 1);
}

/// A token's expiry revokes it at `exp` plus the skew: sessions are told `reauth_required`
/// then, and a refresh moves them on; an admission past the skew and the bound is late.
#[test]
fn an_expiry_is_a_revocation_at_exp_plus_the_skew() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).login(ms(2), "t2", 7);
    h.connect("node-1", ms(10), ms(12), "t1", "s1")
        .connect("node-1", ms(10), ms(12), "t1", "s2");
    h.expiry(ms(1000), "t1");
    h.admit(
        OpKind::Join,
        "node-2",
        ms(30_900),
        ms(30_901),
        "t1",
        Some("s3"),
    );
    h.told(
        ms(30_950),
        "node-2",
        Some("s3"),
        SessionEventKind::ReauthRequired,
    );
    h.told(
        ms(31_020),
        "node-1",
        Some("s1"),
        SessionEventKind::ReauthRequired,
    );
    h.admit(
        OpKind::Refresh,
        "node-1",
        ms(31_030),
        ms(31_040),
        "t2",
        Some("s2"),
    );
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
    h.admit(
        OpKind::Authorize,
        "sidecar",
        ms(31_200),
        ms(31_201),
        "t1",
        None,
    );
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LateAdmission);
    assert_eq!(v.bound, Some(Duration::from_millis(100)));
    assert_eq!(v.delay, Some(Duration::from_millis(200)));
}

/// A revocation that was not acknowledged (a 5xx) binds nothing, but it explains a kick.
#[test]
fn an_unacknowledged_revocation_binds_nothing_but_explains_a_kick() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .connect("node-1", ms(10), ms(12), "t1", "s1");
    h.ban(ms(90), ms(100), 7);
    if let token_resolver_chaos::Kind::Op(op) = &mut h.events.last_mut().unwrap().kind {
        op.outcome = token_resolver_chaos::Outcome::Failed;
    }
    h.admit(OpKind::Authorize, "sidecar", ms(5000), ms(5001), "t1", None);
    h.told(ms(6000), "node-1", Some("s1"), SessionEventKind::Kicked);
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.revocations, 0);
}

/// The printed report: a summary, the worst delay for each bound, `violations: N`, and each
/// violation with its invariant, lines and delay against the bound.
#[test]
fn the_report_prints_the_summary_and_each_violation() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).ban(ms(90), ms(100), 7).fault(
        ms(400),
        "api",
        "f1",
        FaultKind::IntegratorSlow,
        &[],
    );
    h.heal(ms(500), "api", "f1")
        .admit(OpKind::Authorize, "sidecar", ms(700), ms(701), "t1", None);
    let text = check(&h.events, &Bounds::default()).to_string();
    for expected in [
        "operations: 3, faults: 1, admissions: 1, revocations: 1",
        "worst same process (bound 100.0 ms)",
        "worst across processes (bound 250.0 ms): admission 600.0 ms",
        "worst after a fault heals (bound 10000.0 ms)",
        "violations: 1\n",
        "late_admission: authorize of t1 on sidecar began 600.0 ms after the ban (user 7, by api) was acknowledged [line 2 (t=100000 us), line 5 (t=701000 us)] delay 600.0 ms > bound 250.0 ms",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
    }
}

/// A fault healed shortly before a revocation was acknowledged still extends its window: the
/// processes may be catching up for `recovery` after the heal.
#[test]
fn a_fault_healed_just_before_the_ack_still_extends_the_window() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .fault(ms(10), "redis", "f1", FaultKind::RedisKilled, &[])
        .heal(ms(80), "redis", "f1");
    h.ban(ms(90), ms(100), 7)
        .admit(OpKind::Resolve, "node-2", ms(5000), ms(5001), "t1", None);
    assert!(check(&h.events, &Bounds::default()).is_ok());
    let short = Bounds {
        recovery: Duration::from_millis(15),
        ..Bounds::default()
    };
    let report = check(&h.events, &short);
    assert_eq!(
        only(&report, Invariant::LateAdmission).bound,
        Some(Duration::from_millis(250))
    );
    // Counted from the acknowledgement (100 ms), which came after the heal (80 ms): 14.9 s
    // against the 9.98 s left of the recovery then.
    h.admit(
        OpKind::Resolve,
        "node-2",
        ms(15_000),
        ms(15_001),
        "t1",
        None,
    );
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LateAdmission);
    assert_eq!(v.delay, Some(Duration::from_millis(14_900)));
    assert_eq!(v.bound, Some(Duration::from_millis(9_980)));
}

/// A logout that names a login session revokes every token that login took, and no other of
/// the same user's.
#[test]
fn a_logout_of_a_login_session_names_each_of_its_tokens() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .login(ms(2), "t2", 7)
        .login(ms(3), "t3", 7);
    for (event, sid) in h.events.iter_mut().zip(["l1", "l1", "l2"]) {
        if let token_resolver_chaos::Kind::Op(op) = &mut event.kind {
            op.sid = Some(sid.to_owned());
        }
    }
    let mut logout =
        token_resolver_chaos::Op::new(OpKind::Logout, ms(90), token_resolver_chaos::Outcome::Ok);
    logout.user = Some(7);
    logout.sid = Some("l1".to_owned());
    h.push(ms(100), "api", token_resolver_chaos::Kind::Op(logout));
    h.admit(OpKind::Authorize, "sidecar", ms(1000), ms(1001), "t3", None);
    h.admit(OpKind::Authorize, "sidecar", ms(1000), ms(1001), "t2", None);
    let late = h.line();
    let report = check(&h.events, &Bounds::default());
    let v = only(&report, Invariant::LateAdmission);
    assert_eq!(v.events[1].line, late);
    assert!(
        v.explanation.contains("login session l1 of user 7"),
        "{}",
        v.explanation
    );
}

/// A session told `reauth_required` for its expired token, then named by a logout before it
/// refreshed: told already (it cannot go on without a new token), not a session left untold.
/// One told `reauth_required` only before it took the token (an earlier one) is not.
#[test]
fn a_session_waiting_for_reauth_when_a_logout_names_it_was_told() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .connect("sidecar", ms(10), ms(12), "t1", "c1")
        .expiry(ms(1000), "t1")
        .told(
            ms(31_000),
            "sidecar",
            Some("c1"),
            SessionEventKind::ReauthRequired,
        )
        .logout(ms(31_400), ms(31_500), "t1");
    let report = check(&h.events, &Bounds::default());
    assert!(report.is_ok(), "{report}");

    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .login(ms(2), "t2", 7)
        .connect("sidecar", ms(10), ms(12), "t1", "c1")
        .told(
            ms(20),
            "sidecar",
            Some("c1"),
            SessionEventKind::ReauthRequired,
        )
        .admit(OpKind::Refresh, "sidecar", ms(30), ms(31), "t2", Some("c1"))
        .logout(ms(400), ms(500), "t2");
    let report = check(&h.events, &Bounds::default());
    only(&report, Invariant::SessionNotTold);
}
