//! The `game_message` target: a message a client sends the game server (a TCP line or a
//! WebSocket text frame).

use serde_json::Value;
use token_resolver_game_server::fuzzing::read_request;

use super::answer::token_like_runs;
use super::show;

/// The names of the protocol's own schema, which a refusal may name.
const VOCABULARY: &str = "type connect search_room join refresh access_token host port protocol \
                          roomId authUrl memberProperties";

/// The longest refusal message: the fixed opening and serde's error cut to 200 characters.
const MAX_MESSAGE_CHARS: usize = 300;

/// Input of the `game_message` target: the message's bytes.
pub fn fuzz_game_message(data: &[u8]) {
    check_game_message(data);
}

/// The game message properties:
///
/// - a message the server takes is a JSON object whose `type` is the request's kind (or an
///   array whose first element is, which serde also takes), and the request written back as
///   JSON is read as the same request;
/// - anything else is refused with one line, `{"type": "error", "error": "bad_request",
///   "retryable": false, "message": ..}`, whose message is at most 300 characters and quotes
///   no run of 16 or more token characters of the message (which may hold a token) beyond the
///   schema's own names.
pub fn check_game_message(message: &[u8]) {
    match read_request(message) {
        Ok(request) => {
            let value: Value = serde_json::from_slice(message)
                .unwrap_or_else(|e| panic!("took {}, which is not JSON: {e}", show(message)));
            // serde's internally tagged enums also take a sequence whose first element is the
            // tag (`["search_room"]`; finding 5 in fuzz/README.md).
            let kind = match &value {
                Value::Array(items) => items.first().and_then(Value::as_str),
                _ => value.get("type").and_then(Value::as_str),
            };
            assert_eq!(kind, Some(request.kind()), "the type of {}", show(message));
            let again = serde_json::to_vec(&request).expect("a request serialises");
            let reread = read_request(&again)
                .unwrap_or_else(|_| panic!("{request:?} written as {} is refused", show(&again)));
            assert!(reread == request, "{request:?} reads back as {reread:?}");
        }
        Err(line) => {
            let refusal: Value = serde_json::from_slice(&line)
                .unwrap_or_else(|e| panic!("the refusal {} is not JSON: {e}", show(&line)));
            assert_eq!(refusal["type"], "error", "{refusal}");
            assert_eq!(refusal["error"], "bad_request", "{refusal}");
            assert_eq!(refusal["retryable"], false, "{refusal}");
            let text = refusal["message"].as_str().expect("a message");
            assert!(
                text.chars().count() <= MAX_MESSAGE_CHARS,
                "a refusal of {} chars",
                text.chars().count()
            );
            for run in token_like_runs(message, 16) {
                assert!(
                    VOCABULARY.contains(run) || !text.contains(run),
                    "the refusal of {} quotes {run:?}: {text:?}",
                    show(message)
                );
            }
        }
    }
}
