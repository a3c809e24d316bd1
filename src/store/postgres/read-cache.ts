import pg from 'pg';
import { fromRow, itemKeyString, RESOURCE_COLUMNS, type ResourceRow } from '../rows.js';
import { ACCESS_KINDS } from '../access-kinds.js';
import { position, prepared } from './statements.js';
import { FORGET_EXPIRED, RELEASE, RENEW } from './leases.js';
import type { AccessFeed, AtPosition, ItemKey, ListRequest, StoredItem } from '../types.js';

/** More changes than this since the cache's position: dropping everything is cheaper than applying them. */
const CATCH_UP_LIMIT = 5000;
/** Orgs whose chain position each catch-up reads at most. */
const TRACKED_ORGS = 1000;
/** Changes the feed table keeps behind the newest; a cache further behind starts again from nothing. */
const KEEP_CHANGES = 100_000;
const PRUNE_EVERY_MS = 10_000;
/**
 * What an entry is taken to cost beyond its data's JSON text: the key strings, the item object and
 * the map's slot. Measured (bench/read-cache.ts): a held item, with the presented resource and
 * JSON that GETs hang on it, takes about ENTRY_FACTOR times its data's text.
 */
const ENTRY_OVERHEAD = 1800;
const ENTRY_FACTOR = 4;
/** One list scope may take at most this share of the bound; a larger one is listed by the database. */
const SCOPE_SHARE = 4;
/** How long a scope found too large to hold is listed by the database before it is tried again. */
const OVERSIZED_MS = 30_000;
/** A lease is renewed this many times in its length: one late renewal does not end it. */
const RENEWALS_PER_LEASE = 3;
/** How much sooner than the database a process takes its lease to run out (clocks' rates differ a little). */
const LEASE_MARGIN_MS = 100;

/**
 * The position (keel_cache_epoch.n), how far the feed was pruned, the changes after `$1` (one more
 * than CATCH_UP_LIMIT at most: that one only says there are too many), the chain heads of the orgs
 * in `$2` and which of those orgs have events not yet chained, from one statement's snapshot: once
 * they are applied the cache holds exactly what the database held at that position.
 */
const CATCH_UP = `SELECT e.n, e.pruned, c.n AS change, c.org, c.kind, c.gvc, c.name,
  (SELECT json_object_agg(org, last_seq) FROM audit_heads WHERE org = ANY($2)) AS heads,
  (SELECT array_agg(DISTINCT org) FROM audit_pending WHERE org = ANY($2)) AS busy
  FROM keel_cache_epoch e LEFT JOIN LATERAL (SELECT * FROM keel_cache_changes WHERE n > $1 ORDER BY n LIMIT ${CATCH_UP_LIMIT + 1}) c ON true`;
/**
 * Just the position: what a catch-up reads first when it knows every tracked org's head. Unmoved,
 * it proves the items and heads held still hold: every item change, and every event that a seal
 * could chain, took a position when it committed (migrations 15 to 17). The cheapest statement
 * there is; most catch-ups under a read load are this one.
 */
const POSITION = { ...prepared('SELECT n FROM keel_cache_epoch', []), rowMode: 'array' } as const;
const SCOPE_COLUMNS = RESOURCE_COLUMNS.replace('r.data', 'r.data::text AS data');
/**
 * Every item of a list scope (`$3` NULL: of every GVC), at most `$4` of them, with the position and
 * the org's chain position (see PostgresStore.readAt) of the statement's snapshot.
 */
const LOAD_SCOPE = `SELECT e.n AS keel_cache_n, ${position('$1')}, r.* FROM keel_cache_epoch e
  LEFT JOIN LATERAL (SELECT ${SCOPE_COLUMNS} FROM resources r WHERE r.org = $1 AND r.kind = $2 AND ($3::text IS NULL OR r.gvc = $3) LIMIT $4) r ON true`;
/**
 * The items of a list scope changed after position `$4` (their rows, or NULLs for those gone), with
 * the position, how far the feed was pruned and the org's chain position, from one snapshot. A
 * change naming no item (a TRUNCATE) comes as keel_whole.
 */
const REFRESH_SCOPE = `SELECT e.n AS keel_cache_n, e.pruned AS keel_pruned, ${position('$1')}, c.gvc AS keel_gvc, c.name AS keel_name, c.whole AS keel_whole, ${SCOPE_COLUMNS}
  FROM keel_cache_epoch e
  LEFT JOIN LATERAL (SELECT DISTINCT c.gvc, c.name, c.org IS NULL AS whole FROM keel_cache_changes c
    WHERE c.n > $4 AND (c.org IS NULL OR (c.org = $1 AND c.kind = $2 AND ($3::text IS NULL OR c.gvc = $3)))) c ON true
  LEFT JOIN resources r ON r.org = $1 AND r.kind = $2 AND r.gvc = c.gvc AND r.name = c.name`;
/** An item (or NULLs) and the position it was read at. Its data as text: its length sizes the entry. */
const LOAD_ITEM = `SELECT e.n AS keel_cache_n, ${RESOURCE_COLUMNS.replace('r.data', 'r.data::text AS data')} FROM keel_cache_epoch e
  LEFT JOIN resources r ON r.org = $1 AND r.kind = $2 AND r.gvc = $3 AND r.name = $4`;

interface CatchUpRow {
  n: string;
  heads: Record<string, number | string> | null;
  busy: string[] | null;
  pruned: string;
  change: string | null;
  org: string | null;
  kind: string | null;
  gvc: string | null;
  name: string | null;
}

/** An item and its org's chain position as read from the database, with the cache position of that read and the size of its data. */
export interface ReadAt extends AtPosition<StoredItem | undefined> {
  at: number;
  size: number;
}

/** A held item (null: known absent), the position it was read at, and what it is taken to cost. */
interface Entry {
  item: StoredItem | null;
  at: number;
  bytes: number;
}

/**
 * Every item of one list scope (an org's items of a kind in one GVC, or in all of them) as of
 * position `at`, and the latest change to the scope a catch-up reported: while that is after `at`,
 * the items are read again (only those changed since `at`) before a list is answered from them.
 */
interface Scope {
  org: string;
  kind: string;
  gvc: string | undefined;
  /** By `gvc NUL name`. */
  items: Map<string, { item: StoredItem; bytes: number }>;
  /** -1 until the first load has been applied. */
  at: number;
  seen: number;
  bytes: number;
  /** The items as a list (rebuilt after a change). */
  list?: StoredItem[];
  /** A read of the scope under way, and the tick it was sent at: a list that arrived before that may share it. */
  reading?: { sent: number; done: Promise<ScopeRead | undefined> };
}

/** A scope's items as one statement read them, and the org's chain position then (undefined: not exact). */
interface ScopeRead {
  items: readonly StoredItem[];
  seq: number | undefined;
}

interface ScopeRow extends ResourceRow {
  keel_cache_n: string;
  keel_seq: string | null;
  keel_pending: string[] | null;
  data: string;
}

const scopeId = (org: string, kind: string, gvc: string | undefined) => `\u0001${org}\u0000${kind}\u0000${gvc ?? '\u0001'}`;
const placeOf = (item: { gvc: string; name: string }) => `${item.gvc}\u0000${item.name}`;
const isScope = (held: Entry | Scope | undefined): held is Scope => held !== undefined && 'items' in held;
const sizeOf = (text: string) => ENTRY_OVERHEAD + ENTRY_FACTOR * text.length;
/** A row's org chain position, if it names exactly what the statement read (no event of the org pending then). */
const exactSeq = (row: { keel_seq: string | null; keel_pending: string[] | null }) => (row.keel_pending === null ? Number(row.keel_seq ?? 0) : undefined);

/**
 * Items of this process, served from memory but only at a position no older than the database's
 * when the read began (DESIGN.md, "Read cache on PostgreSQL"). Each read first joins a catch-up: a
 * statement sent after the read arrived (one for every read that arrived while the one before was
 * under way) that returns the database's position and the items changed since the cache's, which
 * are dropped; an entry still held afterwards is the database's state at that position. Nothing
 * depends on a notice arriving: a cut connection or a restarted database only makes catch-ups
 * fail, and a read whose catch-up failed goes to the database while the cache starts again empty.
 * Entries are loaded on a miss and bounded by their estimated size, the least recently read
 * dropped first. Held items are shared between reads, as the SQLite store's are: callers must not
 * change them. The same catch-up tells access listeners which orgs' access-bearing items or keys
 * changed (all orgs when it cannot tell), before the reads waiting on it go on (AccessFeed).
 *
 * With a read lease (lease()), reads skip the catch-up: the process tells the database how far it
 * has applied the feed and until when it answers from memory, hears each change as a notice and
 * catches up at once, and every writer waits for it before answering (leases.ts). It answers from
 * memory only while its own count of the lease, started before it asked, runs, and only with state
 * from a catch-up sent after that lease was committed: a writer that did not see the lease then
 * committed before that catch-up's snapshot, so the catch-up holds its change. A lost connection
 * ends the lease at once; the reads then catch up as without one.
 */
export class ReadCache implements AccessFeed {
  /** Items by itemKeyString and list scopes by scopeId, in one eviction order. */
  private readonly entries = new Map<string, Entry | Scope>();
  /** Scopes found too large to hold, and until when lists of them go to the database. */
  private readonly oversized = new Map<string, number>();
  /** Counts list arrivals and scope reads sent, to know which read was sent after a list arrived. */
  private ticks = 0;
  private bytes = 0;
  /** The position whose state the entries are (or a later one); -1 before the first catch-up and after a failed one. */
  private applied = -1;
  /** Orgs whose chain position catch-ups read (those getAt was asked about). */
  private readonly tracked = new Set<string>();
  private trackedArray: string[] = [];
  /** Each tracked org's chain position at `applied`, unless events of it were still pending then. */
  private heads = new Map<string, number>();
  /** A catch-up is under way or about to be sent. */
  private running = false;
  /** Reads waiting for the next catch-up. */
  private waiting: Array<(ok: boolean) => void> = [];
  /**
   * The connection catch-ups run on, one at a time: its own, so a catch-up waits for no pool and
   * costs no checkout; opened by the first and again after one it failed on.
   */
  private link?: pg.Client;
  /** After close(): a catch-up already scheduled fails rather than open a connection again. */
  private closed = false;
  private readonly pruner: NodeJS.Timeout;
  /** Catch-ups sent so far, and the number of the one that took the cache to `applied` (see mark()). */
  private sent = 0;
  private provenBy = 0;
  private readonly listeners = new Set<(org: string | undefined) => void>();
  private lease?: { id: string; schema: string; ms: number; timer: NodeJS.Timeout };
  /** performance.now() until which reads are answered from memory with no catch-up. */
  private leasedUntil = 0;
  /** When the last renewal that committed on the current connection was sent (performance.now()). */
  private renewedAt?: number;
  /** The position the lease last reported as applied. */
  private reported = -1;
  /** A read has asked (a process that only writes holds no lease), a renewal is due, a change was heard. */
  private reading = false;
  private renewDue = false;
  private changeHeard = false;

  constructor(
    private readonly pool: pg.Pool,
    /** Estimated bytes held at most; 0 turns the cache off. */
    private readonly capacity: number,
  ) {
    // The feed serves authentication too: pruned even when no item is held.
    this.pruner = setInterval(() => void this.prune().catch(() => {}), PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  /** Entries (items and list scopes) held and their estimated bytes (for measurement). */
  get usage(): { entries: number; bytes: number; scopes: number } {
    let scopes = 0;
    for (const held of this.entries.values()) if (isScope(held)) scopes++;
    return { entries: this.entries.size, bytes: this.bytes, scopes };
  }

  mark(): number {
    return this.sent;
  }

  caughtUp(mark?: number): boolean | Promise<boolean> {
    return this.leased() || (mark !== undefined && this.proven(mark)) || this.current();
  }

  /**
   * Holds a read lease of `ms` milliseconds as `id` on the schema's change feed from the first read
   * on, renewed a few times within its length (see the class comment). Called once, after the
   * store has opened.
   */
  holdLease(id: string, schema: string, ms: number): void {
    if (this.capacity <= 0 || ms <= 0) return;
    const timer = setInterval(() => {
      if (!this.reading || this.closed) return;
      this.renewDue = true;
      this.schedule();
    }, Math.max(1, Math.floor(ms / RENEWALS_PER_LEASE)));
    timer.unref();
    this.lease = { id, schema, ms, timer };
  }

  /** Reads may be answered from memory now: the lease holds, and every tracked org's head is known. */
  private leased(): boolean {
    if (!this.lease) return false;
    if (!this.reading) this.reading = this.renewDue = true; // the first read takes the lease
    return this.leasedUntil > performance.now() && this.heads.size === this.tracked.size;
  }

  onAccess(listener: (org: string | undefined) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** Whether the state held was taken to by a catch-up sent after `mark` was taken. */
  private proven(mark: number): boolean {
    return this.leased() || (this.applied >= 0 && this.provenBy > mark);
  }

  /** `mark`: when the read began (see AccessFeed.mark); a catch-up sent since then serves it. */
  async get(key: ItemKey, load: () => Promise<StoredItem | undefined>, mark?: number): Promise<StoredItem | undefined> {
    if (this.capacity <= 0 || !(await this.caughtUp(mark))) return load();
    const held = this.touch(itemKeyString(key)) as Entry | undefined;
    if (held) return held.item ?? undefined;
    return (await this.loadEntry(key)).item ?? undefined;
  }

  /**
   * get() with the org's chain position (Store.getAt): from memory when the last catch-up found
   * none of the org's events pending, so the head it read names exactly the state held; an entry
   * read at a later position than that one is not named by it, and is read again. Answered at once,
   * with no promise, when the request's catch-up has been applied and the item is held.
   */
  getAt(key: ItemKey, load: (key: ItemKey) => Promise<ReadAt>, mark?: number): AtPosition<StoredItem | undefined> | Promise<AtPosition<StoredItem | undefined>> {
    if (this.capacity <= 0) return load(key);
    this.track(key.org);
    const held = mark !== undefined && this.proven(mark) ? this.heldAt(key) : undefined;
    return held ?? this.getAtCaughtUp(key, load, mark);
  }

  private async getAtCaughtUp(key: ItemKey, load: (key: ItemKey) => Promise<ReadAt>, mark?: number): Promise<AtPosition<StoredItem | undefined>> {
    if (!(await this.caughtUp(mark))) return load(key);
    const held = this.heldAt(key);
    if (held) return held;
    // The database's answer names its own position exactly; the item is kept for the next read.
    const read = await load(key);
    this.keep(itemKeyString(key), { item: read.value ?? null, at: read.at, bytes: ENTRY_OVERHEAD + ENTRY_FACTOR * read.size });
    return { value: read.value, seq: read.seq };
  }

  /** The item as held at the cache's position, with its org's chain position there, if both are known. */
  private heldAt(key: ItemKey): AtPosition<StoredItem | undefined> | undefined {
    const seq = this.heads.get(key.org);
    if (seq === undefined) return undefined;
    const held = this.touch(itemKeyString(key)) as Entry | undefined;
    return held && held.at <= this.applied ? { value: held.item ?? undefined, seq } : undefined;
  }

  /**
   * A list (Store.listAt) from the scope's items when the request can be decided in memory
   * (request.memory), at a position no older than the database's when the list began, like getAt.
   * The scope is loaded whole on its first list and then kept current: a list after a change to it
   * first reads the items changed since (one statement, which also names the org's chain position).
   * Lists of a scope too large for its share of the bound, and lists whose position cannot be named
   * exactly (events of the org not yet chained), are read by `load` from the database.
   */
  async listAt(request: ListRequest, load: () => Promise<AtPosition<StoredItem[]>>, mark?: number): Promise<AtPosition<StoredItem[]>> {
    const memory = request.memory;
    if (this.capacity <= 0 || !memory) return load();
    const id = scopeId(request.org, request.kind, request.gvc);
    const until = this.oversized.get(id);
    if (until !== undefined) {
      if (until > Date.now()) return load();
      this.oversized.delete(id);
    }
    this.track(request.org);
    const arrived = ++this.ticks;
    if (!(await this.caughtUp(mark))) return load();
    const held = this.touch(id);
    const scope = isScope(held) ? held : this.register(id, request);
    const seq = this.heads.get(request.org);
    let read: ScopeRead | undefined;
    // Nothing changed in the scope between its position and the cache's: it is the state there.
    if (scope.at >= 0 && scope.seen <= scope.at && scope.at <= this.applied && seq !== undefined) read = { items: this.listOf(scope), seq };
    else read = await this.readScope(id, scope, arrived);
    if (read?.seq === undefined) return load();
    return { value: memory(read.items, request.limit), seq: read.seq };
  }

  /** Drops everything (the stored state was replaced, or the cache can no longer prove what it holds). */
  clear(): void {
    this.entries.clear();
    this.bytes = 0;
    this.heads = new Map();
    this.applied = -1;
    this.provenBy = 0;
    this.leasedUntil = 0;
  }

  /** Stops catching up, and gives the lease back so that no writer waits for it to run out. */
  async close(): Promise<void> {
    clearInterval(this.pruner);
    this.clear();
    this.closed = true;
    this.link?.end().catch(() => {});
    this.link = undefined;
    if (!this.lease) return;
    clearInterval(this.lease.timer);
    await this.pool.query(RELEASE, [this.lease.id]).catch(() => {});
  }

  private track(org: string): void {
    if (!this.tracked.has(org) && this.tracked.size < TRACKED_ORGS) this.tracked.add(org);
  }

  /** A new scope, held before its first read is sent: every catch-up applied from then on tells it of its changes. */
  private register(id: string, request: ListRequest): Scope {
    const scope: Scope = { org: request.org, kind: request.kind, gvc: request.gvc, items: new Map(), at: -1, seen: -1, bytes: 0 };
    this.entries.set(id, scope);
    return scope;
  }

  private listOf(scope: Scope): StoredItem[] {
    return (scope.list ??= [...scope.items.values()].map((held) => held.item));
  }

  /** A read of the scope sent after `arrived`: one under way already, or a new one. */
  private readScope(id: string, scope: Scope, arrived: number): Promise<ScopeRead | undefined> {
    if (scope.reading && scope.reading.sent > arrived) return scope.reading.done;
    const sent = ++this.ticks;
    const done = (scope.at < 0 ? this.loadScope(id, scope) : this.refreshScope(id, scope)).catch(() => undefined);
    const reading = { sent, done };
    scope.reading = reading;
    void done.then(() => {
      if (scope.reading === reading) scope.reading = undefined;
    });
    return done;
  }

  /** Whether a read at `at` may be applied to the scope: it is still held, and the read is newer than what it has. */
  private applies(id: string, scope: Scope, at: number): boolean {
    return this.entries.get(id) === scope && at > scope.at;
  }

  private async loadScope(id: string, scope: Scope): Promise<ScopeRead | undefined> {
    const most = Math.floor(this.capacity / SCOPE_SHARE / ENTRY_OVERHEAD);
    const { rows } = await this.pool.query<ScopeRow>(prepared(LOAD_SCOPE, [scope.org, scope.kind, scope.gvc ?? null, most + 1]));
    const first = rows[0];
    const at = Number(first.keel_cache_n);
    const items = new Map<string, { item: StoredItem; bytes: number }>();
    let bytes = 0;
    for (const row of rows) {
      if (row.id === null) continue;
      const item = fromRow(row);
      const size = sizeOf(row.data);
      items.set(placeOf(item), { item, bytes: size });
      bytes += size;
    }
    if (items.size > most || bytes > this.capacity / SCOPE_SHARE) {
      this.tooLarge(id, scope);
      return undefined;
    }
    const read = { items: [...items.values()].map((held) => held.item), seq: exactSeq(first) };
    if (this.applies(id, scope, at)) {
      scope.items = items;
      scope.list = read.items;
      scope.at = at;
      this.resize(id, scope, bytes);
    }
    return read;
  }

  /** Reads the items changed since the scope's position; a gap in the feed (or a TRUNCATE) loads it whole. */
  private async refreshScope(id: string, scope: Scope): Promise<ScopeRead | undefined> {
    const from = scope.at;
    const { rows } = await this.pool.query<ScopeRow & { keel_pruned: string; keel_gvc: string | null; keel_name: string | null; keel_whole: boolean | null }>(
      prepared(REFRESH_SCOPE, [scope.org, scope.kind, scope.gvc ?? null, from]),
    );
    const first = rows[0];
    if (Number(first.keel_pruned) > from || rows.some((row) => row.keel_whole)) return this.loadScope(id, scope);
    const at = Number(first.keel_cache_n);
    // The rows hold every item changed after `from`, so applied over the state at any position from
    // `from` to `at` (another read may have moved the scope on meanwhile) they give the state at `at`.
    if (this.entries.get(id) !== scope || at < scope.at) return undefined;
    let bytes = scope.bytes;
    for (const row of rows) {
      if (row.keel_name === null) continue;
      const place = placeOf({ gvc: row.keel_gvc!, name: row.keel_name });
      bytes -= scope.items.get(place)?.bytes ?? 0;
      scope.items.delete(place);
      if (row.id === null) continue;
      const size = sizeOf(row.data);
      scope.items.set(place, { item: fromRow(row), bytes: size });
      bytes += size;
    }
    if (bytes > this.capacity / SCOPE_SHARE) {
      this.tooLarge(id, scope);
      return undefined;
    }
    if (rows.length > 1 || first.keel_name !== null) scope.list = undefined;
    scope.at = at;
    this.resize(id, scope, bytes);
    return { items: this.listOf(scope), seq: exactSeq(first) };
  }

  private tooLarge(id: string, scope: Scope): void {
    if (this.entries.get(id) === scope) this.drop(id);
    this.oversized.set(id, Date.now() + OVERSIZED_MS);
  }

  /** Sets a held scope's bytes, then keeps the total within the bound. */
  private resize(id: string, scope: Scope, bytes: number): void {
    this.bytes += bytes - scope.bytes;
    scope.bytes = bytes;
    this.evict();
  }

  /** The entry held under `id`, moved to the back of the eviction order (Map order is insertion order). */
  private touch(id: string): Entry | Scope | undefined {
    const held = this.entries.get(id);
    if (held) {
      this.entries.delete(id);
      this.entries.set(id, held);
    }
    return held;
  }

  /** Reads the item with the position; holds it if no change the cache applied since can have made it stale. */
  private async loadEntry(key: ItemKey): Promise<Entry> {
    const { rows } = await this.pool.query(prepared(LOAD_ITEM, [key.org, key.kind, key.gvc, key.name]));
    const row = rows[0] as ResourceRow & { keel_cache_n: string; data: string | null };
    const text = row.data ?? '';
    const entry: Entry = { item: row.id === null ? null : fromRow(row), at: Number(row.keel_cache_n), bytes: ENTRY_OVERHEAD + ENTRY_FACTOR * text.length };
    this.keep(itemKeyString(key), entry);
    return entry;
  }

  /** Holds an entry read at `entry.at` if no change the cache applied since can have made it stale. */
  private keep(id: string, entry: Entry): void {
    if (entry.at >= this.applied && this.applied >= 0 && entry.bytes <= this.capacity) this.hold(id, entry);
  }

  private hold(id: string, entry: Entry): void {
    this.drop(id);
    this.entries.set(id, entry);
    this.bytes += entry.bytes;
    this.evict();
  }

  private evict(): void {
    while (this.bytes > this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      this.drop(oldest.value);
    }
  }

  private drop(id: string): void {
    const held = this.entries.get(id);
    if (!held) return;
    this.entries.delete(id);
    this.bytes -= held.bytes;
  }

  /**
   * Resolves true once a catch-up sent after this call has been applied, false if it failed (the
   * caller then reads the database). Calls made while a catch-up is under way share the next one.
   */
  private current(): Promise<boolean> {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.schedule();
    });
  }

  /**
   * Sends the next catch-up once the current turn of the event loop has read what it can: every
   * request that arrived in the same turn (under load, one turn reads many connections) shares it,
   * and a lone request waits for no more than that turn.
   */
  private schedule(): void {
    if (this.running) return;
    this.running = true;
    setImmediate(this.drain);
  }

  private readonly drain = (): void => {
    const batch = this.waiting;
    this.waiting = [];
    void this.cycle(batch.length > 0).then((ok) => {
      this.running = false;
      for (const resolve of batch) resolve(ok);
      if (this.waiting.length > 0 || this.renewDue || this.changeHeard || this.ackDue()) this.schedule();
    });
  };

  /**
   * A renewal when one is due (or the position applied is not yet reported), then a catch-up when
   * reads wait, a change was heard or the lease was renewed (only a catch-up sent after a renewal
   * lets reads go on under it); an acknowledgement alone needs none.
   */
  private async cycle(reads: boolean): Promise<boolean> {
    const renewal = this.renewDue;
    if (this.lease && (renewal || this.ackDue())) await this.renew(this.lease);
    if (!reads && !renewal && !this.changeHeard) return true;
    this.changeHeard = false;
    return this.catchUp();
  }

  /** The lease is held and has reported less than the cache has applied: a writer may be waiting for it. */
  private ackDue(): boolean {
    return this.lease !== undefined && this.reading && this.applied > this.reported && this.leasedUntil > 0;
  }

  private async renew(lease: { id: string; schema: string; ms: number }): Promise<void> {
    this.renewDue = false;
    // A cache that cannot name its state renews nothing: its lease runs out and no writer waits on it.
    if (this.applied < 0) return;
    try {
      const link = this.link ?? (await this.connection());
      const sent = performance.now();
      const applied = this.applied;
      await link.query(prepared(RENEW, [lease.id, applied, lease.ms, applied > this.reported ? lease.schema : null]));
      this.reported = applied;
      if (this.link === link) this.renewedAt = sent;
    } catch {
      this.renewedAt = undefined;
      this.leasedUntil = 0;
    }
  }

  /** The catch-ups' connection, opened if there is none. */
  private async connection(): Promise<pg.Client> {
    if (this.link) return this.link;
    if (this.closed) throw new Error('the store is closed');
    const link = new pg.Client(this.pool.options);
    // A cut connection fails the catch-up under way (a query on it rejects); the next opens another.
    const gone = () => {
      if (this.link === link) {
        this.link = undefined;
        // Notices of changes no longer arrive: answering from memory would miss them.
        this.renewedAt = undefined;
        this.leasedUntil = 0;
      }
      void link.end().catch(() => {});
    };
    link.on('error', gone);
    link.on('end', gone);
    this.link = link;
    try {
      await link.connect();
      if (this.lease) {
        const schema = this.lease.schema;
        link.on('notification', (notice) => {
          if (notice.payload !== schema || this.link !== link) return;
          this.changeHeard = true;
          this.schedule();
        });
        await link.query('LISTEN keel_cache');
      }
    } catch (err) {
      if (this.link === link) this.link = undefined;
      throw err;
    }
    return link;
  }

  private async catchUp(): Promise<boolean> {
    try {
      const from = this.applied;
      const orgs = this.trackedList();
      const link = this.link ?? (await this.connection());
      const number = ++this.sent;
      const lease = this.renewedAt;
      // With every tracked org's head known at `from` (none had events pending then), an unmoved
      // position means nothing that could change an item or a head committed since.
      if (from >= 0 && this.heads.size === orgs.length) {
        const { rows } = await link.query<[string]>(POSITION);
        if (Number(rows[0][0]) === from) {
          this.proveAt(from, number, this.heads);
          this.extendLease(link, lease);
          return true;
        }
      }
      const { rows } = await link.query<CatchUpRow>(prepared(CATCH_UP, [from, orgs]));
      const first = rows[0];
      const position = Number(first.n);
      /** Orgs whose access changed; undefined: any org's may have. */
      let access: Set<string> | undefined = new Set();
      // Behind what the table still holds, too far behind to apply, or a database whose position
      // went back (restored from a backup): start from nothing at its position.
      if (from < 0 || from < Number(first.pruned) || rows.length > CATCH_UP_LIMIT || position < from) {
        this.clear();
        access = undefined;
      } else {
        for (const row of rows) {
          if (row.change === null) continue;
          if (row.org === null) {
            this.clear();
            access = undefined;
            break;
          }
          // A row naming an org and no kind: a key or replica token of the org went (migration 16).
          if (row.kind === null || ACCESS_KINDS.has(row.kind)) access.add(row.org);
          if (row.kind === null) continue;
          this.drop(itemKeyString(row as ItemKey));
          this.changed(row.org, row.kind, row.gvc!, Number(row.change));
        }
      }
      this.proveAt(position, number, this.headsOf(orgs, first));
      this.extendLease(link, lease);
      this.tell(access);
      return true;
    } catch {
      this.clear();
      this.tell(undefined);
      return false;
    }
  }

  /** After a catch-up sent on `link` once the renewal sent at `renewedAt` had committed: reads may skip catch-ups until that lease runs out here. */
  private extendLease(link: pg.Client, renewedAt: number | undefined): void {
    if (!this.lease || renewedAt === undefined || this.link !== link || this.applied < 0) return;
    this.leasedUntil = Math.max(this.leasedUntil, renewedAt + this.lease.ms - LEASE_MARGIN_MS);
  }

  /** The tracked orgs as a statement parameter (a new array only when one was added). */
  private trackedList(): string[] {
    if (this.trackedArray.length !== this.tracked.size) this.trackedArray = [...this.tracked];
    return this.trackedArray;
  }

  /** The chain position of each of `orgs` that has no event pending, as a catch-up's row has them. */
  private headsOf(orgs: readonly string[], row: CatchUpRow): Map<string, number> {
    const heads = new Map<string, number>();
    for (const org of orgs) if (!row.busy?.includes(org)) heads.set(org, Number(row.heads?.[org] ?? 0));
    return heads;
  }

  /** Held entries and heads are the state at `position`, as catch-up `number` found it (no await since its statement). */
  private proveAt(position: number, number: number, heads: Map<string, number>): void {
    this.applied = position;
    this.provenBy = number;
    this.heads = heads;
  }

  /** Tells the scopes holding an item of (org, kind, gvc) of a change to it at position `n`. */
  private changed(org: string, kind: string, gvc: string, n: number): void {
    for (const id of [scopeId(org, kind, gvc), scopeId(org, kind, undefined)]) {
      const scope = this.entries.get(id);
      if (isScope(scope) && n > scope.seen) scope.seen = n;
    }
  }

  private tell(orgs: Set<string> | undefined): void {
    if (orgs?.size === 0) return;
    for (const listener of this.listeners) {
      if (orgs) for (const org of orgs) listener(org);
      else listener(undefined);
    }
  }

  /** Drops feed rows far behind the newest, recording how far (a cache behind that starts again). */
  private async prune(): Promise<void> {
    if (this.lease) await this.pool.query(FORGET_EXPIRED);
    await this.pool.query(
      `WITH cut AS (SELECT n - ${KEEP_CHANGES} AS through FROM keel_cache_epoch),
        gone AS (DELETE FROM keel_cache_changes WHERE n <= (SELECT through FROM cut))
       UPDATE keel_cache_epoch SET pruned = GREATEST(pruned, (SELECT through FROM cut)) WHERE pruned < (SELECT through FROM cut)`,
    );
  }
}
