//! What a game server resolves and what it gets back: the [`ConnectRequest`] and
//! [`JoinRequest`] a client's message becomes, and the [`Identity`] they resolve to.
//!
//! Plain data: the requests hold the token as the client sent it, and their `Debug` shows only
//! whether one is there. Checking and resolving them is the resolver's business.

use std::fmt;
use std::sync::Arc;

use crate::user::{Resolution, User};

/// What a client sends on connect.
///
/// A plain struct: write `ConnectRequest { access_token, ..Default::default() }`.
#[derive(Clone, Default)]
pub struct ConnectRequest {
    /// The access token the client holds (`GameNetwork.authorizationAccessToken`), if any.
    pub access_token: Option<String>,
}

/// What a client sends on joining a room.
///
/// A plain struct: write `JoinRequest { room_id, auth_url, access_token, ..Default::default() }`.
#[derive(Clone, Default)]
pub struct JoinRequest {
    /// The room being joined; the resolution's span (`resolve`, at DEBUG) names it as `room`
    /// (its first 64 bytes).
    pub room_id: String,
    /// The room's authUrl as the client sent it (`RoomJoinArgs.authUrl`); empty when the room
    /// has none, which means the default authUrl.
    pub auth_url: String,
    /// The access token the client holds, if any.
    pub access_token: Option<String>,
}

/// Shows whether a token is present, never the token.
fn redacted(token: &Option<String>) -> Option<&'static str> {
    token.as_ref().map(|_| "[redacted]")
}

impl fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectRequest")
            .field("access_token", &redacted(&self.access_token))
            .finish()
    }
}

impl fmt::Debug for JoinRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinRequest")
            .field("room_id", &self.room_id)
            .field("auth_url", &self.auth_url)
            .field("access_token", &redacted(&self.access_token))
            .finish()
    }
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

impl From<Option<Resolution>> for Identity {
    /// The identity a resolution in full stands for: `None` (auth switched off) is
    /// [`Identity::Anonymous`].
    fn from(resolution: Option<Resolution>) -> Identity {
        resolution.map_or(Identity::Anonymous, |r| {
            Identity::Authenticated(r.into_user())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_debug_hides_the_token() {
        let join = JoinRequest {
            room_id: "r1".into(),
            access_token: Some("SECRET".into()),
            ..Default::default()
        };
        let connect = ConnectRequest {
            access_token: Some("SECRET".into()),
        };
        for shown in [format!("{join:?}"), format!("{connect:?}")] {
            assert!(
                !shown.contains("SECRET") && shown.contains("[redacted]"),
                "{shown}"
            );
        }
    }
}
