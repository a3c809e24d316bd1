// Consistent reads across processes: a read that starts after any process acknowledged a write
// sees it (GET, list, query, history, -reveal, keys and policies), on PostgreSQL with a second
// Keel process whose read cache must hear of the first one's writes, also after its database
// connections are killed; and a fuzz of random writes and reads through both processes.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { PG_TEST_URL } from '../support/postgres.js';
import { spawnKeel, type KeelProcess } from '../support/spawn-keel.js';
import { waitFor } from '../support/wait.js';

forEachBackend('consistent reads across processes', (backend) => {
  let k: TestKeel;
  let base: string;
  let second: KeelProcess | undefined;
  const appName = `keel-rc-${randomBytes(4).toString('hex')}`;
  before(async () => {
    k = await startKeel(backend);
    base = await k.listen();
    if (backend === 'postgres') {
      const url = new URL(k.config.databaseUrl!);
      url.searchParams.set('application_name', appName);
      second = await spawnKeel(url.toString());
    }
  });
  after(async () => {
    await second?.stop();
    await k.close();
  });

  /** The process writes go through, and the other one reads go through (the same on SQLite). */
  const writer = () => base;
  const reader = () => second?.base ?? base;

  const call = async (at: string, method: string, path: string, body?: unknown, token = k.token) => {
    const res = await fetch(at + path, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const ok = async (at: string, method: string, path: string, body?: unknown, token?: string) => {
    const res = await call(at, method, path, body, token);
    assert.ok(res.status < 300, `${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };

  test('GET, list, query and history on the other process see each acknowledged change at once', async () => {
    await ok(writer(), 'POST', '/org/acme/group', { name: 'ryw', description: 'v0', tags: { step: '0' } });
    for (let i = 1; i <= 15; i++) {
      // The reader holds the previous state in memory before each change.
      assert.equal((await ok(reader(), 'GET', '/org/acme/group/ryw')).description, `v${i - 1}`);
      await ok(writer(), 'PATCH', '/org/acme/group/ryw', { description: `v${i}`, tags: { step: String(i) } });
      assert.equal((await ok(reader(), 'GET', '/org/acme/group/ryw')).description, `v${i}`);
      const listed = (await ok(reader(), 'GET', '/org/acme/group')).items.find((g: any) => g.name === 'ryw');
      assert.equal(listed.description, `v${i}`);
      const found = await ok(reader(), 'POST', '/org/acme/group/-query', { kind: 'group', spec: { match: 'all', terms: [{ tag: 'step', value: String(i) }] } });
      assert.deepEqual(found.items.map((g: any) => g.name), ['ryw']);
      const history = await ok(reader(), 'GET', '/org/acme/group/ryw/-history');
      assert.equal(history.items[0].resource.description, `v${i}`);
    }
  });

  test('a delete, and a re-create of the name, are seen at once on the other process', async () => {
    for (let i = 0; i < 5; i++) {
      await ok(writer(), 'POST', '/org/acme/group', { name: 'gone', description: `life ${i}` });
      assert.equal((await ok(reader(), 'GET', '/org/acme/group/gone')).description, `life ${i}`);
      await ok(writer(), 'DELETE', '/org/acme/group/gone');
      assert.equal((await call(reader(), 'GET', '/org/acme/group/gone')).status, 404);
    }
  });

  test('-reveal on the other process shows the secret as last written', async () => {
    await ok(writer(), 'POST', '/org/acme/secret', { name: 'rc-secret', type: 'opaque', data: { payload: 'one', encoding: 'plain' } });
    assert.equal((await ok(reader(), 'GET', '/org/acme/secret/rc-secret/-reveal')).data.payload, 'one');
    await ok(writer(), 'PATCH', '/org/acme/secret/rc-secret', { data: { payload: 'two', encoding: 'plain' } });
    assert.equal((await ok(reader(), 'GET', '/org/acme/secret/rc-secret/-reveal')).data.payload, 'two');
  });

  /** A service account with a key that may view groups, its policy named `${name}-view`. */
  const viewer = async (name: string) => {
    await ok(writer(), 'POST', '/org/acme/serviceaccount', { name });
    await ok(writer(), 'POST', '/org/acme/policy', { name: `${name}-view`, targetKind: 'group', targetLinks: ['//group/ryw'], bindings: [{ permissions: ['view'], principalLinks: [`//serviceaccount/${name}`] }] });
    const key = await ok(writer(), 'POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'rc' });
    return { token: key.key as string, keyName: key.name as string };
  };

  test('a revoked key is refused at once by the other process', async () => {
    const { token, keyName } = await viewer('rc-revoked');
    assert.equal((await call(reader(), 'GET', '/org/acme/group/ryw', undefined, token)).status, 200);
    await ok(writer(), 'PATCH', '/org/acme/serviceaccount/rc-revoked', { '$drop/keys': [keyName] });
    assert.equal((await call(reader(), 'GET', '/org/acme/group/ryw', undefined, token)).status, 401);
  });

  test('a policy that no longer grants view is obeyed at once by the other process', async () => {
    const { token } = await viewer('rc-policy');
    assert.equal((await call(reader(), 'GET', '/org/acme/group/ryw', undefined, token)).status, 200);
    await ok(writer(), 'DELETE', '/org/acme/policy/rc-policy-view');
    assert.equal((await call(reader(), 'GET', '/org/acme/group/ryw', undefined, token)).status, 403);
  });

  test('after its database connections are killed the other process never answers a stale read', { skip: backend !== 'postgres' }, async () => {
    await ok(writer(), 'POST', '/org/acme/group', { name: 'cut', description: 'before' });
    assert.equal((await ok(reader(), 'GET', '/org/acme/group/cut')).description, 'before');
    const admin = new pg.Client({ connectionString: PG_TEST_URL });
    await admin.connect();
    try {
      for (let round = 0; round < 3; round++) {
        const { rows } = await admin.query('SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = $1', [appName]);
        assert.ok(rows.length > 0, 'the second process had connections to kill');
        await ok(writer(), 'PATCH', '/org/acme/group/cut', { description: `after ${round}` });
        // Each answer is the acknowledged state or an error, never the state before.
        const seen = await waitFor(
          'the other process to answer again',
          async () => {
            const res = await call(reader(), 'GET', '/org/acme/group/cut');
            if (res.status === 200) assert.equal(res.body.description, `after ${round}`);
            return res.status;
          },
          (status) => status === 200,
        );
        assert.equal(seen, 200);
      }
    } finally {
      await admin.end();
    }
  });

  test('fuzz: random writes through both processes, random reads through both, each read as last acknowledged', async () => {
    const places = [writer(), reader()];
    const names = ['f0', 'f1', 'f2', 'f3'];
    const model = new Map<string, string | undefined>();
    let seed = 0x2340;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    for (let step = 0; step < 120; step++) {
      const name = names[rand(names.length)];
      const at = places[rand(2)];
      const now = model.get(name);
      if (now === undefined) {
        await ok(at, 'POST', '/org/acme/group', { name, description: `s${step}` });
        model.set(name, `s${step}`);
      } else if (rand(4) === 0) {
        await ok(at, 'DELETE', `/org/acme/group/${name}`);
        model.set(name, undefined);
      } else {
        await ok(at, 'PATCH', `/org/acme/group/${name}`, { description: `s${step}` });
        model.set(name, `s${step}`);
      }
      // Reads in parallel through both processes, each checked against the model.
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          const read = names[rand(names.length)];
          const res = await call(places[rand(2)], 'GET', `/org/acme/group/${read}`);
          const expected = model.get(read);
          if (expected === undefined) assert.equal(res.status, 404, `step ${step}: ${read} was deleted`);
          else assert.equal(res.body.description, expected, `step ${step}: ${read}`);
        }),
      );
    }
  });
});
