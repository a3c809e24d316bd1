// Random items and random queries: every backend returns exactly what matchesQuery + sortItems
// select in memory, in the same order, also when read page by page through cursors.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { cursorOf, matchesQuery, parseQuery, sortItems } from '../../src/query/index.js';
import { DIALECTS } from '../../src/query/dialects.js';
import { SqlParams } from '../../src/store/sql.js';
import { isNumericString } from '../../src/query/values.js';
import { BACKENDS, type Row, type TestDb } from './db.js';

const STRINGS = ['', 'a', 'A', 'ab', 'B', 'abc', 'x-y', '10', '9', '-1.5', '0.5', '3', 'true', 'false', 'é', 'Z', '2025-01-01T00:00:00.000Z', '2025-06-01T12:00:00.000Z'];
const scalar = fc.oneof(
  fc.constantFrom(...STRINGS),
  fc.integer({ min: -20, max: 20 }),
  fc.constantFrom(0.5, -1.5, 2.25, 1e21, 0.1, 10),
  fc.boolean(),
);
const stored = fc.oneof({ weight: 6, arbitrary: scalar }, fc.constant(null), fc.constant([1]), fc.constant({ a: 1 }));
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined, freq: 3 });
// Names of Object.prototype members: as keys, tags, properties and sorts they are plain names.
const PROTO = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'];
/** An object whose keys may be prototype member names, all own data properties (as JSON.parse makes them). */
const ownRecord = (keys: string[], value: fc.Arbitrary<unknown>) =>
  fc.dictionary(fc.constantFrom(...keys), value, { maxKeys: 3 }).map((d) => JSON.parse(JSON.stringify(d)) as Record<string, unknown>);

const itemArb = fc.record({
  gvc: fc.constantFrom('g1', 'g2'),
  name: fc.constantFrom('aa', 'ab', 'b1', 'b2', 'c', 'zz', 'q0', 'q1'),
  version: fc.integer({ min: 1, max: 4 }),
  created: fc.constantFrom('2024-12-31T23:00:00.000Z', '2025-01-01T00:00:00.000Z', '2025-06-01T12:00:00.000Z'),
  description: maybe(fc.constantFrom('Hello', 'hello world', 'ABC', '')),
  tags: ownRecord(['a', 'b', 'c', ...PROTO], scalar),
  spec: fc.record(
    {
      n: stored,
      s: stored,
      nested: fc.record({ v: stored }, { requiredKeys: [] }),
      identityLink: fc.constantFrom('/org/acme/gvc/g1/identity/web', '/org/acme/gvc/g2/identity/api'),
      proto: ownRecord(PROTO, stored),
    },
    { requiredKeys: [] },
  ),
  // Hidden (the query kind below declares it): a string like the shown ones, or an object.
  data: maybe(fc.oneof(fc.constantFrom(...STRINGS), fc.record({ v: stored }, { requiredKeys: [] }))),
});

/** The kind queries run on: `data` is hidden, as secret data is. */
const KIND = { kind: 'workload', hidden: ['data'] };

// Names are unique per GVC, as in the store.
const itemsArb = fc.uniqueArray(itemArb, { maxLength: 14, selector: (i) => `${i.gvc}/${i.name}` });

const termValue = fc.oneof(
  fc.constantFrom(...STRINGS, '2025-01-01T00:00:00Z', '2025-01-01T01:00:00+01:00', 'web', '/org/acme/gvc/g2/identity/api', 'g1', 'G'),
  fc.integer({ min: -20, max: 20 }),
  fc.constantFrom(0.5, 2.25, 1e21, 0.1),
  fc.boolean(),
);
const op = fc.constantFrom('=', '!=', '>', '>=', '<', '<=', '~', 'exists', '!exists');
const PROPERTIES = [
  'name', 'version', 'created', 'lastModified', 'id', 'description', 'spec.n', 'spec.s', 'spec.nested.v', 'spec.nested', 'tags.a', 'spec', '*', 'missing.x',
  ...PROTO, ...PROTO.map((p) => `spec.proto.${p}`), ...PROTO.map((p) => `tags.${p}`), 'spec.proto', 'spec.constructor.name',
];
const termArb = fc.oneof(
  fc.record({ op, property: fc.constantFrom(...PROPERTIES), value: termValue }),
  fc.record({ op, tag: fc.constantFrom('a', 'b', 'c', 'z', '*', ...PROTO), value: termValue }),
  fc.record({ op, rel: fc.constantFrom('gvc', 'identity', 'nothing', ...PROTO), value: termValue }),
);
const queryArb = fc.record({
  spec: fc.record(
    {
      match: fc.constantFrom('all', 'any', 'none'),
      terms: fc.array(termArb, { maxLength: 3 }),
      sort: fc.record({ by: fc.constantFrom(...PROPERTIES.filter((p) => p !== '*')), order: fc.constantFrom('asc', 'desc') }),
    },
    { requiredKeys: [] },
  ),
});

function toRows(items: Array<{ gvc: string; created: string; description?: string; data?: unknown }>): Row[] {
  return items.map(({ gvc, description, data, ...rest }, i) => ({
    gvc,
    item: { id: `id${i}`, kind: 'workload', lastModified: rest.created, ...rest, ...(description === undefined ? {} : { description }), ...(data === undefined ? {} : { data }) },
  }));
}

/** The item as a plain read shows it: without the hidden field. */
function shown(item: Record<string, unknown>): Record<string, unknown> {
  const { data: _data, ...rest } = item;
  return rest;
}

for (const backend of BACKENDS) {
  describe(`differential: ${backend.dialect} = memory`, { skip: backend.skip }, () => {
    let db: TestDb;
    before(async () => {
      db = await backend.open();
    });
    after(() => db?.close());

    test('random items, random queries, random page sizes', async () => {
      await fc.assert(
        fc.asyncProperty(itemsArb, queryArb, fc.integer({ min: 1, max: 6 }), async (items, body, pageSize) => {
          const rows = toRows(items);
          await db.clear();
          await db.insert('workload', rows);
          const query = parseQuery(body, KIND);
          const gvcs = new Map(rows.map((r) => [r.item, r.gvc]));
          const expected = sortItems(
            query,
            rows.filter((r) => matchesQuery(query, r.item, r)).map((r) => r.item),
            (item) => ({ gvc: gvcs.get(item) }),
          ).map((item) => `${gvcs.get(item)}/${item.name}`);
          // The hidden field changes nothing: the same items as if it were not stored at all.
          const withoutHidden = rows.filter((r) => matchesQuery(query, shown(r.item), r)).map((r) => `${r.gvc}/${r.item.name}`);
          assert.deepEqual([...expected].sort(), withoutHidden.sort());

          const whole = (await db.run(query)).map((r) => `${r.gvc}/${r.item.name}`);
          assert.deepEqual(whole, expected);

          const paged: string[] = [];
          let cursor: string | undefined;
          for (let pages = 0; ; pages++) {
            // A cursor that does not advance must fail the test, not hang it.
            assert.ok(pages <= rows.length + 1, 'pagination does not advance');
            const page = await db.run(query, { after: cursor, limit: pageSize });
            paged.push(...page.map((r) => `${r.gvc}/${r.item.name}`));
            if (page.length < pageSize) break;
            const last = page[page.length - 1];
            cursor = cursorOf(query, last.item, { gvc: last.gvc });
          }
          assert.deepEqual(paged, expected);
        }),
        { numRuns: 300 },
      );
    });

    test('the SQL numeric-string test agrees with isNumericString', async () => {
      const d = DIALECTS[backend.dialect];
      const strings = fc.sample(fc.stringMatching(/^[-0-9.e +]{0,17}$/), 400).concat(['0', '-0', '01', '1.', '.5', '-', '1.5.2', '123456789012345', '1234567890123456', '1e5']);
      for (const s of strings) {
        const p = new SqlParams(backend.dialect).add(s);
        const from = backend.dialect === 'postgres' ? `(SELECT ${p}::text COLLATE "C" AS s) v` : `(SELECT ${p} AS s) v`;
        const rows = await db.raw(`SELECT CASE WHEN ${d.isNumeric('v.s')} THEN 1 ELSE 0 END AS n FROM ${from}`, [s]);
        assert.equal(Number(rows[0].n) === 1, isNumericString(s), JSON.stringify(s));
      }
    });
  });
}
