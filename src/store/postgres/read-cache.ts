import type pg from 'pg';
import { fromRow, RESOURCE_COLUMNS, type ResourceRow } from '../rows.js';
import { prepared } from './statements.js';
import type { AtPosition, ItemKey, KeyRecord, StoredItem } from '../types.js';

/** More changes than this since the cache's position: dropping everything is cheaper than applying them. */
const CATCH_UP_LIMIT = 5000;
/** Orgs whose chain position each catch-up reads at most. */
const TRACKED_ORGS = 1000;
/** Changes the feed table keeps behind the newest; a cache further behind starts again from nothing. */
const KEEP_CHANGES = 100_000;
const PRUNE_EVERY_MS = 10_000;

/**
 * The position (keel_cache_epoch.n) and the changes after `$1`, from one statement's snapshot: once
 * they are applied the cache holds exactly what the database held at that position.
 */
const CATCH_UP = `SELECT e.n, e.pruned, c.n AS change, c.org, c.kind, c.gvc, c.name, c.key_name,
  (SELECT count(*) FROM keel_cache_changes WHERE n > $1) AS waiting,
  (SELECT json_object_agg(org, last_seq) FROM audit_heads WHERE org = ANY($2)) AS heads,
  (SELECT array_agg(DISTINCT org) FROM audit_pending WHERE org = ANY($2)) AS busy
  FROM keel_cache_epoch e LEFT JOIN LATERAL (SELECT * FROM keel_cache_changes WHERE n > $1 ORDER BY n LIMIT ${CATCH_UP_LIMIT}) c ON true`;
const LOAD_ITEM = `SELECT e.n AS keel_cache_n, ${RESOURCE_COLUMNS} FROM keel_cache_epoch e
  LEFT JOIN resources r ON r.org = $1 AND r.kind = $2 AND r.gvc = $3 AND r.name = $4`;
const LOAD_KEY = `SELECT e.n AS keel_cache_n, k.key_name, k.org, k.service_account, k.secret_hash, k.created FROM keel_cache_epoch e
  LEFT JOIN service_account_keys k ON k.key_name = $1`;

interface CatchUpRow {
  n: string;
  pruned: string;
  change: string | null;
  org: string | null;
  kind: string | null;
  gvc: string | null;
  name: string | null;
  key_name: string | null;
  waiting: string;
  heads: Record<string, number | string> | null;
  busy: string[] | null;
}

/** The kinds the authorizer reads (auth/policies.ts), and the org item itself. */
const AUTH_KINDS = new Set(['org', 'policy', 'group', 'user', 'serviceaccount']);

const itemId = (k: { org: string; kind: string; gvc: string; name: string }) => `${k.org}\u0000${k.kind}\u0000${k.gvc}\u0000${k.name}`;

/**
 * Items and service account keys of this process, served from memory but only at a position no
 * older than the database's when the read began (DESIGN.md, "Read cache on PostgreSQL"): each read
 * first takes part in a catch-up statement sent after it arrived (one for every read that arrived
 * while the one before was under way), which returns the database's position and the keys changed
 * since the cache's, and applies them; then an entry still held is the database's state at that
 * position or later. Nothing depends on a notice arriving: a cut connection or a restarted
 * database only makes catch-ups fail, and a read whose catch-up failed goes to the database while
 * the cache starts again from nothing. Held items are shared between reads, as the SQLite store's
 * are: callers must not change them.
 */
export class ReadCache {
  private readonly items = new Map<string, StoredItem | null>();
  private readonly keys = new Map<string, KeyRecord | null>();
  /** The position whose state the entries are; -1 before the first catch-up and after a failed one. */
  private applied = -1;
  /** Counts clears: a mark from before one never equals a mark from after. */
  private resets = 0;
  /** Changes applied to each org's authorization data (AUTH_KINDS), and to any key. */
  private readonly orgChanges = new Map<string, number>();
  private keyChanges = 0;
  /** Orgs whose chain position catch-ups read (those getAt was asked about). */
  private readonly tracked = new Set<string>();
  /** Each tracked org's chain position at `applied`, unless events of it were still pending then. */
  private heads = new Map<string, number>();
  private running = false;
  /** Reads waiting for the next catch-up. */
  private waiting: Array<(ok: boolean) => void> = [];
  private readonly pruner: NodeJS.Timeout;

  constructor(
    private readonly pool: pg.Pool,
    /** Entries held at most (items and keys together); beyond it the oldest are dropped. */
    private readonly capacity: number,
  ) {
    this.pruner = setInterval(() => void this.prune().catch(() => {}), PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  /** How many entries the cache holds. */
  get size(): number {
    return this.items.size + this.keys.size;
  }

  async get(key: ItemKey, load: () => Promise<StoredItem | undefined>): Promise<StoredItem | undefined> {
    if (this.capacity <= 0 || !(await this.current())) return load();
    const id = itemId(key);
    const held = this.items.get(id);
    if (held !== undefined) {
      // Map order is insertion order: a hit moves the entry to the back, away from eviction.
      this.items.delete(id);
      this.items.set(id, held);
      return held === null ? undefined : held;
    }
    const { rows } = await this.pool.query(prepared(LOAD_ITEM, [key.org, key.kind, key.gvc, key.name]));
    const row = rows[0] as ResourceRow & { keel_cache_n: string };
    const item = row.id === null ? undefined : fromRow(row);
    // Read at a position the cache has not passed: no change it applied since can make it stale.
    if (Number(row.keel_cache_n) >= this.applied && this.applied >= 0) this.hold(this.items, id, item ?? null);
    return item;
  }

  /**
   * get() with the org's chain position (Store.getAt): from memory when the last catch-up found
   * no event of the org pending, so that the head it read names exactly the state held.
   */
  async getAt(key: ItemKey, load: () => Promise<AtPosition<StoredItem | undefined>>): Promise<AtPosition<StoredItem | undefined>> {
    if (this.capacity <= 0) return load();
    if (!this.tracked.has(key.org) && this.tracked.size < TRACKED_ORGS) this.tracked.add(key.org);
    if (!(await this.current())) return load();
    const seq = this.heads.get(key.org);
    if (seq === undefined) return load();
    const id = itemId(key);
    const held = this.items.get(id);
    if (held !== undefined) {
      this.items.delete(id);
      this.items.set(id, held);
      return { value: held === null ? undefined : held, seq };
    }
    const applied = this.applied;
    const { rows } = await this.pool.query(prepared(LOAD_ITEM, [key.org, key.kind, key.gvc, key.name]));
    const row = rows[0] as ResourceRow & { keel_cache_n: string };
    // Only a read at exactly the position whose head we know is named by that head.
    if (Number(row.keel_cache_n) !== applied || this.applied !== applied) return load();
    const item = row.id === null ? undefined : fromRow(row);
    this.hold(this.items, id, item ?? null);
    return { value: item, seq };
  }

  async findKey(keyName: string, load: () => Promise<KeyRecord | undefined>): Promise<KeyRecord | undefined> {
    if (this.capacity <= 0 || !(await this.current())) return load();
    const held = this.keys.get(keyName);
    if (held !== undefined) return held === null ? undefined : { ...held };
    const { rows } = await this.pool.query(prepared(LOAD_KEY, [keyName]));
    const row = rows[0];
    const record: KeyRecord | undefined =
      row.key_name === null ? undefined : { keyName: row.key_name, org: row.org, serviceAccount: row.service_account, secretHash: row.secret_hash, created: row.created };
    if (Number(row.keel_cache_n) >= this.applied && this.applied >= 0) this.hold(this.keys, keyName, record ? { ...record } : null);
    return record;
  }

  /**
   * Resolves once a catch-up sent after the call is applied: a mark of the org's authorization data
   * (policies, groups, users, service accounts, the org) and of the keys at that position; two
   * equal marks mean none of it changed between them. Undefined when the catch-up failed.
   */
  async accessMark(org: string): Promise<string | undefined> {
    if (!(await this.current())) return undefined;
    return `${this.resets}:${this.orgChanges.get(org) ?? 0}:${this.keyChanges}`;
  }

  /** Drops everything (the stored state was replaced, or the cache can no longer prove what it holds). */
  clear(): void {
    this.items.clear();
    this.keys.clear();
    this.resets++;
    this.heads = new Map();
    this.applied = -1;
  }

  close(): void {
    clearInterval(this.pruner);
    this.clear();
  }

  private hold<V>(map: Map<string, V>, id: string, value: V): void {
    if (this.capacity <= 0) return;
    map.set(id, value);
    while (this.size > this.capacity) {
      const from = this.items.size >= this.keys.size ? this.items : this.keys;
      const oldest = from.keys().next();
      if (oldest.done) break;
      from.delete(oldest.value);
    }
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
      const { rows } = await this.pool.query<CatchUpRow>(prepared(CATCH_UP, [from, orgs]));
      const busy = new Set(rows[0].busy ?? []);
      const heads = new Map(orgs.filter((org) => !busy.has(org)).map((org) => [org, Number(rows[0].heads?.[org] ?? 0)]));
      const position = Number(rows[0].n);
      // Behind what the table still holds, or too far behind to apply: start from nothing.
      if (from < 0 || from < Number(rows[0].pruned) || Number(rows[0].waiting) > CATCH_UP_LIMIT || position < from) {
        this.clear();
        this.applied = position;
        this.heads = heads;
        return true;
      }
      for (const row of rows) {
        if (row.org !== null) {
          this.items.delete(itemId(row as { org: string; kind: string; gvc: string; name: string }));
          if (AUTH_KINDS.has(row.kind!)) this.orgChanges.set(row.org, (this.orgChanges.get(row.org) ?? 0) + 1);
        } else if (row.key_name !== null) {
          this.keys.delete(row.key_name);
          this.keyChanges++;
        } else if (row.change !== null) {
          this.items.clear();
          this.keys.clear();
          this.resets++;
        }
      }
      this.applied = position;
      this.heads = heads;
      return true;
    } catch {
      this.clear();
      return false;
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
