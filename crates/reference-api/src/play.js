// The player's side of the login-token-join flow in a browser: log in to the integrator (this page's origin),
// take an access token, open the game server's WebSocket, connect, search rooms, read each
// room's authUrl by the client rule (nodeProperties.authUrl, or ""), and join. The token never leaves memory: it is not shown,
// stored, or put in a URL.
//
// ?autoplay=1&username=U&password=P&game=WS_URL[&room=ID][&forge_auth_url=URL] runs the flow
// by itself and writes `joined <roomId> as <name> (<id>)` or `error <code>` into #result.
//
// The page opens only the game servers the API lists (`serve-api --play-game-url`, in the
// page's <meta name="game-urls">, the first the default): a link naming another one would
// otherwise log the player in here and hand the token to whoever runs it. The page's
// Content-Security-Policy says the same to the browser.
"use strict";

// What each code means to a player.
const MEANINGS = {
  invalid_credentials: "The username or the password is wrong.",
  banned: "This account is banned.",
  token_missing: "You are not logged in: log in again.",
  token_malformed: "The game got a broken login: log in again.",
  token_rejected: "Your login has expired or was revoked: log in again.",
  auth_url_not_allowed: "This room's login server is not one the game trusts.",
  auth_unavailable: "The login service is unreachable right now: try again in a moment.",
  auth_timeout: "The login service is too slow right now: try again in a moment.",
  auth_bad_response: "The login service answered something the game cannot read.",
  overloaded: "The game is busy: try again in a moment.",
  room_not_found: "That room does not exist any more: search again.",
  bad_request: "The game did not understand a message.",
  line_too_long: "A message was too long.",
  idle_timeout: "You were idle too long.",
  login_timeout: "The game closed the connection before you logged in: try again.",
  rate_limited: "Too many refused logins from your network: try again in a minute.",
  server_busy: "The game server is full: try again in a moment.",
  origin_not_allowed: "This page may not open game sessions.",
  session_expired: "Your session expired: log in again.",
  refresh_mismatch: "The new login belongs to someone else.",
  shutdown: "The game server is restarting: reconnect in a moment.",
  revoked: "Your login was revoked.",
  unreachable: "The game server cannot be reached.",
  game_url_not_allowed: "This page may not open that game server: nobody was logged in.",
};

/// A failure of the flow, with its code.
class Refused extends Error {
  constructor(code, message) {
    super(message || code);
    this.code = code;
  }
}

function step(text) {
  const li = document.createElement("li");
  li.textContent = text;
  document.getElementById("steps").append(li);
}

function show(result, explanation) {
  document.getElementById("result").textContent = result;
  document.getElementById("explanation").textContent = explanation || "";
}

/// POST to this page's integrator API; the parsed JSON answer, or a Refused with its code.
async function post(path, body) {
  const init = { method: "POST", credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Refused(answer.error || "http_" + response.status);
  }
  return answer;
}

/// The seed's rule: nodeProperties.authUrl as a string ("" when absent or null).
function authUrlOf(room) {
  const props = room.nodeProperties;
  if (!props || !("authUrl" in props) || props.authUrl === null) {
    return "";
  }
  const value = props.authUrl;
  return typeof value === "string" ? value : JSON.stringify(value);
}

/// A game server session over WebSocket: one JSON message per text frame, answered in order.
class GameSession {
  static open(url) {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url);
      const session = new GameSession(socket);
      socket.onopen = () => resolve(session);
      socket.onerror = () => reject(new Refused("unreachable"));
    });
  }

  constructor(socket) {
    this.socket = socket;
    this.waiting = [];
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      const next = this.waiting.shift();
      if (next) {
        next.resolve(message);
      }
    };
    socket.onclose = () => {
      for (const next of this.waiting.splice(0)) {
        next.reject(new Refused("unreachable"));
      }
    };
  }

  /// Sends `message`; its answer, or a Refused when the server refused it.
  ask(message) {
    return new Promise((resolve, reject) => {
      this.waiting.push({
        resolve: (answer) => {
          if (answer.type === "error" || answer.type === "shutdown" || answer.type === "revoked") {
            reject(new Refused(answer.error || answer.type, answer.message));
          } else {
            resolve(answer);
          }
        },
        reject,
      });
      this.socket.send(JSON.stringify(message));
    });
  }
}

function listRooms(rooms) {
  const body = document.querySelector("#rooms tbody");
  body.replaceChildren();
  for (const room of rooms) {
    const row = body.insertRow();
    row.insertCell().textContent = room.roomId;
    row.insertCell().textContent = authUrlOf(room) || "(none: the default)";
  }
}

/// The game servers this page may open, as the API lists them; the first is the default.
function allowedGames() {
  const meta = document.querySelector('meta[name="game-urls"]');
  try {
    const urls = JSON.parse(meta ? meta.content : "[]");
    return Array.isArray(urls) ? urls.filter((u) => typeof u === "string") : [];
  } catch {
    return [];
  }
}

/// The whole flow; the result line. Nobody is logged in for a game server not listed.
async function play({ username, password, game, room, forgeAuthUrl }) {
  if (!allowedGames().includes(game)) {
    throw new Refused("game_url_not_allowed");
  }
  const me = await post("/api/login", { username, password });
  step(`logged in as ${me.name} (${me.id})`);
  const { access_token: token } = await post("/api/access_token");
  step(`took an access token (${token.length} characters, never shown)`);
  const session = await GameSession.open(game);
  step(`opened ${game}`);
  const connected = await session.ask({ type: "connect", access_token: token });
  step(`connected as ${connected.user ? connected.user.name : "a guest"}`);
  const { rooms } = await session.ask({ type: "search_room" });
  listRooms(rooms);
  step(`found ${rooms.length} rooms`);
  const target =
    rooms.find((r) => r.roomId === room) ||
    rooms.find((r) => authUrlOf(r) !== "") ||
    rooms[0];
  if (!target) {
    throw new Refused("room_not_found");
  }
  const authUrl = forgeAuthUrl || authUrlOf(target);
  const joined = await session.ask({
    type: "join",
    host: target.host,
    port: target.port,
    protocol: target.protocol,
    roomId: target.roomId,
    authUrl,
    memberProperties: {},
    access_token: token,
  });
  const user = joined.user || { name: "a guest", id: "-" };
  return `joined ${joined.room_id} as ${user.name} (${user.id})`;
}

async function run(settings) {
  show("playing…");
  document.getElementById("steps").replaceChildren();
  try {
    show(await play(settings), "You are in the room.");
  } catch (error) {
    const code = error instanceof Refused ? error.code : "unreachable";
    show(`error ${code}`, MEANINGS[code] || "Something went wrong.");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const params = new URLSearchParams(location.search);
  const field = (id) => document.getElementById(id);
  if (params.has("game")) {
    field("game").value = params.get("game");
  }
  if (!field("game").value) {
    field("game").value = allowedGames()[0] || "";
  }
  const settings = () => ({
    username: field("username").value,
    password: field("password").value,
    game: field("game").value,
    room: params.get("room"),
    forgeAuthUrl: params.get("forge_auth_url"),
  });
  field("login").addEventListener("submit", (event) => {
    event.preventDefault();
    run(settings());
  });
  if (params.get("autoplay") === "1") {
    if (params.has("username")) {
      field("username").value = params.get("username");
    }
    if (params.has("password")) {
      field("password").value = params.get("password");
    }
    run(settings());
  }
});
