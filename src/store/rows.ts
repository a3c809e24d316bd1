import type { ItemKey, ReplicaTokenRecord, StoredItem } from './types.js';

/** The resource_tags rows of an item: one per tag, values as text (how query terms compare them). */
export function tagRows(item: StoredItem): Array<[string, string]> {
  const tags = item.data.tags;
  if (!tags || typeof tags !== 'object') return [];
  return Object.entries(tags as Record<string, unknown>)
    .filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => [k, String(v)]);
}

/** An item's key as one string (NUL-separated: no name or org contains NUL), for maps keyed by item. */
export const itemKeyString = (key: ItemKey): string => `${key.org}\u0000${key.kind}\u0000${key.gvc}\u0000${key.name}`;

export interface ResourceRow {
  org: string;
  kind: string;
  gvc: string;
  name: string;
  id: string;
  version: number | string;
  created: string;
  last_modified: string;
  data: string | Record<string, unknown>;
}

export function fromRow(row: ResourceRow): StoredItem {
  return {
    org: row.org,
    kind: row.kind,
    gvc: row.gvc,
    name: row.name,
    id: row.id,
    version: Number(row.version),
    created: row.created,
    lastModified: row.last_modified,
    data: typeof row.data === 'string' ? JSON.parse(row.data) : row.data,
  };
}

export const RESOURCE_COLUMNS = 'r.org, r.kind, r.gvc, r.name, r.id, r.version, r.created, r.last_modified, r.data';

/** Serializes async work: the SQLite writer connection runs one transaction at a time. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();

  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn);
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

/**
 * A list statement that also reads the org's chain position, so that both come from the statement's
 * one snapshot: `position` holds the position's columns (over nothing but the org's parameter),
 * `list` the list's own statement over `resources r` with its ORDER BY and LIMIT. The position's
 * row is joined to each listed row, and stands alone with NULL item columns when none is listed.
 * The outer ORDER BY repeats the list's (its terms name only columns of `r`, which the inner
 * statement yields under their own names): row order is then defined, not an accident of the plan.
 */
export function positionedList(position: string, list: string, orderBy: string): string {
  return `SELECT p.*, r.* FROM (SELECT ${position}) p LEFT JOIN (${list}) r ON TRUE ORDER BY ${orderBy}`;
}

/** The items of positionedList()'s rows (a row without an item carries only the position). */
export function itemsOf(rows: Array<ResourceRow & Record<string, unknown>>): StoredItem[] {
  const items: StoredItem[] = [];
  for (const row of rows) if (row.id !== null) items.push(fromRow(row));
  return items;
}

/** A replica_tokens row as the store's record. */
export function replicaToken(row: Record<string, string>): ReplicaTokenRecord {
  return { tokenHash: row.token_hash, org: row.org, gvc: row.gvc, identity: row.identity, scope: row.scope, replica: row.replica, created: row.created };
}
