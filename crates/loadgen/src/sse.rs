//! A reader of a Server-Sent Events answer (the sidecar's `GET /v1/events`), as the game servers
//! in the demo, the tests and the benches read it: one event at a time, keep-alive comments
//! skipped.

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use serde_json::Value;

/// One event: its id, its name, its data as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// The `id:` field (empty when absent): the sidecar's is `<epoch>-<n>`.
    pub id: String,
    /// The `event:` field.
    pub event: String,
    /// The `data:` field, parsed.
    pub data: Value,
}

/// An event stream being read.
pub struct SseReader {
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
}

impl std::fmt::Debug for SseReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseReader")
            .field("buffered", &self.buffer.len())
            .finish_non_exhaustive()
    }
}

impl SseReader {
    /// Reads `response`'s body as events.
    pub fn new(response: reqwest::Response) -> SseReader {
        SseReader {
            body: response
                .bytes_stream()
                .map(|c| c.map(|b| b.to_vec()))
                .boxed(),
            buffer: String::new(),
        }
    }

    /// The next event; `None` when the stream ends or fails.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    (block.lines())
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_owned())
                };
                let Some(data) = field("data:").and_then(|d| serde_json::from_str(&d).ok()) else {
                    continue;
                };
                return Some(SseEvent {
                    id: field("id:").unwrap_or_default(),
                    event: field("event:").unwrap_or_default(),
                    data,
                });
            }
            let chunk = self.body.next().await?.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
