//! The `resolve_body` target: the body of the sidecar's `POST /v1/resolve`.

use serde_json::{Map, Value};
use token_resolver_sidecar::fuzzing::{resolve_body, ResolveRequest};

use super::answer::top_level_keys;
use super::show;

/// The body's fields, in the order the sidecar declares them (a JSON array of one to three of
/// them, in order, reads as the object would: serde's derive takes either).
const FIELDS: [&str; 3] = ["access_token", "auth_url", "session"];

/// Input of the `resolve_body` target: the body's bytes.
pub fn fuzz_resolve_body(data: &[u8]) {
    check_resolve_body(data);
}

/// The resolve body properties:
///
/// - the sidecar takes exactly what a straightforward reading through `serde_json::Value`
///   takes: one JSON object with a string `access_token`, `auth_url` and `session` absent,
///   `null` or strings, no other field and none twice; a `session` of 1 to 128 visible ASCII
///   characters; and it reads the same three values;
/// - a refusal is one of the sidecar's fixed messages, naming nothing of the body (which
///   holds a token).
pub fn check_resolve_body(body: &[u8]) {
    let read = resolve_body(body);
    let reference = reference_body(body);
    match (&read, &reference) {
        (Ok(got), Ok(expected)) => assert!(got == expected, "reading {}", show(body)),
        (Err(message), Err(expected)) => assert_eq!(message, expected, "refusing {}", show(body)),
        (Ok(_), Err(expected)) => panic!("took {}, which must be refused: {expected}", show(body)),
        (Err(message), Ok(_)) => panic!("refused the valid body {} ({message})", show(body)),
    }
}

/// The sidecar's answer to a body that is not the documented object.
const NOT_THE_OBJECT: &str = "the body must be {\"access_token\": \"...\", \"auth_url\"?: \"...\", \"session\"?: \"...\"} and nothing else";

fn reference_body(body: &[u8]) -> Result<ResolveRequest, &'static str> {
    let object: Map<String, Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => {
            let keys = top_level_keys(body).ok_or(NOT_THE_OBJECT)?;
            if keys.len() != object.len() || keys.iter().any(|k| !FIELDS.contains(&k.as_str())) {
                return Err(NOT_THE_OBJECT);
            }
            object
        }
        Ok(Value::Array(items)) if (1..=FIELDS.len()).contains(&items.len()) => {
            FIELDS.iter().map(|f| f.to_string()).zip(items).collect()
        }
        _ => return Err(NOT_THE_OBJECT),
    };
    let optional = |name: &str| match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(NOT_THE_OBJECT),
    };
    let access_token = match object.get("access_token") {
        Some(Value::String(token)) => token.clone(),
        _ => return Err(NOT_THE_OBJECT),
    };
    let auth_url = optional("auth_url")?;
    let session = optional("session")?;
    if let Some(session) = &session {
        if session.is_empty() || session.len() > 128 {
            return Err("must be 1 to 128 bytes");
        }
        if !session.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be visible ASCII (no spaces or control characters)");
        }
    }
    Ok(ResolveRequest {
        access_token,
        auth_url,
        session,
    })
}
