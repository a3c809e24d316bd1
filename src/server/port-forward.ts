// `cpln port-forward` to replicas that run (KEEL_RUNTIME=runc), in the CLI's protocol:
//   POST {remote}/portforward-ticket {org, gvc, workload, pod?, port}, with the caller's key:
//     `connect` on the workload is checked, a replica chosen (the one named, or one that runs) and
//     {ticket} answered: a random name, bound to the caller, that replica and the port.
//   WebSocket {remote}/portforward, one per local connection: its first text message is
//     {contextId, token, org, gvc, workload, pod, port, ticket}; the key is checked again, as is
//     `connect`, then binary messages carry the connection's bytes both ways, to and from a TCP
//     connection to the port in the replica (Runtime.portForward).
// An error is one text message `Port-forward error: {"message", "code"}` before the close: code 1
// says the ticket expired (the CLI asks a new one for its next connection), any other code ends
// the CLI with the message.
// Tickets are kept in this process's memory, as the replicas are run by one process: after a
// restart the CLI is told its ticket expired and asks a new one.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { tokenOf } from '../auth/credentials.js';
import { identity, type Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { deploymentKey, REMOTE_PREFIX, replicasOf } from '../reconcile/views.js';
import type { Runtime } from '../runtime/types.js';
import type { Store } from '../store/types.js';
import { sendError } from './errors.js';
import { rateLimited, streamPrincipal, type TerminalAccess } from './stream-sign-in.js';

/** A ticket unused this long is forgotten; every stream it opens keeps it this much longer. */
export const TICKET_IDLE_MS = 5 * 60_000;
/** However much it is used, a ticket lasts no longer than this after it was issued (the CLI then asks a new one). */
export const TICKET_LIFETIME_MS = 60 * 60_000;
/** Tickets one caller holds at once (the CLI asks one per remote port); a further one replaces the oldest. */
export const TICKETS_PER_CALLER = 16;
/** Tickets held at once in all; past it the oldest go (their CLIs ask new ones). */
const MAX_TICKETS = 10_000;
/** Forwarded connections one caller may have open to one replica at once. */
export const FORWARDS_PER_REPLICA = 32;
/** Forwarded connections open at once in all. */
const MAX_FORWARDS = 1_000;
/** A forwarded connection that carries no byte either way for this long is closed. */
export const FORWARD_IDLE_MS = 10 * 60_000;
/** The largest message taken from the CLI: it sends what one read of its local socket gave (64 KiB at most). */
const MAX_MESSAGE = 1024 * 1024;
/** Bytes sent towards the CLI and not yet written out, past which the replica's side is no longer read. */
const HIGH_WATER = 1024 * 1024;

const FATAL = 0;
const TICKET_EXPIRED = 1;

/** What a ticket opens: one port of one replica, for one caller. */
export interface Ticket {
  who: string;
  org: string;
  gvc: string;
  workload: string;
  location: string;
  replica: string;
  port: number;
  /** Keel chose the replica (the CLI named none): once it is gone, a new ticket chooses another. */
  chosen: boolean;
}

interface Held {
  ticket: Ticket;
  issued: number;
  used: number;
}

/** The tickets issued and not yet expired, by their names. */
export class Tickets {
  private readonly held = new Map<string, Held>();

  constructor(private readonly now: () => number = Date.now) {}

  issue(ticket: Ticket): string {
    const now = this.now();
    const mine: string[] = [];
    for (const [id, t] of this.held) {
      if (this.expired(t, now)) this.held.delete(id);
      else if (t.ticket.who === ticket.who) mine.push(id);
    }
    // Held in the order they were issued: the first are the oldest.
    for (const id of mine.slice(0, Math.max(0, mine.length - TICKETS_PER_CALLER + 1))) this.held.delete(id);
    for (const id of this.held.keys()) {
      if (this.held.size < MAX_TICKETS) break;
      this.held.delete(id);
    }
    const id = randomBytes(32).toString('base64url');
    this.held.set(id, { ticket, issued: now, used: now });
    return id;
  }

  /** The ticket named `id`, counted as used now; undefined when there is none (never issued, expired or dropped). */
  use(id: unknown): Ticket | undefined {
    const held = typeof id === 'string' ? this.held.get(id) : undefined;
    if (!held) return undefined;
    const now = this.now();
    if (this.expired(held, now)) {
      this.held.delete(id as string);
      return undefined;
    }
    held.used = now;
    return held.ticket;
  }

  drop(id: string): void {
    this.held.delete(id);
  }

  private expired(t: Held, now: number): boolean {
    return now - t.used >= TICKET_IDLE_MS || now - t.issued >= TICKET_LIFETIME_MS;
  }
}

/** Open forwarded connections, per caller and replica and in all. */
class Forwards {
  private readonly open = new Map<string, number>();
  private total = 0;

  admit(key: string): string | undefined {
    const mine = this.open.get(key) ?? 0;
    if (mine >= FORWARDS_PER_REPLICA) return `too many forwarded connections: ${mine} of this caller to this replica are open (at most ${FORWARDS_PER_REPLICA})`;
    if (this.total >= MAX_FORWARDS) return `too many forwarded connections: ${this.total} are open on this Keel (at most ${MAX_FORWARDS})`;
    this.open.set(key, mine + 1);
    this.total++;
    return undefined;
  }

  release(key: string): void {
    const mine = (this.open.get(key) ?? 1) - 1;
    if (mine > 0) this.open.set(key, mine);
    else this.open.delete(key);
    this.total--;
  }
}

export interface PortForwardStreams {
  /** Takes over an upgrade to {remote}/portforward; `signed` is called once its first message has come (or it closed). */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer, runtime: Runtime, location: string, ip: string, signed: () => void): void;
}

/**
 * Serves POST {remote}/portforward-ticket (refused with `refusal` where no replica runs) and gives
 * what serves the streams.
 */
export function mountPortForward(app: FastifyInstance, store: Store, access: TerminalAccess, firstMessageMs: number, refusal: string): PortForwardStreams {
  const workloads = findKind('workload')!;
  const tickets = new Tickets();
  const forwards = new Forwards();
  const server = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE });
  app.addHook('onClose', async () => {
    for (const ws of server.clients) ws.terminate();
    server.close();
  });

  /** Throws unless `principal` may connect to the workload: port-forward needs what `cpln workload connect` needs. */
  const mayConnect = async (principal: Principal, org: string, gvc: string, workload: string) => {
    try {
      await access.auth.check(principal, 'connect', workloads, { org, gvc, name: workload });
    } catch (err) {
      throw ApiError.forbidden(`${principal.link} may not port-forward to workload '${workload}' of GVC '${gvc}': it needs the connect permission on the workload (${(err as Error).message})`);
    }
  };

  app.post(
    `${REMOTE_PREFIX}/:location/portforward-ticket`,
    { config: { public: true }, schema: { summary: 'A ticket for `cpln port-forward` to a port of a replica (KEEL_RUNTIME=runc; refused where replicas are simulated)' } },
    async (request, reply) => {
      const runtime = app.runtime;
      if (!runtime || runtime.kind === 'simulated') return sendError(reply, request, ApiError.badRequest(refusal));
      const { location } = request.params as { location: string };
      const body = (request.body ?? {}) as Record<string, unknown>;
      const errors = [
        ...(['org', 'gvc', 'workload'] as const).filter((f) => typeof body[f] !== 'string' || body[f] === '').map((path) => ({ path, message: 'is required: a name' })),
        ...(body.pod !== undefined && body.pod !== null && typeof body.pod !== 'string' ? [{ path: 'pod', message: 'must be a replica name' }] : []),
        ...(!Number.isInteger(body.port) || (body.port as number) < 1 || (body.port as number) > 65535 ? [{ path: 'port', message: 'must be a TCP port (1-65535)' }] : []),
      ];
      if (errors.length > 0) throw ApiError.badRequest(`a port-forward ticket names the org, GVC, workload and port (and perhaps the replica, as pod): ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
      const [org, gvc, workload] = [body.org, body.gvc, body.workload] as string[];
      const port = body.port as number;
      const pod = typeof body.pod === 'string' && body.pod !== '' ? body.pod : undefined;
      // The route is public, so that the simulation's refusal reaches any caller. The key is checked
      // here, for the org the body names: a JWT user is a user of the org it addresses.
      const principal = await streamPrincipal(access, request.ip, tokenOf(request), org);
      if (principal instanceof Error) throw principal;
      // The permission comes first, so that a key without it learns nothing of what runs.
      await mayConnect(principal, org, gvc, workload);
      const candidates = pod ? [pod] : replicasOf((await store.get(deploymentKey(org, gvc, workload, location)))?.data);
      const replica = candidates.find((name) => {
        const found = runtime.portForward({ org, gvc, location, replica: name }, port);
        return 'connect' in found && found.workload === workload;
      });
      if (!replica) throw ApiError.notFound(pod ? `no replica ${pod} of workload '${workload}' runs in location ${location}` : `workload '${workload}' of GVC '${gvc}' runs no replica in location ${location} now`);
      return { ticket: tickets.issue({ who: identity(principal), org, gvc, workload, location, replica, port, chosen: !pod }) };
    },
  );

  /** One forwarded connection: the request checked, then bytes both ways until either side closes. */
  const stream = (ws: WebSocket, runtime: Runtime, location: string, ip: string, signed: () => void) => {
    let upstream: Socket | undefined;
    /** Bytes that came before the replica's side was opened. */
    const early: Buffer[] = [];
    let earlyBytes = 0;
    // A paused socket would not read the CLI's answer to the close, and the close would wait for it.
    const close = (code: number, reason?: string) => {
      ws.resume();
      ws.close(code, reason);
    };
    const fail = (message: string, code = FATAL) => {
      if (ws.readyState === ws.OPEN) ws.send(`Port-forward error: ${JSON.stringify({ message, code })}`);
      close(1000);
    };
    ws.on('error', () => upstream?.destroy());
    ws.on('close', () => upstream?.destroy());
    const unsignedFor = setTimeout(() => fail(`the request did not arrive within ${firstMessageMs} ms (bodyTimeoutMs)`), firstMessageMs);
    ws.once('close', () => clearTimeout(unsignedFor));
    let draining = false;
    const toUpstream = (message: Buffer) => {
      if (upstream!.write(message) || draining) return;
      // The replica reads slower than the CLI sends: the CLI's side waits until it has caught up.
      draining = true;
      ws.pause();
      upstream!.once('drain', () => {
        draining = false;
        ws.resume();
      });
    };
    ws.once('message', (first: RawData) => {
      clearTimeout(unsignedFor);
      signed();
      // What comes while the request is checked waits (a bounded amount: the socket is paused).
      ws.pause();
      ws.on('message', (message: Buffer) => {
        if (upstream) return toUpstream(message);
        earlyBytes += message.length;
        if (earlyBytes > 2 * MAX_MESSAGE) return fail('too many bytes came before the connection was opened');
        early.push(message);
      });
      void open(first.toString()).catch((err: Error) => fail(err.message));
    });

    const open = async (text: string) => {
      let asked: Record<string, unknown>;
      try {
        asked = JSON.parse(text);
      } catch {
        return fail('the first message must be the JSON request');
      }
      const { org, gvc } = asked ?? {};
      if (typeof org !== 'string' || typeof gvc !== 'string') return fail('the request names no org and gvc');
      const principal = await streamPrincipal(access, ip, asked.token, org);
      if (principal instanceof Error) return fail(rateLimited(principal) ? `Rate limited (429, Retry-After: ${String(principal.details.retryAfter)}): ${principal.message}` : `Unauthorized: ${principal.message}`);
      const ticket = tickets.use(asked.ticket);
      if (!ticket) return fail('the port-forward ticket is unknown or has expired; a new one is needed', TICKET_EXPIRED);
      const id = asked.ticket as string;
      const differs = (field: string, value: unknown) => asked[field] !== undefined && asked[field] !== null && asked[field] !== value;
      if (ticket.who !== identity(principal) || ticket.org !== org || ticket.gvc !== gvc || ticket.location !== location || differs('workload', ticket.workload) || differs('port', ticket.port) || (!ticket.chosen && differs('pod', ticket.replica))) {
        return fail('the port-forward ticket was issued to another caller, or for another workload, replica, location or port');
      }
      try {
        await mayConnect(principal, org, gvc, ticket.workload);
      } catch (err) {
        tickets.drop(id);
        return fail(`Unauthorized: ${(err as Error).message}`);
      }
      const found = runtime.portForward({ org, gvc, location, replica: ticket.replica }, ticket.port);
      if (!('connect' in found) || found.workload !== ticket.workload) {
        const why = 'error' in found && found.workload === ticket.workload ? found.error : `no replica ${ticket.replica} of workload '${ticket.workload}' runs in location ${location}`;
        if (!ticket.chosen) return fail(why);
        // Keel chose the replica: a new ticket chooses one that runs.
        tickets.drop(id);
        return fail(`${why}; a new ticket names a replica that runs`, TICKET_EXPIRED);
      }
      if (ws.readyState !== ws.OPEN) return;
      const key = `${ticket.who}\n${org}\n${gvc}\n${location}\n${ticket.replica}`;
      const refused = forwards.admit(key);
      // Not an error message: that would end the CLI, and its other connections with it.
      if (refused) return close(1013, refused.slice(0, 120));
      ws.once('close', () => forwards.release(key));
      const socket = (upstream = found.connect());
      let connected = false;
      socket.once('connect', () => {
        connected = true;
        socket.setTimeout(FORWARD_IDLE_MS, () => close(1000, 'idle'));
      });
      socket.on('error', (err) => {
        if (connected) return close(1011);
        const refusedThere = (err as NodeJS.ErrnoException).code === 'ECONNREFUSED';
        fail(refusedThere ? `nothing accepts connections on port ${ticket.port} of replica ${ticket.replica} (a server there must listen on the replica's address, not 127.0.0.1 only)` : `cannot connect to port ${ticket.port} of replica ${ticket.replica}: ${err.message}`);
      });
      socket.on('close', () => ws.readyState === ws.OPEN && close(1000));
      socket.on('data', (chunk: Buffer) => {
        if (ws.readyState !== ws.OPEN) return;
        ws.send(chunk, { binary: true }, () => {
          if (socket.isPaused() && ws.bufferedAmount < HIGH_WATER / 2) socket.resume();
        });
        if (ws.bufferedAmount >= HIGH_WATER) socket.pause();
      });
      for (const message of early.splice(0)) toUpstream(message);
      ws.resume();
    };
  };

  return {
    upgrade: (request, socket, head, runtime, location, ip, signed) => server.handleUpgrade(request, socket, head, (ws) => stream(ws, runtime, location, ip, signed)),
  };
}
