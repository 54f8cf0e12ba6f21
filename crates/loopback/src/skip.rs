//! Skipping a test (or, under CI, failing it) when a program it needs is not installed: the one
//! rule every test that starts a real program follows.

/// Whether a program a test needs (`what`, from the Debian packages `packages`) was `found`:
/// without it the test is skipped with a note saying so, or fails under CI, which installs it.
pub fn present(found: bool, what: &str, packages: &str) -> bool {
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what} is not installed (apt-get install {packages})"
        );
        eprintln!("note: {what} is not installed; skipping a test that needs it");
    }
    found
}
