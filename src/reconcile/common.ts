// Shared pieces of Keel's reconcilers: the context a reconciler runs in, how status is written
// (body only, version and lastModified untouched, with a 'status' event on the change stream),
// and small helpers over stored items.
import type { AppendedEvent } from '../audit/changes.js';
import { changeEvent, KEEL_ACTOR } from '../audit/events.js';
import { findKind } from '../kinds/index.js';
import type { Resource } from '../kinds/types.js';
import { present } from '../resources/present.js';
import { listAll } from '../store/list-all.js';
import type { ItemKey, Store, StoredItem, Tx } from '../store/types.js';
import { deepEqual } from '../json.js';
import { stamp } from '../logs/time.js';
import { narrate } from './narrate.js';
import type { Runtime } from '../runtime/types.js';

export interface ReconcileContext {
  store: Store;
  tx: Tx;
  /** The wall clock of this pass (ms since the epoch): every transition of the pass uses it. */
  now: number;
  /** How long each simulated lifecycle step takes, in ms. */
  stepMs: number;
  /** Whether the transaction should append audit events (KEEL_AUDIT). */
  audit: boolean;
  /** The events the transaction appended, announced with the change once it commits. */
  appended: AppendedEvent[];
  /** Fault injection's one hook (KEEL_FAULTS=on): the failure message when `scenario` applies to this object now. */
  fault?: (scenario: string) => string | undefined;
  /** The host:port references to this Keel's own registry use. */
  registryHosts?: string[];
  /** The media type of a manifest the org's registry holds by that digest (undefined when it holds none). */
  registryManifest?: (org: string, digest: string) => Promise<{ mediaType: string } | undefined>;
  /** What runs the replicas (KEEL_RUNTIME), asked for their state on each pass; the simulation when absent. */
  runtime?: Runtime;
}

/** What a pass left to do: `after` ms until the next transition of the object is due. */
export interface Outcome {
  after?: number;
}

export const keyString = (k: ItemKey) => `${k.org}/${k.kind}/${k.gvc}/${k.name}`;



export const iso = (ms: number) => new Date(ms).toISOString();

/** Takes the next earliest due time. */
export function soonest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}

/**
 * Writes a new body of a kind's item as status (version and lastModified stay) and appends the
 * 'status' event that the change stream shows. `view` presents items that present() cannot
 * (deployments and commands, which live under their parent).
 */
export async function writeStatus(ctx: ReconcileContext, item: StoredItem, data: Record<string, unknown>, view?: (item: StoredItem) => Resource): Promise<void> {
  await ctx.tx.writeStatus(item, data);
  await recordStatus(ctx, { ...item, data }, view, 'status', item.data);
}

/**
 * Appends the 'status' (or other) event of a reconciler's write, and the log lines that tell of it
 * (see narrate.ts; `before` is the item's data before the write, absent for a new item); call it
 * last in the transaction's writes of this item.
 */
export async function recordStatus(ctx: ReconcileContext, item: StoredItem, view?: (item: StoredItem) => Resource, action = 'status', before?: Record<string, unknown>): Promise<void> {
  const told = narrate(item, action, before);
  if (told.length > 0) await ctx.tx.appendLogs(told.map(({ labels, line }) => ({ org: item.org, ts: stamp(ctx.now), labels, line })));
  if (!ctx.audit) return;
  const resource = view ? view(item) : present(findKind(item.kind)!, item);
  const event = changeEvent(item.org, KEEL_ACTOR, action, resource);
  await ctx.tx.appendAudit(event);
  ctx.appended.push({ event, resource });
}

/** The location names of a GVC's static placement. */
export function gvcLocations(gvc: StoredItem | undefined): string[] {
  const spec = (gvc?.data.spec ?? {}) as { staticPlacement?: { locationLinks?: string[] } };
  const links = spec.staticPlacement?.locationLinks ?? [];
  return [...new Set(links.map((l) => l.split('/').pop()!).filter(Boolean))];
}

export const gvcKey = (org: string, gvc: string): ItemKey => ({ org, kind: 'gvc', gvc: '', name: gvc });

/** Deletes the sub-resources (deployments, commands) stored under a parent that is gone. */
export async function deleteChildren(ctx: ReconcileContext, org: string, gvc: string, kind: string, prefix: string, view: (item: StoredItem) => Resource): Promise<void> {
  for (const child of await listAll(ctx.store, org, kind, gvc, prefix)) {
    await ctx.tx.delete(child);
    await recordStatus(ctx, child, view, 'delete');
  }
}
