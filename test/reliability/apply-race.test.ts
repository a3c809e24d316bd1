// Apply (PUT on a collection) under a race: 20 clients apply and delete one name for ten seconds.
// Whatever the interleaving, every apply ends in 200 or 201 (the item is created or replaced) and
// every delete in 202 or 404; never a 404 or 409 for an apply, never a 500.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const CLIENTS = 20;
const RACE_MS = 10_000;

forEachBackend('apply races deletes of the same name', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'prod' })).status, 201);
  });
  after(() => k.close());

  for (const [what, collection, item] of [
    ['an org-scoped kind', '/org/acme/secret', '/org/acme/secret/contested'],
    ['a gvc-scoped kind', '/org/acme/gvc/prod/identity', '/org/acme/gvc/prod/identity/contested'],
  ]) {
    test(`${what}: every apply answers 200 or 201, every delete 202 or 404`, async () => {
      const body = (n: number) => (collection.endsWith('secret') ? { name: 'contested', type: 'opaque', data: { payload: `v${n}`, encoding: 'plain' } } : { name: 'contested', tags: { n: String(n) } });
      const seen: Record<string, number> = {};
      const wrong: string[] = [];
      const deadline = Date.now() + RACE_MS / 2;
      await Promise.all(
        Array.from({ length: CLIENTS }, async (_, client) => {
          for (let n = 0; Date.now() < deadline; n++) {
            const applying = (client + n) % 3 !== 0;
            const res = applying ? await k.call('PUT', collection, body(n)) : await k.call('DELETE', item);
            const key = `${applying ? 'apply' : 'delete'} ${res.status}`;
            seen[key] = (seen[key] ?? 0) + 1;
            if (applying ? ![200, 201].includes(res.status) : ![202, 404].includes(res.status)) wrong.push(`${key}: ${res.raw.slice(0, 300)}`);
          }
        }),
      );
      assert.deepEqual(wrong.slice(0, 5), [], JSON.stringify(seen));
      assert.ok((seen['apply 201'] ?? 0) > 1 && (seen['delete 202'] ?? 0) > 1, `the race created and deleted the item more than once: ${JSON.stringify(seen)}`);
    });
  }
});
