import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cursorOf, matchesQuery, parseQuery, sortItems, type Query } from '../../src/query/index.js';
import { comparePositions, positionOf } from '../../src/query/sort.js';
import { BACKENDS, type Row, type TestDb } from './db.js';

const GVCS = ['g-a', 'g-b', 'g-c'];
const SCORES: unknown[] = [7, -2.5, 'seven', true, null, 'Seven', false, 100, undefined];

// 87 names in each of 3 GVCs: 261 items, every name three times, so gvc has to break ties.
function rows(count: number, prefix = 'n'): Row[] {
  return Array.from({ length: count }, (_, i) => {
    const score = SCORES[i % SCORES.length];
    return {
      gvc: GVCS[i % 3],
      item: {
        id: `${prefix}-${i}`,
        kind: 'workload',
        name: `${prefix}${String(Math.floor(i / 3)).padStart(3, '0')}`,
        version: (i % 7) + 1,
        created: new Date(Date.UTC(2025, 0, 1) + (i % 11) * 3_600_000).toISOString(),
        tags: i % 4 === 0 ? { team: 'core' } : { team: 'edge', n: String(i % 13) },
        spec: score === undefined ? {} : { score },
      },
    };
  });
}

const QUERIES: unknown[] = [
  undefined,
  { spec: { sort: { by: 'name', order: 'desc' } } },
  { spec: { sort: { by: 'version', order: 'asc' } } },
  { spec: { sort: { by: 'created', order: 'desc' } } },
  { spec: { sort: { by: 'spec.score', order: 'asc' } } },
  { spec: { sort: { by: 'spec.score', order: 'desc' } } },
  { spec: { terms: [{ op: '=', tag: 'team', value: 'edge' }], sort: { by: 'tags.n', order: 'asc' } } },
  { spec: { match: 'any', terms: [{ op: '>', property: 'version', value: 5 }, { op: '=', rel: 'gvc', value: 'g-b' }], sort: { by: 'id' } } },
];

async function allPages(db: TestDb, query: Query, limit: number, between?: (page: number) => Promise<void>): Promise<Row[]> {
  const seen: Row[] = [];
  let cursor: string | undefined;
  for (let page = 0; ; page++) {
    // A cursor that does not advance must fail the test, not hang it.
    assert.ok(page < 100, 'pagination does not advance');
    const rows = await db.run(query, { after: cursor, limit });
    seen.push(...rows);
    if (rows.length < limit) return seen;
    const last = rows[rows.length - 1];
    cursor = cursorOf(query, last.item, { gvc: last.gvc });
    await between?.(page);
  }
}

const key = (r: Row) => `${r.gvc}/${r.item.name}`;

for (const backend of BACKENDS) {
  describe(`keyset pagination on ${backend.dialect}`, { skip: backend.skip }, () => {
    let db: TestDb;
    const initial = rows(261);
    before(async () => {
      db = await backend.open();
      await db.insert('workload', initial);
    });
    after(() => db?.close());

    for (const body of QUERIES) {
      test(`pages of 25 = one page = memory: ${JSON.stringify(body)}`, async () => {
        const query = parseQuery(body, { kind: 'workload' });
        const paged = (await allPages(db, query, 25)).map(key);
        const whole = (await db.run(query, { limit: 1000 })).map(key);
        const gvcs = new Map(initial.map((r) => [r.item, r.gvc]));
        const expected = sortItems(
          query,
          initial.filter((r) => matchesQuery(query, r.item, r)).map((r) => r.item),
          (item) => ({ gvc: gvcs.get(item) }),
        ).map((item) => `${gvcs.get(item)}/${item.name}`);
        assert.ok(expected.length > 25);
        assert.deepEqual(whole, expected);
        assert.deepEqual(paged, expected);
      });
    }

    test('inserts between pages: nothing skipped or repeated, order kept', async () => {
      for (const body of [undefined, { spec: { sort: { by: 'spec.score', order: 'desc' } } }, { spec: { sort: { by: 'version' } } }]) {
        const query = parseQuery(body, { kind: 'workload' });
        const prefix = `x${Math.random().toString(36).slice(2, 6)}`;
        const extra = rows(120, prefix);
        const seen = await allPages(db, query, 20, async (page) => {
          // New rows land both before and after the cursor.
          await db.insert('workload', extra.slice(page * 10, page * 10 + 10));
        });
        const keys = seen.map(key);
        assert.equal(new Set(keys).size, keys.length, 'no row twice');
        const got = new Set(keys);
        for (const r of initial) assert.ok(got.has(key(r)), `missing ${key(r)}`);
        const positions = seen.map((r) => positionOf(query, r.item, { gvc: r.gvc }));
        for (let i = 1; i < positions.length; i++) assert.ok(comparePositions(query, positions[i - 1], positions[i]) < 0);
        await db.clear();
        await db.insert('workload', initial);
      }
    });
  });
}
