//! The `redis_reply` target: the shared tier's hand-written reader of Redis replies, the
//! `XREAD` reply walker and the `XINFO STREAM` reader with its gap decision, on any reply the
//! redis crate's RESP2/RESP3 parser makes of the bytes.

use redis::{FromRedisValue, Value};
use token_resolver::fuzzing::{
    xinfo_missed, xinfo_stream, xread_entries, StreamEntry, XinfoStream,
};

/// Input of the `redis_reply` target: the bytes of one reply as Redis sends it (RESP2 or RESP3:
/// `*` arrays, `%` maps, `$` bulk, `+` simple, `=` verbatim strings, `|` attributes, ...),
/// parsed by the redis crate as the tier's connection does; bytes that are no reply are
/// skipped (the crate's parser is not what this target checks).
pub fn fuzz_redis_reply(data: &[u8]) {
    let Ok(reply) = redis::parse_redis_value(data) else {
        return;
    };
    check_redis_reply(&reply, data.len());
}

/// The reply-reader properties, for a reply that came in `wire_len` bytes:
///
/// - `xread_entries` finds exactly the entries a straightforward reading of `XREAD`'s reply
///   finds (RESP2 `[[stream, entries], ..]` or RESP3 `{stream: entries}`; an entry `[id,
///   fields]`, its fields a flat list or a map; the first string value of `m`, `s` and `p`;
///   an id `<u64>-<u64>`; anything else an empty entry in its place), and holds no more bytes
///   than came;
/// - `xinfo_stream` reads the same fields a straightforward reading of `XINFO STREAM` does
///   (by name, in a flat list or a map, the first one of each name; `first-entry`'s id when
///   `recorded-first-entry-id` is absent);
/// - `xinfo_missed` is the documented gap rule over those fields, for readers that have read
///   nothing and readers at several positions, and never calls a stream that holds the entry
///   after the last one read a gap unless it went back.
pub fn check_redis_reply(reply: &Value, wire_len: usize) {
    let entries = xread_entries(reply.clone());
    assert_eq!(
        entries,
        reference_entries(reply),
        "XREAD entries of {reply:?}"
    );
    let held: usize = entries
        .iter()
        .map(|e| {
            [&e.message, &e.mac, &e.prev]
                .iter()
                .map(|f| f.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
        })
        .sum();
    assert!(
        entries.len() <= wire_len && held <= wire_len,
        "{} entries holding {held} bytes out of a {wire_len}-byte reply",
        entries.len()
    );

    let info = xinfo_stream(reply.clone());
    assert_eq!(info, reference_info(reply), "XINFO STREAM of {reply:?}");
    let mut lasts = vec![(0, 0), (1, 0), (u64::MAX, u64::MAX)];
    for p in [info.newest, info.first].into_iter().flatten() {
        lasts.push(p);
        lasts.push((p.0, p.1.wrapping_sub(1)));
        lasts.push((p.0, p.1.wrapping_add(1)));
    }
    for last in lasts {
        for read_any in [false, true] {
            let missed = xinfo_missed(reply.clone(), read_any, last);
            assert_eq!(
                missed,
                reference_missed(&info, read_any, last),
                "gap decision at {last:?} (read any: {read_any}) for {info:?}"
            );
            if !read_any && info.first.is_none() {
                assert!(!missed, "a reader that read nothing re-syncs on {info:?}");
            }
        }
    }
}

/// The gap rule as docs/redis.md states it: a reader that has read entries missed some when
/// the stream went back behind it; else none when the stream's oldest entry is at or before
/// the last one read; else, when the stream is newer, some when Redis trimmed it (more added
/// than held) or cannot say (before Redis 7); with no oldest entry to judge, a reader that has
/// read entries assumes it missed some.
fn reference_missed(info: &XinfoStream, read_any: bool, last: (u64, u64)) -> bool {
    let went_back = read_any && matches!(info.newest, Some(newest) if newest < last);
    let trimmed_or_unknown = match (info.added, info.length) {
        (Some(added), Some(length)) => added > length || read_any,
        _ => true,
    };
    went_back
        || match info.first {
            None => read_any,
            Some(first) => first > last && trimmed_or_unknown,
        }
}

/// A string reply's bytes: bulk, simple or verbatim.
fn string_bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(text) => Some(text.as_bytes().to_vec()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes().to_vec()),
        _ => None,
    }
}

/// `<ms>-<seq>`, each a `u64` as Rust reads one.
fn position(id: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(id).ok()?;
    let dash = text.find('-')?;
    Some((text[..dash].parse().ok()?, text[dash + 1..].parse().ok()?))
}

/// The field-value pairs of a flat list (a trailing odd element dropped) or of a map.
fn field_pairs(value: &Value) -> Vec<(&Value, &Value)> {
    match value {
        Value::Array(items) => items.chunks_exact(2).map(|kv| (&kv[0], &kv[1])).collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    }
}

fn reference_entries(reply: &Value) -> Vec<StreamEntry> {
    let streams: Vec<&Value> = match reply {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|stream| match stream {
                Value::Array(pair) if pair.len() == 2 => Some(&pair[1]),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.iter().map(|(_, entries)| entries).collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for stream in streams {
        let Value::Array(entries) = stream else {
            continue;
        };
        for entry in entries {
            let mut read = StreamEntry::default();
            if let Value::Array(parts) = entry {
                read.id = parts
                    .first()
                    .and_then(string_bytes)
                    .and_then(|id| position(&id));
                for (name, value) in parts.get(1).map(field_pairs).unwrap_or_default() {
                    let slot = match string_bytes(name).as_deref() {
                        Some(b"m") => &mut read.message,
                        Some(b"s") => &mut read.mac,
                        Some(b"p") => &mut read.prev,
                        _ => continue,
                    };
                    if slot.is_none() {
                        *slot = string_bytes(value);
                    }
                }
            }
            out.push(read);
        }
    }
    out
}

fn reference_info(reply: &Value) -> XinfoStream {
    let pairs = field_pairs(reply);
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| String::from_redis_value_ref(k).is_ok_and(|k| k == name))
            .map(|(_, v)| *v)
    };
    let id = |value: &Value| position(String::from_redis_value_ref(value).ok()?.as_bytes());
    let first_entry = || match field("first-entry")? {
        Value::Array(entry) => id(entry.first()?),
        _ => None,
    };
    XinfoStream {
        newest: field("last-generated-id").and_then(id),
        first: field("recorded-first-entry-id")
            .and_then(id)
            .or_else(first_entry),
        added: field("entries-added").and_then(|v| u64::from_redis_value_ref(v).ok()),
        length: field("length").and_then(|v| u64::from_redis_value_ref(v).ok()),
    }
}
