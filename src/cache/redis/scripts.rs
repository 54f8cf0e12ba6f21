//! The Lua scripts that make a write and a revocation atomic on the Redis side: a write never
//! lands under a tombstone, and a revocation leaves its tombstone in the same step that deletes.
//! Three more keep the stream and the generation honest: a message is added with the id of the
//! entry before it, and the generation only ever moves forward.
//!
//! Each script touches the keys of one hash tag only (a token's, or a user's), so each runs on
//! one node of a cluster. A user's write is two scripts, the user's then the token's, and a
//! revocation of a user two steps the other way round, so that every interleaving ends with
//! the entry gone or never written:
//!
//! - write: (1) under the user's tag, unless the user or the session is tombstoned, add the
//!   token to the user's index; (2) under the token's tag, unless the token is tombstoned,
//!   store the entry.
//! - revoke a user: (1) under the user's tag, tombstone the user and take the index;
//!   (2) under each indexed token's tag, tombstone the token and delete its entry.
//!
//! A write whose (1) came first is in the index that the revocation's (1) takes, and its (2)
//! either came before the revocation's (2), which deletes it, or after, which finds the token's
//! tombstone. A write whose (1) came after finds the user's tombstone.

use redis::{RedisResult, Script};

use super::conn::Conn;

/// The names a user's entry is written and revoked under, all under the user's hash tag.
#[derive(Debug, Clone)]
pub(super) struct UserKeys {
    /// The user's index: the digests of the user's tokens.
    pub(super) index: String,
    /// The user's tombstone.
    pub(super) tombstone: String,
    /// The tombstone of the answer's session, when the answer names one.
    pub(super) session: Option<String>,
}

/// The scripts, loaded once per node (`EVALSHA`, with `EVAL` when Redis does not have them).
pub(super) struct Scripts {
    join_index: Script,
    write: Script,
    revoke_token: Script,
    revoke_user: Script,
    revoke_session: Script,
    tell: Script,
    next_generation: Script,
    raise_generation: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            // KEYS: index, user tombstone[, session tombstone]; ARGV: digest, index TTL (ms).
            join_index: Script::new(
                r"
                for i = 2, #KEYS do
                    if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
                end
                redis.call('SADD', KEYS[1], ARGV[1])
                redis.call('PEXPIRE', KEYS[1], ARGV[2])
                return 1",
            ),
            // KEYS: entry, token tombstone; ARGV: value, TTL (ms).
            write: Script::new(
                r"
                if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
                redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
                return 1",
            ),
            // KEYS: entry, token tombstone; ARGV: tombstone TTL (ms).
            revoke_token: Script::new(
                r"
                redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
                return redis.call('DEL', KEYS[1])",
            ),
            // KEYS: index, user tombstone; ARGV: tombstone TTL (ms). The index's members.
            revoke_user: Script::new(
                r"
                redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
                local members = redis.call('SMEMBERS', KEYS[1])
                redis.call('DEL', KEYS[1])
                return members",
            ),
            // KEYS: index, session tombstone; ARGV: tombstone TTL (ms). The index's members.
            revoke_session: Script::new(
                r"
                redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
                return redis.call('SMEMBERS', KEYS[1])",
            ),
            // KEYS: stream; ARGV: length kept, message, its MAC. Adds the message with the id
            // of the entry before it (`0-0` on an empty stream), for readers to see a break.
            tell: Script::new(
                r"
                local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
                local prev = '0-0'
                if last[1] then prev = last[1][1] end
                return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
                    'm', ARGV[2], 's', ARGV[3], 'p', prev)",
            ),
            // KEYS: generation; ARGV: the generation the caller knows. One past the larger.
            next_generation: Script::new(
                r"
                local stored = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
                local known = tonumber(ARGV[1])
                if known > stored then stored = known end
                redis.call('SET', KEYS[1], stored + 1)
                return stored + 1",
            ),
            // KEYS: generation; ARGV: the generation the caller knows. Raises it to that.
            raise_generation: Script::new(
                r"
                local stored = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
                if tonumber(ARGV[1]) > stored then redis.call('SET', KEYS[1], ARGV[1]) end
                return 0",
            ),
        }
    }

    /// Adds the token `digest` to its user's index, unless the user or the session is
    /// tombstoned; whether it did.
    pub(super) async fn join_index(
        &self,
        conn: &mut Conn,
        user: &UserKeys,
        digest: &str,
        index_ttl_ms: u64,
    ) -> RedisResult<bool> {
        let mut invocation = self.join_index.key(&user.index);
        invocation.key(&user.tombstone);
        if let Some(session) = &user.session {
            invocation.key(session);
        }
        invocation.arg(digest).arg(index_ttl_ms);
        Ok(invocation.invoke_async::<i64>(conn).await? == 1)
    }

    /// Stores `value` under `key` for `ttl_ms`, unless `tombstone` lives; whether it did.
    pub(super) async fn write(
        &self,
        conn: &mut Conn,
        key: &str,
        tombstone: &str,
        value: &str,
        ttl_ms: u64,
    ) -> RedisResult<bool> {
        let mut invocation = self.write.key(key);
        invocation.key(tombstone).arg(value).arg(ttl_ms);
        Ok(invocation.invoke_async::<i64>(conn).await? == 1)
    }

    /// Tombstones a token for `ttl_ms` and deletes its entry.
    pub(super) async fn revoke_token(
        &self,
        conn: &mut Conn,
        key: &str,
        tombstone: &str,
        ttl_ms: u64,
    ) -> RedisResult<()> {
        let mut invocation = self.revoke_token.key(key);
        invocation.key(tombstone).arg(ttl_ms);
        invocation.invoke_async::<()>(conn).await
    }

    /// Tombstones a user for `ttl_ms` and takes its index: the digests of its tokens.
    pub(super) async fn revoke_user(
        &self,
        conn: &mut Conn,
        user: &UserKeys,
        ttl_ms: u64,
    ) -> RedisResult<Vec<String>> {
        let mut invocation = self.revoke_user.key(&user.index);
        invocation.key(&user.tombstone).arg(ttl_ms);
        invocation.invoke_async(conn).await
    }

    /// Tombstones a session for `ttl_ms`: the digests of its user's tokens, to look through.
    pub(super) async fn revoke_session(
        &self,
        conn: &mut Conn,
        index: &str,
        tombstone: &str,
        ttl_ms: u64,
    ) -> RedisResult<Vec<String>> {
        let mut invocation = self.revoke_session.key(index);
        invocation.key(tombstone).arg(ttl_ms);
        invocation.invoke_async(conn).await
    }

    /// Adds `message` and its `mac` to `stream`, keeping about `len` entries, with the id of the
    /// entry before it.
    pub(super) async fn tell(
        &self,
        conn: &mut Conn,
        stream: &str,
        len: u64,
        message: &str,
        mac: &str,
    ) -> RedisResult<()> {
        let mut invocation = self.tell.key(stream);
        invocation.arg(len).arg(message).arg(mac);
        invocation.invoke_async::<()>(conn).await
    }

    /// Moves the generation to one past the larger of Redis's and `known`; the new one.
    pub(super) async fn next_generation(
        &self,
        conn: &mut Conn,
        key: &str,
        known: u64,
    ) -> RedisResult<u64> {
        self.next_generation
            .key(key)
            .arg(known)
            .invoke_async(conn)
            .await
    }

    /// Raises the generation in Redis to `known`, where Redis has a lower one (it lost an
    /// `INCR` in a failover, or someone wrote it back).
    pub(super) async fn raise_generation(
        &self,
        conn: &mut Conn,
        key: &str,
        known: u64,
    ) -> RedisResult<()> {
        self.raise_generation
            .key(key)
            .arg(known)
            .invoke_async(conn)
            .await
    }
}
