//! The players: their operations against the products (log in, connect, join, refresh,
//! resolve, authorize, log out, leave; the integrator's bans), and what their sessions are
//! told (a game connection's pushes, the sidecar's events), each recorded in the history
//! with the run's clock. It owns the players' state; the schedule says what to do.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use token_resolver_chaos::{Op, OpKind, Outcome, SessionEventKind, TokenId};
use token_resolver_loadgen::SseReader;
use token_resolver_player::protocol::{read_line, JoinMessage, Line, Request};
use token_resolver_player::{IntegratorClient, RoomInfo, RoomJoinArgs};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

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

/// A game connection.
#[derive(Debug)]
struct GameConn {
    node: usize,
    session: String,
    writer: OwnedWriteHalf,
    /// Answers, each with the time it was read.
    answers: mpsc::UnboundedReceiver<(u64, Value)>,
    /// Set once the session ended (kicked, closed): what the reader recorded.
    ended: Arc<AtomicBool>,
    /// Set once `connected` came: from then the reader records what the session is told.
    opened: Arc<AtomicBool>,
    /// The A token the session holds now (refreshes replace it).
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

fn node_process(node: usize) -> String {
    format!("node-{}", node + 1)
}

/// How an HTTP status ends an operation.
fn outcome_of(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Ok,
        401 | 403 | 409 => Outcome::Refused,
        _ => Outcome::Failed,
    }
}

/// How a game server's error code ends an operation: a definite no, or no verdict.
fn outcome_of_code(code: &str, retryable: bool) -> Outcome {
    if retryable || matches!(code, "auth_unavailable" | "auth_timeout" | "overloaded") {
        Outcome::Failed
    } else {
        Outcome::Refused
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

    /// The authUrl a call names, as the history keeps it: empty for the default.
    fn room_auth_url(&self, api: Api) -> String {
        if api == Api::A {
            String::new()
        } else {
            self.auth_url(Api::B)
        }
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

    /// Opens a connection to `node` and sends `connect` with `token`; replaces the player's
    /// connection.
    async fn connect(&self, p: &mut Player, node: usize, token: Tok) {
        self.leave_game(p);
        let process = node_process(node);
        let session = self.rec.id("g");
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Connect, start, Outcome::Failed);
        op.token = Some(token.id.clone());
        op.session = Some(session.clone());
        let addr = self.world.game_addrs[node];
        let Some(mut conn) = self.open(addr, node, session, token.clone()).await else {
            op.code = Some("connect_failed".to_owned());
            self.rec.op(&process, op);
            return;
        };
        let request = Request::Connect {
            access_token: Some(token.secret.clone()),
        };
        let answer = ask(&mut conn, &request).await;
        let (ok, t) = Self::finish(&mut op, answer, "connected");
        self.rec.op_at(t, &process, op);
        if ok {
            p.game = Some(conn);
        } else {
            conn.ended.store(true, Ordering::SeqCst);
        }
    }

    /// Fills `op` from a game answer; whether it was the `expected` one, and when the
    /// answer was read (0: none came).
    fn finish(op: &mut Op, answer: Result<(u64, Value), String>, expected: &str) -> (bool, u64) {
        match answer {
            Ok((t, value)) => {
                op.code = None;
                if value["type"] == expected {
                    op.outcome = Outcome::Ok;
                    (true, t)
                } else {
                    let code = value["error"].as_str().unwrap_or("unexpected").to_owned();
                    let retryable = value["retryable"].as_bool().unwrap_or(false);
                    op.outcome = if value["type"] == "error" {
                        outcome_of_code(&code, retryable)
                    } else {
                        Outcome::Failed
                    };
                    op.code = Some(code);
                    (false, t)
                }
            }
            Err(code) => {
                op.outcome = Outcome::Failed;
                op.code = Some(code);
                (false, 0)
            }
        }
    }

    async fn open(
        &self,
        addr: SocketAddr,
        node: usize,
        session: String,
        token: Tok,
    ) -> Option<GameConn> {
        let stream = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr))
            .await
            .ok()?
            .ok()?;
        let _ = stream.set_nodelay(true);
        let (read, writer) = stream.into_split();
        let (tx, answers) = mpsc::unbounded_channel();
        let ended = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicBool::new(false));
        let rec = self.rec.clone();
        let process = node_process(node);
        let (r_ended, r_opened, r_session) = (ended.clone(), opened.clone(), session.clone());
        tokio::spawn(async move {
            let mut reader = BufReader::new(read);
            let mut line = Vec::new();
            loop {
                let read = read_line(&mut reader, &mut line, 1 << 20).await;
                let t = rec.now();
                let value: Value = match read {
                    Ok(Line::Complete) => {
                        let v = serde_json::from_slice(&line).unwrap_or(Value::Null);
                        line.clear();
                        v
                    }
                    _ => {
                        if r_opened.load(Ordering::SeqCst) && !r_ended.swap(true, Ordering::SeqCst)
                        {
                            rec.session(
                                &process,
                                Some(r_session.clone()),
                                SessionEventKind::Closed,
                                Some("connection_lost".to_owned()),
                            );
                        }
                        r_ended.store(true, Ordering::SeqCst);
                        return;
                    }
                };
                let live = r_opened.load(Ordering::SeqCst) && !r_ended.load(Ordering::SeqCst);
                match value["type"].as_str() {
                    Some("revoked") if live => {
                        r_ended.store(true, Ordering::SeqCst);
                        rec.session(
                            &process,
                            Some(r_session.clone()),
                            SessionEventKind::Kicked,
                            value["error"].as_str().map(str::to_owned),
                        );
                    }
                    Some("reauth_required") if live => rec.session(
                        &process,
                        Some(r_session.clone()),
                        SessionEventKind::ReauthRequired,
                        None,
                    ),
                    Some("shutdown") if live => {
                        r_ended.store(true, Ordering::SeqCst);
                        rec.session(
                            &process,
                            Some(r_session.clone()),
                            SessionEventKind::Closed,
                            Some("shutdown".to_owned()),
                        );
                    }
                    Some("connected") => {
                        r_opened.store(true, Ordering::SeqCst);
                        let _ = tx.send((t, value));
                    }
                    _ => {
                        let _ = tx.send((t, value));
                    }
                }
            }
        });
        Some(GameConn {
            node,
            session,
            writer,
            answers,
            ended,
            opened,
            token,
        })
    }

    async fn join(&self, p: &mut Player, api: Api) {
        let Some(token) = p.logins.get(&api).map(|l| l.token.clone()) else {
            return;
        };
        let Some(conn) = p.game.as_mut() else {
            return;
        };
        let process = node_process(conn.node);
        let (room, auth_url) = match api {
            Api::A => ("lobby", String::new()),
            Api::B => ("arena", self.auth_url(Api::B)),
        };
        let addr = self.world.game_addrs[conn.node];
        let mut properties = serde_json::Map::new();
        if api == Api::B {
            properties.insert("authUrl".to_owned(), Value::String(auth_url.clone()));
        }
        let info = RoomInfo {
            host: addr.ip().to_string(),
            port: addr.port(),
            protocol: "tcp".to_owned(),
            room_id: room.to_owned(),
            node_properties: (api == Api::B).then_some(properties),
        };
        let request = Request::Join(JoinMessage {
            args: RoomJoinArgs::new(&info, serde_json::Map::new()),
            access_token: Some(token.secret.clone()),
        });
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Join, start, Outcome::Failed);
        op.token = Some(token.id.clone());
        op.session = Some(conn.session.clone());
        op.auth_url = Some(if api == Api::A {
            String::new()
        } else {
            auth_url
        });
        let answer = ask(conn, &request).await;
        let (_, t) = Self::finish(&mut op, answer, "joined");
        self.rec.op_at(t, &process, op);
    }

    async fn refresh(&self, p: &mut Player, player: usize) {
        let Some(conn) = p.game.as_mut() else {
            return;
        };
        let Some(login) = p.logins.get_mut(&Api::A) else {
            return;
        };
        // A new token from the same login.
        let start = self.rec.now();
        let mut take = Op::new(OpKind::Login, start, Outcome::Failed);
        take.user = Some(user_of(Api::A, player));
        let taken = tokio::time::timeout(OP_TIMEOUT, login.client.fetch_access_token()).await;
        let secret = match taken {
            Ok(Ok(token)) => token.secret().to_owned(),
            _ => {
                self.rec.op("api", take);
                return;
            }
        };
        let token = Tok {
            id: self.rec.token(&secret),
            secret,
        };
        take.outcome = Outcome::Ok;
        take.token = Some(token.id.clone());
        take.sid = Some(login.sid.clone());
        self.rec.op("api", take);
        login.token = token.clone();
        p.last.insert(Api::A, token.clone());
        let process = node_process(conn.node);
        let request = Request::Refresh {
            access_token: Some(token.secret.clone()),
        };
        let start = self.rec.now();
        let mut op = Op::new(OpKind::Refresh, start, Outcome::Failed);
        op.token = Some(token.id.clone());
        op.session = Some(conn.session.clone());
        let answer = ask(conn, &request).await;
        let (ok, t) = Self::finish(&mut op, answer, "refreshed");
        if ok {
            conn.token = token;
        }
        self.rec.op_at(t, &process, op);
    }

    async fn resolve(
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

    async fn authorize(&self, api: Api, token: &Tok) {
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

    /// Ends the player's game connection, if any, as the client's own choice.
    fn leave_game(&self, p: &mut Player) {
        if let Some(conn) = p.game.take() {
            if !conn.ended.swap(true, Ordering::SeqCst) && conn.opened.load(Ordering::SeqCst) {
                self.rec.session(
                    &node_process(conn.node),
                    Some(conn.session.clone()),
                    SessionEventKind::Left,
                    None,
                );
            }
            drop(conn);
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

    /// Ends every session the run holds, at the end of the run.
    pub(crate) async fn leave_all(&self) {
        for p in &self.players {
            let mut p = p.lock().await;
            self.leave_game(&mut p);
        }
    }
}

/// Sends one request and waits for its answer, read by the connection's reader.
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

async fn ask(conn: &mut GameConn, request: &Request) -> Result<(u64, Value), String> {
    let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    line.push(b'\n');
    if conn.writer.write_all(&line).await.is_err() {
        return Err("connection_lost".to_owned());
    }
    match tokio::time::timeout(OP_TIMEOUT, conn.answers.recv()).await {
        Ok(Some(answer)) => Ok(answer),
        Ok(None) => Err("connection_lost".to_owned()),
        Err(_) => Err("timeout".to_owned()),
    }
}
