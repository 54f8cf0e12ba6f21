//! What a server gives the admin listener and its revocation endpoint: [`AdminNode`], its
//! resolver, its registry of live sessions and what keeps it from taking players. The game
//! server and the sidecar each implement it; the listener and `POST /admin/revoke` see nothing
//! else of them.

use crate::registry::Registry;
use token_resolver::Resolver;

/// What an admin listener serves for: a server with a resolver and live sessions (the game
/// server, or the sidecar that keeps sessions for game servers in other languages).
pub trait AdminNode: Send + Sync + 'static {
    /// The resolver whose caches `POST /admin/revoke` invalidates.
    fn resolver(&self) -> &Resolver;
    /// The live sessions `POST /admin/revoke` ends.
    fn registry(&self) -> &Registry;
    /// What keeps the server from taking players now (`/readyz` names each); empty when
    /// ready. A Redis tier whose channel is not subscribed is added by the listener.
    fn not_ready(&self) -> Vec<&'static str>;
    /// Describes the server's own metrics and registers them at zero; called when an admin
    /// listener with a recorder starts, so that its first scrape has every series. None by
    /// default.
    fn register_metrics(&self) {}
}
