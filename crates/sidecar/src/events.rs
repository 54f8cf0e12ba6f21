//! What happens to named sessions, for the game server to act on: `revoked` (a ban, a logout
//! or an invalidation reached this node; or the token expired and no new one came in time;
//! or a re-check could not get an answer for longer than allowed), `reauth_required` (the
//! token expired: resolve the session again with a fresh one within `within_ms`) and `resync`
//! (what happened to the sessions is not known: resolve every one again).
//!
//! Each event gets an id, `<epoch>-<n>`: the epoch (16 hex digits) is drawn when the process
//! starts, `n` counts from 1. The event goes into a bounded journal, then to every open stream
//! (`GET /v1/events`, Server-Sent Events). A stream that comes back with `Last-Event-ID` is
//! sent the events after that id. One that cannot be shown to have missed nothing is sent
//! `resync` first, then what the journal holds: an id of another process (the sidecar
//! restarted, and whatever it watched is lost), one this process has not written yet (ahead of
//! the journal), one older than the journal, or one it cannot read. Every stream is sent, after
//! what it is owed, the id of the last event written (an event with an id alone, which no
//! client acts on), so that it holds an id of this process from its first moment and can
//! always prove where it was.
//!
//! A stream opened without an id is sent the events still owed: those no stream took, after a
//! `resync` when some fell off the journal before any stream took them. An event
//! is taken when a stream sends it on (not when it merely waits in a stream's buffer), and
//! counted then in [`EVENTS_DELIVERED_TOTAL`]. A stream that falls
//! [`stream_buffer`](crate::SidecarConfig::stream_buffer) events behind is ended, with a log
//! line, and comes back with its last id: a slow reader costs bounded memory and loses nothing
//! the journal still holds. How many streams are open is watched ([`Events::readers`]): the
//! sessions of a game server that no longer reads are reclaimed (`sessions`).

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::watch;

use super::Node;

/// Events a stream sent on, the first time one did, by `type`.
pub const EVENTS_DELIVERED_TOTAL: &str = "sidecar_events_delivered_total";

/// Gauge: event streams (`GET /v1/events`) open now: the game servers following this sidecar.
pub const EVENT_STREAMS_OPEN: &str = "sidecar_event_streams_open";

/// Counter: event streams ended because they fell too far behind (each comes back with
/// `Last-Event-ID`).
pub const EVENT_STREAMS_DROPPED_TOTAL: &str = "sidecar_event_streams_dropped_total";

/// The kind of a record that is an id alone: no `event` nor `data` (no client acts on it; a
/// client following the SSE rules keeps its id).
const PLACE: &str = "";

/// How often an idle stream gets a comment, so that proxies and clients see it alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event as the journal keeps it.
#[derive(Debug)]
pub(crate) struct Record {
    /// Its number in this process, counting from 1.
    id: u64,
    /// `revoked`, `reauth_required` or `resync`.
    kind: &'static str,
    /// Its JSON data.
    data: String,
    /// Whether a stream sent it on.
    delivered: AtomicBool,
}

impl Record {
    /// A stream sends this record on: it is no longer owed.
    fn taken(&self) {
        if !self.delivered.swap(true, Ordering::Relaxed) {
            metrics::counter!(EVENTS_DELIVERED_TOTAL, "type" => self.kind).increment(1);
        }
    }
}

/// The journal and the live feed of events.
#[derive(Debug)]
pub(crate) struct Events {
    /// What this process's ids begin with.
    epoch: u64,
    journal: Mutex<Journal>,
    live: broadcast::Sender<Arc<Record>>,
    /// Streams open now.
    readers: Arc<watch::Sender<usize>>,
}

#[derive(Debug)]
struct Journal {
    recent: VecDeque<Arc<Record>>,
    capacity: usize,
    next_id: u64,
    /// An event no stream had sent on fell off the journal: the next stream opened without an
    /// id cannot be sent all it is owed, and is told to resync first.
    lost_owed: bool,
}

/// Where a stream opening now takes up, from its `Last-Event-ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// No id: a stream that never read, sent what is owed.
    Fresh,
    /// After this event of this process.
    After(u64),
    /// An id of another process, or one that cannot be read: nothing can be assumed.
    Unknown,
}

/// An epoch for this process's event ids: the boot time hashed with a key std draws from the
/// system's randomness, so that two processes differ even when started in the same instant.
fn boot_epoch() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    RandomState::new().hash_one(nanos)
}

impl Events {
    /// A journal of `capacity` events; streams may fall `buffer` behind.
    pub(crate) fn new(capacity: usize, buffer: usize) -> Events {
        Events {
            epoch: boot_epoch(),
            journal: Mutex::new(Journal {
                recent: VecDeque::new(),
                capacity: capacity.max(1),
                next_id: 1,
                lost_owed: false,
            }),
            live: broadcast::channel(buffer.max(1)).0,
            readers: Arc::new(watch::Sender::new(0)),
        }
    }

    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many streams are open, as it changes.
    pub(crate) fn readers(&self) -> watch::Receiver<usize> {
        self.readers.subscribe()
    }

    /// The id `record` has on the wire.
    fn wire_id(&self, id: u64) -> String {
        format!("{:016x}-{id}", self.epoch)
    }

    /// Where a stream whose `Last-Event-ID` is `header` takes up.
    fn resume(&self, header: Option<&HeaderValue>) -> Resume {
        resume_at(self.epoch, header)
    }

    /// Records an event of `kind` with `data` (`type` is set to `kind`) and sends it to the
    /// open streams.
    pub(crate) fn publish(&self, kind: &'static str, mut data: Value) {
        data["type"] = Value::from(kind);
        let mut journal = self.journal();
        let record = Arc::new(Record {
            id: journal.next_id,
            kind,
            data: data.to_string(),
            delivered: AtomicBool::new(false),
        });
        journal.next_id += 1;
        if journal.recent.len() == journal.capacity {
            let dropped = journal.recent.pop_front();
            if dropped.is_some_and(|r| !r.delivered.load(Ordering::Relaxed)) {
                journal.lost_owed = true;
            }
        }
        journal.recent.push_back(record.clone());
        // Under the lock, so that a stream opening now sees the event either in its replay or
        // on its receiver, never both nor neither. A receiver holding it has not taken it: it
        // is owed until a stream sends it on.
        let _ = self.live.send(record.clone());
        tracing::debug!(id = record.id, kind, "session event");
    }

    /// What a stream opening now at `resume` is sent first, and the receiver of what comes
    /// next.
    fn subscribe(&self, resume: Resume) -> (Vec<Arc<Record>>, broadcast::Receiver<Arc<Record>>) {
        let mut journal = self.journal();
        let receiver = self.live.subscribe();
        let oldest = journal.recent.front().map_or(journal.next_id, |r| r.id);
        let (resync, after) = match resume {
            Resume::Fresh if !journal.lost_owed => {
                let owed = (journal.recent.iter())
                    .filter(|r| !r.delivered.load(Ordering::Relaxed))
                    .cloned()
                    .collect();
                return (place(owed, journal.next_id - 1), receiver);
            }
            // Owed events were lost before any stream took them: this stream is sent resync,
            // then everything the journal holds.
            Resume::Fresh => {
                journal.lost_owed = false;
                (true, 0)
            }
            // Ahead of what this process wrote, or older than what it still holds.
            Resume::After(last) if last >= journal.next_id || last.saturating_add(1) < oldest => {
                (true, 0)
            }
            Resume::After(last) => (false, last),
            Resume::Unknown => (true, 0),
        };
        let mut replay: Vec<Arc<Record>> = Vec::new();
        if resync {
            // Numbered just before what follows it, so that a stream coming back with it is
            // sent the rest and no second resync.
            replay.push(Arc::new(Record {
                id: oldest - 1,
                kind: "resync",
                data: r#"{"type":"resync"}"#.to_owned(),
                delivered: AtomicBool::new(true),
            }));
        }
        replay.extend(journal.recent.iter().filter(|r| r.id > after).cloned());
        (place(replay, journal.next_id - 1), receiver)
    }
}

/// `replay`, ending with the id of the last event written (`last`): an event with that id alone
/// when `replay` does not end with it. A stream holds an id of this process from its first
/// moment, even when no event comes, so that it can always come back with one.
fn place(mut replay: Vec<Arc<Record>>, last: u64) -> Vec<Arc<Record>> {
    if replay.last().is_none_or(|r| r.id < last) {
        replay.push(Arc::new(Record {
            id: last,
            kind: PLACE,
            data: String::new(),
            delivered: AtomicBool::new(true),
        }));
    }
    replay
}

/// Where a stream whose `Last-Event-ID` is `header` takes up, in a process whose ids carry
/// `epoch`: `<epoch, 16 hex digits>-<n>`, spaces around it ignored.
pub(crate) fn resume_at(epoch: u64, header: Option<&HeaderValue>) -> Resume {
    let Some(header) = header else {
        return Resume::Fresh;
    };
    let parsed = (header.to_str().ok())
        .and_then(|id| id.trim().split_once('-'))
        .filter(|(theirs, _)| theirs.len() == 16)
        .and_then(|(theirs, n)| Some((u64::from_str_radix(theirs, 16).ok()?, n.parse().ok()?)));
    match parsed {
        Some((theirs, n)) if theirs == epoch => Resume::After(n),
        _ => Resume::Unknown,
    }
}

/// `GET /v1/events`: the stream of session events, from `Last-Event-ID` on when given.
pub(crate) async fn stream(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let resume = node.events.resume(headers.get("last-event-id"));
    let (replay, receiver) = node.events.subscribe(resume);
    let resync = replay.first().is_some_and(|r| r.kind == "resync");
    tracing::info!(replayed = replay.len(), resync, "event stream opened");
    let draining = node.draining.clone();
    let reading = Reading::new(&node.events.readers);
    let events = feed(replay, receiver, reading)
        .take_until(async move { draining.cancelled().await })
        .map(move |record| Ok::<_, Infallible>(event(&node.events, &record)));
    sse(events)
}

/// An open stream, counted in [`Events::readers`] while it lives.
struct Reading(Arc<watch::Sender<usize>>);

impl Reading {
    fn new(readers: &Arc<watch::Sender<usize>>) -> Reading {
        readers.send_modify(|open| {
            *open += 1;
            metrics::gauge!(EVENT_STREAMS_OPEN).set(*open as f64);
        });
        Reading(readers.clone())
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.send_modify(|open| {
            *open = open.saturating_sub(1);
            metrics::gauge!(EVENT_STREAMS_OPEN).set(*open as f64);
        });
    }
}

/// What one stream is sent: `replay`, then what `receiver` gets, until it falls behind (then it
/// ends, with a log line) or the journal goes away. Each record is taken as it is sent on;
/// the stream counts as open while `reading` lives.
fn feed(
    replay: Vec<Arc<Record>>,
    receiver: broadcast::Receiver<Arc<Record>>,
    reading: Reading,
) -> impl Stream<Item = Arc<Record>> + Send {
    let live = stream::unfold(receiver, |mut receiver| async move {
        match receiver.recv().await {
            Ok(record) => Some((record, receiver)),
            Err(RecvError::Lagged(missed)) => {
                metrics::counter!(EVENT_STREAMS_DROPPED_TOTAL).increment(1);
                tracing::warn!(
                    missed,
                    "an event stream fell behind: dropped (it comes back with Last-Event-ID)"
                );
                None
            }
            Err(RecvError::Closed) => None,
        }
    });
    stream::iter(replay).chain(live).map(move |record| {
        let _open = &reading;
        record.taken();
        record
    })
}

/// `events` as a Server-Sent Events answer, with keep-alive comments.
fn sse(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// The SSE form of `record`.
fn event(events: &Events, record: &Record) -> Event {
    let event = Event::default().id(events.wire_id(record.id));
    if record.kind == PLACE {
        return event;
    }
    event.event(record.kind).data(&record.data)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The events in `records`, the id alone at their end left out.
    fn ids(records: &[Arc<Record>]) -> Vec<(u64, &'static str)> {
        (records.iter())
            .filter(|r| r.kind != PLACE)
            .map(|r| (r.id, r.kind))
            .collect()
    }

    /// Sends `replay` on, as a stream that reads does.
    fn take(replay: &[Arc<Record>]) {
        replay.iter().for_each(|r| r.taken());
    }

    #[test]
    fn a_stream_that_comes_back_is_sent_what_came_after_its_last_id() {
        let events = Events::new(8, 8);
        for i in 0..3 {
            events.publish("revoked", json!({ "session": i }));
        }
        let (replay, _) = events.subscribe(Resume::After(1));
        assert_eq!(ids(&replay), [(2, "revoked"), (3, "revoked")]);
        let (nothing, _) = events.subscribe(Resume::After(3));
        assert!(ids(&nothing).is_empty(), "{:?}", ids(&nothing));
    }

    #[test]
    fn a_stream_older_than_the_journal_is_told_to_resync_first() {
        let events = Events::new(2, 8);
        for i in 0..5 {
            events.publish("revoked", json!({ "session": i }));
        }
        let (replay, _) = events.subscribe(Resume::After(1));
        assert_eq!(
            ids(&replay),
            [(3, "resync"), (4, "revoked"), (5, "revoked")]
        );
    }

    #[test]
    fn a_stream_ahead_of_the_journal_is_told_to_resync_first_and_sent_all_it_holds() {
        let events = Events::new(8, 8);
        events.publish("revoked", json!({ "session": "a" }));
        let (replay, _) = events.subscribe(Resume::After(7));
        assert_eq!(ids(&replay), [(0, "resync"), (1, "revoked")]);
        let empty = Events::new(8, 8);
        let (replay, _) = empty.subscribe(Resume::After(1));
        assert_eq!(ids(&replay), [(0, "resync")]);
    }

    #[test]
    fn an_id_of_another_process_or_unreadable_means_resync() {
        let events = Events::new(8, 8);
        let other = Events::new(8, 8);
        assert_ne!(events.epoch, other.epoch, "each process draws its own");
        events.publish("revoked", json!({ "session": "a" }));
        let header = |s: &str| HeaderValue::from_str(s).unwrap();
        let ours = header(&events.wire_id(1));
        assert_eq!(events.resume(Some(&ours)), Resume::After(1));
        assert_eq!(events.resume(None), Resume::Fresh);
        for id in [
            other.wire_id(1),
            "1".to_owned(),
            "".to_owned(),
            format!("{:016x}", events.epoch),
            format!("{:016x}-x", events.epoch),
            format!("0{:016x}-1", events.epoch),
            "zzzzzzzzzzzzzzzz-1".to_owned(),
        ] {
            assert_eq!(events.resume(Some(&header(&id))), Resume::Unknown, "{id:?}");
        }
        let (replay, _) = events.subscribe(Resume::Unknown);
        assert_eq!(ids(&replay), [(0, "resync"), (1, "revoked")]);
    }

    #[test]
    fn every_stream_ends_its_replay_with_the_last_id_written() {
        let events = Events::new(8, 8);
        let (replay, _) = events.subscribe(Resume::Fresh);
        let placed: Vec<_> = replay.iter().map(|r| (r.id, r.kind)).collect();
        assert_eq!(placed, [(0, PLACE)], "an id even before any event");
        let wire = format!("{:?}", event(&events, &replay[0]));
        assert!(!wire.contains("data"), "{wire}");
        events.publish("revoked", json!({ "session": "a" }));
        events.publish("revoked", json!({ "session": "b" }));
        let (replay, _) = events.subscribe(Resume::After(1));
        let placed: Vec<_> = replay.iter().map(|r| (r.id, r.kind)).collect();
        assert_eq!(placed, [(2, "revoked")], "no id alone after the last event");
        let (replay, _) = events.subscribe(Resume::After(2));
        let placed: Vec<_> = replay.iter().map(|r| (r.id, r.kind)).collect();
        assert_eq!(placed, [(2, PLACE)]);
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_its_buffer_ends_and_comes_back_for_the_rest() {
        let events = Events::new(64, 2);
        let (replay, receiver) = events.subscribe(Resume::Fresh);
        let reading = Reading::new(&events.readers);
        for i in 0..5 {
            events.publish("revoked", json!({ "session": i }));
        }
        // Never read while five events came: it ends at once, having sent nothing, rather
        // than holding them all.
        let sent: Vec<_> = feed(replay, receiver, reading).collect().await;
        assert!(ids(&sent).is_empty(), "{:?}", ids(&sent));
        let (again, _) = events.subscribe(Resume::After(0));
        assert_eq!(again.len(), 5, "the journal still has them");
        let (owed, _) = events.subscribe(Resume::Fresh);
        assert_eq!(owed.len(), 5, "and owes them: no stream sent them on");
    }

    #[test]
    fn events_no_stream_took_are_sent_to_the_first_stream_without_an_id_once() {
        let events = Events::new(8, 8);
        events.publish("revoked", json!({ "session": "a" }));
        let (first, _open) = events.subscribe(Resume::Fresh);
        assert_eq!(ids(&first), [(1, "revoked")]);
        take(&first);
        events.publish("revoked", json!({ "session": "b" }));
        let (second, _) = events.subscribe(Resume::Fresh);
        assert_eq!(
            ids(&second),
            [(2, "revoked")],
            "b waits on a stream not read"
        );
    }

    #[test]
    fn a_stream_without_an_id_is_told_to_resync_when_owed_events_fell_off_the_journal() {
        let events = Events::new(2, 8);
        for session in ["a", "b", "c"] {
            events.publish("revoked", json!({ "session": session }));
        }
        let (first, _open) = events.subscribe(Resume::Fresh);
        assert_eq!(
            ids(&first),
            [(1, "resync"), (2, "revoked"), (3, "revoked")],
            "a was owed and is gone"
        );
        take(&first);
        let (second, _) = events.subscribe(Resume::Fresh);
        assert_eq!(ids(&second), [], "told once");
    }

    #[tokio::test]
    async fn an_event_is_delivered_when_a_stream_sends_it_on_not_when_it_waits_in_a_buffer() {
        let events = Events::new(8, 8);
        let (replay, receiver) = events.subscribe(Resume::Fresh);
        let mut open = Box::pin(feed(replay, receiver, Reading::new(&events.readers)));
        assert_eq!(*events.readers().borrow(), 1);
        events.publish("revoked", json!({ "session": "a" }));
        events.publish("revoked", json!({ "session": "b" }));
        let place = open.next().await.expect("the id alone");
        assert_eq!(place.kind, PLACE);
        let sent = open.next().await.expect("a");
        assert_eq!(sent.id, 1);
        drop(open);
        assert_eq!(
            *events.readers().borrow(),
            0,
            "closed streams are not counted"
        );
        let (owed, _) = events.subscribe(Resume::Fresh);
        assert_eq!(ids(&owed), [(2, "revoked")], "b was in the buffer only");
    }
}
