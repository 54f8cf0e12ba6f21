//! What every server of the token-resolver products shares, so that each listens the same way:
//!
//! - [`task`]: [`ServerTask`], a server in a tokio task with a bounded graceful stop, and the
//!   [`Stopped`] signal its accept loop watches;
//! - [`http`]: serving an axum router within [`HttpLimits`] (a connection cap, deadlines for a
//!   request's head and for the whole request);
//! - [`caps`]: [`PerAddress`], connections counted per client address for a cap on each, and
//!   [`TurnAway`], the quick 503 a connection past a cap is answered;
//! - [`secret`]: [`AdminSecret`], the bearer secret of the admin endpoints.
//!
//! The reference integrator API, the game server's admin and WebSocket listeners are built on
//! it. It knows nothing of tokens or users.
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod caps;
pub mod http;
pub mod secret;
pub mod task;

pub use caps::{AddressSlot, PerAddress, TurnAway};
pub use http::HttpLimits;
pub use secret::{AdminSecret, AdminSecretError};
pub use task::{ServerTask, Stopped};
