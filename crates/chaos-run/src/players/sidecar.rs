//! The players' side of the sidecar: `POST /v1/resolve` with and without a session,
//! `GET /v1/authorize`, and following `/v1/events` for the whole run, with what each event
//! means for the history (a session kicked or told to re-authenticate; after a resync, every
//! session resolved again as a game server does). It does not own the game connections
//! (`game`) or the integrator calls (the parent module).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use token_resolver_chaos::{Op, OpKind, Outcome, SessionEventKind};
use token_resolver_loadgen::SseReader;

use super::{take_answer, Player, Players, Tok};
use crate::record::lock;
use crate::schedule::Api;

impl Players {
    /// The authUrl a call names, as the history keeps it: empty for the default.
    fn room_auth_url(&self, api: Api) -> String {
        if api == Api::A {
            String::new()
        } else {
            self.auth_url(Api::B)
        }
    }

    pub(super) async fn resolve(
        &self,
        p: &mut Player,
        player: usize,
        api: Api,
        token: Tok,
        with_session: bool,
    ) {
        let session = match (&p.side, with_session) {
            (Some((s, a, _)), true) if *a == api => Some(s.clone()),
            (None, true) => Some(self.rec.id("c")),
            _ => None,
        };
        let mut body = json!({"access_token": token.secret});
        if api == Api::B {
            body["auth_url"] = Value::String(self.auth_url(Api::B));
        }
        if let Some(s) = &session {
            body["session"] = Value::String(s.clone());
        }
        let outcome = self.resolve_call(&body, &token, session.clone(), api).await;
        if let (Outcome::Ok, Some(s)) = (outcome, session) {
            p.side = Some((s.clone(), api, token.clone()));
            lock(&self.side_sessions).insert(s, (player, api, token));
        }
    }

    /// `POST /v1/resolve`, recorded; its outcome.
    async fn resolve_call(
        &self,
        body: &Value,
        token: &Tok,
        session: Option<String>,
        api: Api,
    ) -> Outcome {
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Resolve, start, Outcome::Failed);
        op.token = Some(token.id.clone());
        op.session = session;
        op.auth_url = Some(self.room_auth_url(api));
        let answer = self
            .http
            .post(format!("{}/v1/resolve", self.world.sidecar_url))
            .json(body)
            .send()
            .await;
        take_answer(&mut op, answer, true).await;
        let outcome = op.outcome;
        self.rec.op("sidecar", op);
        outcome
    }

    pub(super) async fn authorize(&self, api: Api, token: &Tok) {
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Authorize, start, Outcome::Failed);
        op.token = Some(token.id.clone());
        op.auth_url = Some(self.room_auth_url(api));
        let mut request = self
            .http
            .get(format!("{}/v1/authorize", self.world.sidecar_url))
            .bearer_auth(&token.secret);
        if api == Api::B {
            request = request.header("X-Auth-Url", self.auth_url(Api::B));
        }
        take_answer(&mut op, request.send().await, false).await;
        self.rec.op("sidecar", op);
    }

    /// Follows the sidecar's `/v1/events` for the whole run, coming back with `Last-Event-ID`
    /// whenever the stream ends (a restart of the sidecar).
    pub(crate) async fn follow_sidecar(self: Arc<Self>) {
        let mut last_id = String::new();
        let stream = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("an HTTP client");
        loop {
            let mut request = stream.get(format!("{}/v1/events", self.world.sidecar_url));
            if !last_id.is_empty() {
                request = request.header("Last-Event-ID", &last_id);
            }
            if let Ok(answer) = request.send().await {
                if answer.status().is_success() {
                    let mut reader = SseReader::new(answer);
                    while let Some(event) = reader.next().await {
                        if !event.id.is_empty() {
                            last_id.clone_from(&event.id);
                        }
                        self.sidecar_event(&event.event, &event.data);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn sidecar_event(self: &Arc<Self>, kind: &str, data: &Value) {
        let session = data["session"].as_str().map(str::to_owned);
        match kind {
            "revoked" => {
                let Some(s) = session else { return };
                if lock(&self.side_sessions).remove(&s).is_some() {
                    self.rec.session(
                        "sidecar",
                        Some(s),
                        SessionEventKind::Kicked,
                        data["reason"].as_str().map(str::to_owned),
                    );
                }
            }
            "reauth_required" => {
                let Some(s) = session else { return };
                if lock(&self.side_sessions).contains_key(&s) {
                    self.rec
                        .session("sidecar", Some(s), SessionEventKind::ReauthRequired, None);
                }
            }
            "resync" => {
                self.rec
                    .session("sidecar", None, SessionEventKind::Resync, None);
                // As a game server does: resolve every session again, and drop those refused
                // or not answered.
                let sessions: Vec<(String, (usize, Api, Tok))> = lock(&self.side_sessions)
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let me = self.clone();
                tokio::spawn(async move {
                    for (session, (_, api, token)) in sessions {
                        let mut body = json!({"access_token": token.secret, "session": session});
                        if api == Api::B {
                            body["auth_url"] = Value::String(me.auth_url(Api::B));
                        }
                        let outcome = me
                            .resolve_call(&body, &token, Some(session.clone()), api)
                            .await;
                        if outcome != Outcome::Ok
                            && lock(&me.side_sessions).remove(&session).is_some()
                        {
                            me.rec.session(
                                "sidecar",
                                Some(session),
                                SessionEventKind::Left,
                                Some("resync_refused".to_owned()),
                            );
                        }
                    }
                });
            }
            _ => {}
        }
    }
}
