//! Revoking from a node: [`close_then_invalidate`] closes the sessions here that a revocation
//! names, then invalidates it through the resolver, so that the caches here, in the shared tier
//! and on every other node drop the answers, and the other nodes close their sessions too (their
//! revocation followers apply it). `POST /admin/revoke` is built on it, for the game server and
//! the sidecar alike.

use std::time::{Duration, SystemTime};

use crate::node::AdminNode;
use token_resolver::{Delivery, Endpoint, PlainHttp, ResolveError, Revocation, Revoke};

/// What [`close_then_invalidate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoked {
    /// How many sessions on this node the revocation closed at once (told `revoked`).
    pub sessions_closed: usize,
    /// How far the invalidation got beyond this node: [`Delivery::Pending`] when the shared
    /// tier did not take it within the time given, so that other nodes do not know yet.
    pub delivery: Delivery,
}

/// Closes the sessions of `node` that `what` names (sparing those resolved well after
/// `made_at`, as [`Registry::revoke_dated`](crate::Registry::revoke_dated) does), then revokes
/// it through the node's resolver ([`Resolver::revoke`](token_resolver::Resolver::revoke)),
/// waiting at most `within` for the shared tier to take it. The sessions here come first, so
/// that the count is of what this call closed.
///
/// # Errors
///
/// The resolver's refusal: an authUrl it does not serve (neither its default nor an allowed
/// one), which closes nothing here either.
pub async fn close_then_invalidate(
    node: &dyn AdminNode,
    what: Revoke,
    made_at: SystemTime,
    within: Duration,
) -> Result<Revoked, ResolveError> {
    let resolver = node.resolver();
    let sessions_closed = match as_sessions_see_it(node, &what) {
        Some(revocation) => (node.registry()).revoke_dated(&resolver.dated(revocation, made_at)),
        None => 0,
    };
    let delivery = resolver.revoke(what, made_at, within).await?;
    Ok(Revoked {
        sessions_closed,
        delivery,
    })
}

/// The [`Revocation`] that names what `what` revokes among this node's sessions (by normalised
/// endpoint and token fingerprint); `None` when it can name none: an authUrl that is not one,
/// or an empty one on a node without a default.
fn as_sessions_see_it(node: &dyn AdminNode, what: &Revoke) -> Option<Revocation> {
    let resolver = node.resolver();
    let endpoint = |auth_url: &str| -> Option<String> {
        let endpoint = if auth_url.is_empty() {
            resolver.default_endpoint().cloned()
        } else {
            Endpoint::parse(auth_url, PlainHttp::Anywhere).ok()
        };
        endpoint.map(|e| e.as_str().to_owned())
    };
    Some(match what {
        Revoke::Token {
            auth_url,
            access_token,
        } => {
            let endpoint = endpoint(auth_url)?;
            let token = resolver.fingerprint(&endpoint, access_token.secret())?;
            Revocation::Token { endpoint, token }
        }
        Revoke::User { auth_url, user_id } => Revocation::User {
            endpoint: endpoint(auth_url)?,
            user_id: *user_id,
        },
        Revoke::Session {
            auth_url,
            user_id,
            session,
        } => Revocation::Session {
            endpoint: endpoint(auth_url)?,
            user_id: *user_id,
            session: session.clone(),
        },
        Revoke::All => Revocation::All,
        // A kind this crate does not know yet: the revocation followers apply it.
        _ => return None,
    })
}
