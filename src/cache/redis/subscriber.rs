//! The reader: one task per resolver that reads the revocation stream (`<prefix>revocations`, a
//! Redis Stream) from where this node left off and applies every other node's revocations to
//! the local tier.
//!
//! A stream rather than pub/sub, so that a node that was cut off catches up on exactly what it
//! missed: it reads again from the last entry it applied, having started where Redis's clock
//! (`TIME`) says, never its own. Only when the stream is not the continuation of what it read
//! (it keeps [`RedisTier::stream_len`](super::RedisTier::stream_len) revocations; Redis lost
//! entries in a failover, which an entry's `p`, the id of the entry before it, shows; the
//! stream is gone) or the tier's generation went back does the node empty its cache and tell
//! its subscribers to re-check what they hold ([`Revocation::Recheck`]). The generation only
//! moves forward on a node.
//!
//! Every message's MAC is checked (in constant time) before it is read: a forged one, or an
//! authentic one told again long after it was made, is dropped with a warning and counted.
//!
//! The reads block for [`BLOCK`] at most, so an idle stream still answers every [`BLOCK`]: a
//! read that gets no answer within [`SILENCE`] means the connection is gone without a word (a
//! half-open link: a crashed host, a dropped NAT entry), and the reader connects again and
//! catches up. On a cluster the stream lives on the master that owns its slot; the reader has a
//! connection of its own, which follows the slot through failovers.
//!
//! Each read's revocations (up to [`BATCH`]) are applied first, each dropping what it names
//! and entering the revocation log at once, and then told to the subscribers together, which
//! wakes a subscriber once per read rather than once per revocation. What a revocation costs
//! here does not grow with the cache (`cargo bench --bench remote_invalidation --features
//! redis`): a token is found through the index by its fingerprint, with no MAC computed, and
//! the reply is taken apart as it came. The one MAC a message costs is its own, checked once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, UNIX_EPOCH};

use redis::streams::StreamRangeReply;
use redis::RedisResult;

use super::conn::Conn;
use super::connect::READ_RESPONSE_TIMEOUT;
use super::invalidation::{Message, Revoked};
use super::{Core, SharedCache};
use crate::auth_url::{Endpoint, PlainHttp};
use crate::cache::local::Local;
use crate::cache::Revocation;
use crate::telemetry;

/// How long one read of the stream waits for a revocation before it answers empty.
pub(super) const BLOCK: Duration = Duration::from_secs(1);

/// How long a read may go unanswered before the connection counts as lost.
const SILENCE: Duration = Duration::from_secs(3);

/// Longest pause between attempts to read the stream again after losing it.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// Entries taken per read.
const BATCH: usize = 256;

/// Where the first read starts, before this node's start: revocations made while it was
/// starting are applied, whatever the clocks of the node and of Redis say.
const START_SLACK: Duration = Duration::from_secs(5);

/// How far the time a revocation was made and the time it was told (its entry's id, by Redis's
/// clock) may differ, beyond the time a revocation insists while Redis is away, before an
/// authentic message counts as told again by someone: the clocks of nodes and Redis.
const REPLAY_SLACK: Duration = Duration::from_secs(60);

/// A position in the stream: an entry's id (`<ms>-<seq>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Position(pub(super) u64, pub(super) u64);

impl Position {
    fn parse(id: &str) -> Option<Position> {
        let (ms, seq) = id.split_once('-')?;
        Some(Position(ms.parse().ok()?, seq.parse().ok()?))
    }

    fn parse_bytes(id: &[u8]) -> Option<Position> {
        Position::parse(std::str::from_utf8(id).ok()?)
    }

    fn id(self) -> String {
        format!("{}-{}", self.0, self.1)
    }
}

/// Why a reading session ended.
enum Ended {
    /// The resolver is gone: stop.
    Gone,
    /// The connection failed or fell silent: connect again.
    Lost(String),
}

/// Clears the reader's flags when its task ends, however it ends.
struct ReaderGone {
    trusted: Arc<std::sync::atomic::AtomicBool>,
    subscribed: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for ReaderGone {
    fn drop(&mut self) {
        self.trusted.store(false, Ordering::Release);
        self.subscribed.store(false, Ordering::Release);
    }
}

impl SharedCache {
    /// Whether the reader is caught up and its connection answers now.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Acquire)
    }

    /// Whether this node hears every revocation, as far as it knows: the flag the hit path
    /// reads. `true` until the reader first loses the stream or fails to reach it (within
    /// [`SILENCE`] of it), and again once a read has taken everything there was.
    pub(crate) fn trusted_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.trusted.clone()
    }

    /// Starts, once, the task that applies other nodes' revocations to `local`.
    pub(crate) fn start_subscriber(&self, local: Weak<Local>) {
        if self.subscriber.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let _ = self.runtime.set(runtime.clone());
        let reader = Reader {
            backend: self.backend.clone(),
            core: self.core.clone(),
            subscribed: self.subscribed.clone(),
            trusted: self.trusted.clone(),
            health: self.health.clone(),
            local,
            last: Position(0, 0),
            placed: false,
            redis_ahead_ms: 0,
            read_any: false,
            read_all: false,
            endpoints: Endpoints::default(),
            seen: Seen::default(),
            me: self.core.node_id(),
        };
        let _ = self.subscriber.set(runtime.spawn(reader.run()));
    }
}

/// The reading task's state.
struct Reader {
    backend: Arc<super::connect::Backend>,
    core: Arc<Core>,
    subscribed: Arc<std::sync::atomic::AtomicBool>,
    /// See [`SharedCache::trusted_flag`].
    trusted: Arc<std::sync::atomic::AtomicBool>,
    /// Where a lost stream is counted (`op` = `subscribe`), as the tier's other failures.
    health: Arc<super::Health>,
    local: Weak<Local>,
    /// The last entry applied (or, before the first read, where reading starts).
    last: Position,
    /// Whether `last` was set: where reading starts, by Redis's clock, before the first read.
    placed: bool,
    /// How far Redis's clock is ahead of this node's (ms; behind when negative), as measured
    /// when the reader last connected: entry ids are Redis's clock, messages' times the nodes'.
    redis_ahead_ms: i64,
    /// Whether the last read took everything there was (less than a full batch).
    read_all: bool,
    /// Whether `last` is an entry this reader read (rather than where it started).
    read_any: bool,
    /// The endpoints revocations named lately, parsed.
    endpoints: Endpoints,
    /// The messages applied lately.
    seen: Seen,
    /// This node's id as its messages carry it: the reader skips those.
    me: String,
}

/// The endpoints revocations name, parsed once: a node serves a handful, and parsing a URL
/// for every revocation would cost more than applying it.
#[derive(Default)]
struct Endpoints(HashMap<String, Option<Endpoint>>);

impl Endpoints {
    /// Most endpoints kept; past it, the map starts again (revocations naming many endpoints
    /// cost a parse each, and no memory).
    const KEPT: usize = 64;

    /// `endpoint` parsed, `None` when it is no usable endpoint.
    fn get(&mut self, endpoint: &str) -> Option<&Endpoint> {
        if !self.0.contains_key(endpoint) {
            if self.0.len() >= Self::KEPT {
                self.0.clear();
            }
            let parsed = Endpoint::parse(endpoint, PlainHttp::Anywhere).ok();
            self.0.insert(endpoint.to_owned(), parsed);
        }
        self.0.get(endpoint).and_then(Option::as_ref)
    }
}

/// The messages applied lately, by the first 64 bits of their MAC, with when each was made: an
/// authentic message told again within the replay window (a retry whose first try got through
/// after all, or someone's copy) is applied once. Bounded: what is older than the window is
/// forgotten whenever the map doubles.
struct Seen {
    made: HashMap<u64, u64>,
    /// The size at which the next pruning happens.
    prune_at: usize,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            made: HashMap::new(),
            prune_at: Seen::FLOOR,
        }
    }
}

impl Seen {
    /// Messages kept before the first pruning.
    const FLOOR: usize = 1024;

    /// Whether the message whose MAC (hex) is `mac` is new; remembers it as made at
    /// `made_at_ms`, and forgets, now and then, those made more than `window_ms` before `now_ms`.
    fn first(&mut self, mac: &[u8], made_at_ms: u64, now_ms: u64, window_ms: u64) -> bool {
        let id = mac
            .get(..16)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .unwrap_or_default();
        if self.made.len() >= self.prune_at {
            self.made
                .retain(|_, made| made.saturating_add(window_ms) >= now_ms);
            self.prune_at = (self.made.len() * 2).max(Seen::FLOOR);
        }
        self.made.insert(id, made_at_ms).is_none()
    }
}

impl Reader {
    async fn run(mut self) {
        // However the task ends, a panic included, the node no longer hears revocations: it
        // must stop trusting its cache rather than keep the flags of a reader that is gone.
        let _ended = ReaderGone {
            trusted: self.trusted.clone(),
            subscribed: self.subscribed.clone(),
        };
        let mut delay = Duration::from_millis(50);
        loop {
            match self.session().await {
                Ended::Gone => return,
                Ended::Lost(detail) => {
                    self.trusted.store(false, Ordering::Release);
                    self.health.failed("subscribe", &detail);
                    if self.subscribed.swap(false, Ordering::AcqRel) {
                        metrics::counter!(telemetry::SHARED_CACHE_CHANNEL_LOSSES_TOTAL)
                            .increment(1);
                        tracing::warn!(
                            detail,
                            "lost the shared cache's revocation stream; reading it again"
                        );
                    } else {
                        tracing::debug!(detail, "cannot read the revocation stream yet");
                    }
                    self.backend.lost(None);
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RECONNECT_DELAY);
                }
            }
            if self.subscribed.load(Ordering::Acquire) {
                delay = Duration::from_millis(50);
            }
        }
    }

    /// One connection's life: connect, catch up, then read until the connection fails, falls
    /// silent, or the resolver is gone.
    async fn session(&mut self) -> Ended {
        let connected = tokio::time::timeout(SILENCE, self.backend.reader(READ_RESPONSE_TIMEOUT));
        let mut conn = match connected.await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Ended::Lost(super::error::describe(&e)),
            Err(_) => return Ended::Lost("no connection".to_owned()),
        };
        match tokio::time::timeout(SILENCE, self.catch_up(&mut conn)).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Ended::Gone,
            Ok(Err(e)) => return Ended::Lost(super::error::describe(&e)),
            Err(_) => return Ended::Lost("silent while catching up".to_owned()),
        }
        loop {
            let read = tokio::time::timeout(SILENCE, self.read(&mut conn)).await;
            match read {
                // Caught up once a read returns less than a full batch: until then this node
                // may hold what another revoked, and its cache admits nobody (`Tiers`).
                Ok(Ok(true)) if self.read_all => {
                    self.subscribed.store(true, Ordering::Release);
                    self.trusted.store(true, Ordering::Release);
                }
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return Ended::Gone,
                Ok(Err(e)) => return Ended::Lost(super::error::describe(&e)),
                Err(_) => return Ended::Lost(format!("no answer within {SILENCE:?}")),
            }
        }
    }

    /// Reads Redis's clock, and places the reader where it starts the first time (by Redis's
    /// clock: a node whose own clock is ahead would skip what is told meanwhile); reads the
    /// tier's generation, and empties the local tier if the stream no longer holds what came
    /// after the last entry applied or the generation went back; `false` when the resolver is
    /// gone.
    async fn catch_up(&mut self, conn: &mut Conn) -> RedisResult<bool> {
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
        // Saturating: a malformed reply must not overflow (a panic in a debug build).
        let redis_now = seconds.saturating_mul(1000).saturating_add(micros / 1000);
        let ahead = i128::from(redis_now) - i128::from(self.core.now_ms());
        // Within ±i64::MAX, so that its negation cannot overflow either.
        self.redis_ahead_ms = ahead.clamp(-i128::from(i64::MAX), i128::from(i64::MAX)) as i64;
        if !self.placed {
            self.last = Position(redis_now.saturating_sub(START_SLACK.as_millis() as u64), 0);
            self.placed = true;
        }
        if !self.generation(conn).await? {
            return Ok(false);
        }
        let gap = self.missed(conn).await?;
        if !gap {
            return Ok(true);
        }
        let Some(local) = self.local.upgrade() else {
            return Ok(false);
        };
        self.skip_to_newest(conn).await?;
        resync(
            &local,
            "revocations may have been missed while the stream was out of reach",
        );
        Ok(true)
    }

    /// Moves `last` to the stream's newest entry, if that is further: what a re-sync has
    /// covered.
    async fn skip_to_newest(&mut self, conn: &mut Conn) -> RedisResult<()> {
        let newest: StreamRangeReply = redis::cmd("XREVRANGE")
            .arg(self.core.keys.stream())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(conn)
            .await?;
        if let Some(newest) = newest.ids.first().and_then(|e| Position::parse(&e.id)) {
            if newest > self.last {
                self.last = newest;
                self.read_any = true;
            }
        }
        Ok(())
    }

    /// Reads the tier's generation from Redis. A newer one is taken; one older than this node
    /// knows means Redis lost an `INCR` (a failover) or someone wrote it back: the node keeps
    /// its own, raises Redis's again, and re-syncs, since what it missed is unknown. `false`
    /// when the resolver is gone.
    async fn generation(&mut self, conn: &mut Conn) -> RedisResult<bool> {
        let key = self.core.keys.generation();
        // What the node knew before asking: an `invalidate_all` of its own meanwhile moves
        // both, and must not pass for Redis going back.
        let known = self.core.generation.load(Ordering::Acquire);
        let stored: Option<u64> = redis::cmd("GET").arg(&key).query_async(conn).await?;
        let stored = stored.unwrap_or(0);
        if known == super::UNKNOWN {
            // Unless `load_generation` or an `invalidate_all` stored one meanwhile.
            let _ = self.core.generation.compare_exchange(
                super::UNKNOWN,
                stored,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return Ok(true);
        }
        if stored >= known {
            self.core.advance(stored);
            return Ok(true);
        }
        let Some(local) = self.local.upgrade() else {
            return Ok(false);
        };
        self.core
            .scripts
            .raise_generation(conn, &key, known)
            .await?;
        resync(
            &local,
            "the shared cache's generation went back (a failover lost it, or someone wrote it)",
        );
        Ok(true)
    }

    /// Whether the stream no longer holds every entry after the last one applied: it went
    /// back (its newest id is older than the last entry read: a failover lost entries), its
    /// oldest entry is newer and Redis trimmed entries off it (it has had more added than it
    /// holds), or lost it (gone, or made anew, since this reader read from it). A stream newer
    /// than where a reader that has read nothing starts, from which nothing was trimmed, misses
    /// nothing. Before Redis 7, which does not count what was added, an oldest entry newer than
    /// the last one applied counts as a gap.
    async fn missed(&self, conn: &mut Conn) -> RedisResult<bool> {
        let info: redis::Value = match redis::cmd("XINFO")
            .arg("STREAM")
            .arg(self.core.keys.stream())
            .query_async(conn)
            .await
        {
            Ok(info) => info,
            // No such key: nothing was ever told, or Redis lost it.
            Err(e) if e.code() == Some("ERR") => return Ok(self.read_any),
            Err(e) => return Err(e),
        };
        Ok(StreamInfo::read(info).missed(self.read_any, self.last))
    }

    /// One read: waits up to [`BLOCK`] for revocations after the last one applied, and applies
    /// those of other nodes that the tier's key authenticates; then checks the generation.
    /// An entry that does not follow the last one read (its `p` names another) means entries
    /// were lost (a failover, a stream made anew): the node re-syncs. `false` when the
    /// resolver is gone.
    async fn read(&mut self, conn: &mut Conn) -> RedisResult<bool> {
        let stream = self.core.keys.stream();
        let reply: redis::Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(BATCH)
            .arg("BLOCK")
            .arg(BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(&stream)
            .arg(self.last.id())
            .query_async(conn)
            .await?;
        let Some(local) = self.local.upgrade() else {
            return Ok(false);
        };
        let mut applied = Vec::new();
        let mut broken = false;
        let now = self.core.now_ms();
        let window = self.core.tombstone_ms() + REPLAY_SLACK.as_millis() as u64;
        let entries = stream_entries(reply);
        self.read_all = entries.len() < BATCH;
        for entry in entries {
            if let Some(position) = entry.position {
                let follows = entry.prev.as_deref().is_none_or(|prev| {
                    !self.read_any || Position::parse_bytes(prev) == Some(self.last)
                });
                broken |= !follows;
                self.last = position;
                self.read_any = true;
            }
            let Some(message) = entry.message else {
                tracing::warn!("ignoring a stream entry with no revocation");
                continue;
            };
            let mac = entry.mac.as_deref().unwrap_or_default();
            if !Message::authentic(&self.core.stream_mac, &stream, &message, mac) {
                metrics::counter!(telemetry::SHARED_FORGED_TOTAL, "what" => "message").increment(1);
                tracing::warn!(
                    "ignoring a revocation on the stream that the tier's secret does not \
                     authenticate"
                );
                continue;
            }
            let told = match Message::read(&message, &self.me) {
                Ok(Some(told)) => told,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(%e, "ignoring a malformed revocation on the stream");
                    continue;
                }
            };
            // Told when it was made, give or take the insisting of a revocation while Redis
            // was away and the nodes' clocks: an authentic message told again later is a
            // replay. When it was told is its id, Redis's clock, read as this node's. Counted,
            // but applied all the same: an id is anyone's to push ahead (one far-future entry
            // puts every later one after it), and dropping would silence real revocations. A
            // replay closes only what its own time names, and is applied once in the window.
            let told_at = entry.position.map_or(now, |p| {
                p.0.saturating_add_signed(self.redis_ahead_ms.saturating_neg())
            });
            if told_at.abs_diff(told.made_at_ms) > window {
                metrics::counter!(telemetry::SHARED_FORGED_TOTAL, "what" => "replayed_message")
                    .increment(1);
                tracing::warn!(
                    "applying a revocation told far from when it was made (a replay, or an \
                     entry id pushed ahead on the stream)"
                );
            }
            if !self.seen.first(mac, told.made_at_ms, now, window) {
                tracing::debug!("ignoring a revocation told twice (a retry, or a copy)");
                continue;
            }
            if let Revoked::All { generation } = told.what() {
                self.core.advance(*generation);
            }
            let at = told.what().endpoint().and_then(|e| self.endpoints.get(e));
            let made_at = Some(UNIX_EPOCH + Duration::from_millis(told.decided_at_ms));
            applied.extend(told.apply(at, &local, now).map(|r| (r, made_at)));
        }
        if !applied.is_empty() {
            local.tell(applied);
        }
        if broken {
            resync(
                &local,
                "the revocation stream does not go on from the last entry read (entries lost)",
            );
        }
        self.generation(conn).await
    }
}

/// Empties the local tier and tells the subscribers to re-check what they hold, saying `why`.
fn resync(local: &Local, why: &'static str) {
    metrics::counter!(telemetry::SHARED_CACHE_RESYNCS_TOTAL).increment(1);
    tracing::warn!(
        why,
        "revocations may have been missed: the local cache is emptied and sessions re-check \
         their tokens"
    );
    local.revoke_all(Revocation::Recheck);
}

/// One entry of an `XREAD` reply, its parts moved out of the reply.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Entry {
    /// Its id.
    pub(super) position: Option<Position>,
    /// Its message (field `m`).
    pub(super) message: Option<Vec<u8>>,
    /// Its message's MAC (field `s`), in hex.
    pub(super) mac: Option<Vec<u8>>,
    /// The id of the entry before it (field `p`).
    pub(super) prev: Option<Vec<u8>>,
}

/// The entries of an `XREAD` reply (of one stream), moved out of the reply as it came: a node
/// reads every revocation, and the redis crate's typed stream reply would copy each one and
/// build a map for it.
pub(super) fn stream_entries(reply: redis::Value) -> Vec<Entry> {
    use redis::Value;
    // RESP2: [[stream, entries], ..]; RESP3: {stream: entries, ..}.
    let streams: Vec<Value> = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|stream| match stream {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, entries)| entries).collect(),
        _ => Vec::new(),
    };
    let entries = streams.into_iter().flat_map(|entries| match entries {
        Value::Array(entries) => entries,
        _ => Vec::new(),
    });
    entries
        .map(|entry| {
            let Value::Array(entry) = entry else {
                return Entry::default();
            };
            let mut parts = entry.into_iter();
            let mut read = Entry {
                position: (parts.next().and_then(bytes)).and_then(|id| Position::parse_bytes(&id)),
                ..Entry::default()
            };
            for (name, value) in parts.next().map(pairs).unwrap_or_default() {
                let slot = match bytes(name).as_deref() {
                    Some(b"m") => &mut read.message,
                    Some(b"s") => &mut read.mac,
                    Some(b"p") => &mut read.prev,
                    _ => continue,
                };
                if slot.is_none() {
                    *slot = bytes(value);
                }
            }
            read
        })
        .collect()
}

/// A string reply's bytes, moved out.
fn bytes(value: redis::Value) -> Option<Vec<u8>> {
    match value {
        redis::Value::BulkString(bytes) => Some(bytes),
        redis::Value::SimpleString(text) => Some(text.into_bytes()),
        redis::Value::VerbatimString { text, .. } => Some(text.into_bytes()),
        _ => None,
    }
}

/// What [`Reader::missed`] reads of an `XINFO STREAM` answer, as RESP2 or RESP3 gives it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StreamInfo {
    /// `last-generated-id`: the newest id the stream ever gave.
    pub(super) newest: Option<Position>,
    /// `recorded-first-entry-id` (Redis 7), else the id of `first-entry`.
    pub(super) first: Option<Position>,
    /// `entries-added` (Redis 7): how many entries were ever added.
    pub(super) added: Option<u64>,
    /// `length`: how many it holds.
    pub(super) length: Option<u64>,
}

impl StreamInfo {
    /// Reads the fields it needs out of `info`; a field that is absent or not of its type is
    /// `None`.
    pub(super) fn read(info: redis::Value) -> StreamInfo {
        let fields = stream_info(info);
        let id = |name: &str| {
            let value = fields.iter().find(|(k, _)| k == name)?.1.clone();
            Position::parse(&redis::from_redis_value::<String>(value).ok()?)
        };
        let count = |name: &str| {
            let value = fields.iter().find(|(k, _)| k == name)?.1.clone();
            redis::from_redis_value::<u64>(value).ok()
        };
        StreamInfo {
            newest: id("last-generated-id"),
            first: id("recorded-first-entry-id").or_else(|| first_entry_id(&fields)),
            added: count("entries-added"),
            length: count("length"),
        }
    }

    /// Whether a reader that has read an entry (`read_any`) up to `last` missed entries: see
    /// [`Reader::missed`].
    pub(super) fn missed(&self, read_any: bool, last: Position) -> bool {
        if read_any && self.newest.is_some_and(|newest| newest < last) {
            return true;
        }
        let Some(first) = self.first else {
            return read_any;
        };
        if first <= last {
            return false;
        }
        match (self.added, self.length) {
            (Some(added), Some(length)) if added > length => true,
            (Some(_), Some(_)) => read_any,
            _ => true,
        }
    }
}

/// The fields of an `XINFO STREAM` answer (a flat list, or a map), by name.
fn stream_info(info: redis::Value) -> Vec<(String, redis::Value)> {
    pairs(info)
        .into_iter()
        .filter_map(|(k, v)| Some((redis::from_redis_value_ref(&k).ok()?, v)))
        .collect()
}

/// The field-value pairs of a reply, as RESP2 (a flat list) or RESP3 (a map) gives them,
/// moved out.
fn pairs(reply: redis::Value) -> Vec<(redis::Value, redis::Value)> {
    match reply {
        redis::Value::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::with_capacity(items.len() / 2);
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        redis::Value::Map(pairs) => pairs,
        _ => Vec::new(),
    }
}

/// The id of `XINFO STREAM`'s `first-entry`, for a Redis that does not record it apart.
fn first_entry_id(fields: &[(String, redis::Value)]) -> Option<Position> {
    let (_, redis::Value::Array(entry)) = fields.iter().find(|(k, _)| k == "first-entry")? else {
        return None;
    };
    Position::parse(&redis::from_redis_value_ref::<String>(entry.first()?).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_task_that_panics_leaves_its_node_untrusting() {
        let trusted = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let subscribed = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let guard = ReaderGone {
            trusted: trusted.clone(),
            subscribed: subscribed.clone(),
        };
        let task = tokio::spawn(async move {
            let _ended = guard;
            panic!("the reader fails");
        });
        assert!(task.await.is_err());
        assert!(!trusted.load(Ordering::Acquire), "no longer trusted");
        assert!(!subscribed.load(Ordering::Acquire), "no longer subscribed");
    }

    #[test]
    fn positions_order_as_the_stream_does() {
        let (a, b) = (
            Position::parse("1700-5").unwrap(),
            Position::parse("1701-0").unwrap(),
        );
        assert!(a < b);
        assert!(Position::parse("1700-6").unwrap() > a);
        assert_eq!(a.id(), "1700-5");
        assert_eq!(Position::parse("nope"), None);
    }

    /// An `XREAD` entry: its id and its fields.
    fn entry(id: &str, fields: &[(&str, &str)]) -> redis::Value {
        use redis::Value;
        let fields = fields.iter().flat_map(|(k, v)| {
            [
                Value::BulkString(k.as_bytes().to_vec()),
                Value::BulkString(v.as_bytes().to_vec()),
            ]
        });
        Value::Array(vec![
            Value::BulkString(id.as_bytes().to_vec()),
            Value::Array(fields.collect()),
        ])
    }

    #[test]
    fn stream_entries_are_read_from_either_protocols_reply_and_odd_ones_keep_their_place() {
        use redis::Value;
        let entries = || {
            Value::Array(vec![
                entry("1700-0", &[("m", "first")]),
                entry(
                    "1700-1",
                    &[("x", "y"), ("m", "second"), ("s", "mac"), ("p", "1700-0")],
                ),
                entry("1700-2", &[("x", "no message")]),
                entry("not-an-id", &[("m", "third")]),
                Value::Int(7),
            ])
        };
        let stream = || Value::BulkString(b"p:revocations".to_vec());
        let resp2 = Value::Array(vec![Value::Array(vec![stream(), entries()])]);
        let resp3 = Value::Map(vec![(stream(), entries())]);
        for reply in [resp2, resp3] {
            let read = stream_entries(reply);
            let positions: Vec<_> = read.iter().map(|e| e.position).collect();
            assert_eq!(
                positions,
                [
                    Position::parse("1700-0"),
                    Position::parse("1700-1"),
                    Position::parse("1700-2"),
                    None,
                    None
                ]
            );
            let messages: Vec<_> = read.iter().map(|e| e.message.clone()).collect();
            assert_eq!(
                messages,
                [
                    Some(b"first".to_vec()),
                    Some(b"second".to_vec()),
                    None,
                    Some(b"third".to_vec()),
                    None
                ]
            );
            assert_eq!(read[1].mac.as_deref(), Some(&b"mac"[..]));
            assert_eq!(read[1].prev.as_deref(), Some(&b"1700-0"[..]));
            assert_eq!(
                (read[0].mac.as_deref(), read[0].prev.as_deref()),
                (None, None)
            );
        }
        assert!(
            stream_entries(Value::Nil).is_empty(),
            "a read that timed out"
        );
    }

    #[test]
    fn a_message_is_applied_once_and_what_is_seen_stays_bounded() {
        let mut seen = Seen::default();
        let mac = |i: u64| format!("{i:016x}{}", "0".repeat(48));
        assert!(seen.first(mac(1).as_bytes(), 1_000, 1_000, 100));
        assert!(
            !seen.first(mac(1).as_bytes(), 1_000, 1_050, 100),
            "told twice"
        );
        for i in 2..10_000 {
            assert!(seen.first(mac(i).as_bytes(), 1_000 + i, 1_000 + i, 100));
            assert!(seen.made.len() <= 2 * Seen::FLOOR, "{}", seen.made.len());
        }
    }

    #[test]
    fn endpoints_are_parsed_once_and_kept_bounded() {
        let mut endpoints = Endpoints::default();
        let a = endpoints
            .get("https://a.example")
            .map(|e| e.as_str().to_owned());
        assert_eq!(a.as_deref(), Some("https://a.example/api/user"));
        assert!(endpoints.get("ftp://nope").is_none(), "no usable endpoint");
        for i in 0..Endpoints::KEPT * 2 {
            assert!(endpoints.get(&format!("https://n{i}.example")).is_some());
            assert!(endpoints.0.len() <= Endpoints::KEPT);
        }
    }
}
