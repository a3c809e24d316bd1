import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { sendError } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Counted against the in-flight cap (released when the response is done). */
    counted?: boolean;
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
  // Callback-style hooks: these run on every request, and avoid a promise each.
  app.addHook('onRequest', (request, reply, done) => {
    // Streams (watch) live for long; they are not the work this cap protects.
    if (request.routeOptions.config?.streaming) return done();
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
  app.addHook('onResponse', (request, _reply, done) => {
    release(request);
    done();
  });
  app.addHook('onRequestAbort', (request, done) => {
    release(request);
    done();
  });
}

function timeout(request: FastifyRequest, reply: FastifyReply, ms: number): void {
  if (reply.sent || reply.raw.headersSent) return;
  request.log.warn({ reqId: request.id, timeoutMs: ms }, 'request timed out');
  sendError(reply, request, new ApiError('service_unavailable', `the request did not finish within ${ms} ms`));
}

/**
 * A token bucket per principal: `rate` requests per second with bursts up to `burst`. Over it:
 * 429 rate_limited with Retry-After (the message avoids the word "quota", so clients retry).
 */
export function installRateLimit(app: FastifyInstance, config: Config): void {
  if (config.rateLimit <= 0) return;
  const buckets = new Map<string, { tokens: number; at: number }>();
  const capacity = Math.max(1, config.rateBurst);
  app.addHook('onRequest', async (request, reply) => {
    const who = request.principal?.link ?? `ip:${request.ip}`;
    const now = Date.now();
    const bucket = buckets.get(who) ?? { tokens: capacity, at: now };
    bucket.tokens = Math.min(capacity, bucket.tokens + ((now - bucket.at) / 1000) * config.rateLimit);
    bucket.at = now;
    if (buckets.size > 100_000) buckets.clear(); // bounded memory under many distinct callers
    buckets.set(who, bucket);
    if (bucket.tokens < 1) {
      const wait = Math.ceil((1 - bucket.tokens) / config.rateLimit);
      return sendError(reply.header('retry-after', String(wait)), request, new ApiError('rate_limited', `rate limit exceeded: ${config.rateLimit} requests per second per key; retry after ${wait} s`));
    }
    bucket.tokens -= 1;
  });
}
