import type pg from 'pg';
import type { ItemKey, NewAuditEvent, StoredItem, Tx } from '../types.js';
import { itemKeyString } from '../rows.js';
import { getOn, pendingInsert, prepared, snapshotOf, updateCtes, type Snapshot } from './statements.js';

/** An item this process wrote, kept as written (its data only as the snapshot's JSON). */
export interface Remembered {
  item: StoredItem;
  snapshot: Snapshot;
}

function remembered(item: StoredItem, snapshot: Snapshot): Remembered {
  return { item: { ...item, data: {} }, snapshot };
}

/** Thrown by an optimistic transaction for anything it cannot do: the store then locks instead. */
export class NeedsLocking extends Error {
  constructor() {
    super('this transaction needs row locks');
  }
}

/**
 * A transaction without a transaction: reads run at once, and the writes are sent at the end as
 * one statement that applies only if the item read "for update" is still exactly as read. The
 * usual change (read an item, write its next state and its audit event) then costs two round
 * trips instead of five, and holds no connection while the caller computes; one, when the item
 * read for update is taken from `recent` (what this process last wrote of it: if that is stale,
 * the write does not apply, and the store runs the function again with fresh reads). Anything else
 * (inserts, deletes, locks, a read after a write, a second update) refuses with NeedsLocking, and
 * the store runs the function again in a locking transaction.
 */
export class OptimisticTx implements Tx {
  /** Set once anything was refused: even if the caller swallowed the error, its outcome is void. */
  refused = false;
  /** The events this transaction appended (sealed into their orgs' chains after commit). */
  readonly appended: NewAuditEvent[] = [];
  /** Set once an item read for update came from `recent`. */
  usedRecent = false;
  /** The items read for update and not written yet, as read, by key. */
  private readonly readForUpdate = new Map<string, Snapshot>();
  private pendingUpdate?: { item: StoredItem; expectedVersion: number; tagsUnchanged: boolean; was: Snapshot };

  constructor(
    private readonly db: pg.Pool,
    private readonly recent?: ReadonlyMap<string, Remembered>,
  ) {}

  /** The item the committed statement wrote, as the store may remember it (see `recent`). */
  written?: Remembered;

  /** Whether the function updated an item (so committing checks that what it read is still current). */
  get updates(): boolean {
    return this.pendingUpdate !== undefined;
  }

  private refuse(): never {
    this.refused = true;
    throw new NeedsLocking();
  }

  private get writing(): boolean {
    return this.pendingUpdate !== undefined || this.appended.length > 0;
  }

  async get(key: ItemKey, lock?: 'share' | 'update'): Promise<StoredItem | undefined> {
    if (this.writing || lock === 'share') this.refuse();
    const id = itemKeyString(key);
    const kept = lock === 'update' ? this.recent?.get(id) : undefined;
    if (kept) {
      this.usedRecent = true;
      this.readForUpdate.set(id, kept.snapshot);
      return { ...kept.item, data: JSON.parse(kept.snapshot.data) }; // a copy the caller may change
    }
    const item = await getOn(this.db, key);
    if (lock === 'update' && item) this.readForUpdate.set(id, snapshotOf(item));
    return item;
  }

  async update(item: StoredItem, expectedVersion: number, options?: { tagsUnchanged?: boolean }): Promise<void> {
    const key = itemKeyString(item);
    const was = this.readForUpdate.get(key);
    if (this.pendingUpdate || was?.version !== expectedVersion) this.refuse();
    this.readForUpdate.delete(key);
    this.pendingUpdate = { item, expectedVersion, tagsUnchanged: options?.tagsUnchanged ?? false, was };
  }

  async appendAudit(event: NewAuditEvent): Promise<void> {
    this.appended.push(event);
  }

  async countInGvc(org: string, kind: string, gvc: string): Promise<number> {
    if (this.writing) this.refuse();
    const { rows } = await this.db.query('SELECT COUNT(*)::int AS n FROM resources WHERE org = $1 AND kind = $2 AND gvc = $3', [org, kind, gvc]);
    return rows[0].n as number;
  }

  insert = async (): Promise<void> => this.refuse();
  writeStatus = async (): Promise<void> => this.refuse();
  delete = async (): Promise<void> => this.refuse();
  tryLock = async (): Promise<boolean> => this.refuse();
  clearAll = async (): Promise<void> => this.refuse();
  putKey = async (): Promise<void> => this.refuse();
  deleteKeys = async (): Promise<void> => this.refuse();
  putSignIn = async (): Promise<void> => this.refuse();
  takeSignIn = async (): Promise<string | undefined> => this.refuse();
  appendLogs = async (): Promise<void> => this.refuse();

  /**
   * Sends the writes: 'committed', 'conflict' when the item changed since it was read (run the
   * function again), or 'needs-locking' when an item was read for update but not written.
   */
  async commit(): Promise<'committed' | 'conflict' | 'needs-locking'> {
    if (!this.writing) return 'committed';
    if (this.readForUpdate.size > 0) return 'needs-locking';
    if (!this.pendingUpdate) {
      const insert = pendingInsert(this.appended, 1);
      await this.db.query(prepared(insert.sql, insert.values));
      return 'committed';
    }
    const { item, expectedVersion, tagsUnchanged, was } = this.pendingUpdate;
    // Serialized once: sent as the new data, and kept to check the next change against.
    const snapshot = snapshotOf(item);
    const update = updateCtes(item, expectedVersion, tagsUnchanged, was, snapshot.data);
    const parts = [update.sql];
    const values = [...update.values];
    if (this.appended.length > 0) {
      const insert = pendingInsert(this.appended, values.length + 1, 'EXISTS (SELECT 1 FROM updated)');
      parts.push(`appended AS (${insert.sql})`);
      values.push(...insert.values);
    }
    const { rows } = await this.db.query(prepared(`WITH ${parts.join(',\n')} SELECT count(*)::int AS n FROM updated`, values));
    if (rows[0].n !== 1) return 'conflict';
    this.written = remembered(item, snapshot);
    return 'committed';
  }
}
