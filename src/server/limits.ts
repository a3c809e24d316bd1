import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { randomUUID } from 'node:crypto';
import type { ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import { identity, type Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { sendError } from './errors.js';
import { Buckets } from '../buckets.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Counted against the in-flight caps (released when the response is done); not a stream. */
    counted?: boolean;
    /** Whose in-flight count this request is in (see installPrincipalAdmission). */
    countedFor?: string;
    /** The first org's superusers: never refused by the server-wide caps, never queued. */
    exempt?: boolean;
    /** Its body, announced by its headers, has not all arrived yet (a route that reads it itself finds this still set in its handler). */
    bodyPending?: boolean;
    /** The route's config, read once by the admission hook (fastify's routeOptions getter builds a new object on each read); later hooks use this. */
    routeConfig?: FastifyContextConfig;
  }
  interface FastifyContextConfig {
    /** A long-lived response (server-sent events): no request timeout. */
    streaming?: boolean;
    /**
     * Counted and timed as any request, but holding no seat of the fair scheduler: its work is
     * requests of its own (MCP tool calls), each of which takes a seat, and would wait on the one it held.
     */
    seatless?: boolean;
  }
}

/**
 * The request timeout, armed before any work (the caps on requests in flight are decided once the
 * caller is known: see installPrincipalAdmission; the per-key rate limit: see installRateLimit).
 */
export function installAdmission(app: FastifyInstance, config: Config): void {
  // One sweeper instead of a timer per request: timers are costly on the hot path, and a
  // deadline checked every TICK_MS is precise enough for a timeout of seconds. The requests it
  // watches are a list in deadline order (every request has the same timeout): a request leaves it
  // in constant time when its response ends, without the delete (and shrinking) of a map, and the
  // sweeper looks only at those whose deadline has passed.
  const open = new OpenRequests();
  const tick = Math.min(250, Math.max(10, Math.floor(config.requestTimeoutMs / 4)));
  const sweeper = setInterval(() => {
    const now = performance.now();
    for (let entry = open.first; entry && entry.deadline <= now; entry = open.first) {
      open.remove(entry);
      timeout(entry.request, entry.reply, config.requestTimeoutMs);
    }
  }, tick);
  sweeper.unref();
  app.addHook('onClose', (_instance, done) => {
    clearInterval(sweeper);
    done();
  });

  app.decorateRequest('counted', false);
  app.decorateRequest('routeConfig');
  const releases: Array<(request: FastifyRequest) => void> = [];
  endings.set(app, releases);
  // Callback-style hooks: these run on every request, and avoid a promise each.
  app.addHook('onRequest', (request, reply, done) => {
    const routeConfig = (request.routeConfig = request.routeOptions.config);
    // Streams (watch) live for long; they are not the work these limits protect.
    if (routeConfig?.streaming) return done();
    const entry = open.add(request, reply, performance.now() + config.requestTimeoutMs);
    // However the response ends (answered, or its connection closed under it), what the request
    // holds comes back: fastify's own end hooks miss a client that goes away while its handler runs.
    // One listener per response serves every holding (see whenRequestEnds).
    reply.raw.on('close', () => {
      open.remove(entry);
      for (const release of releases) release(request);
    });
    done();
  });
}

/** A request watched for its timeout, in a list of them. */
interface OpenRequest {
  request: FastifyRequest;
  reply: FastifyReply;
  deadline: number;
  previous?: OpenRequest;
  next?: OpenRequest;
  /** Still in the list. */
  listed: boolean;
}

/** Requests in the order they are added (so of their deadlines): a doubly linked list, each removed at once. */
class OpenRequests {
  first?: OpenRequest;
  private last?: OpenRequest;

  add(request: FastifyRequest, reply: FastifyReply, deadline: number): OpenRequest {
    const entry: OpenRequest = { request, reply, deadline, previous: this.last, next: undefined, listed: true };
    if (this.last) this.last.next = entry;
    else this.first = entry;
    this.last = entry;
    return entry;
  }

  remove(entry: OpenRequest): void {
    if (!entry.listed) return;
    entry.listed = false;
    if (entry.previous) entry.previous.next = entry.next;
    else this.first = entry.next;
    if (entry.next) entry.next.previous = entry.previous;
    else this.last = entry.previous;
    entry.previous = entry.next = undefined;
  }
}

/** The releases run when a request's response is over, by server (see whenRequestEnds). */
const endings = new WeakMap<FastifyInstance, Array<(request: FastifyRequest) => void>>();

/** Runs `release` once the request's response is over, however it ends; installAdmission comes first. */
export function whenRequestEnds(app: FastifyInstance, release: (request: FastifyRequest) => void): void {
  const releases = endings.get(app);
  if (!releases) throw new Error('installAdmission must come before what is released when a request ends');
  releases.push(release);
}

function timeout(request: FastifyRequest, reply: FastifyReply, ms: number): void {
  if (reply.sent || reply.raw.headersSent) return;
  request.log.warn({ reqId: request.id, timeoutMs: ms }, 'request timed out');
  sendError(reply, request, new ApiError('service_unavailable', `the request did not finish within ${ms} ms`));
}

/** Who a request comes from (see identity()), else its address. */
export function identityOf(principal: Principal | undefined, ip: string): string {
  return principal ? identity(principal) : `ip:${ip}`;
}

/**
 * A token bucket per principal identity: `rate` requests per second with bursts up to `burst`. Over
 * it: 429 rate_limited with Retry-After (the message avoids the word "quota", so clients retry).
 */
export class RateLimit {
  private readonly buckets: Buckets;
  readonly burst: number;
  constructor(private readonly rate: number, burst: number) {
    this.burst = Math.max(1, burst);
    this.buckets = new Buckets(rate, this.burst);
  }

  /**
   * Takes `count` requests of `who` (all or none): undefined when taken, else the refusal. More than
   * a burst at once is never taken: that refusal says so, and names no time to retry after.
   */
  refusal(who: string, count = 1): ApiError | undefined {
    const wait = this.buckets.take(who, count);
    if (wait === 0) return undefined;
    if (wait === Infinity) return new ApiError('rate_limited', `${count} requests at once are more than the rate limit lets one key make at once (rateBurst: ${this.burst}); send fewer`);
    return new ApiError('rate_limited', `rate limit exceeded: ${this.rate} requests per second per key; retry after ${wait} s`, { retryAfter: wait });
  }
}

/** The server's rate limit, if it has one (rateLimit 0 is none). */
export function rateLimitOf(config: Config): RateLimit | undefined {
  return config.rateLimit > 0 ? new RateLimit(config.rateLimit, config.rateBurst) : undefined;
}

/** Each request takes one of its caller's tokens (see RateLimit) before anything else is done for it. */
export function installRateLimit(app: FastifyInstance, limit: RateLimit | undefined): void {
  if (!limit) return;
  app.addHook('onRequest', (request, reply, done) => {
    const refused = limit.refusal(identityOf(request.principal, request.ip));
    if (!refused) return done();
    sendError(reply, request, refused);
  });
}

/** Whose share a request's body is counted in, besides its principal's: its org's, or that of every caller without a valid credential. */
function poolOf(principal: Principal | undefined): string {
  return principal ? `org:${principal.org}` : 'unauthenticated';
}

/** Whether the request's body is still to arrive (its headers announce one and it has not all come). */
export function awaitsBody(request: FastifyRequest): boolean {
  if (request.raw.complete) return false;
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * Counts by key. A key whose count falls to zero keeps its entry until the next prune(): deleting it
 * at once would make the map delete (and shrink) for nearly every request, whose caller usually has
 * nothing else in flight.
 */
class Counts {
  private readonly counts = new Map<string, number>();
  total = 0;
  of(key: string): number {
    return this.counts.get(key) ?? 0;
  }
  add(key: string): void {
    this.counts.set(key, this.of(key) + 1);
    this.total++;
  }
  remove(key: string): void {
    this.counts.set(key, this.of(key) - 1);
    this.total--;
  }
  /** Drops the keys counted zero: the map holds only the keys counted now, and those since the last prune. */
  prune(): void {
    for (const [key, count] of this.counts) if (count <= 0) this.counts.delete(key);
  }
}

/** A body still on its way this long after its headers is a slow one: it counts in its principal's share of bodies. */
const SLOW_BODY_MS = 100;

/** A request whose body has not all arrived, as counted. */
interface OnItsWay {
  request: FastifyRequest;
  reply: FastifyReply;
  who: string;
  /** Its org's share (or that of the callers without a credential); none for the exempt. */
  pool?: string;
  since: number;
  /** Counted in its principal's share (it was still on its way after SLOW_BODY_MS). */
  slow: boolean;
  over: boolean;
}

/**
 * Requests in flight, decided once the caller is known: a principal (a service account, a JWT user
 * by issuer and email), or the address of a caller without a valid credential. Each holds at most
 * `maxInFlightPerPrincipal` requests, and at most `maxBodiesPerPrincipal` (an address:
 * `maxBodiesPerAddress`) slow bodies, still on their way SLOW_BODY_MS after their headers: one more is
 * refused before its body is read, and a body that turns slow while its caller's share is full is
 * refused then. So a client that sends its bodies a byte at a time spends only its own share, while a
 * burst of bodies that come with their headers is not slowed at all. Server-wide, `maxInFlight` bounds
 * every request, with an eighth of it kept for principals that have nothing in flight; bodies on their
 * way hold at most half of it, and those of one org's principals (or of all callers without a
 * credential) at most an eighth (at least `maxBodiesPerPrincipal`): neither a swarm of one org's keys
 * nor many addresses can take what the others need. The first org's superusers are refused by none of
 * the server-wide caps. Runs after authentication, before the body is read.
 */
export function installPrincipalAdmission(app: FastifyInstance, config: Config, isExempt: (principal: Principal) => boolean | Promise<boolean>): void {
  const inFlight = new Counts();
  /** Slow bodies, by principal. */
  const slowBodies = new Counts();
  /** Bodies on their way, by pool (and in all, its total). */
  const bodies = new Counts();
  const reserve = Math.ceil(config.maxInFlight / 8);
  const bodiesShare = Math.max(1, Math.floor(config.maxInFlight / 2));
  const poolShare = Math.max(config.maxBodiesPerPrincipal, Math.floor(config.maxInFlight / 8));
  const onItsWay = new WeakMap<FastifyRequest, OnItsWay>();
  /** Bodies not yet slow, oldest first (`young[first]` is the oldest one left). */
  let young: OnItsWay[] = [];
  let first = 0;
  app.decorateRequest('countedFor');
  app.decorateRequest('exempt', false);
  app.decorateRequest('bodyPending', false);
  const refuse = (reply: FastifyReply, request: FastifyRequest, err: ApiError) => sendError(reply.header('retry-after', '1'), request, err);
  const shareOf = (request: FastifyRequest) => (request.principal ? config.maxBodiesPerPrincipal : config.maxBodiesPerAddress);
  const tooManyBodies = (request: FastifyRequest, count: number) =>
    new ApiError('rate_limited', `this caller already has ${count} slow request bodies on their way (${request.principal ? 'maxBodiesPerPrincipal' : 'maxBodiesPerAddress'}: ${shareOf(request)}); retry after 1 s`, { retryAfter: 1 });

  // One sweep for every body rather than a timer each: it turns the bodies still on their way slow.
  const sweeper = setInterval(() => {
    const now = performance.now();
    while (first < young.length && now - young[first].since >= SLOW_BODY_MS) {
      const body = young[first++];
      if (body.over) continue;
      const count = slowBodies.of(body.who);
      if (count < shareOf(body.request)) {
        body.slow = true;
        slowBodies.add(body.who);
      } else if (!body.reply.sent && !body.reply.raw.headersSent) refuse(body.reply, body.request, tooManyBodies(body.request, count));
    }
    inFlight.prune();
    slowBodies.prune();
    bodies.prune();
    if (first === young.length) (young = []), (first = 0);
    else if (first > 1024 && first * 2 > young.length) (young = young.slice(first)), (first = 0);
  }, SLOW_BODY_MS / 2);
  sweeper.unref();
  app.addHook('onClose', (_instance, done) => {
    clearInterval(sweeper);
    done();
  });

  const admit = (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void, exempt: boolean) => {
    // Its client went away while it was being authenticated: its end has been seen already, and a
    // count taken now would never be given back. Nothing is left to run for it.
    if (request.raw.socket?.destroyed) return;
    const principal = request.principal as Principal | undefined;
    const who = identityOf(principal, request.ip);
    const mine = inFlight.of(who);
    if (mine >= config.maxInFlightPerPrincipal) {
      return refuse(reply, request, new ApiError('service_unavailable', `this caller already has ${mine} requests in flight (maxInFlightPerPrincipal); retry shortly`));
    }
    // Near the cap, only principals with nothing in flight come in: the last requests are theirs.
    if (!exempt && (inFlight.total >= config.maxInFlight || (mine > 0 && inFlight.total >= config.maxInFlight - reserve))) {
      return refuse(reply, request, new ApiError('service_unavailable', `the server is handling ${inFlight.total} requests (maxInFlight: ${config.maxInFlight}); retry shortly`));
    }
    if (awaitsBody(request)) {
      const slow = slowBodies.of(who);
      if (slow >= shareOf(request)) return refuse(reply, request, tooManyBodies(request, slow));
      const pool = exempt ? undefined : poolOf(principal);
      if (pool !== undefined && bodies.of(pool) >= poolShare) {
        const whose = principal ? `principals of org '${principal.org}'` : 'callers without a valid credential';
        return refuse(reply, request, new ApiError('rate_limited', `the ${whose} already have ${bodies.of(pool)} request bodies on their way, their share of maxInFlight (${config.maxInFlight}); retry after 1 s`, { retryAfter: 1 }));
      }
      if (pool !== undefined && bodies.total >= bodiesShare) {
        return refuse(reply, request, new ApiError('service_unavailable', `the server is receiving ${bodies.total} request bodies, half of maxInFlight (${config.maxInFlight}); retry shortly`));
      }
      const body: OnItsWay = { request, reply, who, pool, since: performance.now(), slow: false, over: false };
      if (pool !== undefined) bodies.add(pool);
      onItsWay.set(request, body);
      young.push(body);
      request.bodyPending = true;
      request.raw.once('end', () => bodyArrived(request));
    }
    inFlight.add(who);
    request.counted = true;
    request.countedFor = who;
    request.exempt = exempt;
    done();
  };
  const release = (request: FastifyRequest) => {
    bodyArrived(request);
    const who = request.countedFor;
    if (who === undefined) return;
    request.countedFor = undefined;
    request.counted = false;
    inFlight.remove(who);
  };
  const bodyArrived = (request: FastifyRequest) => {
    const body = onItsWay.get(request);
    if (!body) return;
    onItsWay.delete(request);
    body.over = true;
    request.bodyPending = false;
    if (body.slow) slowBodies.remove(body.who);
    if (body.pool !== undefined) bodies.remove(body.pool);
  };
  app.addHook('onRequest', (request, reply, done) => {
    if (request.routeConfig?.streaming) return done();
    const principal = request.principal as Principal | undefined;
    const exempt = principal ? isExempt(principal) : false;
    if (exempt instanceof Promise) exempt.then((answer) => admit(request, reply, done, answer), done);
    else admit(request, reply, done, exempt);
  });
  whenRequestEnds(app, release);
}

/**
 * Node's own limits on a connection, and its refusals as the API's error object: a request whose
 * headers and body have not all arrived within `bodyTimeoutMs` gets 408 request_timeout and its
 * connection is closed (a slow writer cannot hold an in-flight slot longer); what Node's HTTP parser
 * refuses (oversized headers, conflicting lengths, a malformed request line) gets 431 or 400.
 */
export function connectionOptions(config: Config): Pick<FastifyServerOptions, 'requestTimeout' | 'clientErrorHandler'> & { http: ServerOptions } {
  const checkEvery = Math.min(1000, Math.max(50, Math.floor(config.bodyTimeoutMs / 4)));
  return {
    requestTimeout: config.bodyTimeoutMs,
    http: { headersTimeout: Math.min(60_000, config.bodyTimeoutMs), connectionsCheckingInterval: checkEvery },
    clientErrorHandler(error: Error & { code?: string }, socket: Socket) {
      if (error.code === 'ECONNRESET' || socket.destroyed) return;
      const err =
        error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? new ApiError('request_timeout', `the request's headers and body did not arrive within ${config.bodyTimeoutMs} ms (bodyTimeoutMs)`)
          : error.code === 'HPE_HEADER_OVERFLOW'
            ? new ApiError('headers_too_large', 'the request headers are larger than the server accepts')
            : ApiError.badRequest(`the request is not valid HTTP/1.1 (${String(error.code ?? 'parse error').replace(/^HPE_/, '').toLowerCase()})`);
      // As Node itself does: no answer over one already being written on this connection.
      const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
      if (socket.writable && !inFlight?.headersSent) {
        const body = JSON.stringify({ status: err.status, message: err.message, code: err.code, details: err.details, id: randomUUID() });
        socket.write(`HTTP/1.1 ${err.status} ${STATUS_TEXT[err.status] ?? 'Error'}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
      }
      socket.destroy(error);
    },
  };
}

const STATUS_TEXT: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };
