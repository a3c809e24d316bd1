// Keyset cursors: the position of the last item on a page, bound to the sort it was taken under.
import { ApiError } from '../errors.js';
import { holdsUnstorable } from '../storable.js';
import { COLUMNS } from './paths.js';
import { positionOf, type Position, type SortKey } from './sort.js';
import { sortOf, type Query, type QueryPlace } from './types.js';

/** An opaque base64url cursor for continuing after `item`. */
export function cursorOf(query: Query, item: Record<string, unknown>, place: QueryPlace = {}): string {
  const { by, order } = sortOf(query);
  const { key, name, gvc } = positionOf(query, item, place);
  return Buffer.from(JSON.stringify([by, order, key.rank, key.num, key.str, name, gvc])).toString('base64url');
}

/** The position a cursor stands for; 400 when it is malformed or was taken under another sort. */
export function decodeCursor(query: Query, cursor: string): Position {
  let parts: unknown;
  try {
    parts = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw invalidCursor();
  }
  if (!Array.isArray(parts) || parts.length !== 7 || holdsUnstorable(parts)) throw invalidCursor();
  const [by, order, rank, num, str, name, gvc] = parts as unknown[];
  const sort = sortOf(query);
  if (by !== sort.by || order !== sort.order) throw invalidCursor('the cursor belongs to a query with another sort');
  if (typeof name !== 'string' || typeof gvc !== 'string') throw invalidCursor();
  const key = { rank, num, str };
  if (!validKey(key)) throw invalidCursor();
  // Sorted by a column other than name (which orders by name alone), the key is of the column's type.
  const column = COLUMNS.get(sort.by);
  if (column && sort.by !== 'name' && key.rank !== (column.type === 'number' ? 2 : 3)) throw invalidCursor();
  return { key, name, gvc };
}

function validKey(key: { rank: unknown; num: unknown; str: unknown }): key is SortKey {
  const { rank, num, str } = key;
  if (rank === 0) return num === null && str === null;
  if (rank === 1) return (num === 0 || num === 1) && str === null;
  if (rank === 2) return typeof num === 'number' && Number.isFinite(num) && str === null;
  if (rank === 3) return num === null && typeof str === 'string';
  return false;
}

export function invalidCursor(message = 'the page cursor is not valid'): ApiError {
  return ApiError.badRequest(message, [{ path: 'cursor', message }]);
}
