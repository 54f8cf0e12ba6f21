//! The `token` target: the b64token rule and the size limit.

use super::*;

/// Input of the `token` target: the bytes as a token (when they are UTF-8), and the same token
/// left-padded with `A` to 4095, 4096 and 4097 bytes, so every input also probes the size limit.
pub fn fuzz_token(data: &[u8]) {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    check_token(token);
    for total in [MAX_TOKEN_BYTES - 1, MAX_TOKEN_BYTES, MAX_TOKEN_BYTES + 1] {
        if let Some(pad) = total.checked_sub(token.len()) {
            check_token(&format!("{}{token}", "A".repeat(pad)));
        }
    }
}

/// `check_syntax` and `AccessToken::new` agree with [`reference_token_code`]; their errors and
/// `Debug` never show the token.
pub fn check_token(token: &str) {
    let want = reference_token_code(token);
    let got = check_syntax(token);
    assert_eq!(
        got.as_ref().err().map(|e| e.code()),
        want,
        "check_syntax on {token:?}"
    );
    match AccessToken::new(token) {
        Ok(held) => {
            assert_eq!(want, None, "AccessToken::new accepted {token:?}");
            assert_eq!(held.secret(), token);
            assert_eq!(format!("{held:?}"), "AccessToken([redacted])");
        }
        Err(e) => assert_eq!(Some(e.code()), want, "AccessToken::new on {token:?}"),
    }
    if let Err(e) = got {
        // A refusal's text depends on which rule failed, never on the token: it is one of the
        // texts the refusals of a few fixed tokens give.
        static FIXED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let fixed = FIXED.get_or_init(|| {
            ["", " ", "a ", &"a".repeat(MAX_TOKEN_BYTES + 1)]
                .iter()
                .filter_map(|t| check_syntax(t).err())
                .flat_map(|e| [e.to_string(), format!("{e:?}")])
                .collect()
        });
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(
                fixed.contains(&shown),
                "refusal of {token:?} reads {shown:?}, not a fixed text"
            );
        }
    }
}

/// RFC 6750 `b64token` (`1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`) of
/// at most 4096 bytes, written as a two-state scan with no regex: `None` when valid, else the
/// code a resolution must fail with.
pub fn reference_token_code(token: &str) -> Option<ErrorCode> {
    if token.is_empty() {
        return Some(ErrorCode::TokenMissing);
    }
    if token.len() > 4096 {
        return Some(ErrorCode::TokenMalformed);
    }
    let mut characters = 0usize;
    let mut padding = false;
    for c in token.chars() {
        if c == '=' {
            padding = true;
        } else if reference_is_token_char(c) && !padding {
            characters += 1;
        } else {
            return Some(ErrorCode::TokenMalformed);
        }
        if padding && characters == 0 {
            return Some(ErrorCode::TokenMalformed);
        }
    }
    None
}

pub(super) fn reference_is_token_char(c: char) -> bool {
    const SET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/";
    SET.contains(c)
}
