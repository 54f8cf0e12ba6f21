//! How the demo tells its steps (one aligned line each) and what each step must turn out as:
//! a step that does not ends the demo with a [`DemoError`].

use std::io::Write;
use std::time::Instant;

use token_resolver::Stats;
use token_resolver_player::{GameClientError, Player};

/// A demo step that did not turn out as expected.
pub(super) type DemoError = Box<dyn std::error::Error + Send + Sync>;

/// Width of the "what was done" column, so the outcomes line up.
const STEP: usize = 44;

/// One line: what was done, padded, then what came of it.
pub(super) fn step(out: &mut (dyn Write + Send), what: &str, outcome: &str) -> std::io::Result<()> {
    writeln!(out, "{what:<STEP$} -> {outcome}")
}

pub(super) fn expect_player(user: &Option<Player>, id: i64) -> Result<(), DemoError> {
    match user {
        Some(p) if p.id == id => Ok(()),
        other => Err(format!("expected user {id}, got {other:?}").into()),
    }
}

pub(super) fn expect_cache_hit(before: &Stats, after: &Stats, room: &str) -> Result<(), DemoError> {
    let calls = after.upstream_calls - before.upstream_calls;
    let hits = after.hits - before.hits;
    if calls != 0 || hits != 1 {
        return Err(format!(
            "join {room} should have been a cache hit; made {calls} calls, {hits} hits"
        )
        .into());
    }
    Ok(())
}

pub(super) fn expect_refused<T: std::fmt::Debug>(
    result: Result<T, GameClientError>,
    code: &str,
) -> Result<String, DemoError> {
    match result {
        Err(e) if e.code() == Some(code) => Ok(code.to_owned()),
        other => Err(format!("expected {code}, got {other:?}").into()),
    }
}

pub(super) fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
