import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { randomUUID } from 'node:crypto';
import type { ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import { decodeJwt } from 'jose';
import { WrongSecret } from '../auth/authenticator.js';
import { parseKey } from '../auth/keys.js';
import { identity, type Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { sendError } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Counted against the in-flight cap (released when the response is done). */
    counted?: boolean;
    /** Whose in-flight count this request is in (see installPrincipalAdmission). */
    countedFor?: string;
    /** The route's config, read once by the admission hook (fastify's routeOptions getter builds a new object on each read); later hooks use this. */
    routeConfig?: FastifyContextConfig;
  }
  interface FastifyContextConfig {
    /** A long-lived response (server-sent events): no request timeout. */
    streaming?: boolean;
  }
}

/**
 * Admission limits that run before any work: the in-flight cap and the request timeout.
 * (The per-key rate limit runs after authentication: see rateLimiter.)
 */
export function installAdmission(app: FastifyInstance, config: Config): void {
  // One sweeper instead of a timer per request: timers are costly on the hot path, and a
  // deadline checked every TICK_MS is precise enough for a timeout of seconds.
  const open = new Map<FastifyRequest, { reply: FastifyReply; deadline: number }>();
  const tick = Math.min(250, Math.max(10, Math.floor(config.requestTimeoutMs / 4)));
  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const [request, entry] of open) {
      if (entry.deadline > now) continue;
      open.delete(request);
      timeout(request, entry.reply, config.requestTimeoutMs);
    }
  }, tick);
  sweeper.unref();
  app.addHook('onClose', (_instance, done) => {
    clearInterval(sweeper);
    done();
  });

  let inFlight = 0;
  app.decorateRequest('counted', false);
  app.decorateRequest('routeConfig');
  // Callback-style hooks: these run on every request, and avoid a promise each.
  app.addHook('onRequest', (request, reply, done) => {
    const routeConfig = (request.routeConfig = request.routeOptions.config);
    // Streams (watch) live for long; they are not the work this cap protects.
    if (routeConfig?.streaming) return done();
    if (inFlight >= config.maxInFlight) {
      sendError(reply.header('retry-after', '1'), request, new ApiError('service_unavailable', `the server is handling ${config.maxInFlight} requests; retry shortly`));
      return;
    }
    inFlight++;
    request.counted = true;
    open.set(request, { reply, deadline: Date.now() + config.requestTimeoutMs });
    done();
  });
  const release = (request: FastifyRequest) => {
    open.delete(request);
    if (request.counted) {
      request.counted = false;
      inFlight--;
    }
  };
  whenRequestEnds(app, release);
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

/** Keys kept at most by one set of buckets: beyond it the least recently used go (a dropped bucket starts full again). */
const MAX_BUCKETS = 100_000;

/** Token buckets by key (`rate` per second, up to `capacity`), in bounded memory. */
class Buckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(
    private readonly rate: number,
    private readonly capacity: number,
  ) {}

  private current(key: string): { tokens: number; at: number } {
    const now = Date.now();
    const bucket = this.buckets.get(key) ?? { tokens: this.capacity, at: now };
    bucket.tokens = Math.min(this.capacity, bucket.tokens + ((now - bucket.at) / 1000) * this.rate);
    bucket.at = now;
    // Re-inserted, so the map's order is least recently used first.
    this.buckets.delete(key);
    this.buckets.set(key, bucket);
    if (this.buckets.size > MAX_BUCKETS) {
      for (const old of this.buckets.keys()) {
        this.buckets.delete(old);
        if (this.buckets.size <= MAX_BUCKETS * 0.9) break;
      }
    }
    return bucket;
  }

  /** Seconds to wait before `key` has a token again, or 0 when it has one now (which is not taken). */
  wait(key: string): number {
    if (!this.buckets.has(key)) return 0; // a full bucket: not stored until a token is taken
    const bucket = this.current(key);
    return bucket.tokens >= 1 ? 0 : Math.ceil((1 - bucket.tokens) / this.rate);
  }

  /** Takes a token if there is one; otherwise answers the seconds to wait, as wait() does. */
  take(key: string): number {
    const bucket = this.current(key);
    if (bucket.tokens < 1) return Math.ceil((1 - bucket.tokens) / this.rate);
    bucket.tokens -= 1;
    return 0;
  }
}

/**
 * A token bucket per principal identity: `rate` requests per second with bursts up to `burst`. Over
 * it: 429 rate_limited with Retry-After (the message avoids the word "quota", so clients retry).
 */
export function installRateLimit(app: FastifyInstance, config: Config): void {
  if (config.rateLimit <= 0) return;
  const buckets = new Buckets(config.rateLimit, Math.max(1, config.rateBurst));
  app.addHook('onRequest', (request, reply, done) => {
    const wait = buckets.take(identityOf(request.principal, request.ip));
    if (wait === 0) return done();
    sendError(reply.header('retry-after', String(wait)), request, new ApiError('rate_limited', `rate limit exceeded: ${config.rateLimit} requests per second per key; retry after ${wait} s`));
  });
}

/**
 * Failed authentications, counted against what failed and never against a credential that works:
 * a key id that exists, presented with a wrong secret, counts per address and key id; a JWT whose
 * claims can be read, per address and issuer and subject; everything else (unknown key ids,
 * malformed tokens, none at all), per address. Each bucket holds `authFailureLimit` a minute, as a
 * burst too. A token whose own bucket is empty is refused before it is checked (no key lookup, no
 * signature check); an unknown key is looked up first (nothing tells it from a good one before), and
 * answered 429 instead of 401 once its address has failed too often. A valid key from the same
 * address goes on working, whatever other keys that address sent.
 */
export class AuthFailures {
  private readonly buckets?: Buckets;
  constructor(private readonly perMinute: number) {
    if (perMinute > 0) this.buckets = new Buckets(perMinute / 60, perMinute);
  }

  /** The 429 for a token whose bucket is empty, before it is checked. */
  refusal(ip: string, token: string | undefined): ApiError | undefined {
    const wait = this.buckets?.wait(presented(ip, token)) ?? 0;
    return wait === 0 ? undefined : this.tooMany(wait);
  }

  /** Counts a failed authentication (`err`, a 401) and answers the 429 to send instead when its bucket was empty. */
  failed(ip: string, token: string | undefined, err: ApiError): ApiError | undefined {
    const unknownKey = token !== undefined && parseKey(token) !== undefined && !(err instanceof WrongSecret);
    const bucket = unknownKey ? `ip:${ip}` : presented(ip, token);
    const wait = this.buckets?.take(bucket) ?? 0;
    return wait === 0 ? undefined : this.tooMany(wait);
  }

  private tooMany(wait: number): ApiError {
    return new ApiError('rate_limited', `too many failed authentications from this address (authFailureLimit: ${this.perMinute} a minute); retry after ${wait} s`, { retryAfter: wait });
  }
}

/** The bucket of what a token presents: its key id or JWT subject with the address, or the address alone. */
function presented(ip: string, token: string | undefined): string {
  if (token === undefined) return `ip:${ip}`;
  const key = parseKey(token);
  if (key) return `key:${ip}\n${key.keyName}`;
  if (token.split('.').length === 3) {
    try {
      const { iss, sub } = decodeJwt(token);
      if (typeof iss === 'string' && typeof sub === 'string') return `jwt:${ip}\n${iss}\n${sub}`;
    } catch {
      // Not a JWT: counted with the address.
    }
  }
  return `ip:${ip}`;
}

/**
 * In-flight requests per principal identity (per address before authentication): one caller, even
 * one that sends its bodies a byte at a time, holds at most `maxInFlightPerPrincipal` of the
 * server's `maxInFlight` slots. Runs after authentication, before the body is read.
 */
export function installPrincipalAdmission(app: FastifyInstance, config: Config): void {
  const counts = new Map<string, number>();
  app.decorateRequest('countedFor');
  app.addHook('onRequest', (request, reply, done) => {
    if (!request.counted) return done();
    const who = identityOf(request.principal, request.ip);
    const count = counts.get(who) ?? 0;
    if (count >= config.maxInFlightPerPrincipal) {
      sendError(reply.header('retry-after', '1'), request, new ApiError('service_unavailable', `this caller already has ${count} requests in flight (maxInFlightPerPrincipal); retry shortly`));
      return;
    }
    counts.set(who, count + 1);
    request.countedFor = who;
    done();
  });
  const release = (request: FastifyRequest) => {
    const who = request.countedFor;
    if (who === undefined) return;
    request.countedFor = undefined;
    const count = (counts.get(who) ?? 1) - 1;
    if (count <= 0) counts.delete(who);
    else counts.set(who, count);
  };
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

/** Runs `release` once a request is over: answered, or abandoned by its client. */
export function whenRequestEnds(app: FastifyInstance, release: (request: FastifyRequest) => void): void {
  app.addHook('onResponse', (request, _reply, done) => {
    release(request);
    done();
  });
  app.addHook('onRequestAbort', (request, done) => {
    release(request);
    done();
  });
}
