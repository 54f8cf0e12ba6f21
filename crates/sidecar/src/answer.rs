//! What the sidecar's endpoints answer and check alike: a JSON error that no proxy keeps
//! ([`error`], [`no_store`]) and the game server's session ids ([`check_session`]). `resolve`
//! and `sessions` both use them, and neither the other for them.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Longest session id.
pub(crate) const MAX_SESSION_BYTES: usize = 128;

/// A session id is 1 to [`MAX_SESSION_BYTES`] visible ASCII characters.
pub(crate) fn check_session(session: &str) -> Result<(), &'static str> {
    if session.is_empty() || session.len() > MAX_SESSION_BYTES {
        return Err("must be 1 to 128 bytes");
    }
    if !session.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be visible ASCII (no spaces or control characters)");
    }
    Ok(())
}

/// `status` with `{"error": code, "message": message}`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    no_store((status, Json(json!({"error": code, "message": message}))))
}

/// `body` with `Cache-Control: no-store`.
pub(crate) fn no_store(body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
