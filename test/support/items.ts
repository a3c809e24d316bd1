import { randomUUID } from 'node:crypto';
import type { StoredItem } from '../../src/store/types.js';

/** A stored item as the store's own tests write one: a secret in org `o`, created now, unless `extra` says otherwise. */
export function storedItem(name: string, extra: Partial<StoredItem> = {}): StoredItem {
  const now = new Date().toISOString();
  return { org: 'o', kind: 'secret', gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: { name, tags: {} }, ...extra };
}
