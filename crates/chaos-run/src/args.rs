//! The command line of `token-resolver-chaos`, and the checks clap cannot make. A bad command
//! line exits 2, as every command of the workspace does.

use std::path::PathBuf;

use clap::Parser;

use crate::schedule::{FaultKindName, Weights};

/// Run the products on loopback under a seeded random schedule of players and faults, and
/// check the revocation invariants over what happened (issue 34). Exit 0: no violation; 1: a
/// violation or a leaked token; 2: a bad command line or a world that cannot start.
#[derive(Debug, Clone, Parser)]
#[command(name = "token-resolver-chaos", version)]
pub struct Args {
    /// How long the schedule runs, in seconds (at least 5).
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// The seed of the schedule; a random one when not given (printed first either way).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the history (JSON lines) here.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Game-server nodes (1 to 8).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Player operations per second (1 to 2000).
    #[arg(long, default_value_t = 40)]
    pub rate: u32,
    /// Players (2 to 10000); each is a user at both integrators.
    #[arg(long, default_value_t = 40)]
    pub players: usize,
    /// The `token-resolver` binary to run; by default the one beside this executable, built
    /// first with `$CARGO build --release` when run by cargo.
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// The fault kinds to make, comma-separated (`redis_killed`, `link_frozen`,
    /// `link_refused`, `process_killed`, `integrator_slow`, `integrator_5xx`,
    /// `integrator_timeout`, `clock_offset`), or `none`; all by default.
    #[arg(long, value_name = "LIST")]
    pub faults: Option<String>,
    /// Mean seconds between one fault's heal and the next fault (at least 1).
    #[arg(long, default_value_t = 6)]
    pub fault_gap: u64,
    /// Seconds before the first fault, while players log in and caches fill.
    #[arg(long, default_value_t = 10)]
    pub warm_up: u64,
    /// Percent of logins that take a token of 2-7 s, to see it expire (0 to 100).
    #[arg(long, default_value_t = 20)]
    pub short_tokens: u8,
    /// Weights of the operations, e.g. `ban=8,resolve=30` (the others keep their defaults:
    /// login=10 connect=14 join=14 refresh=8 resolve=20 authorize=10 logout=4 leave=5 ban=2
    /// unban=2 reuse=6).
    #[arg(long, value_name = "LIST")]
    pub weights: Option<String>,
    /// Where the children's logs go (kept after the run); a temporary directory by default.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// A soak: also judge each product's resident memory, descriptors, threads and tokio tasks
    /// over the run (a slope beyond the tolerance after a 10-minute warm-up fails the run; see
    /// docs/chaos-soak.md). Faults that restart a process are left out, so that each process
    /// is judged over one life. Meant for `--seconds 3600`.
    #[arg(long)]
    pub soak: bool,
    /// Seconds between two samples of the products' resources (1 to 600).
    #[arg(long, default_value_t = 10)]
    pub sample_every: u64,
    /// Write the resource samples (JSON lines) here.
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// Judge a samples file (`--samples` of an earlier soak) with the soak check, print its
    /// report and exit (0 passed, 1 a leak or too few samples, 2 an unreadable file); runs
    /// nothing, so it takes no other option.
    #[arg(long, value_name = "FILE", exclusive = true)]
    pub judge: Option<PathBuf>,
}

/// The command line, checked.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The arguments as given.
    pub args: Args,
    /// The seed in force.
    pub seed: u64,
    /// The fault kinds in force.
    pub faults: Vec<FaultKindName>,
    /// The operation weights in force.
    pub weights: Weights,
}

impl Args {
    /// Whether the run samples the products' resources: a soak judges them, and `--samples`
    /// keeps them.
    #[must_use]
    pub fn samples_resources(&self) -> bool {
        self.soak || self.samples.is_some()
    }

    /// Checks what clap cannot, and settles the seed.
    ///
    /// # Errors
    ///
    /// A sentence naming the bad value.
    pub fn check(self) -> Result<Checked, String> {
        if self.seconds < 5 || self.seconds > 7 * 24 * 3600 {
            return Err(format!(
                "--seconds {}: at least 5, at most a week",
                self.seconds
            ));
        }
        if !(1..=8).contains(&self.nodes) {
            return Err(format!("--nodes {}: 1 to 8", self.nodes));
        }
        if !(1..=2000).contains(&self.rate) {
            return Err(format!("--rate {}: 1 to 2000", self.rate));
        }
        if !(2..=10_000).contains(&self.players) {
            return Err(format!("--players {}: 2 to 10000", self.players));
        }
        if self.short_tokens > 100 {
            return Err(format!("--short-tokens {}: 0 to 100", self.short_tokens));
        }
        if self.fault_gap == 0 {
            return Err("--fault-gap 0: at least 1".to_owned());
        }
        if !(1..=600).contains(&self.sample_every) {
            return Err(format!("--sample-every {}: 1 to 600", self.sample_every));
        }
        let faults = match self.faults.as_deref() {
            None if self.soak => FaultKindName::ALL
                .into_iter()
                .filter(|kind| !kind.restarts_a_process())
                .collect(),
            None => FaultKindName::ALL.to_vec(),
            Some("none") => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|name| {
                    FaultKindName::parse(name.trim())
                        .ok_or_else(|| format!("--faults: unknown fault kind `{}`", name.trim()))
                })
                .collect::<Result<_, _>>()?,
        };
        if self.soak {
            if let Some(kind) = faults.iter().find(|kind| kind.restarts_a_process()) {
                return Err(format!(
                    "--soak with --faults {}: a soak judges each process over one life, and this fault restarts one",
                    kind.name()
                ));
            }
        }
        let weights = match self.weights.as_deref() {
            None => Weights::default(),
            Some(list) => Weights::parse(list)?,
        };
        let seed = self.seed.unwrap_or_else(|| fastrand::u64(..));
        Ok(Checked {
            args: self,
            seed,
            faults,
            weights,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(args: &[&str]) -> Result<Checked, String> {
        Args::try_parse_from(std::iter::once("token-resolver-chaos").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?
            .check()
    }

    #[test]
    fn a_soak_leaves_out_the_faults_that_restart_a_process_and_keeps_the_others() {
        let all = checked(&[]).unwrap().faults;
        assert_eq!(all, FaultKindName::ALL.to_vec());
        let soak = checked(&["--soak"]).unwrap().faults;
        assert!(!soak.is_empty());
        assert!(soak.iter().all(|kind| !kind.restarts_a_process()));
        assert_eq!(
            soak.len() + 2,
            all.len(),
            "only process_killed and clock_offset go"
        );
        let named = checked(&["--soak", "--faults", "redis_killed,link_frozen"]).unwrap();
        assert_eq!(
            named.faults,
            [FaultKindName::RedisKilled, FaultKindName::LinkFrozen]
        );
    }
}
