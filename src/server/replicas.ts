// Where a deployment's `status.remote` points: Keel itself, one base per location
// (`{Keel}/-remote/{location}`, stored Keel-relative), so that the clients' replica calls come back here:
//   GET {remote}/replicas/org/{org}/gvc/{gvc}/workload/{w}   the replica names (strings) running there
// With the runc runtime, exec, connect and cp are WebSockets to {remote}/exec speaking the CLI's
// terminal protocol: a first JSON message names the replica, the command and the caller's key;
// stdin follows (one binary message, or `{type:'data'}` JSON messages with a TTY); the command's
// output comes back as messages, and a failure, or a non-zero exit, ends with the line
// `Failed to create terminal session: command terminated with exit code N` (the CLI exits with N).
// port-forward asks {remote}/portforward-ticket and streams each connection on {remote}/portforward
// (port-forward.ts). The simulation runs no containers, so there these calls answer a clear error.
import { LOGS_PREFIX } from './logs-api.js';
import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ChildProcess } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import { WebSocketServer, type WebSocket } from 'ws';
import { identity } from '../auth/principal.js';
import type { Runtime } from '../runtime/types.js';
import type { FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { deploymentKey, REMOTE_PREFIX, replicasOf, withResolvedRemote } from '../reconcile/views.js';
import type { Resources } from '../resources/service.js';
import type { Store } from '../store/types.js';
import type { Config } from '../config.js';
import { refusedRoute } from './docs.js';
import { sendError } from './errors.js';
import { coreBase } from '../public-url.js';
import { rateLimited, streamPrincipal, type TerminalAccess } from './stream-sign-in.js';
import { mountPortForward } from './port-forward.js';

const METHODS: HTTPMethods[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** The largest stdin a terminal session takes in one message (cp uploads come as one). */
const TERMINAL_MAX_PAYLOAD = 256 * 1024 * 1024;

export function mountReplicas(app: FastifyInstance, resources: Resources, store: Store, config: Config, access: TerminalAccess): void {
  // Deployments store their remote Keel-relative; responses resolve it against the address the
  // caller reached Keel at (as far as it can be trusted: see public-url.ts), which the CLI then
  // calls (and opens its WebSockets to).
  app.addHook('preSerialization', async (request, _reply, payload) => {
    const url = request.routeOptions.url;
    if (url !== '/org/:org/gvc/:gvc/workload/:name/deployment' && url !== '/org/:org/gvc/:gvc/workload/:name/deployment/:location') return payload;
    const body = payload as { kind?: string; items?: unknown[]; status?: unknown };
    const base = coreBase(config, request);
    const resolved = (d: unknown) => ((d as { kind?: string })?.kind === 'deployment' ? withResolvedRemote(d as { status?: unknown }, base) : d);
    return body?.kind === 'list' && Array.isArray(body.items) ? { ...body, items: body.items.map(resolved) } : resolved(payload);
  });

  const workload = findKind('workload')!;
  app.get(`${REMOTE_PREFIX}/:location/replicas/*`, async (request) => {
    const { location } = request.params as { location: string };
    const path = (request.params as { '*': string })['*'];
    // The CLI joins the remote and a self link with or without a slash between them.
    const match = /^\/*org\/([^/]+)\/gvc\/([^/]+)\/workload\/([^/]+)\/?$/.exec(path);
    if (!match) throw ApiError.notFound(`no such path: ${REMOTE_PREFIX}/${location}/replicas/${path}; replicas are listed at ${REMOTE_PREFIX}/LOCATION/replicas/org/ORG/gvc/GVC/workload/WORKLOAD`);
    const [org, gvc, name] = match.slice(1).map(decodeURIComponent);
    // Reading the workload checks that the caller may view it (403/404 as a GET of it would).
    await resources.get(request.principal, workload, { org, gvc }, name);
    const deployment = await store.get(deploymentKey(org, gvc, name, location));
    if (!deployment) throw ApiError.notFound(`workload '${name}' has no deployment in location '${location}'`);
    // The reconciler keeps the replicas running there (a cron workload's: its active runs) in the deployment's status.
    return { kind: 'list', itemKind: 'replica', items: replicasOf(deployment.data), links: [{ rel: 'self', href: request.url.split('?')[0] }] };
  });

  // exec/connect open a WebSocket to {remote}/exec (credentials travel inside the stream, so these
  // routes take none), port-forward asks {remote}/portforward-ticket (port-forward.ts) and streams on {remote}/portforward.
  const refusal = (what: string) =>
    `${what} ${what === 'port-forward' ? 'is' : 'are'} not available: Keel simulates replicas and runs no containers, so there is no process to ${what === 'port-forward' ? 'forward a port to' : 'run a command in'}`;
  const refuse = (path: string, what: string) => async (request: FastifyRequest, reply: FastifyReply) =>
    sendError(reply, request, ApiError.badRequest(app.runtime?.kind === 'runc' ? `${REMOTE_PREFIX}/LOCATION/${path} is a WebSocket (the CLI's ${what}): open it with an upgrade` : refusal(what)));
  for (const [path, what] of [['exec', 'exec, connect and cp'], ['portforward', 'port-forward']]) {
    app.route({ method: METHODS, url: `${REMOTE_PREFIX}/:location/${path}`, config: { public: true }, schema: refusedRoute(refusal(what)), handler: refuse(path, what) });
  }
  const forwards = mountPortForward(app, store, access, config.bodyTimeoutMs, refusal('port-forward'));

  // `cpln workload run` creates a workload (its first container's env names who ran it), waits for
  // its replica, sleeps a minute and only then opens the terminal the simulation refuses: refused
  // at its first step instead, the CLI fails at once with the reason.
  // Callback style, and decided by the method first: this runs before every handler.
  app.addHook('preHandler', (request, _reply, done) => {
    if (request.method !== 'POST' || request.routeOptions.url !== '/org/:org/gvc/:gvc/workload' || app.runtime?.kind === 'runc') return done();
    const env = (request.body as { spec?: { containers?: Array<{ env?: Array<{ name?: unknown }> }> } } | undefined)?.spec?.containers?.[0]?.env;
    if (Array.isArray(env) && env.some((e) => e?.name === RUN_MARKER)) {
      return done(ApiError.badRequest(`cpln workload run is not available: ${refusal('exec, connect and cp').replace(/^.*?: /, '')}; it would create a workload, wait for a replica and then find nothing to run the command in (KEEL_RUNTIME=runc runs replicas)`));
    }
    done();
  });

  // The streams themselves are WebSockets. The clients print what the stream says and end on its
  // close: exec, connect and cp on a failed terminal session with its exit code (cp from a replica
  // on a tar error, hence the words `tar: cannot`), port-forward on a fatal port-forward error.
  const terminals = new WebSocketServer({ noServer: true, maxPayload: TERMINAL_MAX_PAYLOAD });
  const sessions = new Sessions(config.terminalSessionsPerPrincipal, config.maxTerminalSessions);
  // Until its first message names a key, a stream is its address's: a few at a time, each for at most bodyTimeoutMs.
  const unsigned = new Map<string, number>();
  app.addHook('onClose', async () => {
    for (const ws of terminals.clients) ws.terminate();
    terminals.close();
  });
  app.server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const what = /^\/-remote\/[^/?]+\/(exec|portforward)(\?|$)/.exec(request.url ?? '')?.[1];
    if (!what) {
      // The logs API serves its own upgrades; any other is answered rather than left hanging.
      if (!(request.url ?? '').startsWith(LOGS_PREFIX)) socket.end(`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${JSON.stringify({ status: 404, message: `no WebSocket is served at ${request.url}`, code: 'not_found', details: {}, id: '' })}`);
      return;
    }
    const key = request.headers['sec-websocket-key'];
    if (typeof key !== 'string') return void socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    const runtime = app.runtime;
    if (runtime && runtime.kind !== 'simulated') {
      const location = decodeURIComponent(/^\/-remote\/([^/?]+)\//.exec(request.url ?? '')![1]);
      const ip = request.socket.remoteAddress ?? '';
      const waiting = unsigned.get(ip) ?? 0;
      if (waiting >= config.maxBodiesPerAddress) {
        const body = JSON.stringify({ status: 429, message: `this address already has ${waiting} terminal and port-forward streams that have not sent their key (maxBodiesPerAddress: ${config.maxBodiesPerAddress}); retry after 1 s`, code: 'rate_limited', details: { retryAfter: 1 }, id: randomUUID() });
        return void socket.end(`HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
      }
      unsigned.set(ip, waiting + 1);
      let signed = false;
      const sign = () => {
        if (signed) return;
        signed = true;
        const left = (unsigned.get(ip) ?? 1) - 1;
        if (left > 0) unsigned.set(ip, left);
        else unsigned.delete(ip);
      };
      socket.once('close', sign);
      if (what === 'portforward') return forwards.upgrade(request, socket, head, runtime, location, ip, sign);
      terminals.handleUpgrade(request, socket, head, (ws) => terminal(ws, runtime, access, location, sessions, ip, config.bodyTimeoutMs, sign));
      return;
    }
    const messages =
      what === 'portforward'
        ? [`Port-forward error: ${JSON.stringify({ message: refusal('port-forward'), code: 0 })}`]
        : [`${refusal('exec, connect and cp')} (tar: cannot copy files either)\n`, 'Failed to create terminal session: command terminated with exit code 1'];
    refuseWebSocket(socket, key, messages);
  });
}

const FAILED = 'Failed to create terminal session: ';
/** The variable `cpln workload run` sets in its workload's first container (and nothing else sets). */
const RUN_MARKER = 'XCPLN_RUN_BY';
const DOWNLOAD_CLOSE_DELAY_MS = 250;

/** One terminal session: the request, its key checked, the command run in the replica, its output and exit code sent back. */
function terminal(ws: WebSocket, runtime: Runtime, access: TerminalAccess, location: string, sessions: Sessions, ip: string, firstMessageMs: number, signed: () => void): void {
  let child: ChildProcess | undefined;
  let tty = false;
  let countBytes = false;
  const fail = (line: string) => {
    if (ws.readyState === ws.OPEN) ws.send(line);
    ws.close(1000);
  };
  ws.on('error', () => child?.kill('SIGKILL'));
  ws.on('close', () => child?.kill('SIGKILL'));
  const unsignedFor = setTimeout(() => fail(`${FAILED}the request did not arrive within ${firstMessageMs} ms (bodyTimeoutMs); command terminated with exit code 1`), firstMessageMs);
  ws.once('close', () => clearTimeout(unsignedFor));
  ws.once('message', (data) => {
    clearTimeout(unsignedFor);
    signed();
    void (async () => {
      let asked: { token?: string; org?: string; gvc?: string; pod?: string; container?: string; command?: unknown; shell?: string; tty?: boolean; writeReceivedBytes?: boolean };
      try {
        asked = JSON.parse(data.toString());
      } catch {
        return fail(`${FAILED}the first message must be the JSON request; command terminated with exit code 1`);
      }
      const { org, gvc, pod } = asked;
      if (typeof org !== 'string' || typeof gvc !== 'string' || typeof pod !== 'string') return fail(`${FAILED}the request names no org, gvc and pod; command terminated with exit code 1`);
      const command = Array.isArray(asked.command) ? asked.command.map(String) : [String(asked.shell ?? 'sh')];
      if (command.length === 0 || command[0] === '') return fail(`${FAILED}no command to run; command terminated with exit code 1`);
      // Counted like a failed sign-in over HTTP: past the limit the answer is 429's, whatever the key.
      const principal = await streamPrincipal(access, ip, asked.token, org);
      if (principal instanceof Error) {
        if (rateLimited(principal)) return fail(`Rate limited (${principal.status} ${principal.code}, Retry-After: ${String(principal.details.retryAfter)}): ${principal.message}; exit code 1`);
        return fail(`Unauthorized: ${principal.message}; exit code 1`);
      }
      const found = runtime.exec({ org, gvc, location, replica: pod, container: asked.container }, command, asked.tty === true);
      // `cpln workload connect` asks for a shell and no command; exec and cp name their command.
      const permission = Array.isArray(asked.command) ? 'exec' : 'connect';
      // The permission is checked before anything about the replica is told, and a refusal reads the
      // same whether the replica is there or not: a key cannot probe which replicas run. A replica
      // that is not there is checked as a workload of its name, so only a key that may open sessions
      // in every workload of the GVC (or in one of that name) learns that it is not running.
      try {
        await access.auth.check(principal, permission, findKind('workload')!, { org, gvc, name: found.workload ?? pod });
      } catch {
        return fail(`Unauthorized: ${principal.link} may not ${permission} in replica ${pod} of GVC ${gvc}; exit code 1`);
      }
      if ('error' in found) return fail(`${FAILED}${found.error}; command terminated with exit code 1`);
      if (ws.readyState !== ws.OPEN) return;
      const who = identity(principal);
      const refused = sessions.admit(who);
      if (refused) return fail(`${FAILED}${refused}; command terminated with exit code 1`);
      ws.once('close', () => sessions.release(who));
      tty = asked.tty === true;
      countBytes = asked.writeReceivedBytes === true;
      const process = (child = found.start());
      for (const [message, isBinary] of early.splice(0)) toStdin(message, isBinary);
      const send = (chunk: Buffer) => ws.readyState === ws.OPEN && ws.send(chunk);
      process.stdout!.on('data', send);
      // cp from a replica feeds every message to its tar reader, so there tar's own notes on stderr
      // ("removing leading '/'") would corrupt the archive: they are left out, and a failure still
      // shows as the exit code.
      const download = command[0] === 'tar' && command[1] === 'cf' && command[2] === '-';
      if (download) process.stderr!.resume();
      else process.stderr!.on('data', send);
      process.stdin!.on('error', () => undefined);
      process.on('error', (err) => fail(`${FAILED}${err.message}; command terminated with exit code 1`));
      process.on('close', (code, signal) => {
        child = undefined;
        const exit = code ?? (signal ? 128 + (osConstants.signals[signal] ?? 0) : 1);
        if (exit !== 0) fail(`${FAILED}command terminated with exit code ${exit}`);
        // cp from a replica exits the moment the stream closes, while the files it extracts may
        // still be on their way to disk: the close waits a moment so they land.
        else if (download) setTimeout(() => ws.close(1000), DOWNLOAD_CLOSE_DELAY_MS).unref();
        else ws.close(1000);
      });
    })();
    ws.on('message', (message, isBinary) => {
      if (!child) {
        if (early.length < 64) early.push([message as Buffer, isBinary]);
        return;
      }
      toStdin(message as Buffer, isBinary);
    });
  });
  /** Stdin that came before the command started. */
  const early: Array<[Buffer, boolean]> = [];
  const toStdin = (message: Buffer, isBinary: boolean) => {
    const stdin = child?.stdin;
    if (!stdin || stdin.writableEnded) return;
    if (!tty && isBinary) {
      // Without a TTY the CLI sends its whole stdin as one (fragmented) message, ended by its close.
      stdin.end(message);
      // cp's upload counts the bytes the replica took to tell that it is complete.
      if (countBytes && ws.readyState === ws.OPEN) ws.send(String(message.length));
      return;
    }
    try {
      const m = JSON.parse(message.toString()) as { type?: string; buffer?: number[] };
      if (m.type === 'data' && Array.isArray(m.buffer)) stdin.write(Buffer.from(m.buffer));
    } catch {
      // resize and other messages a pipe has no use for
    }
  };
}

/**
 * Open terminal sessions, per principal and in all: each holds a process in a replica and a
 * stream, so one principal cannot take them all (KEEL_TERMINAL_SESSIONS_PER_PRINCIPAL,
 * KEEL_MAX_TERMINAL_SESSIONS).
 */
class Sessions {
  private readonly open = new Map<string, number>();
  private total = 0;

  constructor(
    private readonly perPrincipal: number,
    private readonly max: number,
  ) {}

  /** Counts a new session of `who`, or says why it is refused. */
  admit(who: string): string | undefined {
    const mine = this.open.get(who) ?? 0;
    if (mine >= this.perPrincipal) return `too many terminal sessions: this principal already has ${mine} open (exec, connect and cp; at most ${this.perPrincipal}, KEEL_TERMINAL_SESSIONS_PER_PRINCIPAL); end one and try again`;
    if (this.total >= this.max) return `too many terminal sessions: ${this.total} are open on this Keel (at most ${this.max}, KEEL_MAX_TERMINAL_SESSIONS); try again later`;
    this.open.set(who, mine + 1);
    this.total++;
    return undefined;
  }

  release(who: string): void {
    const mine = (this.open.get(who) ?? 1) - 1;
    if (mine > 0) this.open.set(who, mine);
    else this.open.delete(who);
    this.total--;
  }
}

/**
 * Accepts a WebSocket handshake and sends `messages`; whatever the client sends is read and
 * dropped, and once it has been quiet for a moment (an upload has ended) the stream is closed
 * (1011). A client that never goes quiet is cut off after a bound.
 */
function refuseWebSocket(socket: Duplex, key: string, messages: string[]): void {
  const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  socket.on('error', () => undefined);
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  for (const message of messages) socket.write(frame(0x1, Buffer.from(message)));
  let quiet: NodeJS.Timeout | undefined;
  const close = () => {
    clearTimeout(quiet);
    clearTimeout(bound);
    socket.end(frame(0x8, Buffer.from([0x03, 0xf3])));
    setTimeout(() => socket.destroy(), 1000).unref();
  };
  const bound = setTimeout(close, 10_000);
  const wait = () => {
    clearTimeout(quiet);
    quiet = setTimeout(close, 400);
  };
  socket.on('data', wait);
  socket.on('close', () => {
    clearTimeout(quiet);
    clearTimeout(bound);
  });
  wait();
}

/** One unmasked, final WebSocket frame (servers do not mask). */
function frame(opcode: number, payload: Buffer): Buffer {
  const header = payload.length < 126 ? Buffer.from([0x80 | opcode, payload.length]) : Buffer.from([0x80 | opcode, 126, payload.length >> 8, payload.length & 0xff]);
  return Buffer.concat([header, payload]);
}
