// Rolling a deployment from one workload version to the next, as Kubernetes' deployment and
// stateful set controllers do: given the replicas that run (of any version) and the replicas the
// newest version wants, which to start and which to stop on this pass. It decides only; the runtime
// starts and stops, and asks again when a replica's readiness changes. Pure, so it is tested and
// reasoned about without a container.
import type { ReplicaWant } from './types.js';

/** A workload's spec.rolloutOptions, resolved against the number of replicas wanted. */
export interface Rollout {
  /** How many replicas may run beyond those wanted. */
  surge: number;
  /** How many of the wanted replicas may be unavailable. */
  unavailable: number;
  /** How long a ready replica must stay ready before it counts as available. */
  minReadyMs: number;
  /** Stateful only: start replica i+1 only once replica i is available (OrderedReady), or all at once. */
  ordered: boolean;
  /** How long a stopping replica's containers get between SIGTERM (after preStop) and SIGKILL. */
  graceMs: number;
}

/** The hosted default grace period, in seconds. */
export const DEFAULT_GRACE_SECONDS = 90;

/** A replica that runs now. */
export interface Running {
  name: string;
  version: number;
  ready: boolean;
  /** Since when it has been ready (ms), if it is. */
  readySince?: number;
}

export interface Plan {
  /** Wanted replicas to start now. */
  start: ReplicaWant[];
  /** Running replicas to stop now. */
  stop: string[];
  /** In ms from now: when a replica becomes available by minReadySeconds alone (look again then). */
  after?: number;
}

/** `spec.rolloutOptions` for `wanted` replicas: numbers or percentages as Kubernetes reads them (surge rounds up, unavailable down). */
export function rolloutOf(spec: Record<string, any>, wanted: number): Rollout {
  const o = (spec.rolloutOptions ?? {}) as Record<string, any>;
  const surge = amount(o.maxSurgeReplicas ?? DEFAULT_SHARE, wanted, Math.ceil);
  let unavailable = amount(o.maxUnavailableReplicas ?? DEFAULT_SHARE, wanted, Math.floor);
  // With neither surge nor unavailability a rollout would never move; a stateful replica keeps its
  // name, so it cannot surge at all and is replaced one (or more) at a time.
  if (unavailable === 0 && (surge === 0 || spec.type === 'stateful')) unavailable = 1;
  const grace = Number.isInteger(o.terminationGracePeriodSeconds) ? o.terminationGracePeriodSeconds : DEFAULT_GRACE_SECONDS;
  return {
    surge,
    unavailable,
    minReadyMs: (Number.isInteger(o.minReadySeconds) ? o.minReadySeconds : 0) * 1000,
    ordered: spec.type === 'stateful' && o.scalingPolicy !== 'Parallel',
    graceMs: grace * 1000,
  };
}

/** Kubernetes' default for both maxSurge and maxUnavailable. */
const DEFAULT_SHARE = '25%';

function amount(value: unknown, of: number, round: (n: number) => number): number {
  const text = String(value).trim();
  const percent = /^(\d{1,3})%$/.exec(text);
  if (percent) return round((of * Math.min(100, Number(percent[1]))) / 100);
  return /^\d{1,6}$/.test(text) ? Number(text) : amount(DEFAULT_SHARE, of, round);
}

/**
 * What to start and stop this pass. Replicas of the newest version are those in `want` (by name and
 * version); every other running replica is old. A deployment with nothing old just runs what it
 * wants; otherwise the newest version surges up to `surge` beyond the wanted count and the old
 * replicas go only while at least `want.length - unavailable` replicas stay available, so a new
 * version that never becomes ready leaves the old ones serving. A stateful replica keeps its name
 * across versions, so it cannot surge: it is replaced in place (in both `stop` and `start`), the
 * highest ordinal first, while the availability floor allows.
 */
export function plan(running: Running[], want: ReplicaWant[], rollout: Rollout, now: number): Plan {
  const wanted = new Map(want.map((w) => [w.name, w]));
  const isNew = (r: Running) => wanted.get(r.name)?.version === r.version;
  const available = (r: Running) => r.ready && r.readySince !== undefined && now - r.readySince >= rollout.minReadyMs;
  let after: number | undefined;
  for (const r of running) if (r.ready && r.readySince !== undefined && !available(r)) after = Math.min(after ?? Infinity, rollout.minReadyMs - (now - r.readySince));
  const old = running.filter((r) => !isNew(r)).sort((a, b) => b.name.localeCompare(a.name, undefined, { numeric: true }));
  const byName = new Map(running.map((r) => [r.name, r]));
  const missing = want.filter((w) => !byName.has(w.name));
  const start: ReplicaWant[] = [];
  const stop: string[] = [];
  if (old.length === 0) {
    if (!rollout.ordered) return { start: missing, stop, after };
    // OrderedReady: one at a time, each once every lower ordinal is available.
    for (const w of want) {
      const r = byName.get(w.name);
      if (!r) start.push(w);
      if (!r || !available(r)) break;
    }
    return { start, stop, after };
  }
  // Old replicas that are not ready serve nothing: they go at once.
  let spare = running.filter(available).length - (want.length - rollout.unavailable);
  for (const r of old) {
    const replacing = wanted.get(r.name);
    // A ready one still serves: it goes only once available and while the floor allows.
    if (r.ready) {
      if (!available(r) || spare <= 0) continue;
      spare--;
    }
    stop.push(r.name);
    if (replacing) start.push(replacing);
  }
  // New replicas within the surge; under OrderedReady, one at a time.
  let room = want.length + rollout.surge - (running.length - stop.length + start.length);
  for (const w of missing) {
    if (room <= 0 || (rollout.ordered && start.length > 0)) break;
    start.push(w);
    room--;
  }
  return { start, stop, after };
}

/** Everything at once: what is not wanted stops, what is wanted and missing (or of another version) starts. */
export function replaceAll(running: Running[], want: ReplicaWant[]): Plan {
  const wanted = new Map(want.map((w) => [w.name, w]));
  const byName = new Map(running.map((r) => [r.name, r]));
  return {
    stop: running.filter((r) => wanted.get(r.name)?.version !== r.version).map((r) => r.name),
    start: want.filter((w) => byName.get(w.name)?.version !== w.version),
  };
}

/** Waits for `work`, at most `ms`, and once `hurried` resolves at most `hurryMs` more. */
export function within(work: Promise<unknown>, ms: number, hurried: Promise<void>, hurryMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let hurryTimer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.then(() => undefined, () => undefined),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
    hurried.then(() => new Promise<void>((resolve) => (hurryTimer = setTimeout(resolve, hurryMs)))),
  ]).finally(() => {
    clearTimeout(timer);
    clearTimeout(hurryTimer);
  });
}
