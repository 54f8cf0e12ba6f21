//! `GET /play`: a browser client of the whole flow, one static page (HTML, plain JavaScript
//! and CSS, no build step), embedded in the binary and served from the integrator's own
//! origin, so that its login and token calls are same-origin and the session cookie stays
//! `SameSite=Strict`. It opens the game server's WebSocket itself.
//!
//! With `?autoplay=1&username=U&password=P&game=WS_URL` it runs the flow by itself and writes
//! `joined <roomId> as <name> (<id>)` or `error <code>` into `<output id="result">`. It opens
//! only the game servers [`ApiConfig::play_game_urls`](super::ApiConfig::play_game_urls) lists,
//! and its Content-Security-Policy holds the browser to them too.

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::ReferenceApi;

/// The page, with `{{GAME_URLS}}` where the game servers it may open go.
const PAGE: &str = include_str!("play.html");
/// Its script: log in, take a token, connect, search, join.
const SCRIPT: &str = include_str!("play.js");
/// Its style.
const STYLE: &str = include_str!("play.css");

/// What the script and the style may do: nothing beyond what they are.
const FILE_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

/// The page as served: the game servers it may open written into it, and the policy that
/// holds the browser to them.
#[derive(Debug)]
pub(super) struct Page {
    html: String,
    policy: HeaderValue,
}

impl Page {
    /// The page for `games` (checked by `ApiConfig::validate`: no character in them needs
    /// more than the escaping here).
    pub(super) fn new(games: &[String]) -> Page {
        let list = serde_json::to_string(games).unwrap_or_else(|_| "[]".to_owned());
        let attribute = list
            .replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        let mut connect = String::from("'self'");
        for game in games {
            connect.push(' ');
            connect.push_str(game);
        }
        // Its own origin's files and API, and the listed game servers; no inline script, no
        // other origin's script or style.
        let policy = format!(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src {connect}; \
             form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        );
        Page {
            html: PAGE.replace("{{GAME_URLS}}", &attribute),
            policy: HeaderValue::from_str(&policy)
                .unwrap_or_else(|_| HeaderValue::from_static(FILE_POLICY)),
        }
    }
}

/// `GET /play`.
pub(super) async fn page(State(api): State<ReferenceApi>) -> Response {
    let page = &api.inner.page;
    let mut response = file(page.html.clone(), "text/html; charset=utf-8");
    response
        .headers_mut()
        .insert(header::CONTENT_SECURITY_POLICY, page.policy.clone());
    response
}

/// `GET /play.js`.
pub(super) async fn script() -> Response {
    file(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /play.css`.
pub(super) async fn style() -> Response {
    file(STYLE, "text/css; charset=utf-8")
}

fn file(body: impl IntoResponse, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(FILE_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
