// Tag terms must be index lookups on resource_tags_lookup on both backends (the query bench reads 1M rows).
// 100k workloads, so the planners cost the choice as they would in production.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { parseQuery } from '../../src/query/index.js';
import { BACKENDS, ORG, type TestDb } from './db.js';

const N = 100_000;
const tagQuery = (op: string, tag: string, value?: string) => parseQuery({ spec: { terms: [{ op, tag, value }] } }, { kind: 'workload' });

async function fill(db: TestDb): Promise<void> {
  const org = `'${ORG}'`;
  if (db.dialect === 'sqlite') {
    await db.raw(`WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ${N - 1})
      INSERT INTO resources SELECT ${org}, 'workload', 'g' || (i % 10), printf('n%06d', i), 'id' || i, 1 + i % 5,
        '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', json_object('name', printf('n%06d', i), 'spec', json_object('x', i % 7)) FROM s`);
    await db.raw(`INSERT INTO resource_tags SELECT id, org, kind, gvc, name, 'team', CASE WHEN substr(id, 3) % 1000 = 7 THEN 'rare' ELSE 'common' END FROM resources`);
    await db.raw(`INSERT INTO resource_tags SELECT id, org, kind, gvc, name, 'pager', 'on' FROM resources WHERE substr(id, 3) % 1000 = 7`);
  } else {
    await db.raw(`INSERT INTO resources SELECT ${org}, 'workload', 'g' || (i % 10), 'n' || lpad(i::text, 6, '0'), 'id' || i, 1 + i % 5,
        '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', jsonb_build_object('name', 'n' || lpad(i::text, 6, '0'), 'spec', jsonb_build_object('x', i % 7))
      FROM generate_series(0, ${N - 1}) i`);
    await db.raw(`INSERT INTO resource_tags SELECT id, org, kind, gvc, name, 'team', CASE WHEN substr(id, 3)::int % 1000 = 7 THEN 'rare' ELSE 'common' END FROM resources`);
    await db.raw(`INSERT INTO resource_tags SELECT id, org, kind, gvc, name, 'pager', 'on' FROM resources WHERE substr(id, 3)::int % 1000 = 7`);
    await db.raw(`INSERT INTO resource_tags SELECT id, org, kind, gvc, name, 'tier', CASE WHEN substr(id, 3)::int % 100 = 3 THEN 'gold' ELSE 'silver' END FROM resources`);
    await db.raw('ANALYZE resources');
    await db.raw('ANALYZE resource_tags');
  }
}

for (const backend of BACKENDS) {
  describe(`query plans on ${backend.dialect} (${N} rows)`, { skip: backend.skip }, () => {
    let db: TestDb;
    before(async () => {
      db = await backend.open();
      await fill(db);
    });
    after(() => db?.close());

    test('tag equality searches resource_tags_lookup by (org, kind, key, value)', async () => {
      const plan = await db.explain(tagQuery('=', 'team', 'rare'));
      if (backend.dialect === 'sqlite') {
        assert.match(plan, /SEARCH t USING COVERING INDEX resource_tags_lookup \(org=\? AND kind=\? AND key=\? AND value=\?\)/, plan);
        // The matching (name, gvc) pairs then probe the primary key; no scan of either table.
        assert.doesNotMatch(plan, /SCAN (r|t)\b/, plan);
      } else {
        assert.match(plan, /Index (Only )?Scan using resource_tags_lookup on resource_tags t/, plan);
        assert.match(plan, /Index Cond: \(\(org = .+\) AND \(kind = .+\) AND \(key = .+\) AND \(value = .+\)\)/, plan);
        assert.doesNotMatch(plan, /Seq Scan/, plan);
      }
    });

    test('a page of a 1% tag equality is read from the tag index in name order', { skip: backend.dialect === 'sqlite' && 'SQLite runs the tag subquery once' }, async () => {
      const plan = await db.explain(tagQuery('=', 'tier', 'gold'), { limit: 101 });
      // A join from the tag index probing resources, not a semi-join merged with a scan of the name index (100 rows read per match).
      assert.match(plan, /Nested Loop/, plan);
      assert.match(plan, /Index (Only )?Scan using resource_tags_lookup on resource_tags t/, plan);
      assert.doesNotMatch(plan, /Semi Join/, plan);
    });

    test('a selective tag query reads only its matches', async () => {
      const query = tagQuery('=', 'team', 'rare');
      const started = performance.now();
      const rows = await db.run(query, { limit: 100 });
      const ms = performance.now() - started;
      assert.equal(rows.length, 100);
      // Generous bound: a scan of 100k rows with a per-row probe takes ~100 ms here; the index lookup ~1 ms.
      assert.ok(ms < 50, `${ms.toFixed(1)} ms`);
    });

    test('tag exists and !exists on a rare key use the index too', async () => {
      for (const op of ['exists', '!exists']) {
        const plan = await db.explain(tagQuery(op, 'pager'));
        assert.match(plan, /resource_tags_lookup/, `${op}\n${plan}`);
      }
    });
  });
}
