import { changes, type AppendedEvent } from '../audit/changes.js';
import { PLATFORM_CONTEXT } from '../audit/events.js';
import { Coalesced } from '../coalesced.js';
import { parseLink } from '../resources/links.js';
import { ACCESS_KINDS } from '../store/access-kinds.js';
import type { AuditRecord, Store } from '../store/types.js';

/** Actions that change an item (others, such as a secret's reveal, are not watch events). */
export const CHANGE_ACTIONS = new Set(['create', 'edit', 'delete', 'status']);

const POLL_MS = 250; // how soon changes made by other Keel processes arrive
const READ_BATCH = 500;
/** Recent events kept in memory, at most so many and so large (their stored bodies): a watcher behind them reads the store instead (see Watcher). */
const RING = 2048;
export const RING_BYTES = 16 * 1024 * 1024;
/**
 * Events read back from the store for replays, kept by seq up to this many bytes of their stored
 * bodies: streams replaying one stretch of history (a swarm reconnecting from 0) parse and encode each
 * event once between them, not once each.
 */
const REPLAYED_BYTES = 16 * 1024 * 1024;
/** Watchers woken per turn of the event loop (thousands share one feed). */
const WAKE_SLICE = 250;

/** A change as watchers see it: parsed once per process, encoded once for every watcher that may see it. */
export interface ChainEvent {
  seq: number;
  kind: string;
  name: string;
  action: string;
  gvc?: string;
  /** The resource as the change left it (its response body). */
  object: Record<string, unknown>;
  /** The size of its stored body: what holding it in memory costs, about (parsed and encoded, a few times more). */
  bytes: number;
  /** The server-sent event's bytes, made once and written as they are to every stream that sends it. */
  sse?: Buffer;
  /** A deployment's bytes with status.remote resolved, by the Core API address its streams reached Keel at. */
  resolved?: Map<string, Buffer>;
  /**
   * Service accounts' view decisions on this event, by link: made once however many streams they
   * hold (the pending decision is shared too, so streams woken together ask once).
   */
  views?: Map<string, boolean | Promise<boolean>>;
}

export function chainEvent(record: Pick<AuditRecord, 'seq' | 'resourceType' | 'resourceName' | 'actionType' | 'body'>): ChainEvent {
  const body = JSON.parse(record.body) as { resource: { link?: string; data?: Record<string, unknown> } };
  const link = body.resource.link ? parseLink(body.resource.link) : undefined;
  return { seq: record.seq, kind: record.resourceType, name: record.resourceName, action: record.actionType, gvc: link?.gvc, object: body.resource.data ?? {}, bytes: record.body.length };
}

/** The event as one server-sent event, made once. */
export function encoded(event: ChainEvent): Buffer {
  return (event.sse ??= Buffer.from(`id: ${event.seq}\nevent: ${event.action}\ndata: ${JSON.stringify({ type: event.action, seq: event.seq, kind: event.kind, object: event.object })}\n\n`));
}

export interface FeedSubscriber {
  /** Called (synchronously, cheaply) when the feed's position moved. */
  wake(): void;
}

export interface FeedHooks {
  onError(err: unknown): void;
  /** Events of ACCESS_KINDS arrived (permissions may have changed): told before any watcher is woken. */
  onAccess(org: string, events: ChainEvent[]): void;
}

/**
 * Follows one org's audit chain for every watcher of the org in this process: one reader, woken by
 * this process's commits and polling for other processes', keeping the latest change events in a
 * ring. Watchers are cursors over it (see Watcher), so a change is read and parsed once however
 * many watch it.
 */
export class OrgFeed {
  /** Seq of the last event read: the ring holds every change event in (base, position]. */
  position: number;
  private base: number;
  private readonly ring: ChainEvent[] = [];
  private ringBytes = 0;
  /** Events replays read from the store, oldest kept first out (see REPLAYED_BYTES). */
  private readonly replayed = new Map<number, ChainEvent>();
  private replayedBytes = 0;
  readonly subscribers = new Set<FeedSubscriber>();
  private readonly reader: Coalesced;
  private readonly timer: NodeJS.Timeout;
  private readonly onChange = (org: string, appended?: AppendedEvent) => {
    if (org !== this.org) return;
    const event = appended?.event;
    // This process's own write, next in the chain: taken as it is instead of read back.
    if (event?.seq === this.position + 1 && event.context === PLATFORM_CONTEXT && !this.reader.running) {
      this.append([{ ...event, seq: event.seq }], event.seq);
      return;
    }
    void this.read();
  };

  constructor(
    private readonly store: Store,
    readonly org: string,
    head: number,
    private readonly hooks: FeedHooks,
  ) {
    this.position = head;
    this.base = head;
    this.reader = new Coalesced(() => this.readBatch(), { onError: (err) => hooks.onError(err), goOn: () => this.subscribers.size > 0 });
    changes.on('change', this.onChange);
    this.timer = setInterval(() => void this.read(), POLL_MS);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    changes.off('change', this.onChange);
  }

  /**
   * The first change event after `seq`: 'behind' when the ring no longer (or never did) hold the
   * events after it, 'none' when the feed has none after it yet.
   */
  after(seq: number): ChainEvent | 'behind' | 'none' {
    if (seq < this.base) return 'behind';
    const ring = this.ring;
    let lo = 0;
    let hi = ring.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (ring[mid].seq <= seq) lo = mid + 1;
      else hi = mid;
    }
    return lo < ring.length ? ring[lo] : 'none';
  }

  /** A stored event as replays send it: made once for every stream that replays it while it is kept. */
  replayEvent(record: Pick<AuditRecord, 'seq' | 'resourceType' | 'resourceName' | 'actionType' | 'body'>): ChainEvent {
    let event = this.replayed.get(record.seq);
    if (event) return event;
    event = chainEvent(record);
    this.replayed.set(record.seq, event);
    this.replayedBytes += event.bytes;
    for (const [seq, old] of this.replayed) {
      if (this.replayedBytes <= REPLAYED_BYTES) break;
      this.replayed.delete(seq);
      this.replayedBytes -= old.bytes;
    }
    return event;
  }

  /** Reads what the chain holds after the position; one read at a time, again if woken meanwhile. */
  read(): Promise<void> {
    return this.reader.run();
  }

  /** One batch of the chain after the position: true when it was full (read on at once). */
  private async readBatch(): Promise<boolean> {
    const records = await this.store.audit({ org: this.org, context: PLATFORM_CONTEXT, afterSeq: this.position, limit: READ_BATCH });
    if (records.length) this.append(records, records[records.length - 1].seq);
    return records.length === READ_BATCH;
  }

  private append(records: ReadonlyArray<Pick<AuditRecord, 'seq' | 'resourceType' | 'resourceName' | 'actionType' | 'body'>>, through: number): void {
    const access: ChainEvent[] = [];
    for (const record of records) {
      if (!CHANGE_ACTIONS.has(record.actionType)) continue;
      const event = chainEvent(record);
      this.ring.push(event);
      this.ringBytes += event.bytes;
      if (ACCESS_KINDS.has(event.kind)) access.push(event);
    }
    let drop = 0;
    for (let bytes = this.ringBytes; drop < this.ring.length - 1 && (this.ring.length - drop > RING || bytes > RING_BYTES); drop++) bytes -= this.ring[drop].bytes;
    if (drop > 0) {
      const dropped = this.ring.splice(0, drop);
      for (const event of dropped) this.ringBytes -= event.bytes;
      this.base = dropped[dropped.length - 1].seq;
    }
    this.position = through;
    if (access.length) {
      // Decisions made before the change are not reused after it.
      for (const event of this.ring) event.views = undefined;
      for (const event of this.replayed.values()) event.views = undefined;
      this.hooks.onAccess(this.org, access);
    }
    const all = [...this.subscribers];
    let next = 0;
    const wakeSome = () => {
      const end = Math.min(all.length, next + WAKE_SLICE);
      for (; next < end; next++) all[next].wake();
      if (next < all.length) setImmediate(wakeSome);
    };
    wakeSome();
  }
}
