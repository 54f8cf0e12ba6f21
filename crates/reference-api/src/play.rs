//! `GET /play`: a browser client of the whole flow, one static page (HTML, plain JavaScript
//! and CSS, no build step), embedded in the binary and served from the integrator's own
//! origin, so that its login and token calls are same-origin and the session cookie stays
//! `SameSite=Strict`. It opens the game server's WebSocket itself.
//!
//! With `?autoplay=1&username=U&password=P&game=WS_URL` it runs the flow by itself and writes
//! `joined <roomId> as <name> (<id>)` or `error <code>` into `<output id="result">`.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

/// The page.
const PAGE: &str = include_str!("play.html");
/// Its script: log in, take a token, connect, search, join.
const SCRIPT: &str = include_str!("play.js");
/// Its style.
const STYLE: &str = include_str!("play.css");

/// What the page may load and reach: its own origin's files and API, and WebSockets (the game
/// server runs elsewhere); no inline script, no other origin's script or style.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self' ws: wss:; form-action 'self'; base-uri 'none'; \
                      frame-ancestors 'none'";

/// `GET /play`.
pub(super) async fn page() -> Response {
    file(PAGE, "text/html; charset=utf-8")
}

/// `GET /play.js`.
pub(super) async fn script() -> Response {
    file(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /play.css`.
pub(super) async fn style() -> Response {
    file(STYLE, "text/css; charset=utf-8")
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
