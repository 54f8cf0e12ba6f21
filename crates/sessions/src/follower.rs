//! The revocation follower: the task that applies the resolver's revocations (made here or on
//! another node) to a [`Registry`] of live sessions, and [`follow`], the loop under it that
//! anything else fed by revocations (the sidecar's nginx grants) uses too.

use std::sync::Weak;

use tokio_util::sync::CancellationToken;

use crate::registry::Registry;
use token_resolver::{DatedRevocation, Revocation, RevocationFeed};

/// Applies `revocations` to the sessions in `registry` until the server is `cut` or gone; a lag
/// (revocations missed) makes every session check its tokens again. Given
/// [`Resolver::dated_revocations`](token_resolver::Resolver::dated_revocations), a revocation
/// that arrives late spares the sessions resolved well after it was made.
pub async fn listen<R>(
    revocations: RevocationFeed<R>,
    cut: CancellationToken,
    registry: Weak<Registry>,
) where
    R: Clone + From<Revocation> + Into<DatedRevocation>,
{
    follow(revocations, cut, registry, |registry, revocation: &R| {
        let kicked = registry.revoke_dated(&revocation.clone().into());
        if kicked > 0 {
            tracing::info!(kicked, "sessions revoked");
        }
    })
    .await;
}

/// Hands each of `revocations` ([`Revocation`]s, or [`DatedRevocation`]s) to `apply` with
/// `target` until `cut`, the end of the feed or `target`'s; a lag (revocations missed) comes
/// from the feed as [`Revocation::Recheck`], which assumes nothing of what was missed.
pub async fn follow<T: ?Sized, R: Clone + From<Revocation>>(
    mut revocations: RevocationFeed<R>,
    cut: CancellationToken,
    target: Weak<T>,
    apply: impl Fn(&T, &R),
) {
    loop {
        let received = tokio::select! {
            () = cut.cancelled() => return,
            received = revocations.recv() => received,
        };
        let (Some(target), Some(revocation)) = (target.upgrade(), received) else {
            return;
        };
        apply(&target, &revocation);
    }
}
