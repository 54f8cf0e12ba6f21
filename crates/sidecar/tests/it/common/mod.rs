//! The parties of the sidecar's tests: the reference API, telling the sidecar's admin listener
//! of logouts and bans, and the sidecar resolving at it; and a reader of its event stream.

// Each test binary uses a part of what is here.
#![allow(dead_code)]

use token_resolver_support as support;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use support::redis::free_port;
use support::{ApiCalls, SseEvent, SseReader};
use token_resolver::Resolver;
use token_resolver_reference_api::{ApiConfig, ApiUser, RunningApi};
use token_resolver_sessions::{spawn_admin, AdminConfig, AdminSecret, RunningAdmin};
use token_resolver_sidecar::{RunningSidecar, Sidecar, SidecarConfig};

const SECRET: &str = "sidecar-test-admin-secret-32-bytes";

/// The reference API, telling the sidecar's admin listener of logouts and bans, and the
/// sidecar resolving at it.
pub struct Parties {
    pub api: RunningApi,
    pub sidecar: RunningSidecar,
    _admin: RunningAdmin,
    pub http: reqwest::Client,
}

impl Parties {
    pub async fn start(config: SidecarConfig, users: Vec<ApiUser>) -> Parties {
        // The API must know where to notify, and the sidecar where to resolve: the API's port
        // is chosen first.
        let api_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let base = format!("http://{api_addr}");
        let sidecar = Self::sidecar(&base, config);
        let admin = Self::admin(&sidecar, "127.0.0.1:0".parse().unwrap()).await;
        let api = token_resolver_reference_api::ReferenceApi::new(ApiConfig {
            users,
            notify: vec![format!("http://{}", admin.local_addr())],
            admin_secret: Some(AdminSecret::new(SECRET).unwrap()),
            ..ApiConfig::default()
        })
        .unwrap()
        .spawn(api_addr)
        .await
        .unwrap();
        let sidecar = sidecar.spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        Parties {
            api,
            sidecar,
            _admin: admin,
            http: reqwest::Client::new(),
        }
    }

    /// A sidecar resolving at `base`.
    fn sidecar(base: &str, config: SidecarConfig) -> Sidecar {
        let resolver = Resolver::builder()
            .default_auth_url(base)
            .clock_skew(Duration::ZERO)
            .build()
            .unwrap();
        Sidecar::new(resolver, config)
    }

    /// `sidecar`'s admin listener on `addr`.
    async fn admin(sidecar: &Sidecar, addr: SocketAddr) -> RunningAdmin {
        let config = AdminConfig {
            revoke_secret: Some(AdminSecret::new(SECRET).unwrap()),
            ..AdminConfig::default()
        };
        spawn_admin(addr, sidecar.admin_node(), config)
            .await
            .unwrap()
    }

    /// Stops the sidecar and its admin listener (its streams end, its sessions are lost, as
    /// when its process dies), runs `meanwhile`, then starts a new sidecar with `config` on the
    /// same ports.
    pub async fn restart(
        self,
        config: SidecarConfig,
        meanwhile: impl Future<Output = ()>,
    ) -> Parties {
        let Parties {
            api,
            sidecar,
            _admin: admin,
            http: _,
        } = self;
        let (addr, admin_addr) = (sidecar.local_addr(), admin.local_addr());
        sidecar.shutdown().await;
        admin.shutdown().await;
        meanwhile.await;
        let fresh = Self::sidecar(&api.base_url(), config);
        let admin = Self::admin(&fresh, admin_addr).await;
        let sidecar = fresh.spawn(addr).await.unwrap();
        Parties {
            api,
            sidecar,
            _admin: admin,
            // Not the connections the old sidecar closed.
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.sidecar.local_addr())
    }

    /// `POST /v1/resolve` with `body`: the status and the JSON answer.
    pub async fn resolve(&self, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url("/v1/resolve"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    /// A fresh token of `username` (demo password).
    pub async fn token(&self, username: &str) -> String {
        let password = match username {
            "alice" => "wonderland",
            "bob" => "builder",
            _ => "carolina",
        };
        support::login_and_take_token(&self.api.base_url(), username, password).await
    }

    /// Opens `GET /v1/events`, with `Last-Event-ID` when given.
    pub async fn events(&self, last_id: Option<&str>) -> Events {
        let mut request = self.http.get(self.url("/v1/events"));
        if let Some(id) = last_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events(SseReader::new(response))
    }

    /// Bans `user_id` at the reference API, which tells the sidecar.
    pub async fn ban(&self, user_id: i64) {
        ban_at(&self.api.base_url(), user_id).await;
    }
}

/// Bans `user_id` at the reference API at `base`.
pub async fn ban_at(base: &str, user_id: i64) {
    let answer = ApiCalls::new(base)
        .admin(
            "ban",
            Some(&format!("Bearer {SECRET}")),
            &json!({"user_id": user_id}).to_string(),
        )
        .await;
    assert_eq!(answer.status(), 200);
}

/// The sidecar's event stream, as a test reads it.
pub struct Events(SseReader);

impl Events {
    /// The next event, within five seconds.
    pub async fn next(&mut self) -> SseEvent {
        tokio::time::timeout(Duration::from_secs(5), self.0.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream is open")
    }

    /// The next event within `within`, if one comes.
    pub async fn within(&mut self, within: Duration) -> Option<SseEvent> {
        tokio::time::timeout(within, self.0.next())
            .await
            .ok()
            .flatten()
    }
}
