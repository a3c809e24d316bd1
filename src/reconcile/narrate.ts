// The log lines of Keel's simulated platform, told from the status transitions the reconcilers
// write: every status write passes through recordStatus (common.ts), which hands the item as it
// was and as it is now to narrate(). So the logs say what the status says, line for line, and no
// reconciler writes log lines of its own.
//   deployment: rollouts per location, replicas (one per location and workload version) starting,
//               passing their health checks and stopping, suspension;
//   workload:   readiness across its locations;
//   command:    cron runs and each command's stages, completion or failure;
//   volumeset:  each volume's lifecycle, resizes, device replacements and snapshots.
import type { LogLabel, StoredItem } from '../store/types.js';
import { commandOf, deploymentOf, replicasOf } from './views.js';

export interface Told {
  labels: Partial<Record<LogLabel, string>>;
  line: string;
}

type Data = Record<string, any>;

export function narrate(item: StoredItem, action: string, before: Data | undefined): Told[] {
  const teller = TELLERS[item.kind];
  return teller ? teller(item, action, before) : [];
}

const TELLERS: Record<string, (item: StoredItem, action: string, before: Data | undefined) => Told[]> = {
  deployment: tellDeployment,
  workload: tellWorkload,
  command: tellCommand,
  volumeset: tellVolumeset,
};

type Version = { workload?: number; ready?: boolean; containers?: Record<string, { image?: string }> };

const versionsOf = (data: Data | undefined): Version[] => (Array.isArray(data?.status?.versions) ? data.status.versions : []);

function tellDeployment(item: StoredItem, action: string, before: Data | undefined): Told[] {
  const { workload, location } = deploymentOf(item.name);
  const base = { gvc: item.gvc, workload, location };
  // The replicas the reconciler recorded (see replicaNames): the same names get-replicas lists.
  const running = action === 'delete' ? [] : replicasOf(item.data);
  const stopping = replicasOf(before ?? (action === 'delete' ? item.data : undefined)).filter((r) => !running.includes(r));
  const containers = (v: Version) => Object.entries(v.containers ?? {});
  const each = (replicas: string[]): Array<Told['labels']> => (replicas.length > 0 ? replicas.map((replica) => ({ ...base, replica })) : [base]);
  const out: Told[] = [];
  const stop = (v: Version, why: string) => {
    for (const labels of each(stopping)) {
      for (const [name] of containers(v)) out.push({ labels: { ...labels, container: name }, line: `Stopping container ${name}: ${why}` });
      if (labels.replica) out.push({ labels, line: `Replica ${labels.replica} of workload version ${v.workload} stopped` });
    }
  };
  if (action === 'delete') {
    for (const v of versionsOf(item.data)) stop(v, `the workload left location ${location}`);
    return out;
  }
  const was = versionsOf(before);
  const now = versionsOf(item.data);
  const find = (list: Version[], v: Version) => list.find((w) => w.workload === v.workload);
  for (const v of now) {
    const old = find(was, v);
    if (!old) {
      out.push({ labels: base, line: `Rollout of workload version ${v.workload} to ${location} started` });
      for (const labels of each(running)) {
        for (const [name, c] of containers(v)) out.push({ labels: { ...labels, container: name }, line: `Creating container ${name} from image ${c.image ?? '(none)'}` });
      }
    }
    if (v.ready && !old?.ready) {
      for (const labels of each(running)) {
        for (const [name] of containers(v)) {
          out.push({ labels: { ...labels, container: name }, line: `Started container ${name}` });
          out.push({ labels: { ...labels, container: name }, line: `Health check passed: container ${name} is ready` });
        }
      }
      const ready = running.length === 0 ? 'no replica runs now' : `${running.length === 1 ? 'replica' : 'replicas'} ${running.join(', ')} ${running.length === 1 ? 'is' : 'are'} ready`;
      out.push({ labels: base, line: `Rollout of workload version ${v.workload} to ${location} complete: ${ready}` });
    }
  }
  for (const v of was) if (!find(now, v)) stop(v, `replaced by workload version ${now.map((n) => n.workload).join(', ')}`);
  const [message, previous] = [(item.data as Data).status?.message, before?.status?.message];
  if (message !== previous && (message === 'Suspended' || previous === 'Suspended')) {
    out.push({ labels: base, line: message === 'Suspended' ? `Workload suspended in ${location}: no replicas serve it` : `Workload resumed in ${location}` });
  }
  return out;
}

function tellWorkload(item: StoredItem, _action: string, before: Data | undefined): Told[] {
  const [ready, was] = [(item.data as Data).status?.ready, before?.status?.ready];
  if (ready === was || (ready !== true && was !== true)) return [];
  const labels = { gvc: item.gvc, workload: item.name };
  return [{ labels, line: ready ? 'Workload is ready: its replicas pass their health checks in every location' : 'Workload is not ready in every location' }];
}

function tellCommand(item: StoredItem, action: string, before: Data | undefined): Told[] {
  if (action === 'delete') return [];
  const { parentKind, parent } = commandOf(item.name);
  const type = String(item.data.type);
  const spec = (item.data.spec ?? {}) as Data;
  const status = (item.data.status ?? {}) as Data;
  const labels: Told['labels'] =
    parentKind === 'workload' ? { gvc: item.gvc, workload: parent } : { gvc: item.gvc, volumeset: parent, ...(spec.location ? { location: String(spec.location).split('/').pop() } : {}) };
  const stage = item.data.lifecycleStage;
  const out: Told[] = [];
  const name = `Command ${type} ${item.id}`;
  if (status.stage && status.stage !== before?.status?.stage) out.push({ labels, line: `${name}: stage ${status.stage}` });
  if (stage === before?.lifecycleStage) return out;
  const last = Array.isArray(status.messages) ? String(status.messages[status.messages.length - 1] ?? '') : '';
  if (stage === 'running') out.unshift({ labels, line: `${name} running` });
  if (stage === 'completed') {
    if (type === 'runCronWorkload' && status.replica) {
      const job = { ...labels, replica: String(status.replica) };
      out.push({ labels: job, line: `Cron job started in replica ${status.replica}` });
      out.push({ labels: job, line: `Cron job in replica ${status.replica} completed` });
    }
    out.push({ labels, line: `${name} completed` });
  }
  if (stage === 'failed') out.push({ labels, line: `${name} failed: ${last}` });
  return out;
}

type Volume = { index: number; lifecycle?: string; currentSize?: number; storageDeviceId?: string; resourceName?: string; volumeSnapshots?: Array<{ name: string; size?: number }> };
type Place = { name: string; volumes?: Volume[] };

function tellVolumeset(item: StoredItem, action: string, before: Data | undefined): Told[] {
  if (action === 'delete') return [];
  const status = (item.data.status ?? {}) as Data;
  const user = typeof status.usedByWorkload === 'string' ? status.usedByWorkload.split('/').pop() : undefined;
  const places = (data: Data | undefined): Place[] => (Array.isArray(data?.status?.locations) ? data.status.locations : []);
  const was = places(before);
  const out: Told[] = [];
  for (const place of places(item.data)) {
    const labels = { gvc: item.gvc, volumeset: item.name, location: place.name, ...(user ? { workload: user } : {}) };
    const old = was.find((p) => p.name === place.name);
    for (const v of place.volumes ?? []) {
      const o = old?.volumes?.find((w) => w.index === v.index);
      const say = (line: string) => out.push({ labels, line: `Volume ${v.index} (${v.resourceName ?? v.storageDeviceId}): ${line}` });
      if (!o) say(`${v.lifecycle}, ${v.currentSize} GiB on device ${v.storageDeviceId}`);
      else if (o.lifecycle !== v.lifecycle) say(`${v.lifecycle} (was ${o.lifecycle})`);
      if (o && o.currentSize !== v.currentSize) say(`resized from ${o.currentSize} GiB to ${v.currentSize} GiB`);
      if (o && o.storageDeviceId !== v.storageDeviceId) say(`now on device ${v.storageDeviceId} (was ${o.storageDeviceId})`);
      const before = new Set((o?.volumeSnapshots ?? []).map((s) => s.name));
      const after = new Set((v.volumeSnapshots ?? []).map((s) => s.name));
      for (const s of v.volumeSnapshots ?? []) if (!before.has(s.name)) say(`snapshot ${s.name} created (${s.size} GiB)`);
      for (const s of o?.volumeSnapshots ?? []) if (!after.has(s.name)) say(`snapshot ${s.name} deleted`);
    }
  }
  return out;
}
