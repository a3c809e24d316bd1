// Commands move pending --step--> running --step--> completed (or failed, with messages). Their
// effect is applied when they complete, in the same transaction: expandVolume and shrinkVolume
// change the volume's currentSize (and its iops/throughput) in the volume set's status,
// createVolumeSnapshot and deleteVolumeSnapshot add or remove a snapshot of a volume.
import type { ItemKey, StoredItem } from '../store/types.js';
import { iso, stableId, writeStatus, type Outcome, type ReconcileContext } from './common.js';
import { commandView } from './views.js';
import { setVolumeSize } from './volumesets.js';

export const WORKLOAD_COMMANDS = ['runCronWorkload', 'stopReplica', 'restartWorkload'] as const;
export const VOLUMESET_COMMANDS = ['expandVolume', 'shrinkVolume', 'createVolumeSnapshot', 'deleteVolumeSnapshot', 'restoreVolume', 'deleteVolume', 'replaceVolume'] as const;

/** The stage names a command's status shows while it runs (types-ts command.ts). */
const RUNNING_STAGE: Record<string, string> = {
  expandVolume: 'expand-volume',
  shrinkVolume: 'create-volume',
  createVolumeSnapshot: 'create-snapshot',
  deleteVolumeSnapshot: 'delete-snapshot',
  deleteVolume: 'delete-storage-resources',
  replaceVolume: 'create-volume',
};

export async function reconcileCommand(ctx: ReconcileContext, key: ItemKey): Promise<Outcome> {
  const command = await ctx.tx.get(key, 'update');
  if (!command) return {};
  const stage = String(command.data.lifecycleStage ?? 'pending');
  if (!['pending', 'running'].includes(stage)) return {};
  const since = Date.parse(String(command.data.since ?? '')) || Date.parse(command.created);
  const due = since + ctx.stepMs;
  if (ctx.now < due) return { after: due - ctx.now };
  const status = { ...((command.data.status ?? {}) as Record<string, unknown>) };
  let next: string;
  if (stage === 'pending') {
    next = 'running';
    const type = String(command.data.type);
    if (RUNNING_STAGE[type]) status.stage = RUNNING_STAGE[type];
    status.messages = [`${type} started`];
  } else {
    const injected = ctx.fault?.('commandFailed') ?? (command.name.startsWith('volumeset:') ? ctx.fault?.('volumeOperationFailed') : undefined);
    const failure = injected ?? (await complete(ctx, command, status));
    next = failure ? 'failed' : 'completed';
    status.messages = [...((status.messages as string[]) ?? []), failure ?? `${String(command.data.type)} completed`];
    if (!failure && RUNNING_STAGE[String(command.data.type)]) status.stage = 'update-volume-set';
  }
  await writeStatus(ctx, command, { ...command.data, lifecycleStage: next, status, since: iso(ctx.now) }, commandView);
  return next === 'running' ? { after: ctx.stepMs } : {};
}

/** Applies a command's effect; returns a failure message, or undefined when it worked. */
async function complete(ctx: ReconcileContext, command: StoredItem, status: Record<string, unknown>): Promise<string | undefined> {
  const [parentKind, rest] = [command.name.slice(0, command.name.indexOf(':')), command.name.slice(command.name.indexOf(':') + 1)];
  const parentName = rest.slice(0, rest.indexOf(':'));
  const type = String(command.data.type);
  const spec = (command.data.spec ?? {}) as Record<string, any>;
  if (parentKind === 'workload') {
    const workload = await ctx.tx.get({ org: command.org, kind: 'workload', gvc: command.gvc, name: parentName });
    if (!workload) return `workload '${parentName}' no longer exists`;
    if (type === 'runCronWorkload') {
      if ((workload.data.spec as Record<string, unknown> | undefined)?.type !== 'cron') return 'runCronWorkload needs a cron workload';
      status.replica = `${parentName}-${stableId(command.id).slice(0, 5)}`;
      status.minimumWorkloadVersion = workload.version;
    }
    return undefined;
  }
  const key = { org: command.org, kind: 'volumeset', gvc: command.gvc, name: parentName };
  const volumeset = await ctx.tx.get(key, 'update');
  if (!volumeset) return `volume set '${parentName}' no longer exists`;
  const vstatus = structuredClone((volumeset.data.status ?? {}) as Record<string, any>);
  const location = (vstatus.locations ?? []).find((l: { name: string }) => l.name === spec.location);
  if (!location) return `volume set '${parentName}' has no volumes in location '${String(spec.location)}'`;
  const volume = (location.volumes ?? []).find((v: { index: number }) => v.index === Number(spec.volumeIndex ?? 0));
  if (!volume) return `volume set '${parentName}' has no volume ${String(spec.volumeIndex ?? 0)} in location '${String(spec.location)}'`;
  const vspec = (volumeset.data.spec ?? {}) as Record<string, any>;
  status.clusterId = location.clusterId;
  switch (type) {
    case 'expandVolume':
    case 'shrinkVolume': {
      const size = Number(spec.newStorageCapacity);
      if (type === 'expandVolume' && !(size > volume.currentSize)) return `newStorageCapacity ${size} is not larger than the current size ${volume.currentSize}`;
      if (type === 'shrinkVolume') {
        if (!(size < volume.currentSize)) return `newStorageCapacity ${size} is not smaller than the current size ${volume.currentSize}`;
        if (size * 1024 ** 3 < Number(volume.currentBytesUsed ?? 0)) return `newStorageCapacity ${size} is smaller than the data on the volume`;
        status.nextVolumeSize = size;
      }
      setVolumeSize(volume, size, vspec.performanceClass);
      break;
    }
    case 'createVolumeSnapshot': {
      const name = String(spec.snapshotName);
      volume.volumeSnapshots = [...(volume.volumeSnapshots ?? []).filter((s: { name: string }) => s.name !== name)];
      const id = `snap-${stableId(command.id)}`;
      volume.volumeSnapshots.push({
        name,
        id,
        created: iso(ctx.now),
        ...(spec.snapshotExpirationDate ? { expires: String(spec.snapshotExpirationDate) } : {}),
        size: volume.currentSize,
        tags: Array.isArray(spec.snapshotTags) ? spec.snapshotTags : [],
      });
      status.newSnapshotId = id;
      status.newSnapshotSize = volume.currentSize;
      break;
    }
    case 'deleteVolumeSnapshot': {
      const before = (volume.volumeSnapshots ?? []).length;
      volume.volumeSnapshots = (volume.volumeSnapshots ?? []).filter((s: { name: string }) => s.name !== spec.snapshotName);
      if (volume.volumeSnapshots.length === before) return `volume ${volume.index} has no snapshot '${String(spec.snapshotName)}'`;
      break;
    }
    case 'restoreVolume': {
      if (!(volume.volumeSnapshots ?? []).some((s: { name: string }) => s.name === spec.snapshotName)) return `volume ${volume.index} has no snapshot '${String(spec.snapshotName)}'`;
      break;
    }
    case 'deleteVolume':
    case 'replaceVolume': {
      volume.oldStorageDeviceIds = [...(volume.oldStorageDeviceIds ?? []), volume.storageDeviceId];
      volume.storageDeviceId = `vol-${stableId(command.id)}`;
      volume.lifecycle = 'creating';
      volume.attributes = { ...(volume.attributes ?? {}), 'keel/since': iso(ctx.now) };
      break;
    }
  }
  await writeStatus(ctx, volumeset, { ...volumeset.data, status: vstatus });
  return undefined;
}
