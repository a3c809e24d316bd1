// The audit log: one event per change in the same transaction, the Audit API, the hash chain,
// retention, and each item's eventlog.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { verifyChain } from '../../src/audit/verify.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { tamperWithEvent } from '../support/raw-sql.js';

forEachBackend('audit', (backend) => {
  let k: TestKeel;
  let bystander: string;
  let stranger: string;
  const audit = async (url: string, token: string = k.token, method = 'GET', body?: unknown) => {
    const res = await k.app.audit.inject({
      method: method as 'GET',
      url,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      payload: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined, raw: res.body };
  };
  const events = async (query = '') => (await audit(`/audit/org/acme?limit=1000${query}`)).body.items as any[];

  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'bystander' })).status, 201);
    bystander = (await k.call('POST', '/org/acme/serviceaccount/bystander/-addKey', { description: 'b' })).body.key;
    assert.equal((await k.call('POST', '/org', { name: 'elsewhere' })).status, 201);
    assert.equal((await k.call('POST', '/org/elsewhere/serviceaccount', { name: 'other' })).status, 201);
    stranger = (await k.call('POST', '/org/elsewhere/serviceaccount/other/-addKey', { description: 'x' })).body.key;
  });
  after(() => k.close());

  test('each successful change writes one event; failed changes and dry runs write none', async () => {
    const start = (await events()).length;
    const created = await k.call('POST', '/org/acme/gvc', { name: 'audited' });
    assert.equal(created.status, 201);
    const patched = await k.call('PATCH', '/org/acme/gvc/audited', { description: 'patched' });
    assert.equal(patched.status, 200);
    assert.equal((await k.call('PUT', '/org/acme/gvc/audited', { name: 'audited', description: 'replaced' })).status, 200);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/audited', { description: 'replaced' })).status, 200, 'a no-op');
    assert.equal((await k.call('PATCH', '/org/acme/gvc/audited', { bogus: 1 })).status, 400);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/audited', { version: 1, description: 'stale' })).status, 409);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'audited' })).status, 409);
    assert.equal((await k.call('POST', '/org/acme/gvc?dryRun=true', { name: 'dry-run-gvc' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/audited', { description: 'denied' }, { token: bystander })).status, 403);
    assert.equal((await k.call('DELETE', '/org/acme/gvc/audited')).status, 202);
    const mine = (await events()).slice(start).filter((e) => e.resource.name === 'audited');
    assert.deepEqual(mine.map((e) => e.action.type), ['create', 'edit', 'edit', 'delete']);
    assert.ok(mine.every((e) => e.resource.id === created.body.id && e.resource.type === 'gvc'));
    assert.deepEqual(mine.map((e) => e.resource.version), [1, 2, 3, 3]);
    // The snapshot is the item as the change's response showed it.
    assert.deepEqual(mine[0].resource.data, created.body);
    assert.deepEqual(mine[1].resource.data, patched.body);
    assert.equal(mine[0].subject.name, 'admin');
    assert.deepEqual(mine[0].subject.data, { type: 'serviceaccount', principalLink: '/org/acme/serviceaccount/admin' });
    assert.equal(mine[0].context.org, 'acme');
    assert.equal(mine[0].context.name, 'cpln');
    assert.ok((await events()).every((e) => e.resource.name !== 'dry-run-gvc'));
    // Event ids are UUIDs of version 7: time-ordered, so later events sort after earlier ones.
    const ids = mine.map((e) => e.id as string);
    assert.ok(ids.every((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id)), ids.join(' '));
    assert.deepEqual([...ids].sort(), ids);
  });

  test('key minting, key revocation and policy changes are audited; secret values and key material never are', async () => {
    const secret = 'correct-horse-battery-staple-31337';
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'vault', type: 'opaque', data: { payload: secret, encoding: 'plain' } })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/secret/vault', { data: { payload: `${secret}-2`, encoding: 'plain' } })).status, 200);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'robot' })).status, 201);
    const key = await k.call('POST', '/org/acme/serviceaccount/robot/-addKey', { description: 'ci' });
    assert.equal(key.status, 200);
    assert.equal((await k.call('PATCH', '/org/acme/serviceaccount/robot', { '$drop/keys': [key.body.name] })).status, 200);
    assert.equal((await k.call('POST', '/org/acme/policy', { name: 'robots', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/robot'] }] })).status, 201);
    const all = await audit('/audit/org/acme?limit=1000');
    const robot = all.body.items.filter((e: any) => e.resource.name === 'robot').map((e: any) => e.action.type);
    assert.deepEqual(robot, ['create', 'addKey', 'edit']);
    assert.ok(all.body.items.some((e: any) => e.resource.type === 'policy' && e.resource.name === 'robots' && e.action.type === 'create'));
    assert.ok(all.body.items.filter((e: any) => e.resource.name === 'vault').length === 2);
    assert.ok(!all.raw.includes(secret), 'secret values stay out of audit events');
    assert.ok(!all.raw.includes(key.body.key.split('.')[2]), 'key secrets stay out of audit events');
    assert.ok(!all.raw.includes(k.token.split('.')[2]));
  });

  test('the Audit API filters by resource, subject, action, time and context, and pages', async () => {
    for (let i = 0; i < 5; i++) assert.equal((await k.call('POST', '/org/acme/group', { name: `audit-g${i}` })).status, 201);
    const gvcEvents = await events('&resourceType=group&actionType=create');
    assert.ok(gvcEvents.length >= 5);
    assert.ok(gvcEvents.every((e) => e.resource.type === 'group' && e.action.type === 'create'));
    const one = await events('&resourceName=audit-g3');
    assert.deepEqual(one.map((e) => e.resource.name), ['audit-g3']);
    const byId = await audit(`/audit/org/acme/resource/id/${one[0].resource.id}`);
    assert.deepEqual(byId.body.items.map((e: any) => e.id), [one[0].id]);
    assert.equal(byId.body.kind, 'queryresult');
    assert.equal(byId.body.itemKind, 'auditevent');
    assert.deepEqual((await audit(`/audit/org/acme/resource/name/audit-g3`)).body.items.map((e: any) => e.id), [one[0].id]);
    assert.ok((await events('&subjectName=admin')).length > 5);
    assert.deepEqual(await events('&subjectName=nobody'), []);
    const single = await audit(`/audit/org/acme/id/${one[0].id}`);
    assert.equal(single.status, 200);
    assert.equal(single.body.resource.name, 'audit-g3');
    assert.equal((await audit('/audit/org/acme/id/00000000-0000-4000-8000-000000000000')).status, 404);
    const from = one[0].eventTime;
    const later = await events(`&resourceType=group&fromEvent=${encodeURIComponent(from)}`);
    assert.ok(later.every((e) => e.eventTime >= from));
    assert.ok(later.some((e) => e.resource.name === 'audit-g4'));
    assert.deepEqual(await events(`&resourceType=group&toEvent=2000-01-01T00:00:00Z`), []);
    assert.equal((await audit('/audit/org/acme?fromEvent=yesterday')).status, 400);
    // A parameter given twice is refused, not half-applied (found by fuzzing: it was a 500).
    for (const twice of ['contextName=cpln&contextName=x', 'resourceType=gvc&resourceType=group', 'limit=1&limit=2', 'toEvent=2000-01-01T00:00:00Z&toEvent=2001-01-01T00:00:00Z']) {
      const refused = await audit(`/audit/org/acme?${twice}`);
      assert.equal(refused.status, 400, twice);
      assert.match(refused.body.message, /is given more than once/);
    }
    const seen: string[] = [];
    let url: string | undefined = '/audit/org/acme?resourceType=group&limit=2';
    while (url) {
      const page = await audit(url);
      assert.equal(page.status, 200);
      seen.push(...page.body.items.map((e: any) => e.id));
      url = page.body.links.find((l: any) => l.rel === 'next')?.href;
    }
    assert.equal(new Set(seen).size, seen.length);
    assert.ok(seen.length >= 5);
  });

  test('custom events need writeAudit on the context, reading needs readAudit; nothing crosses orgs', async () => {
    assert.equal((await k.call('POST', '/org/acme/auditctx', { name: 'app-events' })).status, 201);
    const posted = await audit('/audit/org/acme/auditctx/app-events', k.token, 'POST', { resource: { id: 'r1', type: 'invoice', name: 'inv-1' }, action: { type: 'approve' } });
    assert.equal(posted.status, 201, posted.raw);
    assert.equal(posted.body.context.name, 'app-events');
    const read = await audit('/audit/org/acme?contextName=app-events');
    assert.deepEqual(read.body.items.map((e: any) => e.action.type), ['approve']);
    assert.ok((await events()).every((e) => e.context.name === 'cpln'), 'the cpln context holds platform events only');
    assert.equal((await audit('/audit/org/acme/auditctx/app-events', k.token, 'POST', { resource: { type: 'x' }, action: { type: 'y' }, extra: 1 })).status, 400);
    assert.equal((await audit('/audit/org/acme/auditctx/app-events', k.token, 'POST', { action: { type: 'y' } })).status, 400);
    assert.equal((await audit('/audit/org/acme/auditctx/nope', k.token, 'POST', { resource: { type: 'x' }, action: { type: 'y' } })).status, 404);
    assert.equal((await audit('/audit/org/acme/auditctx/app-events', bystander, 'POST', { resource: { type: 'x' }, action: { type: 'y' } })).status, 403);
    assert.equal((await audit('/audit/org/acme', bystander)).status, 403);
    assert.equal((await audit('/audit/org/acme', stranger)).status, 403);
    assert.equal((await audit(`/audit/org/acme/id/${posted.body.id}`, stranger)).status, 403);
    assert.equal((await audit('/audit/org/elsewhere')).status, 200, 'the creator of elsewhere reads its events');
    const theirs = await audit('/audit/org/elsewhere?limit=1000');
    assert.ok(theirs.body.items.every((e: any) => e.context.org === 'elsewhere'));
    assert.equal((await k.call('DELETE', '/org/acme/auditctx/app-events')).status, 403);
    assert.equal((await k.call('DELETE', '/org/acme/auditctx/cpln')).status, 403);
    assert.equal((await k.call('GET', '/org/acme/auditctx/cpln')).body.origin, 'builtin');
  });

  test('an item\'s -eventlog lists its events', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'logged' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/logged', { tags: { a: '1' } })).status, 200);
    const log = await k.call('GET', '/org/acme/gvc/logged/-eventlog');
    assert.equal(log.status, 200);
    assert.deepEqual(Object.keys(log.body).sort(), ['itemKind', 'items', 'kind', 'links']);
    assert.deepEqual(log.body.items.map((e: any) => e.action.type), ['create', 'edit']);
    assert.deepEqual(log.body.items.map((e: any) => [e.kind, e.status]), [['event', 'create'], ['event', 'edit']]);
    assert.ok(log.body.items.every((e: any) => typeof e.created === 'string' && e.resource.name === 'logged'));
    assert.equal((await k.call('GET', '/org/acme/gvc/logged/-eventlog', undefined, { token: bystander })).status, 403);
    assert.equal((await k.call('GET', '/org/acme/gvc/missing/-eventlog')).status, 404);
  });

  test('the hash chain verifies and catches an edited row', async () => {
    const intact = await verifyChain(k.store, 'acme');
    assert.equal(intact.ok, true, JSON.stringify(intact));
    const victim = (await events('&resourceName=audit-g2'))[0];
    await tamperWithEvent(k, 'acme', victim.seq, JSON.stringify({ ...victim, subject: { name: 'someone-else' } }));
    const edited = await verifyChain(k.store, 'acme');
    assert.equal(edited.ok, false);
    assert.equal(!edited.ok && edited.brokenAt, victim.seq);
  });

  test('retention prunes the oldest events, the chain verifies from its anchor, and a deleted row or cut tail is caught', async () => {
    const fresh = await startKeel(backend, 'retained');
    try {
      for (let i = 0; i < 12; i++) assert.equal((await fresh.call('POST', '/org/retained/group', { name: `r${i}` })).status, 201);
      const head = await fresh.store.auditHead('retained');
      const removed = await fresh.store.pruneAudit('retained', { keep: 5 });
      assert.equal(removed, head.seq - 5);
      const after = await verifyChain(fresh.store, 'retained');
      assert.deepEqual(after, { ok: true, events: 5, from: head.seq - 4, to: head.seq, restores: [] });
      assert.equal(await fresh.store.pruneAudit('retained', { before: '2000-01-01T00:00:00.000Z' }), 0);
      assert.equal(await tamperWithEvent(fresh, 'retained', head.seq - 4), 1);
      const cut = await verifyChain(fresh.store, 'retained');
      assert.equal(cut.ok, false);
      assert.equal(!cut.ok && cut.brokenAt, head.seq - 4);
      assert.equal(await tamperWithEvent(fresh, 'retained', head.seq), 1);
      const tail = await verifyChain(fresh.store, 'retained');
      assert.equal(tail.ok, false);
    } finally {
      await fresh.close();
    }
  });
});
