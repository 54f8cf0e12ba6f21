//! The `login_body` target: the body of the reference API's `POST /api/login`.

use serde_json::{Map, Value};
use token_resolver_reference_api::fuzzing::{login_body, Login};

use super::answer::top_level_keys;
use super::show;

/// The body's fields, in the order the API declares them (a JSON array of exactly three, in
/// order, reads as the object would: serde's derive takes either).
const FIELDS: [&str; 3] = ["username", "password", "device_id"];

/// Input of the `login_body` target: the body's bytes.
pub fn fuzz_login_body(data: &[u8]) {
    check_login_body(data);
}

/// The login body properties:
///
/// - the API reads exactly what a straightforward reading through `serde_json::Value` reads:
///   one JSON object whose `username`, `password` and `device_id` are absent, `null` or strings
///   and appear once each (other fields are ignored); a password login for a username and a
///   password alone, a guest login for a device id alone of 1 to 128 visible ASCII characters
///   or spaces; and it reads the same values;
/// - anything else is refused with the fixed code `invalid_request`, never a text naming what
///   the body held (a password).
pub fn check_login_body(body: &[u8]) {
    let read = login_body(body);
    let mut reference = reference_login(body);
    // serde_json skips the value of a field the API ignores without checking its UTF-8 or its
    // escapes (finding 4 in fuzz/README.md): a body whose only flaw is there is read. Its
    // known fields must then read as they do in the body made valid.
    if read.is_ok() && reference.is_none() && serde_json::from_slice::<Value>(body).is_err() {
        reference = reference_login(String::from_utf8_lossy(body).as_bytes());
        if reference.is_none() {
            return;
        }
    }
    match (&read, &reference) {
        (Ok(got), Some(expected)) => assert!(got == expected, "reading {}", show(body)),
        (Err(code), None) => assert_eq!(*code, "invalid_request"),
        (Ok(got), None) => panic!("took {got:?} from {}", show(body)),
        (Err(code), Some(expected)) => {
            panic!(
                "refused {} ({code}), which asks for {expected:?}",
                show(body)
            )
        }
    }
}

fn reference_login(body: &[u8]) -> Option<Login> {
    let object: Map<String, Value> = match serde_json::from_slice::<Value>(body).ok()? {
        Value::Object(object) => {
            let keys = top_level_keys(body)?;
            if FIELDS
                .iter()
                .any(|f| keys.iter().filter(|k| k == f).count() > 1)
            {
                return None;
            }
            object
        }
        Value::Array(items) if items.len() == FIELDS.len() => {
            FIELDS.iter().map(|f| f.to_string()).zip(items).collect()
        }
        _ => return None,
    };
    let field = |name: &str| match object.get(name) {
        None | Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s.clone())),
        Some(_) => None,
    };
    match (field("username")?, field("password")?, field("device_id")?) {
        (Some(username), Some(password), None) => Some(Login::Password { username, password }),
        (None, None, Some(device_id))
            if (1..=128).contains(&device_id.len())
                && device_id.bytes().all(|b| (b' '..=b'~').contains(&b)) =>
        {
            Some(Login::Guest { device_id })
        }
        _ => None,
    }
}
