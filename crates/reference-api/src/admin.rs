//! `POST /api/admin/ban` and `/api/admin/unban`, body `{"user_id": N}`, for the operator
//! holding the admin secret (`Authorization: Bearer <secret>`, compared in constant time).
//!
//! A ban revokes every token and session of the user at once, refuses the user's logins with
//! 403 `{"error":"banned"}` until the unban, and tells the notify targets
//! (`{"user_id": N}`). Without a configured secret both answer 404; a wrong or missing bearer
//! 401; a body that is not `{"user_id": <integer>}` 400 naming the field.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::handlers::{bearer_token, error, Refusal};
use super::notify::Notice;
use super::store::MAX_BANNED;
use super::ReferenceApi;

/// `POST /api/admin/ban`.
pub(super) async fn ban(
    State(api): State<ReferenceApi>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let user_id = match authorized(&api, &headers).and_then(|()| user_id(body)) {
        Ok(user_id) => user_id,
        Err(refusal) => return refusal.into_response(),
    };
    let (tokens_revoked, sessions_ended) = {
        let mut store = api.store();
        if !store.banned.contains(&user_id) && store.banned.len() >= MAX_BANNED {
            return error(StatusCode::SERVICE_UNAVAILABLE, "too_many_bans");
        }
        store.banned.insert(user_id);
        store.end_user(user_id)
    };
    tracing::info!(user_id, tokens_revoked, sessions_ended, "user banned");
    if let Some(notifier) = &api.inner.notifier {
        notifier.send(Notice::User(user_id));
    }
    let body = json!({
        "user_id": user_id,
        "banned": true,
        "tokens_revoked": tokens_revoked,
        "sessions_ended": sessions_ended,
    });
    Json(body).into_response()
}

/// `GET /api/admin/notifications`: what waits to be delivered to each notify target.
pub(super) async fn notifications(State(api): State<ReferenceApi>, headers: HeaderMap) -> Response {
    if let Err(refusal) = authorized(&api, &headers) {
        return refusal.into_response();
    }
    let targets = api
        .inner
        .notifier
        .as_ref()
        .map(|notifier| notifier.pending())
        .unwrap_or_default();
    Json(json!({ "targets": targets })).into_response()
}

/// `POST /api/admin/unban`.
pub(super) async fn unban(
    State(api): State<ReferenceApi>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let user_id = match authorized(&api, &headers).and_then(|()| user_id(body)) {
        Ok(user_id) => user_id,
        Err(refusal) => return refusal.into_response(),
    };
    let was_banned = api.store().banned.remove(&user_id);
    tracing::info!(user_id, was_banned, "user unbanned");
    Json(json!({ "user_id": user_id, "banned": false, "was_banned": was_banned })).into_response()
}

/// `Ok` when an admin secret is configured and the request carries it as its bearer; else
/// 404 (none configured) or 401.
fn authorized(api: &ReferenceApi, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(secret) = &api.inner.admin_secret else {
        return Err(Refusal::Error(StatusCode::NOT_FOUND, "not_found"));
    };
    let presented = bearer_token(headers).unwrap_or_default();
    if secret.is(presented) && !presented.is_empty() {
        Ok(())
    } else {
        tracing::debug!("admin request refused: wrong or missing bearer");
        Err(Refusal::Unauthorized("Bearer", "unauthorized"))
    }
}

/// The `user_id` of a `{"user_id": N}` body, or 400 naming the field at fault.
fn user_id(body: Result<Bytes, BytesRejection>) -> Result<i64, Refusal> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Refusal::Error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large")
        } else {
            Refusal::field("user_id", "the body must be {\"user_id\": N}")
        }
    })?;
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&body) else {
        return Err(Refusal::field(
            "user_id",
            "the body must be a JSON object {\"user_id\": N}",
        ));
    };
    if let Some(other) = fields.keys().find(|key| *key != "user_id") {
        return Err(Refusal::field(other, "unknown field"));
    }
    fields
        .get("user_id")
        .and_then(Value::as_i64)
        .ok_or_else(|| Refusal::field("user_id", "must be an integer"))
}
