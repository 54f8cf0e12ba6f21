//! The properties the fuzz targets check, shared with the stable-toolchain tests.
//!
//! Each fuzz target in `fuzz/fuzz_targets/` is one line calling a `fuzz_*` function here on the
//! raw bytes libFuzzer hands it; the library's `tests/it/fuzz_regressions.rs` replays every
//! committed corpus and crash file through the same function, and `tests/it/properties.rs` drives
//! the `check_*` functions with proptest strategies. This module is built without the crate's
//! `servers` feature for the fuzz targets, so it uses only the crate's plain dependencies:
//! `token_resolver`, `token_resolver_player`, `serde`, `serde_json`, `url`, `arbitrary` and
//! `tokio`.
//!
//! Every check panics with the offending input when a property fails; "no panic" is the
//! weakest of them.

use std::cell::RefCell;
use std::fmt;
use std::time::Duration;

use arbitrary::Unstructured;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Number, Value};
use token_resolver::answer::{parse_cache_control, parse_user, Freshness};
use token_resolver::{check_syntax, MAX_TOKEN_BYTES};
use token_resolver::{AccessToken, Endpoint, ErrorCode, PlainHttp, Resolver};
use token_resolver_player::{RoomInfo, RoomJoinArgs};

mod answer;
mod auth_url;
#[cfg(feature = "fuzz-sidecar")]
mod ext_authz;
#[cfg(feature = "fuzz-listener")]
mod forwarded;
#[cfg(feature = "fuzz-game-server")]
mod game_message;
#[cfg(feature = "fuzz-sidecar")]
mod grants_file;
#[cfg(feature = "fuzz-sidecar")]
mod last_event_id;
#[cfg(feature = "fuzz-reference-api")]
mod login_body;
#[cfg(feature = "fuzz-redis")]
mod redis_reply;
#[cfg(feature = "fuzz-sidecar")]
mod resolve_body;
mod room_auth_url;
#[cfg(feature = "fuzz-redis")]
mod stream_message;
mod token;

pub use self::answer::*;
pub use self::auth_url::*;
#[cfg(feature = "fuzz-sidecar")]
pub use self::ext_authz::*;
#[cfg(feature = "fuzz-listener")]
pub use self::forwarded::*;
#[cfg(feature = "fuzz-game-server")]
pub use self::game_message::*;
#[cfg(feature = "fuzz-sidecar")]
pub use self::grants_file::*;
#[cfg(feature = "fuzz-sidecar")]
pub use self::last_event_id::*;
#[cfg(feature = "fuzz-reference-api")]
pub use self::login_body::*;
#[cfg(feature = "fuzz-redis")]
pub use self::redis_reply::*;
#[cfg(feature = "fuzz-sidecar")]
pub use self::resolve_body::*;
pub use self::room_auth_url::*;
#[cfg(feature = "fuzz-redis")]
pub use self::stream_message::*;
pub use self::token::*;

/// JSON equality where two floats are equal within a relative 1e-15: serde_json's default
/// float parsing is not always correctly rounded, so a float may move by one unit in the last
/// place over a text round trip. Ids and names are compared exactly elsewhere.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-15 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => json_map_eq(x, y),
        _ => a == b,
    }
}

fn json_map_eq(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| json_eq(v, w)))
}

/// An input shown in a failure message: lossy text, cut to 300 bytes.
fn show(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]);
    format!("{text:?} ({} bytes)", bytes.len())
}

/// Runs `check` on each committed input of fuzz target `target` (`fuzz/regressions/<target>/`:
/// the seeds, the corpus entries worth keeping, and every crash a fuzzer found; at least five),
/// naming the file that breaks it: the stable tests' replay of what the fuzzers run.
pub fn replay(target: &str, check: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "{}: only {} inputs",
        dir.display(),
        files.len()
    );
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{} breaks a property: {message}", file.display());
        }
    }
}
