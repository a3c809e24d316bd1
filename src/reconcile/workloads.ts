// Workloads: one deployment per location of the GVC. A new workload version (any change made
// through the API) is added to each deployment's status.versions as deploying; a step later it
// is ready and replaces the older versions. The deployment reports the workload's own `version`
// (what the user sees), so a client can tell which version runs where. The workload's status
// (endpoint, ready, readyLatest) is derived from its deployments in the same transaction.
import { deepEqual } from '../json.js';
import { randomUUID } from 'node:crypto';
import type { ItemKey, StoredItem } from '../store/types.js';
import { deleteChildren, gvcKey, gvcLocations, iso, listAll, recordStatus, writeStatus, type Outcome, type ReconcileContext } from './common.js';
import { commandPrefix, commandView, deploymentKey, deploymentPrefix, deploymentView } from './views.js';

type Version = { name: string; created: string; workload: number; gvc?: number; containers: Record<string, unknown>; ready: boolean; message: string };

export async function reconcileWorkload(ctx: ReconcileContext, key: ItemKey): Promise<Outcome> {
  const workload = await ctx.tx.get(key, 'update');
  if (!workload) {
    await deleteChildren(ctx, key.org, key.gvc, 'deployment', deploymentPrefix(key.name), deploymentView);
    await deleteChildren(ctx, key.org, key.gvc, 'command', commandPrefix('workload', key.name), commandView);
    return {};
  }
  const gvc = await ctx.tx.get(gvcKey(key.org, key.gvc));
  const locations = gvcLocations(gvc);
  const alias = String(gvc?.data.alias ?? key.gvc);
  const endpoint = `https://${key.name}-${alias}.cpln.app`;
  const spec = (workload.data.spec ?? {}) as Record<string, any>;
  let after: number | undefined;
  const states: Array<{ ready: boolean; latest: boolean }> = [];

  // Deployments of locations that left the GVC go away.
  for (const old of await listAll(ctx.store, key.org, 'deployment', key.gvc, deploymentPrefix(key.name))) {
    const location = old.name.slice(deploymentPrefix(key.name).length);
    if (locations.includes(location)) continue;
    await ctx.tx.delete(old);
    await recordStatus(ctx, old, deploymentView, 'delete');
  }

  for (const location of locations) {
    const suspended = suspendedIn(spec, location);
    const dkey = deploymentKey(key.org, key.gvc, key.name, location);
    const existing = await ctx.tx.get(dkey, 'update');
    const previous = (existing?.data.status ?? {}) as Record<string, any>;
    const status: Record<string, any> = structuredClone(previous);
    const since = Date.parse(String(existing?.data.since ?? '')) || ctx.now;
    let moved = false;
    let versions = (status.versions ?? []) as Version[];
    if (!versions.some((v) => v.workload === workload.version)) {
      versions.push({
        name: String(workload.version),
        created: iso(ctx.now),
        workload: workload.version,
        gvc: gvc?.version,
        containers: containersOf(spec, false),
        ready: false,
        message: 'Deploying',
      });
      moved = true;
    } else {
      const latest = versions.find((v) => v.workload === workload.version)!;
      const due = since + ctx.stepMs;
      if (!latest.ready && !suspended) {
        if (ctx.now >= due) {
          latest.ready = true;
          latest.message = 'Ready';
          latest.containers = containersOf(spec, true);
          versions = [latest];
          moved = true;
        } else {
          after = Math.min(after ?? Infinity, due - ctx.now);
        }
      }
    }
    const latest = versions.find((v) => v.workload === workload.version)!;
    Object.assign(status, {
      endpoint,
      remote: `https://${key.name}-${alias}.${location}.keel.local`,
      lastProcessedVersion: workload.version,
      expectedDeploymentVersion: workload.version,
      ready: versions.some((v) => v.ready) && !suspended,
      deploying: !latest.ready && !suspended,
      versions,
      message: suspended ? 'Suspended' : latest.ready ? 'Ready' : 'Deploying',
    });
    states.push({ ready: status.ready, latest: latest.ready && !suspended });
    if (!existing) {
      const now = iso(ctx.now);
      const item: StoredItem = { ...dkey, id: randomUUID(), version: 1, created: now, lastModified: now, data: { status, since: now, updated: now } };
      await ctx.tx.insert(item);
      await recordStatus(ctx, item, deploymentView);
      after = Math.min(after ?? Infinity, ctx.stepMs);
    } else if (!deepEqual(previous, status)) {
      const data = { ...existing.data, status, since: moved ? iso(ctx.now) : existing.data.since, updated: iso(ctx.now) };
      await writeStatus(ctx, existing, data, deploymentView);
      if (moved && !latest.ready) after = Math.min(after ?? Infinity, ctx.stepMs);
    }
  }

  const previous = (workload.data.status ?? {}) as Record<string, any>;
  const status = {
    ...previous,
    parentId: gvc?.id,
    endpoint,
    canonicalEndpoint: endpoint,
    internalName: `${key.name}.${key.gvc}.cpln.local`,
    ready: states.length > 0 && states.every((s) => s.ready),
    readyLatest: states.length > 0 && states.every((s) => s.latest),
  };
  if (!deepEqual(previous, status)) await writeStatus(ctx, workload, { ...workload.data, status });
  return { after: after === Infinity ? undefined : after };
}

/** Whether the workload is suspended in a location: its local options there, else its defaults. */
export function suspendedIn(spec: Record<string, any>, location: string): boolean {
  const local = ((spec.localOptions ?? []) as Array<Record<string, any>>).find((o) => String(o.location ?? '').split('/').pop() === location);
  return (local?.suspend ?? spec.defaultOptions?.suspend) === true;
}

function containersOf(spec: Record<string, any>, ready: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const c of (spec.containers ?? []) as Array<Record<string, unknown>>) {
    out[String(c.name)] = { name: c.name, image: c.image, ready, message: ready ? 'Running' : 'ContainerCreating', resources: { cpu: c.cpu, memory: c.memory } };
  }
  return out;
}
