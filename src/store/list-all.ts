// Reading every item of a kind: what reconcilers, the registry and a few routes need, bounded.
import type { Store, StoredItem } from './types.js';

/** The most items of one kind read at once (per org, GVC or parent). */
export const LIST_LIMIT = 10_000;

/** The items of a kind in an org (and GVC, when given; and names with `prefix`), read outside any transaction (committed data). */
export async function listAll(store: Store, org: string, kind: string, gvc?: string, prefix?: string): Promise<StoredItem[]> {
  return store.list({
    org,
    kind,
    gvc,
    limit: LIST_LIMIT,
    build: (params) => ({
      where: prefix === undefined ? '1 = 1' : `r.name >= ${params.add(prefix)} AND r.name < ${params.add(prefix + '~')}`,
      orderBy: 'r.gvc, r.name',
    }),
  });
}
