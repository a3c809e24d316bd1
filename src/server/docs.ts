import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { ERROR_CODES } from '../errors.js';
import { resourceSchema } from '../kinds/derive.js';
import { KINDS, findKind } from '../kinds/index.js';
import { querySchema, type JsonSchema } from '../kinds/schema.js';
import { VERSION } from '../version.js';

// The OpenAPI 3.1 document is built from the routes the server really mounts (an onRoute hook
// describes each one from its path, method and kind) and from the same kind schemas the resource
// service validates with. Fastify does not validate or serialize with these schemas: bodies are
// validated by the resource service (with its coercion rules and error object) and responses are
// plain JSON, so documentation can never change behaviour.

const ref = (id: string) => ({ $ref: `${id}#` });
const KIND_ID = (kind: string) => `Kind_${kind}`;

const linkSchema: JsonSchema = { type: 'object', properties: { rel: { type: 'string' }, href: { type: 'string' } }, required: ['rel', 'href'] };

function sharedSchemas(): Array<JsonSchema & { $id: string }> {
  const error = {
    $id: 'Error',
    type: 'object',
    description: 'Every error response. `id` is the request id, also in the logs; `details.errors` lists field problems.',
    properties: {
      status: { type: 'integer' },
      message: { type: 'string' },
      code: { type: 'string', enum: ERROR_CODES },
      details: { type: 'object', properties: { errors: { type: 'array', items: { type: 'object', properties: { path: { type: 'string' }, message: { type: 'string' } } } } } },
      id: { type: 'string' },
    },
    required: ['status', 'message', 'code', 'details', 'id'],
    additionalProperties: false,
  } as JsonSchema & { $id: string };
  const list = { $id: 'List', type: 'object', properties: { kind: { const: 'list' }, itemKind: { type: 'string' }, items: { type: 'array', items: { type: 'object' } }, links: { type: 'array', items: linkSchema } }, required: ['kind', 'itemKind', 'items', 'links'], additionalProperties: false } as JsonSchema & { $id: string };
  const query = { $id: 'Query', ...querySchema(), description: 'A query (seed 2.3): match all|any|none over terms on a property, tag or rel.' } as JsonSchema & { $id: string };
  const result = { $id: 'QueryResult', type: 'object', properties: { kind: { const: 'queryresult' }, itemKind: { type: 'string' }, items: { type: 'array', items: {} }, links: { type: 'array', items: linkSchema }, query: ref('Query') }, required: ['kind', 'itemKind', 'items', 'links', 'query'], additionalProperties: false } as JsonSchema & { $id: string };
  const permissions = {
    $id: 'Permissions',
    type: 'object',
    properties: { kind: { const: 'permissions' }, targetKind: { type: 'string' }, items: { type: 'array', items: { type: 'object', properties: { name: { type: 'string' }, description: { type: 'string' } } } }, implied: { type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } } }, links: { type: 'array', items: linkSchema } },
  } as JsonSchema & { $id: string };
  const history = {
    $id: 'History',
    type: 'object',
    description: "An item's versions from its audit events, newest first; a `rel: next` link pages on. Secret values never appear.",
    properties: {
      kind: { const: 'list' },
      itemKind: { const: 'history' },
      items: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            version: { type: 'integer', description: 'The version the change produced (a delete: the last version)' },
            action: { type: 'string', description: 'create, edit, delete …' },
            at: { type: 'string', format: 'date-time' },
            subject: { type: 'object', description: 'Who made the change, as in the audit event' },
            resource: { type: 'object', description: 'The item as it was after the change' },
          },
          required: ['version', 'action', 'at', 'subject', 'resource'],
        },
      },
      links: { type: 'array', items: linkSchema },
    },
    required: ['kind', 'itemKind', 'items', 'links'],
    additionalProperties: false,
  } as JsonSchema & { $id: string };
  const kinds = KINDS.map((def) => ({ $id: KIND_ID(def.kind), ...resourceSchema(def) }));
  return [error, list, query, result, permissions, history, ...kinds];
}

const errors = { '4XX': { description: 'The error object', ...ref('Error') }, '5XX': { description: 'The error object', ...ref('Error') } };

type Parameters = Record<string, JsonSchema>;
const text = (description: string): JsonSchema => ({ type: 'string', description });
const PAGE: Parameters = { limit: { type: 'integer', minimum: 1, description: 'Items per page (default 100, at most the server maximum)' }, cursor: text('Where the previous page ended (from its next link)') };
const LOG_RANGE: Parameters = {
  start: text('First time, Unix ns or s or RFC 3339 (default: end minus since)'),
  end: text('Time after the last line (default now)'),
  since: text('How far back from end when start is absent, a duration such as 1h (default 1h)'),
};
const LOG_READ: Parameters = {
  query: text('A LogQL selector with optional line filters, e.g. {gvc="prod"} |= "error"'),
  limit: { type: 'integer', minimum: 1, description: 'Most lines returned' },
  direction: { type: 'string', enum: ['forward', 'backward', 'FORWARD', 'BACKWARD'], description: 'Oldest or newest first (default backward)' },
};
const AUDIT_FILTER: Parameters = {
  contextName: text('The audit context (default cpln, the platform events)'),
  resourceType: text('Only events about this kind'),
  resourceName: text('Only events about the item of this name'),
  resourceId: text('Only events about the item of this id'),
  subjectName: text('Only events by this subject'),
  actionType: text('Only events of this action (create, edit, delete …)'),
  exceptActionType: text('Leave out events of this action (status: the reconcilers\' status changes)'),
  direction: { type: 'string', enum: ['forward', 'backward'], description: 'Oldest first (forward, the default) or newest first (backward)' },
  fromEvent: { type: 'string', format: 'date-time', description: 'Events at or after this time' },
  toEvent: { type: 'string', format: 'date-time', description: 'Events at or before this time' },
  limit: PAGE.limit,
  next: text('Continue after this event, or before it going backward (from the next link)'),
};
const CRD_OPTIONS: Parameters = { namespace: text('metadata.namespace of each custom resource'), keep: { type: 'string', enum: ['true', 'false'], description: 'Annotate each to be kept when its release is removed' } };

/** The query parameters of routes outside the generic kind routes, by the route's URL (each handler reads exactly these). */
const QUERY_PARAMETERS: Record<string, Parameters> = {
  '/org/:org/-watch': {
    kind: text('Only changes of this kind'),
    gvc: text('Only changes inside this GVC'),
    name: text('Only changes of the items of these names (comma-separated)'),
    query: text('Only changes of items that match this query: the JSON of a -query body'),
    since: text('Resume after this chain position (a Keel-Seq or an event id); Last-Event-ID does the same'),
  },
  '/logs/org/:org/loki/api/v1/query_range': { ...LOG_READ, ...LOG_RANGE },
  '/logs/org/:org/loki/api/v1/query': { ...LOG_READ, time: text('The instant read up to (default now)'), since: LOG_RANGE.since },
  '/logs/org/:org/loki/api/v1/labels': LOG_RANGE,
  '/logs/org/:org/loki/api/v1/label/:name/values': { query: text('Only values on the lines this LogQL selector picks'), ...LOG_RANGE },
  '/logs/org/:org/loki/api/v1/tail': { query: LOG_READ.query, limit: LOG_READ.limit, start: text('Send the lines since this time first (default an hour ago)'), delay_for: { type: 'integer', minimum: 0, maximum: 5, description: 'Seconds to hold lines back' } },
  '/audit/org/:org': AUDIT_FILTER,
  '/audit/org/:org/resource/id/:id': AUDIT_FILTER,
  '/audit/org/:org/resource/name/:name': AUDIT_FILTER,
  '/audit/org/:org/subject/email/:email': AUDIT_FILTER,
  '/-export/crd/*': CRD_OPTIONS,
  '/-export/crd/batch': { org: text('The org the resources belong to (required)'), ...CRD_OPTIONS },
};

const querystring = (parameters: Parameters) => ({ type: 'object', properties: parameters });

/** Describes a mounted route from its method and path; routes that carry a schema keep theirs. */
function describeRoute(method: string, url: string): Record<string, unknown> {
  const segments = url.split('/').filter(Boolean);
  const params = segments.filter((s) => s.startsWith(':')).map((s) => s.slice(1));
  const base: Record<string, unknown> = {};
  if (params.length) base.params = { type: 'object', properties: Object.fromEntries(params.map((p) => [p, { type: 'string' }])), required: params };
  const kindSegment = [...segments].reverse().find((s) => !s.startsWith(':') && !s.startsWith('-') && findKind(s));
  // The Audit API's paths name orgs and resources without being the kind routes.
  const def = kindSegment && !url.startsWith('/audit/') ? findKind(kindSegment) : undefined;
  const last = segments[segments.length - 1] ?? '';
  const isItem = last.startsWith(':') && def !== undefined && segments[segments.length - 2] === def.kind;
  const tags = [url.startsWith('/audit') ? 'audit' : def ? def.kind : 'meta'];
  const page = querystring({ ...PAGE, next: text('A page token from a next link') });
  const dryRun = querystring({ dryRun: { type: 'boolean', description: 'Check permission and body, store nothing' } });
  const ok = (code: number, description: string, schema?: Record<string, unknown>) => ({ [code]: { description, ...(schema ?? {}) }, ...errors });
  const op = (summary: string, extra: Record<string, unknown> = {}) => ({ ...base, summary, tags, ...extra });
  const isSchema = segments[segments.length - 2] === '-schema';

  if (def && last === '-query') {
    return method === 'POST'
      ? op(`Query ${def.kind} items`, { body: ref('Query'), querystring: page, response: ok(200, 'The matching items the caller may view', ref('QueryResult')) })
      : op(`Next page of a ${def.kind} query`, { querystring: page, response: ok(200, 'A page', ref('QueryResult')) });
  }
  if (def && isSchema && last === 'permissions') return op(`Permissions that can be granted on ${def.kind} items`, { response: ok(200, 'The permission schema', ref('Permissions')) });
  if (def && last === '-granted') return op(`The permissions on every ${def.kind} item that the caller holds`, { response: ok(200, 'The caller\'s own granted permissions') });
  if (def && last === '-eventlog') return op(`Events of a ${def.kind}`, { querystring: page, response: ok(200, 'The audit events of the item', ref('List')) });
  if (def && last === '-history') {
    return op(`Versions of a ${def.kind}, newest first (who changed it, when, and the item as it then was); needs view, like -eventlog`, {
      querystring: { type: 'object', properties: { limit: { type: 'integer', minimum: 1 }, next: { type: 'string' } } },
      response: ok(200, 'The versions of the item', ref('History')),
    });
  }
  if (def && last === '-command' && method === 'POST') {
    return op(`Request a command on a ${def.kind}; with dryRun=true, permission and body are checked and nothing is stored`, {
      querystring: dryRun,
      body: { type: 'object', properties: { type: { type: 'string' }, spec: { type: 'object' } }, required: ['type'] },
      response: ok(201, 'The command, pending; Location is its self link', ref(KIND_ID('command'))),
    });
  }
  if (def && last === '-command' && method === 'GET') return op(`Commands requested on a ${def.kind}`, { response: ok(200, 'The commands', ref('List')) });
  if (def && isItem) {
    const item = ref(KIND_ID(def.kind));
    switch (method) {
      case 'GET':
        return op(`Get a ${def.kind}`, { response: ok(200, `The ${def.kind}`, item) });
      case 'PATCH':
        return op(`Patch a ${def.kind} (plain fields merge; $drop, $replace/x, $append/x, $drop/x, $retain/x, $patch/x directives)`, { querystring: dryRun, body: { type: 'object' }, response: ok(200, `The patched ${def.kind}`, item) });
      case 'PUT':
        return op(`Replace a ${def.kind} (or create it)`, { querystring: dryRun, body: item, response: { 200: { description: 'Replaced', ...item }, 201: { description: 'Created', ...item }, ...errors } });
      case 'DELETE':
        return op(`Delete a ${def.kind}`, { response: ok(202, 'Accepted; no body') });
    }
  }
  if (def && last === def.kind) {
    const item = ref(KIND_ID(def.kind));
    switch (method) {
      case 'GET':
        return op(`List ${def.kind} items the caller may view`, { querystring: page, response: ok(200, 'A page of items', ref('List')) });
      case 'POST':
        return def.kind === 'org'
          ? op('Create an org (the caller becomes one of its superusers)', { body: item, response: ok(201, 'Created; Location is its self link', item) })
          : op(`Create a ${def.kind}`, { querystring: dryRun, body: item, response: ok(201, 'Created; Location is its self link', item) });
      case 'PUT':
        return op(`Apply a ${def.kind}: create it or replace it by name`, { querystring: dryRun, body: item, response: { 200: { description: 'Replaced', ...item }, 201: { description: 'Created', ...item }, ...errors } });
    }
  }
  // Routes of their own (watch, logs, audit, exporters, client routes): their query parameters from
  // the table above, a JSON body where the method takes one, a JSON answer. A route that describes
  // itself further (a schema at its mount) keeps that.
  const parameters = QUERY_PARAMETERS[url];
  return op(`${method} ${url.replace(/:(\w+)/g, '{$1}')}`, {
    ...(parameters ? { querystring: querystring(parameters) } : {}),
    ...(['POST', 'PUT', 'PATCH'].includes(method) ? { body: { type: 'object', description: 'A JSON object' } } : {}),
    response: ok(200, 'The answer (JSON)'),
  });
}

/**
 * The schema of a route that exists so that clients get a clear answer, and always refuses (400,
 * saying why): documented as such, with no successful answer and no body.
 */
export function refusedRoute(why: string): { summary: string; response: typeof errors } {
  return { summary: `Refused: ${why}`, response: errors };
}

/** The OpenAPI document at GET /openapi.json and, on the Core API, the reference page at /docs. */
export async function installDocs(app: FastifyInstance, options: { title: string; description: string; page: boolean }): Promise<void> {
  app.setValidatorCompiler(() => () => true);
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  for (const schema of sharedSchemas()) app.addSchema(schema);
  app.addHook('onRoute', (route: RouteOptions) => {
    const config = (route.config ??= {}) as Record<string, unknown>;
    if (route.url.startsWith('/docs')) {
      config.public = true;
      route.schema = { ...(route.schema ?? {}), hide: true };
      return;
    }
    if (config.methodNotAllowed || route.url === '/openapi.json') {
      route.schema = { ...(route.schema ?? {}), hide: true };
      return;
    }
    const method = Array.isArray(route.method) ? route.method[0] : route.method;
    route.schema = { ...describeRoute(method, route.url), ...(config.public ? { security: [] } : {}), ...(route.schema ?? {}) };
  });
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: options.title, description: options.description, version: VERSION },
      components: {
        securitySchemes: {
          serviceAccountKey: { type: 'apiKey', in: 'header', name: 'Authorization', description: 'A service-account key, bare or after "Bearer "' },
          jwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        },
      },
      security: [{ serviceAccountKey: [] }, { jwt: [] }],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String((json as { $id?: string }).$id ?? `def-${i}`) },
  });
  app.get('/openapi.json', { config: { public: true } }, async () => app.swagger());
  if (options.page) await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
}
