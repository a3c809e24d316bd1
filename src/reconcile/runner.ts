// The reconciler runner: finds what changed and moves status along.
//
// Sources of work, all idempotent:
// - the change stream: each org's audit chain from the last processed seq, mapped to the objects
//   a change concerns. This process's own events come with the local 'change' emitter and are
//   taken from there at once; a poll reads the chain for the rest (other processes' changes);
// - timers: a pass that leaves a transition pending says when it is due;
// - a periodic scan of every reconciled kind (catches anything missed, e.g. after a restart).
//
// Each object is reconciled in one transaction that first takes a per-object lock
// (tx.tryLock: a PostgreSQL advisory lock; SQLite serializes transactions anyway) and then
// locks and re-reads the object. A busy lock means another Keel process is on it: the object is
// retried a step later. Every transition is computed from the stored state and the clock, and
// written only when the state differs, so several processes write each transition exactly once.
import { announce, changes, type AppendedEvent } from '../audit/changes.js';
import { PLATFORM_CONTEXT } from '../audit/events.js';
import { parseLink } from '../resources/links.js';
import type { AuditRecord, ItemKey, Store } from '../store/types.js';
import { onReplaced } from '../store/snapshots.js';
import { keyString, type Outcome, type ReconcileContext } from './common.js';
import { listAll } from '../store/list-all.js';
import { reconcileCommand } from './commands.js';
import { reconcileDomain, reconcileMk8s } from './others.js';
import { commandKey, type CommandParent } from './views.js';
import { reconcileVolumeset } from './volumesets.js';
import { reconcileWorkload } from './workloads.js';
import { SIMULATED } from '../runtime/simulated.js';
import type { Runtime } from '../runtime/types.js';

export interface RunnerOptions {
  /** Duration of one simulated lifecycle step, in ms. */
  stepMs: number;
  /** Record 'status' audit events (KEEL_AUDIT). */
  audit?: boolean;
  onError?: (err: unknown, key?: ItemKey) => void;
  /** Fault injection's scenarios (see ReconcileContext.fault). */
  faults?: (scenario: string, key: ItemKey) => string | undefined;
  /** The host:port references to this Keel's own registry use (beside `//image/…` and `ORG.registry.…`). */
  registryHosts?: () => string[];
  /** Whether the org's registry holds a manifest by that digest (see ReconcileContext.registryManifest). */
  registryManifest?: ReconcileContext['registryManifest'];
  /** What runs the replicas; the simulation when absent. */
  runtime?: Runtime;
}

type Reconciler = (ctx: ReconcileContext, key: ItemKey) => Promise<Outcome>;

const RECONCILERS: Record<string, Reconciler> = {
  volumeset: reconcileVolumeset,
  workload: reconcileWorkload,
  command: reconcileCommand,
  mk8s: reconcileMk8s,
  domain: reconcileDomain,
};
/** Kinds the periodic scan visits (commands only while they run: the scan filters them). */
const SCANNED = ['volumeset', 'workload', 'mk8s', 'domain', 'command'];
/** The kinds whose changes concern some reconciler. */
const ROUTED = ['command', 'volumeset', 'workload', 'gvc', 'mk8s', 'domain', 'image'];
const FOLLOW_PAGE = 500;
/** Events of this process kept for follow() per org, at most (past that, it reads them back). */
const APPENDED_KEPT = 10_000;
/** A wake-up (a local write) starts the next pass no sooner than this after the last one began. */
const WAKE_EVERY_MS = 10;
const ORGS_EVERY_MS = 2_000;

/** What routing needs of an event's resource: its link and snapshot. */
type Snapshot = { link?: string; data?: Record<string, unknown> };

/**
 * What routing needs of an event this process appended, kept until a pass takes it: not the event
 * itself, whose body (the largest part of a change) is garbage once the change commits.
 */
interface OwnEvent {
  event: Pick<AuditRecord, 'actionType' | 'resourceType' | 'resourceName'>;
  snapshot: Snapshot;
}

function ownEvent({ event, resource }: AppendedEvent): OwnEvent {
  return {
    event: { actionType: event.actionType, resourceType: event.resourceType, resourceName: event.resourceName },
    snapshot: { link: resource.links.find((l) => l.rel === 'self')?.href, data: resource },
  };
}

/** Whether `mine` holds every seq after `last` through `head`. */
function covers(mine: Map<number, OwnEvent>, last: number, head: number): boolean {
  if (head <= last || head - last > mine.size) return false;
  for (let seq = last + 1; seq <= head; seq++) if (!mine.has(seq)) return false;
  return true;
}

export class ReconcileRunner {
  /** The placement each GVC had in the last event seen, so other edits of it cost nothing. */
  private readonly placements = new Map<string, string>();
  private readonly lastSeq = new Map<string, number>();
  /** Events this process appended, by org and seq: follow() takes them from here rather than read them back. */
  private readonly appended = new Map<string, Map<number, OwnEvent>>();
  private readonly queue = new Map<string, ItemKey>();
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private stopped = false;
  private wakeUp: () => void = () => {};
  private loop?: Promise<void>;
  private readonly pollMs: number;
  private readonly runtime: Runtime;
  private readonly scanMs: number;
  private orgsCheckedAt = 0;
  private passStarted = 0;
  private scannedAt = 0;
  private followedAt = 0;
  /** Set when the stored state was replaced (a restore or reset): the next pass starts over from it. */
  private replaced = false;
  private stopFollowingReplacements: () => void = () => {};
  private readonly onChange = (org: string, appended?: AppendedEvent) => {
    // A write in this process to an org not followed yet (a new org): follow it from its start.
    if (!this.lastSeq.has(org)) this.lastSeq.set(org, 0);
    const seq = appended?.event.seq;
    if (seq !== undefined && seq > this.lastSeq.get(org)!) {
      let mine = this.appended.get(org);
      if (!mine) this.appended.set(org, (mine = new Map()));
      if (mine.size < APPENDED_KEPT) mine.set(seq, ownEvent(appended!));
    }
    this.wakeUp();
  };

  constructor(
    private readonly store: Store,
    private readonly options: RunnerOptions,
  ) {
    this.pollMs = Math.min(250, Math.max(10, options.stepMs));
    this.runtime = options.runtime ?? SIMULATED;
    // A replica that changed state (started, became ready, crashed) is its workload's business.
    this.runtime.onChange((d) => this.enqueue({ org: d.org, kind: 'workload', gvc: d.gvc, name: d.workload }));
    this.scanMs = Math.max(1_000, options.stepMs * 30);
  }

  /** Starts following every org from its current head, after one scan of what exists. */
  async start(): Promise<void> {
    for (const org of await this.store.auditOrgs()) this.lastSeq.set(org, (await this.store.auditHead(org)).seq);
    this.orgsCheckedAt = Date.now();
    changes.on('change', this.onChange);
    this.stopFollowingReplacements = onReplaced(this.store, () => {
      this.replaced = true;
      this.wakeUp();
    });
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    changes.off('change', this.onChange);
    this.stopFollowingReplacements();
    this.appended.clear();
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.wakeUp();
    await this.loop;
  }

  /** Asks for a pass over one object (also used by the sub-resource routes after a write). */
  enqueue(key: ItemKey): void {
    if (!RECONCILERS[key.kind]) return;
    this.queue.set(keyString(key), key);
    this.wakeUp();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      this.passStarted = Date.now();
      try {
        if (this.replaced) await this.startOver();
        const now = Date.now();
        if (now - this.orgsCheckedAt >= ORGS_EVERY_MS) await this.discoverOrgs();
        if (now - this.scannedAt >= this.scanMs) await this.scan();
        // Between polls, a pass takes only this process's own events; a poll reads the chain.
        if (now - this.followedAt >= this.pollMs) await this.follow();
        else await this.followOwn();
        await this.drain();
      } catch (err) {
        this.options.onError?.(err);
      }
      if (this.stopped) break;
      if (this.queue.size > 0) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.pollMs);
        // Under a stream of writes, each follow reads a few ms of events rather than one commit's.
        this.wakeUp = () => {
          clearTimeout(timer);
          this.wakeUp = () => {};
          setTimeout(resolve, this.stopped ? 0 : Math.max(0, this.passStarted + WAKE_EVERY_MS - Date.now()));
        };
      });
      this.wakeUp = () => {};
    }
  }

  /** Positions, timers and own events of the replaced state mean nothing now: follow each org from its head, after a scan. */
  private async startOver(): Promise<void> {
    this.replaced = false;
    this.appended.clear();
    this.placements.clear();
    this.queue.clear();
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.lastSeq.clear();
    for (const org of await this.store.auditOrgs()) this.lastSeq.set(org, (await this.store.auditHead(org)).seq);
    this.scannedAt = 0;
    // What runs or is served now may be gone from the new state (the scan finds only what exists).
    const held = this.runtime.held?.();
    for (const d of held?.deployments ?? []) this.enqueue({ org: d.org, kind: 'workload', gvc: d.gvc, name: d.workload });
    for (const d of held?.domains ?? []) this.enqueue({ org: d.org, kind: 'domain', gvc: '', name: d.name });
    for (const v of held?.volumeSets ?? []) this.enqueue({ org: v.org, kind: 'volumeset', gvc: v.gvc, name: v.name });
  }

  private async discoverOrgs(): Promise<void> {
    this.orgsCheckedAt = Date.now();
    // An org that appears after start is followed from its first event.
    for (const org of await this.store.auditOrgs()) if (!this.lastSeq.has(org)) this.lastSeq.set(org, 0);
  }

  private async scan(): Promise<void> {
    this.scannedAt = Date.now();
    for (const org of this.lastSeq.keys()) {
      for (const kind of SCANNED) {
        for (const item of await listAll(this.store, org, kind)) {
          if (kind === 'command' && !['pending', 'running'].includes(String(item.data.lifecycleStage))) continue;
          if ((kind === 'workload' || kind === 'volumeset' || kind === 'command') && !item.gvc) continue;
          this.enqueue(item);
        }
      }
    }
  }

  /**
   * Takes each org's new events (those of routed kinds only) and queues the objects they concern:
   * from this process's own appends when they cover every seq up to the head, else read back.
   */
  private async follow(): Promise<void> {
    this.followedAt = Date.now();
    for (const [org, last] of this.lastSeq) {
      const head = (await this.store.auditHead(org)).seq;
      const mine = this.appended.get(org);
      if (mine && covers(mine, last, head)) {
        for (let seq = last + 1; seq <= head; seq++) {
          const own = mine.get(seq)!;
          this.lastSeq.set(org, seq);
          if (ROUTED.includes(own.event.resourceType)) await this.route(org, own.event, own.snapshot);
        }
      } else {
        let after = last;
        while (after < head) {
          const events = await this.store.audit({ org, context: PLATFORM_CONTEXT, resourceTypes: ROUTED, afterSeq: after, throughSeq: head, limit: FOLLOW_PAGE });
          for (const event of events) {
            after = event.seq;
            this.lastSeq.set(org, after);
            await this.route(org, event, (JSON.parse(event.body) as { resource?: Snapshot }).resource);
          }
          if (events.length < FOLLOW_PAGE) after = head;
        }
      }
      if (mine) for (const seq of mine.keys()) if (seq <= head) mine.delete(seq);
      this.lastSeq.set(org, Math.max(head, last));
    }
  }

  /** Routes this process's own events that continue each org's followed chain without a gap. */
  private async followOwn(): Promise<void> {
    for (const [org, mine] of this.appended) {
      let seq = this.lastSeq.get(org) ?? 0;
      for (let next = mine.get(seq + 1); next; next = mine.get(seq + 1)) {
        mine.delete(++seq);
        this.lastSeq.set(org, seq);
        if (ROUTED.includes(next.event.resourceType)) await this.route(org, next.event, next.snapshot);
      }
    }
  }

  private async route(org: string, event: Pick<AuditRecord, 'actionType' | 'resourceType' | 'resourceName'>, resource: Snapshot | undefined): Promise<void> {
    if (!['create', 'edit', 'delete'].includes(event.actionType)) return;
    const link = resource?.link ?? '';
    const kind = event.resourceType;
    if (kind === 'command') {
      const m = /^\/org\/[^/]+\/gvc\/([^/]+)\/(workload|volumeset)\/([^/]+)\/-command\/([^/]+)$/.exec(link);
      if (m) this.enqueue(commandKey(org, m[1], m[2] as CommandParent, m[3], m[4]));
      return;
    }
    switch (kind) {
      case 'volumeset':
        this.enqueue({ org, kind, gvc: parseLink(link)?.gvc ?? '', name: event.resourceName });
        break;
      case 'workload': {
        const gvc = parseLink(link)?.gvc ?? '';
        this.enqueue({ org, kind, gvc, name: event.resourceName });
        // Volume sets follow the workloads that mount them.
        for (const v of await listAll(this.store, org, 'volumeset', gvc)) this.enqueue(v);
        break;
      }
      case 'gvc': {
        const key = `${org}/${event.resourceName}`;
        if (event.actionType === 'delete') {
          this.placements.delete(key);
          break;
        }
        // Only a change of placement concerns the GVC's workloads, volume sets and domains.
        const placement = JSON.stringify((resource?.data?.spec as { staticPlacement?: unknown } | undefined)?.staticPlacement ?? null);
        if (this.placements.get(key) === placement) break;
        this.placements.set(key, placement);
        for (const k of ['workload', 'volumeset']) for (const item of await listAll(this.store, org, k, event.resourceName)) this.enqueue(item);
        for (const d of await listAll(this.store, org, 'domain', '')) this.enqueue(d);
        break;
      }
      case 'mk8s':
      case 'domain':
        // A deleted domain's pass takes its routes off the ingress.
        if (event.actionType !== 'delete' || kind === 'domain') this.enqueue({ org, kind, gvc: '', name: event.resourceName });
        break;
      case 'image':
        // A pushed image may be the one a workload waits to pull.
        if (event.actionType !== 'delete') for (const w of await listAll(this.store, org, 'workload')) this.enqueue(w);
        break;
    }
  }

  private async drain(): Promise<void> {
    while (this.queue.size > 0 && !this.stopped) {
      const [id, key] = this.queue.entries().next().value as [string, ItemKey];
      this.queue.delete(id);
      await this.reconcile(key);
    }
  }

  private async reconcile(key: ItemKey): Promise<void> {
    const reconciler = RECONCILERS[key.kind];
    let outcome: Outcome | 'busy';
    let appended: AppendedEvent[] = [];
    try {
      outcome = await this.store.transaction(async (tx) => {
        if (!(await tx.tryLock(`keel-reconcile:${keyString(key)}`))) return 'busy' as const;
        const ctx: ReconcileContext = { store: this.store, tx, now: Date.now(), stepMs: this.options.stepMs, audit: this.options.audit ?? true, appended: [], registryHosts: this.options.registryHosts?.(), registryManifest: this.options.registryManifest, runtime: this.runtime };
        const faults = this.options.faults;
        if (faults) ctx.fault = (scenario) => faults(scenario, key);
        appended = ctx.appended;
        return reconciler(ctx, key);
      });
    } catch (err) {
      appended = [];
      this.options.onError?.(err, key);
      outcome = { after: this.options.stepMs * 5 };
    }
    if (outcome === 'busy') outcome = { after: this.options.stepMs };
    else if (key.kind === 'command') {
      // A command's effect changes its parent's status: let the parent's reconciler look again.
      const [parentKind, rest] = [key.name.slice(0, key.name.indexOf(':')), key.name.slice(key.name.indexOf(':') + 1)];
      this.enqueue({ org: key.org, kind: parentKind, gvc: key.gvc, name: rest.slice(0, rest.indexOf(':')) });
    }
    announce(this.store, key.org, appended);
    if (outcome.after !== undefined) this.schedule(key, Math.max(1, outcome.after));
  }

  private schedule(key: ItemKey, delay: number): void {
    if (this.stopped) return;
    const id = keyString(key);
    const at = Date.now() + delay;
    const existing = this.timers.get(id);
    if (existing && existing.at <= at) return;
    if (existing) clearTimeout(existing.timer);
    const timer = setTimeout(() => {
      this.timers.delete(id);
      this.enqueue(key);
    }, delay);
    timer.unref();
    this.timers.set(id, { at, timer });
  }
}
