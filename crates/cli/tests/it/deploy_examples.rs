//! The deployment examples under `deploy/` against the binary they deploy: every flag the
//! Agones GameServer and the systemd unit give `token-resolver` is one its `--help` lists (with
//! a value where it takes one), the probes ask the port `--admin-listen` opens, the game is told
//! the port `--listen` opens, the sidecar has the native-sidecar shape, and `systemd-analyze
//! verify` has nothing to say about the unit.

use token_resolver_support as support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

/// The `token-resolver` binary.
const BIN: &str = env!("CARGO_BIN_EXE_token-resolver");

/// The repository's `deploy/`.
fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// `token-resolver ARGS --help`, or `None` when that is no command of the binary.
fn help(args: &[&str]) -> Option<String> {
    let output = Command::new(BIN).args(args).arg("--help").output().unwrap();
    output
        .status
        .success()
        .then(|| String::from_utf8(output.stdout).unwrap())
}

/// The long flags a `--help` lists, each with whether it takes a value (`--listen <LISTEN>`).
fn flags_in_help(help: &str) -> BTreeMap<String, bool> {
    let mut flags = BTreeMap::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        let Some(long) = line.split([' ', ',']).find(|w| w.starts_with("--")) else {
            continue;
        };
        let after = &line[line.find(long).unwrap() + long.len()..];
        flags.insert(long.to_owned(), after.starts_with(" <"));
    }
    flags
}

/// A command line as the binary is given it (without the binary's own path): global flags, a
/// subcommand, its flags. Every flag is checked against `--help` of the binary (before the
/// subcommand) or of the subcommand; the flags with their values, or what is wrong.
fn checked(args: &[String]) -> Result<BTreeMap<String, Option<String>>, String> {
    let global = flags_in_help(&help(&[]).expect("the binary's --help"));
    // The global flags come first; the subcommand is the first word that is not one of them
    // or a global flag's value.
    let mut at = 0;
    while at < args.len() && args[at].starts_with('-') {
        let takes_value = !args[at].contains('=') && global.get(&args[at]) == Some(&true);
        at += if takes_value { 2 } else { 1 };
    }
    if at >= args.len() {
        return Err(format!("no subcommand in {args:?}"));
    }
    let subcommand = args[at].as_str();
    let Some(sub_help) = help(&[subcommand]) else {
        return Err(format!("{subcommand:?} is not a command of token-resolver"));
    };
    let mut seen = BTreeMap::new();
    flags_of(&args[..at], &global, "token-resolver", &mut seen)?;
    let sub_flags = flags_in_help(&sub_help);
    flags_of(
        &args[at + 1..],
        &sub_flags,
        &format!("token-resolver {subcommand}"),
        &mut seen,
    )?;
    Ok(seen)
}

/// The flags of `args`, each checked against `known` (from `whose` --help), into `seen`.
fn flags_of(
    args: &[String],
    known: &BTreeMap<String, bool>,
    whose: &str,
    seen: &mut BTreeMap<String, Option<String>>,
) -> Result<(), String> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if !arg.starts_with("--") {
            return Err(format!("{arg:?} is not a flag of {whose}"));
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        let takes_value = *known
            .get(name)
            .ok_or_else(|| format!("{name} is not a flag of {whose} (see its --help)"))?;
        let value = match (takes_value, inline) {
            (true, Some(value)) => Some(value),
            (true, None) => Some(
                args.next()
                    .ok_or_else(|| format!("{name} of {whose} needs a value"))?
                    .clone(),
            ),
            (false, None) => None,
            (false, Some(_)) => return Err(format!("{name} of {whose} takes no value")),
        };
        seen.insert(name.to_owned(), value);
    }
    Ok(())
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|&a| a.to_owned()).collect()
}

#[test]
fn the_checker_refuses_a_flag_the_binary_does_not_have() {
    let good = checked(&strings(&[
        "--log-format=json",
        "sidecar",
        "--listen",
        "127.0.0.1:7360",
        "--admin-listen=0.0.0.0:9360",
        "--allow-non-loopback",
    ]))
    .unwrap();
    assert_eq!(good["--log-format"].as_deref(), Some("json"));
    assert_eq!(good["--listen"].as_deref(), Some("127.0.0.1:7360"));
    assert_eq!(good["--admin-listen"].as_deref(), Some("0.0.0.0:9360"));
    assert_eq!(good["--allow-non-loopback"], None);
    let global_value_then_subcommand =
        checked(&strings(&["--log-format", "text", "sidecar"])).unwrap();
    assert_eq!(
        global_value_then_subcommand["--log-format"].as_deref(),
        Some("text")
    );

    for (bad, why) in [
        (
            vec!["sidecar", "--listen-addr", "127.0.0.1:1"],
            "--listen-addr",
        ),
        (vec!["--verbose", "sidecar"], "--verbose"),
        (vec!["sidecar", "--listen"], "needs a value"),
        (
            vec!["sidecar", "--allow-non-loopback=yes"],
            "takes no value",
        ),
        (vec!["side-car", "--listen", "127.0.0.1:1"], "side-car"),
    ] {
        let error = checked(&strings(&bad)).expect_err(why);
        assert!(error.contains(why), "{bad:?}: {error}");
    }
}

/// The port of a `host:port` flag value.
fn port_of(value: &str) -> u16 {
    value
        .parse::<SocketAddr>()
        .unwrap_or_else(|e| panic!("{value:?}: {e}"))
        .port()
}

/// A probe's port: a number, or the name of one of the container's ports.
fn probe_port(container: &Yaml, probe: &str) -> u16 {
    let port = &container[probe]["httpGet"]["port"];
    if let Some(port) = port.as_i64() {
        return u16::try_from(port).unwrap();
    }
    let name = port
        .as_str()
        .unwrap_or_else(|| panic!("{probe} has no port"));
    let ports = container["ports"].as_vec().expect("named ports");
    let found = ports.iter().find(|p| p["name"].as_str() == Some(name));
    u16::try_from(
        found.expect("the probe's named port")["containerPort"]
            .as_i64()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn the_agones_game_server_runs_the_sidecar_natively_with_flags_and_ports_the_binary_has() {
    let dir = deploy().join("agones");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let docs =
            YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in docs {
            if doc["kind"].as_str() != Some("GameServer") {
                continue;
            }
            let shown = path.display();
            let pod = &doc["spec"]["template"]["spec"];
            let sidecars: Vec<&Yaml> = (pod["initContainers"].as_vec().into_iter().flatten())
                .filter(|c| {
                    c["args"]
                        .as_vec()
                        .is_some_and(|args| args.iter().any(|a| a.as_str() == Some("sidecar")))
                })
                .collect();
            assert_eq!(
                sidecars.len(),
                1,
                "{shown}: one token-resolver init container"
            );
            let sidecar = sidecars[0];
            assert_eq!(
                sidecar["restartPolicy"].as_str(),
                Some("Always"),
                "{shown}: a native sidecar is an init container with restartPolicy: Always"
            );
            let args: Vec<String> = (sidecar["args"].as_vec().unwrap().iter())
                .map(|a| a.as_str().expect("every arg a string").to_owned())
                .collect();
            let flags = checked(&args).unwrap_or_else(|e| panic!("{shown}: {e}"));

            assert_eq!(
                sidecar["startupProbe"]["httpGet"]["path"].as_str(),
                Some("/readyz"),
                "{shown}: the game container waits for the sidecar's /readyz"
            );
            let admin = flags["--admin-listen"]
                .as_deref()
                .unwrap_or_else(|| panic!("{shown}: the probes need --admin-listen"));
            for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                if !sidecar[probe].is_badvalue() {
                    assert_eq!(
                        probe_port(sidecar, probe),
                        port_of(admin),
                        "{shown}: {probe} asks the port of --admin-listen"
                    );
                }
            }

            let game_name = doc["spec"]["container"]
                .as_str()
                .unwrap_or_else(|| panic!("{shown}: spec.container names the game"));
            let containers = pod["containers"].as_vec().expect("containers");
            let game = (containers.iter())
                .find(|c| c["name"].as_str() == Some(game_name))
                .unwrap_or_else(|| panic!("{shown}: spec.container {game_name:?} is no container"));
            let url = (game["env"].as_vec().into_iter().flatten())
                .find(|e| e["name"].as_str() == Some("TOKEN_RESOLVER_URL"))
                .and_then(|e| e["value"].as_str())
                .unwrap_or_else(|| panic!("{shown}: the game is given TOKEN_RESOLVER_URL"));
            let listen = flags["--listen"].as_deref().unwrap_or("127.0.0.1:7360");
            assert_eq!(
                url,
                format!("http://{listen}"),
                "{shown}: the game calls the sidecar where --listen opens it"
            );
        }
    }
    assert!(files > 0, "no example in {}", dir.display());
}

/// The unit's `[Service]` settings, continuation lines joined, each key with its values.
fn service_settings(unit: &str) -> BTreeMap<String, Vec<String>> {
    let joined = unit.replace("\\\n", " ");
    let mut settings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut in_service = false;
    for line in joined.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service && !line.starts_with('#') {
            if let Some((key, value)) = line.split_once('=') {
                settings
                    .entry(key.to_owned())
                    .or_default()
                    .push(value.to_owned());
            }
        }
    }
    settings
}

#[test]
fn the_systemd_unit_is_hardened_starts_the_sidecar_with_real_flags_and_verifies() {
    let path = deploy().join("systemd/token-resolver-sidecar.service");
    let unit = std::fs::read_to_string(&path).unwrap();
    let settings = service_settings(&unit);
    let one = |key: &str| -> &str {
        match settings.get(key).map(Vec::as_slice) {
            Some([value]) => value,
            other => panic!("{key}: {other:?}"),
        }
    };
    for (key, value) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(one(key), value, "{key}");
    }
    let exec: Vec<String> = one("ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(exec[0], "/usr/local/bin/token-resolver");
    let flags = checked(&exec[1..]).unwrap_or_else(|e| panic!("ExecStart: {e}"));
    let drain: u64 = flags["--drain-secs"].as_deref().unwrap().parse().unwrap();
    let stop: u64 = one("TimeoutStopSec").parse().unwrap();
    assert!(
        stop > drain,
        "systemd waits longer ({stop} s) than the sidecar drains ({drain} s) before SIGKILL"
    );

    let found = support::program("systemd-analyze");
    let Some(systemd_analyze) = found else {
        support::present(false, "systemd-analyze", "systemd");
        return;
    };
    // verify checks that ExecStart's program exists: a copy of the unit names the built one.
    let dir = support::TempDir::new("deploy-unit");
    let copy = dir.join("token-resolver-sidecar.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/token-resolver", BIN)).unwrap();
    let output = Command::new(systemd_analyze)
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}
