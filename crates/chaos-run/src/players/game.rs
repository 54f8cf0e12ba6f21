//! The players' game connections: a TCP connection to a game-server node per player, and the
//! requests a player sends on it (`connect`, `join`, `refresh`) with the answers that end each
//! operation; the connection's reader, which records what the node pushes to a live session
//! (revoked, reauth required, shutdown, the connection lost); and leaving it. It does not own
//! the players' logins or the sidecar's sessions (the parent module and `sidecar`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use token_resolver_chaos::{Op, OpKind, Outcome, SessionEventKind};
use token_resolver_player::protocol::{read_line, JoinMessage, Line, Request};
use token_resolver_player::{RoomInfo, RoomJoinArgs};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{user_of, Player, Players, Tok, OP_TIMEOUT};
use crate::schedule::Api;

/// A game connection.
#[derive(Debug)]
pub(super) struct GameConn {
    node: usize,
    session: String,
    writer: OwnedWriteHalf,
    /// Answers, each with the time it was read.
    answers: mpsc::UnboundedReceiver<(u64, Value)>,
    /// Set once the session ended (kicked, closed): what the reader recorded.
    pub(super) ended: Arc<AtomicBool>,
    /// Set once `connected` came: from then the reader records what the session is told.
    opened: Arc<AtomicBool>,
    /// The A token the session holds now (refreshes replace it).
    token: Tok,
}

fn node_process(node: usize) -> String {
    format!("node-{}", node + 1)
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
    /// Opens a connection to `node` and sends `connect` with `token`; replaces the player's
    /// connection.
    pub(super) async fn connect(&self, p: &mut Player, node: usize, token: Tok) {
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

    pub(super) async fn join(&self, p: &mut Player, api: Api) {
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

    pub(super) async fn refresh(&self, p: &mut Player, player: usize) {
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

    /// Ends the player's game connection, if any, as the client's own choice.
    pub(super) fn leave_game(&self, p: &mut Player) {
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
}

/// Sends one request and waits for its answer, read by the connection's reader.
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
