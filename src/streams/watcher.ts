import type { ServerResponse } from 'node:http';
import { PLATFORM_CONTEXT } from '../audit/events.js';
import type { Authorizer, ViewScope } from '../auth/authorizer.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { matchesQuery, type Query } from '../query/index.js';
import { withResolvedRemote } from '../reconcile/views.js';
import { parseLink } from '../resources/links.js';
import type { Store } from '../store/types.js';
import { CHANGE_ACTIONS, encoded, type ChainEvent, type FeedSubscriber, type OrgFeed } from './feed.js';
import type { HeldBytes, Holder } from './held.js';

/** What a watch is narrowed to, besides permission. */
export interface WatchFilter {
  kind?: string;
  gvc?: string;
  names?: Set<string>;
  query?: Query;
}

/** Events read from the store per statement, and the widest seq range one statement covers: both bound one read's time. */
const CHUNK = 100;
const SPAN = 5000;
/** How many Core API addresses an event keeps its resolved deployment bytes for. */
const RESOLVED_BASES_KEPT = 4;
/** Events handled between two turns of the event loop. */
const SLICE = 16;
/** How long an ended stream may take to hand its last bytes to a client that does not read. */
const END_WAIT_MS = 10_000;

export interface WatcherOptions {
  store: Store;
  auth: Authorizer;
  feed: OrgFeed;
  principal: Principal;
  filter: WatchFilter;
  /** The position after which events are sent. */
  from: number;
  /** Whether the principal could view some of what the filter follows when the watch opened. */
  viewing: boolean;
  out: ServerResponse;
  /** Keel's Core API as this client reached it: deployments' status.remote is resolved against it, as GET does. */
  base: string;
  /** Bytes written and not yet taken by the client above which nothing more is written until it takes them. */
  bufferBytes: number;
  /** How long a client may stay that far behind before the stream is cut. */
  behindMs: number;
  /** What every stream of the process holds, against one budget. */
  held: HeldBytes;
  /** Told once when the stream ends, for whatever reason. */
  onEnd(watcher: Watcher): void;
  /** Told of a failure that ended the stream (a store read, a permission check). */
  onError(err: unknown): void;
  /** Runs a chunk of a replay (reading stored history and sending it) in its turn among the server's long reads. */
  longRead<T>(read: () => Promise<T>): Promise<T>;
  /** Told when the watcher starts and stops reading history from the store. */
  onReplay(watcher: Watcher, replaying: boolean): void;
}

const yieldTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * One watch stream: a cursor over its org's chain that sends, in seq order and exactly once, the
 * change events its principal may view and its filter selects. It takes events from the org's
 * feed while they are in its ring, and from the store (in bounded chunks, narrowed in SQL to the
 * kinds and names the principal may view) when it is behind the ring.
 */
export class Watcher implements FeedSubscriber {
  /** Everything up to this seq has been considered (sent or skipped). */
  last: number;
  open = true;
  replaying = false;
  /** Held while its principal is being checked again: nothing is sent meanwhile. */
  paused = false;
  private pumping = false;
  private again = false;
  private scope?: Promise<Map<string, ViewScope>>;

  constructor(private readonly o: WatcherOptions) {
    this.last = o.from;
  }

  get principal(): Principal {
    return this.o.principal;
  }

  get viewing(): boolean {
    return this.o.viewing;
  }

  get kind(): string | undefined {
    return this.o.filter.kind;
  }

  get org(): string {
    return this.o.feed.org;
  }

  /** Sends what the feed has after the cursor; one pump at a time, again if woken meanwhile. */
  wake(): void {
    if (!this.open) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    this.again = false;
    this.run();
  }

  /** Holds the stream until resume() (permissions may have changed: see WatchHub). */
  pause(): void {
    this.paused = true;
    this.scope = undefined;
  }

  resume(): void {
    this.paused = false;
    this.wake();
  }

  /**
   * The pump. It runs synchronously while the next event is in the feed's ring and its decision is
   * known, so one change fanned out to thousands of streams costs each of them a write and no
   * promise; it continues after a promise when the decision must be made, the cursor is behind the
   * ring, or it has handled SLICE events in this turn.
   */
  private run(): void {
    let handled = 0;
    try {
      for (;;) {
        const feed = this.o.feed;
        while (this.open && !this.paused && this.last < feed.position) {
          // Too far ahead of the client: wait for it to take what it has (a client that reads falls
          // behind the ring at worst and is replayed from the store); only one that stays behind is cut.
          if (this.o.out.writableLength > this.o.bufferBytes) return this.continueAfter(this.drained());
          const next = feed.after(this.last);
          if (next === 'behind') return this.continueAfter(this.replayChunk());
          this.setReplaying(false);
          if (next === 'none') {
            this.last = feed.position;
            break;
          }
          const decided = this.wants(next);
          if (typeof decided !== 'boolean') return this.continueAfter(decided.then((wanted) => this.deliver(next, wanted)));
          this.deliver(next, decided);
          if (++handled === SLICE) return this.continueAfter(yieldTurn());
        }
        // Caught up (a replay's last chunk ends at the head): its replay slot is free for another.
        if (this.last >= this.o.feed.position) this.setReplaying(false);
        if (!this.again || !this.open) break;
        this.again = false;
      }
    } catch (err) {
      return this.fail(err);
    }
    this.pumping = false;
  }

  private continueAfter(step: Promise<unknown>): void {
    step.then(
      () => this.run(),
      (err) => this.fail(err),
    );
  }

  private fail(err: unknown): void {
    this.pumping = false;
    this.end();
    this.o.onError(err);
  }

  /** Sends the event if wanted and moves the cursor past it (unless the stream was held or ended meanwhile). */
  private deliver(event: ChainEvent, wanted: boolean): void {
    if (!this.open || this.paused) return;
    if (wanted) this.send(event);
    else this.last = event.seq;
  }

  /** Writes the event and moves the cursor past it; streams holding more than their share of the server's budget are cut. */
  private send(event: ChainEvent): void {
    this.o.out.write(this.text(event));
    this.last = event.seq;
    this.o.held.update(this.holder);
  }

  /** Since when the client has been too far behind (see drained), while it is. */
  private behindSince?: number;

  /** This stream as the server-wide budget sees it. */
  private readonly holder: Holder = {
    held: () => this.o.out.writableLength,
    behindSince: () => this.behindSince,
    cut: () => this.disconnect(this.last, 'slow_consumer', 'the server holds too much for clients that do not read (watchBufferTotalBytes); reconnect from this position'),
  };

  /** Sends a bookmark with the cursor's position, when no event is being sent. */
  bookmark(): void {
    if (!this.open || this.pumping || this.paused) return;
    this.o.out.write(`id: ${this.last}\nevent: bookmark\ndata: {"seq":${this.last}}\n\n`);
  }

  /** Ends the stream: the client sees it close (a revoked principal, a shutdown). */
  end(): void {
    if (!this.open) return;
    this.open = false;
    this.o.held.forget(this.holder);
    this.setReplaying(false);
    this.o.out.end();
    const socket = this.o.out.socket;
    // A client that does not read would hold the last bytes (and the socket) forever.
    if (socket && this.o.out.writableLength > 0) setTimeout(() => socket.destroy(), END_WAIT_MS).unref();
    this.o.onEnd(this);
  }

  /** Closes with a final event naming the position to resume from. */
  private disconnect(seq: number, reason: string, message: string): void {
    this.last = seq;
    this.o.out.write(`id: ${seq}\nevent: disconnect\ndata: ${JSON.stringify({ seq, reason, message })}\n\n`);
    this.end();
  }

  private setReplaying(replaying: boolean): void {
    if (this.replaying === replaying) return;
    this.replaying = replaying;
    this.o.onReplay(this, replaying);
  }

  /**
   * The next stored events after the cursor, for a watcher behind the ring. Only the kinds (and,
   * when a kind is granted by links only, the names) the principal may view are read at all.
   */
  private async replayChunk(): Promise<void> {
    this.setReplaying(true);
    if (this.o.out.writableLength > this.o.bufferBytes / 2) await this.drained();
    if (!this.open) return;
    const narrowed = await this.narrowing();
    if (!this.open || this.paused) return;
    // Nothing the principal may view is selected: nothing to read up to the feed.
    const through = narrowed ? Math.min(this.o.feed.position, this.last + SPAN) : this.o.feed.position;
    if (!narrowed) this.last = Math.max(this.last, through);
    // The read and the sending of what it read hold a long-read seat together: the scheduler then
    // counts what a replay really costs the request thread.
    else await this.o.longRead(() => this.sendChunk(narrowed, through));
    await yieldTurn();
  }

  /**
   * Reads the next stored events after the cursor up to `through` and sends those the stream wants,
   * SLICE at a time with a turn of the event loop between, so that no replay holds the request thread
   * for long. It stops early, for replayChunk to wait outside the seat, when its client has not taken
   * half the stream's bound: a client that reads slowly must not hold a long-read seat meanwhile.
   */
  private async sendChunk(narrowed: { resourceTypes: string[]; resourceNames?: string[] }, through: number): Promise<void> {
    // Ended (its client went away) or held while it waited for its seat: the seat is given back at once.
    if (!this.open || this.paused) return;
    const records = await this.o.store.audit({ org: this.org, context: PLATFORM_CONTEXT, afterSeq: this.last, throughSeq: through, limit: CHUNK, ...narrowed });
    let handled = 0;
    for (const record of records) {
      if (!this.open || this.paused || this.o.out.writableLength > this.o.bufferBytes / 2) return;
      if (++handled % SLICE === 0) {
        await yieldTurn();
        if (!this.open || this.paused) return;
      }
      if (CHANGE_ACTIONS.has(record.actionType) && this.passes(record.resourceType, record.resourceName)) {
        const event = this.o.feed.replayEvent(record);
        const decided = this.wants(event);
        const wanted = typeof decided === 'boolean' ? decided : await decided;
        if (!this.open || this.paused) return;
        if (wanted) {
          this.o.out.write(this.text(event));
          this.o.held.update(this.holder);
        }
      }
      this.last = record.seq;
    }
    if (records.length < CHUNK) this.last = Math.max(this.last, through);
  }

  /** The SQL narrowing of a replay: undefined when the principal may view nothing the filter selects. */
  private async narrowing(): Promise<{ resourceTypes: string[]; resourceNames?: string[] } | undefined> {
    const scopes = await (this.scope ??= this.o.auth.viewScope(this.o.principal, this.org));
    const { kind, names } = this.o.filter;
    const kinds = [...scopes.keys()].filter((k) => kind === undefined || k === kind);
    if (kinds.length === 0) return undefined;
    let resourceNames = names && [...names];
    // One kind granted only item by item: the names of those items narrow the read too.
    const only = kinds.length === 1 ? scopes.get(kinds[0])! : undefined;
    if (only && !only.all && !only.query) {
      const granted = [...only.links].map(parseLink).filter((t) => t?.kind === kinds[0] && (this.o.filter.gvc === undefined || t.gvc === this.o.filter.gvc)).map((t) => t!.name);
      resourceNames = resourceNames ? resourceNames.filter((n) => granted.includes(n)) : granted;
      if (resourceNames.length === 0) return undefined;
    }
    return { resourceTypes: kinds, ...(resourceNames ? { resourceNames } : {}) };
  }

  /**
   * Resolves once the client has taken what was written to it. One that has not within behindMs is
   * cut, told where to resume: as with the Kubernetes watch cache's per-watcher budget, how long a
   * client stays behind decides, not how much was written ahead of it at one moment, so a client
   * that keeps reading is never cut for a burst (at worst it falls behind the ring and is replayed
   * from the store).
   */
  private drained(): Promise<void> {
    this.behindSince ??= Date.now();
    return new Promise((resolve) => {
      const out = this.o.out;
      const settle = () => {
        clearTimeout(timer);
        out.off('drain', settle);
        out.off('close', settle);
        this.behindSince = undefined;
        resolve();
      };
      const timer = setTimeout(() => {
        settle();
        if (this.open) this.disconnect(this.last, 'slow_consumer', `the client stayed behind for ${this.o.behindMs} ms (watchBehindMs); reconnect from this position`);
      }, this.o.behindMs);
      out.once('drain', settle);
      out.once('close', settle);
    });
  }

  /** The filter's checks that need only the event's place. */
  private passes(kind: string, name: string): boolean {
    const f = this.o.filter;
    return (f.kind === undefined || f.kind === kind) && (f.names === undefined || f.names.has(name));
  }

  /**
   * Whether to send the event: its place first, then permission, and only then its content (the
   * query). A service account's decision is the same for all its streams (see ChainEvent.views),
   * so a change fanned out to thousands of them is decided once, without a promise.
   */
  private wants(event: ChainEvent): boolean | Promise<boolean> {
    const f = this.o.filter;
    if (!this.passes(event.kind, event.name) || (f.gvc !== undefined && event.gvc !== f.gvc)) return false;
    const principal = this.o.principal;
    if (principal.kind === 'user') return this.mayView(event).then((may) => may && this.matches(event));
    // The map is the event's at the time of asking: a decision made before an access change is not kept after it (see OrgFeed).
    const views: NonNullable<ChainEvent['views']> = (event.views ??= new Map());
    let may = views.get(principal.link);
    if (may === undefined) {
      may = this.mayView(event);
      views.set(principal.link, may);
      may.then(
        (decided) => views.set(principal.link, decided),
        () => views.delete(principal.link),
      );
    }
    return typeof may === 'boolean' ? may && this.matches(event) : may.then((decided) => decided && this.matches(event));
  }

  /** The event as this client gets it: shared by every watcher, but a deployment's status.remote is resolved for this one. */
  private text(event: ChainEvent): Buffer {
    if (event.kind !== 'deployment') return encoded(event);
    const byBase = (event.resolved ??= new Map());
    let bytes = byBase.get(this.o.base);
    if (bytes) return bytes;
    bytes = encoded({ ...event, object: withResolvedRemote(event.object, this.o.base), sse: undefined, resolved: undefined });
    // Clients reach Keel at a handful of addresses; a caller that varies its Host header must not
    // grow what every buffered event holds, so only the first few addresses are kept.
    if (byBase.size < RESOLVED_BASES_KEPT) byBase.set(this.o.base, bytes);
    return bytes;
  }

  private matches(event: ChainEvent): boolean {
    const query = this.o.filter.query;
    return query === undefined || matchesQuery(query, event.object, { gvc: event.gvc });
  }

  private async mayView(event: ChainEvent): Promise<boolean> {
    const def = findKind(event.kind);
    if (!def) return false;
    try {
      await this.o.auth.check(this.o.principal, 'view', def, { org: this.org, gvc: event.gvc, name: event.name, fields: () => event.object });
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.code === 'forbidden') return false;
      throw err;
    }
  }
}
