//! `GET|POST /v1/authorize`: forward-auth for a proxy in front of any HTTP API (nginx
//! `auth_request`, Traefik `forwardAuth`, Envoy's HTTP ext_authz). The bearer token of
//! `Authorization`, resolved at `X-Auth-Url` (optional; checked against the allowlist) or the
//! default authUrl: 200 with `X-User-Id` and `X-User-Name` (percent-encoded UTF-8, so that any
//! name is a valid header value) for the proxy to pass upstream; otherwise the statuses of the axum
//! integration: 401 with `WWW-Authenticate: Bearer error="invalid_token"`, 403, 503 with
//! `Retry-After`.
//!
//! A 200 says `X-Accel-Expires: 0` and `Cache-Control: no-store` (nginx keeps it by neither
//! reading), unless nginx may keep it (`nginx_cache`): then `X-Accel-Expires` says for how many
//! seconds. nginx may keep only an answer to the canonical `Authorization: Bearer <token>`:
//! any other spelling of the header is answered the same, uncacheable.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::Node;
use token_resolver::axum::{bearer_token, AuthRejection};
use token_resolver::ResolveError;

/// What `X-User-Name` leaves as it is: letters, digits and `-._~` (RFC 3986 unreserved).
const NAME_KEEPS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `X-User-Id`.
static USER_ID: HeaderName = HeaderName::from_static("x-user-id");
/// `X-User-Name`.
static USER_NAME: HeaderName = HeaderName::from_static("x-user-name");
/// `X-Accel-Expires`: how long nginx may keep the answer.
static X_ACCEL_EXPIRES: HeaderName = HeaderName::from_static("x-accel-expires");

/// `name` percent-encoded as UTF-8: a valid header value whatever the name holds.
pub(crate) fn encoded_name(name: &str) -> String {
    utf8_percent_encode(name, NAME_KEEPS).to_string()
}

/// `GET|POST /v1/authorize`.
pub(crate) async fn authorize(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let token = match bearer_token(&headers) {
        Ok(token) => token,
        Err(e) => return AuthRejection::from(e).into_response(),
    };
    let auth_url = match headers.get("x-auth-url").map(HeaderValue::to_str) {
        None => "",
        Some(Ok(url)) => url,
        Some(Err(_)) => {
            let e =
                ResolveError::auth_url_not_allowed("X-Auth-Url holds bytes outside visible ASCII");
            return AuthRejection::from(e).into_response();
        }
    };
    let endpoint = match node.endpoint(auth_url) {
        Ok(endpoint) => endpoint,
        Err(e) => return AuthRejection::from(e).into_response(),
    };
    // Only the default integrator's answers are granted: nginx's cache key is the header alone.
    let grants = node.grants.as_ref().filter(|_| auth_url.is_empty());
    let ticket = grants.map(|g| g.ticket());
    let user = match node.resolve_at(auth_url, &endpoint, token.to_owned()).await {
        Ok(user) => user,
        Err(e) => return AuthRejection::from(e).into_response(),
    };
    let granted = grants.zip(ticket).and_then(|(grants, ticket)| {
        let authorization = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let fingerprint = node.resolver.fingerprint(&endpoint, token)?;
        grants.grant(ticket, authorization, token, fingerprint, &user)
    });
    let name = encoded_name(&user.name);
    let mut response = StatusCode::OK.into_response();
    let answer = response.headers_mut();
    answer.insert(USER_ID.clone(), HeaderValue::from(user.id));
    if let Ok(name) = HeaderValue::from_str(&name) {
        answer.insert(USER_NAME.clone(), name);
    }
    match granted {
        Some(secs) => {
            answer.insert(X_ACCEL_EXPIRES.clone(), HeaderValue::from(secs));
        }
        None => {
            // nginx reads X-Accel-Expires first (0: not cached), unless told to ignore it;
            // Cache-Control then, and any other cache or proxy too.
            answer.insert(X_ACCEL_EXPIRES.clone(), HeaderValue::from(0u64));
            answer.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
    }
    response
}
