import type { FastifyInstance } from 'fastify';
import { changes } from '../audit/changes.js';
import { PLATFORM_CONTEXT } from '../audit/events.js';
import type { Authorizer } from '../auth/authorizer.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { parseLink } from '../resources/links.js';
import type { AuditRecord, Store } from '../store/types.js';
import { onReplaced } from '../store/snapshots.js';

const POLL_MS = 250; // how soon changes made by other Keel processes arrive
const HEARTBEAT_MS = 15_000;
const CHANGE_ACTIONS = new Set(['create', 'edit', 'delete', 'status']);

/**
 * GET /org/{org}/-watch?kind=K: server-sent events of the creates, updates and deletes of the
 * items the caller may view, read from the org's audit chain. The event id is the chain's seq,
 * so a client resumes with Last-Event-ID (or ?since=) and sees every change exactly once, in
 * commit order, whichever Keel process made it.
 */
export function mountWatch(app: FastifyInstance, store: Store, auth: Authorizer): void {
  // Streams end when the server closes, so a graceful shutdown is not held up by watchers.
  const closers = new Set<() => void>();
  app.addHook('preClose', async () => {
    for (const close of closers) close();
  });
  // After a restore or reset the positions streams are at belong to another history: they end, and
  // a client that resumes from one is told where it stands (400 past the head).
  const stopFollowing = onReplaced(store, () => {
    for (const close of closers) close();
  });
  app.addHook('onClose', async () => stopFollowing());
  app.get('/org/:org/-watch', { config: { streaming: true } }, async (request, reply) => {
    const { org } = request.params as { org: string };
    const { kind, since } = request.query as { kind?: string; since?: string };
    const principal = request.principal;
    await auth.requireMember(principal, org);
    if (kind !== undefined && !findKind(kind)) throw ApiError.badRequest(`unknown kind '${kind}'`, [{ path: 'kind', message: 'is not a kind' }]);
    const resume = request.headers['last-event-id'] ?? since;
    let last = resume === undefined ? (await store.auditHead(org)).seq : Number(resume);
    if (!Number.isInteger(last) || last < 0) throw ApiError.badRequest('Last-Event-ID must be a sequence number', [{ path: 'Last-Event-ID', message: 'is not a sequence number' }]);

    reply.hijack();
    const out = reply.raw;
    out.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    out.write(': watching\n\n');

    let open = true;
    let wake: () => void = () => {};
    const onChange = (changed: string) => changed === org && wake();
    changes.on('change', onChange);
    const heartbeat = setInterval(() => out.write(': heartbeat\n\n'), HEARTBEAT_MS);
    const stop = () => {
      open = false;
      wake();
    };
    closers.add(stop);
    request.raw.once('close', stop);

    const visible = async (event: AuditRecord): Promise<boolean> => {
      const def = findKind(event.resourceType);
      if (!def) return false;
      const body = JSON.parse(event.body) as { resource: { link?: string; data?: Record<string, unknown> } };
      const target = body.resource.link ? parseLink(body.resource.link) : undefined;
      try {
        await auth.check(principal, 'view', def, { org, gvc: target?.gvc, name: event.resourceName, fields: () => body.resource.data ?? {} });
        return true;
      } catch (err) {
        if (err instanceof ApiError && err.code === 'forbidden') return false;
        throw err;
      }
    };

    try {
      while (open) {
        const events = await store.audit({ org, context: PLATFORM_CONTEXT, resourceType: kind, afterSeq: last, limit: 500 });
        for (const event of events) {
          last = event.seq;
          if (!CHANGE_ACTIONS.has(event.actionType) || !(await visible(event))) continue;
          const resource = (JSON.parse(event.body) as { resource: { data: unknown } }).resource.data;
          out.write(`id: ${event.seq}\nevent: ${event.actionType}\ndata: ${JSON.stringify({ type: event.actionType, seq: event.seq, kind: event.resourceType, object: resource })}\n\n`);
        }
        if (events.length === 500) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, POLL_MS);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    } finally {
      closers.delete(stop);
      clearInterval(heartbeat);
      changes.off('change', onChange);
      out.end();
    }
  });
}
