import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cursorOf, matchesQuery, parseQuery, sortItems } from '../../src/query/index.js';
import { CASES, ROWS } from './fixtures.js';

const gvcOf = new Map(ROWS.map((r) => [r.item, r.gvc ?? '']));

for (const [title, body, expected] of CASES) {
  test(`in memory: ${title}`, () => {
    const query = parseQuery(body, { kind: 'workload' });
    const hits = ROWS.filter((r) => matchesQuery(query, r.item, { gvc: r.gvc }));
    const names = sortItems(query, hits.map((r) => r.item), (item) => ({ gvc: gvcOf.get(item) })).map((i) => i.name);
    assert.deepEqual(names, expected);
  });
}

test('org-scoped items have no gvc rel', () => {
  const item = { name: 'x', tags: {} };
  assert.equal(matchesQuery(parseQuery({ spec: { terms: [{ rel: 'gvc', op: '!exists' }] } }, { kind: 'policy' }), item, {}), true);
  assert.equal(matchesQuery(parseQuery({ spec: { terms: [{ rel: 'gvc', op: '=', value: '' }] } }, { kind: 'policy' }), item, { gvc: '' }), false);
});

test('sortItems breaks ties by name, then gvc', () => {
  const query = parseQuery({ spec: { sort: { by: 'version', order: 'asc' } } }, { kind: 'workload' });
  const a = { name: 'a', version: 1 };
  const b1 = { name: 'b', version: 1 };
  const b2 = { name: 'b', version: 1 };
  const places = new Map([
    [a, 'z'],
    [b1, 'y'],
    [b2, 'x'],
  ]);
  assert.deepEqual(sortItems(query, [b1, b2, a], (i) => ({ gvc: places.get(i) })), [a, b2, b1]);
});

test('cursorOf is opaque base64url', () => {
  const query = parseQuery(undefined, { kind: 'workload' });
  assert.match(cursorOf(query, { name: 'a' }, { gvc: 'g' }), /^[A-Za-z0-9_-]+$/);
});
