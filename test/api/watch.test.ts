// The change stream: server-sent events of the changes a caller may view, resumable by sequence
// number, with every change seen exactly once, across two Keel instances on one database.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { App } from '../../src/server/app.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse } from '../support/sse.js';

async function listen(app: App): Promise<string> {
  await app.core.listen({ host: '127.0.0.1', port: 0 });
  const address = app.core.server.address() as { port: number };
  return `http://127.0.0.1:${address.port}`;
}

forEachBackend('watch', (backend) => {
  let k: TestKeel;
  let second: App;
  let base: string;
  let secondBase: string;
  before(async () => {
    k = await startKeel(backend);
    base = await listen(k.app);
    // SQLite is one process's store; on PostgreSQL the second instance is a second "process".
    second = backend === 'postgres' ? (await k.reopen()).app : k.app;
    secondBase = backend === 'postgres' ? await listen(second) : base;
  });
  after(() => k.close());

  const auth = () => ({ authorization: `Bearer ${k.token}` });
  const post = (app: App, url: string, body: unknown) =>
    app.core.inject({ method: 'POST', url, headers: { ...auth(), 'content-type': 'application/json' }, payload: JSON.stringify(body) });
  const patch = (app: App, url: string, body: unknown) =>
    app.core.inject({ method: 'PATCH', url, headers: { ...auth(), 'content-type': 'application/json' }, payload: JSON.stringify(body) });

  test('a client that reconnects with Last-Event-ID sees every change exactly once, in order', async () => {
    const stream = await openSse(`${base}/org/acme/-watch?kind=group`, auth());
    const expected: string[] = [];
    for (let i = 0; i < 6; i++) {
      assert.equal((await post(i % 2 ? second : k.app, '/org/acme/group', { name: `w${i}` })).statusCode, 201);
      expected.push(`create w${i}`);
    }
    const firstBatch = await stream.take(4);
    stream.close();
    const last = firstBatch[firstBatch.length - 1].id!;
    // Changes made while the client is away, on both instances.
    for (let i = 0; i < 4; i++) {
      assert.equal((await patch(i % 2 ? k.app : second, `/org/acme/group/w${i}`, { description: `changed ${i}` })).statusCode, 200);
      expected.push(`edit w${i}`);
    }
    assert.equal((await post(k.app, '/org/acme/gvc', { name: 'not-a-group' })).statusCode, 201);
    const resumed = await openSse(`${secondBase}/org/acme/-watch?kind=group`, { ...auth(), 'last-event-id': last });
    const rest = await resumed.take(expected.length - firstBatch.length);
    resumed.close();
    const seen = [...firstBatch, ...rest];
    assert.deepEqual(seen.map((e) => `${e.event} ${e.data.object.name}`), expected);
    const ids = seen.map((e) => Number(e.id));
    assert.deepEqual(ids, [...ids].sort((a, b) => a - b));
    assert.equal(new Set(ids).size, ids.length);
    assert.ok(seen.every((e) => e.data.kind === 'group'));
  });

  test('a watcher sees only what it may view', async () => {
    assert.equal((await post(k.app, '/org/acme/serviceaccount', { name: 'watcher' })).statusCode, 201);
    const key = JSON.parse((await post(k.app, '/org/acme/serviceaccount/watcher/-addKey', { description: 'w' })).body).key;
    const policy = { name: 'watch-one', targetKind: 'group', targetLinks: ['//group/visible'], bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/watcher'] }] };
    assert.equal((await post(k.app, '/org/acme/policy', policy)).statusCode, 201);
    const stream = await openSse(`${base}/org/acme/-watch`, { authorization: `Bearer ${key}` });
    assert.equal((await post(second, '/org/acme/group', { name: 'hidden' })).statusCode, 201);
    assert.equal((await post(k.app, '/org/acme/secret', { name: 'hidden-secret', type: 'opaque', data: { payload: 'x' } })).statusCode, 201);
    assert.equal((await post(second, '/org/acme/group', { name: 'visible' })).statusCode, 201);
    const [first] = await stream.take(1);
    stream.close();
    assert.equal(first.event, 'create');
    assert.equal(first.data.object.name, 'visible');
  });

  test('watch needs credentials and membership; a bad Last-Event-ID is 400', async () => {
    assert.equal((await fetch(`${base}/org/acme/-watch`)).status, 401);
    const bad = await fetch(`${base}/org/acme/-watch`, { headers: { ...auth(), 'last-event-id': 'yesterday' } });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { code: string }).code, 'bad_request');
    assert.equal((await fetch(`${base}/org/acme/-watch?kind=nope`, { headers: auth() })).status, 400);
  });
});
