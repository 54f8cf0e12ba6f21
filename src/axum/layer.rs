//! [`AuthLayer`]: a tower layer that resolves a request's bearer token before the service it
//! wraps ([`AuthService`]) sees the request, and refuses the request when that fails.
//!
//! It owns when the resolution happens and where its result goes (the request's extensions);
//! reading the header is `header`'s, the answer to a refusal `rejection`'s.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::axum::http::Request;
use ::axum::response::{IntoResponse, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::rejection::AuthRejection;
use crate::resolver::Resolver;

/// A tower [`Layer`] that authenticates every request before the inner service runs.
///
/// It resolves the `Authorization: Bearer <token>` header with the resolver's default authUrl,
/// or the one given to [`auth_url`](Self::auth_url), and puts the resulting
/// [`Identity`](crate::Identity) in the request's extensions, where the
/// [`Authenticated`](super::Authenticated) and [`AuthIdentity`](super::AuthIdentity)
/// extractors (or axum's `Extension<Identity>`) find it without resolving again. A request
/// whose token does not resolve is answered with its [`AuthRejection`] and never reaches the
/// inner service. With `auth_required(false)` every request passes as
/// [`Identity::Anonymous`](crate::Identity::Anonymous).
///
/// Cheap to clone (a [`Resolver`] is an `Arc` inside). With axum, `Router::route_layer` puts it
/// on the routes only, so that a path with no route still answers 404 rather than 401.
///
/// # Example
///
/// ```no_run
/// use axum::{routing::get, Extension, Router};
/// use token_resolver::axum::AuthLayer;
/// use token_resolver::{Identity, Resolver};
///
/// async fn stats(Extension(identity): Extension<Identity>) -> String {
///     format!("{:?}", identity.user().map(|user| user.id))
/// }
///
/// # fn app(resolver: Resolver) -> Router {
/// // The rooms of another title, served by another allowed auth API.
/// Router::new()
///     .route("/rooms/stats", get(stats))
///     .route_layer(AuthLayer::new(resolver).auth_url("https://auth.other-title.example"))
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct AuthLayer {
    /// Resolves the tokens; its cache and slot limit are the game server's too.
    resolver: Resolver,
    /// The authUrl to resolve at; `None`: the resolver's default.
    auth_url: Option<Arc<str>>,
}

impl AuthLayer {
    /// A layer resolving with `resolver`'s default authUrl.
    pub fn new(resolver: Resolver) -> Self {
        AuthLayer {
            resolver,
            auth_url: None,
        }
    }

    /// Resolves at `url` instead of the default authUrl: for routes of a title whose players
    /// log in at another auth API. Default: the resolver's `default_auth_url`.
    ///
    /// `url` must be allowed by the resolver (its default, or an `allow_auth_url`); if it is
    /// not, every request is refused with `auth_url_not_allowed` (403), and nothing is sent to
    /// it.
    pub fn auth_url(self, url: impl AsRef<str>) -> Self {
        AuthLayer {
            auth_url: Some(Arc::from(url.as_ref())),
            ..self
        }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`AuthLayer`] wraps around `S`: resolves, then calls `S` with the
/// [`Identity`](crate::Identity) in the request's extensions, or answers the
/// [`AuthRejection`].
#[derive(Debug, Clone)]
pub struct AuthService<S> {
    /// The service that gets the authenticated requests.
    inner: S,
    /// The resolver and the authUrl.
    layer: AuthLayer,
}

/// The future of [`AuthService`]: the resolution, then the inner service's answer.
pub type AuthFuture<E> = Pin<Box<dyn Future<Output = Result<Response, E>> + Send + 'static>>;

impl<S, B> Service<Request<B>> for AuthService<S>
where
    S: Service<Request<B>, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = AuthFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> AuthFuture<S::Error> {
        // The clone is for the next request; this one goes to the service that was polled ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let AuthLayer { resolver, auth_url } = self.layer.clone();
        Box::pin(async move {
            let resolved = resolver
                .resolve_bearer(auth_url.as_deref(), request.headers())
                .await;
            match resolved {
                Ok(identity) => {
                    request.extensions_mut().insert(identity);
                    inner.call(request).await
                }
                Err(error) => Ok(AuthRejection::from(error).into_response()),
            }
        })
    }
}
