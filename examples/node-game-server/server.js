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
// that happened meanwhile is missed.
//
//   SIDECAR_URL=http://127.0.0.1:7360 PORT=7350 node server.js
'use strict';

const net = require('node:net');
const crypto = require('node:crypto');

const SIDECAR = process.env.SIDECAR_URL || 'http://127.0.0.1:7360';
const PORT = Number(process.env.PORT || 7350);
const MAX_LINE = 16 * 1024;

/** Open sockets by session id. */
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
    sessions.set(id, socket);
    return send(socket, { type: 'connected', user: answer.user });
  }
  // The sidecar's code says why (token_rejected, refresh_mismatch, auth_unavailable, ...).
  send(socket, { type: 'error', error: answer.error });
  if (status === 401 || status === 409) socket.end();
}

/** Acts on one event of the sidecar. */
function onEvent(kind, data) {
  const socket = sessions.get(data.session);
  if (kind === 'resync') {
    // The stream was away longer than the sidecar remembers: ask every player to log in again.
    for (const open of sessions.values()) send(open, { type: 'reauth_required' });
    return;
  }
  if (!socket) return;
  if (kind === 'revoked') {
    sessions.delete(data.session);
    send(socket, { type: 'revoked', reason: data.reason });
    socket.end();
  } else if (kind === 'reauth_required') {
    send(socket, { type: 'reauth_required', within_ms: data.within_ms });
  }
}

/** Follows GET /v1/events for as long as the process runs, coming back with Last-Event-ID. */
async function followEvents() {
  let lastId = null;
  for (;;) {
    try {
      const headers = lastId === null ? {} : { 'last-event-id': String(lastId) };
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
          const data = field('data');
          if (data === undefined) continue; // a keep-alive comment
          lastId = Number(field('id'));
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
    if (sessions.delete(id)) {
      fetch(`${SIDECAR}/v1/sessions/${id}`, { method: 'DELETE' }).catch(() => {});
    }
  });
  socket.on('error', () => {});
});

server.listen(PORT, '127.0.0.1', () => {
  console.log(`node game server listening on 127.0.0.1:${server.address().port}`);
  followEvents();
});
