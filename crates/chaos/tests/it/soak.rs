//! The soak's resource check on hand-made series: a flat process passes, a leak of memory,
//! descriptors or tasks fails, a climb during the warm-up is forgiven, noise within the
//! tolerance passes, and a series too short for a verdict says so instead of passing.

use std::time::Duration;

use token_resolver_chaos::soak::{alive_tasks, parse_status};
use token_resolver_chaos::{
    check_soak, read_samples, write_samples, Resource, Sample, SoakBounds, Verdict,
};

const MIB: f64 = 1024.0 * 1024.0;

/// A sample of `process` at `t_s` with `rss_mib`, and flat descriptors, threads and tasks.
fn at(process: &str, t_s: f64, rss_mib: f64) -> Sample {
    Sample {
        t_s,
        process: process.to_owned(),
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        rss_bytes: (rss_mib * MIB) as u64,
        fds: 24,
        threads: 7,
        tasks: Some(40),
    }
}

/// One sample every 10 s for `minutes`, memory as `rss_mib(t_s)`.
fn series(process: &str, minutes: u32, rss_mib: impl Fn(f64) -> f64) -> Vec<Sample> {
    (0..=minutes * 6)
        .map(|i| {
            let t = f64::from(i) * 10.0;
            at(process, t, rss_mib(t))
        })
        .collect()
}

/// A deterministic noise in [-1, 1) (a linear congruential generator), so the test is the
/// same on every run.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        #[allow(clippy::cast_precision_loss)]
        let unit = (self.0 >> 11) as f64 / (1u64 << 53) as f64;
        unit * 2.0 - 1.0
    }
}

/// An hour at a flat 43 MiB, flat descriptors, threads and tasks: every trend is flat, with a
/// slope of zero, and the report passes with no violation.
#[test]
fn a_flat_hour_passes() {
    let report = check_soak(&series("node-1", 60, |_| 43.0), &SoakBounds::default());
    assert!(report.passed(), "{report}");
    assert_eq!(report.violation_count, 0);
    for resource in Resource::ALL {
        let trend = report.trend("node-1", resource).expect("measured");
        assert_eq!(trend.verdict, Verdict::Flat, "{report}");
        assert!(trend.slope_per_hour.expect("a verdict").abs() < 1e-6);
    }
    assert!(
        report.to_string().ends_with("soak violations: 0\n"),
        "{report}"
    );
}

/// The sidecar: 43.0 MiB climbing +16.5 MiB an hour beside a flat game server. The
/// sidecar's memory is a leak, with the slope measured; the game server passes; the report
/// prints both tables and `soak violations: 1`.
#[test]
fn a_memory_leak_fails_with_its_slope() {
    let mut samples = series("node-1", 60, |_| 42.5);
    samples.extend(series("sidecar", 60, |t| 43.0 + 16.5 * t / 3600.0));
    let report = check_soak(&samples, &SoakBounds::default());
    assert!(!report.passed());
    assert_eq!(report.violation_count, 1, "{report}");
    let rss = report.trend("sidecar", Resource::Rss).expect("measured");
    assert_eq!(rss.verdict, Verdict::Leak);
    let slope = rss.slope_per_hour.expect("a verdict") / MIB;
    assert!((slope - 16.5).abs() < 0.01, "slope {slope} MiB/h");
    assert_eq!(
        report.trend("node-1", Resource::Rss).map(|t| t.verdict),
        Some(Verdict::Flat)
    );
    let text = report.to_string();
    assert!(text.contains("sidecar: 361 samples"), "{text}");
    assert!(text.contains("+16.50 MiB"), "{text}");
    assert!(text.contains("LEAK"), "{text}");
    assert!(text.ends_with("soak violations: 1\n"), "{text}");
}

/// The tolerance is the largest of 2 MiB an hour, 5 % of the mean an hour, and one kept 2 MiB
/// step read as a slope over the judged window (3.6 MiB an hour over the 50 minutes an hour
/// leaves after its warm-up): 3 MiB an hour on 43 MiB passes an hour's soak and fails a
/// three-hour one, 4 MiB an hour fails an hour; 10 MiB an hour on a 500 MiB process (2 %)
/// passes, on a 43 MiB one fails.
#[test]
fn the_memory_tolerance_is_the_documented_one() {
    let verdict = |base: f64, per_hour: f64, minutes: u32| {
        let report = check_soak(
            &series("p", minutes, |t| base + per_hour * t / 3600.0),
            &SoakBounds::default(),
        );
        report.trend("p", Resource::Rss).expect("measured").verdict
    };
    assert_eq!(verdict(43.0, 1.5, 60), Verdict::Flat);
    assert_eq!(verdict(43.0, 3.0, 60), Verdict::Flat);
    assert_eq!(verdict(43.0, 3.0, 180), Verdict::Leak);
    assert_eq!(verdict(43.0, 4.0, 60), Verdict::Leak);
    assert_eq!(verdict(500.0, 10.0, 60), Verdict::Flat);
    assert_eq!(verdict(43.0, 10.0, 60), Verdict::Leak);
}

/// The sidecar of the hour-long soak: flat at 32 MiB, then one step of 3.7 MiB during a burst
/// of which 1.9 MiB is kept (the allocator's huge pages), flat after, 34 minutes into an hour.
/// Its least-squares slope (+2.6 MiB an hour) is above the 2 MiB floor, and it passes: one kept
/// step is not a trend. Two such steps in the hour (a staircase) are.
#[test]
fn one_kept_step_of_memory_is_not_a_leak_and_a_staircase_is() {
    let step = |t: f64| {
        if t < 2650.0 {
            32.0
        } else if t < 2700.0 {
            35.7
        } else {
            33.9
        }
    };
    let report = check_soak(&series("sidecar", 60, step), &SoakBounds::default());
    let rss = report.trend("sidecar", Resource::Rss).expect("measured");
    let slope = rss.slope_per_hour.expect("a verdict") / MIB;
    assert!(slope > 2.0, "the step reads as {slope} MiB an hour");
    assert_eq!(rss.verdict, Verdict::Flat, "{report}");
    assert!(report.passed(), "{report}");

    let stairs = |t: f64| 32.0 + 2.0 * (t / 1200.0).floor();
    let report = check_soak(&series("sidecar", 60, stairs), &SoakBounds::default());
    let rss = report.trend("sidecar", Resource::Rss).expect("measured");
    assert_eq!(rss.verdict, Verdict::Leak, "{report}");
}

/// A process that climbs 20 MiB in its first 8 minutes (a cache filling to its cap) and is flat
/// after passes with the default warm-up of 10 minutes, and fails without a warm-up: the
/// warm-up is what forgives it.
#[test]
fn a_climb_during_the_warm_up_then_flat_passes() {
    let samples = series("sidecar", 60, |t| 43.0 + 20.0 * (t / 480.0).min(1.0));
    let report = check_soak(&samples, &SoakBounds::default());
    assert!(report.passed(), "{report}");
    let rss = report.trend("sidecar", Resource::Rss).expect("measured");
    assert_eq!((rss.first, rss.last), (63.0 * MIB, 63.0 * MIB));
    let no_warm_up = SoakBounds {
        warm_up: Duration::ZERO,
        ..SoakBounds::default()
    };
    assert_eq!(check_soak(&samples, &no_warm_up).violation_count, 1);
}

/// Memory jumping ±1.5 MiB from sample to sample, descriptors ±10, threads ±2 and tasks ±40
/// around flat means pass: the slope of an hour of samples is not moved by their noise.
#[test]
fn noise_within_the_tolerance_passes() {
    let mut noise = Noise(34);
    let samples: Vec<Sample> = (0..=360)
        .map(|i| {
            let t = f64::from(i) * 10.0;
            let mut s = at("sidecar", t, 45.0 + 1.5 * noise.next());
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            {
                s.fds = (30.0 + 10.0 * noise.next()) as u64;
                s.threads = (8.0 + 2.0 * noise.next()) as u64;
                s.tasks = Some((300.0 + 40.0 * noise.next()) as u64);
            }
            s
        })
        .collect();
    let report = check_soak(&samples, &SoakBounds::default());
    assert!(report.passed(), "{report}");
    let rss = report.trend("sidecar", Resource::Rss).expect("measured");
    assert!(
        rss.max - rss.min > 2.0 * MIB,
        "the noise is there: {report}"
    );
}

/// A descriptor lost every 6 s, or a task left behind every 5 s (600 and 720 an hour, over the
/// tolerance of 300), is a leak of its resource while memory stays flat; a descriptor lost
/// every 20 s (180 an hour) is within it.
#[test]
fn a_descriptor_or_task_leak_fails() {
    let mut samples = series("node-1", 60, |_| 43.0);
    for s in &mut samples {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        {
            s.fds = 24 + (s.t_s / 6.0) as u64;
            s.tasks = Some(40 + (s.t_s / 5.0) as u64);
        }
    }
    let report = check_soak(&samples, &SoakBounds::default());
    assert_eq!(report.violation_count, 2, "{report}");
    for (resource, verdict) in [
        (Resource::Rss, Verdict::Flat),
        (Resource::Fds, Verdict::Leak),
        (Resource::Threads, Verdict::Flat),
        (Resource::Tasks, Verdict::Leak),
    ] {
        assert_eq!(
            report.trend("node-1", resource).map(|t| t.verdict),
            Some(verdict),
            "{resource:?}: {report}"
        );
    }
    for s in &mut samples {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        {
            s.fds = 24 + (s.t_s / 20.0) as u64;
        }
    }
    let report = check_soak(&samples, &SoakBounds::default());
    assert_eq!(
        report.trend("node-1", Resource::Fds).map(|t| t.verdict),
        Some(Verdict::Flat),
        "{report}"
    );
}

/// A run of 11 minutes leaves 6 samples after the 10-minute warm-up: no verdict, even though
/// the memory climbs steeply, and the report does not pass (it could not have failed); it says
/// why. Samples without tasks have no tasks trend at all.
#[test]
fn too_few_samples_has_no_verdict_and_does_not_pass() {
    let mut samples = series("sidecar", 11, |t| 43.0 + 100.0 * t / 3600.0);
    for s in &mut samples {
        s.tasks = None;
    }
    let report = check_soak(&samples, &SoakBounds::default());
    assert!(!report.passed());
    assert_eq!(report.violation_count, 0);
    assert_eq!(report.inconclusive, 3, "rss, fds and threads: {report}");
    assert!(report.trend("sidecar", Resource::Tasks).is_none());
    let rss = report.trend("sidecar", Resource::Rss).expect("measured");
    assert_eq!((rss.verdict, rss.slope_per_hour), (Verdict::TooFew, None));
    let text = report.to_string();
    assert!(text.contains("too few samples"), "{text}");
    assert!(text.contains("soak inconclusive: 3"), "{text}");
    // No samples at all is no pass either.
    assert!(!check_soak(&[], &SoakBounds::default()).passed());
}

/// Samples survive their JSON-lines file: written and read back equal, a sample without tasks
/// has no `tasks` key, and a bad line is an error naming it.
#[test]
fn samples_round_trip_through_json_lines() {
    let mut samples = series("node-1", 1, |t| 40.0 + t);
    samples[2].tasks = None;
    let mut file = Vec::new();
    write_samples(&mut file, &samples).expect("written");
    let text = String::from_utf8(file.clone()).expect("UTF-8");
    assert_eq!(text.lines().count(), samples.len());
    assert!(!text.lines().nth(2).expect("line 3").contains("tasks"));
    assert_eq!(read_samples(&file[..]).expect("read"), samples);
    let bad = format!("{}\n{{\"t_s\":1}}\n", text.lines().next().expect("line 1"));
    let err = read_samples(bad.as_bytes()).expect_err("a sample without fields");
    assert!(err.to_string().starts_with("line 2:"), "{err}");
}

/// `VmRSS` and `Threads` are read from a status text in bytes and threads; a status without
/// `VmRSS` (a zombie's) is `None`.
#[test]
fn a_status_text_is_read() {
    let status = "Name:\tsidecar\nVmPeak:\t  90000 kB\nVmRSS:\t   44032 kB\nThreads:\t9\n";
    assert_eq!(parse_status(status), Some((44_032 * 1024, 9)));
    assert_eq!(parse_status("Name:\tz\nThreads:\t1\n"), None);
}

/// This test's own process read from `/proc`: some memory, at least one thread (the test
/// harness runs more), and the descriptors the test opens show up in the count.
#[cfg(target_os = "linux")]
#[test]
fn a_sample_is_read_from_proc() {
    let pid = std::process::id();
    let before = Sample::read(pid, "self", 0.0, Some(3)).expect("readable");
    assert!(before.rss_bytes > 1024 * 1024, "{before:?}");
    assert!(before.threads >= 1, "{before:?}");
    assert_eq!((before.process.as_str(), before.tasks), ("self", Some(3)));
    let held: Vec<std::fs::File> = (0..16)
        .map(|_| std::fs::File::open("/proc/self/status").expect("opened"))
        .collect();
    let after = Sample::read(pid, "self", 1.0, None).expect("readable");
    // Other tests of this binary open and close files meanwhile: at least most of the 16.
    assert!(after.fds >= before.fds + 8, "{before:?} {after:?}");
    drop(held);
    assert!(Sample::read(u32::MAX - 1, "none", 0.0, None).is_err());
}

#[test]
fn the_tasks_gauge_is_read_from_its_own_line_only() {
    let text = "# TYPE token_resolver_runtime_alive_tasks gauge\n\
                token_resolver_runtime_alive_tasks_other 9\n\
                token_resolver_runtime_alive_tasks 42\n";
    assert_eq!(alive_tasks(text), Some(42));
    assert_eq!(
        alive_tasks("token_resolver_runtime_alive_tasks_other 9\n"),
        None
    );
}

/// The reference API hashes each password in a 19 MiB Argon2 block that the allocator keeps
/// while logins come and gives back in a lull: its memory sits at 45 or at 65 MiB for minutes
/// at a time, which a least-squares line reads as a slope of many MiB an hour. Judged with its
/// own step (`rss_steps`) it passes; with the default 2 MiB step it fails.
#[test]
fn a_process_with_its_own_step_is_judged_against_it() {
    // Held for 7 minutes at a time, more often late in the hour than early.
    let held = |t: f64| {
        let minute = (t / 60.0).floor();
        if (minute > 30.0 && minute % 10.0 < 7.0) || (minute <= 30.0 && minute % 10.0 < 2.0) {
            65.0
        } else {
            45.0
        }
    };
    let samples = series("api", 60, held);
    let plain = check_soak(&samples, &SoakBounds::default());
    let rss = plain.trend("api", Resource::Rss).expect("measured");
    assert_eq!(rss.verdict, Verdict::Leak, "{plain}");
    let mut bounds = SoakBounds::default();
    bounds.rss_steps.insert("api".to_owned(), 20.0 * MIB);
    assert_eq!(bounds.rss_step("api"), 20.0 * MIB);
    assert_eq!(bounds.rss_step("sidecar"), 2.0 * MIB);
    let own = check_soak(&samples, &bounds);
    assert!(own.passed(), "{own}");
}

/// Samples read from a file may carry any time: a span no `Duration` holds (a `t_s` of 1e300)
/// gets a verdict, not a panic.
#[test]
fn an_absurd_time_in_the_samples_is_judged_without_a_panic() {
    let mut samples = series("node-1", 20, |_| 43.0);
    samples.push(at("node-1", 1e300, 43.0));
    let report = check_soak(&samples, &SoakBounds::default());
    assert!(report.trend("node-1", Resource::Rss).is_some(), "{report}");
}
