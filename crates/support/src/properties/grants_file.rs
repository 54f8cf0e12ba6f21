//! The `grants_file` target: the nginx grants file a starting sidecar reads back.

use token_resolver_sidecar::fuzzing::grants_in_force;

use super::show;

/// Input of the `grants_file` target: a byte setting `now` around 1,764,150,000 (unix seconds,
/// -128 to +127), a byte setting `latest` (`now` plus 0 to 2,550 s), then the file's bytes.
pub fn fuzz_grants_file(data: &[u8]) {
    let [a, b, file @ ..] = data else {
        return;
    };
    let now = 1_764_150_000 + u64::from(*a) - 128;
    let latest = now + u64::from(*b) * 10;
    check_grants_file(file, now, latest);
}

/// The grants file properties:
///
/// - the sidecar takes back exactly what a straightforward reading of the file gives: each
///   line ended by `\n` (a last line without one was cut short by a crash) that is UTF-8, an
///   unsigned integer (as Rust reads one), one space, and a key of visible ASCII and spaces,
///   not empty; those ending after `now`, in file order, each ending at `latest` at most;
/// - so no more grants than lines, none ending after `latest`, no key holding a line break.
pub fn check_grants_file(file: &[u8], now: u64, latest: u64) {
    let read = grants_in_force(file, now, latest);
    assert_eq!(
        read,
        reference_grants(file, now, latest),
        "grants read back from {} (now {now}, latest {latest})",
        show(file)
    );
    let lines = file.iter().filter(|&&b| b == b'\n').count();
    assert!(
        read.len() <= lines,
        "{} grants from {lines} lines",
        read.len()
    );
    for (key, until) in &read {
        assert!(
            *until <= latest,
            "a grant ending at {until}, after {latest}"
        );
        assert!(!key.contains(['\n', '\r']), "a key with a line break");
    }
}

fn reference_grants(file: &[u8], now: u64, latest: u64) -> Vec<(String, u64)> {
    let mut lines: Vec<&[u8]> = file.split(|&b| b == b'\n').collect();
    // What follows the last `\n` (empty when the file ends with one) is not a whole line.
    lines.pop();
    let mut out = Vec::new();
    for line in lines {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let Some(space) = line.find(' ') else {
            continue;
        };
        let (until, key) = (&line[..space], &line[space + 1..]);
        let Ok(until) = until.parse::<u64>() else {
            continue;
        };
        let header_value = !key.is_empty() && key.bytes().all(|b| (b' '..=b'~').contains(&b));
        if until > now && header_value {
            out.push((key.to_owned(), until.min(latest)));
        }
    }
    out
}
