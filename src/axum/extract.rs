//! The extractors: [`Authenticated`], a verified user or a refusal, and [`AuthIdentity`], the
//! [`Identity`] of the request (`Anonymous` when auth is switched off).
//!
//! Both take the `Identity` that [`AuthLayer`](super::AuthLayer) or an earlier extractor put in
//! the request's extensions; otherwise they resolve the `Authorization` header's token with the
//! default authUrl of the [`Resolver`] in the router's state, and leave the `Identity` in the
//! extensions for the next one. Either way a request is resolved at most once.

use std::sync::Arc;

use ::axum::extract::{FromRef, FromRequestParts, OptionalFromRequestParts};
use ::axum::http::request::Parts;

use super::rejection::AuthRejection;
use crate::error::{ErrorCode, ResolveError};
use crate::resolver::{Identity, Resolver};
use crate::user::User;

/// Extracts the verified user of a request; refuses the request otherwise.
///
/// Reads `Authorization: Bearer <token>` (the scheme in any case) and resolves the token with
/// the default authUrl of the [`Resolver`] that the router's state gives through
/// [`FromRef`] (`Router::with_state(resolver)` will do), unless
/// [`AuthLayer`](super::AuthLayer) already did. A route that demands a user cannot have one
/// when the resolver is built with `auth_required(false)`: it is then refused with
/// `token_missing`; use [`AuthIdentity`] for routes that serve anonymous players too.
///
/// As `Option<Authenticated>` it is `None` where there is no bearer token (and when auth is
/// switched off), and still refuses a token that is malformed or rejected, or that cannot be
/// checked now.
///
/// # Errors
///
/// An [`AuthRejection`] answering with the error code's status: `token_missing` for no token
/// (or another scheme than `Bearer`), `token_malformed` for two `Authorization` headers, bytes
/// outside visible ASCII or a token that is not an RFC 6750 `b64token` of at most 4096 bytes,
/// `token_rejected` when the auth API said no, and the codes of an unreachable or broken auth
/// API.
///
/// # Example
///
/// ```no_run
/// use axum::{routing::get, Router};
/// use token_resolver::axum::Authenticated;
/// use token_resolver::Resolver;
///
/// async fn profile(Authenticated(user): Authenticated) -> String {
///     format!("{} ({})", user.name, user.id)
/// }
///
/// # fn app(resolver: Resolver) -> Router {
/// Router::new().route("/profile", get(profile)).with_state(resolver)
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Authenticated(pub Arc<User>);

/// Extracts the [`Identity`] of a request: the verified user, or
/// [`Identity::Anonymous`] when the resolver is built with `auth_required(false)` (then the
/// `Authorization` header is not looked at).
///
/// Resolves as [`Authenticated`] does, and refuses the same requests while auth is required.
///
/// # Errors
///
/// As [`Authenticated`], while auth is required; none when it is switched off.
#[derive(Debug, Clone)]
pub struct AuthIdentity(pub Identity);

impl<S> FromRequestParts<S> for AuthIdentity
where
    Resolver: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AuthRejection> {
        identity(parts, state)
            .await
            .map(AuthIdentity)
            .map_err(AuthRejection::from)
    }
}

impl<S> FromRequestParts<S> for Authenticated
where
    Resolver: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AuthRejection> {
        match identity(parts, state).await? {
            Identity::Authenticated(user) => Ok(Authenticated(user)),
            Identity::Anonymous => Err(ResolveError::TokenMissing.into()),
        }
    }
}

impl<S> OptionalFromRequestParts<S> for Authenticated
where
    Resolver: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> Result<Option<Self>, AuthRejection> {
        match identity(parts, state).await {
            Ok(Identity::Authenticated(user)) => Ok(Some(Authenticated(user))),
            Ok(Identity::Anonymous) => Ok(None),
            Err(error) if error.code() == ErrorCode::TokenMissing => Ok(None),
            Err(error) => Err(error.into()),
        }
    }
}

/// The request's `Identity`: the one in its extensions, or the header's token resolved with the
/// state's resolver and left in the extensions.
async fn identity<S>(parts: &mut Parts, state: &S) -> Result<Identity, ResolveError>
where
    Resolver: FromRef<S>,
{
    if let Some(identity) = parts.extensions.get::<Identity>() {
        return Ok(identity.clone());
    }
    let resolver = Resolver::from_ref(state);
    let identity = resolver.resolve_bearer(None, &parts.headers).await?;
    parts.extensions.insert(identity.clone());
    Ok(identity)
}
