//! What a resolution yields: the [`User`] the auth API vouched for, and the [`Identity`] a
//! connect or join handler acts on.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

/// A user as the integrator's `/api/user` answered, validated: `id` was a JSON integer that fits
/// `i64`, `name` a JSON string.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct User {
    /// The user's id in the integrator's system.
    pub id: i64,
    /// The user's display name.
    pub name: String,
    /// Any further top-level fields of the answer, kept as they came (e.g. roles or a level).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// `true` when this answer expired and was served only because the auth API was
    /// unavailable (see `ResolverBuilder::serve_stale_for`). Never set otherwise.
    #[serde(skip_serializing_if = "is_false")]
    pub stale: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// Who is behind a connect or a join.
#[derive(Debug, Clone, PartialEq)]
pub enum Identity {
    /// The auth API vouched for this user.
    Authenticated(Arc<User>),
    /// Auth is switched off (`auth_required(false)`): no token was checked.
    Anonymous,
}

impl Identity {
    /// The user, when authenticated.
    pub fn user(&self) -> Option<&Arc<User>> {
        match self {
            Identity::Authenticated(user) => Some(user),
            Identity::Anonymous => None,
        }
    }
}
