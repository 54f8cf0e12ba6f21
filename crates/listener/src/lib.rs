//! What every server of the token-resolver products shares, so that each listens the same way:
//!
//! - [`task`]: [`ServerTask`], a server in a tokio task with a bounded graceful stop, the
//!   [`Stopped`] signal its accept loop watches, and [`accept`], which does not spin;
//! - [`http`]: the one bounded accept loop of every HTTP listener, [`http::serve_with`] (caps
//!   on connections, a head deadline from accept, HTTP/1.1, HTTP/2 or both, TLS through a
//!   [`http::Transport`], a graceful stop), and an axum router on it within [`HttpLimits`];
//! - [`budget`]: [`Budget`], how often each caller (an address, a device id) did something
//!   lately, each at most a budget per window;
//! - [`caps`]: [`PerAddress`], connections counted per client address for a cap on each, and
//!   [`TurnAway`], the quick 503 a connection past a cap is answered, each counted in
//!   [`caps::TURNED_AWAY_TOTAL`] (refused, or shed unanswered; at the [`Cap`] in all or per
//!   address);
//! - [`forwarded`]: [`TrustedProxies`], the client's address behind the reverse proxies an
//!   operator names, and the TCP peer otherwise;
//! - [`secret`]: [`AdminSecret`], the bearer secret of the admin endpoints.
//!
//! The reference integrator API, the game server's admin and WebSocket listeners and the
//! sidecar's HTTP and gRPC listeners are built on it. It knows nothing of tokens or users.
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod budget;
pub mod caps;
pub mod forwarded;
pub mod http;
pub mod secret;
pub mod task;

pub use budget::Budget;
pub use caps::{address_key, AddressSlot, Cap, PerAddress, TurnAway};
pub use forwarded::{TrustedProxies, TrustedProxyError};
pub use http::{Bounds, HttpLimits, Protocols};
pub use secret::{AdminSecret, AdminSecretError};
pub use task::{accept, ServerTask, Stopped};
