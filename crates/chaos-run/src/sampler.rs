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
