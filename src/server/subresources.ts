// Sub-resources that live under a workload or a volume set:
//   GET  /org/{org}/gvc/{gvc}/workload/{w}/deployment            list (itemKind deployment)
//   GET  /org/{org}/gvc/{gvc}/workload/{w}/deployment/{location}
//   POST /org/{org}/gvc/{gvc}/{workload|volumeset}/{n}/-command   201 + Location …/-command/{id} (?dryRun=true stores nothing)
//   GET  …/-command, GET …/-command/{id}, POST …/-command/-query
// Reading needs `view` on the parent; a command needs `exec` on a workload (its sub-permission
// for runCronWorkload and stopReplica) and `exec` or `edit` on a volume set. Deployments and
// command progress are written by the reconcilers (src/reconcile).
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { announce, type AppendedEvent } from '../audit/changes.js';
import { actorOf, changeEvent } from '../audit/events.js';
import type { Authorizer } from '../auth/authorizer.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { tagsSchema } from '../kinds/schema.js';
import { matchesQuery, parseQuery } from '../query/index.js';
import { cancelCommand, VOLUMESET_COMMANDS, WORKLOAD_COMMANDS } from '../reconcile/commands.js';
import { LIST_LIMIT, listAll } from '../store/list-all.js';
import { commandKey, commandPrefix, commandView, deploymentKey, deploymentPrefix, deploymentView, type CommandParent } from '../reconcile/views.js';
import { targetOf } from '../resources/service.js';
import type { Store, StoredItem } from '../store/types.js';
import { mount, writeOptions } from './routes.js';

type Params = Record<string, string>;


export function mountSubresources(app: FastifyInstance, store: Store, auth: Authorizer, options: { audit?: boolean } = {}): void {
  /** The parent, after membership, its GVC and `permission` on it are checked. */
  async function parentOf(principal: Principal, kind: CommandParent, params: Params, permission: string | string[]): Promise<StoredItem> {
    await auth.requireMember(principal, params.org);
    if (!(await store.get({ org: params.org, kind: 'gvc', gvc: '', name: params.gvc }))) throw ApiError.notFound(`gvc '${params.gvc}' not found`);
    const item = await store.get({ org: params.org, kind, gvc: params.gvc, name: params.name });
    if (!item) throw ApiError.notFound(`${kind} '${params.name}' not found in gvc '${params.gvc}'`);
    const def = findKind(kind)!;
    const wanted = Array.isArray(permission) ? permission : [permission];
    for (let i = 0; ; i++) {
      try {
        await auth.check(principal, wanted[i], def, targetOf(item));
        return item;
      } catch (err) {
        if (i === wanted.length - 1 || !(err instanceof ApiError && err.code === 'forbidden')) throw err;
      }
    }
  }

  const workloadBase = '/org/:org/gvc/:gvc/workload/:name';
  mount(app, `${workloadBase}/deployment`, {
    GET: async (request) => {
      const params = request.params as Params;
      await parentOf(request.principal, 'workload', params, 'view');
      const items = await listAll(store, params.org, 'deployment', params.gvc, deploymentPrefix(params.name));
      return { kind: 'list', itemKind: 'deployment', items: items.map(deploymentView), links: [{ rel: 'self', href: request.url.split('?')[0] }] };
    },
  });
  mount(app, `${workloadBase}/deployment/:location`, {
    GET: async (request) => {
      const params = request.params as Params;
      await parentOf(request.principal, 'workload', params, 'view');
      const item = await store.get(deploymentKey(params.org, params.gvc, params.name, params.location));
      if (!item) throw ApiError.notFound(`workload '${params.name}' has no deployment in location '${params.location}'`);
      return deploymentView(item);
    },
  });

  for (const kind of ['workload', 'volumeset'] as const) {
    const base = `/org/:org/gvc/:gvc/${kind}/:name/-command`;
    const types: readonly string[] = kind === 'workload' ? WORKLOAD_COMMANDS : VOLUMESET_COMMANDS;
    const list = async (params: Params) =>
      (await listAll(store, params.org, 'command', params.gvc, commandPrefix(kind, params.name)))
        .map(commandView)
        .sort((a, b) => (a.created < b.created ? 1 : a.created > b.created ? -1 : 0));
    mount(app, base, {
      GET: async (request) => {
        const params = request.params as Params;
        await parentOf(request.principal, kind, params, 'view');
        return { kind: 'list', itemKind: 'command', items: await list(params), links: [{ rel: 'self', href: request.url.split('?')[0] }] };
      },
      POST: async (request, reply) => {
        const params = request.params as Params;
        const body = commandBody(request.body, types);
        const permission = kind === 'volumeset' ? ['exec', 'edit'] : body.type === 'runCronWorkload' ? 'exec.runCronWorkload' : body.type === 'stopReplica' ? 'exec.stopReplica' : 'exec';
        await parentOf(request.principal, kind, params, permission);
        if (kind === 'volumeset') checkVolumeCommand(body.type, body.spec);
        else checkWorkloadCommand(body.spec);
        const id = randomUUID();
        const now = new Date().toISOString();
        const item: StoredItem = {
          ...commandKey(params.org, params.gvc, kind, params.name, id),
          id,
          version: 1,
          created: now,
          lastModified: now,
          data: { type: body.type, spec: body.spec, tags: body.tags, lifecycleStage: 'pending', status: {}, since: now },
        };
        const view = commandView(item);
        if (writeOptions(request).dryRun) return reply.code(201).send(view);
        const appended: AppendedEvent[] = options.audit === false ? [] : [{ event: changeEvent(params.org, actorOf(request.principal), 'create', view), resource: view }];
        await store.transaction(async (tx) => {
          // The parent must still be there; holding it keeps a concurrent delete out until the command is written.
          if (!(await tx.get({ org: params.org, kind, gvc: params.gvc, name: params.name }, 'share'))) {
            throw ApiError.notFound(`${kind} '${params.name}' not found in gvc '${params.gvc}'`);
          }
          await tx.insert(item);
          for (const { event } of appended) await tx.appendAudit(event);
        });
        announce(store, params.org, appended);
        return reply.code(201).header('location', view.links[0].href).send(view);
      },
    });
    mount(app, `${base}/-query`, {
      POST: async (request) => {
        const params = request.params as Params;
        await parentOf(request.principal, kind, params, 'view');
        const body = request.body === '' || request.body === null ? undefined : request.body;
        const query = parseQuery(body, findKind('command')!);
        const items = (await list(params)).filter((c) => matchesQuery(query, c as Record<string, unknown>, { gvc: params.gvc })).slice(0, LIST_LIMIT);
        const sent = (body ?? {}) as Record<string, unknown>;
        return {
          kind: 'queryresult',
          itemKind: 'command',
          items,
          links: [{ rel: 'self', href: request.url.split('?')[0] }],
          query: { kind: 'command', context: { org: params.org, gvc: params.gvc }, spec: { match: 'all', terms: [], ...((sent.spec ?? {}) as object) } },
        };
      },
    });
    mount(app, `${base}/:id`, {
      GET: async (request) => {
        const params = request.params as Params;
        await parentOf(request.principal, kind, params, 'view');
        const item = await store.get(commandKey(params.org, params.gvc, kind, params.name, params.id));
        if (!item) throw ApiError.notFound(`command '${params.id}' not found on ${kind} '${params.name}'`);
        return commandView(item);
      },
      // Cancels a pending or running command; whoever may run the command may cancel it.
      DELETE: async (request, reply) => {
        const params = request.params as Params;
        const key = commandKey(params.org, params.gvc, kind, params.name, params.id);
        const found = await store.get(key);
        if (!found) throw ApiError.notFound(`command '${params.id}' not found on ${kind} '${params.name}'`);
        const type = String(found.data.type);
        await parentOf(request.principal, kind, params, kind === 'volumeset' ? ['exec', 'edit'] : type === 'runCronWorkload' ? 'exec.runCronWorkload' : type === 'stopReplica' ? 'exec.stopReplica' : 'exec');
        const actor = actorOf(request.principal);
        const ctx = { store, now: Date.now(), stepMs: 0, audit: options.audit !== false, appended: [] as AppendedEvent[] };
        await store.transaction(async (tx) => {
          const { item, changed } = await cancelCommand({ ...ctx, tx }, key, request.principal.name);
          if (ctx.audit && changed) {
            const view = commandView(item);
            const event = changeEvent(params.org, actor, 'edit', view);
            await tx.appendAudit(event);
            ctx.appended.push({ event, resource: view });
          }
        });
        announce(store, params.org, ctx.appended);
        return reply.code(202).send();
      },
    });
  }
}

function bad(path: string, message: string): ApiError {
  return ApiError.badRequest(`invalid command: ${path} ${message}`, [{ path, message }]);
}

function commandBody(body: unknown, types: readonly string[]): { type: string; spec: Record<string, unknown>; tags: Record<string, unknown> } {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw ApiError.badRequest('the request body must be a JSON object');
  const input = body as Record<string, unknown>;
  if (typeof input.type !== 'string' || !types.includes(input.type)) throw bad('type', `must be one of: ${types.join(', ')}`);
  const spec = input.spec ?? {};
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) throw bad('spec', 'must be an object');
  const tags = input.tags ?? {};
  const maxTags = tagsSchema().maxProperties ?? 50;
  if (typeof tags !== 'object' || tags === null || Array.isArray(tags) || Object.keys(tags).length > maxTags) throw bad('tags', `must be an object of at most ${maxTags} tags`);
  return { type: input.type, spec: { ...(spec as Record<string, unknown>) }, tags: tags as Record<string, unknown> };
}

/** Checks (and normalizes, in place) the spec of a workload command: every type names its location. */
function checkWorkloadCommand(spec: Record<string, unknown>): void {
  if (typeof spec.location !== 'string' || spec.location === '') throw bad('spec.location', 'is required');
  spec.location = spec.location.split('/').pop();
  if (spec.containerOverrides !== undefined && !Array.isArray(spec.containerOverrides)) throw bad('spec.containerOverrides', 'must be an array');
}

/** Checks (and normalizes, in place) the spec of a volume set command. */
function checkVolumeCommand(type: string, spec: Record<string, unknown>): void {
  if (typeof spec.location !== 'string' || spec.location === '') throw bad('spec.location', 'is required');
  spec.location = spec.location.split('/').pop();
  const index = spec.volumeIndex === undefined ? 0 : Number(spec.volumeIndex);
  if (!Number.isInteger(index) || index < 0) throw bad('spec.volumeIndex', 'must be a whole number >= 0');
  spec.volumeIndex = index;
  if (type === 'expandVolume' || type === 'shrinkVolume') {
    // The CLI's `--new-size` may arrive as newSize; the public type names it newStorageCapacity.
    const raw = spec.newStorageCapacity ?? spec.newSize;
    delete spec.newSize;
    const size = Number(raw);
    if (raw === undefined || raw === '' || !Number.isFinite(size) || size < 1 || size > 65536) throw bad('spec.newStorageCapacity', 'must be a number of GB from 1 to 65536');
    spec.newStorageCapacity = size;
  }
  if (['createVolumeSnapshot', 'deleteVolumeSnapshot', 'restoreVolume'].includes(type) && (typeof spec.snapshotName !== 'string' || spec.snapshotName === '')) {
    throw bad('spec.snapshotName', 'is required');
  }
}
