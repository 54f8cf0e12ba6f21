//! The reference API's reader of login bodies, for the fuzzers and their replay tests (hidden,
//! outside semver): a thin view over the API's own functions, used by nothing else. The
//! client address behind proxies is the listener crate's (`TrustedProxies`, public).

use std::fmt;

use axum::Json;

use crate::login::{Asked, LoginBody};

/// What a body of `POST /api/login` asks for.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// A password login.
    Password {
        /// `username`.
        username: String,
        /// `password`.
        password: String,
    },
    /// A guest login.
    Guest {
        /// `device_id`.
        device_id: String,
    },
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Login::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"[redacted]")
                .finish(),
            Login::Guest { .. } => f
                .debug_struct("Guest")
                .field("device_id", &"[redacted]")
                .finish(),
        }
    }
}

/// The body `bytes` of `POST /api/login` as the API reads it (with
/// `Content-Type: application/json`, within the size limit).
///
/// # Errors
///
/// The error code of the 400 the API answers with (`invalid_request`): a body that is not the
/// documented object, or that asks for neither kind of login.
pub fn login_body(bytes: &[u8]) -> Result<Login, &'static str> {
    let Json(body) = Json::<LoginBody>::from_bytes(bytes).map_err(|_| "invalid_request")?;
    match body.asks().ok_or("invalid_request")? {
        Asked::Password { username, password } => Ok(Login::Password { username, password }),
        Asked::Guest { device_id } => Ok(Login::Guest { device_id }),
    }
}
