// How the sub-resources that live under a workload or volume set are stored and shown.
// Deployments: kind 'deployment' in the workload's GVC, stored name `WORKLOAD:LOCATION`.
// Commands: kind 'command' in the parent's GVC, stored name `PARENTKIND:PARENT:ID`.
// Both are written only by Keel (commands are requested through the API); neither appears in
// the org-wide generic lists, whose org-scoped rows have an empty GVC.
// Replica names come from replicaNames() and runReplica() only: the reconciler records them in the
// deployment's status.internal.replicas, and everything that shows or filters by a replica (status,
// get-replicas, log labels) reads them there.
import { createHash } from 'node:crypto';
import type { Resource } from '../kinds/types.js';
import type { ItemKey, StoredItem } from '../store/types.js';

/** A short, stable identifier derived from its parts (device ids, cluster ids, snapshot ids). */
export function stableId(...parts: string[]): string {
  return createHash('sha256').update(parts.join('\u0000')).digest('hex').slice(0, 16);
}

/**
 * The replicas a deployment runs of a workload version: a stateful set's are numbered, a service's
 * carry a hash of the version they run (as Kubernetes names a ReplicaSet's pods).
 */
export function replicaNames(workload: string, type: string, location: string, version: number, count: number): string[] {
  const hash = stableId(workload, location, String(version)).slice(0, 10);
  return Array.from({ length: count }, (_, i) => (type === 'stateful' ? `${workload}-${i}` : `${workload}-${hash}-${stableId(hash, String(i)).slice(0, 5)}`));
}

/** The name of the replica a run of a cron workload starts in. */
export function runReplica(run: string): string {
  return `${run}-${stableId(run).slice(0, 5)}`;
}

/** The replicas a stored deployment runs now (see replicaNames). */
export function replicasOf(deployment: { status?: unknown } | undefined): string[] {
  const replicas = (deployment?.status as { internal?: { replicas?: unknown } } | undefined)?.internal?.replicas;
  return Array.isArray(replicas) ? replicas.filter((r): r is string => typeof r === 'string') : [];
}

/** A deployment's workload and location, from its stored name. */
export function deploymentOf(name: string): { workload: string; location: string } {
  const [workload, location] = splitOnce(name);
  return { workload, location };
}

/** A command's parent kind, parent and id, from its stored name. */
export function commandOf(name: string): { parentKind: string; parent: string; id: string } {
  const [parentKind, rest] = splitOnce(name);
  const [parent, id] = splitOnce(rest);
  return { parentKind, parent, id };
}

export type CommandParent = 'workload' | 'volumeset';

export const deploymentKey = (org: string, gvc: string, workload: string, location: string): ItemKey => ({
  org,
  kind: 'deployment',
  gvc,
  name: `${workload}:${location}`,
});
export const deploymentPrefix = (workload: string) => `${workload}:`;

/**
 * Where a deployment's replicas are reached (its status.remote): Keel itself, under
 * /-remote/{location}. It is stored Keel-relative because only the caller knows the address it
 * reaches Keel at (a proxy, a port chosen at start, several processes sharing a store), so the
 * stored value, its audit events and every process agree; responses resolve it (withResolvedRemote).
 */
export const REMOTE_PREFIX = '/-remote';
export const remotePath = (location: string) => `${REMOTE_PREFIX}/${encodeURIComponent(location)}`;

/** A deployment whose Keel-relative status.remote is resolved against `base`: Keel's Core API as the caller reached it. */
export function withResolvedRemote<T extends { status?: unknown }>(deployment: T, base: string): T {
  const status = deployment.status as Record<string, unknown> | undefined;
  const remote = status?.remote;
  if (typeof remote !== 'string' || !remote.startsWith(`${REMOTE_PREFIX}/`)) return deployment;
  return { ...deployment, status: { ...status, remote: `${base}${remote}` } };
}

export const commandKey = (org: string, gvc: string, parent: CommandParent, parentName: string, id: string): ItemKey => ({
  org,
  kind: 'command',
  gvc,
  name: `${parent}:${parentName}:${id}`,
});
export const commandPrefix = (parent: CommandParent, parentName: string) => `${parent}:${parentName}:`;

export function parentSelf(org: string, gvc: string, kind: string, name: string): string {
  return `/org/${org}/gvc/${gvc}/${kind}/${name}`;
}

/** A deployment as GET …/workload/{w}/deployment/{location} shows it. */
export function deploymentView(item: StoredItem): Resource {
  const { workload, location } = deploymentOf(item.name);
  const parent = parentSelf(item.org, item.gvc, 'workload', workload);
  return {
    kind: 'deployment',
    id: item.id,
    name: location,
    version: item.version,
    tags: {},
    created: item.created,
    lastModified: typeof item.data.updated === 'string' ? item.data.updated : item.lastModified,
    links: [
      { rel: 'self', href: `${parent}/deployment/${location}` },
      { rel: 'workload', href: parent },
      { rel: 'location', href: `/org/${item.org}/location/${location}` },
      { rel: 'gvc', href: `/org/${item.org}/gvc/${item.gvc}` },
    ],
    status: item.data.status ?? {},
  };
}

/** A command as GET …/{workload|volumeset}/{n}/-command/{id} shows it. */
export function commandView(item: StoredItem): Resource {
  const { parentKind, parent: parentName } = commandOf(item.name);
  const parent = parentSelf(item.org, item.gvc, parentKind, parentName);
  const out: Resource = {
    kind: 'command',
    id: item.id,
    name: item.id,
    version: item.version,
    tags: (item.data.tags as Record<string, unknown>) ?? {},
    created: item.created,
    lastModified: item.lastModified,
    links: [
      { rel: 'self', href: `${parent}/-command/${item.id}` },
      { rel: parentKind, href: parent },
      { rel: 'gvc', href: `/org/${item.org}/gvc/${item.gvc}` },
    ],
    type: item.data.type,
    lifecycleStage: item.data.lifecycleStage,
    spec: item.data.spec ?? {},
    status: item.data.status ?? {},
  };
  return out;
}

function splitOnce(s: string): [string, string] {
  const i = s.indexOf(':');
  return i < 0 ? [s, ''] : [s.slice(0, i), s.slice(i + 1)];
}
