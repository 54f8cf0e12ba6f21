//! What a request's `Authorization` header gives: the bearer token, or why there is none.
//!
//! Only the header's shape is judged here (RFC 7235 `credentials`, RFC 6750's `Bearer`
//! scheme); the token's own syntax and size are the resolver's rule, checked when it is
//! resolved. The URL's query is never looked at: a token there (RFC 6750 section 2.3) ends up
//! in access logs and browser history, so it is treated as no token at all.

use ::axum::http::header::AUTHORIZATION;
use ::axum::http::HeaderMap;

use crate::error::ResolveError;

/// The bearer token of `headers`, as the client sent it (possibly empty or malformed, which the
/// resolver refuses with `token_missing` or `token_malformed`): what the extractors read, for
/// a handler that resolves at an authUrl of its own choosing.
///
/// ```
/// use axum::http::{header::AUTHORIZATION, HeaderMap};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(AUTHORIZATION, "Bearer mF_9.B5f-4.1JqM".parse().unwrap());
/// assert_eq!(token_resolver::axum::bearer_token(&headers).unwrap(), "mF_9.B5f-4.1JqM");
/// ```
///
/// # Errors
///
/// [`ResolveError::TokenMissing`] when there is no `Authorization` header, an empty one, or one
/// of another scheme (`Basic …`: the answer's `Bearer` challenge says what is expected);
/// [`ResolveError::TokenMalformed`] when there are two or more `Authorization` headers (which
/// one the client meant is not ours to guess), when the header holds bytes outside visible
/// ASCII, or when it is not `scheme [credentials]`.
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, ResolveError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(ResolveError::TokenMissing);
    };
    if values.next().is_some() {
        return Err(malformed("more than one Authorization header was sent"));
    }
    let value = value
        .to_str()
        .map_err(|_| malformed("the Authorization header holds bytes outside visible ASCII"))?
        .trim_matches([' ', '\t']);
    // credentials = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
    let (scheme, credentials) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.is_empty() {
        return Err(ResolveError::TokenMissing);
    }
    if !scheme.bytes().all(is_tchar) {
        return Err(malformed(
            "the Authorization header is not `Bearer <token>`",
        ));
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ResolveError::TokenMissing);
    }
    Ok(credentials.trim_start_matches(' '))
}

fn malformed(reason: &'static str) -> ResolveError {
    ResolveError::token_malformed(reason)
}

/// RFC 9110 `tchar`: the characters of an auth scheme's name.
const fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9'
        | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_'
        | b'`' | b'|' | b'~')
}

#[cfg(test)]
mod tests {
    use ::axum::http::HeaderValue;

    use super::*;
    use crate::error::ErrorCode;

    fn with(values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_bytes(value).unwrap());
        }
        headers
    }

    fn token(values: &[&[u8]]) -> Result<String, ErrorCode> {
        bearer_token(&with(values))
            .map(str::to_owned)
            .map_err(|e| e.code())
    }

    #[test]
    fn the_bearer_token_is_taken_whatever_the_scheme_case() {
        for value in [
            &b"Bearer abc"[..],
            b"bearer abc",
            b"BEARER abc",
            b"Bearer   abc",
        ] {
            assert_eq!(token(&[value]), Ok("abc".to_owned()), "{value:?}");
        }
    }

    #[test]
    fn no_header_an_empty_one_or_another_scheme_is_no_token() {
        assert_eq!(token(&[]), Err(ErrorCode::TokenMissing));
        for value in [
            &b""[..],
            b"   ",
            b"Basic YWxhZGRpbjpvcGVuc2VzYW1l",
            b"Token abc",
        ] {
            assert_eq!(token(&[value]), Err(ErrorCode::TokenMissing), "{value:?}");
        }
    }

    #[test]
    fn bearer_without_a_token_gives_an_empty_one_for_the_resolver_to_refuse() {
        assert_eq!(token(&[b"Bearer"]), Ok(String::new()));
        assert_eq!(token(&[b"Bearer  "]), Ok(String::new()));
    }

    #[test]
    fn what_follows_bearer_is_left_to_the_token_rule() {
        assert_eq!(token(&[b"Bearer a b"]), Ok("a b".to_owned()));
        assert_eq!(
            token(&[b"Bearer a, Bearer b"]),
            Ok("a, Bearer b".to_owned())
        );
    }

    #[test]
    fn two_headers_are_malformed_even_when_both_are_good() {
        assert_eq!(
            token(&[b"Bearer abc", b"Bearer abc"]),
            Err(ErrorCode::TokenMalformed)
        );
    }

    #[test]
    fn bytes_outside_visible_ascii_are_malformed() {
        // Control bytes never get this far: `HeaderValue` and the HTTP parser refuse them.
        for value in [
            &b"Bearer \xc3\xa9t\xc3\xa9"[..],
            b"Bearer a\x80b",
            b"\xffBearer abc",
        ] {
            assert_eq!(token(&[value]), Err(ErrorCode::TokenMalformed), "{value:?}");
        }
    }

    #[test]
    fn a_scheme_that_is_no_token_is_malformed() {
        for value in [&b"{\"token\":\"abc\"}"[..], b"Bearer\tabc", b"=abc"] {
            assert_eq!(token(&[value]), Err(ErrorCode::TokenMalformed), "{value:?}");
        }
    }

    #[test]
    fn errors_never_hold_the_header() {
        let cases: [&[&[u8]]; 3] = [
            &[b"Bearer SECRET", b"Bearer SECRET"],
            &[b"Bearer SECRET\xff"],
            &[b"SECRET{}"],
        ];
        for values in cases {
            let error = bearer_token(&with(values)).unwrap_err();
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains("SECRET"), "{shown}");
        }
    }
}
