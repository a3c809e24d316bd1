// Commands move pending --step--> running --step--> completed (or failed, with messages); a
// pending or running command can be cancelled (DELETE on it), which is final. Their effect is
// applied when they complete, in the same transaction: expandVolume and shrinkVolume change the
// volume's currentSize (and its iops/throughput) in the volume set's status,
// createVolumeSnapshot and deleteVolumeSnapshot add or remove a snapshot of a volume;
// runCronWorkload starts a run (jobExecution `command-<id>`) in the deployment of its location
// when it starts running and ends it, successful or failed with the reason, when it completes.
import { ApiError } from '../errors.js';
import type { ItemKey, StoredItem } from '../store/types.js';
import { iso, writeStatus, type Outcome, type ReconcileContext } from './common.js';
import { commandView, deploymentKey, deploymentView, runReplica, stableId } from './views.js';
import { setVolumeSize } from './volumesets.js';
import { SIMULATED } from '../runtime/simulated.js';
import { finish, runContainers, trimHistory, type JobExecution } from './workloads.js';

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
    if (type === 'runCronWorkload') await startRun(ctx, command, status);
  } else {
    // Where runs end with their process, a run's command completes when its run has ended.
    if (String(command.data.type) === 'runCronWorkload' && (ctx.runtime ?? SIMULATED).endsCommandRuns && (await runOf(ctx, command))?.status === 'active') return { after: ctx.stepMs };
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
      const wspec = (workload.data.spec ?? {}) as Record<string, any>;
      if (wspec.type !== 'cron') return 'runCronWorkload needs a cron workload';
      const names = new Set(((wspec.containers ?? []) as Array<{ name: string }>).map((c) => c.name));
      const unknown = ((spec.containerOverrides ?? []) as Array<{ name?: unknown }>).map((o) => String(o.name)).filter((n) => !names.has(n));
      const failure = unknown.length > 0 ? `containerOverrides name no container of workload '${parentName}': ${unknown.join(', ')}` : undefined;
      const run = await runOf(ctx, command);
      if (!(await endRun(ctx, command, failure ? 'failed' : 'successful', failure))) return failure ?? `workload '${parentName}' has no deployment in location '${String(spec.location)}'`;
      if (!failure && run?.status === 'failed') return String((run.conditions[0] as { message?: unknown } | undefined)?.message ?? 'the run failed');
      return failure;
    }
    if (type === 'stopReplica') {
      // The runtime stops it; the workload's reconciler starts the replica it still wants again.
      (ctx.runtime ?? SIMULATED).stopReplica({ org: command.org, gvc: command.gvc, workload: parentName, location: String(spec.location) }, String(spec.replica));
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

/** The name of the run a runCronWorkload command starts. */
const runName = (command: StoredItem) => `command-${command.id}`;

/** The deployment of the location a workload command names, locked for update. */
async function deploymentOf(ctx: ReconcileContext, command: StoredItem): Promise<StoredItem | undefined> {
  const rest = command.name.slice(command.name.indexOf(':') + 1);
  const workload = rest.slice(0, rest.indexOf(':'));
  const location = String((command.data.spec as { location?: unknown } | undefined)?.location ?? '');
  return ctx.tx.get(deploymentKey(command.org, command.gvc, workload, location), 'update');
}

async function writeRuns(ctx: ReconcileContext, deployment: StoredItem, executions: JobExecution[], workloadSpec?: Record<string, any>): Promise<void> {
  const status = (deployment.data.status ?? {}) as Record<string, any>;
  const history = Number(workloadSpec?.job?.historyLimit ?? 5);
  const kept = trimHistory(executions, history);
  const internal = { ...(status.internal ?? {}), replicas: kept.filter((e) => e.status === 'active').map((e) => e.replica) };
  await writeStatus(ctx, deployment, { ...deployment.data, status: { ...status, internal, jobExecutions: kept }, updated: iso(ctx.now) }, deploymentView);
}

/** A run of a cron workload starts in its location's deployment (when the workload is a cron workload there). */
async function startRun(ctx: ReconcileContext, command: StoredItem, status: Record<string, unknown>): Promise<void> {
  const rest = command.name.slice(command.name.indexOf(':') + 1);
  const workload = await ctx.tx.get({ org: command.org, kind: 'workload', gvc: command.gvc, name: rest.slice(0, rest.indexOf(':')) });
  const wspec = (workload?.data.spec ?? {}) as Record<string, any>;
  if (!workload || wspec.type !== 'cron') return;
  const deployment = await deploymentOf(ctx, command);
  if (!deployment) return;
  const name = runName(command);
  status.replica = runReplica(name);
  status.minimumWorkloadVersion = workload.version;
  const executions = ((deployment.data.status as { jobExecutions?: JobExecution[] } | undefined)?.jobExecutions ?? []).filter((e) => e.name !== name);
  // Overrides for a container the workload lacks are shown too: that is where the failure is.
  const containers = runContainers(wspec, true, 'Running');
  for (const o of (((command.data.spec ?? {}) as { containerOverrides?: Array<{ name?: unknown; image?: unknown }> }).containerOverrides ?? [])) {
    const cname = String(o.name);
    containers[cname] ??= { name: cname, image: o.image, ready: false, message: 'CreateContainerError', resources: { replicas: 1, replicasReady: 0, cpu: 0, memory: 0 } };
  }
  executions.push({ name, workloadVersion: workload.version, status: 'active', startTime: iso(ctx.now), replica: runReplica(name), containers, conditions: [] });
  await writeRuns(ctx, deployment, executions, wspec);
}

/** The run a runCronWorkload command started, as its deployment shows it now. */
async function runOf(ctx: ReconcileContext, command: StoredItem): Promise<JobExecution | undefined> {
  const deployment = await deploymentOf(ctx, command);
  return ((deployment?.data.status as { jobExecutions?: JobExecution[] } | undefined)?.jobExecutions ?? []).find((e) => e.name === runName(command));
}

/** Ends the run a command started; false when there is no run to end (no deployment there). */
async function endRun(ctx: ReconcileContext, command: StoredItem, outcome: 'successful' | 'failed' | 'removed', message?: string): Promise<boolean> {
  const deployment = await deploymentOf(ctx, command);
  if (!deployment) return false;
  const executions = ((deployment.data.status as { jobExecutions?: JobExecution[] } | undefined)?.jobExecutions ?? []).map((e) => ({ ...e }));
  const run = executions.find((e) => e.name === runName(command));
  if (!run) return true; // It never started here (the deployment came later): nothing to end.
  if (run.status === 'active') finish(run, outcome, iso(ctx.now), message);
  const rest = command.name.slice(command.name.indexOf(':') + 1);
  const workload = await ctx.tx.get({ org: command.org, kind: 'workload', gvc: command.gvc, name: rest.slice(0, rest.indexOf(':')) });
  await writeRuns(ctx, deployment, executions, workload?.data.spec as Record<string, any> | undefined);
  return true;
}

/**
 * Cancels a pending or running command in the caller's transaction: lifecycleStage `cancelled`
 * (final), a message naming who cancelled it, and the run it started removed. A cancelled
 * command answers as before; a completed or failed one cannot be cancelled (409).
 */
export async function cancelCommand(ctx: ReconcileContext, key: ItemKey, by: string): Promise<{ item: StoredItem; changed: boolean }> {
  const command = await ctx.tx.get(key, 'update');
  if (!command) throw ApiError.notFound(`command '${key.name.split(':').pop()}' not found`);
  const stage = String(command.data.lifecycleStage ?? 'pending');
  if (stage === 'cancelled') return { item: command, changed: false };
  if (!['pending', 'running'].includes(stage)) throw ApiError.conflict(`command '${command.id}' has already ${stage}; only a pending or running command can be cancelled`);
  const status = { ...((command.data.status ?? {}) as Record<string, unknown>) };
  status.messages = [...((status.messages as string[]) ?? []), `cancelled by ${by}`];
  if (String(command.data.type) === 'runCronWorkload') await endRun(ctx, command, 'removed', `Cancelled by ${by}`);
  const data = { ...command.data, lifecycleStage: 'cancelled', status, since: iso(ctx.now) };
  const updated: StoredItem = { ...command, version: command.version + 1, lastModified: iso(ctx.now), data };
  await ctx.tx.update(updated, command.version);
  return { item: updated, changed: true };
}
