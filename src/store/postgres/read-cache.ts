import type pg from 'pg';
import { fromRow, itemKeyString, RESOURCE_COLUMNS, type ResourceRow } from '../rows.js';
import { prepared } from './statements.js';
import type { AccessFeed, AtPosition, ItemKey, StoredItem } from '../types.js';

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
/** Kinds whose items authorization and authentication read (auth/policies.ts; a service account's keys go with it). */
const ACCESS_KINDS = new Set(['org', 'policy', 'group', 'user', 'serviceaccount']);

/**
 * The position (keel_cache_epoch.n) and the changes after `$1`, from one statement's snapshot: once
 * they are applied the cache holds exactly what the database held at that position. With them, the
 * chain heads of the orgs in `$2` and which of those orgs have events not yet chained.
 */
const CATCH_UP = `SELECT e.n, e.pruned, c.n AS change, c.org, c.kind, c.gvc, c.name,
  (SELECT count(*) FROM keel_cache_changes WHERE n > $1) AS waiting,
  (SELECT json_object_agg(org, last_seq) FROM audit_heads WHERE org = ANY($2)) AS heads,
  (SELECT array_agg(DISTINCT org) FROM audit_pending WHERE org = ANY($2)) AS busy
  FROM keel_cache_epoch e LEFT JOIN LATERAL (SELECT * FROM keel_cache_changes WHERE n > $1 ORDER BY n LIMIT ${CATCH_UP_LIMIT}) c ON true`;
/** An item (or NULLs) and the position it was read at. Its data as text: its length sizes the entry. */
const LOAD_ITEM = `SELECT e.n AS keel_cache_n, ${RESOURCE_COLUMNS.replace('r.data', 'r.data::text AS data')} FROM keel_cache_epoch e
  LEFT JOIN resources r ON r.org = $1 AND r.kind = $2 AND r.gvc = $3 AND r.name = $4`;

interface CatchUpRow {
  n: string;
  pruned: string;
  change: string | null;
  org: string | null;
  kind: string | null;
  gvc: string | null;
  name: string | null;
  waiting: string;
  heads: Record<string, number | string> | null;
  busy: string[] | null;
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
 */
export class ReadCache implements AccessFeed {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  /** The position whose state the entries are (or a later one); -1 before the first catch-up and after a failed one. */
  private applied = -1;
  /** Orgs whose chain position catch-ups read (those getAt was asked about). */
  private readonly tracked = new Set<string>();
  /** Each tracked org's chain position at `applied`, unless events of it were still pending then. */
  private heads = new Map<string, number>();
  private running = false;
  /** Reads waiting for the next catch-up. */
  private waiting: Array<(ok: boolean) => void> = [];
  private readonly pruner: NodeJS.Timeout;
  /** Catch-ups sent so far, and the number of the one that took the cache to `applied` (see mark()). */
  private sent = 0;
  private provenBy = 0;
  private readonly listeners = new Set<(org: string | undefined) => void>();

  constructor(
    private readonly pool: pg.Pool,
    /** Estimated bytes held at most; 0 turns the cache off. */
    private readonly capacity: number,
  ) {
    // The feed serves authentication too: pruned even when no item is held.
    this.pruner = setInterval(() => void this.prune().catch(() => {}), PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  /** Entries held and their estimated bytes (for measurement). */
  get usage(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.bytes };
  }

  mark(): number {
    return this.sent;
  }

  caughtUp(mark?: number): boolean | Promise<boolean> {
    return (mark !== undefined && this.proven(mark)) || this.current();
  }

  onAccess(listener: (org: string | undefined) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** Whether the state held was taken to by a catch-up sent after `mark` was taken. */
  private proven(mark: number): boolean {
    return this.applied >= 0 && this.provenBy > mark;
  }

  /** `mark`: when the read began (see AccessFeed.mark); a catch-up sent since then serves it. */
  async get(key: ItemKey, load: () => Promise<StoredItem | undefined>, mark?: number): Promise<StoredItem | undefined> {
    if (this.capacity <= 0 || !(await this.caughtUp(mark))) return load();
    const held = this.touch(itemKeyString(key));
    if (held) return held.item ?? undefined;
    return (await this.loadEntry(key)).item ?? undefined;
  }

  /**
   * get() with the org's chain position (Store.getAt): from memory when the last catch-up found
   * none of the org's events pending, so the head it read names exactly the state held; an entry
   * read at a later position than that one is not named by it, and is read again.
   */
  async getAt(key: ItemKey, load: () => Promise<ReadAt>, mark?: number): Promise<AtPosition<StoredItem | undefined>> {
    if (this.capacity <= 0) return load();
    if (!this.tracked.has(key.org) && this.tracked.size < TRACKED_ORGS) this.tracked.add(key.org);
    if (!(await this.caughtUp(mark))) return load();
    const id = itemKeyString(key);
    const seq = this.heads.get(key.org);
    const held = seq === undefined ? undefined : this.touch(id);
    if (held && held.at <= this.applied) return { value: held.item ?? undefined, seq: seq! };
    // The database's answer names its own position exactly; the item is kept for the next read.
    const read = await load();
    this.keep(id, { item: read.value ?? null, at: read.at, bytes: ENTRY_OVERHEAD + ENTRY_FACTOR * read.size });
    return { value: read.value, seq: read.seq };
  }

  /** Drops everything (the stored state was replaced, or the cache can no longer prove what it holds). */
  clear(): void {
    this.entries.clear();
    this.bytes = 0;
    this.heads = new Map();
    this.applied = -1;
    this.provenBy = 0;
  }

  close(): void {
    clearInterval(this.pruner);
    this.clear();
  }

  /** The entry held under `id`, moved to the back of the eviction order (Map order is insertion order). */
  private touch(id: string): Entry | undefined {
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
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    while (this.waiting.length > 0) {
      const batch = this.waiting;
      this.waiting = [];
      const ok = await this.catchUp();
      for (const resolve of batch) resolve(ok);
    }
    this.running = false;
  }

  private async catchUp(): Promise<boolean> {
    try {
      const from = this.applied;
      const orgs = [...this.tracked];
      const number = ++this.sent;
      const { rows } = await this.pool.query<CatchUpRow>(prepared(CATCH_UP, [from, orgs]));
      const first = rows[0];
      const busy = new Set(first.busy ?? []);
      const heads = new Map(orgs.filter((org) => !busy.has(org)).map((org) => [org, Number(first.heads?.[org] ?? 0)]));
      const position = Number(first.n);
      /** Orgs whose access changed; undefined: any org's may have. */
      let access: Set<string> | undefined = new Set();
      // Behind what the table still holds, too far behind to apply, or a database whose position
      // went back (restored from a backup): start from nothing at its position.
      if (from < 0 || from < Number(first.pruned) || Number(first.waiting) > CATCH_UP_LIMIT || position < from) {
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
          if (row.kind !== null) this.drop(itemKeyString(row as ItemKey));
        }
      }
      // No await since the statement: held entries and heads are now both at `position`.
      this.applied = position;
      this.provenBy = number;
      this.heads = heads;
      this.tell(access);
      return true;
    } catch {
      this.clear();
      this.tell(undefined);
      return false;
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
    await this.pool.query(
      `WITH cut AS (SELECT n - ${KEEP_CHANGES} AS through FROM keel_cache_epoch),
        gone AS (DELETE FROM keel_cache_changes WHERE n <= (SELECT through FROM cut))
       UPDATE keel_cache_epoch SET pruned = GREATEST(pruned, (SELECT through FROM cut)) WHERE pruned < (SELECT through FROM cut)`,
    );
  }
}
