//! The soak's resource check: is a process leaking memory, file descriptors, threads or tokio
//! tasks over a long run? It owns the [`Sample`] (one process's resident memory, descriptors,
//! threads and, where the caller scraped it, alive tasks at one time), reading one from Linux's
//! `/proc/<pid>` ([`Sample::read`]), the samples' JSON-lines file ([`write_samples`],
//! [`read_samples`]), and the verdict: a least-squares slope per process and resource over the
//! samples after a warm-up, held to the tolerances of [`SoakBounds`], in a [`SoakReport`].
//!
//! It does not start, drive or scrape processes: the chaos run does, and hands each sample in
//! (the task count from the product's `/metrics`, `token_resolver_runtime_alive_tasks`).
//!
//! # Why a slope after a warm-up
//!
//! A server's memory climbs at first for reasons that are not leaks: caches and tables filling
//! to their caps (the resolver's cache, the sidecar's sessions, the event journal), the
//! allocator's arenas, the runtime's worker threads. What a leak adds is a rise that does not
//! stop. So the first [`SoakBounds::warm_up`] of each process is left out, and a straight line
//! is fitted by least squares to what follows: its slope, per hour, is what is judged. Noise
//! (a collection that happens to run before one sample, sessions opening and closing) moves
//! single samples, not the slope of hundreds.
//!
//! # A step is not a trend
//!
//! Resident memory does not move byte by byte. Where transparent huge pages are on, the
//! products' allocator (mimalloc) asks the kernel for them for its arenas, so resident memory
//! grows in 2 MiB steps: when a burst touches a new range, and when the kernel's khugepaged,
//! on its round through the processes, collapses a sparsely used range into a huge page made
//! resident whole (once an hour per process in the chaos run's world before it turned them
//! off; docs/chaos-soak.md). The chaos run now turns huge pages off for the processes it
//! samples, so that this check sees what they touch; samples from elsewhere may still have
//! them, and the allocator's own growth still comes in chunks. One such step, with the series
//! flat before and after it, reads as a least-squares slope of up to 1.5 steps per judged
//! window: 3.6 MiB an hour for 2 MiB over the 50 minutes an hour's soak judges. An hour cannot
//! tell that from a leak so slow that it adds one step in the hour, so the memory tolerance is
//! never below what one kept step reads as ([`SoakBounds::rss_step_bytes`]); a longer soak
//! shrinks that term and resolves slower leaks.
//!
//! A series too short to tell ([`SoakBounds::min_samples`] after the warm-up, spanning at least
//! [`SoakBounds::min_span`]) gets no verdict ([`Verdict::TooFew`]), which [`SoakReport::passed`]
//! counts as not passed: a check that could not fail has not passed.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, BufRead, Write};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One process's resources at one time, as `/proc` (and its `/metrics`) showed them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the run began (any fixed origin shared by the run's samples).
    pub t_s: f64,
    /// The process's name in the run (`sidecar`, `node-1`, `api`).
    pub process: String,
    /// Resident set size (`VmRSS` of `/proc/<pid>/status`), in bytes.
    pub rss_bytes: u64,
    /// Open file descriptors (entries of `/proc/<pid>/fd`).
    pub fds: u64,
    /// Threads (`Threads` of `/proc/<pid>/status`).
    pub threads: u64,
    /// The process's alive tokio tasks, when the caller scraped them; `None` when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u64>,
}

impl Sample {
    /// Reads process `pid`'s resident memory, threads and descriptors from `/proc` (Linux),
    /// with `tasks` as the caller scraped it.
    ///
    /// # Errors
    ///
    /// `/proc/<pid>/status` or `/proc/<pid>/fd` cannot be read (no such process, another
    /// user's, not Linux), or the status has no `VmRSS` or `Threads` line
    /// ([`io::ErrorKind::InvalidData`]; a zombie has no `VmRSS`).
    pub fn read(pid: u32, process: &str, t_s: f64, tasks: Option<u64>) -> io::Result<Sample> {
        let proc_dir = Path::new("/proc").join(pid.to_string());
        let status = std::fs::read_to_string(proc_dir.join("status"))?;
        let (rss_bytes, threads) = parse_status(&status).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/status has no VmRSS or Threads line"),
            )
        })?;
        let fds = std::fs::read_dir(proc_dir.join("fd"))?.count() as u64;
        Ok(Sample {
            t_s,
            process: process.to_owned(),
            rss_bytes,
            fds,
            threads,
            tasks,
        })
    }
}

/// `VmRSS` (in bytes) and `Threads` from the text of a `/proc/<pid>/status`; `None` when
/// either line is missing or unreadable.
#[must_use]
pub fn parse_status(status: &str) -> Option<(u64, u64)> {
    let mut rss = None;
    let mut threads = None;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            // "VmRSS:\t   43520 kB": the kernel always says kB (KiB).
            let kib = rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
            rss = Some(kib * 1024);
        } else if let Some(rest) = line.strip_prefix("Threads:") {
            threads = Some(rest.trim().parse::<u64>().ok()?);
        }
    }
    Some((rss?, threads?))
}

/// The gauge of alive tokio tasks the products' admin listener exports.
pub const TASKS_GAUGE: &str = "token_resolver_runtime_alive_tasks";

/// The alive tokio tasks a product's `/metrics` text says ([`TASKS_GAUGE`]); `None` when the
/// text has no such line.
#[must_use]
pub fn alive_tasks(metrics: &str) -> Option<u64> {
    metrics.lines().find_map(|line| {
        let value: f64 = line
            .strip_prefix(TASKS_GAUGE)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()?;
        // A count of tasks: whole, far below 2^53.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(value.max(0.0) as u64)
    })
}

/// Writes `samples` as JSON lines, one sample per line.
///
/// # Errors
///
/// Writing to `out` failed.
pub fn write_samples<'a>(
    mut out: impl Write,
    samples: impl IntoIterator<Item = &'a Sample>,
) -> io::Result<()> {
    for sample in samples {
        serde_json::to_writer(&mut out, sample)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads samples written by [`write_samples`]; blank lines are skipped.
///
/// # Errors
///
/// Reading failed, or a line is not a sample ([`io::ErrorKind::InvalidData`], naming the
/// 1-based line).
pub fn read_samples(input: impl BufRead) -> io::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let sample = serde_json::from_str(&line).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("line {}: {e}", i + 1))
        })?;
        samples.push(sample);
    }
    Ok(samples)
}

/// The resources judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Resource {
    /// Resident memory, bytes.
    Rss,
    /// Open file descriptors.
    Fds,
    /// Threads.
    Threads,
    /// Alive tokio tasks.
    Tasks,
}

impl Resource {
    /// Every resource, in the report's order.
    pub const ALL: [Resource; 4] = [Self::Rss, Self::Fds, Self::Threads, Self::Tasks];

    /// The stable name the report prints.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rss => "rss",
            Self::Fds => "fds",
            Self::Threads => "threads",
            Self::Tasks => "tasks",
        }
    }

    fn of(self, sample: &Sample) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)] // counts and bytes far below 2^52
        match self {
            Self::Rss => Some(sample.rss_bytes as f64),
            Self::Fds => Some(sample.fds as f64),
            Self::Threads => Some(sample.threads as f64),
            Self::Tasks => sample.tasks.map(|t| t as f64),
        }
    }

    /// A value of this resource as the report prints it (MiB for memory).
    fn show(self, value: f64) -> String {
        match self {
            Self::Rss => format!("{:.1} MiB", value / MIB),
            _ => format!("{value:.0}"),
        }
    }

    /// A slope of this resource per hour as the report prints it (signed).
    fn show_slope(self, per_hour: f64) -> String {
        match self {
            Self::Rss => format!("{:+.2} MiB", per_hour / MIB),
            _ => format!("{per_hour:+.1}"),
        }
    }

    /// A tolerance of this resource per hour as the report prints it.
    fn show_tolerance(self, per_hour: f64) -> String {
        match self {
            Self::Rss => format!("{:.2} MiB", per_hour / MIB),
            _ => format!("{per_hour:.1}"),
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;
const HOUR_S: f64 = 3600.0;

/// What the soak check tolerates, and how much of a run it leaves out.
///
/// The defaults are for the hour-long soak at a steady load (README, "The hour-long soak"):
///
/// - [`warm_up`](Self::warm_up) 10 minutes: at 300 players a second the game server and the
///   sidecar measured here are flat within 2 minutes (their caches hold answers for the
///   `max-age` of at most 60 s, about 18,000 entries; docs/chaos-soak.md; the reference API,
///   which keeps every guest and token, had not settled in 12 minutes). The sidecar's event
///   journal fills more slowly (16,384 records of about 170 bytes at one ban in 97 players:
///   88 minutes, 2.7 MiB), well within the memory tolerance;
/// - memory: the slope may reach the largest of 2 MiB an hour, 5 % of the process's mean
///   resident memory after the warm-up an hour, and one kept step read as a slope. 2 MiB an
///   hour is what a leak of 600 bytes (one small allocation) per second amounts to, far below
///   the +16.5 MiB an hour issue 34 reported. A flat process under 300 players a second moves
///   by 2 to 4 MiB (one standard deviation) from sample to sample with the players in flight
///   (docs/chaos-soak.md); over 50 minutes of samples every 10 s that puts the slope's standard
///   error near 0.5 to 1 MiB an hour, so the tolerance is three or more of them. The relative
///   term keeps a process that holds hundreds of MiB of cache from failing on the allocator's
///   own drift (3.2 MiB an hour for a 65 MiB sidecar). The step term is 1.5 ×
///   [`rss_step_bytes`](Self::rss_step_bytes) (2 MiB, a huge page) ÷ the judged window: 3.6 MiB
///   an hour over the 50 minutes of an hour's soak, 1.1 MiB an hour (below the floor, which
///   then governs) over a three-hour one (the module's "A step is not a trend"). The hour-long
///   soak of docs/chaos-soak.md found exactly such a step in the sidecar: flat within
///   31.7-32.5 MiB for 34 minutes, 3.7 MiB more at 2,650 s (khugepaged), 1.9 MiB of it kept
///   and flat after, its tasks flat throughout: a least-squares slope of +2.65 MiB an hour;
/// - descriptors: 300 an hour; tasks: 300 an hour (five a minute); threads: 4 an hour. A leak
///   of one per player, per ban or per stream is thousands an hour (one ban in 97 players at
///   300 a second: 11,000). The sampled descriptors and tasks move with the connections and
///   sessions open at that moment: one standard deviation of 90 to 210 in the runs of
///   docs/chaos-soak.md, a slope's standard error of 25 to 50 an hour over 50 minutes, so a
///   tolerance of one a minute would fail flat runs; 300 is six or more of them. The threads
///   did not move in those runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakBounds {
    /// Left out at the start of each process's series (from its first sample). Default 10 min.
    pub warm_up: Duration,
    /// Samples needed after the warm-up for a verdict. Default 10.
    pub min_samples: usize,
    /// Time the samples after the warm-up must span for a verdict. Default 5 min.
    pub min_span: Duration,
    /// Resident memory's tolerated slope, bytes an hour (the floor). Default 2 MiB.
    pub rss_bytes_per_hour: f64,
    /// Resident memory's tolerated slope as a fraction of the mean after the warm-up, an hour,
    /// when that is more than [`rss_bytes_per_hour`](Self::rss_bytes_per_hour). Default 0.05.
    pub rss_fraction_per_hour: f64,
    /// The step in which resident memory grows and is kept: a transparent huge page where
    /// they are on (the allocator's arenas ask for them, khugepaged makes them), a margin
    /// where they are off. One such step over the judged window is tolerated (as the slope it
    /// reads as, 1.5 steps per window). Default 2 MiB.
    pub rss_step_bytes: f64,
    /// Processes whose resident memory steps by more than
    /// [`rss_step_bytes`](Self::rss_step_bytes) at once, by name, with their step: the reference
    /// API hashes each password in a 19 MiB Argon2 block, which the allocator keeps for minutes
    /// while logins come and gives back in a lull. Default: none.
    pub rss_steps: BTreeMap<String, f64>,
    /// Descriptors' tolerated slope an hour. Default 300.
    pub fds_per_hour: f64,
    /// Threads' tolerated slope an hour. Default 4.
    pub threads_per_hour: f64,
    /// Tasks' tolerated slope an hour. Default 300.
    pub tasks_per_hour: f64,
}

impl Default for SoakBounds {
    fn default() -> Self {
        SoakBounds {
            warm_up: Duration::from_secs(600),
            min_samples: 10,
            min_span: Duration::from_secs(300),
            rss_bytes_per_hour: 2.0 * MIB,
            rss_fraction_per_hour: 0.05,
            rss_step_bytes: 2.0 * MIB,
            rss_steps: BTreeMap::new(),
            fds_per_hour: 300.0,
            threads_per_hour: 4.0,
            tasks_per_hour: 300.0,
        }
    }
}

impl SoakBounds {
    /// The step `process`'s resident memory may take and keep: its own in
    /// [`rss_steps`](Self::rss_steps), else [`rss_step_bytes`](Self::rss_step_bytes).
    #[must_use]
    pub fn rss_step(&self, process: &str) -> f64 {
        self.rss_steps
            .get(process)
            .copied()
            .unwrap_or(self.rss_step_bytes)
    }

    /// The slope tolerated for `process`'s `resource`, an hour, given its mean after the
    /// warm-up and the `window` its samples after the warm-up span.
    #[must_use]
    pub fn tolerance(&self, process: &str, resource: Resource, mean: f64, window: Duration) -> f64 {
        match resource {
            Resource::Rss => {
                let hours = window.as_secs_f64() / HOUR_S;
                let one_step = if hours > 0.0 {
                    1.5 * self.rss_step(process) / hours
                } else {
                    0.0
                };
                self.rss_bytes_per_hour
                    .max(self.rss_fraction_per_hour * mean)
                    .max(one_step)
            }
            Resource::Fds => self.fds_per_hour,
            Resource::Threads => self.threads_per_hour,
            Resource::Tasks => self.tasks_per_hour,
        }
    }
}

/// The verdict on one process's resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The slope after the warm-up is within the tolerance.
    Flat,
    /// The slope after the warm-up is beyond the tolerance: a leak.
    Leak,
    /// Too few samples after the warm-up, or too short a span, to tell: no verdict.
    TooFew,
}

impl Verdict {
    /// The stable word the report prints.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Flat => "ok",
            Self::Leak => "LEAK",
            Self::TooFew => "too few samples",
        }
    }
}

/// One process's resource over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    /// Which resource.
    pub resource: Resource,
    /// Samples after the warm-up that measured it.
    pub samples: usize,
    /// The first and last value after the warm-up (`NaN` without samples).
    pub first: f64,
    /// See [`first`](Self::first).
    pub last: f64,
    /// The least and greatest value after the warm-up.
    pub min: f64,
    /// See [`min`](Self::min).
    pub max: f64,
    /// The mean after the warm-up.
    pub mean: f64,
    /// The least-squares slope after the warm-up, per hour; `None` without a verdict.
    pub slope_per_hour: Option<f64>,
    /// The slope tolerated, per hour.
    pub tolerance_per_hour: f64,
    /// What the check says.
    pub verdict: Verdict,
}

/// One process's trends.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessTrends {
    /// The process's name.
    pub process: String,
    /// Its samples in all, warm-up included.
    pub samples: usize,
    /// Its first and last sample's time.
    pub from_s: f64,
    /// See [`from_s`](Self::from_s).
    pub to_s: f64,
    /// One trend per resource measured (tasks only when some sample had them).
    pub trends: Vec<Trend>,
}

/// What the soak check found: a table per process and the count of leaks.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakReport {
    /// Each process, in the order of its first sample.
    pub processes: Vec<ProcessTrends>,
    /// The warm-up left out.
    pub warm_up: Duration,
    /// Trends judged a leak.
    pub violation_count: usize,
    /// Trends without a verdict (too few samples).
    pub inconclusive: usize,
}

impl SoakReport {
    /// No leak, and a verdict on every trend.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.violation_count == 0 && self.inconclusive == 0 && !self.processes.is_empty()
    }

    /// The trend of `resource` for `process`, if measured.
    #[must_use]
    pub fn trend(&self, process: &str, resource: Resource) -> Option<&Trend> {
        self.processes
            .iter()
            .find(|p| p.process == process)?
            .trends
            .iter()
            .find(|t| t.resource == resource)
    }
}

/// Judges `samples` (any order, any mix of processes) against `bounds`.
#[must_use]
pub fn check_soak(samples: &[Sample], bounds: &SoakBounds) -> SoakReport {
    let mut names: Vec<&str> = Vec::new();
    for s in samples {
        if !names.contains(&s.process.as_str()) {
            names.push(&s.process);
        }
    }
    let mut processes = Vec::new();
    let (mut violation_count, mut inconclusive) = (0, 0);
    for name in names {
        let mut own: Vec<&Sample> = samples.iter().filter(|s| s.process == name).collect();
        own.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        let from_s = own.first().map_or(0.0, |s| s.t_s);
        let to_s = own.last().map_or(0.0, |s| s.t_s);
        let after: Vec<&Sample> = own
            .iter()
            .copied()
            .filter(|s| s.t_s >= from_s + bounds.warm_up.as_secs_f64())
            .collect();
        let mut trends = Vec::new();
        for resource in Resource::ALL {
            if resource == Resource::Tasks && own.iter().all(|s| s.tasks.is_none()) {
                continue;
            }
            let points: Vec<(f64, f64)> = after
                .iter()
                .filter_map(|s| Some((s.t_s, resource.of(s)?)))
                .collect();
            let trend = trend(name, resource, &points, bounds);
            match trend.verdict {
                Verdict::Leak => violation_count += 1,
                Verdict::TooFew => inconclusive += 1,
                Verdict::Flat => {}
            }
            trends.push(trend);
        }
        processes.push(ProcessTrends {
            process: name.to_owned(),
            samples: own.len(),
            from_s,
            to_s,
            trends,
        });
    }
    SoakReport {
        processes,
        warm_up: bounds.warm_up,
        violation_count,
        inconclusive,
    }
}

/// One resource's trend over its `(t_s, value)` points after the warm-up.
fn trend(process: &str, resource: Resource, points: &[(f64, f64)], bounds: &SoakBounds) -> Trend {
    #[allow(clippy::cast_precision_loss)] // a few thousand samples
    let n = points.len() as f64;
    let values = points.iter().map(|p| p.1);
    let mean = values.clone().sum::<f64>() / n;
    let min = values.clone().fold(f64::NAN, f64::min);
    let max = values.fold(f64::NAN, f64::max);
    let span = match (points.first(), points.last()) {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => 0.0,
    };
    let tolerance_per_hour = bounds.tolerance(
        process,
        resource,
        mean,
        // A file's times may be anything: a span no `Duration` holds is as long as one can be.
        Duration::try_from_secs_f64(span.max(0.0)).unwrap_or(Duration::MAX),
    );
    let slope_per_hour = (points.len() >= bounds.min_samples.max(2)
        && span >= bounds.min_span.as_secs_f64())
    .then(|| least_squares_slope(points) * HOUR_S);
    let verdict = match slope_per_hour {
        None => Verdict::TooFew,
        Some(slope) if slope > tolerance_per_hour => Verdict::Leak,
        Some(_) => Verdict::Flat,
    };
    Trend {
        resource,
        samples: points.len(),
        first: points.first().map_or(f64::NAN, |p| p.1),
        last: points.last().map_or(f64::NAN, |p| p.1),
        min,
        max,
        mean,
        slope_per_hour,
        tolerance_per_hour,
        verdict,
    }
}

/// The slope of the least-squares line through `points` (value per second); 0 when every
/// point has the same time.
fn least_squares_slope(points: &[(f64, f64)]) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let n = points.len() as f64;
    let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_v = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut cov, mut var) = (0.0, 0.0);
    for &(t, v) in points {
        cov += (t - mean_t) * (v - mean_v);
        var += (t - mean_t) * (t - mean_t);
    }
    if var == 0.0 {
        0.0
    } else {
        cov / var
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "soak: resources after a warm-up of {} s, least-squares slope per hour",
            self.warm_up.as_secs()
        )?;
        for p in &self.processes {
            writeln!(
                f,
                "{}: {} samples from {:.0} s to {:.0} s",
                p.process, p.samples, p.from_s, p.to_s
            )?;
            writeln!(
                f,
                "  {:<8} {:>7} {:>11} {:>11} {:>11} {:>11} {:>12} {:>12}  verdict",
                "resource", "samples", "first", "last", "min", "max", "slope/h", "tolerated/h"
            )?;
            for t in &p.trends {
                let r = t.resource;
                let slope = t.slope_per_hour.map_or("-".to_owned(), |s| r.show_slope(s));
                let shown = |v: f64| {
                    if v.is_nan() {
                        "-".to_owned()
                    } else {
                        r.show(v)
                    }
                };
                writeln!(
                    f,
                    "  {:<8} {:>7} {:>11} {:>11} {:>11} {:>11} {:>12} {:>12}  {}",
                    r.as_str(),
                    t.samples,
                    shown(t.first),
                    shown(t.last),
                    shown(t.min),
                    shown(t.max),
                    slope,
                    r.show_tolerance(t.tolerance_per_hour),
                    t.verdict.as_str()
                )?;
            }
        }
        if self.inconclusive > 0 {
            writeln!(
                f,
                "soak inconclusive: {} trends without a verdict (run longer than the warm-up)",
                self.inconclusive
            )?;
        }
        writeln!(f, "soak violations: {}", self.violation_count)
    }
}
