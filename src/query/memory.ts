// Lists decided in memory over stored items, exactly as the compiled SQL (compile.ts) decides them
// over `resources r`: the same items, in the same order, after the same cursor.
import type { StoredItem } from '../store/types.js';
import { decodeCursor } from './cursor.js';
import { matchesQuery } from './evaluate.js';
import { comparePositions, positionOf, type Position } from './sort.js';
import { sortOf, type Query } from './types.js';
import { compareStrings } from './values.js';

/**
 * The columns (paths.ts COLUMNS) that stored data leaves out. A term or sort on one reads the
 * column; `property: '*'` reads r.data's members, which do not include them.
 */
const COLUMN_ONLY = ['id', 'version', 'created', 'lastModified'];

/** What SQL sees of a stored item: its data and its columns (held items are shared and never change, so this is kept). */
function fieldsOf(item: StoredItem): Record<string, unknown> {
  let fields = seen.get(item);
  if (fields === undefined) {
    fields = { ...item.data, id: item.id, name: item.name, version: item.version, created: item.created, lastModified: item.lastModified };
    seen.set(item, fields);
  }
  return fields;
}
const seen = new WeakMap<StoredItem, Record<string, unknown>>();

/**
 * The query as SQL reads an item's fields: `*` skips the columns as it skips hidden fields
 * (evaluate.ts only uses `hidden` there). Every in-memory match of a stored query goes through it,
 * so a policy's targetQuery grants a GET exactly the items it lists.
 */
export function asRows(query: Query): Query {
  return { ...query, hidden: [...(query.hidden ?? []), ...COLUMN_ONLY] };
}

/** Whether the compiled query's WHERE (without a cursor) selects the stored item. */
export function selects(query: Query): (item: StoredItem) => boolean {
  const rows = asRows(query);
  return (item) => matchesQuery(rows, fieldsOf(item), { gvc: item.gvc || undefined });
}

/** Items in (name, gvc) order, kept per list: a store passes the same list while the scope is unchanged. */
function byPlace(items: readonly StoredItem[]): readonly StoredItem[] {
  let sorted = placed.get(items);
  if (sorted === undefined) {
    sorted = [...items].sort((a, b) => compareStrings(a.name, b.name) || compareStrings(a.gvc, b.gvc));
    placed.set(items, sorted);
  }
  return sorted;
}
const placed = new WeakMap<readonly StoredItem[], readonly StoredItem[]>();

/**
 * The page the compiled query returns from `items` (every item of the listed scope): those it and
 * `also` select, after the cursor `after`, in its order, at most `limit`.
 */
export function pageInMemory(query: Query, items: readonly StoredItem[], options: { after?: string; limit: number; also?: (item: StoredItem) => boolean }): StoredItem[] {
  const { by, order } = sortOf(query);
  let from: Position | undefined;
  if (options.after !== undefined) {
    from = decodeCursor(query, options.after);
    // Sorted by name, SQL continues after (name, gvc) whatever key the cursor carries.
    if (by === 'name') from = { ...from, key: { rank: 3, num: null, str: from.name } };
  }
  const matches = selects(query);
  const wanted = (item: StoredItem) => matches(item) && (!options.also || options.also(item));
  if (by === 'name') {
    // The order is (name, gvc): walk the items in it and stop at the page's end.
    const sorted = byPlace(items);
    const page: StoredItem[] = [];
    const step = order === 'desc' ? -1 : 1;
    for (let i = step > 0 ? 0 : sorted.length - 1; i >= 0 && i < sorted.length && page.length < options.limit; i += step) {
      const item = sorted[i];
      if (from && step * (compareStrings(item.name, from.name) || compareStrings(item.gvc, from.gvc)) <= 0) continue;
      if (wanted(item)) page.push(item);
    }
    return page;
  }
  const picked: Array<{ item: StoredItem; at: Position }> = [];
  for (const item of items) {
    if (!wanted(item)) continue;
    const at = positionOf(query, fieldsOf(item), { gvc: item.gvc });
    if (from && comparePositions(query, at, from) <= 0) continue;
    picked.push({ item, at });
  }
  picked.sort((a, b) => comparePositions(query, a.at, b.at));
  return picked.slice(0, options.limit).map((p) => p.item);
}
