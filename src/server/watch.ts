import type { FastifyInstance } from 'fastify';
import type { Authorizer } from '../auth/authorizer.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { holdsUnstorable, UNSTORABLE_TEXT } from '../storable.js';
import { findKind } from '../kinds/index.js';
import { parseQuery } from '../query/index.js';
import type { AuditRecord, Store } from '../store/types.js';
import { viewsAny, WatchHub } from '../streams/hub.js';
import type { WatchFilter } from '../streams/watcher.js';
import { tokenOf } from '../auth/credentials.js';
import { coreBase } from '../public-url.js';
import { onReplaced } from '../store/snapshots.js';
import { isKeelRestore, PLATFORM_CONTEXT, RESTORE_ACTION } from '../audit/events.js';
import type { Scheduler } from './fairness.js';

const NAME = /^[a-z]([-a-z0-9])*[a-z0-9]$/;
const MAX_NAMES = 100;

/**
 * GET /org/{org}/-watch: server-sent events of the creates, updates and deletes of the items the
 * caller may view, read from the org's audit chain. The event id is the chain's seq, so a client
 * resumes with Last-Event-ID (or ?since=, e.g. a list's Keel-Seq) and sees every change exactly
 * once, in commit order, whichever Keel process made it. Narrowed by ?kind=, ?gvc=, ?name=a,b and
 * ?query=<a -query body as JSON>. See docs/streams.md.
 */
export function mountWatch(app: FastifyInstance, store: Store, auth: Authorizer, config: Config, scheduler: Scheduler): void {
  const hub = new WatchHub(
    store,
    auth,
    {
      streamsPerPrincipal: config.watchStreamsPerPrincipal,
      replaysPerPrincipal: config.watchReplaysPerPrincipal,
      bookmarkMs: config.watchBookmarkMs,
      bufferBytes: config.watchBufferBytes,
      behindMs: config.watchBehindMs,
      bufferTotalBytes: config.watchBufferTotalBytes,
    },
    (err) => app.log.error({ err }, 'watch'),
    scheduler,
  );
  // Streams end when the server closes, so a graceful shutdown is not held up by watchers.
  app.addHook('preClose', async () => hub.close());
  // After a restore or reset the positions streams are at belong to another history: they end, and
  // a client that resumes from one is told where it stands (400 past the head).
  const stopFollowing = onReplaced(store, () => hub.endStreams());
  app.addHook('onClose', async () => stopFollowing());
  app.get('/org/:org/-watch', { config: { streaming: true } }, async (request, reply) => {
    const { org } = request.params as { org: string };
    const query = request.query as Record<string, string | undefined>;
    const principal = request.principal;
    await auth.requireMember(principal, org);
    const filter = watchFilter(query);
    await hub.admitAfterBackoff(principal, 'stream');

    const header = request.headers['last-event-id'];
    const resume = (Array.isArray(header) ? header[0] : header) ?? query.since;
    const head = await store.auditHead(org);
    let from = head.seq;
    if (resume !== undefined) {
      from = /^\d{1,15}$/.test(resume) ? Number(resume) : NaN;
      if (!Number.isSafeInteger(from)) throw ApiError.badRequest('since (or Last-Event-ID) must be a sequence number', [{ path: 'since', message: 'is not a sequence number' }]);
      if (from > head.seq) {
        throw ApiError.badRequest(`position ${from} is past the org's head ${head.seq}; list again and watch from its Keel-Seq`, [{ path: 'since', message: `is past the head ${head.seq}` }]);
      }
      if (from < head.prunedUpTo) {
        throw new ApiError('gone', `position ${from} is older than the retained history (it starts after ${head.prunedUpTo}); list again and watch from its Keel-Seq`, { oldest: head.prunedUpTo });
      }
      // The events between a position and a later restore were undone: replaying them would show a state that no longer is.
      const restore = from < head.seq ? await restoreAfter(store, org, from, head.seq) : undefined;
      if (restore) {
        throw new ApiError('gone', `the org was restored from a snapshot at position ${restore.seq}, after ${from}; list again and watch from its Keel-Seq`, { restoredAt: restore.seq });
      }
    }
    const viewing = await viewsAny(auth, principal, org, filter.kind);
    const feed = await hub.feed(org);
    // Checked again after the reads above: concurrent opens of one principal are counted by now.
    hub.admit(principal);
    if (from < feed.position && feed.after(from) === 'behind') await hub.admitAfterBackoff(principal, 'replay');

    reply.hijack();
    const out = reply.raw;
    // A client gone while it was held back or its position read has nothing to watch with.
    if (request.raw.socket.destroyed) {
      out.destroy();
      return;
    }
    out.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    out.write(': watching\n\n');
    const watcher = hub.open({ feed, principal, filter, from, out, viewing, base: coreBase(config, request) }, tokenOf(request));
    out.once('close', () => watcher.end());
  });
}

/** The watch's narrowing from its query parameters (400 when one is malformed). */
function watchFilter(query: Record<string, string | undefined>): WatchFilter {
  const filter: WatchFilter = {};
  const { kind, gvc, name } = query;
  if (kind !== undefined) {
    if (!findKind(kind)) throw ApiError.badRequest(`unknown kind '${kind}'`, [{ path: 'kind', message: 'is not a kind' }]);
    filter.kind = kind;
  }
  if (gvc !== undefined) {
    if (!NAME.test(gvc) || gvc.length > 64) throw ApiError.badRequest(`gvc '${gvc}' is not a valid name`, [{ path: 'gvc', message: 'is not a valid name' }]);
    if (kind !== undefined && findKind(kind)!.scope !== 'gvc') throw ApiError.badRequest(`kind '${kind}' does not live in a GVC`, [{ path: 'gvc', message: `does not apply to ${kind}` }]);
    filter.gvc = gvc;
  }
  if (name !== undefined) {
    const names = name.split(',');
    if (names.length > MAX_NAMES || names.some((n) => n === '' || n.length > 256)) {
      throw ApiError.badRequest(`name must list 1 to ${MAX_NAMES} names separated by commas`, [{ path: 'name', message: 'is not a list of names' }]);
    }
    filter.names = new Set(names);
  }
  if (query.query !== undefined) {
    let body: unknown;
    try {
      body = JSON.parse(query.query);
    } catch {
      throw ApiError.badRequest('query must be the JSON of a -query body', [{ path: 'query', message: 'is not JSON' }]);
    }
    if (holdsUnstorable(body)) throw ApiError.badRequest(`query must not contain ${UNSTORABLE_TEXT}`, [{ path: 'query', message: `holds ${UNSTORABLE_TEXT}` }]);
    const bodyKind = body && typeof body === 'object' && typeof (body as { kind?: unknown }).kind === 'string' ? (body as { kind: string }).kind : undefined;
    const queryKind = kind ?? bodyKind;
    if (queryKind === undefined) throw ApiError.badRequest('a query needs a kind: give ?kind= or the query\'s kind', [{ path: 'kind', message: 'is required with query' }]);
    if (bodyKind !== undefined && bodyKind !== queryKind) throw ApiError.badRequest(`the query's kind '${bodyKind}' is not the watch's kind '${queryKind}'`, [{ path: 'query.kind', message: `is not ${queryKind}` }]);
    const queryDef = findKind(queryKind);
    if (!queryDef) throw ApiError.badRequest(`unknown kind '${queryKind}'`, [{ path: 'query.kind', message: 'is not a kind' }]);
    filter.query = parseQuery(body, queryDef);
    filter.kind = queryKind;
  }
  return filter;
}

/**
 * The first restore Keel recorded in (from, through]. A restore's event names no resource
 * (resourceId ''): looked up by that, on the index, not by scanning the chain since `from`; events
 * that only look like one (see isKeelRestore) are passed over.
 */
async function restoreAfter(store: Store, org: string, from: number, through: number): Promise<AuditRecord | undefined> {
  for (let after = from; ; ) {
    const page = await store.audit({ org, context: PLATFORM_CONTEXT, resourceId: '', actionType: RESTORE_ACTION, afterSeq: after, throughSeq: through, limit: RESTORE_PAGE });
    const restore = page.find(isKeelRestore);
    if (restore || page.length < RESTORE_PAGE) return restore;
    after = page[page.length - 1].seq;
  }
}
const RESTORE_PAGE = 100;
