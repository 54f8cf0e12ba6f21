//! The history's line format: what is written is read back the same, and a line that is not a
//! valid event is refused with its line number.

use token_resolver_chaos::{
    check_file, read_history, write_history, Bounds, FaultKind, HistoryError, Kind, OpKind,
    SessionEventKind, MAX_LINE_BYTES,
};

use crate::{ms, H};

fn every_kind() -> H {
    let mut h = H::default();
    h.login(ms(1), "t1", 7)
        .connect("node-1", ms(2), ms(3), "t1", "s1")
        .admit(OpKind::Join, "node-1", ms(4), ms(5), "t1", Some("s1"))
        .admit(OpKind::Resolve, "sidecar", ms(4), ms(5), "t1", Some("s9"))
        .ban(ms(10), ms(11), 7)
        .unban(ms(20), ms(21), 7)
        .logout(ms(30), ms(31), "t1")
        .revoke_user("node-2", ms(32), ms(33), 7)
        .told(ms(12), "node-1", Some("s1"), SessionEventKind::Kicked)
        .told(ms(13), "sidecar", None, SessionEventKind::Resync)
        .fault(
            ms(40),
            "relay-node-1-redis",
            "f1",
            FaultKind::Integrator5xx,
            &["node-1"],
        )
        .heal(ms(41), "relay-node-1-redis", "f1")
        .expiry(ms(50), "t1");
    h
}

/// Every kind of event, written and read back, is the same history; the line puts the time
/// and the process first.
#[test]
fn a_history_round_trips_through_write_and_read() {
    let h = every_kind();
    let mut out = Vec::new();
    write_history(&mut out, &h.events).unwrap();
    let text = String::from_utf8(out.clone()).unwrap();
    assert_eq!(text.lines().count(), h.events.len());
    assert!(
        text.starts_with(r#"{"t_us":1000,"process":"api","kind":"op","op":"login""#),
        "{text}"
    );
    assert!(
        text.contains(r#""what":"integrator_5xx","affects":["node-1"]"#),
        "{text}"
    );
    assert_eq!(read_history(&out[..]).unwrap(), h.events);
}

fn refused(text: &str) -> HistoryError {
    read_history(text.as_bytes()).expect_err("refused")
}

/// A kind this version does not know is refused with its line number and its name.
#[test]
fn an_unknown_kind_is_refused_with_its_line() {
    let good = every_kind().events[0].to_line();
    let e = refused(&format!(
        "{good}\n{{\"t_us\":1,\"process\":\"node-1\",\"kind\":\"teleport\"}}\n"
    ));
    assert!(
        matches!(&e, HistoryError::UnknownKind { line: 2, kind } if kind == "teleport"),
        "{e}"
    );
    assert_eq!(e.to_string(), "line 2: unknown kind `teleport`");
}

/// A line over 64 KiB is refused before it is parsed, with its line number.
#[test]
fn a_line_over_64_kib_is_refused_with_its_line() {
    let good = every_kind().events[0].to_line();
    let long = format!(
        "{{\"t_us\":1,\"process\":\"{}\",\"kind\":\"expiry\",\"token\":\"t1\"}}",
        "x".repeat(MAX_LINE_BYTES)
    );
    let e = refused(&format!("{good}\n{good}\n{long}\n{good}\n"));
    assert!(matches!(e, HistoryError::LineTooLong { line: 3 }), "{e}");
    // Just under the limit is a line like any other.
    let process = "x".repeat(MAX_LINE_BYTES - 70);
    let fits =
        format!("{{\"t_us\":1,\"process\":\"{process}\",\"kind\":\"expiry\",\"token\":\"t1\"}}");
    assert!(fits.len() <= MAX_LINE_BYTES);
    assert_eq!(read_history(fits.as_bytes()).unwrap().len(), 1);
}

/// Each malformed line is refused as `Malformed` with its number and what is wrong.
#[test]
fn malformed_lines_are_refused_with_their_line_and_reason() {
    let good = every_kind().events[0].to_line();
    let cases: [(&str, &str); 9] = [
        ("not json", "not a JSON object"),
        (
            r#"{"process":"api","kind":"expiry","token":"t1"}"#,
            "missing field `t_us`",
        ),
        (
            r#"{"t_us":-1,"process":"api","kind":"expiry","token":"t1"}"#,
            "`t_us` is not a u64",
        ),
        (
            r#"{"t_us":1,"process":"api","kind":"expiry","token":"t1","color":"red"}"#,
            "unknown field `color`",
        ),
        (
            r#"{"t_us":1,"process":"node-1","kind":"op","op":"connect","start_us":0,"outcome":"ok","token":"t1"}"#,
            "a `connect` must name its `session`",
        ),
        (
            r#"{"t_us":1,"process":"node-1","kind":"op","op":"connect","start_us":5,"outcome":"ok","token":"t1","session":"s1"}"#,
            "`start_us` 5 is after",
        ),
        (
            r#"{"t_us":1,"process":"node-1","kind":"op","op":"fly","start_us":0,"outcome":"ok"}"#,
            "unknown variant `fly`",
        ),
        (
            r#"{"t_us":1,"process":"node-1","kind":"session","event":"kicked"}"#,
            "must name its `session`",
        ),
        (
            r#"{"t_us":1,"process":"redis","kind":"fault_end","fault":"f9"}"#,
            "fault `f9` ends before it began",
        ),
    ];
    for (bad, reason) in cases {
        let e = refused(&format!("{good}\n{good}\n{bad}\n"));
        assert!(
            matches!(e, HistoryError::Malformed { line: 3, .. }),
            "{bad}: {e:?}"
        );
        assert!(
            e.to_string().starts_with("line 3: ") && e.to_string().contains(reason),
            "{bad}: {e}"
        );
        assert_eq!(e.line(), Some(3));
    }
    let e = read_history(&b"\xff\xfe\n"[..]).unwrap_err();
    assert_eq!(e.to_string(), "line 1: not UTF-8");
}

/// `check_file` reads a history from disk and checks it; a missing file is an I/O error.
#[test]
fn check_file_reads_and_checks_a_history() {
    let mut h = H::default();
    h.login(ms(1), "t1", 7).ban(ms(90), ms(100), 7).admit(
        OpKind::Authorize,
        "sidecar",
        ms(900),
        ms(901),
        "t1",
        None,
    );
    let path = std::env::temp_dir().join(format!("chaos-history-{}.jsonl", std::process::id()));
    let mut out = Vec::new();
    write_history(&mut out, &h.events).unwrap();
    std::fs::write(&path, out).unwrap();
    let report = check_file(&path, &Bounds::default());
    std::fs::remove_file(&path).unwrap();
    let report = report.unwrap();
    assert_eq!(report.violation_count, 1, "{report}");
    assert!(matches!(h.events[2].kind, Kind::Op(_)));
    let missing = check_file(path, &Bounds::default()).unwrap_err();
    assert!(matches!(missing, HistoryError::Io(_)) && missing.line().is_none());
}
