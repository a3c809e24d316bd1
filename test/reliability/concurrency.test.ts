// Concurrency over HTTP on every backend (PostgreSQL: two Keel instances on one database, requests
// alternating between them): version-checked read-modify-write loses no update; racing creates
// and deletes of the same names never make two items of one name, never 5xx, and every 2xx fits
// one serial order (which the audit log, the committed order, confirms); concurrent $append
// patches of one group's memberLinks are all kept.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { App } from '../../src/server/app.js';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';

forEachBackend('concurrency', (backend) => {
  let k: TestKeel;
  let apps: App[];
  const on = (i: number) => apps[i % apps.length];
  const call = (i: number, method: string, url: string, body?: unknown): Promise<Response> => k.call(method, url, body, { app: on(i) });

  before(async () => {
    k = await startKeel(backend);
    apps = backend === 'postgres' ? [k.app, (await k.reopen()).app] : [k.app];
  });
  after(() => k.close());

  test('many clients doing version-checked read-modify-write on shared objects lose no update', async () => {
    const objects = ['rmw-a', 'rmw-b'];
    for (const name of objects) assert.equal((await call(0, 'POST', '/org/acme/group', { name, tags: { n: '0' } })).status, 201);
    const clients = 12;
    const each = 4;
    const wins = new Map<string, number[]>(objects.map((o) => [o, []]));
    let conflicts = 0;
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let i = 0; i < each; i++) {
          const name = objects[(c + i) % objects.length];
          for (let attempt = 0; ; attempt++) {
            assert.ok(attempt < 500, 'starved after 500 conflicts');
            const current = await call(c + attempt, 'GET', `/org/acme/group/${name}`);
            assert.equal(current.status, 200, current.raw);
            const next = String(Number(current.body.tags.n) + 1);
            const res = await call(c + attempt + 1, 'PATCH', `/org/acme/group/${name}`, { version: current.body.version, tags: { n: next } });
            if (res.status === 200) {
              assert.equal(res.body.version, current.body.version + 1);
              assert.equal(res.body.tags.n, next);
              wins.get(name)!.push(res.body.version);
              break;
            }
            assert.equal(res.status, 409, res.raw);
            assert.equal(res.body.code, 'conflict');
            conflicts++;
          }
        }
      }),
    );
    let total = 0;
    for (const name of objects) {
      const final = await call(1, 'GET', `/org/acme/group/${name}`);
      const won = wins.get(name)!;
      total += won.length;
      assert.equal(final.body.tags.n, String(won.length), `${name}: counter = successful writes`);
      assert.equal(final.body.version, 1 + won.length);
      // every success produced a different version: they happened one after another
      assert.deepEqual([...won].sort((a, b) => a - b), Array.from({ length: won.length }, (_, i) => i + 2));
    }
    assert.equal(total, clients * each);
    // The clients really raced: some writes were refused as stale and retried.
    assert.ok(conflicts > 0, 'no write ever conflicted');
  });

  test('racing creates and deletes of the same names: one item per name, no 5xx, every 2xx fits a serial order', async () => {
    const names = ['race-0', 'race-1', 'race-2'];
    const tally = new Map(names.map((n) => [n, { created: [] as string[], deleted: 0 }]));
    for (let round = 0; round < 6; round++) {
      // Every name gets creates, deletes and reads, interleaved differently each round.
      const ops = Array.from({ length: 36 }, (_, i) => ({ name: names[Math.floor(i / 3) % names.length], op: ['POST', 'DELETE', 'POST', 'GET'][(i + round) % 4], i }));
      const results = await Promise.all(
        ops.map(async ({ name, op, i }) => {
          const res = op === 'POST' ? await call(i, 'POST', '/org/acme/gvc', { name, description: `r${round}` }) : await call(i, op, `/org/acme/gvc/${name}`);
          return { name, op, res };
        }),
      );
      for (const { name, op, res } of results) {
        assert.ok(res.status < 500, `${op} ${name}: ${res.status} ${res.raw}`);
        const t = tally.get(name)!;
        if (op === 'POST') {
          assert.ok([201, 409].includes(res.status), `${op} ${name}: ${res.status} ${res.raw}`);
          if (res.status === 201) t.created.push(res.body.id);
          else assert.equal(res.body.code, 'already_exists');
        } else if (op === 'DELETE') {
          assert.ok([202, 404].includes(res.status), `${op} ${name}: ${res.status} ${res.raw}`);
          if (res.status === 202) t.deleted++;
        } else {
          assert.ok([200, 404].includes(res.status), `${op} ${name}: ${res.status} ${res.raw}`);
        }
      }
      // After each round: in a serial order creates and deletes of a name alternate, starting with a create.
      const list = await call(round, 'GET', '/org/acme/gvc?limit=1000');
      for (const name of names) {
        const t = tally.get(name)!;
        const present = list.body.items.filter((g: { name: string }) => g.name === name);
        assert.ok(present.length <= 1, `${name} is listed ${present.length} times`);
        const balance = t.created.length - t.deleted;
        assert.ok(balance === 0 || balance === 1, `${name}: ${t.created.length} successful creates and ${t.deleted} successful deletes`);
        assert.equal(present.length, balance, `${name}: listed ${present.length} times after ${t.created.length} creates and ${t.deleted} deletes`);
        if (present.length) assert.equal(present[0].id, t.created.at(-1), `${name}: the item there is the last one created`);
        for (const app of apps) {
          const got = await k.call('GET', `/org/acme/gvc/${name}`, undefined, { app });
          assert.equal(got.status, balance ? 200 : 404);
        }
      }
    }
    // The audit log holds the committed order: per name, create/delete events alternate, matching the 2xx answers.
    for (const name of names) {
      const t = tally.get(name)!;
      const events = await k.store.audit({ org: 'acme', resourceType: 'gvc', resourceName: name, limit: 1000 });
      const actions = events.map((e) => e.actionType);
      assert.equal(actions.filter((a) => a === 'create').length, t.created.length, actions.join());
      assert.equal(actions.filter((a) => a === 'delete').length, t.deleted, actions.join());
      actions.forEach((a, i) => assert.equal(a, i % 2 === 0 ? 'create' : 'delete', `${name}: ${actions.join()}`));
      assert.deepEqual(events.filter((e) => e.actionType === 'create').map((e) => e.resourceId).sort(), [...t.created].sort(), 'the created items are the ones answered 201');
    }
    // The race was real: names were created and deleted again many times.
    const creates = [...tally.values()].reduce((n, t) => n + t.created.length, 0);
    const deletes = [...tally.values()].reduce((n, t) => n + t.deleted, 0);
    assert.ok(creates >= 2 * names.length && deletes >= names.length, `${creates} creates and ${deletes} deletes succeeded`);
  });

  test("concurrent $append patches of one group's memberLinks keep every member", async () => {
    const members = 24;
    for (let i = 0; i < members; i++) assert.equal((await call(i, 'POST', '/org/acme/serviceaccount', { name: `member-${i}` })).status, 201);
    assert.equal((await call(0, 'POST', '/org/acme/group', { name: 'appended' })).status, 201);
    const results = await Promise.all(Array.from({ length: members }, (_, i) => call(i, 'PATCH', '/org/acme/group/appended', { '$append/memberLinks': [`//serviceaccount/member-${i}`] })));
    assert.deepEqual(results.map((r) => r.status), Array(members).fill(200), results.map((r) => r.raw).join('\n'));
    const versions = results.map((r) => r.body.version).sort((a, b) => a - b);
    assert.deepEqual(versions, Array.from({ length: members }, (_, i) => i + 2), 'each patch applied on top of the one before');
    for (const app of apps) {
      const final = await k.call('GET', '/org/acme/group/appended', undefined, { app });
      assert.deepEqual([...final.body.memberLinks].sort(), Array.from({ length: members }, (_, i) => `/org/acme/serviceaccount/member-${i}`).sort());
      assert.equal(final.body.version, members + 1);
    }
  });
});
