//! The metric names this crate records through the `metrics` facade, and their labels.
//!
//! The embedding server installs a recorder (Prometheus, StatsD, ...); without one, recording
//! costs next to nothing. No label ever carries a token or a user name.

/// Counter, label `outcome`: `hit`, `miss` (answered by an upstream call this resolution made),
/// `coalesced` (answered by another resolution's call), or the error code of a failure.
pub const RESOLUTIONS_TOTAL: &str = "token_resolver_resolutions_total";

/// Counter, label `status`: the HTTP status of each upstream request, or `error` when none came.
pub const UPSTREAM_REQUESTS_TOTAL: &str = "token_resolver_upstream_requests_total";

/// Histogram: seconds from sending an upstream request to having its whole answer.
pub const UPSTREAM_DURATION_SECONDS: &str = "token_resolver_upstream_duration_seconds";

/// Gauge: upstream requests in flight now.
pub const UPSTREAM_IN_FLIGHT: &str = "token_resolver_upstream_in_flight";

/// Gauge: entries in the cache (users and rejections), updated as the cache changes.
pub const CACHE_ENTRIES: &str = "token_resolver_cache_entries";

/// Gauge, label `origin` (`scheme://host:port` of an auth API): 1 while its circuit breaker is
/// open and calls fail fast, 0 once it closes.
pub const CIRCUIT_OPEN: &str = "token_resolver_circuit_open";

/// Counter: resolutions that failed fast because their auth API's circuit breaker was open.
pub const CIRCUIT_REJECTIONS_TOTAL: &str = "token_resolver_circuit_rejections_total";

/// Counter: stale answers served because the auth API was unavailable (`serve_stale_for`).
pub const STALE_SERVED_TOTAL: &str = "token_resolver_stale_served_total";

/// Counter, label `op`: shared cache (Redis) operations that failed or timed out; the
/// resolution went on without Redis.
pub const SHARED_CACHE_ERRORS_TOTAL: &str = "token_resolver_shared_cache_errors_total";
