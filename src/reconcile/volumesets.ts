// Volume sets: one status.locations entry per location of the GVC, each with its volumes moving
// through the public lifecycle values (types-ts volumeSet.ts):
//   creating --step--> unbound --(mounted by a workload, step)--> bound --(unmounted, step)--> unbound
//   a volume beyond desiredVolumeCount --step--> unused; a location that left the GVC: deleted, then gone.
// Sizes come from spec.initialCapacity; iops and throughput from the performance class.
// A bound volume is filled to a simulated 90% of the initial capacity; with spec.autoscaling
// the volume grows by scalingFactor (up to maxCapacity), one step at a time, until its free
// share is at least minFreePercentage. With spec.snapshots.schedule one scheduled snapshot
// appears a step after the volume is ready. Each volume's last transition time is kept in its
// attributes (`keel/since`), so every process computes the same next transition.
import { deepEqual } from '../json.js';
import type { ItemKey, StoredItem } from '../store/types.js';
import { gvcKey, gvcLocations, iso, soonest, writeStatus, deleteChildren, type Outcome, type ReconcileContext } from './common.js';
import { listAll } from '../store/list-all.js';
import { commandPrefix, commandView, stableId } from './views.js';

export const SINCE = 'keel/since';
const GIB = 1024 ** 3;
/** Share of the initial capacity a mounted volume is simulated to hold. */
export const SIMULATED_FILL = 0.9;

type Volume = Record<string, unknown> & { index: number; lifecycle: string; currentSize: number; attributes?: Record<string, string> };
type LocationStatus = { name: string; desiredVolumeCount: number; clusterId: string; volumes: Volume[] };

export function performance(performanceClass: unknown, size: number): { iops: number; throughput: number } {
  if (performanceClass === 'high-throughput-ssd') {
    return { iops: Math.min(16000, Math.max(3000, size * 50)), throughput: Math.min(1000, Math.max(250, size * 4)) };
  }
  return { iops: 3000, throughput: 125 };
}

const DRIVERS: Record<string, string> = {
  aws: 'ebs.csi.aws.com',
  gcp: 'pd.csi.storage.gke.io',
  azure: 'disk.csi.azure.com',
  linode: 'linodebs.csi.linode.com',
};

/** Workloads whose containers mount the volume set (volume uri `cpln://volumeset/NAME`). */
export function mounts(workload: StoredItem, volumeset: string): boolean {
  const containers = ((workload.data.spec as Record<string, unknown> | undefined)?.containers ?? []) as Array<{ volumes?: Array<{ uri?: string }> }>;
  const uri = `cpln://volumeset/${volumeset}`;
  return containers.some((c) => (c.volumes ?? []).some((v) => v.uri === uri || v.uri?.startsWith(`${uri}/`)));
}

export function setVolumeSize(volume: Volume, size: number, performanceClass: unknown): void {
  volume.currentSize = size;
  Object.assign(volume, performance(performanceClass, size));
  const used = Number(volume.currentBytesUsed ?? 0);
  volume.currentBytesFree = Math.max(0, size * GIB - used);
}

export async function reconcileVolumeset(ctx: ReconcileContext, key: ItemKey): Promise<Outcome> {
  const item = await ctx.tx.get(key, 'update');
  if (!item) {
    // The volumes' data goes with the set (a workload's deletion leaves it).
    ctx.runtime?.removeVolumeSet?.(key.org, key.gvc, key.name);
    await deleteChildren(ctx, key.org, key.gvc, 'command', commandPrefix('volumeset', key.name), commandView);
    return {};
  }
  const gvc = await ctx.tx.get(gvcKey(key.org, key.gvc));
  const locations = gvcLocations(gvc);
  const users = (await listAll(ctx.store, key.org, 'workload', key.gvc)).filter((w) => mounts(w, key.name));
  const spec = (item.data.spec ?? {}) as Record<string, any>;
  const previous = (item.data.status ?? {}) as Record<string, any>;
  const status: Record<string, any> = structuredClone(previous);
  const used = users.length > 0;
  const workloadLinks = users.map((w) => `/org/${key.org}/gvc/${key.gvc}/workload/${w.name}`);
  if (gvc) status.parentId = gvc.id;
  if (used) {
    status.usedByWorkload = workloadLinks[0];
    status.workloadLinks = workloadLinks;
    // The binding of the set to the workload that uses it: a new one when another workload takes it.
    status.bindingId = stableId(item.id, workloadLinks[0]);
  } else {
    delete status.usedByWorkload;
    delete status.workloadLinks;
    delete status.bindingId;
  }
  const desired = used ? Math.max(1, ...users.map(replicasOf)) : 1;

  const now = ctx.now;
  const step = ctx.stepMs;
  let next: number | undefined;
  const current = (status.locations ?? []) as LocationStatus[];
  const out: LocationStatus[] = [];

  for (const name of locations) {
    let entry = current.find((l) => l.name === name);
    if (!entry) {
      entry = { name, desiredVolumeCount: desired, clusterId: `cpln-${name}-${stableId(key.org, name).slice(0, 8)}`, volumes: [] };
    }
    entry.desiredVolumeCount = desired;
    const place = await ctx.tx.get({ org: key.org, kind: 'location', gvc: '', name });
    for (let index = 0; index < desired; index++) {
      if (!entry.volumes.some((v) => v.index === index)) entry.volumes.push(newVolume(item, spec, entry, index, place, now));
    }
    entry.volumes.sort((a, b) => a.index - b.index);
    for (const volume of entry.volumes) next = soonest(next, advance(volume, spec, item.name, used, index0(volume) < desired, now, step));
    out.push(entry);
  }
  // Locations that left the GVC: their volumes are deleted, and the entry goes a step later.
  for (const entry of current) {
    if (locations.includes(entry.name)) continue;
    let gone = true;
    for (const volume of entry.volumes) {
      if (volume.lifecycle !== 'deleted') {
        volume.lifecycle = 'deleted';
        volume.attributes = { ...(volume.attributes ?? {}), [SINCE]: iso(now) };
      }
      const due = Date.parse(volume.attributes?.[SINCE] ?? iso(now)) + step;
      if (now < due) {
        gone = false;
        next = soonest(next, due - now);
      }
    }
    if (!gone) out.push(entry);
  }
  status.locations = out;
  if (!deepEqual(previous, status)) await writeStatus(ctx, item, { ...item.data, status });
  return { after: next };
}

const index0 = (v: Volume) => v.index;

function replicasOf(workload: StoredItem): number {
  const options = ((workload.data.spec as Record<string, any> | undefined)?.defaultOptions ?? {}) as Record<string, any>;
  const min = Number(options.autoscaling?.minScale ?? 1);
  return Number.isFinite(min) && min > 0 ? Math.min(min, 100) : 1;
}

function newVolume(item: StoredItem, spec: Record<string, any>, entry: LocationStatus, index: number, place: StoredItem | undefined, now: number): Volume {
  const size = Number(spec.initialCapacity ?? 10);
  const provider = String(place?.data.provider ?? 'byok');
  const region = String(place?.data.region ?? entry.name);
  const volume: Volume = {
    index,
    lifecycle: 'creating',
    storageDeviceId: `vol-${stableId(item.id, entry.name, String(index))}`,
    oldStorageDeviceIds: [],
    resourceName: `${item.name}-${entry.name}-${index}`,
    currentSize: size,
    currentBytesUsed: 0,
    currentBytesFree: size * GIB,
    ...performance(spec.performanceClass, size),
    driver: DRIVERS[provider] ?? 'csi.keel.local',
    volumeSnapshots: [],
    attributes: { [SINCE]: iso(now) },
    zone: `${region}a`,
  };
  return volume;
}

/** Applies the volume's next transition when it is due; returns ms until the next one, if any. */
function advance(volume: Volume, spec: Record<string, any>, setName: string, used: boolean, wanted: boolean, now: number, step: number): number | undefined {
  const since = Date.parse(volume.attributes?.[SINCE] ?? '') || now;
  const due = since + step;
  const moveTo = (lifecycle: string) => {
    volume.lifecycle = lifecycle;
    volume.attributes = { ...(volume.attributes ?? {}), [SINCE]: iso(now) };
  };
  let target: string | undefined;
  switch (volume.lifecycle) {
    case 'creating':
      target = wanted ? (used ? 'bound' : 'unbound') : 'unused';
      break;
    case 'unbound':
      target = !wanted ? 'unused' : used ? 'bound' : undefined;
      break;
    case 'bound':
      target = !wanted ? 'unused' : !used ? 'unbound' : undefined;
      break;
    case 'unused':
      target = wanted ? (used ? 'bound' : 'unbound') : undefined;
      break;
    case 'deleted':
    case 'repairing':
      target = wanted ? (used ? 'bound' : 'unbound') : 'unused';
      break;
  }
  if (target) {
    if (now < due) return due - now;
    moveTo(target);
    const size = Number(volume.currentSize);
    const usedBytes = target === 'bound' ? Math.round(Math.min(size, Number(spec.initialCapacity ?? size)) * SIMULATED_FILL * GIB) : Number(volume.currentBytesUsed ?? 0);
    volume.currentBytesUsed = target === 'bound' ? Math.max(usedBytes, Number(volume.currentBytesUsed ?? 0)) : volume.currentBytesUsed;
    volume.currentBytesFree = Math.max(0, size * GIB - Number(volume.currentBytesUsed ?? 0));
    return step;
  }
  // Settled in its lifecycle: autoscaling and scheduled snapshots, one step after the last change.
  const growth = autoscaleTo(volume, spec);
  const snapshot = snapshotDue(volume, spec);
  if (growth === undefined && !snapshot) return undefined;
  if (now < due) return due - now;
  if (growth !== undefined) {
    setVolumeSize(volume, growth, spec.performanceClass);
  } else {
    const expires = retentionMs(spec.snapshots?.retentionDuration);
    const name = `${setName}-${volume.index}-scheduled-1`;
    (volume.volumeSnapshots ??= [] as unknown[] as any);
    (volume.volumeSnapshots as unknown[]).push({
      name,
      id: `snap-${stableId(String(volume.storageDeviceId), name)}`,
      created: iso(now),
      ...(expires ? { expires: iso(now + expires) } : {}),
      size: volume.currentSize,
      tags: [{ 'cpln/scheduled': 'true' }],
    });
  }
  volume.attributes = { ...(volume.attributes ?? {}), [SINCE]: iso(now) };
  return step;
}

/** The size a mounted volume should grow to now, or undefined. */
function autoscaleTo(volume: Volume, spec: Record<string, any>): number | undefined {
  const auto = spec.autoscaling as Record<string, number> | undefined;
  if (!auto || volume.lifecycle !== 'bound') return undefined;
  const size = Number(volume.currentSize);
  const max = Number(auto.maxCapacity ?? size);
  const minFree = Number(auto.minFreePercentage ?? 0);
  const factor = Number(auto.scalingFactor ?? 1.2);
  if (!(minFree > 0) || size >= max) return undefined;
  const freePct = (Number(volume.currentBytesFree ?? size * GIB) / (size * GIB)) * 100;
  if (freePct >= minFree) return undefined;
  return Math.min(max, Math.max(size + 1, Math.ceil(size * factor)));
}

function snapshotDue(volume: Volume, spec: Record<string, any>): boolean {
  if (!spec.snapshots?.schedule || !['bound', 'unbound'].includes(volume.lifecycle)) return false;
  return !((volume.volumeSnapshots ?? []) as Array<{ name?: string }>).some((s) => s.name?.endsWith('-scheduled-1'));
}

function retentionMs(text: unknown): number | undefined {
  const m = typeof text === 'string' ? /^([0-9]+(?:\.[0-9]+)?)([dhm])$/.exec(text) : null;
  if (!m) return undefined;
  return Number(m[1]) * { d: 86_400_000, h: 3_600_000, m: 60_000 }[m[2] as 'd' | 'h' | 'm'];
}
