import { createHash } from 'node:crypto';
import type pg from 'pg';
import { fromRow, RESOURCE_COLUMNS, tagRows, type ResourceRow } from '../rows.js';
import { AUDIT_COLUMNS, type AuditLayout } from '../audit-sql.js';
import type { ItemKey, NewAuditEvent, StoredItem } from '../types.js';

// SQL shared by the store's locking transactions and its optimistic ones.

export type Queryable = pg.Pool | pg.PoolClient;

/** Runs `fn` in one transaction on a connection of its own: committed when it returns, rolled back when it throws. */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

const names = new Map<string, string>();

/**
 * The org's chain position as a statement's snapshot has it: the head's seq, and the pending_ids of
 * the org's committed events that still wait in audit_pending for theirs (see PostgresStore.readAt).
 */
export const position = (org: string) =>
  `(SELECT last_seq FROM audit_heads WHERE org = ${org}) AS keel_seq, (SELECT array_agg(pending_id) FROM audit_pending WHERE org = ${org}) AS keel_pending`;

/**
 * A query as a named prepared statement: PostgreSQL parses and plans it once per connection
 * instead of on every call. Only for statements whose text comes from a small fixed set.
 */
export function prepared(text: string, values: unknown[]): pg.QueryConfig {
  let name = names.get(text);
  if (!name) {
    name = `keel_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
    names.set(text, name);
  }
  return { name, text, values };
}

export async function getOn(db: Queryable, key: ItemKey, lock?: 'share' | 'update'): Promise<StoredItem | undefined> {
  const suffix = lock === 'update' ? ' FOR UPDATE' : lock === 'share' ? ' FOR SHARE' : '';
  const { rows } = await db.query<ResourceRow>(
    prepared(`SELECT ${RESOURCE_COLUMNS} FROM resources r WHERE r.org = $1 AND r.kind = $2 AND r.gvc = $3 AND r.name = $4${suffix}`, [key.org, key.kind, key.gvc, key.name]),
  );
  return rows[0] && fromRow(rows[0]);
}

/** An item as read: its id, version and data as JSON text (immune to later changes of the object handed out). */
export interface Snapshot {
  id: string;
  version: number;
  data: string;
}

export function snapshotOf(item: StoredItem): Snapshot {
  return { id: item.id, version: item.version, data: JSON.stringify(item.data) };
}

/**
 * The version-checked update of an item (and, unless its tags are unchanged, of its tag index)
 * as common table expressions: `updated` holds the id of the row when it was at `expectedVersion`
 * and, given `was`, when it still is exactly that item (same id, same data: a status write keeps
 * the version). `json` is the item's data already serialized, if at hand.
 */
export function updateCtes(item: StoredItem, expectedVersion: number, tagsUnchanged: boolean, was?: Snapshot, json?: string): { sql: string; values: unknown[] } {
  const values: unknown[] = [item.version, item.lastModified, json ?? item.data, item.org, item.kind, item.gvc, item.name, expectedVersion];
  const same = was ? ` AND id = $${values.push(was.id)} AND data = $${values.push(was.data)}::jsonb` : '';
  let sql = `updated AS (
      UPDATE resources SET version = $1, last_modified = $2, data = $3
      WHERE org = $4 AND kind = $5 AND gvc = $6 AND name = $7 AND version = $8${same} RETURNING id)`;
  if (!tagsUnchanged) {
    const tags = tagRows(item);
    const keys = values.length + 1;
    values.push(
      tags.map((t) => t[0]),
      tags.map((t) => t[1]),
    );
    sql += `,
    upserted AS (
      INSERT INTO resource_tags (id, org, kind, gvc, name, key, value)
      SELECT updated.id, $4, $5, $6, $7, k, v FROM updated, unnest($${keys}::text[], $${keys + 1}::text[]) AS t(k, v)
      ON CONFLICT (id, key) DO UPDATE SET value = excluded.value),
    dropped AS (
      DELETE FROM resource_tags WHERE id IN (SELECT id FROM updated) AND NOT (key = ANY($${keys}::text[])))`;
  }
  return { sql, values };
}

const PENDING_COLUMNS = 'org, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, body';

/**
 * Inserts audit events into audit_pending (to be sealed into the chain after commit); `guard` is an
 * SQL condition they wait on. One event (a write's usual count) goes as plain parameters: an
 * array parameter makes both pg and PostgreSQL escape and unescape the whole body.
 */
export function pendingInsert(events: NewAuditEvent[], firstParam: number, guard = 'TRUE'): { sql: string; values: unknown[] } {
  const fields: Array<keyof NewAuditEvent> = ['org', 'id', 'context', 'eventTime', 'resourceType', 'resourceName', 'resourceId', 'subjectName', 'actionType', 'body'];
  if (events.length === 1) {
    return {
      sql: `INSERT INTO audit_pending (${PENDING_COLUMNS}) SELECT ${fields.map((_, i) => `$${firstParam + i}::text`).join(', ')} WHERE ${guard}`,
      values: fields.map((f) => events[0][f]),
    };
  }
  const params = fields.map((_, i) => `$${firstParam + i}::text[]`).join(', ');
  return {
    sql: `INSERT INTO audit_pending (${PENDING_COLUMNS}) SELECT * FROM unnest(${params}) WHERE ${guard}`,
    values: fields.map((f) => events.map((e) => e[f])),
  };
}

/** Audit events as filters read them: sealed rows of audit_events, keyed (org, seq), with an index per filter that needs one. */
export const AUDIT_LAYOUT: AuditLayout = {
  dialect: 'postgres',
  columns: () => AUDIT_COLUMNS,
  from: () => 'audit_events',
  column: (name) => name,
  range: (p, filter) => [
    `org = ${p.add(filter.org)}`,
    ...(filter.afterSeq === undefined ? [] : [`seq > ${p.add(filter.afterSeq)}`]),
    ...(filter.throughSeq === undefined ? [] : [`seq <= ${p.add(filter.throughSeq)}`]),
  ],
  narrow: () => [],
  order: () => 'seq',
};
