//! The players: their state (logins, the tokens taken, a game connection, a sidecar session),
//! the dispatch of the schedule's actions to them, and their calls to the integrators (log in,
//! take a token, log out; the admin's bans), each recorded in the history with the run's
//! clock; leaving ends both of a player's sessions. The schedule says what to do.
//!
//! | module | owns |
//! |---|---|
//! | `game` | a player's game connection: connect, join, refresh, leave, what the node pushes |
//! | `sidecar` | resolve and authorize at the sidecar, and following its events |

mod game;
mod sidecar;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use token_resolver_chaos::{Op, OpKind, Outcome, SessionEventKind, TokenId};
use token_resolver_player::IntegratorClient;

use self::game::GameConn;
use crate::record::{lock, Recorder};
use crate::schedule::{Action, Api};
use crate::world::{password, World, B_USERS};

/// How long one operation may take before it is recorded as failed.
const OP_TIMEOUT: Duration = Duration::from_secs(8);

/// A token the run holds: its history id and the real thing.
#[derive(Debug, Clone)]
struct Tok {
    id: TokenId,
    secret: String,
}

/// A login at one API: its client (with the session cookie) and the token taken last.
#[derive(Debug)]
struct Login {
    client: IntegratorClient,
    /// The run's id of the integrator's login session (`l17`).
    sid: String,
    token: Tok,
}

/// One player: a user at both APIs.
#[derive(Debug, Default)]
struct Player {
    logins: HashMap<Api, Login>,
    /// The last token taken at each API, whatever became of it since.
    last: HashMap<Api, Tok>,
    game: Option<GameConn>,
    /// The sidecar session, and whose token it holds.
    side: Option<(String, Api, Tok)>,
}

/// The players and what they play against.
#[derive(Debug)]
pub(crate) struct Players {
    world: Arc<World>,
    rec: Arc<Recorder>,
    players: Vec<tokio::sync::Mutex<Player>>,
    /// Live sidecar sessions: session -> (player, its token).
    side_sessions: Mutex<HashMap<String, (usize, Api, Tok)>>,
    http: reqwest::Client,
}

fn user_of(api: Api, player: usize) -> i64 {
    let i = i64::try_from(player).unwrap_or(0) + 1;
    match api {
        Api::A => i,
        Api::B => B_USERS + i,
    }
}

fn api_process(api: Api) -> &'static str {
    match api {
        Api::A => "api",
        Api::B => "api-b",
    }
}

/// How an HTTP status ends an operation.
fn outcome_of(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Ok,
        401 | 403 | 409 => Outcome::Refused,
        _ => Outcome::Failed,
    }
}

impl Players {
    pub(crate) fn new(world: Arc<World>, rec: Arc<Recorder>) -> Arc<Self> {
        let players = (0..world.players)
            .map(|_| tokio::sync::Mutex::new(Player::default()))
            .collect();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(OP_TIMEOUT)
            .build()
            .expect("an HTTP client");
        Arc::new(Self {
            world,
            rec,
            players,
            side_sessions: Mutex::new(HashMap::new()),
            http,
        })
    }

    fn auth_url(&self, api: Api) -> String {
        self.world.proxies[&api].url()
    }

    /// Runs one player action (faults are not theirs).
    pub(crate) async fn act(self: &Arc<Self>, action: &Action) {
        let player = match action {
            Action::Login { player, .. }
            | Action::Connect { player, .. }
            | Action::Join { player, .. }
            | Action::Refresh { player }
            | Action::Resolve { player, .. }
            | Action::Authorize { player, .. }
            | Action::Logout { player, .. }
            | Action::Leave { player }
            | Action::Ban { player, .. }
            | Action::Unban { player, .. }
            | Action::Reuse { player, .. } => *player,
            Action::FaultBegin { .. } | Action::FaultEnd { .. } => return,
        };
        let mut p = self.players[player].lock().await;
        // A game connection whose session ended is gone.
        if p.game
            .as_ref()
            .is_some_and(|g| g.ended.load(Ordering::SeqCst))
        {
            p.game = None;
        }
        if let Some((session, ..)) = &p.side {
            if !lock(&self.side_sessions).contains_key(session) {
                p.side = None;
            }
        }
        match *action {
            Action::Login { api, short_exp, .. } => {
                self.login(&mut p, player, api, short_exp).await
            }
            Action::Connect { node, .. } => {
                if let Some(token) = p.logins.get(&Api::A).map(|l| l.token.clone()) {
                    self.connect(&mut p, node, token).await;
                }
            }
            Action::Join { api, .. } => self.join(&mut p, api).await,
            Action::Refresh { .. } => self.refresh(&mut p, player).await,
            Action::Resolve { api, session, .. } => {
                if let Some(token) = p.logins.get(&api).map(|l| l.token.clone()) {
                    self.resolve(&mut p, player, api, token, session).await;
                }
            }
            Action::Authorize { api, .. } => {
                if let Some(token) = p.logins.get(&api).map(|l| l.token.clone()) {
                    self.authorize(api, &token).await;
                }
            }
            Action::Logout { api, .. } => self.logout(&mut p, player, api).await,
            Action::Leave { .. } => self.leave(&mut p).await,
            Action::Ban { api, .. } => self.admin(&mut p, player, api, true).await,
            Action::Unban { api, .. } => self.admin(&mut p, player, api, false).await,
            Action::Reuse { api, how, node, .. } => {
                let Some(token) = p.last.get(&api).cloned() else {
                    return;
                };
                match (how, api) {
                    (2, Api::A) => self.connect(&mut p, node, token).await,
                    (1, _) => self.authorize(api, &token).await,
                    _ => self.resolve(&mut p, player, api, token, false).await,
                }
            }
            Action::FaultBegin { .. } | Action::FaultEnd { .. } => {}
        }
    }

    async fn login(&self, p: &mut Player, player: usize, api: Api, short_exp: Option<u64>) {
        // One login per API at a time: the previous one is logged out first, so that no user
        // nears the API's cap of sessions (past it the oldest would end unannounced).
        if p.logins.contains_key(&api) {
            self.logout(p, player, api).await;
        }
        let user = user_of(api, player);
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Login, start, Outcome::Failed);
        op.user = Some(user);
        let Ok(mut client) = IntegratorClient::new(self.world.api_urls[&api].clone()) else {
            return;
        };
        let logged = tokio::time::timeout(OP_TIMEOUT, async {
            client
                .login_password(&format!("p{player}"), &password(player))
                .await?;
            let token = match short_exp {
                Some(secs) => {
                    client
                        .fetch_access_token_for(Duration::from_secs(secs))
                        .await?
                }
                None => client.fetch_access_token().await?,
            };
            Ok::<String, token_resolver_player::ClientError>(token.secret().to_owned())
        })
        .await;
        match logged {
            Ok(Ok(secret)) => {
                let id = self.rec.token(&secret);
                let sid = self.rec.id("l");
                op.outcome = Outcome::Ok;
                op.token = Some(id.clone());
                op.sid = Some(sid.clone());
                self.rec.op(api_process(api), op);
                if let Some(secs) = short_exp {
                    // The API's `exp` is at most this (it rounds down): the checker counts
                    // from no earlier than the token really expired.
                    self.rec
                        .expiry(self.rec.now() + secs * 1_000_000, id.clone());
                }
                let token = Tok { id, secret };
                p.last.insert(api, token.clone());
                p.logins.insert(api, Login { client, sid, token });
            }
            Ok(Err(e)) => {
                let status = match &e {
                    token_resolver_player::ClientError::Status { status, .. } => Some(*status),
                    _ => None,
                };
                op.outcome = status.map_or(Outcome::Failed, outcome_of);
                op.code = status.map(|s| s.to_string());
                self.rec.op(api_process(api), op);
            }
            Err(_) => {
                op.code = Some("timeout".to_owned());
                self.rec.op(api_process(api), op);
            }
        }
    }

    async fn logout(&self, p: &mut Player, player: usize, api: Api) {
        let Some(mut login) = p.logins.remove(&api) else {
            return;
        };
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Logout, start, Outcome::Failed);
        op.user = Some(user_of(api, player));
        op.sid = Some(login.sid.clone());
        match tokio::time::timeout(OP_TIMEOUT, login.client.logout()).await {
            Ok(Ok(())) => op.outcome = Outcome::Ok,
            Ok(Err(_)) => {}
            Err(_) => op.code = Some("timeout".to_owned()),
        }
        self.rec.op(api_process(api), op);
    }

    async fn admin(&self, p: &mut Player, player: usize, api: Api, ban: bool) {
        let user = user_of(api, player);
        let (kind, path) = if ban {
            (OpKind::Ban, "ban")
        } else {
            (OpKind::Unban, "unban")
        };
        let start = self.rec.now();
        let mut op = Op::new(kind, start, Outcome::Failed);
        op.user = Some(user);
        let answer = self
            .http
            .post(format!("{}/api/admin/{path}", self.world.api_urls[&api]))
            .bearer_auth(&self.world.admin_token)
            .json(&json!({"user_id": user}))
            .send()
            .await;
        take_answer(&mut op, answer, false).await;
        self.rec.op(api_process(api), op);
        if ban {
            // The API ended the user's sessions; the tokens stay in hand for reuse.
            p.logins.remove(&api);
        }
    }

    async fn leave(&self, p: &mut Player) {
        self.leave_game(p);
        if let Some((session, ..)) = p.side.take() {
            if lock(&self.side_sessions).remove(&session).is_some() {
                self.rec.session(
                    "sidecar",
                    Some(session.clone()),
                    SessionEventKind::Left,
                    None,
                );
            }
            let _ = self
                .http
                .delete(format!("{}/v1/sessions/{session}", self.world.sidecar_url))
                .send()
                .await;
        }
    }

    /// Ends every session the run holds, at the end of the run.
    pub(crate) async fn leave_all(&self) {
        for p in &self.players {
            let mut p = p.lock().await;
            self.leave_game(&mut p);
        }
    }
}

/// Sets `op`'s outcome from an HTTP answer, and its code when it is not a success: the body's
/// `error` when `error_body` and the body names one, else the status; `timeout` or `error` for
/// a call that got no answer.
async fn take_answer(op: &mut Op, answer: reqwest::Result<reqwest::Response>, error_body: bool) {
    match answer {
        Ok(a) => {
            let status = a.status().as_u16();
            op.outcome = outcome_of(status);
            if op.outcome != Outcome::Ok {
                let body: Value = if error_body {
                    a.json().await.unwrap_or(Value::Null)
                } else {
                    Value::Null
                };
                op.code = Some(
                    body["error"]
                        .as_str()
                        .map_or_else(|| status.to_string(), str::to_owned),
                );
            }
        }
        Err(e) => op.code = Some(if e.is_timeout() { "timeout" } else { "error" }.to_owned()),
    }
}
