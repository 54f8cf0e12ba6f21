//! `POST /admin/revoke` on the admin listener: how an integrator revokes a token, a user or
//! everything on a running game server, and closes the sessions that hold them.
//!
//! It is authorised by `Authorization: Bearer <secret>`, compared in constant time with the
//! [`AdminSecret`] the server was given (the same type, and the same secret, as the reference
//! API's) (none given: the endpoint answers 404). The body is one of `{"user_id": 42}`,
//! `{"user_id": 42, "session": "…"}` (one of the integrator's sessions of that user: a logout,
//! the tokens whose answer's `sid` is that session), `{"access_token": "…"}`, `{"all": true}`,
//! with an optional `"auth_url"` (default: the server's default authUrl). The matching sessions on this node are
//! told `revoked` and closed at once, and the answer says how many: `{"sessions_closed": N}`;
//! the invalidation then goes through the resolver, so caches here, in Redis and on every
//! other node drop the answers, and the other nodes close their sessions too. No token is ever
//! echoed or logged.

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::admin::AdminNode;
use token_resolver::{check_syntax, Endpoint, Revocation};
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

/// What a revoke request asks: the revocation to apply here, and how to invalidate it.
enum Revoke {
    Token {
        endpoint: Endpoint,
        token: String,
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

/// `POST /admin/revoke`.
pub(super) async fn revoke(
    node: &dyn AdminNode,
    secret: Option<&AdminSecret>,
    headers: &HeaderMap,
    body: &Bytes,
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
    let resolver = node.resolver();
    // The sessions here first, so that the answer counts them; then everywhere else.
    let (scope, closed) = match &request {
        Revoke::Token { endpoint, token } => {
            let fingerprint = resolver.fingerprint(endpoint.as_str(), token);
            let closed = fingerprint.map_or(0, |token| {
                node.registry().revoke(&Revocation::Token {
                    endpoint: endpoint.as_str().to_owned(),
                    token,
                })
            });
            resolver.invalidate(endpoint.as_str(), token);
            ("token", closed)
        }
        Revoke::User { endpoint, user_id } => {
            let closed = node.registry().revoke(&Revocation::User {
                endpoint: endpoint.as_str().to_owned(),
                user_id: *user_id,
            });
            resolver.invalidate_user(endpoint.as_str(), *user_id);
            ("user", closed)
        }
        Revoke::Session {
            endpoint,
            user_id,
            session,
        } => {
            let closed = node.registry().revoke(&Revocation::Session {
                endpoint: endpoint.as_str().to_owned(),
                user_id: *user_id,
                session: session.clone(),
            });
            resolver.invalidate_session(endpoint.as_str(), *user_id, session);
            ("session", closed)
        }
        Revoke::All => {
            let closed = node.registry().revoke(&Revocation::All);
            resolver.invalidate_all();
            ("all", closed)
        }
    };
    tracing::info!(scope, sessions_closed = closed, "admin revoke");
    answer(StatusCode::OK, json!({"sessions_closed": closed}))
}

/// Reads the body; a refusal names the field at fault and never quotes a value.
fn parse(node: &dyn AdminNode, body: &[u8]) -> Result<Revoke, String> {
    const FIELDS: [&str; 5] = ["user_id", "session", "access_token", "all", "auth_url"];
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
    let endpoint = || endpoint(node, &fields);
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
                Some(session) => Revoke::Session {
                    endpoint,
                    user_id,
                    session,
                },
                None => Revoke::User { endpoint, user_id },
            })
        }
        (_, _, _) if session.is_some() => Err("session: goes with user_id".to_owned()),
        (None, Some(token), None) => {
            let token = token
                .as_str()
                .filter(|t| check_syntax(t).is_ok())
                .ok_or("access_token: must be an access token (an RFC 6750 b64token)")?;
            Ok(Revoke::Token {
                endpoint: endpoint()?,
                token: token.to_owned(),
            })
        }
        (None, None, Some(Value::Bool(true))) => Ok(Revoke::All),
        (None, None, Some(_)) => Err("all: must be true".to_owned()),
        _ => Err("give exactly one of user_id, access_token and all".to_owned()),
    }
}

/// The endpoint of the body's `auth_url`, or the server's default.
fn endpoint(node: &dyn AdminNode, fields: &Map<String, Value>) -> Result<Endpoint, String> {
    match fields.get("auth_url") {
        Some(Value::String(url)) => {
            Endpoint::parse(url, true).map_err(|e| format!("auth_url: not a usable authUrl ({e})"))
        }
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
