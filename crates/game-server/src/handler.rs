//! The handling of one message: the game logic of connect, search, join and refresh, written
//! once for every transport, on what the server's sessions share (`state`).

use std::net::IpAddr;

use super::protocol::{
    blank_quoted, encode, player_of, refusal, BAD_REQUEST, RATE_LIMITED, REFRESH_MISMATCH,
    ROOM_NOT_FOUND,
};
use super::state::Shared;
use super::telemetry::MESSAGES_TOTAL;
use token_resolver::{
    AccessToken, ConnectRequest, ErrorCode, Identity, JoinRequest, Resolution, ResolveError,
};
use token_resolver_player::protocol::{JoinMessage, Request, ServerMessage};
use token_resolver_player::Player;
use token_resolver_sessions::{Credential, Purpose, SessionCredentials};

/// Who sent a message: the connection, and the client's address where the transport knows it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller {
    pub(super) connection: u64,
    pub(super) peer: Option<IpAddr>,
}

/// What handling a message gives the session: the answer, whether the session ends after it,
/// and whether it let the player in (a `connect` or a `join` that resolved), which ends the
/// deadline to log in.
pub(super) struct Reply {
    pub(super) message: Vec<u8>,
    pub(super) close: bool,
    pub(super) admitted: bool,
}

impl Reply {
    /// An answer that lets the player in.
    fn admitted(message: Vec<u8>) -> Reply {
        Reply {
            admitted: true,
            ..Reply::from(message)
        }
    }
}

impl From<Vec<u8>> for Reply {
    fn from(message: Vec<u8>) -> Reply {
        Reply {
            message,
            close: false,
            admitted: false,
        }
    }
}

/// Reads one message: the request, or the `bad_request` refusal (the line the client is sent)
/// for one that is not, naming what is wrong and nothing the client sent.
pub(super) fn read_request(message: &[u8]) -> Result<Request, Vec<u8>> {
    serde_json::from_slice::<Request>(message).map_err(|e| {
        let msg = format!(
            "expected {{\"type\": \"connect\" | \"search_room\" | \"join\" | \"refresh\", ...}}: {}",
            blank_quoted(&e.to_string())
        );
        refusal(BAD_REQUEST, &msg, false)
    })
}

/// Handles one message of `connection`, which came over `transport` (`tcp`, `ws`), keeping in
/// `holdings` what its resolutions vouched for. Every resolution is logged with the connection
/// and its outcome (`ok` or the error code).
pub(super) async fn handle(
    shared: &Shared,
    caller: Caller,
    holdings: &mut SessionCredentials,
    transport: &'static str,
    message: &[u8],
) -> Reply {
    let connection = caller.connection;
    let request = match read_request(message) {
        Ok(request) => request,
        Err(refused) => {
            metrics::counter!(MESSAGES_TOTAL, "type" => "invalid").increment(1);
            return refused.into();
        }
    };
    metrics::counter!(MESSAGES_TOTAL, "type" => request.kind()).increment(1);
    if let Some(refused) = rate_limited(shared, caller, &request) {
        return refused.into();
    }
    match request {
        Request::Connect { access_token } => {
            let req = ConnectRequest {
                access_token: access_token.clone(),
            };
            match shared.resolver.resolve_connect_in_full(&req).await {
                Ok(identity) => {
                    let user_id = identity.as_ref().map(|u| u.id);
                    tracing::info!(
                        connection,
                        request = "connect",
                        outcome = "ok",
                        user_id,
                        "connected"
                    );
                    if let Some(endpoint) = shared.resolver.default_endpoint() {
                        hold(
                            shared,
                            holdings,
                            Purpose::Connect,
                            endpoint.as_str(),
                            access_token,
                            identity.as_ref(),
                        );
                    }
                    Reply::admitted(encode(&ServerMessage::Connected {
                        user: player_of(identity.as_ref()),
                    }))
                }
                Err(e) => resolve_refusal(shared, caller, "connect", &e).into(),
            }
        }
        Request::SearchRoom => {
            let rooms = match transport {
                "ws" => shared.ws_room_infos.get().unwrap_or(&shared.room_infos),
                _ => &shared.room_infos,
            };
            encode(&ServerMessage::Rooms {
                rooms: rooms.clone(),
            })
            .into()
        }
        Request::Join(join) => self::join(shared, caller, holdings, join).await,
        Request::Refresh { access_token } => refresh(shared, caller, holdings, access_token).await,
    }
}

/// Keeps the credential a successful resolution gave, when it resolved a user with a token.
fn hold(
    shared: &Shared,
    holdings: &mut SessionCredentials,
    purpose: Purpose,
    endpoint: &str,
    token: Option<String>,
    resolution: Option<&Resolution>,
) {
    let (Some(user), Some(token)) = (resolution, token) else {
        return;
    };
    let (Ok(token), Some(fingerprint)) = (
        AccessToken::new(token.clone()),
        shared.resolver.fingerprint(endpoint, &token),
    ) else {
        return;
    };
    holdings.hold(Credential::new(purpose, endpoint, token, fingerprint, user));
}

/// A join: the room by its id, its own authUrl, then the resolution; the player enters it.
async fn join(
    shared: &Shared,
    caller: Caller,
    holdings: &mut SessionCredentials,
    join: JoinMessage,
) -> Reply {
    let connection = caller.connection;
    let JoinMessage { args, access_token } = join;
    let Some(room) = shared.rooms.iter().find(|r| r.id == args.room_id) else {
        tracing::info!(
            connection,
            request = "join",
            outcome = ROOM_NOT_FOUND,
            "join refused"
        );
        return refusal(
            ROOM_NOT_FOUND,
            "this server has no room with that roomId; search rooms again",
            false,
        )
        .into();
    };
    if !room.accepts(&args.auth_url) {
        let outcome = ErrorCode::AuthUrlNotAllowed.as_str();
        tracing::info!(connection, request = "join", room = %room.id, outcome, "join refused: authUrl is not the room's own");
        return refusal(
            outcome,
            "the join's authUrl is not the room's own; send the authUrl that SearchRoom gave for this room",
            false,
        )
        .into();
    }
    let req = JoinRequest {
        room_id: room.id.clone(),
        auth_url: room.auth_url.clone(),
        access_token: access_token.clone(),
    };
    match shared.resolver.resolve_join_in_full(&req).await {
        Ok(identity) => {
            let user_id = identity.as_ref().map(|u| u.id);
            tracing::info!(connection, request = "join", room = %room.id, outcome = "ok", user_id, "joined");
            let endpoint = room
                .endpoint
                .as_deref()
                .or(shared.resolver.default_endpoint().map(|e| e.as_str()));
            if let Some(endpoint) = endpoint {
                hold(
                    shared,
                    holdings,
                    Purpose::Join,
                    endpoint,
                    access_token,
                    identity.as_ref(),
                );
            }
            let user = player_of(identity.as_ref());
            shared.enter(connection, &room.id, Identity::from(identity));
            Reply::admitted(encode(&ServerMessage::Joined {
                room_id: room.id.clone(),
                user,
            }))
        }
        Err(e) => resolve_refusal(shared, caller, "join", &e).into(),
    }
}

/// A refresh: the new token, resolved at the endpoint of every credential the session holds,
/// must vouch for the same user; then it replaces their tokens. Another user ends the session
/// (`refresh_mismatch`); a token the API refuses is refused, and the session may try again.
async fn refresh(
    shared: &Shared,
    caller: Caller,
    holdings: &mut SessionCredentials,
    token: Option<String>,
) -> Reply {
    let connection = caller.connection;
    if holdings.credentials.is_empty() {
        return refusal(
            BAD_REQUEST,
            "nothing to refresh: connect or join with a token first",
            false,
        )
        .into();
    }
    let token = token.unwrap_or_default();
    let mut refreshed = Vec::with_capacity(holdings.credentials.len());
    for credential in &holdings.credentials {
        let user = match shared
            .resolver
            .resolve_in_full(&credential.endpoint, &token)
            .await
        {
            Ok(user) => user,
            Err(e) => return resolve_refusal(shared, caller, "refresh", &e).into(),
        };
        if user.id != credential.user_id {
            tracing::info!(
                connection,
                request = "refresh",
                outcome = REFRESH_MISMATCH,
                "refresh refused"
            );
            return Reply {
                message: refusal(
                    REFRESH_MISMATCH,
                    "the new token belongs to another user; closing",
                    false,
                ),
                close: true,
                admitted: false,
            };
        }
        refreshed.push((credential.purpose, credential.endpoint.clone(), user));
    }
    let player = refreshed.first().map(|(_, _, user)| Player {
        id: user.id,
        name: user.name.clone(),
    });
    for (purpose, endpoint, user) in refreshed {
        hold(
            shared,
            holdings,
            purpose,
            &endpoint,
            Some(token.clone()),
            Some(&user),
        );
    }
    tracing::info!(connection, request = "refresh", outcome = "ok", "refreshed");
    encode(&ServerMessage::Refreshed { user: player }).into()
}

/// The refusal of a request whose resolution failed, logged with its outcome.
fn resolve_refusal(
    shared: &Shared,
    caller: Caller,
    request: &'static str,
    e: &ResolveError,
) -> Vec<u8> {
    let outcome = e.code().as_str();
    let connection = caller.connection;
    tracing::info!(connection, request, outcome, "{request} refused");
    if let (ErrorCode::TokenRejected, Some(peer)) = (e.code(), caller.peer) {
        shared.rejections.record(peer);
    }
    refusal(outcome, &e.to_string(), e.is_retryable())
}

/// `rate_limited` for a request that would resolve a token, from an address whose tokens were
/// rejected past its budget: answered without a call to the integrator.
fn rate_limited(shared: &Shared, caller: Caller, request: &Request) -> Option<Vec<u8>> {
    let resolves = matches!(
        request,
        Request::Connect { .. } | Request::Join(_) | Request::Refresh { .. }
    );
    if !resolves {
        return None;
    }
    let wait = shared.rejections.exhausted(&caller.peer?)?;
    let connection = caller.connection;
    tracing::info!(
        connection,
        outcome = RATE_LIMITED,
        "refused: too many rejected tokens"
    );
    let msg = format!(
        "too many rejected tokens from this address; try again in {} s",
        wait.as_secs().max(1)
    );
    Some(refusal(RATE_LIMITED, &msg, true))
}
