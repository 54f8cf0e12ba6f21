// A game server in Node.js that resolves its players through the token-resolver sidecar:
// no Rust, no dependencies (Node 18 or later: the built-in fetch and net).
//
// Players connect over TCP and send JSON lines, as to the Rust game server:
//   {"type":"connect","access_token":"..."}   ->  {"type":"connected","user":{"id":..,"name":..}}
// Each connection is a session of the sidecar, named by its id. The server listens to the
// sidecar's events (GET /v1/events, Server-Sent Events): on `revoked` it tells the player and
// closes the socket; on `reauth_required` it asks the player for a new token, which the player
// sends as another connect (the sidecar's refresh). A closed socket is forgotten
// (DELETE /v1/sessions/{id}). A lost event stream comes back with Last-Event-ID, so nothing
// that happened meanwhile is missed; when the sidecar cannot vouch for that (it restarted, or
// the stream was away longer than it remembers) it sends `resync` first, and the server
// resolves every player it holds again, within RESYNC_WITHIN_MS, closing those rejected (and
// those it could not check by then).
//
//   SIDECAR_URL=http://127.0.0.1:7360 PORT=7350 node server.js
'use strict';

const net = require('node:net');
const crypto = require('node:crypto');

const SIDECAR = process.env.SIDECAR_URL || 'http://127.0.0.1:7360';
const PORT = Number(process.env.PORT || 7350);
const MAX_LINE = 16 * 1024;
/** How long a resync may take: a player not confirmed by then is closed. */
const RESYNC_WITHIN_MS = Number(process.env.RESYNC_WITHIN_MS || 30000);
/** Resolves under way at once during a resync. */
const RESYNC_PARALLEL = 8;
/** Longest wait for one answer of the sidecar. */
const CALL_TIMEOUT_MS = 5000;

/** Open players by session id: their socket and the token they were resolved with. */
const sessions = new Map();

/** Sends one JSON message on `socket`. */
function send(socket, message) {
  if (!socket.destroyed) socket.write(JSON.stringify(message) + '\n');
}

/** Resolves `token` for the session `id` at the sidecar: [status, answer]. */
async function resolve(id, token) {
  const response = await fetch(`${SIDECAR}/v1/resolve`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ access_token: token, session: id }),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  return [response.status, await response.json()];
}

/** Handles one line from a player. */
async function onLine(id, socket, line) {
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    return send(socket, { type: 'error', error: 'bad_request' });
  }
  if (message.type !== 'connect' || typeof message.access_token !== 'string') {
    return send(socket, { type: 'error', error: 'bad_request' });
  }
  const [status, answer] = await resolve(id, message.access_token);
  if (status === 200) {
    if (socket.destroyed) {
      // Gone while it was resolved: the sidecar must not keep it.
      return forget(id);
    }
    sessions.set(id, { socket, token: message.access_token });
    return send(socket, { type: 'connected', user: answer.user });
  }
  // The sidecar's code says why (token_rejected, refresh_mismatch, auth_unavailable, ...).
  send(socket, { type: 'error', error: answer.error });
  if (status === 401 || status === 409) socket.end();
}

/** Tells the sidecar to forget the session `id`. */
function forget(id) {
  fetch(`${SIDECAR}/v1/sessions/${id}`, { method: 'DELETE' }).catch(() => {});
}

/** Closes the player of session `id`, telling it `reason`. */
function close(id, reason) {
  const player = sessions.get(id);
  if (!player) return;
  sessions.delete(id);
  send(player.socket, { type: 'revoked', reason });
  player.socket.end();
}

/** The resync under way: a newer one replaces it. */
let resyncs = 0;

/**
 * Resolves every player held again, with its session, as the sidecar asks after `resync`:
 * those rejected are closed, and so is any not confirmed within RESYNC_WITHIN_MS (the sidecar
 * or the integrator unreachable that long).
 */
async function resync() {
  const generation = ++resyncs;
  const deadline = Date.now() + RESYNC_WITHIN_MS;
  const pending = [...sessions.keys()];
  console.error(`resync: resolving ${pending.length} players again`);
  const worker = async () => {
    while (pending.length > 0 && generation === resyncs) {
      const id = pending.shift();
      const player = sessions.get(id);
      if (!player) continue;
      if (Date.now() >= deadline) {
        close(id, 'unverified');
        continue;
      }
      let status;
      try {
        [status] = await resolve(id, player.token);
      } catch {
        status = 0;
      }
      if (sessions.get(id) !== player) continue; // gone or replaced meanwhile
      if (status === 200) continue;
      if (status === 401 || status === 403 || status === 409) {
        close(id, 'revoked');
      } else {
        // Not answered: try again, within the deadline.
        pending.push(id);
        await new Promise((resume) => setTimeout(resume, 1000));
      }
    }
  };
  await Promise.all(Array.from({ length: RESYNC_PARALLEL }, worker));
}

/** Acts on one event of the sidecar. */
function onEvent(kind, data) {
  if (kind === 'resync') {
    // The sidecar cannot say what happened meanwhile: check every player again.
    resync().catch((error) => console.error(`resync failed: ${error.message}`));
    return;
  }
  const player = sessions.get(data.session);
  if (!player) return;
  if (kind === 'revoked') {
    close(data.session, data.reason);
  } else if (kind === 'reauth_required') {
    send(player.socket, { type: 'reauth_required', within_ms: data.within_ms });
  }
}

/**
 * Follows GET /v1/events for as long as the process runs, coming back with Last-Event-ID (an
 * opaque string: the sidecar's process and its place in it).
 */
async function followEvents() {
  let lastId = null;
  for (;;) {
    try {
      const headers = lastId === null ? {} : { 'last-event-id': lastId };
      const response = await fetch(`${SIDECAR}/v1/events`, { headers });
      const decoder = new TextDecoder();
      let buffer = '';
      for await (const chunk of response.body) {
        buffer += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const field = (name) =>
            block.split('\n').find((l) => l.startsWith(name + ':'))?.slice(name.length + 1).trim();
          // An id alone (no data) is the sidecar's place, sent when the stream opens.
          const id = field('id');
          if (id !== undefined) lastId = id;
          const data = field('data');
          if (data === undefined) continue; // a keep-alive comment, or an id alone
          onEvent(field('event'), JSON.parse(data));
        }
      }
    } catch (error) {
      console.error(`event stream lost (${error.message}); coming back`);
    }
    await new Promise((resume) => setTimeout(resume, 500));
  }
}

const server = net.createServer((socket) => {
  const id = crypto.randomUUID();
  let buffer = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk) => {
    buffer += chunk;
    if (buffer.length > MAX_LINE) return socket.destroy();
    let end;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      onLine(id, socket, line).catch(() => send(socket, { type: 'error', error: 'auth_unavailable' }));
    }
  });
  socket.on('close', () => {
    if (sessions.delete(id)) forget(id);
  });
  socket.on('error', () => {});
});

server.listen(PORT, '127.0.0.1', () => {
  console.log(`node game server listening on 127.0.0.1:${server.address().port}`);
  followEvents();
});
