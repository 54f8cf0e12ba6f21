//! Making and healing the faults the schedule plans, each recorded as `fault_begin` when it
//! is in force and `fault_end` once healed (a restarted process: once it is ready again).

use std::collections::HashMap;
use std::sync::Mutex;

use token_resolver_chaos::FaultKind;

use crate::proxy::Mode;
use crate::record::{lock, Recorder};
use crate::schedule::{Api, Fault, Target};
use crate::world::{faketime_lib, World};

/// The faults in force, by id, for their heal.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    open: Mutex<HashMap<usize, Fault>>,
}

fn target_name(target: Target) -> String {
    match target {
        Target::Node(n) => format!("node-{}", n + 1),
        Target::Sidecar => "sidecar".to_owned(),
    }
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::A => "api",
        Api::B => "api-b",
    }
}

impl Faults {
    /// Makes fault `id`.
    ///
    /// # Errors
    ///
    /// A process that cannot be started again (the run cannot go on).
    pub(crate) async fn begin(
        &self,
        world: &World,
        rec: &Recorder,
        id: usize,
        fault: Fault,
    ) -> Result<(), String> {
        let name = format!("f{id}");
        match fault {
            Fault::RedisKilled => {
                tokio::task::block_in_place(|| lock(&world.redis).stop());
                rec.fault_begin("redis", name, FaultKind::RedisKilled, Vec::new(), None);
            }
            Fault::LinkFrozen(target) => {
                world.relays[&target].silence_open_connections();
                let process = target_name(target);
                rec.fault_begin(
                    &format!("relay-{process}-redis"),
                    name,
                    FaultKind::LinkFrozen,
                    vec![process],
                    None,
                );
            }
            Fault::LinkRefused(target) => {
                let relay = &world.relays[&target];
                relay.refuse(true);
                relay.silence_open_connections();
                let process = target_name(target);
                rec.fault_begin(
                    &format!("relay-{process}-redis"),
                    name,
                    FaultKind::LinkRefused,
                    vec![process],
                    None,
                );
            }
            Fault::ProcessKilled(target) => {
                world.child(target).lock().await.kill().await;
                rec.fault_begin(
                    &target_name(target),
                    name,
                    FaultKind::ProcessKilled,
                    Vec::new(),
                    None,
                );
            }
            Fault::IntegratorSlow(api, ms) => {
                world.proxies[&api].set(Mode::Slow(ms));
                rec.fault_begin(
                    api_name(api),
                    name,
                    FaultKind::IntegratorSlow,
                    Vec::new(),
                    Some(format!("{ms}ms")),
                );
            }
            Fault::Integrator5xx(api) => {
                world.proxies[&api].set(Mode::Failing);
                rec.fault_begin(
                    api_name(api),
                    name,
                    FaultKind::Integrator5xx,
                    Vec::new(),
                    None,
                );
            }
            Fault::IntegratorTimeout(api) => {
                world.proxies[&api].set(Mode::Silent);
                rec.fault_begin(
                    api_name(api),
                    name,
                    FaultKind::IntegratorTimeout,
                    Vec::new(),
                    None,
                );
            }
            Fault::ClockOffset(node, secs) => {
                if faketime_lib().is_none() {
                    // Its end finds nothing open, and is skipped too.
                    println!("note: libfaketime is not installed (apt-get install faketime); skipping clock offset f{id}");
                    return Ok(());
                }
                let process = target_name(Target::Node(node));
                // In force from the kill that restarts it under the offset.
                rec.fault_begin(
                    &process,
                    name,
                    FaultKind::ClockOffset,
                    Vec::new(),
                    Some(format!("{secs:+}s")),
                );
                let mut child = world.nodes[node].lock().await;
                world.restart(&mut child, Some(secs)).await?;
            }
        }
        lock(&self.open).insert(id, fault);
        Ok(())
    }

    /// Heals fault `id`.
    ///
    /// # Errors
    ///
    /// As [`begin`](Self::begin).
    pub(crate) async fn end(&self, world: &World, rec: &Recorder, id: usize) -> Result<(), String> {
        let Some(fault) = lock(&self.open).remove(&id) else {
            return Ok(());
        };
        let name = format!("f{id}");
        match fault {
            Fault::RedisKilled => {
                tokio::task::block_in_place(|| lock(&world.redis).restart());
                rec.fault_end("redis", name);
            }
            Fault::LinkFrozen(target) => {
                rec.fault_end(&format!("relay-{}-redis", target_name(target)), name)
            }
            Fault::LinkRefused(target) => {
                world.relays[&target].refuse(false);
                rec.fault_end(&format!("relay-{}-redis", target_name(target)), name);
            }
            Fault::ProcessKilled(target) => {
                let mut child = world.child(target).lock().await;
                world.restart(&mut child, None).await?;
                rec.fault_end(&target_name(target), name);
            }
            Fault::IntegratorSlow(api, _)
            | Fault::Integrator5xx(api)
            | Fault::IntegratorTimeout(api) => {
                world.proxies[&api].set(Mode::Healthy);
                rec.fault_end(api_name(api), name);
            }
            Fault::ClockOffset(node, _) => {
                let mut child = world.nodes[node].lock().await;
                world.restart(&mut child, None).await?;
                rec.fault_end(&target_name(Target::Node(node)), name);
            }
        }
        Ok(())
    }

    /// Heals whatever is still open (a run cut short).
    pub(crate) async fn end_all(&self, world: &World, rec: &Recorder) {
        let ids: Vec<usize> = lock(&self.open).keys().copied().collect();
        for id in ids {
            let _ = self.end(world, rec, id).await;
        }
    }
}
