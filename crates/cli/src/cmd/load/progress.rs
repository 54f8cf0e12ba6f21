//! What a long run shows of itself: a progress bar on stderr, and the process's memory
//! readings from `/proc/self/status`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar on stderr that appears only once a run has lasted a second.
pub(super) struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    pub(super) fn start<C: Counter>(label: &'static str, total: u64, done: Arc<C>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
            if let Ok(style) =
                ProgressStyle::with_template("{msg:>30} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(label);
            let began = Instant::now();
            let mut shown = false;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if !shown && began.elapsed() > Duration::from_secs(1) {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    shown = true;
                }
                bar.set_position(done.get().min(total));
            }
            bar.finish_and_clear();
        });
        Progress {
            stop,
            thread: Some(thread),
        }
    }

    pub(super) fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a progress bar reads.
pub(super) trait Counter: Send + Sync + 'static {
    fn get(&self) -> u64;
}

impl Counter for AtomicU64 {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl Counter for AtomicUsize {
    fn get(&self) -> u64 {
        self.load(Ordering::Relaxed) as u64
    }
}

/// A field of `/proc/self/status` in KiB (`VmRSS:`, `VmHWM:`); `None` off Linux.
pub(super) fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Resets `VmHWM` to the current RSS (Linux 4.0+), so each row reports its own peak.
pub(super) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
