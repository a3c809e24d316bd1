// Reset and snapshots through the HTTP admin endpoints, on both backends: who may use them, what
// they leave behind, and (PostgreSQL) a second Keel process that answers from the restored state.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { KEEL_ACTOR } from '../../src/audit/events.js';
import { verifyChain } from '../../src/audit/verify.js';
import { applySeed, readSeed } from '../../src/admin/seed.js';
import { accountLinkOf, createOrg } from '../../src/resources/orgs.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { SEEDED, seedDir } from './fixtures.js';

const names = (res: { body: any }) => (res.body.items as Array<{ name: string }>).map((i) => i.name).sort();

forEachBackend('reset and snapshots over HTTP', (backend) => {
  let k: TestKeel;
  let viewer: string; // a key of the first org that is not a superuser
  let otherSuperuser: string; // the superuser key of another org
  before(async () => {
    k = await startKeel(backend, 'acme', { allowReset: true, allowSnapshots: true, init: seedDir() });
    await applySeed(k.store, 'acme', readSeed(k.config.init!));
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'viewer' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['//serviceaccount/viewer'] })).status, 200);
    viewer = (await k.call('POST', '/org/acme/serviceaccount/viewer/-addKey', { description: 'v' })).body.key;
    otherSuperuser = (await createOrg(k.store, { name: 'other', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(k.org), adminServiceAccount: 'admin' })).token!;
  });
  after(() => k.close());

  test('only a superuser of the first org may use /-admin/: a viewer and another org\'s superuser get 403, no key 401', async () => {
    for (const [method, url, body] of [
      ['POST', '/-admin/reset', undefined],
      ['GET', '/-admin/snapshots', undefined],
      ['POST', '/-admin/snapshots', { name: 'x' }],
      ['POST', '/-admin/snapshots/x/-restore', undefined],
      ['DELETE', '/-admin/snapshots/x', undefined],
    ] as const) {
      for (const token of [viewer, otherSuperuser]) {
        const res = await k.call(method, url, body, { token });
        assert.equal(res.status, 403, `${method} ${url}: ${res.raw}`);
        assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
        assert.equal(res.body.code, 'forbidden');
      }
      assert.equal((await k.call(method, url, body, { token: null })).status, 401);
    }
    assert.deepEqual((await k.call('GET', '/-admin/snapshots')).body.items, [], 'nothing was saved by the refused calls');
  });

  test('reset drops orgs, items, keys and events and applies the seed again; the bootstrap key keeps working', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'scratch' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/demo', { description: 'changed by a test' })).status, 200);
    const before = await k.store.auditHead('acme');
    const res = await k.call('POST', '/-admin/reset');
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.seeded, 6);
    assert.deepEqual(names(await k.call('GET', '/org/acme/gvc')), SEEDED.gvc);
    assert.equal((await k.call('GET', '/org/acme/gvc/demo')).body.description, 'demo');
    assert.deepEqual(names(await k.call('GET', '/org/acme/serviceaccount')), ['admin', 'ci', 'controlplane'], "the viewer account went");
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: viewer })).status, 401, "other keys went");
    assert.equal((await k.call('GET', '/org/other', undefined, { token: otherSuperuser })).status, 401, 'other orgs went');
    assert.deepEqual(await k.store.orgs(), ['acme']);
    const head = await k.store.auditHead('acme');
    assert.ok(head.seq < before.seq, `the chain started again (${head.seq} < ${before.seq})`);
    // The org and its admin account, then one event per seeded document.
    assert.equal(head.seq, 2 + 6);
    assert.equal((await verifyChain(k.store, 'acme')).ok, true);
    // A second reset (from the state the first one kept) gives the same state, chain included.
    const first = await k.store.audit({ org: 'acme', limit: 100 });
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'scratch-again' })).status, 201);
    assert.equal((await k.call('POST', '/-admin/reset')).status, 200);
    assert.deepEqual(names(await k.call('GET', '/org/acme/gvc')), SEEDED.gvc);
    assert.deepEqual(await k.store.auditHead('acme'), head);
    assert.deepEqual((await k.store.audit({ org: 'acme', limit: 100 })).map((e) => e.hash), first.map((e) => e.hash));
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: viewer })).status, 401);
    assert.equal((await k.call('GET', '/org/acme/gvc')).status, 200);
    // Apply semantics afterwards: the same documents change nothing.
    assert.ok((await applySeed(k.store, 'acme', readSeed(k.config.init!))).every((o) => o.outcome === 'unchanged'));
    assert.equal((await k.store.auditHead('acme')).seq, head.seq);
  });

  test('snapshots: save, list, restore to the saved state, delete; the chain keeps every event and records the restore', async () => {
    const saved = await k.call('POST', '/-admin/snapshots', { name: 'prepared' });
    assert.equal(saved.status, 201, saved.raw);
    assert.equal(saved.headers.location, '/-admin/snapshots/prepared');
    assert.equal(saved.body.name, 'prepared');
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'prepared' })).body.code, 'already_exists');
    await createOrg(k.store, { name: 'bystander', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(k.org), adminServiceAccount: 'admin' });
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'with-bystander' })).status, 201);
    const bystander = await k.store.auditHead('bystander');
    assert.equal((await k.call('POST', '/-admin/snapshots/with-bystander/-restore')).body.orgs.length, 0, 'a restore to the state as it is changes no org');
    assert.deepEqual(await k.store.auditHead('bystander'), bystander);
    const chainAtSave = await k.store.auditHead('acme');

    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'after-save' })).status, 201);
    assert.equal((await k.call('DELETE', '/org/acme/gvc/demo/workload/web')).status, 202);
    const ci = await k.call('POST', '/org/acme/serviceaccount/ci/-addKey', { description: 'made after the snapshot' });
    assert.equal((await k.call('GET', '/org/acme/gvc/demo', undefined, { token: ci.body.key })).status, 403, 'the key works (no policy lets ci view gvcs)');
    const chainBeforeRestore = await k.store.auditHead('acme');

    const restored = await k.call('POST', '/-admin/snapshots/prepared/-restore');
    assert.equal(restored.status, 200, restored.raw);
    assert.deepEqual(restored.body.orgs, [
      { org: 'acme', position: chainAtSave.seq },
      { org: 'bystander', position: 0 },
    ], 'the orgs that changed: acme, and bystander, made since (it goes, its chain stays)');
    assert.deepEqual(await k.store.orgs(), ['acme']);
    assert.deepEqual(names(await k.call('GET', '/org/acme/gvc')), ['demo']);
    assert.equal((await k.call('GET', '/org/acme/gvc/demo/workload/web')).status, 200);
    assert.equal((await k.call('GET', '/org/acme/gvc/demo', undefined, { token: ci.body.key })).status, 401, 'a key made after the snapshot is gone at once');
    assert.deepEqual((await k.call('GET', '/org/acme/serviceaccount/ci')).body.keys ?? [], [], 'and is not listed');
    // The chain is appended to, never cut: one restore event after everything that happened.
    assert.equal((await k.store.auditHead('acme')).seq, chainBeforeRestore.seq + 1);
    const report = await verifyChain(k.store, 'acme');
    assert.ok(report.ok);
    assert.deepEqual(report.restores.map((r) => ({ seq: r.seq, snapshot: r.snapshot, position: r.position, by: r.by })), [
      { seq: chainBeforeRestore.seq + 1, snapshot: 'prepared', position: chainAtSave.seq, by: 'admin' },
    ]);
    assert.equal((await k.store.auditHead('bystander')).seq, bystander.seq + 1);
    assert.deepEqual((await verifyChain(k.store, 'bystander')).ok, true);
    // A watch resuming from before the restore would replay changes that were undone: 410, list again.
    for (const since of [chainAtSave.seq, chainBeforeRestore.seq]) {
      const resumed = await k.call('GET', `/org/acme/-watch?since=${since}`);
      assert.equal(resumed.status, 410, resumed.raw);
      assert.equal(resumed.body.code, 'gone');
      assert.match(resumed.body.message, /restored from a snapshot/);
    }
    // The chain continues after the restore event.
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'after-restore' })).status, 201);
    assert.equal((await k.store.auditHead('acme')).seq, chainBeforeRestore.seq + 2);
    assert.equal((await verifyChain(k.store, 'acme')).ok, true);
    const audit = await k.store.audit({ org: 'acme', resourceType: 'gvc', limit: 100 });
    assert.deepEqual(audit.map((e) => e.resourceName).filter((n) => n.startsWith('after')), ['after-save', 'after-restore'], 'the undone change stays in the chain');

    const list = await k.call('GET', '/-admin/snapshots');
    assert.equal(list.status, 200);
    assert.equal(list.body.kind, 'list');
    assert.deepEqual(list.body.items.map((s: any) => s.name), ['prepared', 'with-bystander']);
    assert.ok(list.body.items[0].size > 0);
    for (const name of ['prepared', 'with-bystander']) assert.equal((await k.call('DELETE', `/-admin/snapshots/${name}`)).status, 202);
    assert.deepEqual((await k.call('GET', '/-admin/snapshots')).body.items, []);
  });

  test('as an attacker: a leaked key revoked after the snapshot stays revoked after a restore, and the chain shows the revocation and the restore', async () => {
    // A leaked superuser key, and a second key of an account deleted later.
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'leaky' })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'doomed' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/group/superusers', { '$append/memberLinks': ['//serviceaccount/leaky', '//serviceaccount/doomed'] })).status, 200);
    const leaked = await k.call('POST', '/org/acme/serviceaccount/leaky/-addKey', { description: 'ends up in a public log' });
    const doomed = (await k.call('POST', '/org/acme/serviceaccount/doomed/-addKey', { description: 'its account is deleted' })).body.key;
    const kept = (await k.call('POST', '/org/acme/serviceaccount/leaky/-addKey', { description: 'never leaked' })).body.key;
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: leaked.body.key })).status, 200);
    const neighbour = (await createOrg(k.store, { name: 'neighbour', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(k.org), adminServiceAccount: 'admin' })).token!;
    const quiet = (await createOrg(k.store, { name: 'quiet', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(k.org), adminServiceAccount: 'admin' })).token!;
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'before-leak' })).status, 201);
    const neighbourAtSave = await k.store.auditHead('neighbour');
    const quietAtSave = await k.store.auditHead('quiet');

    // The leak is found: the key is revoked, the other account deleted; meanwhile another org writes.
    const revoked = await k.call('PATCH', '/org/acme/serviceaccount/leaky', { '$drop/keys': [leaked.body.name] });
    assert.equal(revoked.status, 200, revoked.raw);
    assert.equal((await k.call('DELETE', '/org/acme/serviceaccount/doomed')).status, 202);
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: leaked.body.key })).status, 401);
    const revocation = (await k.store.audit({ org: 'acme', resourceType: 'serviceaccount', resourceName: 'leaky', limit: 100 })).at(-1)!;
    assert.equal((await k.call('POST', '/org/neighbour/gvc', { name: 'written-later' }, { token: neighbour })).status, 201);
    const neighbourWrite = (await k.store.audit({ org: 'neighbour', resourceType: 'gvc', limit: 10 })).at(-1)!;

    // A superuser of the first org (here the bootstrap key) restores the snapshot from before the revocation.
    const restored = await k.call('POST', '/-admin/snapshots/before-leak/-restore');
    assert.equal(restored.status, 200, restored.raw);
    assert.deepEqual(restored.body.orgs.map((r: any) => r.org), ['acme', 'neighbour'], 'the orgs whose state changed, and only those');

    for (const token of [leaked.body.key, doomed]) {
      const res = await k.call('GET', '/org/acme/gvc', undefined, { token });
      assert.equal(res.status, 401, `a key revoked after the snapshot works again: ${res.raw}`);
    }
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: kept })).status, 200, 'a key that was never revoked still works');
    const leaky = (await k.call('GET', '/org/acme/serviceaccount/leaky')).body;
    assert.deepEqual(leaky.keys.map((key: any) => key.name), [kept.split('.')[0]], 'the restored account lists only its live key');
    assert.equal((await k.call('GET', '/org/acme/serviceaccount/doomed')).status, 200, 'the deleted account is back (the state is the snapshot\'s)');
    assert.deepEqual((await k.call('GET', '/org/acme/serviceaccount/doomed')).body.keys, [], 'without its keys');
    assert.equal((await k.call('GET', '/org/neighbour/gvc/written-later', undefined, { token: neighbour })).status, 404, "the other org's later write is undone");

    for (const org of ['acme', 'neighbour']) {
      const report = await verifyChain(k.store, org);
      assert.ok(report.ok, `${org}: ${JSON.stringify(report)}`);
      const last = report.restores.at(-1)!;
      assert.equal(last.snapshot, 'before-leak');
      assert.equal(last.seq, (await k.store.auditHead(org)).seq, `${org}: the restore is the chain's newest event`);
      const [event] = await k.store.audit({ org, afterSeq: last.seq - 1, limit: 1 });
      const body = JSON.parse(event.body);
      assert.equal(body.action.type, 'restore');
      assert.equal(body.subject.data.principalLink, '/org/acme/serviceaccount/admin');
      assert.deepEqual(body.resource.data, { snapshot: 'before-leak', position: last.position });
    }
    const neighbourReport = await verifyChain(k.store, 'neighbour');
    assert.equal(neighbourReport.ok && neighbourReport.restores.at(-1)!.position, neighbourAtSave.seq, "the other org went back to its position at the snapshot");
    assert.deepEqual((await k.store.audit({ org: 'acme', afterSeq: revocation.seq - 1, limit: 1 }))[0].hash, revocation.hash, 'the revocation event is still there');
    assert.deepEqual((await k.store.audit({ org: 'neighbour', afterSeq: neighbourWrite.seq - 1, limit: 1 }))[0].hash, neighbourWrite.hash, "the other org's undone write is still in its chain");
    assert.deepEqual(await k.store.auditHead('quiet'), quietAtSave, 'an org the restore did not change gets no event');
    assert.equal((await k.call('GET', '/org/quiet', undefined, { token: quiet })).status, 200);
    // The Audit API shows the restore to the org's auditors.
    const listed = await k.app.audit.inject({ method: 'GET', url: '/audit/org/acme?actionType=restore', headers: { authorization: `Bearer ${k.token}` } });
    assert.equal(listed.statusCode, 200, listed.body);
    assert.deepEqual(JSON.parse(listed.body).items.map((e: any) => e.resource.data.snapshot), ['prepared', 'before-leak'], listed.body);
    assert.equal((await k.call('DELETE', '/-admin/snapshots/before-leak')).status, 202);
  });

  test('as an attacker racing a restore: writes made while it runs are each undone or kept, as the chain says, and no event is lost', async () => {
    const racer = (await createOrg(k.store, { name: 'racer', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(k.org), adminServiceAccount: 'admin' })).token!;
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'under-fire' })).status, 201);
    // Four writers create gvcs one after another, before, during and after the restore.
    const writes = new Map<string, { status: number; raw: string }>();
    let restoreDone = false;
    let started!: () => void;
    const eightWritten = new Promise<void>((resolve) => (started = resolve));
    const writer = async (w: number) => {
      for (let i = 0, after = 0; after < 3; i++) {
        if (restoreDone) after++;
        const name = `race-${w}-${i}`;
        writes.set(name, await k.call('POST', '/org/racer/gvc', { name }, { token: racer }));
        if (writes.size >= 8) started();
      }
    };
    const writers = [0, 1, 2, 3].map(writer);
    await eightWritten;
    const restore = await k.call('POST', '/-admin/snapshots/under-fire/-restore');
    restoreDone = true;
    await Promise.all(writers);
    assert.equal(restore.status, 200, restore.raw);
    for (const w of writes.values()) assert.ok(w.status === 201 || w.status === 503, w.raw); // refused cleanly at worst, never a 500
    const report = await verifyChain(k.store, 'racer');
    assert.ok(report.ok, JSON.stringify(report));
    const restoredAt = report.restores.find((r) => r.snapshot === 'under-fire')!.seq;
    const events = await k.store.audit({ org: 'racer', resourceType: 'gvc', limit: 1000 });
    const present = new Set(((await k.call('GET', '/org/racer/gvc', undefined, { token: racer })).body.items as Array<{ name: string }>).map((g) => g.name));
    for (const [name, write] of writes) {
      if (write.status !== 201) {
        assert.ok(!present.has(name), name);
        continue;
      }
      const event = events.find((e) => e.resourceName === name);
      assert.ok(event, `the created ${name} has its event`);
      assert.equal(present.has(name), event.seq > restoredAt, `${name} (event ${event.seq}, restore at ${restoredAt}) is kept exactly when it came after the restore`);
    }
    assert.ok(present.size >= 12 && present.size <= writes.size - 8, `the writes before the restore were undone, the later ones kept (${present.size} of ${writes.size})`);
    assert.equal((await verifyChain(k.store, 'acme')).ok, true);
    assert.equal((await k.call('DELETE', '/-admin/snapshots/under-fire')).status, 202);
  });

  test('bad snapshot names and unknown snapshots: 400 and 404 with the error object, nothing written', async () => {
    for (const name of ['../escape', '..', '.hidden', 'a/b', 'UPPER', '', 'x'.repeat(65), 42, null]) {
      const res = await k.call('POST', '/-admin/snapshots', { name });
      assert.equal(res.status, 400, `${JSON.stringify(name)}: ${res.raw}`);
      assert.equal(res.body.code, 'bad_request');
    }
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'ok', path: '/etc' })).status, 400);
    // A name that is a path never reaches the disk: refused as a name, or (dot segments the router resolves) no such route.
    for (const path of ['..%2F..%2Fkeel', 'a%2Fb', '%2E%2E', '..', '%2E%2E%2Fkeel.db']) {
      for (const [method, url] of [['POST', `/-admin/snapshots/${path}/-restore`], ['DELETE', `/-admin/snapshots/${path}`]] as const) {
        const res = await k.call(method, url);
        assert.ok([400, 404].includes(res.status), `${method} ${url}: ${res.raw}`);
        assert.equal(res.body.code, res.status === 400 ? 'bad_request' : 'not_found');
      }
    }
    const missing = await k.call('POST', '/-admin/snapshots/never-saved/-restore');
    assert.equal(missing.status, 404);
    assert.equal(missing.body.code, 'not_found');
    assert.equal((await k.call('DELETE', '/-admin/snapshots/never-saved')).status, 404);
    assert.deepEqual((await k.call('GET', '/-admin/snapshots')).body.items, []);
  });

  test('a seed that no longer applies makes reset fail and change nothing', async () => {
    const good = k.config.init;
    const before = names(await k.call('GET', '/org/acme/gvc'));
    k.config.init = '/nonexistent/seed';
    try {
      const res = await k.call('POST', '/-admin/reset');
      assert.equal(res.status, 500);
      assert.equal(res.body.code, 'internal');
      assert.match(res.body.message, /changed nothing: KEEL_INIT: cannot read \/nonexistent\/seed/);
      assert.deepEqual(names(await k.call('GET', '/org/acme/gvc')), before);
    } finally {
      k.config.init = good;
    }
  });

  test('a snapshot taken before a reset: its restore says the state is from the chain the reset replaced, never a position of this one', async () => {
    for (const name of ['pre-1', 'pre-2', 'pre-3']) assert.equal((await k.call('POST', '/org/acme/gvc', { name })).status, 201);
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'before-reset' })).status, 201);
    const headAtSave = await k.store.auditHead('acme');
    assert.equal((await k.call('POST', '/-admin/reset')).status, 200);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'post-reset' })).status, 201);
    assert.ok((await k.store.auditHead('acme')).seq < headAtSave.seq, 'the reset began a shorter chain');

    const restored = await k.call('POST', '/-admin/snapshots/before-reset/-restore');
    assert.equal(restored.status, 200, restored.raw);
    assert.deepEqual(restored.body.orgs.find((o: { org: string }) => o.org === 'acme'), { org: 'acme', position: headAtSave.seq, earlierChain: true });
    assert.deepEqual(names(await k.call('GET', '/org/acme/gvc')).filter((n) => n.startsWith('p')), ['pre-1', 'pre-2', 'pre-3']);
    const report = await verifyChain(k.store, 'acme');
    assert.ok(report.ok);
    const mark = report.restores.at(-1)!;
    assert.equal(mark.snapshot, 'before-reset');
    assert.equal(mark.earlierChain, true, 'verify does not take the old position for one of this chain');
    assert.equal((await k.call('DELETE', '/-admin/snapshots/before-reset')).status, 202);
  });
});

forEachBackend('reset and snapshots off', (backend) => {
  let k: TestKeel;
  before(async () => (k = await startKeel(backend)));
  after(() => k.close());
  test('without KEEL_ALLOW_RESET=on POST /-admin/reset is 404 with the error object naming the setting, and changes nothing', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'keep' })).status, 201);
    const res = await k.call('POST', '/-admin/reset');
    assert.equal(res.status, 404);
    assert.equal(res.body.code, 'not_found');
    assert.match(res.body.message, /KEEL_ALLOW_RESET=on/);
    assert.equal(res.body.id.length > 0, true);
    assert.equal((await k.call('GET', '/org/acme/gvc/keep')).status, 200);
  });

  test('without KEEL_ALLOW_SNAPSHOTS=on every snapshot route is 404 with the error object naming the setting, even for the first org\'s superuser, and nothing is saved', async () => {
    const head = await k.store.auditHead('acme');
    for (const [method, url, body] of [
      ['GET', '/-admin/snapshots', undefined],
      ['POST', '/-admin/snapshots', { name: 'x' }],
      ['POST', '/-admin/snapshots/x/-restore', undefined],
      ['DELETE', '/-admin/snapshots/x', undefined],
    ] as const) {
      const res = await k.call(method, url, body);
      assert.equal(res.status, 404, `${method} ${url}: ${res.raw}`);
      assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
      assert.match(res.body.message, /KEEL_ALLOW_SNAPSHOTS=on/);
    }
    assert.deepEqual(await k.store.snapshots.list(), []);
    assert.deepEqual(await k.store.auditHead('acme'), head);
  });
});

forEachBackend(
  'snapshot restored while a second Keel process serves reads',
  (backend) => {
    let k: TestKeel;
    before(async () => (k = await startKeel(backend, 'acme', { allowSnapshots: true })));
    after(() => k.close());
    test('the second process answers from the restored state right after the restore, and forgets keys made since', async () => {
      const second = await k.reopen();
      const read = async (url: string, token = k.token) => (await second.app.core.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } })).statusCode;
      assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'kept' })).status, 201);
      assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'base' })).status, 201);
      assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'later' })).status, 201);
      assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'later-sa' })).status, 201);
      assert.equal((await k.call('PATCH', '/org/acme/group/superusers', { '$append/memberLinks': ['//serviceaccount/later-sa'] })).status, 200);
      const laterKey = (await k.call('POST', '/org/acme/serviceaccount/later-sa/-addKey', { description: 'x' })).body.key;
      // The second process has read (and cached) all of it.
      assert.equal(await read('/org/acme/gvc/later'), 200);
      assert.equal(await read('/org/acme/gvc/later', laterKey), 200);

      assert.equal((await k.call('POST', '/-admin/snapshots/base/-restore')).status, 200);
      assert.equal(await read('/org/acme/gvc/later'), 404, 'read right after the restore');
      assert.equal(await read('/org/acme/gvc/kept'), 200);
      // Its key cache is told by the store (NOTIFY), within moments rather than its one-second expiry.
      const until = Date.now() + 900;
      let status = await read('/org/acme/gvc/kept', laterKey);
      while (status !== 401 && Date.now() < until) status = await read('/org/acme/gvc/kept', laterKey);
      assert.equal(status, 401, 'the key made after the snapshot is refused by the second process');
      // Writes through the second process continue the restored chain.
      const write = await second.app.core.inject({ method: 'POST', url: '/org/acme/gvc', headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, payload: JSON.stringify({ name: 'from-second' }) });
      assert.equal(write.statusCode, 201);
      assert.equal((await verifyChain(k.store, 'acme')).ok, true);
    });
  },
  ['postgres'],
);
