//! What a reference API serves: its users ([`ApiUser`], [`demo_users`], a users file) and the
//! token lifetime ([`ApiConfig`]), checked before anything is hashed ([`ApiConfigError`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

#[cfg(doc)]
use super::ReferenceApi;

/// One user of the reference API, as given in a users file or by [`demo_users`].
///
/// `Debug` prints the password as `[redacted]`.
#[derive(Clone, Deserialize)]
pub struct ApiUser {
    /// The `id` that `/api/user` answers.
    pub id: i64,
    /// The `name` that `/api/user` answers.
    pub name: String,
    /// The login name for `POST /api/login`.
    pub username: String,
    /// The clear password; [`ReferenceApi::new`] keeps only its argon2 hash.
    pub password: String,
}

impl fmt::Debug for ApiUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiUser")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("username", &self.username)
            .field("password", &"[redacted]")
            .finish()
    }
}

/// The seeded demo users: `alice` / `wonderland` (id 1, "Alice"), `bob` / `builder` (id 2,
/// "Bob") and `carol` / `carolina` (id 3, "Carol").
pub fn demo_users() -> Vec<ApiUser> {
    [
        (1, "Alice", "alice", "wonderland"),
        (2, "Bob", "bob", "builder"),
        (3, "Carol", "carol", "carolina"),
    ]
    .into_iter()
    .map(|(id, name, username, password)| ApiUser {
        id,
        name: name.to_owned(),
        username: username.to_owned(),
        password: password.to_owned(),
    })
    .collect()
}

/// What a [`ReferenceApi`] serves.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The users who can log in with a password. Default: [`demo_users`].
    pub users: Vec<ApiUser>,
    /// How long an access token lives after `/api/access_token` issued it. Default: 3600 s.
    /// Zero makes every token expire at once (useful in tests).
    pub token_ttl: Duration,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            users: demo_users(),
            token_ttl: Duration::from_secs(3600),
        }
    }
}

impl ApiConfig {
    /// Reads the users from a JSON file holding a list of `{id, name, username, password}`.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::Read`] if the file cannot be read, [`ApiConfigError::Parse`] if it is
    /// not such a list, and the errors of [`ApiConfig::validate`].
    pub fn from_users_file(path: &Path, token_ttl: Duration) -> Result<Self, ApiConfigError> {
        let text = std::fs::read(path).map_err(|source| ApiConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let users = serde_json::from_slice(&text).map_err(|source| ApiConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let config = Self { users, token_ttl };
        config.validate()?;
        Ok(config)
    }

    /// Checks that ids and usernames are unique and that no username or password is empty.
    ///
    /// # Errors
    ///
    /// [`ApiConfigError::DuplicateId`], [`ApiConfigError::DuplicateUsername`],
    /// [`ApiConfigError::EmptyUsername`] or [`ApiConfigError::EmptyPassword`], for the first
    /// user at fault.
    pub fn validate(&self) -> Result<(), ApiConfigError> {
        let mut ids = std::collections::HashSet::new();
        let mut usernames = std::collections::HashSet::new();
        for user in &self.users {
            if user.username.is_empty() {
                return Err(ApiConfigError::EmptyUsername { id: user.id });
            }
            if user.password.is_empty() {
                return Err(ApiConfigError::EmptyPassword { id: user.id });
            }
            if !ids.insert(user.id) {
                return Err(ApiConfigError::DuplicateId { id: user.id });
            }
            if !usernames.insert(user.username.as_str()) {
                return Err(ApiConfigError::DuplicateUsername {
                    username: user.username.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Why an [`ApiConfig`] cannot be loaded or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiConfigError {
    /// The users file could not be read: check the path and its permissions.
    #[error("cannot read the users file {}: {source}", path.display())]
    Read {
        /// The file named.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The users file is not a JSON list of `{id, name, username, password}`: fix the file.
    #[error(
        "the users file {} is not a JSON list of {{id, name, username, password}}: {source}",
        path.display()
    )]
    Parse {
        /// The file named.
        path: PathBuf,
        /// Where and how parsing failed.
        source: serde_json::Error,
    },
    /// Two users share an id: ids must be unique.
    #[error("two users have the id {id}; ids must be unique")]
    DuplicateId {
        /// The id given twice.
        id: i64,
    },
    /// Two users share a username: usernames must be unique.
    #[error("two users have the username {username:?}; usernames must be unique")]
    DuplicateUsername {
        /// The username given twice.
        username: String,
    },
    /// A user has an empty username: give every user one.
    #[error("user {id} has an empty username")]
    EmptyUsername {
        /// The user's id.
        id: i64,
    },
    /// A user has an empty password: give every user one.
    #[error("user {id} has an empty password")]
    EmptyPassword {
        /// The user's id.
        id: i64,
    },
    /// argon2 refused to hash a password (for instance one of several GiB).
    #[error("cannot hash the password of user {id}: {message}")]
    Hash {
        /// The user's id.
        id: i64,
        /// What argon2 said.
        message: String,
    },
}
