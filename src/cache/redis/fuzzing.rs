//! The shared tier's readers of what Redis hands a node, reachable for the fuzzers and their
//! replay tests (`token_resolver::fuzzing`, hidden, outside semver): the `XREAD` reply walker,
//! the `XINFO STREAM` reader and its gap decision, and the revocation stream's messages and
//! their MAC. Thin views over the reader's own functions, with plain types; nothing here is
//! used by the tier itself.

use super::invalidation::{stream_mac, Message, Revoked};
use super::subscriber::{stream_entries, Position, StreamInfo};

/// One entry of an `XREAD` reply as the reader takes it apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamEntry {
    /// Its id (`<ms>-<seq>`), when it is one.
    pub id: Option<(u64, u64)>,
    /// Field `m`: the message, the first one when repeated.
    pub message: Option<Vec<u8>>,
    /// Field `s`: the message's MAC (hex), the first one when repeated.
    pub mac: Option<Vec<u8>>,
    /// Field `p`: the id of the entry before it, the first one when repeated.
    pub prev: Option<Vec<u8>>,
}

/// The entries the reader finds in an `XREAD` reply (RESP2 or RESP3), in order; an entry that
/// is not one comes out empty, in its place.
pub fn xread_entries(reply: redis::Value) -> Vec<StreamEntry> {
    stream_entries(reply)
        .into_iter()
        .map(|entry| StreamEntry {
            id: entry.position.map(|p| (p.0, p.1)),
            message: entry.message,
            mac: entry.mac,
            prev: entry.prev,
        })
        .collect()
}

/// What the reader reads of an `XINFO STREAM` answer (RESP2 or RESP3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XinfoStream {
    /// `last-generated-id`.
    pub newest: Option<(u64, u64)>,
    /// `recorded-first-entry-id`, else the id of `first-entry`.
    pub first: Option<(u64, u64)>,
    /// `entries-added`.
    pub added: Option<u64>,
    /// `length`.
    pub length: Option<u64>,
}

/// The fields of an `XINFO STREAM` answer the reader uses.
pub fn xinfo_stream(info: redis::Value) -> XinfoStream {
    let read = StreamInfo::read(info);
    XinfoStream {
        newest: read.newest.map(|p| (p.0, p.1)),
        first: read.first.map(|p| (p.0, p.1)),
        added: read.added,
        length: read.length,
    }
}

/// Whether a reader that has read an entry (`read_any`) up to `last` takes the answer `info`
/// for entries it missed (and re-syncs).
pub fn xinfo_missed(info: redis::Value, read_any: bool, last: (u64, u64)) -> bool {
    StreamInfo::read(info).missed(read_any, Position(last.0, last.1))
}

/// A revocation message as the reader reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToldMessage {
    /// `token`, `user`, `session` or `all`.
    pub op: &'static str,
    /// The endpoint it names (all but `all`).
    pub endpoint: Option<String>,
    /// The token's digest (`token`).
    pub digest: Option<String>,
    /// The user (`user`, `session`).
    pub user_id: Option<i64>,
    /// The integrator's session (`session`).
    pub session: Option<String>,
    /// The generation (`all`).
    pub generation: Option<u64>,
    /// When it was made (unix ms).
    pub made_at_ms: u64,
    /// When it was decided (unix ms).
    pub decided_at_ms: u64,
}

/// Reads the message `json` as a reader named `node` does: `Ok(None)` for its own.
///
/// # Errors
///
/// The message is not a revocation (not JSON, a field of the wrong type, an unknown `op`, a
/// field its `op` needs missing); the text is serde_json's.
pub fn stream_message(json: &[u8], node: &str) -> Result<Option<ToldMessage>, String> {
    let Some(told) = Message::read(json, node).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut read = ToldMessage {
        op: "all",
        endpoint: None,
        digest: None,
        user_id: None,
        session: None,
        generation: None,
        made_at_ms: told.made_at_ms,
        decided_at_ms: told.decided_at_ms,
    };
    match told.what {
        Revoked::Token { endpoint, digest } => {
            read.op = "token";
            read.endpoint = Some(endpoint);
            read.digest = Some(digest);
        }
        Revoked::User { endpoint, user_id } => {
            read.op = "user";
            read.endpoint = Some(endpoint);
            read.user_id = Some(user_id);
        }
        Revoked::Session {
            endpoint,
            user_id,
            session,
        } => {
            read.op = "session";
            read.endpoint = Some(endpoint);
            read.user_id = Some(user_id);
            read.session = Some(session);
        }
        Revoked::All { generation } => read.generation = Some(generation),
    }
    Ok(Some(read))
}

/// The MAC (hex) a node with the tier's `secret` gives the message `json` on `stream`.
pub fn stream_message_mac(secret: &[u8], stream: &str, json: &[u8]) -> String {
    Message::mac(&stream_mac(secret), stream, json)
}

/// Whether a reader with the tier's `secret` takes `mac` for the MAC of `json` on `stream`.
pub fn stream_message_authentic(secret: &[u8], stream: &str, json: &[u8], mac: &[u8]) -> bool {
    Message::authentic(&stream_mac(secret), stream, json, mac)
}
