//! Every committed fuzz input (`fuzz/regressions/<target>/`: the seeds, the minimised corpus
//! entries worth keeping, and every crash a fuzzer found) replayed through the same property
//! checks the fuzz targets run, on the stable toolchain, on every `cargo test`.

use token_resolver_support::properties;

use std::path::PathBuf;

/// Runs `check` on each file of `fuzz/regressions/<target>/`, naming the file that fails.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
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

#[test]
fn answer_regressions_keep_their_properties() {
    // Pins down the answer parser and Cache-Control properties on every committed input.
    replay("answer", properties::fuzz_answer);
}

#[test]
fn token_regressions_keep_their_properties() {
    // Pins down the b64token rule against its reference on every committed input.
    replay("token", properties::fuzz_token);
}

#[test]
fn auth_url_regressions_keep_their_properties() {
    // Pins down authUrl parsing, normalisation and allowlist matching on every committed input.
    replay("auth_url", properties::fuzz_auth_url);
}

#[test]
fn room_auth_url_regressions_keep_their_properties() {
    // Pins down the RoomInfo::auth_url rule on every committed input.
    replay("room_auth_url", properties::fuzz_room_auth_url);
}
