//! `POST /v1/resolve`: `{"access_token", "auth_url"?, "session"?}` to
//! `{"user": {"id", "name"}, "expires_at"}`, or `{"error", "message"}` with the statuses of
//! the axum integration (401 with `WWW-Authenticate`, 403, 502, 503 with `Retry-After`).
//!
//! An empty or absent `auth_url` means the default one, as in the client's `RoomJoinArgs`. With a
//! `session` (the game server's connection id: 1 to 128 visible ASCII characters) the sidecar
//! keeps the session live (`sessions`); the same session with a new token is its refresh
//! (`"refreshed": true`, or 409 `refresh_mismatch` for another user).

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::answer::{check_session, error, no_store};
use super::sessions::{self, Kept, Refused};
use super::Node;
use token_resolver::axum::AuthRejection;
use token_resolver::{AccessToken, ConnectRequest, Endpoint, PlainHttp, Resolution, ResolveError};
use token_resolver_sessions::{Credential, Purpose};

/// The body of `POST /v1/resolve`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    pub(crate) access_token: String,
    #[serde(default)]
    pub(crate) auth_url: Option<String>,
    #[serde(default)]
    pub(crate) session: Option<String>,
}

/// What the sidecar answers a body that is not a [`ResolveBody`] with (400 `invalid_request`).
pub(crate) const BAD_BODY: &str =
    "the body must be {\"access_token\": \"...\", \"auth_url\"?: \"...\", \"session\"?: \"...\"} and nothing else";

/// `POST /v1/resolve`.
pub(crate) async fn resolve(
    State(node): State<Arc<Node>>,
    body: Result<Json<ResolveBody>, JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return bad_body(&rejection),
    };
    if let Some(session) = &body.session {
        if let Err(message) = check_session(session) {
            return invalid_field("session", message);
        }
    }
    let auth_url = body.auth_url.as_deref().unwrap_or("");
    let endpoint = match node.endpoint(auth_url) {
        Ok(endpoint) => endpoint,
        Err(e) => return AuthRejection::from(e).into_response(),
    };
    // A named session keeps the token, and where revocations stood before it was resolved;
    // a plain resolve (the hot path) needs neither.
    let pending =
        (body.session.as_ref()).map(|_| (node.registry.cursor(), body.access_token.clone()));
    let user = match node
        .resolve_at(auth_url, &endpoint, body.access_token)
        .await
    {
        Ok(user) => user,
        Err(e) => return AuthRejection::from(e).into_response(),
    };
    let mut answer = Answer {
        user: Player {
            id: user.id,
            name: &user.name,
        },
        expires_at: user.expires_at().map(|exp| exp.unix_seconds()),
        refreshed: None,
    };
    let (Some(session), Some((cursor, token))) = (body.session, pending) else {
        return no_store(Json(answer));
    };
    let fingerprint = node.resolver.fingerprint(&endpoint, &token);
    let (Ok(held), Some(fingerprint)) = (AccessToken::new(token), fingerprint) else {
        // The resolver took the token, so it is well formed and the endpoint known.
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the resolved token could not be kept",
        );
    };
    let credential = Credential::new(Purpose::Connect, &endpoint, held, fingerprint, &user);
    match sessions::keep(&node, &session, credential, cursor) {
        Ok(kept) => {
            answer.refreshed = Some(kept == Kept::Refreshed);
            no_store(Json(answer))
        }
        Err(Refused::Mismatch) => error(
            StatusCode::CONFLICT,
            "refresh_mismatch",
            "the new token belongs to another user than the session's; the session is unchanged",
        ),
        Err(Refused::RevokedMeanwhile) => {
            let mut refused = error(
                StatusCode::UNAUTHORIZED,
                "token_rejected",
                "the token was revoked while it was being resolved; log in again",
            );
            refused.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Bearer error="invalid_token""#),
            );
            refused
        }
        Err(Refused::Full) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_sessions",
            "the sidecar keeps as many sessions as it may; end some with DELETE /v1/sessions/{id}",
        ),
    }
}

/// The answer of a resolve.
#[derive(Serialize)]
struct Answer<'a> {
    user: Player<'a>,
    /// Unix seconds, when the integrator or the token says.
    expires_at: Option<u64>,
    /// Only when the resolve named a session.
    #[serde(skip_serializing_if = "Option::is_none")]
    refreshed: Option<bool>,
}

/// The user as the game server sees it.
#[derive(Serialize)]
struct Player<'a> {
    id: i64,
    name: &'a str,
}

impl Node {
    /// The normalised endpoint `auth_url` names (empty: the default one). The allowlist is the
    /// resolver's to apply, when it resolves.
    pub(crate) fn endpoint<'a>(&'a self, auth_url: &str) -> Result<Cow<'a, str>, ResolveError> {
        if auth_url.is_empty() {
            return (self.resolver.default_endpoint())
                .map(|endpoint| Cow::Borrowed(endpoint.as_str()))
                .ok_or_else(|| {
                    ResolveError::auth_url_not_allowed(
                        "no auth_url was given and the sidecar has no default (--auth-url)",
                    )
                });
        }
        Endpoint::parse(auth_url, PlainHttp::Anywhere)
            .map(|endpoint| Cow::Owned(endpoint.as_str().to_owned()))
    }

    /// Resolves `token` at `endpoint`, which `auth_url` named: the default one (empty) without
    /// parsing it again, as a game server's connect does.
    pub(crate) async fn resolve_at(
        &self,
        auth_url: &str,
        endpoint: &str,
        token: String,
    ) -> Result<Resolution, ResolveError> {
        if !auth_url.is_empty() {
            return self.resolver.resolve_in_full(endpoint, &token).await;
        }
        let request = ConnectRequest {
            access_token: Some(token),
        };
        let resolution = self.resolver.resolve_connect_in_full(&request).await?;
        resolution.ok_or(ResolveError::TokenMissing)
    }
}

/// The answer to a body axum could not take: 413, 415 or 400, naming what is wrong.
fn bad_body(rejection: &JsonRejection) -> Response {
    match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "the body is larger than the sidecar reads",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request",
            "the body must be JSON (Content-Type: application/json)",
        ),
        _ => error(StatusCode::BAD_REQUEST, "invalid_request", BAD_BODY),
    }
}

/// 400 `invalid_request` naming `field`.
fn invalid_field(field: &str, message: &str) -> Response {
    let body = json!({"error": "invalid_request", "field": field, "message": message});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}
