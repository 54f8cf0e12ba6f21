//! The reference integrator API on `127.0.0.1:0`, and a player's login through the crate's own
//! `IntegratorClient`.

use token_resolver::player::IntegratorClient;
use token_resolver::reference_api::{ApiConfig, ReferenceApi, RunningApi};

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
