//! The products' resources over the run, for the soak (`--soak`): every `--sample-every`
//! seconds, each child's resident memory, descriptors and threads from `/proc`
//! ([`token_resolver_chaos::soak::Sample::read`]) and, for the nodes and the sidecar, their
//! alive tokio tasks from their `/metrics` (`token_resolver_runtime_alive_tasks`). It owns the
//! samples; `token_resolver_chaos::soak` judges them.
//!
//! A process restarted (by a fault, outside a soak) starts a new series, named `node-1#2`:
//! its memory starts over, and one line fitted across two lives would say nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use token_resolver_chaos::soak::Sample;

use crate::world::World;

/// The gauge of alive tokio tasks the products' admin listener exports.
const TASKS_GAUGE: &str = "token_resolver_runtime_alive_tasks";

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
    gauge(&text, TASKS_GAUGE)
}

/// The value of an unlabelled gauge `name` in a Prometheus text exposition.
fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        let value: f64 = value.trim().parse().ok()?;
        // A count of tasks: whole and far below 2^53.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(value.max(0.0) as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tasks_gauge_is_read_from_its_own_line_only() {
        let text = "# TYPE token_resolver_runtime_alive_tasks gauge\n\
                    token_resolver_runtime_alive_tasks_other 9\n\
                    token_resolver_runtime_alive_tasks 42\n";
        assert_eq!(gauge(text, TASKS_GAUGE), Some(42));
        assert_eq!(
            gauge("token_resolver_runtime_alive_tasks_other 9\n", TASKS_GAUGE),
            None
        );
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
