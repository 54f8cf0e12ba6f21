//! The game server's reader of the messages clients send, for the fuzzers and their replay
//! tests (hidden, outside semver): a thin view over the server's own function, used by nothing
//! else.

use token_resolver_player::protocol::Request;

/// One message (a TCP line without its `\n`, or a WebSocket text frame) as the server reads it.
///
/// # Errors
///
/// The bytes of the `bad_request` refusal the server sends for a message that is not a
/// request (serialised JSON, without its line end).
pub fn read_request(message: &[u8]) -> Result<Request, Vec<u8>> {
    crate::handler::read_request(message)
}
