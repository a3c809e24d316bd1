// Where a deployment's `status.remote` points: Keel itself, one base per location
// (`{Keel}/-remote/{location}`), so that the clients' replica calls come back here:
//   GET {remote}/replicas/org/{org}/gvc/{gvc}/workload/{w}   the replica names (strings) running there
// Keel simulates replicas and runs no containers, so the calls that would reach a container
// (exec and connect over WebSocket, port-forward tickets and streams) answer a clear error.
import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { listAll, stableId } from '../reconcile/common.js';
import { commandPrefix, deploymentKey } from '../reconcile/views.js';
import type { Resources } from '../resources/service.js';
import type { Store } from '../store/types.js';
import { sendError } from './errors.js';

export const REMOTE_PREFIX = '/-remote';

/** Keel's own base URL as the caller reached it. */
export function baseUrlOf(request: FastifyRequest, fallback: string): string {
  return `${request.protocol}://${request.headers.host ?? fallback}`;
}

export function mountReplicas(app: FastifyInstance, resources: Resources, store: Store, fallbackHost: string): void {
  // Deployments name their location's remote base as the caller reached Keel (behind a proxy or
  // on a port chosen at start, the stored status could not know it).
  app.addHook('preSerialization', async (request, _reply, payload) => {
    const url = request.routeOptions.url;
    if (url !== '/org/:org/gvc/:gvc/workload/:name/deployment' && url !== '/org/:org/gvc/:gvc/workload/:name/deployment/:location') return payload;
    const body = payload as { kind?: string; items?: unknown[] };
    const base = `${baseUrlOf(request, fallbackHost)}${REMOTE_PREFIX}`;
    const withRemote = (d: unknown) => {
      const deployment = d as { kind?: string; name?: string; status?: Record<string, unknown> };
      if (deployment?.kind !== 'deployment' || typeof deployment.name !== 'string') return d;
      return { ...deployment, status: { ...(deployment.status ?? {}), remote: `${base}/${encodeURIComponent(deployment.name)}` } };
    };
    return body?.kind === 'list' && Array.isArray(body.items) ? { ...body, items: body.items.map(withRemote) } : withRemote(payload);
  });

  const workload = findKind('workload')!;
  app.get(`${REMOTE_PREFIX}/:location/replicas/*`, async (request) => {
    const { location } = request.params as { location: string };
    const path = (request.params as { '*': string })['*'];
    // The CLI joins the remote and a self link with or without a slash between them.
    const match = /^\/*org\/([^/]+)\/gvc\/([^/]+)\/workload\/([^/]+)\/?$/.exec(path);
    if (!match) throw ApiError.notFound(`no such path: ${REMOTE_PREFIX}/${location}/replicas/${path}; replicas are listed at ${REMOTE_PREFIX}/LOCATION/replicas/org/ORG/gvc/GVC/workload/WORKLOAD`);
    const [org, gvc, name] = match.slice(1).map(decodeURIComponent);
    const item = await resources.get(request.principal, workload, { org, gvc }, name);
    const deployment = await store.get(deploymentKey(org, gvc, name, location));
    if (!deployment) throw ApiError.notFound(`workload '${name}' has no deployment in location '${location}'`);
    const spec = (item.spec ?? {}) as Record<string, any>;
    let items: string[];
    if (spec.type === 'cron') {
      // A cron workload's replicas are the jobs of its runs in progress here.
      const commands = await listAll(store, org, 'command', gvc, commandPrefix('workload', name));
      items = commands
        .filter((c) => c.data.type === 'runCronWorkload' && c.data.lifecycleStage === 'running' && ((c.data.spec as { location?: string })?.location ?? location) === location)
        .map((c) => `command-${c.id}-${stableId(c.id).slice(0, 5)}`);
    } else {
      const status = (deployment.data.status ?? {}) as Record<string, any>;
      const count = status.ready === true && spec.defaultOptions?.suspend !== true ? replicaCount(status, spec) : 0;
      const version = String(status.expectedDeploymentVersion ?? item.version);
      const set = stableId(org, gvc, name, location, version).slice(0, 10);
      items = Array.from({ length: count }, (_, i) => `${name}-${set}-${stableId(set, String(i)).slice(0, 5)}`);
    }
    return { kind: 'list', itemKind: 'replica', items, links: [{ rel: 'self', href: request.url.split('?')[0] }] };
  });

  // exec/connect open a WebSocket to {remote}/exec (credentials travel inside the stream, so these
  // routes take none), port-forward asks {remote}/portforward-ticket and streams on {remote}/portforward.
  const refusal = (what: string) =>
    `${what} is not available: Keel simulates replicas and runs no containers, so there is no process to ${what === 'port-forward' ? 'forward a port to' : 'run a command in'}`;
  const refuse = (what: string) => async (request: FastifyRequest, reply: FastifyReply) => {
    if (!isWebSocket(request)) return sendError(reply, request, ApiError.badRequest(refusal(what)));
    // The terminal client prints what the stream says and exits with the code named at its end
    // (an HTTP error would only reach it as "Unexpected server response").
    // port-forward ends on a message naming a fatal port-forward error.
    reply.hijack();
    refuseWebSocket(request, what === 'port-forward' ? `Port-forward error: ${JSON.stringify({ message: refusal(what), code: 0 })}` : `Failed to create terminal session: ${refusal(what)}; exit code 1`);
  };
  app.all(`${REMOTE_PREFIX}/:location/exec`, { config: { public: true } }, refuse('exec'));
  app.all(`${REMOTE_PREFIX}/:location/portforward-ticket`, { config: { public: true } }, refuse('port-forward'));
  app.all(`${REMOTE_PREFIX}/:location/portforward`, { config: { public: true } }, refuse('port-forward'));
}

/** How many replicas a ready deployment runs: what its status reports, else the workload's minimum scale. */
function replicaCount(status: Record<string, any>, spec: Record<string, any>): number {
  const reported: number[] = [];
  for (const version of (status.versions ?? []) as Array<Record<string, any>>) {
    for (const container of Object.values((version.containers ?? {}) as Record<string, any>)) {
      const replicas = container?.resources?.replicas;
      if (typeof replicas === 'number' && Number.isInteger(replicas) && replicas >= 0) reported.push(replicas);
    }
  }
  if (reported.length > 0) return Math.min(Math.max(...reported), 100);
  const min = Number(spec.defaultOptions?.autoscaling?.minScale ?? 1);
  return Number.isInteger(min) && min >= 0 ? Math.min(Math.max(min, 1), 100) : 1;
}

function isWebSocket(request: FastifyRequest): boolean {
  return String(request.headers.upgrade ?? '').toLowerCase() === 'websocket' && typeof request.headers['sec-websocket-key'] === 'string';
}

/** Accepts a WebSocket handshake, sends one text message and closes (code 1011), then lets the socket go. */
function refuseWebSocket(request: FastifyRequest, message: string): void {
  const socket = request.raw.socket;
  const accept = createHash('sha1').update(`${request.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  socket.write(frame(0x1, Buffer.from(message)));
  socket.write(frame(0x8, Buffer.from([0x03, 0xf3])));
  // The client answers the close; whatever it sends is not HTTP, so the socket is not read again.
  socket.removeAllListeners('data');
  socket.on('data', () => undefined);
  setTimeout(() => socket.destroy(), 2000).unref();
}

/** One unmasked, final WebSocket frame (servers do not mask). */
function frame(opcode: number, payload: Buffer): Buffer {
  const header = payload.length < 126 ? Buffer.from([0x80 | opcode, payload.length]) : Buffer.from([0x80 | opcode, 126, payload.length >> 8, payload.length & 0xff]);
  return Buffer.concat([header, payload]);
}
