// The admin endpoints under /-admin/ on the Core API: reset, snapshots and fault rules. Only a
// superuser of the first org (a member of its superusers group) may use them; a feature that is
// off answers 404 with the error object, naming the setting that turns it on.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { actorOf } from '../audit/events.js';
import type { Principal } from '../auth/principal.js';
import { isMember, toGroup } from '../auth/membership.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { Mutex } from '../store/rows.js';
import { checkSnapshotName, type SnapshotInfo } from '../store/snapshots.js';
import type { Store } from '../store/types.js';
import { parseRules, type Faults } from './faults.js';
import { resetStore } from './reset.js';
import { restoreSnapshot } from './restore.js';
import { SeedError } from './seed.js';
import type { Sandboxes } from './sandboxes.js';

export interface AdminOptions {
  config: Config;
  store: Store;
  /** Present only with KEEL_FAULTS=on. */
  faults?: Faults;
  /** Present only with KEEL_ALLOW_SANDBOXES=on. */
  sandboxes?: Sandboxes;
}

/** Whether the principal is a member of the first org's superusers group. */
async function isFirstOrgSuperuser(store: Store, org: string, principal: Principal): Promise<boolean> {
  const group = await store.get({ org, kind: 'group', gvc: '', name: 'superusers' });
  if (!group) return false;
  const user = principal.kind === 'user' && principal.org === org ? await store.get({ org, kind: 'user', gvc: '', name: principal.name }) : undefined;
  return isMember(toGroup(group), principal, user?.data);
}

export function mountAdmin(app: FastifyInstance, { config, store, faults, sandboxes }: AdminOptions): void {
  // Resets and restores of this process one at a time (each is one transaction anyway).
  const exclusive = new Mutex();
  const superuser = async (request: FastifyRequest) => {
    if (!(await isFirstOrgSuperuser(store, config.org, request.principal))) {
      throw ApiError.forbidden(`only a superuser of org '${config.org}' (the first org) may use /-admin/`);
    }
  };
  const listOf = (items: SnapshotInfo[]) => ({ kind: 'list', itemKind: 'snapshot', items: items.map(present), links: [] });
  const present = (s: SnapshotInfo) => ({ ...s, links: [{ rel: 'self', href: `/-admin/snapshots/${s.name}` }] });

  app.post('/-admin/reset', async (request) => {
    if (!config.allowReset) throw ApiError.notFound('reset is off: start Keel with KEEL_ALLOW_RESET=on to allow it');
    await superuser(request);
    const started = performance.now();
    const result = await exclusive.run(() =>
      resetStore(store, config).catch((err) => {
        // The seed is the server's own configuration: said as it is, not hidden behind 'internal error'.
        throw err instanceof SeedError ? new ApiError('internal', `reset failed and changed nothing: ${err.message}`) : err;
      }),
    );
    request.log.warn({ reqId: request.id, by: request.principal.link }, 'instance reset');
    return { org: result.org, seeded: result.seeded, tookMs: Math.round(performance.now() - started) };
  });

  const snapshotsOn = () => {
    if (!config.allowSnapshots) throw ApiError.notFound('snapshots are off: start Keel with KEEL_ALLOW_SNAPSHOTS=on to allow them');
  };
  app.get('/-admin/snapshots', async (request) => {
    snapshotsOn();
    await superuser(request);
    return listOf(await store.snapshots.list());
  });
  app.post('/-admin/snapshots', async (request, reply) => {
    snapshotsOn();
    await superuser(request);
    const body = request.body as { name?: unknown } | undefined;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw ApiError.badRequest('the body must be {"name": "..."}', [{ path: 'name', message: 'is required' }]);
    const extra = Object.keys(body).filter((k) => k !== 'name');
    if (extra.length) throw ApiError.badRequest(`unknown field ${extra[0]}`, extra.map((path) => ({ path, message: 'is not a known field' })));
    const name = checkSnapshotName(body.name);
    const info = await store.snapshots.save(name);
    request.log.info({ reqId: request.id, snapshot: name }, 'snapshot saved');
    return reply.code(201).header('location', `/-admin/snapshots/${name}`).send(present(info));
  });
  app.post('/-admin/snapshots/:name/-restore', async (request) => {
    snapshotsOn();
    await superuser(request);
    const name = checkSnapshotName((request.params as { name: string }).name);
    const restored = await exclusive.run(() => restoreSnapshot(store, name, actorOf(request.principal)));
    request.log.warn({ reqId: request.id, snapshot: name, by: request.principal.link, orgs: restored.map((r) => r.org) }, 'snapshot restored');
    return { name, restored: true, orgs: restored };
  });
  app.delete('/-admin/snapshots/:name', async (request, reply) => {
    snapshotsOn();
    await superuser(request);
    await store.snapshots.delete(checkSnapshotName((request.params as { name: string }).name));
    return reply.code(202).send();
  });

  const faultsOn = () => {
    if (!faults) throw ApiError.notFound('fault injection is off: start Keel with KEEL_FAULTS=on to use it');
    return faults;
  };
  app.get('/-admin/faults', async (request) => {
    const f = faultsOn();
    await superuser(request);
    return { rules: f.list() };
  });
  app.put('/-admin/faults', async (request) => {
    const f = faultsOn();
    await superuser(request);
    f.set(parseRules(request.body));
    request.log.warn({ reqId: request.id, rules: f.list().map((r) => r.name) }, 'fault rules set');
    return { rules: f.list() };
  });
  app.delete('/-admin/faults', async (request, reply) => {
    const f = faultsOn();
    await superuser(request);
    f.set([]);
    return reply.code(202).send();
  });

  const sandboxesOn = () => {
    if (!sandboxes) throw ApiError.notFound('sandboxes are off: start Keel with KEEL_ALLOW_SANDBOXES=on to allow them');
    return sandboxes;
  };
  app.get('/-admin/sandboxes', async (request) => {
    const s = sandboxesOn();
    await superuser(request);
    return { kind: 'list', itemKind: 'sandbox', items: s.list().map((b) => ({ ...b, links: [{ rel: 'org', href: `/org/${b.org}` }] })), links: [] };
  });
  app.post('/-admin/sandboxes', async (request, reply) => {
    const s = sandboxesOn();
    await superuser(request);
    const made = await s.create(request.body, actorOf(request.principal));
    request.log.info({ reqId: request.id, sandbox: made.org, expiresAt: made.expiresAt, by: request.principal.link }, 'sandbox created');
    return reply.code(201).header('location', `/org/${made.org}`).send(made);
  });
  app.delete('/-admin/sandboxes/:name', async (request, reply) => {
    const s = sandboxesOn();
    await superuser(request);
    const org = (request.params as { name: string }).name;
    await s.delete(org, actorOf(request.principal));
    request.log.info({ reqId: request.id, sandbox: org, by: request.principal.link }, 'sandbox deleted');
    return reply.code(202).send();
  });
}
