import type { FastifyInstance, FastifyRequest } from 'fastify';
import { actorOf, eventView, KEEL_ACTIONS, newEventId, PLATFORM_CONTEXT, subjectOf } from '../audit/events.js';
import type { Authorizer } from '../auth/authorizer.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { pageSizeOf } from './paging.js';
import { findKind } from '../kinds/index.js';
import type { AuditFilter, NewAuditEvent, Store } from '../store/types.js';

type QueryString = Record<string, string | undefined>;
type Params = Record<string, string>;

/** Reading a context's events needs readAudit on it; writing custom events needs writeAudit. */
async function authorizeContext(store: Store, auth: Authorizer, principal: Principal, org: string, context: string, permission: string): Promise<void> {
  await auth.requireMember(principal, org);
  const def = findKind('auditctx')!;
  const ctx = await store.get({ org, kind: 'auditctx', gvc: '', name: context });
  if (!ctx) throw ApiError.notFound(`auditctx '${context}' not found`);
  await auth.check(principal, permission, def, { org, name: context, fields: () => ({ ...ctx.data, id: ctx.id, name: ctx.name }) });
}

function isoTime(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const t = new Date(value);
  if (Number.isNaN(t.getTime())) throw ApiError.badRequest(`${name} must be an ISO 8601 time`, [{ path: name, message: 'must be an ISO 8601 time' }]);
  return t.toISOString();
}

/** The filter of a query string; `fixed` adds what the path says (resource id, name, subject). */
function filterOf(org: string, query: QueryString, limit: number, fixed: Partial<AuditFilter>): AuditFilter {
  const after = query.next === undefined ? undefined : Number(query.next);
  if (after !== undefined && (!Number.isSafeInteger(after) || after < 0)) throw ApiError.badRequest('next is invalid', [{ path: 'next', message: 'is invalid' }]);
  if (query.direction !== undefined && query.direction !== 'forward' && query.direction !== 'backward') {
    throw ApiError.badRequest('direction must be forward or backward', [{ path: 'direction', message: 'must be forward or backward' }]);
  }
  // Backward pages go from the newest event down: `next` is then the seq the next page stays below.
  const backward = query.direction === 'backward';
  return {
    org,
    context: query.contextName ?? PLATFORM_CONTEXT,
    resourceType: query.resourceType,
    resourceName: query.resourceName,
    resourceId: query.resourceId,
    subjectName: query.subjectName,
    actionType: query.actionType,
    exceptActionType: query.exceptActionType,
    from: isoTime('fromEvent', query.fromEvent),
    to: isoTime('toEvent', query.toEvent),
    ...(backward ? { newestFirst: true, throughSeq: after === undefined ? undefined : after - 1 } : { afterSeq: after }),
    limit,
    ...fixed,
  };
}

/** The Audit API (api-semantics §11): query events, read one, and post custom events to a context. */
export function mountAuditApi(app: FastifyInstance, store: Store, auth: Authorizer): void {
  const query = async (request: FastifyRequest, fixed: Partial<AuditFilter>) => {
    const org = (request.params as Params).org;
    const qs = request.query as QueryString;
    const filter = filterOf(org, qs, pageSizeOf(request, qs.limit), fixed);
    await authorizeContext(store, auth, request.principal, org, filter.context!, 'readAudit');
    const records = await store.audit({ ...filter, limit: filter.limit + 1 });
    const more = records.length > filter.limit;
    const page = more ? records.slice(0, filter.limit) : records;
    const path = request.url.split('?')[0];
    const links: Array<{ rel: string; href: string }> = [{ rel: 'self', href: path }];
    if (more) {
      const next = new URLSearchParams({ ...(qs as Record<string, string>), next: String(page[page.length - 1].seq) });
      links.push({ rel: 'next', href: `${path}?${next}` });
    }
    const { org: _org, afterSeq: _after, throughSeq: _through, newestFirst: _newest, limit: _limit, ...echo } = filter;
    return { kind: 'queryresult', itemKind: 'auditevent', items: page.map(eventView), query: Object.fromEntries(Object.entries(echo).filter(([, v]) => v !== undefined)), links };
  };

  // Pages of audit events wait and run among the long reads (see fairness.ts).
  const longRead = { config: { level: 'longReads' as const } };
  app.get('/audit/org/:org', longRead, (request) => query(request, {}));
  app.get('/audit/org/:org/resource/id/:id', longRead, (request) => query(request, { resourceId: (request.params as Params).id }));
  app.get('/audit/org/:org/resource/name/:name', longRead, (request) => query(request, { resourceName: (request.params as Params).name }));
  app.get('/audit/org/:org/subject/email/:email', longRead, (request) => query(request, { subjectName: (request.params as Params).email }));
  app.get('/audit/org/:org/id/:id', async (request) => {
    const { org, id } = request.params as Params;
    await auth.requireMember(request.principal, org);
    const [record] = await store.audit({ org, id, limit: 1 });
    if (!record) throw ApiError.notFound(`audit event '${id}' not found`);
    await authorizeContext(store, auth, request.principal, org, record.context, 'readAudit');
    return eventView(record);
  });
  app.post('/audit/org/:org/auditctx/:ctx', async (request, reply) => {
    const { org, ctx } = request.params as Params;
    // Keel's own context holds only what Keel writes: readers (watches, verify, reconcilers) trust it.
    if (ctx === PLATFORM_CONTEXT) throw ApiError.badRequest(`custom events cannot be written to the '${PLATFORM_CONTEXT}' context, which holds Keel's own events`, [{ path: 'context', message: `may not be '${PLATFORM_CONTEXT}'` }]);
    await authorizeContext(store, auth, request.principal, org, ctx, 'writeAudit');
    const event = customEvent(org, ctx, request.principal, request.body);
    await store.transaction((tx) => tx.appendAudit(event));
    await store.chained([event]);
    // By its place in the chain when the store gave it one here (no lookup by id to wait for).
    const [record] = await store.audit(event.seq === undefined ? { org, id: event.id, limit: 1 } : { org, afterSeq: event.seq - 1, throughSeq: event.seq, limit: 1 });
    return reply.code(201).send(eventView(record));
  });
}

const CUSTOM_FIELDS = ['resource', 'action', 'subject', 'result', 'eventTime', 'context'];

/** A custom event (POST …/auditctx/{ctx}): unknown fields are rejected, the subject is always the caller. */
function customEvent(org: string, context: string, principal: Principal, body: unknown): NewAuditEvent {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw ApiError.badRequest('the event must be a JSON object');
  const input = body as Record<string, any>; // shape checked field by field below
  const unknown = Object.keys(input).filter((k) => !CUSTOM_FIELDS.includes(k));
  if (unknown.length) throw ApiError.badRequest(`unknown event fields: ${unknown.join(', ')}`, unknown.map((path) => ({ path, message: 'is not a known field' })));
  const errors = [];
  if (!input.resource || typeof input.resource !== 'object' || typeof input.resource.type !== 'string') errors.push({ path: 'resource.type', message: 'is required (a string)' });
  if (!input.action || typeof input.action !== 'object' || typeof input.action.type !== 'string') errors.push({ path: 'action.type', message: 'is required (a string)' });
  // An event that reads like one of Keel's own (a restore above all) could mislead whoever reads the log.
  else if ([...KEEL_ACTIONS].some((a) => a.toLowerCase() === input.action.type.trim().toLowerCase())) {
    errors.push({ path: 'action.type', message: `may not be one of the actions Keel writes itself (${[...KEEL_ACTIONS].join(', ')})` });
  }
  if (input.context !== undefined && (input.context === null || typeof input.context !== 'object' || Array.isArray(input.context))) errors.push({ path: 'context', message: 'must be an object' });
  else if (input.context?.name !== undefined && input.context.name !== context) errors.push({ path: 'context.name', message: `must be the context of the path ('${context}') when given` });
  // Objects where text is expected would make String() below throw (a 500).
  if (input.eventTime !== undefined && typeof input.eventTime !== 'string') errors.push({ path: 'eventTime', message: 'must be a string' });
  for (const field of ['id', 'name']) {
    const v = input.resource?.[field];
    if (v !== undefined && v !== null && typeof v === 'object') errors.push({ path: `resource.${field}`, message: 'must be a string' });
  }
  if (errors.length) throw ApiError.badRequest('invalid audit event', errors);
  const actor = actorOf(principal);
  const id = newEventId();
  const now = new Date().toISOString();
  const eventTime = input.eventTime === undefined ? now : isoTime('eventTime', String(input.eventTime))!;
  const resource = { id: String(input.resource.id ?? ''), name: String(input.resource.name ?? ''), type: input.resource.type, ...(input.resource.data ? { data: input.resource.data } : {}) };
  const full = {
    id,
    eventTime,
    postedTime: now,
    receivedTime: now,
    requestId: actor.requestId ?? id,
    context: { org, name: context, eventSource: 'custom', ...(actor.remoteIp ? { remoteIp: actor.remoteIp } : {}), ...(input.context?.data ? { data: input.context.data } : {}) },
    subject: subjectOf(actor, input.subject && typeof input.subject === 'object' ? input.subject : {}),
    resource,
    action: input.action,
    result: input.result ?? { status: 'success' },
  };
  return {
    org,
    id,
    context,
    eventTime,
    resourceType: resource.type,
    resourceName: resource.name,
    resourceId: resource.id,
    subjectName: actor.name,
    actionType: String(input.action.type),
    body: JSON.stringify(full),
  };
}
