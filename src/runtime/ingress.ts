// Keel's ingress (KEEL_INGRESS_PORT): workload traffic to ready replicas, round robin. A request
// names its workload by Host, the endpoint's first DNS label (`WORKLOAD-GVCALIAS.localhost:PORT`,
// what status.endpoint says), or, for a client that cannot set Host, by path:
// `/-workload/ORG/GVC/WORKLOAD/rest…` reaches `/rest…` of the workload. Bodies stream both ways;
// an Upgrade (WebSocket) becomes a byte pipe to the replica.
import { Agent, createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';

export type Route = (host: string | undefined, path: string) => { targets: string[]; port: number; path: string } | undefined;

export class Ingress {
  private server?: Server;
  private readonly turns = new Map<string, number>();
  /**
   * Connections to replicas, kept alive between requests (a connection per request would cost
   * more than the request itself), at most 256 open to one replica at a time: more requests than
   * that wait for one to come free rather than pile up connections on a replica.
   */
  private readonly upstream = new Agent({ keepAlive: true, maxSockets: 256, scheduling: 'lifo', timeout: 5_000 });
  port?: number;

  constructor(private readonly route: Route) {}

  async listen(host: string, port: number): Promise<void> {
    const server = createServer((req, res) => this.serve(req, res));
    server.on('upgrade', (req, socket, head) => this.upgrade(req, socket, head));
    server.on('clientError', (_err, socket) => socket.destroy());
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
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
  private pick(req: IncomingMessage): { address: string; port: number; path: string } | { status: number; message: string } {
    const host = (req.headers.host ?? '').replace(/:\d+$/, '').split('.')[0] || undefined;
    const route = this.route(host, req.url ?? '/');
    if (!route) return { status: 404, message: `no workload is served at host '${req.headers.host ?? ''}' or path ${req.url}: use the workload's endpoint (Host WORKLOAD-GVCALIAS.localhost) or /-workload/ORG/GVC/WORKLOAD/…` };
    if (route.targets.length === 0) return { status: 503, message: 'no replica of the workload is ready' };
    const key = `${host}|${route.targets.join(',')}`;
    const turn = this.turns.get(key) ?? 0;
    this.turns.set(key, turn + 1);
    if (this.turns.size > 10_000) this.turns.clear();
    return { address: route.targets[turn % route.targets.length], port: route.port, path: route.path };
  }

  private serve(req: IncomingMessage, res: ServerResponse): void {
    const target = this.pick(req);
    if ('status' in target) {
      res.writeHead(target.status, { 'content-type': 'application/json' }).end(JSON.stringify({ status: target.status, message: target.message }));
      return;
    }
    const address = target.address;
    // A kept-alive connection the replica has just closed fails the request sent on it: a GET or
    // HEAD (nothing of the body sent yet) is sent again once, on a fresh connection.
    const send = (retry: boolean) => {
      const upstream = request({ host: address, port: target.port, method: req.method, path: target.path, headers: forwarded(req), agent: this.upstream }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.statusMessage, endToEnd(answer.rawHeaders) as unknown as Record<string, string>);
        answer.pipe(res);
      });
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        if (retry && upstream.reusedSocket && err.code === 'ECONNRESET' && !res.headersSent) return send(false);
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 502, message: `the replica did not answer: ${err.message}` }));
        else res.destroy();
      });
      res.on('close', () => {
        if (!res.writableFinished) upstream.destroy();
      });
      if (req.method === 'GET' || req.method === 'HEAD') upstream.end();
      else req.pipe(upstream);
    };
    send(req.method === 'GET' || req.method === 'HEAD');
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => undefined);
    const target = this.pick(req);
    if ('status' in target) {
      socket.end(`HTTP/1.1 ${target.status} ${target.status === 404 ? 'Not Found' : 'Service Unavailable'}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${JSON.stringify({ status: target.status, message: target.message })}`);
      return;
    }
    const upstream = connect({ host: target.address, port: target.port }, () => {
      const lines = [`${req.method} ${target.path} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
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
 */
function hopByHop(connection: string | undefined): Set<string> {
  const names = new Set(['connection', 'keep-alive', 'proxy-connection']);
  for (const name of (connection ?? '').split(',')) if (name.trim()) names.add(name.trim().toLowerCase());
  return names;
}

/** A message's raw headers (name, value, name, value…) without the hop-by-hop ones. */
function endToEnd(raw: string[]): string[] {
  const drop = hopByHop(raw.filter((_, i) => i % 2 === 1 && raw[i - 1].toLowerCase() === 'connection').join(','));
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (!drop.has(raw[i].toLowerCase())) kept.push(raw[i], raw[i + 1]);
  return kept;
}

/** The request's end-to-end headers with the X-Forwarded-* ones a proxy adds. */
function forwarded(req: IncomingMessage): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {};
  const drop = hopByHop(req.headers.connection);
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !drop.has(k)) headers[k] = v;
  const from = req.socket.remoteAddress ?? '';
  headers['x-forwarded-for'] = headers['x-forwarded-for'] ? `${headers['x-forwarded-for']}, ${from}` : from;
  headers['x-forwarded-host'] ??= req.headers.host ?? '';
  headers['x-forwarded-proto'] ??= 'http';
  return headers;
}
