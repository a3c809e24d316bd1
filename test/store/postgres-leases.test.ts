// Read leases on PostgreSQL: a process holding one answers reads from memory with no round trip,
// and a write is answered only once every live lease has applied it. A process that stops holds
// writers only until its lease runs out, and once it runs again it answers nothing from before;
// one that shuts down gives its lease back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { buildApp, type App } from '../../src/server/app.js';
import { openStore } from '../../src/store/open.js';
import type { Store } from '../../src/store/types.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { spawnKeel, type KeelProcess } from '../support/spawn-keel.js';
import { waitFor } from '../support/wait.js';

/** The stopped process's lease: short, so that the writes waiting for it are quick. */
const SHORT_LEASE_MS = 600;

forEachBackend('read leases', (backend) => {
  let k: TestKeel;
  let second: { app: App; store: Store };
  let db: pg.Client;
  /** The second store's connections carry this name, so only they are cut. */
  const appName = `keel_lease_${randomBytes(4).toString('hex')}`;
  before(async () => {
    k = await startKeel(backend, 'acme', { allowSnapshots: true });
    const url = new URL(k.config.databaseUrl!);
    url.searchParams.set('application_name', appName);
    const store = await openStore({ dataDir: k.config.dataDir, databaseUrl: url.toString() });
    second = { app: await buildApp(k.config, store, { logger: false }), store };
    db = new pg.Client({ connectionString: k.config.databaseUrl });
    await db.connect();
  });
  after(async () => {
    await db.end();
    await second.app.core.close();
    await second.app.audit.close();
    await second.store.close();
    await k.close();
  });

  const get = async (app: App, url: string) => {
    const res = await app.core.inject({ method: 'GET', url, headers: { authorization: `Bearer ${k.token}` } });
    return { status: res.statusCode, body: JSON.parse(res.body) };
  };
  /** Reads through the store until its lease holds: a read then needs no catch-up (the answer is not a promise). */
  const leaseHeld = async (store: Store) => {
    const feed = store.accessFeed!;
    await waitFor('the lease', async () => {
      const answer = feed.caughtUp(feed.mark());
      return answer === true || (await answer, false);
    }, (held) => held);
  };

  test('with its lease held a process answers reads with no catch-up, and a write through another is answered only once it has been applied there', async () => {
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'leased', description: '0' })).status, 201);
    assert.equal((await get(second.app, '/org/acme/group/leased')).body.description, '0');
    await leaseHeld(second.store);
    const feed = second.store.accessFeed!;
    for (let i = 1; i <= 20; i++) {
      const sent = feed.mark();
      assert.equal((await k.call('PATCH', '/org/acme/group/leased', { description: String(i) })).status, 200);
      // Caught up on the notice of the change, before the write was answered.
      assert.ok(feed.mark() > sent, 'the change was caught up');
      assert.equal((await get(second.app, '/org/acme/group/leased')).body.description, String(i), 'the write acknowledged before the read began');
      // Until the write's audit event is chained, a read learns the org's position by a catch-up.
      await leaseHeld(second.store);
      assert.equal(feed.caughtUp(feed.mark()), true, 'a read under the lease waits for no catch-up');
      assert.equal((await get(second.app, '/org/acme/group/leased')).body.description, String(i));
    }
  });

  test('under a held lease, a revoked key and a removed grant are refused at once by the other process, and a list shows each change at once', async () => {
    const as = async (token: string, method: 'GET' | 'POST', url: string, body?: unknown) => {
      const res = await second.app.core.inject({ method, url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.statusCode, body: JSON.parse(res.body) };
    };
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'guarded' })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'leased-reader' })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/policy', { name: 'leased-reader', targetKind: 'group', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/leased-reader'] }] })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/leased-reader/-addKey', { description: 'x' })).body.key as string;
    assert.equal((await as(key, 'GET', '/org/acme/group/guarded')).status, 200);
    const query = { spec: { terms: [{ op: '=', property: 'description', value: 'listed' }] } };
    assert.deepEqual((await as(k.token, 'POST', '/org/acme/group/-query', query)).body.items, []);

    await leaseHeld(second.store);
    assert.equal((await k.call('PATCH', '/org/acme/group/guarded', { description: 'listed' })).status, 200);
    assert.deepEqual((await as(k.token, 'POST', '/org/acme/group/-query', query)).body.items.map((g: { name: string }) => g.name), ['guarded'], 'the list shows the change');

    await leaseHeld(second.store);
    assert.equal((await k.call('PATCH', '/org/acme/policy/leased-reader', { bindings: [] })).status, 200);
    assert.equal((await as(key, 'GET', '/org/acme/group/guarded')).status, 403, 'the removed grant is not used');

    await leaseHeld(second.store);
    assert.equal((await k.call('PATCH', '/org/acme/policy/leased-reader', { bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/leased-reader'] }] })).status, 200);
    assert.equal((await as(key, 'GET', '/org/acme/group/guarded')).status, 200, 'the grant added is used');

    await leaseHeld(second.store);
    assert.equal((await k.call('PATCH', '/org/acme/serviceaccount/leased-reader', { '$drop/keys': [key.split('.')[0]] })).status, 200);
    assert.equal((await as(key, 'GET', '/org/acme/group/guarded')).status, 401, 'the revoked key is refused');
  });

  test('a stopped process holds a write only until its lease runs out, and once running again answers nothing from before', { timeout: 60_000 }, async () => {
    await leaseHeld(k.store);
    await leaseHeld(second.store);
    const ours = new Set((await db.query('SELECT id FROM keel_cache_leases')).rows.map((row) => row.id as string));
    /** The other process's lease: whether it is live, or undefined when it has none. */
    const theirs = async () => {
      const { rows } = await db.query('SELECT id, expires > now() AS live FROM keel_cache_leases');
      return rows.find((row) => !ours.has(row.id))?.live as boolean | undefined;
    };
    const other: KeelProcess = await spawnKeel(k.config.databaseUrl!, { KEEL_READ_LEASE_MS: String(SHORT_LEASE_MS) });
    try {
      const read = async () => {
        const res = await fetch(`${other.base}/org/acme/group/stopped`, { headers: { authorization: `Bearer ${k.token}` } });
        return (await res.json()) as { description?: string };
      };
      assert.equal((await k.call('POST', '/org/acme/group', { name: 'stopped', description: '0' })).status, 201);
      for (let round = 1; round <= 3; round++) {
        await waitFor('the other process to hold its lease', async () => (await read()).description === String(round - 1) && (await theirs()), (live) => live === true);
        process.kill(other.pid, 'SIGSTOP');
        try {
          assert.equal((await k.call('PATCH', '/org/acme/group/stopped', { description: String(round) })).status, 200, 'the write is answered while the other process is stopped');
          assert.equal(await theirs(), false, "the write waited for the stopped process's lease to run out");
        } finally {
          process.kill(other.pid, 'SIGCONT');
        }
        assert.equal((await read()).description, String(round), 'no read from before the write');
      }
    } finally {
      await other.stop();
    }
    assert.equal(await theirs(), undefined, 'a process that shuts down gives its lease back');
  });

  test("a writer's lost notice connection is opened again, and its writes are answered meanwhile, each seen at once by the other process", async () => {
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'noticed', description: '0' })).status, 201);
    const write = async (description: string) => {
      const res = await second.app.core.inject({ method: 'PATCH', url: '/org/acme/group/noticed', headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, payload: JSON.stringify({ description }) });
      assert.equal(res.statusCode, 200, res.body);
    };
    const listener = async () => (await db.query("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN keel_cache_ack'", [appName])).rows.map((row) => row.pid as number);
    const cut = await listener();
    assert.equal(cut.length, 1, 'the writer listens for acknowledgements');
    await db.query('SELECT pg_terminate_backend($1)', [cut[0]]);
    for (let i = 1; i <= 3; i++) {
      await write(String(i));
      assert.equal((await get(k.app, '/org/acme/group/noticed')).body.description, String(i));
    }
    await waitFor('the notice connection to be opened again', listener, (pids) => pids.length === 1 && pids[0] !== cut[0]);
    await write('after');
    assert.equal((await get(k.app, '/org/acme/group/noticed')).body.description, 'after');
  });

  test('a snapshot and a restore leave the leases alone: writes after them are still seen at once by the other process', async () => {
    await leaseHeld(k.store);
    await leaseHeld(second.store);
    const leases = async () => (await db.query('SELECT id FROM keel_cache_leases ORDER BY id')).rows.map((row) => row.id as string);
    const held = await leases();
    assert.equal(held.length, 2);
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'kept', description: 'before' })).status, 201);
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'with-leases' })).status, 201);
    // Restored, leases taken back to that moment would say less than their processes hold (and a reset would drop them).
    assert.equal(Number((await db.query("SELECT count(*) AS n FROM keel_snapshot_rows WHERE tbl = 'keel_cache_leases'")).rows[0].n), 0, 'a snapshot holds no lease');
    assert.ok((await k.call('POST', '/-admin/snapshots/with-leases/-restore')).status < 300);
    assert.deepEqual(await leases(), held, 'a restore keeps the leases held');
    for (let i = 1; i <= 3; i++) {
      assert.equal((await k.call('PATCH', '/org/acme/group/kept', { description: String(i) })).status, 200);
      assert.equal((await get(second.app, '/org/acme/group/kept')).body.description, String(i));
    }
  });

  test('with leases off a process holds none, and every read catches up', async () => {
    const off = await k.reopen({ readLeaseMs: 0 });
    const feed = off.store.accessFeed!;
    const leases = Number((await db.query('SELECT count(*) AS n FROM keel_cache_leases')).rows[0].n);
    for (let i = 0; i < 5; i++) {
      const sent = feed.mark();
      assert.equal((await get(off.app, '/org/acme/group/leased')).status, 200);
      assert.ok(feed.mark() > sent, 'each read sent a catch-up');
    }
    assert.equal(Number((await db.query('SELECT count(*) AS n FROM keel_cache_leases')).rows[0].n), leases);
  });
}, ['postgres']);
