//! The `ext_authz` target: the HTTP headers and `grpc-timeout` of an Envoy ext_authz
//! `CheckRequest`, as the sidecar's gRPC check reads them.

use std::collections::HashMap;
use std::time::Duration;

use token_resolver_sidecar::fuzzing::ext_authz_check;

use super::answer::token_like_runs;

/// A check's own deadline, which a client's `grpc-timeout` may only shorten.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Input of the `ext_authz` target: lines `name:value` (lossy UTF-8), the check's HTTP headers
/// (a later line of a name replaces an earlier one, as in Envoy's map), except
/// `grpc-timeout:value`, the gRPC metadata.
pub fn fuzz_ext_authz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut headers = HashMap::new();
    let mut timeout = None;
    for line in text.split('\n') {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if name == "grpc-timeout" {
            timeout = Some(value.to_owned());
        } else {
            headers.insert(name.to_owned(), value.to_owned());
        }
    }
    check_ext_authz(&headers, timeout.as_deref());
}

/// The ext_authz properties:
///
/// - the token is what a bearer API reads of `authorization` (RFC 9110: optional spaces and
///   tabs around it, a scheme of `tchar`s, `Bearer` in any case, then the credentials with
///   their leading spaces dropped; no header, an empty scheme or another scheme is
///   `token_missing`; bytes outside visible ASCII or a scheme that is not a token are
///   `token_malformed`), and an error's message quotes nothing of the header;
/// - an allowed check sets `x-user-id` and `x-user-name`, overwriting the client's, and
///   removes exactly the client's other `x-user-*` headers and `x-auth-url`, in any case;
/// - the deadline is the shorter of ten seconds and a `grpc-timeout` of at most 8 digits and a
///   unit (`H M S m u n`), ten seconds for any other.
pub fn check_ext_authz(headers: &HashMap<String, String>, grpc_timeout: Option<&str>) {
    let check = ext_authz_check(headers, grpc_timeout, "Ann");
    let authorization = headers.get("authorization");
    match (
        &check.token,
        reference_token(authorization.map(String::as_str)),
    ) {
        (Ok(token), Ok(expected)) => assert_eq!(token, &expected, "token of {authorization:?}"),
        (Err((code, message)), Err(expected)) => {
            assert_eq!(*code, expected, "code for {authorization:?}");
            for run in token_like_runs(authorization.map_or(&[][..], |a| a.as_bytes()), 16) {
                assert!(
                    !message.contains(run),
                    "the error quotes {run:?}: {message}"
                );
            }
        }
        (got, expected) => panic!("{authorization:?} read as {got:?}, expected {expected:?}"),
    }

    let mut removed = check.removed.clone();
    removed.sort();
    let mut expected: Vec<String> = headers
        .keys()
        .map(|name| name.to_ascii_lowercase())
        .filter(|name| {
            (name.starts_with("x-user-") || name == "x-auth-url")
                && name != "x-user-id"
                && name != "x-user-name"
        })
        .collect();
    expected.sort();
    assert_eq!(removed, expected, "removed of {:?}", headers.keys());
    assert_eq!(
        check.set,
        [
            ("x-user-id".to_owned(), true),
            ("x-user-name".to_owned(), true)
        ],
        "the user's headers"
    );

    if let Some(deadline) = check.deadline {
        assert!(deadline <= CHECK_TIMEOUT, "a deadline of {deadline:?}");
        assert_eq!(
            deadline,
            grpc_timeout
                .and_then(reference_timeout)
                .map_or(CHECK_TIMEOUT, |asked| asked.min(CHECK_TIMEOUT)),
            "deadline for grpc-timeout {grpc_timeout:?}"
        );
    }
}

fn reference_token(authorization: Option<&str>) -> Result<String, &'static str> {
    let value = authorization.ok_or("token_missing")?;
    if !value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return Err("token_malformed");
    }
    let value = value.trim_matches([' ', '\t']);
    let (scheme, credentials) = match value.find(' ') {
        Some(i) => (&value[..i], &value[i + 1..]),
        None => (value, ""),
    };
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if scheme.is_empty() {
        Err("token_missing")
    } else if !scheme.bytes().all(tchar) {
        Err("token_malformed")
    } else if !scheme.eq_ignore_ascii_case("bearer") {
        Err("token_missing")
    } else {
        Ok(credentials.trim_start_matches(' ').to_owned())
    }
}

fn reference_timeout(value: &str) -> Option<Duration> {
    if value.is_empty() || !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}
