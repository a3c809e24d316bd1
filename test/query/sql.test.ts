import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '../../src/errors.js';
import { compileQuery, cursorOf, parseQuery } from '../../src/query/index.js';
import { SqlParams } from '../../src/store/sql.js';
import { BACKENDS, type TestDb } from './db.js';
import { CASES, ROWS } from './fixtures.js';

for (const backend of BACKENDS) {
  describe(`SQL on ${backend.dialect}`, { skip: backend.skip }, () => {
    let db: TestDb;
    before(async () => {
      db = await backend.open();
      await db.insert('workload', ROWS);
      // Another kind and another org's rows must never leak into results.
      await db.insert('identity', [{ item: { name: 'alpha', tags: { team: 'core' } }, gvc: 'prod' }]);
      await db.insert('workload', [{ item: { ...ROWS[0].item, id: 'other-org' }, gvc: 'prod', org: 'other' }]);
    });
    after(() => db?.close());

    for (const [title, body, expected] of CASES) {
      test(title, async () => {
        const rows = await db.run(parseQuery(body, { kind: 'workload' }));
        assert.deepEqual(
          rows.map((r) => r.item.name),
          expected,
        );
      });
    }

    test('rows do not carry links, and the query reads them back whole', async () => {
      const [row] = await db.run(parseQuery({ spec: { terms: [{ property: 'name', value: 'alpha' }] } }, { kind: 'workload' }));
      const { links: _links, ...stored } = ROWS[0].item;
      assert.deepEqual(row, { item: stored, gvc: 'prod' });
    });

    test('an invalid cursor is a 400', () => {
      const query = parseQuery(undefined, { kind: 'workload' });
      const other = parseQuery({ spec: { sort: { by: 'version' } } }, { kind: 'workload' });
      const bad = [
        'not base64!',
        Buffer.from('{"a":1}').toString('base64url'),
        Buffer.from(JSON.stringify(['name', 'asc', 9, null, 'x', 'n', ''])).toString('base64url'),
        cursorOf(other, { name: 'a', version: 1 }),
      ];
      for (const cursor of bad) {
        assert.throws(
          () => compileQuery(query, new SqlParams(backend.dialect), { org: 'acme', after: cursor }),
          (err) => err instanceof ApiError && err.status === 400,
          cursor,
        );
      }
      // A cursor of the wrong type for a column sort.
      const byVersion = Buffer.from(JSON.stringify(['version', 'asc', 3, null, 'x', 'n', ''])).toString('base64url');
      assert.throws(() => compileQuery(other, new SqlParams(backend.dialect), { org: 'acme', after: byVersion }), ApiError);
    });
  });
}
