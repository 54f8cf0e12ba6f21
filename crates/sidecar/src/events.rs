//! What happens to named sessions, for the game server to act on: `revoked` (a ban, a logout
//! or an invalidation reached this node; or the token expired and no new one came in time;
//! or a re-check could not get an answer for longer than allowed) and `reauth_required` (the
//! token expired: resolve the session again with a fresh one within `within_ms`).
//!
//! Each event gets an id and goes into a bounded journal, then to every open stream
//! (`GET /v1/events`, Server-Sent Events). A stream that comes back with `Last-Event-ID` is
//! sent the events after that id; one whose id is older than the journal is sent `resync`
//! first (resolve every session again: what happened meanwhile is not known). A stream opened
//! without an id is sent the events that no stream was open to take. A stream that falls
//! [`stream_buffer`](crate::SidecarConfig::stream_buffer) events behind is ended, with a log
//! line, and comes back with its last id: a slow reader costs bounded memory and loses nothing
//! the journal still holds.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::Value;
use tokio::sync::broadcast::{self, error::RecvError};

use super::Node;

/// How often an idle stream gets a comment, so that proxies and clients see it alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event as the journal keeps it.
#[derive(Debug)]
pub(crate) struct Record {
    /// Its id, counting from 1.
    id: u64,
    /// `revoked`, `reauth_required` or `resync`.
    kind: &'static str,
    /// Its JSON data.
    data: String,
    /// Whether a stream was open to take it.
    delivered: AtomicBool,
}

/// The journal and the live feed of events.
#[derive(Debug)]
pub(crate) struct Events {
    journal: Mutex<Journal>,
    live: broadcast::Sender<Arc<Record>>,
}

#[derive(Debug)]
struct Journal {
    recent: VecDeque<Arc<Record>>,
    capacity: usize,
    next_id: u64,
}

impl Events {
    /// A journal of `capacity` events; streams may fall `buffer` behind.
    pub(crate) fn new(capacity: usize, buffer: usize) -> Events {
        Events {
            journal: Mutex::new(Journal {
                recent: VecDeque::new(),
                capacity: capacity.max(1),
                next_id: 1,
            }),
            live: broadcast::channel(buffer.max(1)).0,
        }
    }

    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
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
            journal.recent.pop_front();
        }
        journal.recent.push_back(record.clone());
        // Under the lock, so that a stream opening now sees the event either in its replay or
        // on its receiver, never both nor neither.
        if self.live.send(record.clone()).is_ok() {
            record.delivered.store(true, Ordering::Relaxed);
        }
        tracing::debug!(id = record.id, kind, "session event");
    }

    /// What a stream opening now is sent first, after `last_id` if it names one, and the
    /// receiver of what comes next.
    fn subscribe(
        &self,
        last_id: Option<u64>,
    ) -> (Vec<Arc<Record>>, broadcast::Receiver<Arc<Record>>) {
        let journal = self.journal();
        let receiver = self.live.subscribe();
        let mut replay: Vec<Arc<Record>> = match last_id {
            Some(last) => journal
                .recent
                .iter()
                .filter(|r| r.id > last)
                .cloned()
                .collect(),
            None => (journal.recent.iter())
                .filter(|r| !r.delivered.load(Ordering::Relaxed))
                .cloned()
                .collect(),
        };
        let oldest = journal.recent.front().map_or(journal.next_id, |r| r.id);
        if last_id.is_some_and(|last| last.saturating_add(1) < oldest) {
            replay.insert(
                0,
                Arc::new(Record {
                    id: oldest - 1,
                    kind: "resync",
                    data: r#"{"type":"resync"}"#.to_owned(),
                    delivered: AtomicBool::new(true),
                }),
            );
        }
        for record in &replay {
            record.delivered.store(true, Ordering::Relaxed);
        }
        (replay, receiver)
    }
}

/// `GET /v1/events`: the stream of session events, from `Last-Event-ID` on when given.
pub(crate) async fn stream(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let last_id = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let (replay, receiver) = node.events.subscribe(last_id);
    tracing::info!(replayed = replay.len(), "event stream opened");
    let draining = node.draining.clone();
    let events = feed(replay, receiver)
        .take_until(async move { draining.cancelled().await })
        .map(|record| Ok::<_, Infallible>(event(&record)));
    sse(events)
}

/// What one stream is sent: `replay`, then what `receiver` gets, until it falls behind (then it
/// ends, with a log line) or the journal goes away.
fn feed(
    replay: Vec<Arc<Record>>,
    receiver: broadcast::Receiver<Arc<Record>>,
) -> impl Stream<Item = Arc<Record>> + Send {
    let live = stream::unfold(receiver, |mut receiver| async move {
        match receiver.recv().await {
            Ok(record) => Some((record, receiver)),
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "an event stream fell behind: dropped (it comes back with Last-Event-ID)"
                );
                None
            }
            Err(RecvError::Closed) => None,
        }
    });
    stream::iter(replay).chain(live)
}

/// `events` as a Server-Sent Events answer, with keep-alive comments.
fn sse(events: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// The SSE form of `record`.
fn event(record: &Record) -> Event {
    Event::default()
        .id(record.id.to_string())
        .event(record.kind)
        .data(&record.data)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(records: &[Arc<Record>]) -> Vec<(u64, &'static str)> {
        records.iter().map(|r| (r.id, r.kind)).collect()
    }

    #[test]
    fn a_stream_that_comes_back_is_sent_what_came_after_its_last_id() {
        let events = Events::new(8, 8);
        let (_, _open) = events.subscribe(None);
        for i in 0..3 {
            events.publish("revoked", json!({ "session": i }));
        }
        let (replay, _) = events.subscribe(Some(1));
        assert_eq!(ids(&replay), [(2, "revoked"), (3, "revoked")]);
    }

    #[test]
    fn a_stream_older_than_the_journal_is_told_to_resync_first() {
        let events = Events::new(2, 8);
        for i in 0..5 {
            events.publish("revoked", json!({ "session": i }));
        }
        let (replay, _) = events.subscribe(Some(1));
        assert_eq!(
            ids(&replay),
            [(3, "resync"), (4, "revoked"), (5, "revoked")]
        );
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_its_buffer_ends_and_comes_back_for_the_rest() {
        let events = Events::new(64, 2);
        let (replay, receiver) = events.subscribe(None);
        for i in 0..5 {
            events.publish("revoked", json!({ "session": i }));
        }
        // Never read while five events came: it ends at once, having sent nothing, rather
        // than holding them all.
        let sent: Vec<u64> = feed(replay, receiver).map(|r| r.id).collect().await;
        assert!(sent.is_empty(), "{sent:?}");
        let (again, _) = events.subscribe(Some(0));
        assert_eq!(again.len(), 5, "the journal still has them");
    }

    #[test]
    fn events_no_stream_took_are_sent_to_the_first_stream_without_an_id_once() {
        let events = Events::new(8, 8);
        events.publish("revoked", json!({ "session": "a" }));
        let (first, _open) = events.subscribe(None);
        assert_eq!(ids(&first), [(1, "revoked")]);
        events.publish("revoked", json!({ "session": "b" }));
        let (second, _) = events.subscribe(None);
        assert!(second.is_empty(), "{:?}", ids(&second));
    }
}
