//! The player's side, modelled in Rust: what a game client holds and sends.
//!
//! - [`RoomInfo`] and its authUrl rule, and [`RoomJoinArgs`], what a client passes to join;
//! - [`IntegratorClient`], which logs in to the integrator's web API and takes the
//!   [`AccessToken`] the player sends on connect;
//! - [`protocol`]: the game protocol's messages, as the client and the game server
//!   (`token_resolver_game_server`) both read and write them, and its line framing;
//! - [`GameClient`], the client's end of that protocol over one TCP connection.
//!
//! Nothing here decides whether a user is who they claim to be: that is the game server's
//! resolver's job. This crate does not depend on the resolver.
//!
//! # Layout
//!
//! - this file: [`RoomInfo`], [`RoomJoinArgs`] and [`IntegratorClient`];
//! - `token`: [`AccessToken`] and the token rule;
//! - [`protocol`]: [`Request`](protocol::Request), [`ServerMessage`](protocol::ServerMessage),
//!   [`Player`] and [`read_line`](protocol::read_line);
//! - `game_client`: [`GameClient`].
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod game_client;
pub mod protocol;
mod token;

use std::fmt;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use self::game_client::{GameClient, GameClientError, Joined, Push};
pub use self::protocol::Player;
pub use self::token::{AccessToken, TokenError, MAX_TOKEN_BYTES};

/// The key of `node_properties` that carries a room's authUrl.
pub const AUTH_URL_PROPERTY: &str = "authUrl";

/// A room as the `SearchRoom` callback delivers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomInfo {
    /// Host of the room's server.
    pub host: String,
    /// Port of the room's server.
    pub port: u16,
    /// Protocol of the room's server, e.g. `"tcp"`.
    pub protocol: String,
    /// The room's identifier.
    pub room_id: String,
    /// Properties of the room's node; may be absent. Its `authUrl` key names the room's
    /// authentication URL.
    #[serde(default)]
    pub node_properties: Option<Map<String, Value>>,
}

impl RoomInfo {
    /// The room's authUrl by the client rule: when `node_properties` is present and has the key
    /// `authUrl`, that value's string form (a JSON string as it is, `null` as empty, anything
    /// else as its JSON text); otherwise the empty string.
    ///
    /// # Example
    ///
    /// ```
    /// use token_resolver_player::RoomInfo;
    ///
    /// let mut room = RoomInfo { host: "h".into(), port: 1, protocol: "tcp".into(), room_id: "r".into(), node_properties: None };
    /// assert_eq!(room.auth_url(), "");
    /// room.node_properties = Some(serde_json::json!({"authUrl": "https://auth.example.com"}).as_object().unwrap().clone());
    /// assert_eq!(room.auth_url(), "https://auth.example.com");
    /// ```
    pub fn auth_url(&self) -> String {
        match self
            .node_properties
            .as_ref()
            .and_then(|p| p.get(AUTH_URL_PROPERTY))
        {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        }
    }
}

/// What a client passes to `JoinRoom`: the room's connection data, its authUrl and the
/// caller's member properties.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomJoinArgs {
    /// From `RoomInfo::host`.
    pub host: String,
    /// From `RoomInfo::port`.
    pub port: u16,
    /// From `RoomInfo::protocol`.
    pub protocol: String,
    /// From `RoomInfo::room_id`.
    pub room_id: String,
    /// From [`RoomInfo::auth_url`]; empty when the room has none.
    pub auth_url: String,
    /// The joining member's properties.
    #[serde(default)]
    pub member_properties: Map<String, Value>,
}

impl RoomJoinArgs {
    /// The join arguments for `room`, with the caller's `member_properties`.
    pub fn new(room: &RoomInfo, member_properties: Map<String, Value>) -> Self {
        RoomJoinArgs {
            host: room.host.clone(),
            port: room.port,
            protocol: room.protocol.clone(),
            room_id: room.room_id.clone(),
            auth_url: room.auth_url(),
            member_properties,
        }
    }
}

/// What went wrong talking to the integrator's web API from the client side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The API could not be reached.
    #[error("the integrator API could not be reached: {0}")]
    Transport(#[source] reqwest::Error),
    /// The API answered with an error status, e.g. 401 for wrong credentials.
    #[error("the integrator API answered HTTP {status} to {endpoint}")]
    Status {
        /// Which API, e.g. `/api/login`.
        endpoint: &'static str,
        /// The status it answered.
        status: u16,
    },
    /// The API's answer was not what the protocol says.
    #[error("the integrator API's answer to {endpoint} is malformed: {detail}")]
    BadAnswer {
        /// Which API.
        endpoint: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A token was asked for before logging in.
    #[error("not logged in: call login_password or login_device first")]
    NotLoggedIn,
    /// The HTTP client could not be set up (its TLS backend failed to start).
    #[error("cannot start the HTTP client: {0}")]
    Setup(#[source] reqwest::Error),
}

/// Who logged in, as `/api/login` answered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LoggedIn {
    /// The user's id.
    pub id: i64,
    /// The user's name.
    pub name: String,
}

/// A client of the integrator's web API: logs in, keeps the session cookie, takes an access
/// token and holds it as the `authorization_access_token` it sends on connect.
#[derive(Clone)]
pub struct IntegratorClient {
    http: reqwest::Client,
    /// The web API's base URL, without a trailing slash.
    base_url: String,
    /// `session=...` from the login's `Set-Cookie`, sent back on later calls.
    session_cookie: Option<String>,
    /// The token to send on connect and join (`GameNetwork.authorizationAccessToken`).
    pub authorization_access_token: Option<AccessToken>,
}

impl fmt::Debug for IntegratorClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntegratorClient")
            .field("base_url", &self.base_url)
            .field("logged_in", &self.session_cookie.is_some())
            .field(
                "authorization_access_token",
                &self.authorization_access_token,
            )
            .finish()
    }
}

impl IntegratorClient {
    /// A client of the web API at `base_url` (e.g. `http://127.0.0.1:8080`). It follows no
    /// redirect and uses no proxy from the environment: the session cookie and the password go
    /// to `base_url` and nowhere else.
    ///
    /// # Errors
    ///
    /// [`ClientError::Setup`] when the HTTP client cannot start.
    pub fn new(base_url: impl Into<String>) -> Result<Self, ClientError> {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(ClientError::Setup)?;
        Ok(IntegratorClient {
            http,
            base_url,
            session_cookie: None,
            authorization_access_token: None,
        })
    }

    /// Logs in with a username and a password.
    ///
    /// # Errors
    ///
    /// [`ClientError::Status`] with 401 for wrong credentials; transport and answer errors.
    pub async fn login_password(
        &mut self,
        username: &str,
        password: &str,
    ) -> Result<LoggedIn, ClientError> {
        self.login(serde_json::json!({ "username": username, "password": password }))
            .await
    }

    /// Logs in with a device-generated identifier; a new one makes a guest user.
    ///
    /// # Errors
    ///
    /// As [`login_password`](Self::login_password).
    pub async fn login_device(&mut self, device_id: &str) -> Result<LoggedIn, ClientError> {
        self.login(serde_json::json!({ "device_id": device_id }))
            .await
    }

    async fn login(&mut self, body: Value) -> Result<LoggedIn, ClientError> {
        const ENDPOINT: &str = "/api/login";
        let response = self
            .http
            .post(format!("{}{ENDPOINT}", self.base_url))
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(ClientError::Transport)?;
        let response = ok_status(ENDPOINT, response)?;
        let cookie = response
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.split(';').next())
            .find(|pair| pair.trim_start().starts_with("session="))
            .map(|pair| pair.trim().to_owned())
            .ok_or_else(|| ClientError::BadAnswer {
                endpoint: ENDPOINT,
                detail: "no session cookie".to_owned(),
            })?;
        let user = json_answer(ENDPOINT, response).await?;
        self.session_cookie = Some(cookie);
        Ok(user)
    }

    /// Takes an access token from `/api/access_token` with the session, and holds it as
    /// [`authorization_access_token`](Self::authorization_access_token).
    ///
    /// # Errors
    ///
    /// [`ClientError::NotLoggedIn`] before a login; [`ClientError::Status`] with 401 when the
    /// session is gone; a [`ClientError::BadAnswer`] when the token is not a `b64token`.
    pub async fn fetch_access_token(&mut self) -> Result<&AccessToken, ClientError> {
        self.take_token(None).await
    }

    /// As [`fetch_access_token`](Self::fetch_access_token), asking for a token that lives
    /// `lifetime` (whole seconds, at least one; the API may give less): a short-lived token,
    /// renewed in a game session before it expires.
    ///
    /// # Errors
    ///
    /// As [`fetch_access_token`](Self::fetch_access_token).
    pub async fn fetch_access_token_for(
        &mut self,
        lifetime: Duration,
    ) -> Result<&AccessToken, ClientError> {
        self.take_token(Some(lifetime.as_secs().max(1))).await
    }

    async fn take_token(&mut self, expires_in: Option<u64>) -> Result<&AccessToken, ClientError> {
        const ENDPOINT: &str = "/api/access_token";
        #[derive(Deserialize)]
        struct TokenAnswer {
            access_token: String,
        }
        let body = expires_in.map(|secs| serde_json::json!({ "expires_in": secs }));
        let response = self.post_with_session(ENDPOINT, body).await?;
        let answer: TokenAnswer = json_answer(ENDPOINT, ok_status(ENDPOINT, response)?).await?;
        let token = AccessToken::new(answer.access_token).map_err(|e| ClientError::BadAnswer {
            endpoint: ENDPOINT,
            detail: e.to_string(),
        })?;
        Ok(self.authorization_access_token.insert(token))
    }

    /// Logs out: the session and every token it issued stop working.
    ///
    /// # Errors
    ///
    /// [`ClientError::NotLoggedIn`] before a login; transport and status errors.
    pub async fn logout(&mut self) -> Result<(), ClientError> {
        const ENDPOINT: &str = "/api/logout";
        let response = self.post_with_session(ENDPOINT, None).await?;
        ok_status(ENDPOINT, response)?;
        self.session_cookie = None;
        Ok(())
    }

    /// POSTs to `endpoint` with the session cookie, and `body` as JSON when given.
    async fn post_with_session(
        &self,
        endpoint: &'static str,
        body: Option<serde_json::Value>,
    ) -> Result<reqwest::Response, ClientError> {
        let cookie = self
            .session_cookie
            .as_deref()
            .ok_or(ClientError::NotLoggedIn)?;
        let mut request = self
            .http
            .post(format!("{}{endpoint}", self.base_url))
            .header(COOKIE, cookie);
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        request.send().await.map_err(ClientError::Transport)
    }
}

fn ok_status(
    endpoint: &'static str,
    response: reqwest::Response,
) -> Result<reqwest::Response, ClientError> {
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(ClientError::Status {
            endpoint,
            status: response.status().as_u16(),
        })
    }
}

async fn json_answer<T: serde::de::DeserializeOwned>(
    endpoint: &'static str,
    response: reqwest::Response,
) -> Result<T, ClientError> {
    let body = response.bytes().await.map_err(ClientError::Transport)?;
    serde_json::from_slice(&body).map_err(|e| ClientError::BadAnswer {
        endpoint,
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn room(props: Option<Value>) -> RoomInfo {
        RoomInfo {
            host: "10.0.0.5".into(),
            port: 5055,
            protocol: "tcp".into(),
            room_id: "arena-1".into(),
            node_properties: props.map(|p| p.as_object().unwrap().clone()),
        }
    }

    #[test]
    fn auth_url_is_empty_without_node_properties_or_the_key() {
        assert_eq!(room(None).auth_url(), "");
        assert_eq!(room(Some(json!({"region": "eu"}))).auth_url(), "");
    }

    #[test]
    fn auth_url_is_the_string_form_of_the_value() {
        assert_eq!(
            room(Some(json!({"authUrl": "https://a.example/x"}))).auth_url(),
            "https://a.example/x"
        );
        assert_eq!(room(Some(json!({"authUrl": null}))).auth_url(), "");
        assert_eq!(room(Some(json!({"authUrl": 42}))).auth_url(), "42");
        assert_eq!(room(Some(json!({"authUrl": true}))).auth_url(), "true");
        assert_eq!(room(Some(json!({"authUrl": ""}))).auth_url(), "");
    }

    #[test]
    fn auth_url_key_is_case_sensitive() {
        assert_eq!(
            room(Some(json!({"authurl": "https://a.example"}))).auth_url(),
            ""
        );
    }

    #[test]
    fn join_args_copy_the_room_and_its_auth_url() {
        let r = room(Some(json!({"authUrl": "https://a.example"})));
        let props = json!({"team": "red"}).as_object().unwrap().clone();
        let args = RoomJoinArgs::new(&r, props.clone());
        assert_eq!(
            (args.host.as_str(), args.port, args.protocol.as_str()),
            ("10.0.0.5", 5055, "tcp")
        );
        assert_eq!(
            (args.room_id.as_str(), args.auth_url.as_str()),
            ("arena-1", "https://a.example")
        );
        assert_eq!(args.member_properties, props);
    }

    #[test]
    fn room_info_reads_the_wire_names() {
        let r: RoomInfo = serde_json::from_value(json!({
            "host": "h", "port": 1, "protocol": "tcp", "roomId": "r", "nodeProperties": null
        }))
        .unwrap();
        assert_eq!((r.room_id.as_str(), r.node_properties), ("r", None));
    }

    #[test]
    fn debug_of_a_client_hides_the_token() {
        let mut c = IntegratorClient::new("http://127.0.0.1:1/").unwrap();
        c.authorization_access_token = Some(AccessToken::new("SECRET").unwrap());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("SECRET") && shown.contains("http://127.0.0.1:1\""),
            "{shown}"
        );
    }
}
