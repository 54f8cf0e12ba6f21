//! The products' resources over the run, for the soak (`--soak`): every `--sample-every`
//! seconds, each child's resident memory, descriptors and threads from `/proc`
//! ([`token_resolver_chaos::soak::Sample::read`]) and, for the nodes and the sidecar, their
//! alive tokio tasks from their `/metrics` (`token_resolver_runtime_alive_tasks`). It owns the
//! samples; `token_resolver_chaos::soak` judges them.
//!
//! A process restarted (by a fault, outside a soak) starts a new series, named `node-1#2`:
//! its memory starts over, and one line fitted across two lives would say nothing.
//!
//! It also owns keeping the kernel's transparent huge pages out of what it measures
//! ([`huge_pages_off`], which the run calls before the world starts): with them on,
//! khugepaged's round through the processes made each one's resident memory jump 3-5 MiB once
//! an hour, at a time set by the order they started, not by what they did
//! (docs/chaos-soak.md).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use token_resolver_chaos::soak::{alive_tasks, Sample};

use crate::world::World;

/// The samples taken so far, and which life of each process they belong to.
#[derive(Debug, Default)]
pub(crate) struct Sampler {
    samples: Vec<Sample>,
    /// Each process's current pid and series name.
    lives: HashMap<String, (u32, String)>,
}

impl Sampler {
    /// Samples every child once, `since` the run's start.
    pub(crate) async fn sample(&mut self, world: &World, http: &reqwest::Client, since: Instant) {
        for (name, pid, admin) in world.pids().await {
            let series = self.series(&name, pid);
            let tasks = match admin {
                Some(admin) => scrape_tasks(http, admin).await,
                None => None,
            };
            let t_s = since.elapsed().as_secs_f64();
            // A child that died between the listing and the read has no sample this time.
            if let Ok(sample) = Sample::read(pid, &series, t_s, tasks) {
                self.samples.push(sample);
            }
        }
    }

    /// The series name of process `name` now running as `pid`: its name for its first life,
    /// `name#2`, `name#3`... after each restart.
    fn series(&mut self, name: &str, pid: u32) -> String {
        match self.lives.get_mut(name) {
            Some((known, series)) if *known == pid => series.clone(),
            Some((known, series)) => {
                let life = series
                    .rsplit_once('#')
                    .and_then(|(_, n)| n.parse::<u32>().ok())
                    .unwrap_or(1)
                    + 1;
                *known = pid;
                *series = format!("{name}#{life}");
                series.clone()
            }
            None => {
                self.lives.insert(name.to_owned(), (pid, name.to_owned()));
                name.to_owned()
            }
        }
    }

    /// Every sample taken.
    pub(crate) fn samples(&self) -> &[Sample] {
        &self.samples
    }
}

/// Turns transparent huge pages off for this process and so for every child it starts from now
/// on (`PR_SET_THP_DISABLE` is inherited across `fork` and kept across `exec`), so that a
/// child's resident memory follows the pages it touches.
///
/// # Errors
///
/// The kernel refused (a kernel before 3.15); the run goes on with huge pages as they were.
pub(crate) fn huge_pages_off() -> Result<(), String> {
    nix::sys::prctl::set_thp_disable(true).map_err(|e| format!("PR_SET_THP_DISABLE: {e}"))
}

/// Whether a `/proc/<pid>/status` says transparent huge pages are off for its process; `None`
/// without a `THP_enabled` line (Linux before 5.0).
fn thp_disabled(status: &str) -> Option<bool> {
    let line = status.lines().find(|l| l.starts_with("THP_enabled:"))?;
    Some(line.split_whitespace().nth(1) == Some("0"))
}

/// What the run prints of the world's children and huge pages: how many run with them off,
/// from each one's `/proc/<pid>/status`.
pub(crate) async fn huge_pages_report(world: &World) -> String {
    let pids = world.pids().await;
    let said: Vec<Option<bool>> = pids
        .iter()
        .map(|(_, pid, _)| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|status| thp_disabled(&status))
        })
        .collect();
    let off = said.iter().filter(|s| **s == Some(true)).count();
    let unknown = said.iter().filter(|s| s.is_none()).count();
    let mut report = format!(
        "transparent huge pages: off in {off} of {} processes",
        pids.len()
    );
    if unknown > 0 {
        report.push_str(&format!(
            " ({unknown} unknown: no THP_enabled in /proc/<pid>/status before Linux 5.0)"
        ));
    }
    report
}

/// The alive tasks `admin`'s `/metrics` says, or `None` when it does not answer in time.
async fn scrape_tasks(http: &reqwest::Client, admin: SocketAddr) -> Option<u64> {
    let text = http
        .get(format!("http://{admin}/metrics"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    alive_tasks(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_off_is_inherited_by_a_child_across_exec() {
        // It sets the flag for this whole test binary: no other test here starts a process
        // or measures memory.
        huge_pages_off().expect("the kernel takes PR_SET_THP_DISABLE");
        let status = std::process::Command::new("cat")
            .arg("/proc/self/status")
            .output()
            .expect("cat runs");
        let status = String::from_utf8_lossy(&status.stdout);
        assert_eq!(thp_disabled(&status), Some(true), "{status}");
    }

    #[test]
    fn a_status_says_whether_huge_pages_are_off() {
        assert_eq!(
            thp_disabled("Name:\tx\nTHP_enabled:\t0\nThreads:\t4\n"),
            Some(true)
        );
        assert_eq!(thp_disabled("Name:\tx\nTHP_enabled:\t1\n"), Some(false));
        assert_eq!(thp_disabled("Name:\tx\nThreads:\t4\n"), None);
    }

    #[test]
    fn a_restarted_process_starts_a_new_series() {
        let mut sampler = Sampler::default();
        assert_eq!(sampler.series("node-1", 10), "node-1");
        assert_eq!(sampler.series("node-1", 10), "node-1");
        assert_eq!(sampler.series("node-1", 11), "node-1#2");
        assert_eq!(sampler.series("sidecar", 12), "sidecar");
        assert_eq!(sampler.series("node-1", 13), "node-1#3");
        assert_eq!(sampler.series("node-1", 13), "node-1#3");
    }
}
