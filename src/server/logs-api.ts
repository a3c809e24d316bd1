import { EventEmitter } from 'node:events';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
// The Loki-compatible logs API that `cpln logs` calls (found through /discovery endpoints.logs):
// under /logs/org/{org}/loki/api/v1/, query_range and query answer streams of lines, labels and
// label/{name}/values what the lines carry, and tail follows new lines over a WebSocket. Every
// route needs readLogs on the org. The lines are those Keel's simulated platform writes (see
// reconcile/narrate.ts); they are kept for KEEL_LOGS_MAX_AGE_DAYS, or the org's shorter
// spec.observability.logsRetentionDays.
import websocket from '@fastify/websocket';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import type { Authorizer } from '../auth/authorizer.js';
import type { Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { LogFeed } from '../logs/feed.js';
import { matches, parseLogQL, type LogQuery } from '../logs/logql.js';
import { readLines, toStreams } from '../logs/read.js';
import { msOfTs, NS_PER_MS, parseDuration, parseTime, tsOf, tsOfMs } from '../logs/time.js';
import { LOG_LABELS, type LogLabel, type LogLine, type Store } from '../store/types.js';

const BASE = '/logs/org/:org/loki/api/v1';
/** Where every logs route (and so every logs WebSocket) lives. */
export const LOGS_PREFIX = '/logs/';
const DEFAULT_LIMIT = 100;
/** Loki's default max_entries_limit_per_query. */
export const MAX_LIMIT = 5000;
const DEFAULT_RANGE_MS = 3_600_000;
/** Loki's default max_query_length (721h). */
export const MAX_RANGE_MS = 721 * 3_600_000;
const MAX_LABEL_VALUES = 1000;
/** Tails one principal may have open, and one process. */
export const MAX_TAILS_PER_PRINCIPAL = 10;
const MAX_TAILS = 1000;
/** Bytes a tail may have waiting to be sent: past that the consumer is too slow and is disconnected. */
export const TAIL_BUFFER_BYTES = 1024 * 1024;
const TAIL_POLL_MS = 250;
const PING_EVERY_MS = 30_000;
const RETENTION_EVERY_MS = 60_000;
const PRUNE_CHUNK = 10_000;

type Query = Record<string, string | undefined>;

function limitOf(q: Query): number {
  if (q.limit === undefined || q.limit === '') return DEFAULT_LIMIT;
  const n = Number(q.limit);
  if (!Number.isInteger(n) || n < 1) throw ApiError.badRequest(`limit must be a whole number from 1 to ${MAX_LIMIT}`, [{ path: 'limit', message: 'is not a positive whole number' }]);
  if (n > MAX_LIMIT) throw ApiError.badRequest(`max entries limit per query exceeded, limit > max_entries_limit (${n} > ${MAX_LIMIT})`, [{ path: 'limit', message: `is more than ${MAX_LIMIT}` }]);
  return n;
}

function timeOf(q: Query, name: string): string | undefined {
  const text = q[name];
  if (text === undefined || text === '') return undefined;
  const ts = parseTime(text);
  if (ts === undefined) throw ApiError.badRequest(`${name} must be a Unix time (ns or s) or an RFC 3339 time, got '${text.slice(0, 40)}'`, [{ path: name, message: 'is not a time' }]);
  return ts;
}

/** start (or end minus `since`, or minus an hour) to end (or now), checked against the range cap. */
function rangeOf(q: Query, now: number, end = timeOf(q, 'end') ?? tsOfMs(now + 1)): { from: string; to: string } {
  let from = timeOf(q, 'start');
  if (from === undefined) {
    const since = q.since === undefined || q.since === '' ? DEFAULT_RANGE_MS : parseDuration(q.since);
    if (since === undefined) throw ApiError.badRequest(`since must be a duration such as 1h or 30m, got '${q.since!.slice(0, 40)}'`, [{ path: 'since', message: 'is not a duration' }]);
    from = tsOf(BigInt(end) - BigInt(Math.round(since)) * NS_PER_MS);
  }
  if (from >= end) throw ApiError.badRequest('end timestamp must not be before or equal to start time', [{ path: 'end', message: 'is not after start' }]);
  const length = msOfTs(end) - msOfTs(from);
  if (length > MAX_RANGE_MS) {
    throw ApiError.badRequest(`the query time range exceeds the limit (query length: ${Math.ceil(length / 3_600_000)}h, limit: ${MAX_RANGE_MS / 3_600_000}h)`, [{ path: 'start', message: 'is too far before end' }]);
  }
  return { from, to: end };
}

function backwardOf(q: Query): boolean {
  if (q.direction === undefined || q.direction === '' || q.direction === 'backward' || q.direction === 'BACKWARD') return true;
  if (q.direction === 'forward' || q.direction === 'FORWARD') return false;
  throw ApiError.badRequest(`direction must be forward or backward, got '${q.direction.slice(0, 40)}'`, [{ path: 'direction', message: 'is not forward or backward' }]);
}

const success = (data: unknown) => ({ status: 'success', data });

export function mountLogs(app: FastifyInstance, store: Store, auth: Authorizer, config: Config): void {
  const orgDef = findKind('org')!;
  const allowed = async (principal: Principal, org: string) => auth.check(principal, 'readLogs', orgDef, { org, name: org });
  const feed = new LogFeed(store, TAIL_POLL_MS, (err) => app.log.error({ err }, 'log feed failed'));
  const tails = new Map<string, number>();
  let openTails = 0;
  let retention: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    retention = setInterval(() => void pruneLogLines(store, config, Date.now()).catch((err) => app.log.error({ err }, 'log retention failed')), RETENTION_EVERY_MS);
    retention.unref();
  });
  // Upgraded (or refused) WebSocket connections are the server's no longer: closing the server would
  // wait for them, so they are ended with it.
  const upgraded = new Set<import('node:stream').Duplex>();
  app.server.on('upgrade', (_request, socket) => {
    upgraded.add(socket);
    socket.once('close', () => upgraded.delete(socket));
  });
  app.addHook('preClose', async () => {
    for (const socket of upgraded) socket.destroy();
  });
  app.addHook('onClose', async () => {
    clearInterval(retention);
    feed.close();
  });

  app.register(async (logs) => {
    // The plugin routes every upgrade it hears through fastify; it hears only the logs API's, so the
    // other WebSocket endpoints (the replicas' exec and port-forward) keep their own.
    const upgrades = new EventEmitter();
    app.server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
      if ((request.url ?? '').startsWith(LOGS_PREFIX)) upgrades.emit('upgrade', request, socket, head);
    });
    await logs.register(websocket, { options: { maxPayload: 64 * 1024, server: upgrades as unknown as Server } });
    // An upgrade answered over HTTP (401, 403, 400) ends its connection: nothing reads the socket
    // after the answer, so a client's half-close would otherwise leave it open (and hold close()).
    logs.addHook('onSend', (request, reply, payload, done) => {
      if (request.ws) reply.header('connection', 'close');
      done(null, payload);
    });

    const rangeRead = async (request: FastifyRequest, instant: boolean) => {
      const { org } = request.params as { org: string };
      await allowed(request.principal, org);
      const q = request.query as Query;
      const query = parseLogQL(q.query ?? '');
      const limit = limitOf(q);
      const backward = backwardOf(q);
      const now = Date.now();
      // An instant query reads the lines up to its time (default now), looking back `since` (default 1h).
      const range = instant ? rangeOf({ since: q.since }, now, timeOf(q, 'time') ?? tsOfMs(now + 1)) : rangeOf(q, now);
      const lines = await readLines(store, query, { org, ...range, backward, limit });
      return success({ resultType: 'streams', result: toStreams(lines), stats: { summary: { totalEntriesReturned: lines.length } } });
    };
    logs.get(`${BASE}/query_range`, (request) => rangeRead(request, false));
    logs.get(`${BASE}/query`, (request) => rangeRead(request, true));

    logs.get(`${BASE}/labels`, async (request) => {
      const { org } = request.params as { org: string };
      await allowed(request.principal, org);
      const { from, to } = rangeOf(request.query as Query, Date.now());
      const present: string[] = [];
      for (const label of LOG_LABELS) if ((await store.logLabelValues(org, label, from, to, 1)).length > 0) present.push(label);
      return success(present);
    });

    logs.get(`${BASE}/label/:name/values`, async (request) => {
      const { org, name } = request.params as { org: string; name: string };
      await allowed(request.principal, org);
      const q = request.query as Query;
      const { from, to } = rangeOf(q, Date.now());
      if (!(LOG_LABELS as readonly string[]).includes(name)) return success([]);
      if (q.query === undefined || q.query === '') return success(await store.logLabelValues(org, name as LogLabel, from, to, MAX_LABEL_VALUES));
      // Values on the lines a selector picks: read from the newest of them.
      const lines = await readLines(store, parseLogQL(q.query), { org, from, to, backward: true, limit: MAX_LIMIT });
      const values = new Set(lines.map((line) => line.labels[name as LogLabel]).filter(Boolean));
      return success([...values].sort().slice(0, MAX_LABEL_VALUES));
    });

    /** What a tail was asked, checked before the upgrade so a refusal is an HTTP error the client reads. */
    const tailRequest = new WeakMap<FastifyRequest, { org: string; query: LogQuery; limit: number; from: string }>();
    logs.route({
      method: 'GET',
      url: `${BASE}/tail`,
      config: { streaming: true },
      preHandler: async (request) => {
        const { org } = request.params as { org: string };
        await allowed(request.principal, org);
        const q = request.query as Query;
        const query = parseLogQL(q.query ?? '');
        const limit = limitOf(q);
        const delay = q.delay_for === undefined || q.delay_for === '' ? 0 : Number(q.delay_for);
        if (!(Number.isInteger(delay) && delay >= 0 && delay <= 5)) throw ApiError.badRequest('delay_for must be a whole number of seconds from 0 to 5', [{ path: 'delay_for', message: 'is not from 0 to 5' }]);
        const from = timeOf(q, 'start') ?? tsOfMs(Date.now() - DEFAULT_RANGE_MS);
        if (!request.ws) throw ApiError.badRequest('tail is a WebSocket: send the request with Connection: Upgrade and Upgrade: websocket');
        const who = request.principal.link;
        if ((tails.get(who) ?? 0) >= MAX_TAILS_PER_PRINCIPAL) throw new ApiError('rate_limited', `at most ${MAX_TAILS_PER_PRINCIPAL} tails may be open at once per principal`);
        if (openTails >= MAX_TAILS) throw new ApiError('service_unavailable', `the server follows ${MAX_TAILS} tails; retry shortly`);
        tailRequest.set(request, { org, query, limit, from });
      },
      handler: async () => {
        throw ApiError.badRequest('tail is a WebSocket: send the request with Connection: Upgrade and Upgrade: websocket');
      },
      wsHandler: (socket, request) => {
        const asked = tailRequest.get(request)!;
        const who = request.principal.link;
        tails.set(who, (tails.get(who) ?? 0) + 1);
        openTails++;
        follow(socket, asked, () => {
          openTails--;
          const left = (tails.get(who) ?? 1) - 1;
          if (left > 0) tails.set(who, left);
          else tails.delete(who);
        });
      },
    });
  });

  /**
   * Sends the newest `limit` lines since `from`, then each new matching line as it is written. New
   * lines are taken from the moment the tail opens (held while the history is read), so none falls
   * between the two. A consumer with more than TAIL_BUFFER_BYTES unsent is closed (1013) with the
   * time to resume after.
   */
  function follow(socket: WebSocket, asked: { org: string; query: LogQuery; limit: number; from: string }, done: () => void): void {
    let history: Set<number> | undefined;
    let held: LogLine[] = [];
    let oldest = asked.from;
    let last = '';
    let open = true;
    const send = (lines: readonly LogLine[]) => {
      if (!open || lines.length === 0) return;
      if (socket.bufferedAmount > TAIL_BUFFER_BYTES) return close(1013, `slow consumer; resume after ${last ? BigInt(last).toString() : asked.from}`);
      socket.send(JSON.stringify({ streams: toStreams(lines) }));
      last = lines[lines.length - 1].ts;
    };
    const unsubscribe = feed.subscribe(asked.org, (lines) => {
      const wanted = lines.filter((line) => line.ts >= oldest && !history?.has(line.id) && matches(asked.query, line.labels, line.line));
      if (history === undefined) {
        held.push(...wanted);
        // History not read yet for this long: the client is not being served anyway.
        if (held.length > MAX_LIMIT) close(1013, 'too many new lines before the history was read; reconnect');
      } else send(wanted);
    });
    let pinged = false;
    const keepalive = setInterval(() => {
      if (pinged) return void socket.terminate();
      pinged = true;
      socket.ping();
    }, PING_EVERY_MS);
    socket.on('pong', () => (pinged = false));
    const close = (code?: number, reason?: string) => {
      if (!open) return;
      open = false;
      unsubscribe();
      clearInterval(keepalive);
      done();
      if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING) socket.close(code, reason);
    };
    socket.on('close', () => close());
    socket.on('error', () => close());
    const now = Date.now();
    readLines(store, asked.query, { org: asked.org, from: asked.from, to: tsOfMs(now + 1), backward: true, limit: asked.limit }).then(
      (lines) => {
        lines.reverse();
        history = new Set(lines.map((line) => line.id));
        if (lines.length > 0) oldest = lines[0].ts;
        const pending = held.filter((line) => !history!.has(line.id) && line.ts >= oldest);
        held = [];
        send(lines);
        send(pending);
      },
      (err) => close(1011, err instanceof ApiError ? err.message.slice(0, 120) : 'reading the logs failed'),
    );
  }
}

/**
 * Removes lines older than KEEL_LOGS_MAX_AGE_DAYS, or than the org's shorter
 * spec.observability.logsRetentionDays, in chunks of one transaction each.
 */
export async function pruneLogLines(store: Store, config: Pick<Config, 'logsMaxAgeDays'>, now: number): Promise<number> {
  let removed = 0;
  for (const org of await store.orgs()) {
    const item = await store.get({ org, kind: 'org', gvc: '', name: org });
    const own = Number((item?.data.spec as { observability?: { logsRetentionDays?: unknown } } | undefined)?.observability?.logsRetentionDays ?? 0);
    const days = [config.logsMaxAgeDays, own].filter((d) => Number.isFinite(d) && d > 0);
    if (days.length === 0) continue;
    const before = tsOfMs(now - Math.min(...days) * 86_400_000);
    for (;;) {
      const n = await store.pruneLogs(org, before, PRUNE_CHUNK);
      removed += n;
      if (n < PRUNE_CHUNK) break;
    }
  }
  return removed;
}
