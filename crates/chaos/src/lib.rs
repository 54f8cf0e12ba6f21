//! The history of a seeded chaos run and the checker of its revocation invariants (issue 34).
//!
//! The run (`token-resolver chaos --seconds S --seed N`, to come) starts a reference API,
//! Redis, game-server nodes and a sidecar on loopback, drives players and faults, and records
//! every operation, outcome, session event and fault as a [`History`](history) of [`Event`]s,
//! one JSON line each. It keeps the real tokens in memory and names them in the history by
//! opaque ids ([`TokenId`], `t17`). This crate checks what it recorded:
//!
//! - no admission of a token or user after its revocation was acknowledged, beyond the bound
//!   (on a healthy link; within the recovery bound after a fault heals);
//! - every live session a revocation names is closed, or told `resync` or
//!   `reauth_required`, within the bound;
//! - no session is kicked for a user nobody revoked (beyond a stated rate after a lost
//!   channel, which must re-check, not kick);
//! - nothing is lost across a restart;
//! - no token in any log line, metric scrape or Redis key the run collected, nor in the
//!   history.
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | [`history`] | the event types, the line format, the strict reader [`read_history`] and [`write_history`] |
//! | [`bounds`] | [`Bounds`]: each bound's default and the document it comes from |
//! | `model` | reading a history into tokens, revocations, fault windows and sessions |
//! | [`checker`] | the invariants' semantics, and [`check`] |
//! | [`leaks`] | the "no token leaked" search ([`check_leaks`]) over the texts and [`Secrets`] the run passes in memory |
//! | [`report`] | the [`Report`]: summary, worst delay per bound, `violations: N`, each violation explained |
//! | [`soak`] | the soak's resource check: [`Sample`]s of RSS, descriptors, threads and tasks, their slope after a warm-up against [`SoakBounds`], the [`SoakReport`] |
//!
//! What the run provides: the history (or the events in memory), the [`Bounds`] it ran
//! under, and after the run the real tokens ([`Secrets`]) and the texts it collected
//! ([`Collected`]) for [`check_leaks`].
//!
//! # Example
//!
//! ```
//! use token_resolver_chaos::{check, read_history, Bounds};
//!
//! let history = br#"{"t_us":100,"process":"api","kind":"op","op":"login","start_us":50,"outcome":"ok","token":"t1","user":7}
//! {"t_us":200,"process":"api","kind":"op","op":"ban","start_us":150,"outcome":"ok","user":7}
//! {"t_us":900000,"process":"node-1","kind":"op","op":"connect","start_us":800000,"outcome":"ok","token":"t1","session":"s1"}
//! "#;
//! let events = read_history(&history[..])?;
//! let report = check(&events, &Bounds::default());
//! assert_eq!(report.violation_count, 1); // connected 0.8 s after the ban: 250 ms is the bound
//! println!("{report}"); // ... "violations: 1" and the late admission, by line
//! # Ok::<(), token_resolver_chaos::HistoryError>(())
//! ```
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod bounds;
pub mod checker;
pub mod history;
pub mod leaks;
mod model;
pub mod report;
pub mod soak;

use std::io::BufReader;
use std::path::Path;

pub use self::bounds::Bounds;
pub use self::checker::check;
pub use self::history::{
    read_history, write_history, Event, Expiry, FaultBegin, FaultEnd, FaultKind, HistoryError,
    Kind, Op, OpKind, Outcome, SessionEvent, SessionEventKind, TokenId, MAX_LINE_BYTES,
};
pub use self::leaks::{check_leaks, Collected, Secrets};
pub use self::report::{BoundKind, EventRef, Invariant, Report, Violation, Worst};
pub use self::soak::{
    check_soak, read_samples, write_samples, Resource, Sample, SoakBounds, SoakReport, Verdict,
};

/// Reads the history at `path` and checks it.
///
/// # Errors
///
/// The file cannot be read, or a line of it is not a valid event ([`read_history`]).
pub fn check_file(path: impl AsRef<Path>, bounds: &Bounds) -> Result<Report, HistoryError> {
    let file = std::fs::File::open(path)?;
    let events = read_history(BufReader::new(file))?;
    Ok(check(&events, bounds))
}
