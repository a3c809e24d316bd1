// Two Keel instances on one PostgreSQL database, as two processes share it: no duplicate names,
// no lost updates. (SQLite is one process's embedded store.)
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { verifyChain } from '../../src/audit/verify.js';
import type { App } from '../../src/server/app.js';
import { rawExec } from '../support/raw-sql.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

forEachBackend('two Keel instances on one database', (backend) => {
  let k: TestKeel;
  let second: App;
  const call = async (app: App, method: string, url: string, body?: unknown) => {
    const res = await app.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined };
  };
  before(async () => {
    k = await startKeel(backend);
    second = (await k.reopen()).app;
  });
  after(() => k.close());

  test('50 racing creates of one name give exactly one 201 and 409 for the rest', async () => {
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => call(i % 2 ? second : k.app, 'POST', '/org/acme/gvc', { name: 'contested', description: `from ${i}` })),
    );
    const statuses = results.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 201).length, 1, statuses.join());
    assert.equal(statuses.filter((s) => s === 409).length, 49, statuses.join());
    const list = await call(second, 'GET', '/org/acme/gvc');
    assert.equal(list.body.items.filter((g: any) => g.name === 'contested').length, 1);
  });

  test('concurrent version-checked read-modify-write loses no increment', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'counter', tags: { n: '0' } })).status, 201);
    const increment = async (app: App) => {
      for (let attempt = 0; attempt < 200; attempt++) {
        const current = await call(app, 'GET', '/org/acme/group/counter');
        const n = Number(current.body.tags.n);
        const res = await call(app, 'PATCH', '/org/acme/group/counter', { version: current.body.version, tags: { n: String(n + 1) } });
        if (res.status === 200) return;
        assert.equal(res.status, 409, JSON.stringify(res.body));
      }
      assert.fail('gave up after 200 conflicts');
    };
    const writers = 10;
    const each = 3;
    await Promise.all(
      Array.from({ length: writers }, async (_, w) => {
        for (let i = 0; i < each; i++) await increment(w % 2 ? second : k.app);
      }),
    );
    const final = await call(k.app, 'GET', '/org/acme/group/counter');
    assert.equal(final.body.tags.n, String(writers * each));
    assert.equal(final.body.version, 1 + writers * each);
  });

  test('concurrent patches without a version all apply (no lost update)', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'members' })).status, 201);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call(i % 2 ? second : k.app, 'PATCH', '/org/acme/group/members', { '$append/memberLinks': [`/org/acme/serviceaccount/sa-${i}`] })),
    );
    assert.ok(results.every((r) => r.status === 200), results.map((r) => r.status).join());
    const final = await call(second, 'GET', '/org/acme/group/members');
    assert.equal(final.body.memberLinks.length, 20);
    assert.equal(final.body.version, 21);
  });

  test('the audit chain of concurrent writes from both instances is whole: one event per change, in order', async () => {
    const report = await verifyChain(k.store, 'acme');
    assert.equal(report.ok, true, JSON.stringify(report));
    const events = await k.store.audit({ org: 'acme', resourceName: 'counter', limit: 1000 });
    const counter = (await call(k.app, 'GET', '/org/acme/group/counter')).body;
    assert.equal(events.length, counter.version, 'one event for the create and one per successful patch');
    assert.deepEqual(events.map((e) => JSON.parse(e.body).resource.version), Array.from({ length: counter.version }, (_, i) => i + 1));
  });

  test('an event left pending by a process that died before sealing it is chained by a survivor', async () => {
    const id = '11111111-2222-4333-8444-555555555555';
    await rawExec(
      k,
      `INSERT INTO audit_pending (org, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, body) VALUES (?, ?, 'cpln', ?, 'group', 'orphan', 'x', 'keel', 'edit', ?)`,
      ['acme', id, new Date().toISOString(), JSON.stringify({ id, note: 'left behind' })],
    );
    const deadline = Date.now() + 5000;
    let sealed = await k.store.audit({ org: 'acme', id, limit: 1 });
    while (sealed.length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50)); // poll interval, bounded by the deadline
      sealed = await k.store.audit({ org: 'acme', id, limit: 1 });
    }
    assert.equal(sealed.length, 1, 'sealed by the periodic sweep');
    assert.equal((await verifyChain(k.store, 'acme')).ok, true);
  });
}, ['postgres']);
