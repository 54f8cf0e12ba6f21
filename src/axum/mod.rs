//! The axum/tower integration (feature `axum`): authenticate the requests of your own HTTP API
//! with the [`Resolver`](crate::Resolver) your game server already holds.
//!
//! A request carries `Authorization: Bearer <token>`; the token is resolved with the
//! resolver's default authUrl (or the one given to [`AuthLayer::auth_url`]), through the same
//! cache, coalescing and slot limit as the game server's connects and joins. Two ways in, to mix
//! as you like:
//!
//! - the extractors [`Authenticated`] (a verified user, or the request is refused) and
//!   [`AuthIdentity`] (the [`Identity`](crate::Identity), `Anonymous` when auth is switched
//!   off), which find the resolver in the router's state through `FromRef`;
//! - [`AuthLayer`], a tower layer that resolves before the inner service runs and puts the
//!   `Identity` in the request's extensions. The extractors take it from there instead of
//!   resolving again, so a route behind the layer costs one resolution per request.
//!
//! A refusal is an [`AuthRejection`]: the status, `WWW-Authenticate` and `Retry-After` headers
//! and JSON body of its error code (see its docs for the table). The token is read from the
//! `Authorization` header only, never from the URL's query, and no response or log line holds
//! it.
//!
//! # Layout
//!
//! - `header`: what the `Authorization` header gives: the bearer token, or why there is none.
//! - `extract`: the extractors [`Authenticated`] and [`AuthIdentity`].
//! - `layer`: [`AuthLayer`] and the [`AuthService`] it wraps a service in.
//! - `rejection`: [`AuthRejection`], from an error code to an HTTP answer.
//!
//! # Example
//!
//! ```no_run
//! use axum::extract::FromRef;
//! use axum::routing::{get, post};
//! use axum::{Json, Router};
//! use token_resolver::axum::{AuthIdentity, AuthLayer, Authenticated};
//! use token_resolver::{Identity, Resolver};
//!
//! #[derive(Clone)]
//! struct AppState {
//!     resolver: Resolver,
//! }
//!
//! impl FromRef<AppState> for Resolver {
//!     fn from_ref(state: &AppState) -> Resolver {
//!         state.resolver.clone()
//!     }
//! }
//!
//! // Resolved by the extractor: a request without a valid token never gets here.
//! async fn profile(Authenticated(user): Authenticated) -> String {
//!     format!("{} ({})", user.name, user.id)
//! }
//!
//! // Anonymous when the resolver is built with `auth_required(false)`.
//! async fn greeting(AuthIdentity(identity): AuthIdentity) -> String {
//!     match identity {
//!         Identity::Authenticated(user) => format!("hello {}", user.name),
//!         Identity::Anonymous => "hello".to_owned(),
//!     }
//! }
//!
//! // Behind the layer: resolved before the handler, taken from the request's extensions.
//! async fn submit(Authenticated(user): Authenticated, Json(score): Json<u64>) -> String {
//!     format!("{} scored {score}", user.id)
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let resolver = Resolver::builder()
//!     .default_auth_url("https://auth.example.com")
//!     .build()?;
//! let app = Router::new()
//!     .route("/scores", post(submit))
//!     .route_layer(AuthLayer::new(resolver.clone()))
//!     .route("/profile", get(profile))
//!     .route("/greeting", get(greeting))
//!     .with_state(AppState { resolver });
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod extract;
mod header;
mod layer;
mod rejection;

pub use self::extract::{AuthIdentity, Authenticated};
pub use self::header::bearer_token;
pub use self::layer::{AuthFuture, AuthLayer, AuthService};
pub use self::rejection::AuthRejection;
