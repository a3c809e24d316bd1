// Workloads: one deployment per location of the GVC. A new workload version (any change made
// through the API) is added to each deployment's status.versions as deploying; a step later it
// is ready and replaces the older versions. The deployment reports the workload's own `version`
// (what the user sees), so a client can tell which version runs where. Its shape follows the
// public DeploymentStatus: `internal` (syncFailed, the replicas running), containers with
// numeric resources (replicas, replicasReady, millicores, MiB) and, for a cron workload, its
// runs in `jobExecutions`: a run starts at each time the schedule fires (UTC, wall clock),
// is active for a step and then successful; runs requested with a runCronWorkload command
// are added by the command's reconciler under the name `command-<id>`. The workload's status
// (endpoint, ready, readyLatest, replica counts, health, images) is derived from its
// deployments in the same transaction.
import { deepEqual } from '../json.js';
import { createHash, randomUUID } from 'node:crypto';
import { nextFire, parseSchedule, previousFire } from '../kinds/cron.js';
import { registryImage } from '../kinds/registryimage.js';
import type { ItemKey, StoredItem } from '../store/types.js';
import type { Clock, DeploymentRef, ReplicaWant, Runtime, Wake } from '../runtime/types.js';
import { SIMULATED } from '../runtime/simulated.js';
import { deleteChildren, gvcKey, gvcLocations, iso, recordStatus, writeStatus, type Outcome, type ReconcileContext } from './common.js';
import { listAll } from '../store/list-all.js';
import { commandPrefix, commandView, deploymentKey, deploymentPrefix, deploymentView, remotePath, replicaNames, runReplica, stableId } from './views.js';

type Version = { name: string; created: string; workload: number; gvc?: number; containers: Record<string, unknown>; ready: boolean; message: string };
export type JobExecution = {
  name: string;
  workloadVersion: number;
  status: 'successful' | 'failed' | 'active' | 'pending' | 'removed';
  startTime: string;
  completionTime?: string;
  replica: string;
  containers: Record<string, unknown>;
  conditions: Array<Record<string, unknown>>;
};

/** The longest a pass waits for the next scheduled run (timers this long are not exact anyway). */
const MAX_WAIT_MS = 3_600_000;
const DEFAULT_HISTORY = 5;
/** How soon a process that does not run replicas looks at a workload again (in case it takes over). */
const NOT_OWNER_RETRY_MS = 5_000;

export async function reconcileWorkload(ctx: ReconcileContext, key: ItemKey): Promise<Outcome> {
  const runtime = ctx.runtime ?? SIMULATED;
  // Another Keel process on this database runs the replicas: it keeps the workloads' status.
  if (!runtime.owns()) return { after: NOT_OWNER_RETRY_MS };
  const workload = await ctx.tx.get(key, 'update');
  if (!workload) {
    for (const old of await listAll(ctx.store, key.org, 'deployment', key.gvc, deploymentPrefix(key.name))) {
      runtime.observe(deploymentRef(key, old.name.slice(deploymentPrefix(key.name).length), ''), [], clockOf(ctx, old));
    }
    // Replicas whose deployment is not stored (the state was replaced under them) stop too.
    for (const location of heldLocations(runtime, key)) runtime.observe(deploymentRef(key, location, ''), [], clockOf(ctx, undefined));
    await deleteChildren(ctx, key.org, key.gvc, 'deployment', deploymentPrefix(key.name), deploymentView);
    await deleteChildren(ctx, key.org, key.gvc, 'command', commandPrefix('workload', key.name), commandView);
    return {};
  }
  const gvc = await ctx.tx.get(gvcKey(key.org, key.gvc));
  const locations = gvcLocations(gvc);
  const alias = String(gvc?.data.alias ?? key.gvc);
  const host = `${key.name}-${alias}`;
  const endpoint = runtime.endpoint(host);
  const spec = (workload.data.spec ?? {}) as Record<string, any>;
  let after: number | undefined;
  const pulled = await pullImages(ctx, key.org, spec);
  const states: Array<{ ready: boolean; latest: boolean; replicas: string[]; paused: boolean }> = [];

  for (const location of heldLocations(runtime, key)) if (!locations.includes(location)) runtime.observe(deploymentRef(key, location, host), [], clockOf(ctx, undefined));
  // Deployments of locations that left the GVC go away.
  for (const old of await listAll(ctx.store, key.org, 'deployment', key.gvc, deploymentPrefix(key.name))) {
    const location = old.name.slice(deploymentPrefix(key.name).length);
    if (locations.includes(location)) continue;
    runtime.observe(deploymentRef(key, location, host), [], clockOf(ctx, old));
    await ctx.tx.delete(old);
    await recordStatus(ctx, old, deploymentView, 'delete');
  }

  for (const location of locations) {
    const options = optionsAt(spec, location);
    // A suspended cron workload stays deployed; only its schedule stops starting runs.
    const paused = options.suspend === true;
    const suspended = paused && spec.type !== 'cron';
    const dkey = deploymentKey(key.org, key.gvc, key.name, location);
    const existing = await ctx.tx.get(dkey, 'update');
    const previous = (existing?.data.status ?? {}) as Record<string, any>;
    const status: Record<string, any> = structuredClone(previous);
    const since = Date.parse(String(existing?.data.since ?? '')) || ctx.now;
    let moved = false;
    let failure: string | undefined;
    let versions = (status.versions ?? []) as Version[];
    if (!versions.some((v) => v.workload === workload.version)) {
      versions.push({
        name: String(workload.version),
        created: iso(ctx.now),
        workload: workload.version,
        gvc: gvc?.version,
        containers: {},
        ready: false,
        message: 'Deploying',
      });
      moved = true;
    }
    // The replicas of the latest version this location should run (a cron workload's are its runs, below).
    const scaled = suspended || spec.type === 'cron' ? { count: 0 } : scale(runtime, deploymentRef(key, location, host), spec, options);
    const wanted = replicaNames(key.name, spec.type, location, workload.version, scaled.count);
    const clock = { since, now: ctx.now, stepMs: ctx.stepMs };
    // A cron workload's replicas are its active runs (those this pass starts are added below).
    const observed = runtime.observe(
      deploymentRef(key, location, host),
      spec.type === 'cron' ? runWants(spec, (status.jobExecutions ?? []) as JobExecution[]) : pulled.failure ? [] : wanted.map((name) => ({ name, version: workload.version, spec })),
      clock,
      pulled.failure ? undefined : scaled.wake,
      suspended,
    );
    if (!moved) {
      const latest = versions.find((v) => v.workload === workload.version)!;
      if (!latest.ready && !suspended) {
        const syncFailed = ctx.fault?.('deploymentSyncFailed');
        if (syncFailed) latest.message = failure = `Sync failed: ${syncFailed}`;
        else if (pulled.failure) latest.message = failure = pulled.failure;
        else if (ctx.fault?.('deploymentNeverReady')) {
          // stays deploying
        } else if (observed.ready) {
          latest.ready = true;
          latest.message = 'Ready';
          versions = [latest];
          moved = true;
        } else {
          if (observed.message) latest.message = failure = observed.message;
          if (observed.after !== undefined) after = Math.min(after ?? Infinity, observed.after);
        }
      }
    }
    const latest = versions.find((v) => v.workload === workload.version)!;
    const ready = (observed.serving ?? versions.some((v) => v.ready)) && !suspended;
    // A rolled-out version whose replicas stop being ready (a crash, a failing probe) says why.
    if (latest.ready && !ready && !suspended && observed.message) failure = observed.message;

    let cronAt = existing?.data.cronAt as string | undefined;
    let replicas: string[];
    if (spec.type === 'cron') {
      const runs = scheduledRuns(ctx, key.name, workload.version, spec, location, (status.jobExecutions ?? []) as JobExecution[], ready && !paused, Date.parse(cronAt ?? existing?.created ?? iso(ctx.now)));
      // The runtime runs them: a run ends when it says so (the simulation: a step after it started).
      const ran = runtime.observe(deploymentRef(key, location, host), runWants(spec, runs.executions), clock);
      for (const e of runs.executions) {
        if (e.status !== 'active' || (e.name.startsWith('command-') && !runtime.endsCommandRuns)) continue;
        const end = ran.replicas.find((r) => r.name === e.replica)?.finished;
        if (end) finish(e, end.exitCode === 0 ? 'successful' : 'failed', iso(end.at), end.message);
      }
      if (ran.after !== undefined) after = Math.min(after ?? Infinity, ran.after);
      status.jobExecutions = trimHistory(runs.executions, Number(spec.job?.historyLimit ?? DEFAULT_HISTORY));
      cronAt = iso(ctx.now);
      if (runs.after !== undefined) after = Math.min(after ?? Infinity, runs.after);
      replicas = (status.jobExecutions as JobExecution[]).filter((e) => e.status === 'active').map((e) => e.replica);
    } else {
      replicas = wanted;
    }
    const readyReplicas = observed.replicas.filter((r) => r.ready).length;
    latest.containers = containersOf(spec, latest.ready && !suspended && (observed.serving ?? true), replicas.length, observed.serving === undefined ? undefined : readyReplicas);

    Object.assign(status, {
      endpoint,
      remote: remotePath(location),
      lastProcessedVersion: workload.version,
      expectedDeploymentVersion: workload.version,
      internal: { ...(status.internal ?? {}), syncFailed: false, replicas },
      ready,
      deploying: !latest.ready && !suspended,
      versions,
      message: paused ? 'Suspended' : latest.ready && ready ? 'Ready' : (failure ?? (latest.ready ? 'Not ready' : 'Deploying')),
    });
    states.push({ ready, latest: latest.ready && !suspended, replicas, paused });
    if (!existing) {
      const now = iso(ctx.now);
      const item: StoredItem = { ...dkey, id: randomUUID(), version: 1, created: now, lastModified: now, data: { status, since: now, updated: now, ...(cronAt ? { cronAt } : {}) } };
      await ctx.tx.insert(item);
      await recordStatus(ctx, item, deploymentView);
      after = Math.min(after ?? Infinity, ctx.stepMs);
    } else if (!deepEqual(previous, status)) {
      const data = { ...existing.data, status, since: moved ? iso(ctx.now) : existing.data.since, updated: iso(ctx.now), ...(cronAt ? { cronAt } : {}) };
      await writeStatus(ctx, existing, data, deploymentView);
      if (moved && !latest.ready) after = Math.min(after ?? Infinity, ctx.stepMs);
    } else if (cronAt && cronAt !== existing.data.cronAt) {
      // Only the bookkeeping of scheduled runs moved: not a change anyone sees.
      await ctx.tx.writeStatus(existing, { ...existing.data, cronAt });
    }
  }

  const previous = (workload.data.status ?? {}) as Record<string, any>;
  const ready = states.length > 0 && states.every((s) => s.ready);
  const replicas = states.flatMap((s) => s.replicas);
  const status = {
    ...previous,
    parentId: gvc?.id,
    endpoint,
    canonicalEndpoint: endpoint,
    internalName: `${key.name}.${key.gvc}.cpln.local`,
    replicaInternalNames: spec.type === 'stateful' ? [...new Set(replicas)].map((r) => `${r}.${key.name}.${key.gvc}.cpln.local`) : [],
    currentReplicaCount: replicas.length,
    healthCheck: since(previous.healthCheck, healthCheck(spec, states.some((s) => s.ready)), 'lastChecked', iso(ctx.now)),
    resolvedImages:
      previous.resolvedImages?.resolvedForVersion === workload.version && deepEqual(previous.resolvedImages.images, pulled.images)
        ? previous.resolvedImages
        : { resolvedForVersion: workload.version, resolvedAt: iso(ctx.now), images: pulled.images },
    loadBalancer: loadBalancers(spec, locations, `${key.name}-${alias}`),
    suspendedStatus: suspendedStatus(spec, states),
    ready,
    readyLatest: states.length > 0 && states.every((s) => s.latest),
  };
  if (!deepEqual(previous, status)) await writeStatus(ctx, workload, { ...workload.data, status });
  return { after: after === Infinity || after === undefined ? undefined : Math.min(after, MAX_WAIT_MS) };
}

function deploymentRef(key: ItemKey, location: string, host: string): DeploymentRef {
  return { org: key.org, gvc: key.gvc, workload: key.name, location, host };
}

/** The locations the runtime runs the workload's replicas in (or wakes it on a request). */
function heldLocations(runtime: Runtime, key: ItemKey): string[] {
  return runtime.locationsOf?.(key.org, key.gvc, key.name) ?? [];
}

/** The clock of a stored deployment's rollout (or of none), for a runtime told to stop it. */
function clockOf(ctx: ReconcileContext, deployment: StoredItem | undefined): Clock {
  return { since: Date.parse(String(deployment?.data.since ?? '')) || ctx.now, now: ctx.now, stepMs: ctx.stepMs };
}

/** Whether the workload is suspended in every location, some or none (with no location, as its defaults say). */
function suspendedStatus(spec: Record<string, any>, states: Array<{ paused: boolean }>): 'notSuspended' | 'partiallySuspended' | 'suspended' {
  const paused = states.length > 0 ? states.filter((s) => s.paused).length : spec.defaultOptions?.suspend === true ? 1 : 0;
  if (paused === 0) return 'notSuspended';
  return paused === Math.max(states.length, 1) ? 'suspended' : 'partiallySuspended';
}

/**
 * The health check of a workload's endpoint (a cron workload has none): passing while any
 * location serves it.
 */
function healthCheck(spec: Record<string, any>, serving: boolean): Record<string, unknown> {
  if (spec.type === 'cron') return { active: false };
  return serving
    ? { active: true, success: true, code: 200, message: 'OK', failures: 0, successes: 1 }
    : { active: true, success: false, code: 503, message: 'no location serves the workload yet', failures: 1, successes: 0 };
}

/** `next` with its `field` (a time) kept from `previous` when nothing else changed, else set to `at`. */
function since(previous: Record<string, unknown> | undefined, next: Record<string, unknown>, field: string, at: string): Record<string, unknown> {
  const { [field]: was, ...rest } = previous ?? {};
  return { ...next, [field]: was !== undefined && deepEqual(rest, next) ? was : at };
}

/**
 * The images a workload runs, resolved to digests. An image of the workload's org's registry
 * (`//image/NAME:TAG`, `/org/ORG/image/NAME:TAG` or `ORG.registry.<domain>/NAME:TAG`, see
 * registryImage) resolves to the digest pushed under that tag, and one pinned to a digest
 * (`NAME@sha256:…`) to that digest if the org holds that manifest; another org's image never
 * resolves; while it is missing, the pull fails as on the hosted service and the deployment
 * cannot become ready. Keel pulls no other image: a digest stands for the reference (the same
 * reference, the same digest), for linux/amd64.
 */
async function pullImages(ctx: ReconcileContext, org: string, spec: Record<string, any>): Promise<{ images: unknown[]; failure?: string }> {
  let failure: string | undefined;
  const images = [];
  for (const c of (spec.containers ?? []) as Array<{ image?: string }>) {
    const reference = String(c.image);
    const own = registryImage(reference, org, ctx.registryHosts);
    let digest: string;
    let mediaType = 'application/vnd.oci.image.manifest.v1+json';
    if (own && own.org !== org) {
      // Writes refuse another org's image; one stored before that rule still resolves to nothing of it.
      failure ??= pullFailure(reference);
      continue;
    }
    if (own && 'digest' in own) {
      const held = await ctx.registryManifest?.(own.org, own.digest);
      if (!held) {
        failure ??= pullFailure(reference);
        continue;
      }
      digest = own.digest;
      mediaType = held.mediaType;
    } else if (own) {
      const image = await ctx.tx.get({ org: own.org, kind: 'image', gvc: '', name: own.name });
      if (!image) {
        failure ??= pullFailure(reference);
        continue;
      }
      digest = String(image.data.digest);
      mediaType = String((image.data.manifest as { mediaType?: string } | undefined)?.mediaType ?? mediaType);
    } else {
      digest = `sha256:${createHash('sha256').update(reference).digest('hex')}`;
    }
    images.push({ digest, manifests: [{ image: reference, mediaType, digest, platform: { architecture: 'amd64', os: 'linux' } }] });
  }
  return { images, failure };
}

function pullFailure(reference: string): string {
  return `Failed to pull image "${reference}": rpc error: code = NotFound desc = failed to pull and unpack image "${reference}": not found (ErrImagePull)`;
}

/**
 * The direct load balancer's addresses: one per location and port, when it is enabled. No runtime
 * of Keel's serves them, so they are named under `.invalid`, which never resolves.
 */
function loadBalancers(spec: Record<string, any>, locations: string[], host: string): Array<{ origin: string; url: string }> {
  const direct = spec.loadBalancer?.direct;
  if (direct?.enabled !== true) return [];
  const ports = (direct.ports ?? []) as Array<{ externalPort: number; protocol?: string; scheme?: string }>;
  return locations.flatMap((location) =>
    ports.map((p) => ({ origin: location, url: `${p.scheme ?? String(p.protocol ?? 'tcp').toLowerCase()}://${host}.${location}.not-served.invalid:${p.externalPort}` })),
  );
}

/**
 * How many replicas a deployment runs: minScale, or, under a runtime that measures traffic and for
 * the concurrency or rps metric, what its traffic over the last scaleToZeroDelay asks for at
 * `target` a replica, within minScale and maxScale. At minScale 0 it wakes on a request, which
 * waits for a replica at most the workload's timeoutSeconds. See docs/runtime.md.
 */
function scale(runtime: Runtime, ref: DeploymentRef, spec: Record<string, any>, options: Record<string, any>): { count: number; wake?: Wake } {
  const scaling = (options.autoscaling ?? {}) as Record<string, unknown>;
  const min = Math.max(0, Number(scaling.minScale ?? 1));
  const metric = scaling.metric ?? 'concurrency';
  if (metric !== 'concurrency' && metric !== 'rps') return { count: min };
  const demand = runtime.demand?.(ref, Number(scaling.scaleToZeroDelay ?? 300) * 1000);
  if (!demand) return { count: min };
  const max = Math.max(min, Number(scaling.maxScale ?? min));
  const target = Number(scaling.target) > 0 ? Number(scaling.target) : 100;
  const count = Math.min(max, Math.max(min, Math.ceil((metric === 'rps' ? demand.rps : demand.concurrency) / target)));
  return { count, wake: min === 0 && max > 0 ? { spec, holdMs: Number(options.timeoutSeconds ?? 5) * 1000 } : undefined };
}

/** A location's options: its localOptions entry over the defaultOptions. */
function optionsAt(spec: Record<string, any>, location: string): Record<string, any> {
  const local = ((spec.localOptions ?? []) as Array<Record<string, any>>).find((o) => String(o.location ?? '').split('/').pop() === location);
  return { ...(spec.defaultOptions ?? {}), ...(local ?? {}) };
}

/** The containers of a version's replicas; `replicasReady`, when the runtime counts them, else all or none as `ready` says. */
function containersOf(spec: Record<string, any>, ready: boolean, replicas: number, replicasReady?: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const c of (spec.containers ?? []) as Array<Record<string, unknown>>) {
    out[String(c.name)] = {
      name: c.name,
      image: c.image,
      ready,
      message: ready ? 'Running' : 'ContainerCreating',
      resources: { replicas, replicasReady: replicasReady ?? (ready ? replicas : 0), cpu: millicores(c.cpu), memory: mebibytes(c.memory) },
    };
  }
  return out;
}

/** The status of each container in a run (the same for every container of the workload). */
export function runContainers(spec: Record<string, any>, ready: boolean, message: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const c of (spec.containers ?? []) as Array<Record<string, unknown>>) {
    out[String(c.name)] = { name: c.name, image: c.image, ready, message, resources: { replicas: 1, replicasReady: ready ? 1 : 0, cpu: millicores(c.cpu), memory: mebibytes(c.memory) } };
  }
  return out;
}

/** A CPU quantity ("50m", "0.5", "2") in millicores; the CLI's default when absent. */
function millicores(q: unknown): number {
  const text = String(q ?? '50m');
  const m = /^(\d+(?:\.\d+)?)(m?)$/.exec(text);
  if (!m) return 50;
  return Math.round(Number(m[1]) * (m[2] ? 1 : 1000));
}

const MEMORY_UNITS: Record<string, number> = { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };

/** A memory quantity ("128Mi", "1Gi", "500M") in MiB; the CLI's default when absent. */
function mebibytes(q: unknown): number {
  const text = String(q ?? '128Mi');
  const m = /^(\d+(?:\.\d+)?)([kMGT]i?|)$/.exec(text);
  if (!m || MEMORY_UNITS[m[2]] === undefined) return 128;
  return Math.round((Number(m[1]) * MEMORY_UNITS[m[2]]) / 2 ** 20);
}

/**
 * The runs of a cron workload in one location after this pass: one started for each time the
 * schedule fired since the last pass (at most historyLimit of them; concurrencyPolicy Forbid
 * skips a run while one is active, Replace removes the active one). `after` is when the schedule
 * fires next. The runtime says when a run ends (reconcileWorkload).
 */
function scheduledRuns(
  ctx: ReconcileContext,
  workload: string,
  version: number,
  spec: Record<string, any>,
  location: string,
  current: JobExecution[],
  scheduling: boolean,
  lastChecked: number,
): { executions: JobExecution[]; after?: number } {
  const executions = current.map((e) => ({ ...e }));
  const job = (spec.job ?? {}) as { schedule?: string; concurrencyPolicy?: string; historyLimit?: number };
  const history = Number(job.historyLimit ?? DEFAULT_HISTORY);
  let after: number | undefined;
  let schedule;
  try {
    schedule = parseSchedule(String(job.schedule ?? ''));
  } catch {
    schedule = undefined; // Checked on every write; a schedule stored before that check never fires.
  }
  if (schedule && scheduling) {
    const fired: number[] = [];
    for (let at = previousFire(schedule, ctx.now); at !== undefined && at > lastChecked && fired.length < history; at = previousFire(schedule, at - 1)) fired.unshift(at);
    for (const at of fired) {
      const active = executions.filter((e) => e.status === 'active' && !e.name.startsWith('command-'));
      if (active.length > 0 && job.concurrencyPolicy === 'Forbid') continue;
      if (job.concurrencyPolicy === 'Replace') for (const e of active) finish(e, 'removed', iso(ctx.now), 'Replaced by a newer scheduled run');
      const name = `${workload}-${Math.floor(at / 60_000)}`;
      if (executions.some((e) => e.name === name)) continue;
      executions.push({
        name,
        workloadVersion: version,
        status: 'active',
        startTime: iso(ctx.now),
        replica: runReplica(name),
        containers: runContainers(spec, true, 'Running'),
        conditions: [],
      });
    }
  }
  if (schedule && scheduling) {
    const next = nextFire(schedule, ctx.now);
    if (next !== undefined) after = Math.min(after ?? Infinity, next - ctx.now);
  }
  return { executions, after };
}

/** The runs a cron workload's deployment has going: each a replica that runs once. */
function runWants(spec: Record<string, any>, executions: JobExecution[]): ReplicaWant[] {
  return executions.filter((e) => e.status === 'active').map((e) => ({ name: e.replica, version: e.workloadVersion, spec, run: { since: Date.parse(e.startTime) } }));
}

/** Ends a run: its status, completion time, containers and the condition that says why. */
export function finish(e: JobExecution, status: 'successful' | 'failed' | 'removed', at: string, message?: string): void {
  e.status = status;
  e.completionTime = at;
  const text = message ?? (status === 'successful' ? 'Completed' : status === 'failed' ? 'Failed' : 'Removed');
  e.containers = Object.fromEntries(
    Object.entries(e.containers).map(([name, c]) => [name, { ...(c as Record<string, unknown>), ready: false, message: text, resources: { ...((c as { resources?: object }).resources ?? {}), replicasReady: 0 } }]),
  );
  e.conditions = [
    {
      type: status === 'successful' ? 'Complete' : 'Failed',
      status: 'True',
      lastDetectionTime: at,
      lastTransitionTime: at,
      ...(status === 'successful' ? {} : { reason: status === 'removed' ? 'Removed' : 'BackoffLimitExceeded', message: text }),
    },
  ];
}

/** Keeps every active run and the newest `history` finished ones, oldest first. */
export function trimHistory(executions: JobExecution[], history: number): JobExecution[] {
  const finished = executions.filter((e) => e.status !== 'active').sort((a, b) => (a.startTime < b.startTime ? -1 : a.startTime > b.startTime ? 1 : 0));
  const keep = new Set(finished.slice(Math.max(0, finished.length - history)));
  return executions.filter((e) => e.status === 'active' || keep.has(e));
}
