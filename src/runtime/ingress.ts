// Keel's ingress (KEEL_INGRESS_PORT): workload traffic to ready replicas, round robin. A request
// names its workload by Host, the endpoint's first DNS label (`WORKLOAD-GVCALIAS.localhost:PORT`,
// what status.endpoint says), or, for a client that cannot set Host, by path:
// `/-workload/ORG/GVC/WORKLOAD/rest…` reaches `/rest…` of the workload; a Host that is a domain's
// name goes by that domain's routes (domains.ts). Bodies stream both ways;
// an Upgrade (WebSocket) becomes a byte pipe to the replica. It measures each deployment's traffic
// (requests in flight, requests a second) for autoscaling, and holds a request for a deployment
// with no ready replica that may wake (one scaled to zero) until a replica is ready.
import { Agent, STATUS_CODES, createServer, request, type ClientRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { externalRefusal, type FirewallMode } from './firewall.js';

/** Where a request goes (and the headers its route sets), why it cannot go anywhere, or undefined: nothing is served at that host or path. */
export type Route = (
  host: string | undefined,
  path: string,
  hostname: string,
) =>
  | {
      key: string;
      targets: string[];
      port: number;
      path: string;
      headers?: Record<string, string>;
      /** How long a request may wait for a ready replica (0: a 503 at once). */
      holdMs: number;
      /** The workload's firewallConfig, checked against the client (firewall.ts), and the workload's name for the refusal. */
      firewall: { config?: Record<string, any>; workload: string };
    }
  | { status: number; message: string }
  | undefined;

/** How long a client may take to send a request's headers; its body may stream for as long as the replica reads it. */
export const HEADERS_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_CONNECTIONS = 4096;

export interface IngressBounds {
  /** Client connections open at once (KEEL_INGRESS_MAX_CONNECTIONS); more are closed as they come. */
  maxConnections?: number;
  headersTimeoutMs?: number;
  /**
   * Behind HAProxy (haproxy.ts), on a Unix socket only it connects to: the client's address is the
   * `x-keel-client` header HAProxy sets, not the socket's peer.
   */
  behindProxy?: boolean;
  /** `open`: workloads' external firewalls are not applied (KEEL_FIREWALL). */
  firewall?: FirewallMode;
}

/** The header HAProxy names the client's address in, to Keel's ingress behind it. */
export const CLIENT_HEADER = 'x-keel-client';

/** Requests held for one deployment at most, and for all of them: past that, a 503 at once. */
const HELD_MAX = 100;
const HELD_TOTAL_MAX = 1_000;
/** The longest window traffic is asked about over (the longest scaleToZeroDelay). */
const WINDOW_MAX_S = 3_600;

interface Held {
  req: IncomingMessage;
  res: ServerResponse;
  timer: NodeJS.Timeout;
}

/** A deployment's traffic: requests in flight now and, per second, the most in flight and those that arrived. */
interface Load {
  inFlight: number;
  seconds: Array<{ second: number; peak: number; arrived: number }>;
  held: Set<Held>;
}

export class Ingress {
  private server?: Server;
  private readonly turns = new Map<string, number>();
  private readonly loads = new Map<string, Load>();
  private heldTotal = 0;
  /**
   * Connections to replicas, kept alive between requests (a connection per request would cost
   * more than the request itself), at most 256 open to one replica at a time: more requests than
   * that wait for one to come free rather than pile up connections on a replica.
   */
  private readonly upstream = new Agent({ keepAlive: true, maxSockets: 256, scheduling: 'lifo', timeout: 5_000 });
  port?: number;

  /** `onHold` is called with a deployment a request is now held for. */
  constructor(
    private readonly route: Route,
    private readonly onHold: (key: string) => void = () => undefined,
    private readonly bounds: IngressBounds = {},
  ) {}

  /** The most requests in flight at once and the most arriving in one second over the last `windowMs`. */
  demand(key: string, windowMs: number): { concurrency: number; rps: number } {
    const load = this.loads.get(key);
    if (!load) return { concurrency: 0, rps: 0 };
    const from = Math.floor((Date.now() - windowMs) / 1000);
    let concurrency = load.inFlight;
    let rps = 0;
    for (const s of load.seconds) {
      if (s.second < from) continue;
      concurrency = Math.max(concurrency, s.peak);
      rps = Math.max(rps, s.arrived);
    }
    return { concurrency, rps };
  }

  /** Sends the requests held for `key` on to a replica, if one is ready now. */
  retry(key: string): void {
    const load = this.loads.get(key);
    for (const held of load?.held ?? []) {
      const target = this.pick(held.req);
      if ('hold' in target && target.hold > 0) continue;
      this.release(load!, held);
      if ('status' in target) this.answer(held.res, target.status, target.message);
      else this.forward(held.req, held.res, target);
    }
  }

  /** Forgets a deployment's traffic (it is gone); its held requests are answered 503. */
  forget(key: string): void {
    const load = this.loads.get(key);
    if (!load) return;
    for (const held of load.held) {
      this.release(load, held);
      this.answer(held.res, 503, 'the workload is no longer served here');
    }
    this.loads.delete(key);
  }

  /** Adds traffic counted elsewhere (by HAProxy, in front): requests that arrived, and the most in flight at once. */
  observed(key: string, arrived: number, peak: number): void {
    let load = this.loads.get(key);
    if (!load) this.loads.set(key, (load = { inFlight: 0, seconds: [], held: new Set() }));
    const second = this.second(load);
    second.arrived += arrived;
    second.peak = Math.max(second.peak, load.inFlight + peak);
  }

  /** Listens on a TCP port, or on a Unix socket (`path`) when HAProxy is in front. */
  async listen(where: { host: string; port: number } | { path: string }): Promise<void> {
    // The ingress shares Keel's process (and its file descriptors) with the API: clients that open
    // connections and never finish their headers are cut off, and past a bound new ones are closed.
    const headersTimeout = this.bounds.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
    const server = createServer({ headersTimeout, requestTimeout: 0, connectionsCheckingInterval: Math.min(1000, Math.max(50, Math.floor(headersTimeout / 4))) }, (req, res) => this.serve(req, res));
    server.maxConnections = this.bounds.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    server.on('upgrade', (req, socket, head) => this.upgrade(req, socket, head));
    server.on('clientError', (_err, socket) => socket.destroy());
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      if ('path' in where) server.listen(where.path, () => resolve());
      else server.listen(where.port, where.host, () => resolve());
    });
    this.server = server;
    if (!('path' in where)) this.port = (server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    server.closeAllConnections();
    this.upstream.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The replica a request goes to, or why there is none. */
  private pick(
    req: IncomingMessage,
  ):
    | { key: string; address: string; port: number; path: string; headers?: Record<string, string> }
    | { key: string; status: number; message: string; hold: number }
    | { key?: undefined; status: number; message: string } {
    const hostname = (req.headers.host ?? '').replace(/:\d+$/, '');
    const host = hostname.split('.')[0] || undefined;
    const route = this.route(host, req.url ?? '/', hostname);
    if (route && 'status' in route) return { status: route.status, message: route.message };
    if (!route) return { status: 404, message: `no workload is served at host '${req.headers.host ?? ''}' or path ${req.url}: use the workload's endpoint (Host WORKLOAD-GVCALIAS.localhost) or /-workload/ORG/GVC/WORKLOAD/…` };
    if (this.bounds.firewall !== 'open') {
      const refusal = externalRefusal(route.firewall.config, clientOf(req, this.bounds.behindProxy), req.headers, route.firewall.workload);
      if (refusal) return { status: 403, message: refusal };
    }
    if (route.targets.length === 0) return { key: route.key, status: 503, message: 'no replica of the workload is ready', hold: route.holdMs };
    const key = `${host}|${route.targets.join(',')}`;
    const turn = this.turns.get(key) ?? 0;
    this.turns.set(key, turn + 1);
    if (this.turns.size > 10_000) this.turns.clear();
    return { key: route.key, address: route.targets[turn % route.targets.length], port: route.port, path: route.path, headers: route.headers };
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const target = this.pick(req);
    if (target.key === undefined) return this.answer(res, target.status, target.message);
    const load = this.arrive(target.key);
    res.on('close', () => this.leave(load));
    if (!('status' in target)) return this.forward(req, res, target);
    if (!target.hold) return this.answer(res, target.status, target.message);
    if (load.held.size >= HELD_MAX || this.heldTotal >= HELD_TOTAL_MAX) {
      return this.answer(res, 503, `no replica of the workload is ready, and ${load.held.size >= HELD_MAX ? HELD_MAX : HELD_TOTAL_MAX} requests already wait for one: try again later`);
    }
    // Held until a replica is ready (retry) or for `hold` ms; its body waits unread in the socket.
    const seconds = Math.round(target.hold / 1000);
    const held: Held = {
      req,
      res,
      timer: setTimeout(() => {
        this.release(load, held);
        this.answer(res, 503, `no replica of the workload became ready within ${seconds} s (the workload's timeoutSeconds)`);
      }, target.hold),
    };
    load.held.add(held);
    this.heldTotal++;
    res.on('close', () => this.release(load, held));
    this.onHold(target.key);
  }

  private answer(res: ServerResponse, status: number, message: string): void {
    if (res.headersSent || res.destroyed) return;
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ status, message }));
  }

  private release(load: Load, held: Held): void {
    if (!load.held.delete(held)) return;
    clearTimeout(held.timer);
    this.heldTotal--;
  }

  /** Counts a request in: in flight until its response closes. */
  private arrive(key: string): Load {
    let load = this.loads.get(key);
    if (!load) this.loads.set(key, (load = { inFlight: 0, seconds: [], held: new Set() }));
    load.inFlight++;
    const second = this.second(load);
    second.arrived++;
    second.peak = Math.max(second.peak, load.inFlight);
    return load;
  }

  private leave(load: Load): void {
    this.second(load);
    load.inFlight--;
  }

  /** This second's entry of a deployment's traffic (entries past the longest window are dropped). */
  private second(load: Load): { second: number; peak: number; arrived: number } {
    const now = Math.floor(Date.now() / 1000);
    let last = load.seconds[load.seconds.length - 1];
    if (last?.second !== now) {
      load.seconds.push((last = { second: now, peak: load.inFlight, arrived: 0 }));
      while (load.seconds[0].second < now - WINDOW_MAX_S) load.seconds.shift();
    }
    return last;
  }

  private forward(req: IncomingMessage, res: ServerResponse, target: { address: string; port: number; path: string; headers?: Record<string, string> }): void {
    const address = target.address;
    const headers = forwarded(req, target.headers, this.bounds.behindProxy);
    // A GET or HEAD may still come with a body (its framing says so): that body is passed on, and
    // such a request, like any other with a body, is never sent twice.
    const bodiless = (req.method === 'GET' || req.method === 'HEAD') && req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined;
    let upstream: ClientRequest;
    // A kept-alive connection the replica has just closed fails the request sent on it: a GET or
    // HEAD (nothing of the body sent yet) is sent again once, on a fresh connection.
    const send = (retry: boolean) => {
      upstream = request({ host: address, port: target.port, method: req.method, path: target.path, headers, agent: this.upstream }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.statusMessage, endToEnd(answer.rawHeaders) as unknown as Record<string, string>);
        relay(answer, res);
      });
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        if (retry && upstream.reusedSocket && err.code === 'ECONNRESET' && !res.headersSent) return send(false);
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 502, message: `the replica did not answer: ${err.message}` }));
        else res.destroy();
      });
      if (bodiless) upstream.end();
      else req.pipe(upstream);
    };
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    send(bodiless);
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => undefined);
    const target = this.pick(req);
    if ('status' in target) {
      socket.end(`HTTP/1.1 ${target.status} ${STATUS_CODES[target.status]}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${JSON.stringify({ status: target.status, message: target.message })}`);
      return;
    }
    const upstream = connect({ host: target.address, port: target.port }, () => {
      const lines = [`${req.method} ${target.path} HTTP/1.1`];
      const set = target.headers ?? {};
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        const name = req.rawHeaders[i].toLowerCase();
        if (!Object.hasOwn(set, name) && !PROXY_HEADERS.has(name) && !(this.bounds.behindProxy && name === CLIENT_HEADER)) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      }
      for (const [name, value] of Object.entries(set)) lines.push(`${name}: ${value}`);
      const proxy = proxyHeaders(req, this.bounds.behindProxy);
      for (let i = 0; i < proxy.length; i += 2) lines.push(`${proxy[i]}: ${proxy[i + 1]}`);
      upstream.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length > 0) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('close', () => upstream.destroy());
  }
}

/**
 * Headers about one connection rather than the message (RFC 9110 §7.6.1): each side of the
 * ingress has its own. Passed on, a client's `Connection: close` would close the kept-alive
 * connection to the replica after every request, and a replica's would close the client's.
 * Undefined when a message names none beyond those always dropped (the common case, which then
 * costs no set per request).
 */
function hopByHop(connection: string | undefined): Set<string> | undefined {
  if (!connection) return undefined;
  let names: Set<string> | undefined;
  for (const name of connection.split(',')) {
    const lower = name.trim().toLowerCase();
    if (lower && !ALWAYS_HOP.has(lower)) (names ??= new Set()).add(lower);
  }
  return names;
}

const ALWAYS_HOP = new Set(['connection', 'keep-alive', 'proxy-connection']);

/** A message's raw headers (name, value, name, value…) without the hop-by-hop ones. */
function endToEnd(raw: string[]): string[] {
  let connection: string | undefined;
  for (let i = 0; i < raw.length; i += 2) if (raw[i].length === 10 && raw[i].toLowerCase() === 'connection') connection = connection === undefined ? raw[i + 1] : `${connection},${raw[i + 1]}`;
  const drop = hopByHop(connection);
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (!ALWAYS_HOP.has(name) && !drop?.has(name)) kept.push(raw[i], raw[i + 1]);
  }
  return kept;
}

/**
 * The request's end-to-end headers as raw pairs (name, value…, in the client's order and case),
 * with those its route sets in place of the client's (never the X-Forwarded-* ones: see
 * domains.ts), and the X-Forwarded-* ones the ingress sets itself (see proxyHeaders).
 */
function forwarded(req: IncomingMessage, set?: Record<string, string>, behindProxy = false): string[] {
  const raw = req.rawHeaders;
  const drop = hopByHop(req.headers.connection);
  const headers: string[] = [];
  let host = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (ALWAYS_HOP.has(name) || drop?.has(name) || PROXY_HEADERS.has(name) || (behindProxy && name === CLIENT_HEADER) || (set !== undefined && Object.hasOwn(set, name))) continue;
    // One Host only, the first, as Node reads it: a replica may refuse a request with two.
    if (name === 'host') {
      if (host) continue;
      host = true;
    }
    headers.push(raw[i], raw[i + 1]);
  }
  if (set !== undefined) for (const name in set) headers.push(name, set[name]);
  headers.push(...proxyHeaders(req, behindProxy));
  return headers;
}

/** The headers a proxy sets about the client; whatever the client sent under these names is dropped. */
const PROXY_HEADERS = new Set(['x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto']);

/**
 * X-Forwarded-For, -Host and -Proto as the ingress sets them, replacing any the client sent: no
 * proxy in front of Keel is trusted to have told the truth in them (HAProxy started by Keel names
 * the client in CLIENT_HEADER instead), so a replica that reads X-Forwarded-For learns the real
 * peer's address, never one the client made up.
 */
function proxyHeaders(req: IncomingMessage, behindProxy = false): string[] {
  const from = clientOf(req, behindProxy);
  return ['x-forwarded-for', from, 'x-forwarded-host', req.headers.host ?? '', 'x-forwarded-proto', 'http'];
}

/** The client's address: the connection's peer, or behind HAProxy the one it names (it drops any the client sent). */
function clientOf(req: IncomingMessage, behindProxy = false): string {
  return (behindProxy ? (req.headers[CLIENT_HEADER] as string | undefined) : req.socket.remoteAddress) ?? '';
}

/**
 * Streams a replica's answer to the client, pausing the answer while the client's socket is
 * full; lighter than pipe(), which adds and removes half a dozen listeners on each request. An
 * answer the replica cuts short cuts the client's connection too: otherwise the client would
 * wait for the rest of a body that never comes.
 */
function relay(from: IncomingMessage, to: ServerResponse): void {
  from.on('data', (chunk: Buffer) => {
    if (!to.write(chunk)) from.pause();
  });
  from.on('end', () => to.end());
  from.on('close', () => {
    if (!from.complete) to.destroy();
  });
  to.on('drain', () => from.resume());
}
