//! `POST /admin/revoke` on the admin listener: how an integrator revokes a token, a user or
//! everything on a running node (a game server, a sidecar), and closes the sessions that hold
//! them. The revoking itself is [`close_then_invalidate`]; this module reads and authorises the
//! request and words the answer.
//!
//! It is authorised by `Authorization: Bearer <secret>`, compared in constant time with the
//! [`AdminSecret`] the server was given (the same type, and the same secret, as the reference
//! API's) (none given: the endpoint answers 404). The body is one of `{"user_id": 42}`,
//! `{"user_id": 42, "session": "…"}` (one of the integrator's sessions of that user: a logout,
//! the tokens whose answer's `sid` is that session), `{"access_token": "…"}`, `{"all": true}`,
//! with an optional `"auth_url"` (default: the node's default authUrl) and an optional `"at"`
//! (when the revocation was made, unix milliseconds; default now). The matching sessions on this
//! node are told `revoked` and closed at once, and the invalidation goes through the resolver
//! ([`Resolver::revoke`](token_resolver::Resolver::revoke)), so caches here, in Redis and on
//! every other node drop the answers, and the other nodes close their sessions too.
//!
//! The answer says what happened:
//!
//! | status | body | when |
//! |---|---|---|
//! | 200 | `{"sessions_closed": N}` | the revocation is in the shared tier (every node applies it), or there is none |
//! | 503, `Retry-After` | `{"error": "revocation_pending", "pending": true, "sessions_closed": N, …}` | the shared tier did not take it within the bound (`AdminConfig::revoke_ack_within`): this node applied it and keeps trying, but other nodes do not know yet; ask another node |
//! | 422 | `{"error": "auth_url_not_served", …}` | this server serves no such authUrl (neither its default nor an allowed one): it holds nothing there, and a retry would not change that |
//!
//! A revocation that carries an `"at"` long before a session was resolved (a late delivery,
//! after an unban and a fresh token) does not close that session, here or on other nodes. No
//! token is ever echoed or logged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::node::AdminNode;
use crate::revocation::{close_then_invalidate, Revoked};
use token_resolver::{check_syntax, AccessToken, Endpoint, PlainHttp, Revoke};
use token_resolver_listener::AdminSecret;

/// Whether a request's one `Authorization: Bearer …` header (scheme case-insensitive) carries
/// `secret` ([`AdminSecret::is`]: compared in constant time).
fn authorises(secret: &AdminSecret, headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let value = value.as_bytes();
    let Some(presented) = value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|_| &value[7..])
    else {
        return false;
    };
    secret.is(presented)
}

/// What a revoke request asks, and when it was made.
struct Request {
    what: Asked,
    made_at: SystemTime,
}

/// What a revoke request asks, its authUrl normalised.
enum Asked {
    Token {
        endpoint: Endpoint,
        token: AccessToken,
    },
    User {
        endpoint: Endpoint,
        user_id: i64,
    },
    Session {
        endpoint: Endpoint,
        user_id: i64,
        session: String,
    },
    All,
}

/// `POST /admin/revoke`; `within` bounds the wait for the shared tier.
pub(crate) async fn revoke(
    node: &dyn AdminNode,
    secret: Option<&AdminSecret>,
    headers: &HeaderMap,
    body: &Bytes,
    within: Duration,
) -> Response {
    let Some(secret) = secret else {
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": "not_found", "message": "revocation is off: the server has no admin secret"}),
        );
    };
    if !authorises(secret, headers) {
        let mut response = answer(
            StatusCode::UNAUTHORIZED,
            json!({"error": "unauthorized", "message": "send Authorization: Bearer <the admin secret>"}),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            "Bearer".parse().expect("a header value"),
        );
        return response;
    }
    let request = match parse(node, body) {
        Ok(request) => request,
        Err(message) => {
            return answer(
                StatusCode::BAD_REQUEST,
                json!({"error": "bad_request", "message": message}),
            )
        }
    };
    let Request { what, made_at } = request;
    // Served here? A revocation for an authUrl this server never resolved at would close
    // nothing, and an answer of `sessions_closed: 0` would hide that it went to the wrong place.
    let endpoint = match &what {
        Asked::Token { endpoint, .. }
        | Asked::User { endpoint, .. }
        | Asked::Session { endpoint, .. } => Some(endpoint),
        Asked::All => None,
    };
    if let Some(endpoint) = endpoint.filter(|e| !serves(node, e)) {
        tracing::info!(
            auth_host = endpoint.host(),
            "admin revoke for an authUrl this server does not serve"
        );
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({
                "error": "auth_url_not_served",
                "message": format!(
                    "this server serves no authUrl at {}: neither its default nor an allowed one",
                    endpoint.host()
                ),
            }),
        );
    }
    let (scope, revoke) = match what {
        Asked::Token { endpoint, token } => (
            "token",
            Revoke::Token {
                auth_url: endpoint.as_str().to_owned(),
                access_token: token,
            },
        ),
        Asked::User { endpoint, user_id } => (
            "user",
            Revoke::User {
                auth_url: endpoint.as_str().to_owned(),
                user_id,
            },
        ),
        Asked::Session {
            endpoint,
            user_id,
            session,
        } => (
            "session",
            Revoke::Session {
                auth_url: endpoint.as_str().to_owned(),
                user_id,
                session,
            },
        ),
        Asked::All => ("all", Revoke::All),
    };
    // The sessions here first, so that the answer counts them; then everywhere else.
    let Revoked {
        sessions_closed: closed,
        delivery,
    } = match close_then_invalidate(node, revoke, made_at, within).await {
        Ok(revoked) => revoked,
        Err(e) => {
            // Checked above; an allowlist that refuses it now is the same answer.
            return answer(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"error": "auth_url_not_served", "message": e.to_string()}),
            );
        }
    };
    if delivery.is_delivered() {
        tracing::info!(scope, sessions_closed = closed, "admin revoke");
        return answer(StatusCode::OK, json!({"sessions_closed": closed}));
    }
    tracing::warn!(
        scope,
        sessions_closed = closed,
        "admin revoke applied here but not yet in the shared tier: other nodes do not know yet"
    );
    let mut response = answer(
        StatusCode::SERVICE_UNAVAILABLE,
        json!({
            "error": "revocation_pending",
            "pending": true,
            "sessions_closed": closed,
            "message": "applied on this node, which keeps delivering it, but the shared cache \
                        (Redis) did not take it in time: other nodes do not know yet; send it \
                        to another node too",
        }),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    response
}

/// What a 503 tells the caller to wait before trying again, in seconds.
const RETRY_AFTER_SECS: &str = "1";

/// Whether this node's resolver serves `endpoint`: its default authUrl or an allowed one.
fn serves(node: &dyn AdminNode, endpoint: &Endpoint) -> bool {
    node.resolver().serves(endpoint.as_str())
}

/// Reads the body; a refusal names the field at fault and never quotes a value.
fn parse(node: &dyn AdminNode, body: &[u8]) -> Result<Request, String> {
    const FIELDS: [&str; 6] = [
        "user_id",
        "session",
        "access_token",
        "all",
        "auth_url",
        "at",
    ];
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Err(
            "the body must be a JSON object: {\"user_id\": N} (with an optional \"session\"), {\"access_token\": \"…\"} or {\"all\": true}, with an optional \"auth_url\""
                .to_owned(),
        );
    };
    if fields.keys().any(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "an unknown field; the fields are {}",
            FIELDS.join(", ")
        ));
    }
    let made_at = match fields.get("at") {
        None => SystemTime::now(),
        Some(at) => at
            .as_u64()
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
            .ok_or("at: must be a time in unix milliseconds (a non-negative integer)")?,
    };
    let what = asked(node, &fields)?;
    Ok(Request { what, made_at })
}

/// What the body asks to revoke.
fn asked(node: &dyn AdminNode, fields: &Map<String, Value>) -> Result<Asked, String> {
    let endpoint = || endpoint(node, fields);
    let session = match fields.get("session") {
        None => None,
        Some(Value::String(session)) if !session.is_empty() && session.len() <= 256 => {
            Some(session.clone())
        }
        Some(_) => return Err("session: must be a non-empty string of at most 256 bytes".into()),
    };
    match (
        fields.get("user_id"),
        fields.get("access_token"),
        fields.get("all"),
    ) {
        (Some(user_id), None, None) => {
            let user_id = user_id
                .as_i64()
                .ok_or("user_id: must be an integer that fits in 64 bits")?;
            let endpoint = endpoint()?;
            Ok(match session {
                Some(session) => Asked::Session {
                    endpoint,
                    user_id,
                    session,
                },
                None => Asked::User { endpoint, user_id },
            })
        }
        (_, _, _) if session.is_some() => Err("session: goes with user_id".to_owned()),
        (None, Some(token), None) => {
            let token = token
                .as_str()
                .filter(|t| check_syntax(t).is_ok())
                .and_then(|t| AccessToken::new(t).ok())
                .ok_or("access_token: must be an access token (an RFC 6750 b64token)")?;
            Ok(Asked::Token {
                endpoint: endpoint()?,
                token,
            })
        }
        (None, None, Some(Value::Bool(true))) => Ok(Asked::All),
        (None, None, Some(_)) => Err("all: must be true".to_owned()),
        _ => Err("give exactly one of user_id, access_token and all".to_owned()),
    }
}

/// The endpoint of the body's `auth_url`, or the server's default.
fn endpoint(node: &dyn AdminNode, fields: &Map<String, Value>) -> Result<Endpoint, String> {
    match fields.get("auth_url") {
        Some(Value::String(url)) => Endpoint::parse(url, PlainHttp::Anywhere)
            .map_err(|e| format!("auth_url: not a usable authUrl ({e})")),
        Some(_) => Err("auth_url: must be a string".to_owned()),
        None => {
            node.resolver().default_endpoint().cloned().ok_or_else(|| {
                "auth_url: required, as this server has no default authUrl".to_owned()
            })
        }
    }
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}
