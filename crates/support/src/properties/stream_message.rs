//! The `stream_message` target: a revocation message read off the shared tier's stream, and
//! its MAC.

use serde_json::{Map, Value};
use token_resolver::fuzzing::{
    stream_message, stream_message_authentic, stream_message_mac, ToldMessage,
};

use super::answer::top_level_keys;
use super::show;

/// The fields a message may have, in the order the reader declares them (a JSON array of
/// exactly these, in order, reads as the object would: serde's derive takes either).
const FIELDS: [&str; 9] = [
    "node",
    "at",
    "decided",
    "op",
    "endpoint",
    "digest",
    "user_id",
    "session",
    "generation",
];

/// Input of the `stream_message` target: a length byte `n`, the reading node's name (`n % 32`
/// bytes, lossy UTF-8), then the message's bytes.
pub fn fuzz_stream_message(data: &[u8]) {
    let [n, rest @ ..] = data else {
        return;
    };
    let n = usize::from(*n % 32).min(rest.len());
    let node = String::from_utf8_lossy(&rest[..n]);
    check_stream_message(&rest[n..], &node);
}

/// The message properties:
///
/// - `stream_message` reads exactly what a straightforward reading through `serde_json::Value`
///   reads: one JSON object (or the array form) with a string `node` and `op`, each other
///   field absent, `null` or of its type (`at`, `decided`, `generation` a `u64`, `user_id` an
///   `i64`, the rest strings), no duplicate field; the reader's own message is skipped; an
///   `op` of `token`, `user`, `session` or `all` with the fields it needs, `at` included;
///   `decided` is the earlier of `decided` and `at`;
/// - a message's MAC is 64 lowercase hex digits; a reader takes exactly that MAC for it, on
///   that stream, under that secret: not one for other bytes, another stream or another
///   secret, nor any other bytes (the reading node's name tried as one).
pub fn check_stream_message(json: &[u8], node: &str) {
    let read = stream_message(json, node);
    let mut reference = reference_message(json, node);
    // serde_json skips the value of a field the reader ignores without checking its UTF-8 or
    // its escapes (finding 4 in fuzz/README.md): its known fields must then read as they do in
    // the message made valid.
    if read.is_ok() && reference.is_none() && serde_json::from_slice::<Value>(json).is_err() {
        reference = reference_message(String::from_utf8_lossy(json).as_bytes(), node);
        if reference.is_none() {
            return;
        }
    }
    match (&read, &reference) {
        (Ok(got), Some(expected)) => assert_eq!(got, expected, "reading {}", show(json)),
        (Err(_), None) => {}
        (Ok(got), None) => panic!("read {got:?} from {}, not a revocation", show(json)),
        (Err(e), Some(expected)) => {
            panic!("refused {} ({e}), which reads as {expected:?}", show(json))
        }
    }

    let (secret, stream) = (b"a tier's secret".as_slice(), "p:revocations");
    let mac = stream_message_mac(secret, stream, json);
    assert!(
        mac.len() == 64 && mac.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "MAC {mac:?}"
    );
    assert!(stream_message_authentic(
        secret,
        stream,
        json,
        mac.as_bytes()
    ));
    let mut other = json.to_vec();
    other.push(b' ');
    assert!(!stream_message_authentic(
        secret,
        stream,
        &other,
        mac.as_bytes()
    ));
    assert!(!stream_message_authentic(
        secret,
        "q:revocations",
        json,
        mac.as_bytes()
    ));
    assert!(!stream_message_authentic(
        b"another secret",
        stream,
        json,
        mac.as_bytes()
    ));
    let mut flipped = mac.clone().into_bytes();
    flipped[63] = if flipped[63] == b'0' { b'1' } else { b'0' };
    assert!(!stream_message_authentic(secret, stream, json, &flipped));
    assert_eq!(
        stream_message_authentic(secret, stream, json, node.as_bytes()),
        node == mac,
        "the bytes {node:?} taken for a MAC"
    );
}

/// What the message holds, read through `serde_json::Value`: `None` for what the reader must
/// refuse, `Some(None)` for the reader's own.
fn reference_message(json: &[u8], me: &str) -> Option<Option<ToldMessage>> {
    let object: Map<String, Value> = match serde_json::from_slice::<Value>(json).ok()? {
        Value::Object(object) => {
            // A field named twice is refused; unknown ones may repeat.
            let keys = top_level_keys(json)?;
            for field in FIELDS {
                if keys.iter().filter(|k| *k == field).count() > 1 {
                    return None;
                }
            }
            object
        }
        Value::Array(items) if items.len() == FIELDS.len() => {
            FIELDS.iter().map(|f| f.to_string()).zip(items).collect()
        }
        _ => return None,
    };
    let get = |name: &str| object.get(name).filter(|v| !v.is_null());
    let string = |name: &str| match get(name) {
        None => Some(None),
        Some(Value::String(s)) => Some(Some(s.clone())),
        Some(_) => None,
    };
    let unsigned = |name: &str| match get(name) {
        None => Some(None),
        Some(v) => v.as_u64().map(Some),
    };
    // Every field present must be of its type, whatever the op.
    let node = match object.get("node")? {
        Value::String(node) => node.clone(),
        _ => return None,
    };
    let op = match object.get("op")? {
        Value::String(op) => op.clone(),
        _ => return None,
    };
    let at = unsigned("at")?;
    let decided = unsigned("decided")?;
    let generation = unsigned("generation")?;
    let user_id = match get("user_id") {
        None => None,
        Some(v) => Some(v.as_i64()?),
    };
    let endpoint = string("endpoint")?;
    let digest = string("digest")?;
    let session = string("session")?;
    if node == me {
        return Some(None);
    }
    let made_at_ms = at?;
    let mut told = ToldMessage {
        op: "all",
        endpoint: None,
        digest: None,
        user_id: None,
        session: None,
        generation: None,
        made_at_ms,
        decided_at_ms: decided.map_or(made_at_ms, |d| d.min(made_at_ms)),
    };
    match op.as_str() {
        "token" => {
            told.op = "token";
            told.endpoint = Some(endpoint?);
            told.digest = Some(digest?);
        }
        "user" => {
            told.op = "user";
            told.endpoint = Some(endpoint?);
            told.user_id = Some(user_id?);
        }
        "session" => {
            told.op = "session";
            told.endpoint = Some(endpoint?);
            told.user_id = Some(user_id?);
            told.session = Some(session?);
        }
        "all" => told.generation = Some(generation?),
        _ => return None,
    }
    Some(Some(told))
}
