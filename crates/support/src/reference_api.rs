//! The reference integrator API on `127.0.0.1:0`, and a player's login through the crate's own
//! `IntegratorClient`.

use token_resolver_player::IntegratorClient;
use token_resolver_reference_api::{ApiConfig, ReferenceApi, RunningApi};

/// The reference API with its demo users, on `127.0.0.1:0`.
pub async fn reference_api() -> RunningApi {
    reference_api_with(ApiConfig::default()).await
}

pub async fn reference_api_with(config: ApiConfig) -> RunningApi {
    ReferenceApi::new(config)
        .expect("valid reference API config")
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .expect("reference API binds to loopback")
}

/// Logs `username` in at the reference API and takes an access token, as a client would.
pub async fn login_and_take_token(base_url: &str, username: &str, password: &str) -> String {
    logged_in(base_url, username, password)
        .await
        .authorization_access_token
        .expect("a token was taken")
        .secret()
        .to_owned()
}

/// A client of the reference API logged in as `username`, holding a fresh access token.
pub async fn logged_in(base_url: &str, username: &str, password: &str) -> IntegratorClient {
    let mut client = IntegratorClient::new(base_url).expect("an HTTP client");
    client
        .login_password(username, password)
        .await
        .unwrap_or_else(|e| panic!("login of {username}: {e}"));
    client
        .fetch_access_token()
        .await
        .unwrap_or_else(|e| panic!("access token of {username}: {e}"));
    client
}

/// Plain HTTP calls to a reference API, as a test makes them: cookies passed by hand, answers
/// returned as they are.
pub struct ApiCalls {
    pub client: reqwest::Client,
    pub base: String,
}

impl ApiCalls {
    pub fn new(base: &str) -> Self {
        ApiCalls {
            client: reqwest::Client::new(),
            base: base.to_owned(),
        }
    }

    /// Calls that leave from `address` (any 127.0.0.0/8 address is loopback on Linux).
    pub fn from_address(base: &str, address: std::net::IpAddr) -> Self {
        ApiCalls {
            client: reqwest::Client::builder()
                .local_address(address)
                .build()
                .unwrap(),
            base: base.to_owned(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn login(&self, username: &str, password: &str) -> reqwest::Response {
        self.post_json(
            "/api/login",
            &serde_json::json!({ "username": username, "password": password }),
        )
        .await
    }

    /// `POST /api/login` as the device `device`, with `X-Forwarded-For: {forwarded_for}` if
    /// given.
    pub async fn device_login(
        &self,
        device: &str,
        forwarded_for: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url("/api/login"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "device_id": device }).to_string());
        if let Some(forwarded_for) = forwarded_for {
            request = request.header("x-forwarded-for", forwarded_for);
        }
        request.send().await.unwrap()
    }

    pub async fn post_json(&self, path: &str, body: &serde_json::Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// Logs in (asserting 200) and returns the `Cookie` header value to send back.
    pub async fn session(&self, username: &str, password: &str) -> String {
        let response = self.login(username, password).await;
        assert_eq!(response.status(), 200, "login of {username}");
        cookie_of(&response)
    }

    /// `POST /api/access_token` with `cookie`, and a JSON `body` if given.
    pub async fn token_raw(
        &self,
        cookie: &str,
        body: Option<&serde_json::Value>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url("/api/access_token"))
            .header("cookie", cookie);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        request.send().await.unwrap()
    }

    /// A new token of the session (asserting 200).
    pub async fn token(&self, cookie: &str) -> String {
        let response = self.token_raw(cookie, None).await;
        assert_eq!(response.status(), 200);
        json_of(response).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn user(&self, token: &str) -> reqwest::Response {
        self.client
            .post(self.url("/api/user"))
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .unwrap()
    }

    pub async fn logout(&self, cookie: &str) -> reqwest::Response {
        self.client
            .post(self.url("/api/logout"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap()
    }

    /// `POST /api/admin/{action}` with `Authorization: {authorization}` if given.
    pub async fn admin(
        &self,
        action: &str,
        authorization: Option<&str>,
        body: &str,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url(&format!("/api/admin/{action}")))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        request.send().await.unwrap()
    }

    /// `GET /api/admin/{what}` with `Authorization: {authorization}`: the body, after checking
    /// that the answer is 200.
    pub async fn admin_get(&self, what: &str, authorization: &str) -> String {
        let response = self
            .client
            .get(self.url(&format!("/api/admin/{what}")))
            .header("authorization", authorization)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET /api/admin/{what}");
        response.text().await.unwrap()
    }
}

/// The `session=…` pair of a login answer's `Set-Cookie`.
pub fn cookie_of(response: &reqwest::Response) -> String {
    response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// The body parsed as JSON.
pub async fn json_of(response: reqwest::Response) -> serde_json::Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}
