//! `alerts.yaml` as Prometheus reads it, and its unit tests in `alerts_test.yaml`.

use std::path::PathBuf;
use std::process::Command;

use token_resolver_support as support;

use super::{deploy, program, ALERTS};

/// `promtool` when installed; otherwise the test is skipped with a note (failed under CI).
fn promtool() -> Option<PathBuf> {
    let found = program("promtool");
    support::present(found.is_some(), "promtool", "prometheus").then(|| found.unwrap())
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    // Pins down alerts.yaml as Prometheus reads it and its unit tests: every alert fires where
    // alerts_test.yaml says and stays silent where it says, with its labels and annotations.
    let Some(promtool) = promtool() else { return };
    let dir = deploy().join("prometheus");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts_test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "promtool {}: {text}", args.join(" "));
        assert!(
            text.contains("SUCCESS"),
            "promtool {}: {text}",
            args.join(" ")
        );
    }
    // Every alert has its own unit tests: at least one case where it fires and one where it
    // is expected silent.
    let tests = std::fs::read_to_string(dir.join("alerts_test.yaml")).unwrap();
    for alert in ALERTS {
        let cases: Vec<&str> = tests
            .split(&format!("alertname: {alert}\n"))
            .skip(1)
            .map(|after| after.split("- eval_time").next().unwrap_or(after))
            .collect();
        assert!(
            cases
                .iter()
                .any(|c| c.trim_start().starts_with("exp_alerts:\n")),
            "{alert} has no case where it fires"
        );
        assert!(
            cases
                .iter()
                .any(|c| c.trim_start().starts_with("exp_alerts: []")),
            "{alert} has no case where it stays silent"
        );
    }
}
