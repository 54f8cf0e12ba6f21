//! `token-resolver run [sidecar options] -- GAME_SERVER ARGS...`: the co-process wrapper. It
//! owns the order of the two processes' lives: the sidecar first (in this process, the same
//! serving code as `sidecar`), the game server as a child once the sidecar's `/readyz` answers
//! ready, with `TOKEN_RESOLVER_URL` in its environment; SIGTERM and SIGINT go to the game
//! server; when it exits, the sidecar drains and the wrapper exits with the game server's
//! status. What the sidecar serves and how it drains stays in `sidecar`.
//!
//! Signals: without a terminal on stdin the game server gets a process group of its own, so that
//! a signal sent to the wrapper's group reaches it once, as the wrapper forwards it; at a
//! terminal it stays in the wrapper's group (it may read the terminal, Ctrl-Z stops both), and
//! a SIGINT that came while the wrapper is the terminal's foreground is not forwarded: the
//! terminal sent it to the game server too. A signal during the drain cuts the drain short,
//! except, at a terminal, the Ctrl-C that ended the game server when it reaches the wrapper
//! only after the game server's exit.
//! No parent-death signal is set: on a host, systemd's or the container runtime's cgroup kill
//! ends a game server whose wrapper died (see docs/cli.md).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, Pid};
use tokio::signal::unix::{signal, SignalKind};

use super::sidecar::{self, SidecarArgs};

/// The variable that gives the game server the sidecar's HTTP base URL.
const URL_VARIABLE: &str = "TOKEN_RESOLVER_URL";

/// The sidecar's secrets, which the game server does not need and is not given.
const SECRETS: [&str; 3] = [
    "TOKEN_RESOLVER_ADMIN_TOKEN",
    "TOKEN_RESOLVER_REDIS_SECRET",
    "TOKEN_RESOLVER_REDIS_PASSWORD",
];

/// How often `/readyz` is asked while the sidecar is not ready.
const READY_POLL: Duration = Duration::from_millis(10);

/// `run` arguments: exactly the sidecar's, the readiness bound, then the game server's command
/// line after `--`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Longest wait, in seconds, for the sidecar's /readyz to answer ready; past it the game
    /// server is not started and the exit status is 1.
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) ready_timeout: u64,
    /// The sidecar's options, as `token-resolver sidecar` takes them. Without --admin-listen,
    /// an admin listener on 127.0.0.1 at a free port is opened for the readiness wait.
    #[command(flatten)]
    pub(crate) sidecar: SidecarArgs,
    /// The game server's command line, after `--`: started once the sidecar is ready, with
    /// TOKEN_RESOLVER_URL (the sidecar's base URL, e.g. http://127.0.0.1:7360) in its
    /// environment.
    #[arg(last = true, required = true, value_name = "GAME_SERVER")]
    pub(crate) command: Vec<OsString>,
}

/// Why the game server was not started.
enum NotStarted {
    /// The sidecar's `/readyz` did not answer ready in time: what it answered last.
    NotReady(String),
    /// The wrapper was told to stop before the sidecar was ready.
    Stopped(Signal),
}

/// Runs the sidecar, then the game server; exits with the game server's status (128+N when
/// signal N ended it), 1 when the sidecar cannot start or never gets ready, 2 on a usage error
/// of the sidecar's options, 127 (126) when the game server cannot be found (executed).
pub(crate) async fn run(mut args: RunArgs) -> ExitCode {
    // Before anything is started: a SIGTERM from here on is ours to forward, not a kill.
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("error: cannot install the SIGTERM and SIGINT handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let began = Instant::now();
    let admin = args.sidecar.admin_listen;
    args.sidecar.admin_listen = admin.or(Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))));
    let running = match sidecar::start(&args.sidecar).await {
        Ok(running) => running,
        Err(failed) => {
            eprintln!(
                "error: the sidecar cannot start: {}; the game server was not started",
                failed.message
            );
            return ExitCode::from(failed.exit);
        }
    };
    eprint!("{}", sidecar::listening(&args.sidecar, &running));
    let url = base_url(running.sidecar.local_addr());
    let readyz = match &running.admin {
        Some(admin) => format!("http://{}/readyz", admin.local_addr()),
        None => unreachable!("run always opens the admin listener"),
    };
    let bound = Duration::from_secs(args.ready_timeout);
    let ready = tokio::select! {
        ready = wait_ready(&readyz, bound) => ready.map_err(NotStarted::NotReady),
        signal = signals.recv() => Err(NotStarted::Stopped(signal)),
    };
    if let Err(why) = ready {
        let exit = match why {
            NotStarted::NotReady(last) => {
                eprintln!(
                    "error: the sidecar was not ready within {}s ({readyz} answered {last}); \
                     the game server was not started",
                    args.ready_timeout
                );
                ExitCode::FAILURE
            }
            NotStarted::Stopped(signal) => {
                eprintln!("{signal} before the sidecar was ready: the game server was not started");
                ExitCode::from(128 + signal as u8)
            }
        };
        drain(running, args.sidecar.drain_secs, &mut signals, false).await;
        return exit;
    }
    tracing::info!(
        elapsed_ms = began.elapsed().as_millis(),
        %url,
        "sidecar ready after {} ms",
        began.elapsed().as_millis()
    );
    let (status, terminal_sigint_due) = game_server(&args.command, &url, &mut signals).await;
    drain(
        running,
        args.sidecar.drain_secs,
        &mut signals,
        terminal_sigint_due,
    )
    .await;
    match status {
        Ok(status) => exit_code(status),
        Err(exit) => exit,
    }
}

/// Starts the game server and waits for it, forwarding every SIGTERM and SIGINT to it; its
/// exit status, or the exit code of a game server that could not be started; and whether a
/// terminal's Ctrl-C may still reach the wrapper (at a terminal, none seen yet: the one that
/// ended the game server can be delivered to the wrapper after the game server's exit).
async fn game_server(
    command: &[OsString],
    url: &str,
    signals: &mut Signals,
) -> (Result<ExitStatus, ExitCode>, bool) {
    let (program, rest) = command.split_first().expect("clap requires GAME_SERVER");
    let mut game = tokio::process::Command::new(program);
    game.args(rest).env(URL_VARIABLE, url);
    for secret in SECRETS {
        game.env_remove(secret);
    }
    // At a terminal the game server shares the wrapper's process group: in a group of its own
    // it would be in the background, stopped (SIGTTIN) as soon as it read the terminal.
    let shares_terminal = std::io::stdin().is_terminal();
    if !shares_terminal {
        // Its own group: a signal to the wrapper's group (a terminal's, a supervisor's) reaches
        // it once, forwarded, not a second time directly.
        game.process_group(0);
    }
    let mut child = match game.spawn() {
        Ok(child) => child,
        Err(e) => {
            let shown = program.to_string_lossy();
            eprintln!("error: cannot start the game server {shown:?}: {e}");
            // As shells say it: 127 for a command not found, 126 for one that cannot run.
            let exit = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return (Err(ExitCode::from(exit)), false);
        }
    };
    // Reaped only by the `wait` below, so the pid cannot be reused while signals are sent to it.
    let pid = child.id().and_then(|id| i32::try_from(id).ok());
    tracing::info!(pid, "game server started");
    let mut terminal_sigint_seen = false;
    loop {
        tokio::select! {
            status = child.wait() => {
                // A signal that came as the game server exited was meant for it (a terminal's
                // Ctrl-C reaches both at once): only one after it may cut the drain short.
                while let Some(signal) = signals.pending().await {
                    terminal_sigint_seen |= signal == Signal::SIGINT;
                    tracing::info!(pid, %signal, "came as the game server exited: not forwarded");
                }
                let status = status.map_err(|e| {
                    eprintln!("error: cannot wait for the game server: {e}");
                    ExitCode::FAILURE
                });
                return (status, shares_terminal && !terminal_sigint_seen);
            }
            signal = signals.recv() => {
                if shares_terminal && signal == Signal::SIGINT && terminal_foreground() {
                    terminal_sigint_seen = true;
                    tracing::info!(
                        pid,
                        %signal,
                        "the terminal sent it to the game server too: not forwarded"
                    );
                    continue;
                }
                if let Some(pid) = pid {
                    tracing::info!(pid, %signal, "forwarding to the game server");
                    if let Err(e) = kill(Pid::from_raw(pid), signal) {
                        tracing::warn!(pid, %signal, "cannot forward to the game server: {e}");
                    }
                }
            }
        }
    }
}

/// Whether the wrapper's process group is the foreground of the terminal on stdin: a SIGINT
/// then most likely came from that terminal (Ctrl-C), which sends it to the whole group.
fn terminal_foreground() -> bool {
    tcgetpgrp(std::io::stdin()).is_ok_and(|foreground| foreground == getpgrp())
}

/// Drains the sidecar (`--drain-secs` at most), unless a signal comes meanwhile: the operator
/// asked again, and the wrapper exits without waiting for the rest. With `terminal_sigint_due`
/// (the game server has ended and, at a terminal, no Ctrl-C was seen while it ran), the first
/// SIGINT while the wrapper is the terminal's foreground is the Ctrl-C that ended the game
/// server, delivered to the wrapper after its exit: it does not cut the drain short (a second
/// one does). Seen under load, where the game server's exit was noticed before the wrapper's
/// own copy of the signal.
async fn drain(
    running: sidecar::Running,
    drain_secs: u64,
    signals: &mut Signals,
    mut terminal_sigint_due: bool,
) {
    let drained = sidecar::drain(running, drain_secs);
    tokio::pin!(drained);
    loop {
        tokio::select! {
            () = &mut drained => return,
            signal = signals.recv() => {
                if terminal_sigint_due && signal == Signal::SIGINT && terminal_foreground() {
                    terminal_sigint_due = false;
                    tracing::info!(%signal, "came as the game server exited: not forwarded");
                    continue;
                }
                eprintln!("{signal} during the sidecar's drain: exiting without waiting for it");
                return;
            }
        }
    }
}

/// Asks `/readyz` until it answers 200, for at most `bound`; what it answered last otherwise.
async fn wait_ready(readyz: &str, bound: Duration) -> Result<(), String> {
    // Loopback only: no proxy from the environment may stand in between.
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| format!("no HTTP client: {e}"))?;
    let deadline = tokio::time::Instant::now() + bound;
    let mut last = String::from("nothing");
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(last);
        }
        // An attempt that the bound cuts short says nothing new: the previous answer stays.
        let cut_by_bound = left < Duration::from_secs(1);
        let asked = client
            .get(readyz)
            .timeout(left.min(Duration::from_secs(1)))
            .send()
            .await;
        match asked {
            Ok(answer) if answer.status().is_success() => return Ok(()),
            Ok(answer) => {
                let status = answer.status();
                match answer.text().await {
                    Ok(body) => {
                        last = format!("{status} {}", body.chars().take(200).collect::<String>());
                    }
                    Err(e) if cut_by_bound && e.is_timeout() => {}
                    Err(_) => last = status.to_string(),
                }
            }
            Err(e) if cut_by_bound && e.is_timeout() => {}
            Err(e) => last = format!("no answer: {e}"),
        }
        tokio::time::sleep(READY_POLL.min(left)).await;
    }
}

/// The sidecar's base URL for the game server: its bound address, loopback where it listens
/// on every address.
fn base_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// The game server's status as the wrapper's: its code, or 128+N for signal N (as shells say).
fn exit_code(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        // An exit status is one byte on unix.
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(signal)) => ExitCode::from(128u8.wrapping_add(signal as u8)),
        (None, None) => ExitCode::FAILURE,
    }
}

/// SIGTERM and SIGINT as they reach the wrapper, one at a time.
struct Signals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers: from then on these signals no longer end the process.
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// A signal already received and not yet taken, if any; does not wait.
    async fn pending(&mut self) -> Option<Signal> {
        tokio::select! {
            biased;
            signal = self.recv() => Some(signal),
            () = std::future::ready(()) => None,
        }
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.interrupt.recv() => Signal::SIGINT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_url_is_the_bound_address_and_loopback_for_every_address() {
        assert_eq!(
            base_url("127.0.0.1:7360".parse().unwrap()),
            "http://127.0.0.1:7360"
        );
        assert_eq!(
            base_url("0.0.0.0:81".parse().unwrap()),
            "http://127.0.0.1:81"
        );
        assert_eq!(base_url("[::]:82".parse().unwrap()), "http://[::1]:82");
    }
}
