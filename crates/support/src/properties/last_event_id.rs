//! The `last_event_id` target: the `Last-Event-ID` an event stream of the sidecar comes back
//! with.

use token_resolver_sidecar::fuzzing::{last_event_id, LastEventId};

use super::show;

/// The epoch the target's process has, unless the input names its own.
const EPOCH: u64 = 0x0123_4567_89ab_cdef;

/// Input of the `last_event_id` target: the header's bytes (those that are no header value
/// are skipped, as hyper never hands them over).
pub fn fuzz_last_event_id(data: &[u8]) {
    check_last_event_id(data);
}

/// The `Last-Event-ID` properties:
///
/// - without the header a stream is fresh;
/// - with it, for processes of several epochs (the input's own among them), a stream takes up
///   after event `n` exactly when the header, spaces and tabs around it trimmed, is the
///   process's epoch in 16 hex digits, `-`, and `n` (as Rust reads a `u64`); anything else is
///   an unknown id, never an error;
/// - every id the sidecar writes (`{epoch:016x}-{n}`) reads back as that event of that epoch
///   and as unknown to every other epoch.
pub fn check_last_event_id(header: &[u8]) {
    assert_eq!(last_event_id(EPOCH, None), Some(LastEventId::Fresh));
    let Some(read) = last_event_id(EPOCH, Some(header)) else {
        return;
    };
    let named = reference_id(header);
    for epoch in [EPOCH, 0, u64::MAX]
        .into_iter()
        .chain(named.map(|(epoch, _)| epoch))
    {
        let expected = match named {
            Some((theirs, n)) if theirs == epoch => LastEventId::After(n),
            _ => LastEventId::Unknown,
        };
        assert_eq!(
            last_event_id(epoch, Some(header)),
            Some(expected),
            "Last-Event-ID {} at epoch {epoch:016x}",
            show(header)
        );
    }
    assert!(matches!(read, LastEventId::After(_) | LastEventId::Unknown));

    // The sidecar's own ids, made from the input's bytes.
    let mut word = [0u8; 16];
    for (i, b) in header.iter().enumerate() {
        word[i % 16] ^= b;
    }
    let epoch = u64::from_le_bytes(word[..8].try_into().unwrap());
    let n = u64::from_le_bytes(word[8..].try_into().unwrap());
    let ours = format!("{epoch:016x}-{n}");
    assert_eq!(
        last_event_id(epoch, Some(ours.as_bytes())),
        Some(LastEventId::After(n)),
        "{ours}"
    );
    assert_eq!(
        last_event_id(epoch ^ 1, Some(ours.as_bytes())),
        Some(LastEventId::Unknown),
        "{ours} at another epoch"
    );
}

/// The epoch and event a header names, read without the sidecar.
fn reference_id(header: &[u8]) -> Option<(u64, u64)> {
    if !header
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return None;
    }
    let text = std::str::from_utf8(header).ok()?;
    let text = text.trim_matches([' ', '\t']);
    let dash = text.find('-')?;
    let (epoch, n) = (&text[..dash], &text[dash + 1..]);
    if epoch.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(epoch, 16).ok()?, n.parse().ok()?))
}
