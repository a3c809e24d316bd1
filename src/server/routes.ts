import type { FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { ApiError } from '../errors.js';
import { KINDS, findKind } from '../kinds/index.js';
import { impliedPermissions } from '../kinds/derive.js';
import type { KindDef, Place, Resource } from '../kinds/types.js';
import { matchesQuery, parseQuery, type Query } from '../query/index.js';
import { jsonOf } from '../resources/present.js';
import type { Page, Resources } from '../resources/service.js';
import { holdsUnstorable } from '../storable.js';
import type { AtPosition } from '../store/types.js';
import { withPosition } from '../streams/position.js';
import { sendError } from './errors.js';
import type { BodyPermission } from './authenticate.js';
import type { HeavyLevel } from './fairness.js';
import { pageSizeOf } from './paging.js';

const ALL_METHODS: HTTPMethods[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** A route handler: a promise of the answer, or nothing when it has sent the answer itself, at once. */
type Handler = (request: FastifyRequest, reply: FastifyReply) => Promise<unknown> | undefined;
type Params = Record<string, string>;
type QueryString = Record<string, string | undefined>;

/**
 * Mounts `handlers` on `url` and answers 405 with the error object for every other method. The
 * methods named in `levels` are lists and queries (`lists`) or history and event log reads
 * (`longReads`): they wait and run in that level of the scheduler (see fairness.ts). The methods
 * named in `permissions` are writes whose caller must be able to hold one of those permissions: one
 * that cannot is refused before its body is read (see the admission hooks in app.ts). With
 * `inProcess`, the handlers may also be called in process (see InProcess): they must read nothing of
 * the request but its method, principal, params, query, URL, body and the server's page size.
 */
export function mount(
  app: FastifyInstance,
  url: string,
  handlers: Partial<Record<HTTPMethods, Handler>>,
  levels: Partial<Record<HTTPMethods, HeavyLevel>> = {},
  permissions: Partial<Record<HTTPMethods, BodyPermission>> = {},
  inProcess = false,
): void {
  for (const [method, handler] of Object.entries(handlers)) {
    const level = levels[method as HTTPMethods];
    const bodyPermission = permissions[method as HTTPMethods];
    const config = { ...(level ? { level } : {}), ...(bodyPermission ? { bodyPermission } : {}), ...(inProcess ? { inProcess } : {}) };
    app.route({ method: method as HTTPMethods, url, handler: handler!, config });
  }
  const others = ALL_METHODS.filter((m) => !(m in handlers));
  if (others.length === 0) return;
  const allowed = Object.keys(handlers).join(', ');
  app.route({
    method: others,
    url,
    config: { methodNotAllowed: true },
    handler: async (request, reply) =>
      sendError(reply.header('allow', allowed), request, new ApiError('method_not_allowed', `${request.method} is not allowed on ${url}; allowed: ${allowed}`)),
  });
}

/** The generic kinds' routes: they run in process too. */
function generic(app: FastifyInstance, url: string, handlers: Partial<Record<HTTPMethods, Handler>>, levels: Partial<Record<HTTPMethods, HeavyLevel>> = {}, permissions: Partial<Record<HTTPMethods, BodyPermission>> = {}): void {
  mount(app, url, handlers, levels, permissions, true);
}

/** Every kind's routes, derived from the registry: one generic handler per operation. */
// Lists, queries and item reads name the chain position they reflect (Keel-Seq, see withPosition).
export function mountRoutes(app: FastifyInstance, resources: Resources): void {
  for (const def of KINDS) {
    if (def.kind === 'org') continue;
    const collection = def.scope === 'gvc' ? `/org/:org/gvc/:gvc/${def.kind}` : `/org/:org/${def.kind}`;
    const nameParam = def.kind === 'gvc' ? 'gvc' : 'name';
    const item = `${collection}/:${nameParam}`;
    const nameOf = (request: FastifyRequest) => (request.params as Params)[nameParam];

    generic(app, collection, {
      GET: (request, reply) => list(resources, def, placeOf(def, request), request, reply),
      POST: async (request, reply) => {
        const created = await resources.create(request.principal, def, placeOf(def, request), request.body, writeOptions(request));
        return sendResource(reply.code(201).header('location', selfOf(created)), created);
      },
      PUT: async (request, reply) => {
        const result = await resources.apply(request.principal, def, placeOf(def, request), request.body, writeOptions(request));
        if (result.created) reply.code(201).header('location', selfOf(result.resource));
        return sendResource(reply, result.resource);
      },
    }, { GET: 'lists' }, { POST: { def, permissions: ['create'] }, PUT: { def, permissions: ['create', 'edit'] } });
    generic(app, item, {
      GET: (request, reply) => sendRead(reply, resources.getAt(request.principal, def, placeOf(def, request), nameOf(request))),
      PATCH: async (request, reply) => sendResource(reply, await resources.patch(request.principal, def, placeOf(def, request), nameOf(request), request.body, writeOptions(request))),
      PUT: async (request, reply) => {
        const result = await resources.replace(request.principal, def, placeOf(def, request), nameOf(request), request.body, writeOptions(request));
        if (result.created) reply.code(201).header('location', selfOf(result.resource));
        return sendResource(reply, result.resource);
      },
      DELETE: async (request, reply) => {
        await resources.delete(request.principal, def, placeOf(def, request), nameOf(request));
        return reply.code(202).type('application/json').send();
      },
    }, {}, { PATCH: { def, permissions: ['edit'], item: nameParam }, PUT: { def, permissions: ['create', 'edit'], item: nameParam } });
    generic(app, `${item}/-eventlog`, { GET: (request) => eventlog(resources, def, placeOf(def, request), nameOf(request), request) }, { GET: 'longReads' });
    generic(app, `${item}/-history`, { GET: (request) => history(resources, def, placeOf(def, request), nameOf(request), request) }, { GET: 'longReads' });
    if (def.scope === 'gvc') generic(app, `/org/:org/${def.kind}`, { GET: (request, reply) => list(resources, def, placeOf(def, request), request, reply) }, { GET: 'lists' });
    mountKindWide(app, resources, def);
  }
  mountOrgs(app, resources);
  mountActions(app, resources);
}

/**
 * Routes that address a kind as a whole: its query (org-wide, also for gvc-scoped kinds, and within
 * one GVC under the GVC's path) and its permission schema.
 */
function mountKindWide(app: FastifyInstance, resources: Resources, def: KindDef): void {
  const base = def.kind === 'org' ? '/org' : `/org/:org/${def.kind}`;
  if (def.kind === 'org') {
    // Orgs are not inside an org: the query runs over the orgs the caller may view (and has no one org's position).
    generic(app, '/org/-query', {
      POST: async (request) => {
        const query = parseQuery(emptyToUndefined(request.body), def);
        const items = (await resources.listOrgs(request.principal)).filter((o) => matchesQuery(query, o));
        const sent = (emptyToUndefined(request.body) ?? {}) as Record<string, unknown>;
        return { kind: 'queryresult', itemKind: 'org', items, links: [{ rel: 'self', href: '/org/-query' }], query: { kind: 'org', spec: { match: 'all', terms: [], ...((sent.spec ?? {}) as object) } } };
      },
    }, { POST: 'lists' });
  } else mountQuery(app, resources, def, `${base}/-query`, (request) => ({ org: orgOf(request) }));
  if (def.scope === 'gvc') mountQuery(app, resources, def, `/org/:org/gvc/:gvc/${def.kind}/-query`, (request) => placeOf(def, request));
  generic(app, `${base}/-schema/permissions`, {
    GET: async (request) => permissionSchema(def, def.kind === 'org' ? '/org/-schema/permissions' : `/org/${orgOf(request)}/${def.kind}/-schema/permissions`),
  });
}

/** A kind's permission schema: which permissions a policy can grant on it and what each implies. */
export function permissionSchema(def: KindDef, self: string) {
  return { kind: 'permissions', targetKind: def.kind, items: def.permissions, implied: impliedPermissions(def), links: [{ rel: 'self', href: self }] };
}

/** POST runs a query; GET follows a page's `next` link. */
function mountQuery(app: FastifyInstance, resources: Resources, def: KindDef, url: string, placeFor: (request: FastifyRequest) => Place): void {
  generic(app, url, {
    POST: async (request, reply) => {
      const place = placeFor(request);
      const query = parseQuery(emptyToUndefined(request.body), def);
      return queryPage(resources, def, place, request, reply, query, echoOf(request.body, def, place));
    },
    GET: async (request, reply) => {
      const place = placeFor(request);
      const token = decodeNext((request.query as QueryString).next, request.server.maxPageSize);
      const query = parseQuery(token.query, def);
      return queryPage(resources, def, place, request, reply, query, token.echo, token.after, token.limit);
    },
  }, { POST: 'lists', GET: 'lists' });
}

function mountOrgs(app: FastifyInstance, resources: Resources): void {
  const org = findKind('org')!;
  generic(app, '/org', {
    GET: async (request) => ({ kind: 'list', itemKind: 'org', items: await resources.listOrgs(request.principal), links: [{ rel: 'self', href: '/org' }] }),
    POST: async (request, reply) => {
      const created = await resources.createOrg(request.principal, request.body);
      return reply.code(201).header('location', selfOf(created)).send(created);
    },
  }, { GET: 'lists' });
  generic(app, '/org/:org', {
    GET: (request, reply) => sendRead(reply, resources.getAt(request.principal, org, { org: orgOf(request) }, orgOf(request))),
    PATCH: async (request, reply) => sendResource(reply, await resources.patch(request.principal, org, { org: orgOf(request) }, orgOf(request), request.body, writeOptions(request))),
  }, {}, { PATCH: { def: org, permissions: ['edit'], item: 'org' } });
  // A query over one org (the CLI's map names it): the org itself when it matches and the caller may view it.
  generic(app, '/org/:org/-query', {
    POST: async (request) => {
      const name = orgOf(request);
      const query = parseQuery(emptyToUndefined(request.body), org);
      const item = await resources.get(request.principal, org, { org: name }, name);
      const sent = (emptyToUndefined(request.body) ?? {}) as Record<string, unknown>;
      const self = `/org/${name}/-query`;
      return { kind: 'queryresult', itemKind: 'org', items: matchesQuery(query, item) ? [item] : [], links: [{ rel: 'self', href: self }], query: { kind: 'org', spec: { match: 'all', terms: [], ...((sent.spec ?? {}) as object) } } };
    },
  });
  generic(app, '/org/:org/-eventlog', { GET: (request) => eventlog(resources, org, { org: orgOf(request) }, orgOf(request), request) }, { GET: 'longReads' });
  generic(app, '/org/:org/-history', { GET: (request) => history(resources, org, { org: orgOf(request) }, orgOf(request), request) }, { GET: 'longReads' });
  mountKindWide(app, resources, org);
}

/** Kind-specific sub-resources. */
function mountActions(app: FastifyInstance, resources: Resources): void {
  const serviceaccount = findKind('serviceaccount')!;
  const secret = findKind('secret')!;
  generic(app, '/org/:org/serviceaccount/:name/-addKey', {
    POST: (request) => resources.addKey(request.principal, serviceaccount, { org: orgOf(request) }, (request.params as Params).name, request.body),
  }, {}, { POST: { def: serviceaccount, permissions: ['addKey'], item: 'name' } });
  generic(app, '/org/:org/secret/:name/-reveal', {
    GET: (request) => resources.get(request.principal, secret, { org: orgOf(request) }, (request.params as Params).name, { reveal: true }),
  });
}

function orgOf(request: FastifyRequest): string {
  return (request.params as Params).org;
}

function placeOf(def: KindDef, request: FastifyRequest): Place {
  const params = request.params as Params;
  return { org: params.org, gvc: def.scope === 'gvc' ? params.gvc : undefined };
}

/**
 * Sends a presented resource as its JSON, made once (see presented() and jsonOf()): a string with a
 * JSON content type goes out as it is, without fastify's serializer.
 */
function sendResource(reply: FastifyReply, resource: Resource): FastifyReply {
  return reply.header('content-type', 'application/json; charset=utf-8').send(jsonOf(resource));
}

/** Sends an item read with the position it reflects. */
function sendAt(reply: FastifyReply, read: AtPosition<Resource>): void {
  sendResource(withPosition(reply, read.seq), read.value);
}

/**
 * Sends a read at once when it is at hand (the handler returns nothing, having sent), else when it
 * comes: the promise then resolves to nothing, not to the reply, which fastify would wait on as a thenable.
 */
function sendRead(reply: FastifyReply, read: AtPosition<Resource> | Promise<AtPosition<Resource>>): Promise<void> | undefined {
  if (read instanceof Promise) return read.then((done) => sendAt(reply, done));
  sendAt(reply, read);
  return undefined;
}

function selfOf(resource: Resource): string {
  return resource.links.find((l) => l.rel === 'self')!.href;
}

/** `?dryRun=true`: run every check and answer with the would-be result, storing nothing. */
export function writeOptions(request: FastifyRequest): { dryRun: boolean } {
  const dryRun = (request.query as QueryString).dryRun;
  return { dryRun: dryRun === 'true' || dryRun === '1' };
}

function pageSize(request: FastifyRequest): number {
  return pageSizeOf(request, (request.query as QueryString).limit);
}

async function list(resources: Resources, def: KindDef, place: Place, request: FastifyRequest, reply: FastifyReply) {
  const limit = pageSize(request);
  const after = (request.query as QueryString).cursor;
  const page = await resources.query(request.principal, def, place, parseQuery(undefined, def), { limit, after });
  withPosition(reply, page.seq);
  const path = request.url.split('?')[0];
  const links = [{ rel: 'self', href: path }];
  if (page.next) links.push({ rel: 'next', href: `${path}?limit=${limit}&cursor=${page.next}` });
  return { kind: 'list', itemKind: def.kind, items: page.items, links };
}

/** GET <item>/-eventlog: the item's audit events, oldest first, paged by their sequence number. */
async function eventlog(resources: Resources, def: KindDef, place: Place, name: string, request: FastifyRequest) {
  const { limit, next } = seqPaging(request, 0);
  const page = await resources.eventlog(request.principal, def, place, name, { limit, after: next });
  return seqPage(request, limit, 'event', page);
}

/** GET <item>/-history: the item's versions from its audit events, newest first, paged by sequence number. */
async function history(resources: Resources, def: KindDef, place: Place, name: string, request: FastifyRequest) {
  const { limit, next } = seqPaging(request, 1);
  const page = await resources.history(request.principal, def, place, name, { limit, before: next });
  return seqPage(request, limit, 'history', page);
}

/** The page size and the `next` token (a sequence number, at least `least`) of a read paged through the audit chain. */
function seqPaging(request: FastifyRequest, least: number): { limit: number; next?: number } {
  const limit = pageSize(request);
  const raw = (request.query as QueryString).next;
  const next = raw === undefined ? undefined : Number(raw);
  if (next !== undefined && (!Number.isSafeInteger(next) || next < least)) throw ApiError.badRequest('next is invalid', [{ path: 'next', message: 'is invalid' }]);
  return { limit, next };
}

function seqPage(request: FastifyRequest, limit: number, itemKind: string, page: { items: unknown[]; next?: number }) {
  const path = request.url.split('?')[0];
  const links = [{ rel: 'self', href: path }];
  if (page.next !== undefined) links.push({ rel: 'next', href: `${path}?limit=${limit}&next=${page.next}` });
  return { kind: 'list', itemKind, items: page.items, links };
}

interface NextToken {
  query: unknown;
  echo: Record<string, unknown>;
  after: string;
  limit: number;
}

async function queryPage(
  resources: Resources,
  def: KindDef,
  place: Place,
  request: FastifyRequest,
  reply: FastifyReply,
  query: Query,
  echo: Record<string, unknown>,
  after?: string,
  limit = pageSize(request),
) {
  const page: Page = await resources.query(request.principal, def, place, query, { limit, after });
  withPosition(reply, page.seq);
  const base = def.kind === 'org' ? '/org/-query' : place.gvc !== undefined ? `/org/${place.org}/gvc/${place.gvc}/${def.kind}/-query` : `/org/${place.org}/${def.kind}/-query`;
  const links = [{ rel: 'self', href: base }];
  if (page.next) {
    const token: NextToken = { query: request.method === 'POST' ? emptyToUndefined(request.body) : decodeNext((request.query as QueryString).next, request.server.maxPageSize).query, echo, after: page.next, limit };
    links.push({ rel: 'next', href: `${base}?next=${Buffer.from(JSON.stringify(token)).toString('base64url')}` });
  }
  const linksOnly = query.fetch === 'links';
  return {
    kind: 'queryresult',
    itemKind: linksOnly ? 'link' : def.kind,
    items: linksOnly ? page.items.map(selfOf) : page.items,
    links,
    query: echo,
  };
}

function decodeNext(raw: string | undefined, maxPage: number): NextToken {
  try {
    const token = JSON.parse(Buffer.from(raw ?? '', 'base64url').toString('utf8')) as NextToken;
    // A token is the client's to forge: one that holds text no backend stores is as invalid as a malformed one.
    const wellFormed = typeof token.after === 'string' && token.echo && typeof token.echo === 'object' && Number.isInteger(token.limit) && token.limit >= 1 && token.limit <= maxPage;
    if (wellFormed && !holdsUnstorable(token)) return token;
  } catch {
    // fall through to the error below
  }
  throw ApiError.badRequest('the next token is missing or invalid; POST the query again', [{ path: 'next', message: 'is invalid' }]);
}

/** The executed query as sent, with its kind and the server's scope as context. */
function echoOf(body: unknown, def: KindDef, place: Place): Record<string, unknown> {
  const sent = (emptyToUndefined(body) ?? {}) as Record<string, unknown>;
  const spec = (sent.spec ?? {}) as Record<string, unknown>;
  const context = place.gvc !== undefined ? { org: place.org, gvc: place.gvc } : { org: place.org };
  return { kind: def.kind, ...(sent.fetch ? { fetch: sent.fetch } : {}), context, spec: { match: 'all', terms: [], ...spec } };
}

function emptyToUndefined(body: unknown): unknown {
  return body === '' || body === null ? undefined : body;
}

