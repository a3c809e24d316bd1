// The one total order of query results, shared by SQL (compile.ts) and memory:
// sort key, then name, then gvc; `desc` reverses all three.
// A sort key orders absent values (missing, null, objects, arrays) first, then booleans (false < true),
// then numbers, then strings (bytewise).
import { checkedSegments, valueAt } from './paths.js';
import { sortOf, type Query, type QueryPlace } from './types.js';
import { compareStrings } from './values.js';

export interface SortKey {
  rank: 0 | 1 | 2 | 3;
  /** The number, or 0/1 for a boolean; null otherwise. */
  num: number | null;
  /** The string; null otherwise. */
  str: string | null;
}

function sortKeyOf(value: unknown): SortKey {
  if (typeof value === 'boolean') return { rank: 1, num: Number(value), str: null };
  if (typeof value === 'number') return { rank: 2, num: value, str: null };
  if (typeof value === 'string') return { rank: 3, num: null, str: value };
  return { rank: 0, num: null, str: null };
}

function compareSortKeys(a: SortKey, b: SortKey): number {
  if (a.rank !== b.rank) return a.rank - b.rank;
  if (a.num !== null && b.num !== null && a.num !== b.num) return a.num < b.num ? -1 : 1;
  if (a.str !== null && b.str !== null) return compareStrings(a.str, b.str);
  return 0;
}

/** Where an item stands in the query's order: its sort key, name and gvc. */
export interface Position {
  key: SortKey;
  name: string;
  gvc: string;
}

export function positionOf(query: Query, item: Record<string, unknown>, place: QueryPlace = {}): Position {
  const { by } = sortOf(query);
  return {
    key: sortKeyOf(valueAt(item, checkedSegments(by))),
    name: typeof item.name === 'string' ? item.name : '',
    gvc: place.gvc ?? '',
  };
}

export function comparePositions(query: Query, a: Position, b: Position): number {
  const c = compareSortKeys(a.key, b.key) || compareStrings(a.name, b.name) || compareStrings(a.gvc, b.gvc);
  return sortOf(query).order === 'desc' ? -c : c;
}

/** Items in the query's order; `placeOf` gives each item's GVC (the last tie-breaker). */
export function sortItems<T extends Record<string, unknown>>(query: Query, items: T[], placeOf: (item: T) => QueryPlace = () => ({})): T[] {
  return items
    .map((item) => ({ item, position: positionOf(query, item, placeOf(item)) }))
    .sort((a, b) => comparePositions(query, a.position, b.position))
    .map((entry) => entry.item);
}
