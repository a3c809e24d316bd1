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
import { changes, type AppendedEvent } from '../audit/changes.js';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import type { Authorizer } from '../auth/authorizer.js';
import { parseKey } from '../auth/keys.js';
import type { Principal } from '../auth/principal.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { LogFeed } from '../logs/feed.js';
import { parseLogQL, type LogQuery } from '../logs/logql.js';
import { LineMatcher, MAX_MATCH_WORK } from '../logs/match.js';
import { readLines, toStreams } from '../logs/read.js';
import { msOfTs, NS_PER_MS, parseDuration, parseTime, tsOf, tsOfMs } from '../logs/time.js';
import { LOG_LABELS, type LogLabel, type LogLine, type Store } from '../store/types.js';
import { ACCESS_KINDS } from '../store/access-kinds.js';
import { tokenOf } from '../auth/credentials.js';

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
/** Batches of new lines a tail may have waiting to be matched (each up to the feed's 10,000 lines). */
const MAX_WAITING_BATCHES = 4;
/** A line's labels and time as sent, about. */
const LINE_OVERHEAD_BYTES = 64;
const TAIL_POLL_MS = 250;
/** How often every open tail's key and readLogs are checked again (revocations made through another process). */
const TAIL_RECHECK_MS = 1000;
/** WebSocket close code for a tail whose principal lost access (policy violation). */
const REVOKED = 1008;
const PING_EVERY_MS = 30_000;
const RETENTION_EVERY_MS = 60_000;
const PRUNE_CHUNK = 10_000;
/** How often orgs over KEEL_LOG_MAX_BYTES_PER_ORG lose their oldest lines, and in chunks of how many lines (one transaction each). */
const CAP_EVERY_MS = 5_000;
const TRIM_CHUNK = 1_000;
/** Rows of changes to an org's bytes of lines past which the cap's pass folds them into one. */
const FOLD_ROWS = 64;

type Query = Record<string, string | undefined>;

/** An open tail as the access checks see it. */
interface OpenTail {
  principal: Principal;
  org: string;
  /** The key it was opened with (undefined for a JWT user). */
  keyName?: string;
  /** Holds new lines until release() (a check is under way). */
  hold(): void;
  release(): void;
  /** Closes it: its principal may no longer read the org's logs. */
  revoke(): void;
}

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
  const readBudget = { budgetMs: config.logsQueryBudgetMs, maxWork: MAX_MATCH_WORK };
  const feed = new LogFeed(store, TAIL_POLL_MS, (err) => app.log.error({ err }, 'log feed failed'));
  const tails = new Map<string, number>();
  let openTails = 0;
  const following = new Set<OpenTail>();
  let retention: NodeJS.Timeout | undefined;
  let cap: NodeJS.Timeout | undefined;
  let capping = false;
  let recheck: NodeJS.Timeout | undefined;
  // This process's writes that can take access away are checked at once; other processes' within about a second.
  const onChange = (_org: string, appended?: AppendedEvent) => {
    if (appended && ACCESS_KINDS.has(appended.resource.kind)) void recheckTails();
  };
  app.addHook('onReady', async () => {
    retention = setInterval(() => void pruneLogLines(store, config, Date.now()).catch((err) => app.log.error({ err }, 'log retention failed')), RETENTION_EVERY_MS);
    retention.unref();
    cap = setInterval(() => {
      if (capping) return;
      capping = true;
      void capLogLines(store, config)
        .catch((err) => app.log.error({ err }, 'log cap failed'))
        .finally(() => (capping = false));
    }, CAP_EVERY_MS);
    cap.unref();
    recheck = setInterval(() => {
      if (following.size > 0) void recheckTails();
    }, TAIL_RECHECK_MS);
    recheck.unref();
    changes.on('change', onChange);
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

  /**
   * Closes the tails whose principal may no longer read the org's logs: the key it was opened with
   * is gone (revoked, or its service account deleted) or readLogs was taken away. New lines wait
   * while a tail is checked, so none reaches a principal after a change made here took its access
   * away. One key lookup (read from the store, not a cache) per distinct key.
   */
  let rounds: Promise<void> = Promise.resolve();
  /** The round of checks not started yet: tails held by a later call join it. */
  let nextRound: { tails: Set<OpenTail>; done: Promise<void> } | undefined;
  const recheckTails = (): Promise<void> => {
    if (!nextRound) {
      const round = { tails: new Set<OpenTail>(), done: rounds };
      round.done = rounds = rounds.then(() => {
        nextRound = undefined;
        return checkTails([...round.tails]);
      });
      nextRound = round;
    }
    // Held from now until a check that starts after now has passed.
    for (const tail of following) {
      if (nextRound.tails.has(tail)) continue;
      tail.hold();
      nextRound.tails.add(tail);
    }
    return nextRound.done;
  };
  const checkTails = async (tails: OpenTail[]): Promise<void> => {
    const owners = new Map<string, Promise<string | undefined>>();
    const verdicts = new Map<string, Promise<boolean>>();
    await Promise.all(
      tails.map(async (tail) => {
        try {
          let may = true;
          if (tail.keyName !== undefined) {
            let owner = owners.get(tail.keyName);
            if (!owner) owners.set(tail.keyName, (owner = store.findKey(tail.keyName).then((r) => r && `/org/${r.org}/serviceaccount/${r.serviceAccount}`)));
            may = (await owner) === tail.principal.link;
          }
          if (may) {
            const who = `${tail.principal.link}\n${tail.org}`;
            let verdict = verdicts.get(who);
            if (!verdict) verdicts.set(who, (verdict = allowed(tail.principal, tail.org).then(() => true, (err) => (err instanceof ApiError && err.code === 'forbidden' ? false : Promise.reject(err)))));
            may = await verdict;
          }
          if (!may) tail.revoke();
        } catch (err) {
          // Checked again within a second: a failing store read does not end every tail.
          app.log.error({ err }, 'checking a tail failed');
        } finally {
          tail.release();
        }
      }),
    );
  };
  app.addHook('onClose', async () => {
    clearInterval(retention);
    clearInterval(cap);
    clearInterval(recheck);
    changes.off('change', onChange);
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
      const lines = await readLines(store, query, { org, ...range, backward, limit }, readBudget);
      return success({ resultType: 'streams', result: toStreams(lines), stats: { summary: { totalEntriesReturned: lines.length } } });
    };
    // Reads of stored lines wait and run among the long reads (see fairness.ts).
    const longRead = { config: { level: 'longReads' as const } };
    logs.get(`${BASE}/query_range`, longRead, (request) => rangeRead(request, false));
    logs.get(`${BASE}/query`, longRead, (request) => rangeRead(request, true));

    logs.get(`${BASE}/labels`, longRead, async (request) => {
      const { org } = request.params as { org: string };
      await allowed(request.principal, org);
      const { from, to } = rangeOf(request.query as Query, Date.now());
      const present: string[] = [];
      for (const label of LOG_LABELS) if ((await store.logLabelValues(org, label, from, to, 1)).length > 0) present.push(label);
      return success(present);
    });

    logs.get(`${BASE}/label/:name/values`, longRead, async (request) => {
      const { org, name } = request.params as { org: string; name: string };
      await allowed(request.principal, org);
      const q = request.query as Query;
      const { from, to } = rangeOf(q, Date.now());
      if (!(LOG_LABELS as readonly string[]).includes(name)) return success([]);
      if (q.query === undefined || q.query === '') return success(await store.logLabelValues(org, name as LogLabel, from, to, MAX_LABEL_VALUES));
      // Values on the lines a selector picks: read from the newest of them.
      const lines = await readLines(store, parseLogQL(q.query), { org, from, to, backward: true, limit: MAX_LIMIT }, readBudget);
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
        const token = tokenOf(request);
        follow(socket, { ...asked, principal: request.principal, keyName: token === undefined ? undefined : parseKey(token)?.keyName }, () => {
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
   * between the two. A tail with more than TAIL_BUFFER_BYTES unsent (in its socket, or held while
   * its history is read or its access checked) when new lines come is closed (1013) with the time
   * to resume after; one whose principal lost access, with 1008.
   */
  function follow(socket: WebSocket, asked: { org: string; query: LogQuery; limit: number; from: string; principal: Principal; keyName?: string }, done: () => void): void {
    let history: Set<number> | undefined;
    /** Lines waiting while the history is read or the tail's access is checked (see recheckTails). */
    let held: LogLine[] = [];
    let holds = 1;
    let oldest = asked.from;
    /** The time of the last line sent; before any, just before `from` (which is inclusive). */
    let last = (BigInt(asked.from) - 1n).toString();
    let open = true;
    /** Bytes of the held lines, about as they will be sent. */
    let heldBytes = 0;
    const send = (lines: readonly LogLine[]) => {
      if (!open || lines.length === 0) return;
      socket.send(JSON.stringify({ streams: toStreams(lines) }));
      last = BigInt(lines[lines.length - 1].ts).toString();
    };
    // New lines are matched in turn, in slices (see logs/match.ts). A tail whose query matches slower
    // than lines come has batches waiting: past MAX_WAITING_BATCHES it is a slow consumer too.
    const matcher = new LineMatcher(asked.query, { budgetMs: Infinity, maxWork: Infinity });
    let matching: Promise<void> = Promise.resolve();
    let waitingBatches = 0;
    const deliver = (matched: readonly LogLine[]) => {
      const wanted = matched.filter((line) => line.ts >= oldest && !history?.has(line.id));
      if (!open || wanted.length === 0) return;
      // Unsent bytes (in the socket, or held here) over the bound: closed rather than buffering more.
      if (socket.bufferedAmount + heldBytes > TAIL_BUFFER_BYTES) return close(1013, `slow consumer; resume after ${last}`);
      if (holds === 0) return send(wanted);
      held.push(...wanted);
      for (const line of wanted) heldBytes += line.line.length + LINE_OVERHEAD_BYTES;
    };
    const unsubscribe = feed.subscribe(asked.org, (lines) => {
      if (!open || lines.length === 0) return;
      if (waitingBatches >= MAX_WAITING_BATCHES) return close(1013, `slow consumer; resume after ${last}`);
      waitingBatches++;
      matching = matching
        .then(() => (open ? matcher.filter(lines) : []))
        .then(deliver, () => close(1011, 'matching the logs failed'))
        .finally(() => void waitingBatches--);
    });
    const release = () => {
      if (--holds > 0) return;
      const waiting = held;
      held = [];
      heldBytes = 0;
      send(waiting);
    };
    const tail: OpenTail = {
      principal: asked.principal,
      org: asked.org,
      keyName: asked.keyName,
      hold: () => void holds++,
      release,
      revoke: () => close(REVOKED, 'access to these logs was revoked'),
    };
    following.add(tail);
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
      following.delete(tail);
      unsubscribe();
      clearInterval(keepalive);
      done();
      if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING) socket.close(code, reason);
    };
    socket.on('close', () => close());
    socket.on('error', () => close());
    const now = Date.now();
    readLines(store, asked.query, { org: asked.org, from: asked.from, to: tsOfMs(now + 1), backward: true, limit: asked.limit }, readBudget).then(
      (lines) => {
        lines.reverse();
        history = new Set(lines.map((line) => line.id));
        if (lines.length > 0) oldest = lines[0].ts;
        held = [...lines, ...held.filter((line) => !history!.has(line.id) && line.ts >= oldest)];
        release();
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

/**
 * Removes the oldest lines of each org whose lines take more than KEEL_LOG_MAX_BYTES_PER_ORG, until
 * they fit, in chunks of one transaction each with the event loop free between them.
 */
export async function capLogLines(store: Store, config: Pick<Config, 'logMaxBytesPerOrg'>): Promise<number> {
  let removed = 0;
  for (const { org, bytes, rows } of await store.logUsage()) {
    let over = bytes - config.logMaxBytesPerOrg;
    while (over > 0) {
      const gone = await store.trimLogs(org, over, TRIM_CHUNK);
      if (gone.lines === 0) break;
      removed += gone.lines;
      over -= gone.bytes;
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (rows > FOLD_ROWS) await store.foldLogUsage(org);
  }
  return removed;
}
