//! The whole run: the binary found (built first when cargo runs us), the world started, the
//! plan played (players' operations as tasks, faults one after another on a lane of their
//! own), the products' logs, metrics and Redis keys collected, the checker's report printed,
//! the history written, and the exit status.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use token_resolver_chaos::soak::{check_soak, read_samples, write_samples, Sample, SoakBounds};
use token_resolver_chaos::{check, check_leaks, write_history, Bounds, Collected};

use crate::args::{Args, Checked};
use crate::faults::Faults;
use crate::players::Players;
use crate::record::{lock, Recorder};
use crate::sampler::{huge_pages_off, huge_pages_report, Sampler};
use crate::schedule::{plan, Action, PlanConfig};
use crate::world::World;

/// The bounds the run holds the products to: the documented defaults, with the clock skew the
/// run gives the products (`--clock-skew 5`, so that tokens expire within a short run).
#[must_use]
pub fn bounds() -> Bounds {
    Bounds {
        clock_skew: Duration::from_secs(5),
        ..Bounds::default()
    }
}

/// The exit status: 0 no violation, 1 violations or a leak, 2 a world that cannot start.
pub type Status = u8;

/// The `token-resolver` binary: `--binary`, or the one beside this executable, built first
/// with `$CARGO build` (release when this executable is) when cargo runs us.
///
/// # Errors
///
/// The build failed, or there is no binary there.
pub fn binary(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(format!("--binary {}: no such file", path.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("this executable has no directory")?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut command = std::process::Command::new(cargo);
        command.args([
            "build",
            "-p",
            "token-resolver-cli",
            "--bin",
            "token-resolver",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            command.arg("--release");
        }
        let status = command
            .status()
            .map_err(|e| format!("running cargo: {e}"))?;
        if !status.success() {
            return Err(format!("building token-resolver failed ({status})"));
        }
    }
    let binary = dir.join("token-resolver");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "no token-resolver beside this executable ({}): build it (cargo build --release -p token-resolver-cli) or pass --binary",
            binary.display()
        ))
    }
}

/// Runs the whole thing; the exit status.
pub async fn run(checked: Checked) -> Status {
    let args = &checked.args;
    let binary = match binary(args.binary.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let (dir, keep) = match &args.work_dir {
        Some(d) => (d.clone(), true),
        None => (
            std::env::temp_dir().join(format!(
                "token-resolver-chaos-{}-{}",
                std::process::id(),
                checked.seed
            )),
            false,
        ),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: {}: {e}", dir.display());
        return 2;
    }
    println!(
        "starting: {} nodes, a sidecar, two reference APIs and redis-server; logs in {}",
        args.nodes,
        dir.display()
    );
    // Memory measured is memory touched: khugepaged's hourly collapse of each process's arena
    // is not the process's doing (docs/chaos-soak.md).
    if args.samples_resources() {
        if let Err(e) = huge_pages_off() {
            eprintln!(
                "warning: transparent huge pages stay on ({e}): a soak may see khugepaged's steps"
            );
        }
    }
    let world = match start_world(&binary, &dir, args.players, args.nodes).await {
        Ok(w) => Arc::new(w),
        Err(e) => {
            eprintln!("error: the world could not start: {e}");
            return 2;
        }
    };
    if args.samples_resources() {
        println!("{}", huge_pages_report(&world).await);
    }
    let status = tokio::select! {
        status = play(&checked, world.clone()) => status,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: stopping every process");
            130
        }
    };
    world.stop().await;
    if status == 0 && !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    status
}

/// Starts the world, again on other ports (twice at most) when a child found its port taken:
/// `free_port` checks a port by binding it and lets it go, and another program may bind it
/// before the child does. The children of a world that did not start are killed when it drops.
async fn start_world(
    binary: &Path,
    dir: &Path,
    players: usize,
    nodes: usize,
) -> Result<World, String> {
    let mut tries = 1;
    loop {
        match World::start(binary, dir, players, nodes).await {
            Err(e) if tries < 3 && e.contains("Address already in use") => {
                eprintln!("warning: a port was taken before its process bound it; starting again on other ports");
                set_aside_logs(dir, tries);
                tries += 1;
            }
            started => return started,
        }
    }
}

/// Renames the logs of a world that did not start (`node-1.log` to `node-1.log.try-1`), so that
/// the next world's logs, which the start's errors quote and the leak check reads, are its own.
fn set_aside_logs(dir: &Path, attempt: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_some_and(|x| x == "log") {
            let mut kept = path.clone().into_os_string();
            kept.push(format!(".try-{attempt}"));
            let _ = std::fs::rename(&path, kept);
        }
    }
}

async fn play(checked: &Checked, world: Arc<World>) -> Status {
    let args = &checked.args;
    let steps = plan(&PlanConfig {
        seed: checked.seed,
        seconds: args.seconds,
        rate: args.rate,
        players: args.players,
        nodes: args.nodes,
        faults: checked.faults.clone(),
        fault_gap: args.fault_gap,
        warm_up_ms: args.warm_up.saturating_mul(1000),
        short_tokens: args.short_tokens,
        weights: checked.weights.clone(),
    });
    let rec = Arc::new(Recorder::new());
    let players = Players::new(world.clone(), rec.clone());
    let follower = tokio::spawn(players.clone().follow_sidecar());
    let faults = Arc::new(Faults::default());
    // Faults run one after another, on a lane of their own: a restart that takes a second
    // holds back no player.
    let (fault_tx, mut fault_rx) = tokio::sync::mpsc::unbounded_channel::<Action>();
    let fault_lane = {
        let (world, rec, faults) = (world.clone(), rec.clone(), faults.clone());
        tokio::spawn(async move {
            while let Some(action) = fault_rx.recv().await {
                let done = match action {
                    Action::FaultBegin { id, fault } => faults.begin(&world, &rec, id, fault).await,
                    Action::FaultEnd { id } => faults.end(&world, &rec, id).await,
                    _ => Ok(()),
                };
                done?;
            }
            Ok::<(), String>(())
        })
    };
    let started = Instant::now();
    let sampler = Arc::new(tokio::sync::Mutex::new(Sampler::default()));
    let sampling = {
        let (world, sampler) = (world.clone(), sampler.clone());
        let every = Duration::from_secs(args.sample_every);
        let wanted = args.samples_resources();
        tokio::spawn(async move {
            if !wanted {
                return;
            }
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                sampler
                    .lock()
                    .await
                    .sample(&world, &world.http, started)
                    .await;
            }
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut last_progress = 0;
    for step in steps {
        let due = started + Duration::from_millis(step.at_ms);
        tokio::time::sleep_until(due.into()).await;
        if fault_lane.is_finished() {
            break;
        }
        match step.action {
            Action::FaultBegin { .. } | Action::FaultEnd { .. } => {
                let _ = fault_tx.send(step.action);
            }
            action => {
                let players = players.clone();
                tasks.spawn(async move { players.act(&action).await });
            }
        }
        while tasks.try_join_next().is_some() {}
        let second = step.at_ms / 10_000;
        if second > last_progress {
            last_progress = second;
            println!("t={}s: {} operations in flight", second * 10, tasks.len());
        }
    }
    drop(fault_tx);
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        eprintln!("note: operations still in flight 20 s after the schedule ended were cut");
        tasks.abort_all();
    }
    let lane = tokio::time::timeout(Duration::from_secs(60), fault_lane).await;
    if let Ok(Ok(Err(e))) = lane {
        eprintln!("error: a fault could not be healed: {e}");
        follower.abort();
        sampling.abort();
        return 2;
    }
    faults.end_all(&world, &rec).await;
    // Quiet: what the last revocations made is still on its way to the sessions.
    tokio::time::sleep(Duration::from_secs(2)).await;
    players.leave_all().await;
    let elapsed = started.elapsed();
    follower.abort();
    sampling.abort();

    let texts = collect(&world).await;
    // An expiry whose bound (exp, the skew, then a second for the products' whole-second
    // clocks) ends after the run is not the products' to honour yet: left out.
    let end = rec.now();
    let skew = u64::try_from(bounds().clock_skew.as_micros()).unwrap_or(u64::MAX);
    let events: Vec<_> = rec
        .events()
        .into_iter()
        .filter(|e| {
            !matches!(e.kind, token_resolver_chaos::Kind::Expiry(_))
                || e.t_us + skew + 2_000_000 <= end
        })
        .collect();
    let mut report = check(&events, &bounds());
    let collected: Vec<Collected<'_>> = texts
        .iter()
        .map(|(source, text)| Collected { source, text })
        .collect();
    check_leaks(&mut report, &rec.secrets(), &events, &collected);
    let secs = elapsed.as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let (ops, faults_n) = (report.operations as f64, report.faults as f64);
    println!("seed: {}", checked.seed);
    println!(
        "operations: {} ({:.1}/s), faults: {} ({:.1}/min), admissions: {}, revocations: {}, over {:.1} s",
        report.operations,
        ops / secs,
        report.faults,
        faults_n * 60.0 / secs,
        report.admissions,
        report.revocations,
        secs
    );
    print!("{report}");
    if let Some(path) = &args.history {
        let written = std::fs::File::create(path)
            .and_then(|f| write_history(std::io::BufWriter::new(f), &events));
        if let Err(e) = written {
            eprintln!("error: writing the history to {}: {e}", path.display());
            return 2;
        }
        println!("history: {} ({} events)", path.display(), events.len());
    }
    let soak_passed = match soak_verdict(args, sampler.lock().await.samples()) {
        Ok(passed) => passed,
        Err(status) => return status,
    };
    if report.is_ok() && soak_passed {
        0
    } else {
        println!(
            "reproduce: cargo run --release -p token-resolver-chaos-run -- --seconds {} --seed {}{}",
            args.seconds,
            checked.seed,
            reproduce_flags(checked)
        );
        1
    }
}

/// With `--soak`, the resources' report printed and whether it passed; the samples written
/// where `--samples` says. `Err` is the exit status of a samples file that cannot be written.
fn soak_verdict(args: &Args, samples: &[Sample]) -> Result<bool, Status> {
    if let Some(path) = &args.samples {
        let written = std::fs::File::create(path)
            .and_then(|f| write_samples(std::io::BufWriter::new(f), samples));
        if let Err(e) = written {
            eprintln!("error: writing the samples to {}: {e}", path.display());
            return Err(2);
        }
        println!("samples: {} ({})", path.display(), samples.len());
    }
    if !args.soak {
        return Ok(true);
    }
    Ok(judged(samples))
}

/// The soak check of `samples` with this world's bounds, its report printed: whether it passed.
fn judged(samples: &[Sample]) -> bool {
    let report = check_soak(samples, &soak_bounds());
    print!("{report}");
    report.passed()
}

/// The reference API's step of resident memory: the Argon2 block each login hashes in
/// (argon2's default memory cost, 19 MiB), which the allocator keeps while logins come and
/// gives back when they pause, rounded up to 20 MiB.
const API_RSS_STEP: f64 = 20.0 * 1024.0 * 1024.0;

/// The soak check's bounds for this world: the defaults, with the reference APIs' own step.
fn soak_bounds() -> SoakBounds {
    let mut bounds = SoakBounds::default();
    for api in ["api", "api-b"] {
        bounds.rss_steps.insert(api.to_owned(), API_RSS_STEP);
    }
    bounds
}

/// `--judge FILE`: the soak check of an earlier run's samples, printed; the exit status.
#[must_use]
pub fn judge(file: &Path) -> Status {
    let samples = std::fs::File::open(file).and_then(|f| read_samples(std::io::BufReader::new(f)));
    match samples {
        Ok(samples) => u8::from(!judged(&samples)),
        Err(e) => {
            eprintln!("error: reading the samples in {}: {e}", file.display());
            2
        }
    }
}

/// The flags besides `--seconds` and `--seed` that shape the plan, as given.
fn reproduce_flags(checked: &Checked) -> String {
    let a = &checked.args;
    let mut flags = String::new();
    for (name, value, default) in [
        ("--nodes", a.nodes.to_string(), "2"),
        ("--rate", a.rate.to_string(), "40"),
        ("--players", a.players.to_string(), "40"),
        ("--fault-gap", a.fault_gap.to_string(), "6"),
        ("--warm-up", a.warm_up.to_string(), "10"),
        ("--short-tokens", a.short_tokens.to_string(), "20"),
    ] {
        if value != default {
            flags.push_str(&format!(" {name} {value}"));
        }
    }
    if a.soak {
        flags.push_str(" --soak");
    }
    if let Some(f) = &a.faults {
        flags.push_str(&format!(" --faults {f}"));
    }
    if let Some(w) = &a.weights {
        flags.push_str(&format!(" --weights {w}"));
    }
    flags
}

/// Every text the leak check reads: each child's log, each admin listener's `/metrics`, and
/// every Redis key and value.
async fn collect(world: &World) -> Vec<(String, String)> {
    let mut texts = Vec::new();
    for child in world.nodes.iter().chain(std::iter::once(&world.sidecar)) {
        let child = child.lock().await;
        if let Some(admin) = child.admin {
            if let Ok(answer) = world
                .http
                .get(format!("http://{admin}/metrics"))
                .send()
                .await
            {
                if let Ok(text) = answer.text().await {
                    texts.push((format!("metrics {}", child.name), text));
                }
            }
        }
    }
    let dump = tokio::task::block_in_place(|| {
        let redis = lock(&world.redis);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| redis.dump())).unwrap_or_default()
    });
    let mut keys = String::new();
    for (key, values) in dump {
        keys.push_str(&String::from_utf8_lossy(&key));
        keys.push('\n');
        for value in values {
            keys.push_str(&String::from_utf8_lossy(&value));
            keys.push('\n');
        }
    }
    texts.push(("redis keys".to_owned(), keys));
    world.stop().await;
    for child in world
        .apis
        .iter()
        .chain(&world.nodes)
        .chain(std::iter::once(&world.sidecar))
    {
        let child = child.lock().await;
        if let Ok(text) = std::fs::read_to_string(&child.log) {
            texts.push((format!("log {}", child.name), text));
        }
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_world_that_did_not_start_leaves_its_logs_aside_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("chaos-set-aside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("node-1.log"), "Address already in use").unwrap();
        std::fs::write(dir.join("rooms.json"), "[]").unwrap();
        set_aside_logs(&dir, 1);
        assert!(
            !dir.join("node-1.log").exists(),
            "the next world's log starts empty"
        );
        let kept = std::fs::read_to_string(dir.join("node-1.log.try-1")).unwrap();
        assert_eq!(kept, "Address already in use");
        assert!(dir.join("rooms.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
