//! What the game server records, and how a process exposes it: the `game_server_*` metric
//! names (the resolver's own are in [`token_resolver::telemetry`]) and [`Metrics`], the Prometheus
//! recorder behind the admin listener's `/metrics`.
//!
//! No label carries a token, a user name or a user id: labels are the transport, the request
//! type, an error code, or a refusal's reason, all from fixed sets.

/// [`REVOKED_TOTAL`] and the Prometheus recorder are the live sessions' and the admin
/// listener's, shared with the sidecar: re-exported here under their former paths.
pub use token_resolver_sessions::telemetry::{
    Metrics, MetricsError, LATENCY_BUCKETS, REVOKED_TOTAL,
};

/// Gauge, label `transport` (`tcp`, `ws`): sessions open now.
pub const SESSIONS_OPEN: &str = "game_server_sessions_open";
/// Counter, label `transport`: sessions accepted since start.
pub const SESSIONS_TOTAL: &str = "game_server_sessions_total";
/// Counter, label `reason` (`server_busy`: the node holds `max_connections`;
/// `too_many_connections`: the client's address holds `max_connections_per_address`):
/// connections refused before a session began.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "game_server_connections_refused_total";
/// Counter, label `type` (`connect`, `search_room`, `join`, `refresh`, `invalid`): messages
/// received.
pub const MESSAGES_TOTAL: &str = "game_server_messages_total";
/// Counter, label `code`: error messages sent (a refused request, or why a connection closed).
pub const ERRORS_TOTAL: &str = "game_server_errors_total";
/// Gauge: 1 while the server drains (it accepts no one and tells its clients to go), else 0.
pub const DRAINING: &str = "game_server_draining";

/// Describes the game server's metrics and registers them at zero: sessions per transport,
/// messages per type, connections refused for each of `refusals`, error messages for each of
/// `errors` (the codes a login flood or a full node brings), draining. Called when an admin
/// listener with a recorder starts; the codes are the protocol's, given by the caller, so that
/// the protocol's module, which counts with these names, is not also this one's dependency.
pub(crate) fn register(refusals: &[&'static str], errors: &[&'static str]) {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(SESSIONS_OPEN, "Sessions open now, by transport.");
    describe_counter!(
        SESSIONS_TOTAL,
        "Sessions accepted since start, by transport."
    );
    describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "Connections refused before a session began, by reason."
    );
    describe_counter!(MESSAGES_TOTAL, "Messages received, by type.");
    describe_counter!(ERRORS_TOTAL, "Error messages sent, by code.");
    describe_gauge!(DRAINING, "1 while the server drains, else 0.");
    for transport in ["tcp", "ws"] {
        let _ = metrics::gauge!(SESSIONS_OPEN, "transport" => transport);
        let _ = metrics::counter!(SESSIONS_TOTAL, "transport" => transport);
    }
    for kind in ["connect", "search_room", "join", "refresh", "invalid"] {
        let _ = metrics::counter!(MESSAGES_TOTAL, "type" => kind);
    }
    for &reason in refusals {
        let _ = metrics::counter!(CONNECTIONS_REFUSED_TOTAL, "reason" => reason);
    }
    for &code in errors {
        let _ = metrics::counter!(ERRORS_TOTAL, "code" => code);
    }
    let _ = metrics::gauge!(DRAINING);
}
