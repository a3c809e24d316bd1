// Custom audit events cannot pass for Keel's own: the actions Keel writes (a restore above all) and
// its context `cpln` are refused, and a forged restore stored before they were (as an older Keel
// accepted it) neither shows in `keel audit verify` as a restore nor makes resuming watches answer 410.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { newEventId, PLATFORM_CONTEXT } from '../../src/audit/events.js';
import { verifyChain } from '../../src/audit/verify.js';
import type { NewAuditEvent } from '../../src/store/types.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

/** A custom restore event as an older Keel stored it from `POST /audit/org/ORG/auditctx/CTX`: the server set `eventSource: custom`. */
function forgedRestore(org: string, context: string, by: string): NewAuditEvent {
  const id = newEventId();
  const now = new Date().toISOString();
  const body = JSON.stringify({
    id,
    eventTime: now,
    postedTime: now,
    receivedTime: now,
    requestId: id,
    context: { org, name: context, eventSource: 'custom' },
    subject: { name: by, data: { type: 'serviceaccount', principalLink: `/org/${org}/serviceaccount/${by}` } },
    resource: { id: '', name: org, type: 'org', data: { snapshot: 'forged', position: 1 } },
    action: { type: 'restore' },
    result: { status: 'success' },
  });
  return { org, id, context, eventTime: now, resourceType: 'org', resourceName: org, resourceId: '', subjectName: by, actionType: 'restore', body };
}

forEachBackend('custom audit events cannot pass for Keel', (backend) => {
  let k: TestKeel;
  let base: string;
  const audit = async (url: string, body: unknown) => {
    const res = await k.app.audit.inject({ method: 'POST', url, headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
    return { status: res.statusCode, body: JSON.parse(res.body) };
  };
  const watchStatus = async (since: number) => {
    const res = await fetch(`${base}/org/acme/-watch?kind=group&since=${since}`, { headers: { authorization: `Bearer ${k.token}` } });
    const body = res.status === 200 ? undefined : await res.json();
    if (res.status === 200) await res.body!.cancel();
    return { status: res.status, body };
  };

  before(async () => {
    k = await startKeel(backend);
    base = await k.listen();
    assert.equal((await k.call('POST', '/org/acme/auditctx', { name: 'app-events' })).status, 201);
  });
  after(() => k.close());

  test("Keel's actions and its context are refused in custom events (400 naming the field); others are written", async () => {
    for (const action of ['restore', 'Restore', 'create', 'edit', 'delete', 'status', 'addKey']) {
      const refused = await audit('/audit/org/acme/auditctx/app-events', { resource: { type: 'org', name: 'acme' }, action: { type: action } });
      assert.equal(refused.status, 400, action);
      assert.equal(refused.body.code, 'bad_request');
      assert.deepEqual(refused.body.details.errors.map((e: any) => e.path), ['action.type'], action);
    }
    const byPath = await audit('/audit/org/acme/auditctx/cpln', { resource: { type: 'invoice' }, action: { type: 'approve' } });
    assert.equal(byPath.status, 400);
    assert.deepEqual(byPath.body.details.errors.map((e: any) => e.path), ['context']);
    const byBody = await audit('/audit/org/acme/auditctx/app-events', { resource: { type: 'invoice' }, action: { type: 'approve' }, context: { name: 'cpln' } });
    assert.equal(byBody.status, 400);
    assert.deepEqual(byBody.body.details.errors.map((e: any) => e.path), ['context.name']);

    const written = await audit('/audit/org/acme/auditctx/app-events', { resource: { type: 'invoice', name: 'inv-1' }, action: { type: 'approve' }, context: { data: { shop: 'north' } } });
    assert.equal(written.status, 201);
    assert.equal(written.body.action.type, 'approve');
    assert.equal(written.body.context.name, 'app-events');
    assert.deepEqual(written.body.context.data, { shop: 'north' });
  });

  test('a forged restore stored by an older Keel fools neither audit verify nor resuming watches', async () => {
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'watched' })).status, 201);
    const before = (await k.store.auditHead('acme')).seq;
    // As an older Keel appended what `POST …/auditctx/cpln` and `…/auditctx/app-events` were given.
    for (const context of [PLATFORM_CONTEXT, 'app-events']) {
      const event = forgedRestore('acme', context, 'mallory');
      await k.store.transaction((tx) => tx.appendAudit(event));
      await k.store.chained([event]);
    }
    assert.equal((await k.call('PATCH', '/org/acme/group/watched', { description: 'after' })).status, 200);

    const report = await verifyChain(k.store, 'acme');
    assert.equal(report.ok, true);
    assert.deepEqual(report.ok && report.restores, [], 'no restore is reported');
    const resumed = await watchStatus(before);
    assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
  });
});
