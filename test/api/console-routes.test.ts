// What the console asks the API for beyond the generic routes, on both backends: the caller's own
// permissions on a kind (so "Create" is decided without a write that fails), the audit trail newest
// first without the reconcilers' status events, and a logs tail opened by a browser, whose
// WebSocket cannot send an Authorization header (the key travels as a subprotocol).
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { TOKEN_PROTOCOL } from '../../src/auth/credentials.js';
import { stamp } from '../../src/logs/time.js';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';

forEachBackend('routes the console relies on', (backend) => {
  let k: TestKeel;
  let viewer: string;
  let host: string;
  const audit = async (url: string, token: string = k.token) => {
    const res = await k.app.audit.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } });
    return { status: res.statusCode, headers: res.headers, body: res.body ? JSON.parse(res.body) : undefined };
  };

  before(async () => {
    k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: 50 });
    await k.app.core.listen({ host: '127.0.0.1', port: 0 });
    host = `127.0.0.1:${(k.app.core.server.address() as AddressInfo).port}`;
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'viewer' })).status, 201);
    viewer = (await k.call('POST', '/org/acme/serviceaccount/viewer/-addKey', { description: 'v' })).body.key;
    const policy = { name: 'viewer-workloads', targetKind: 'workload', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/viewer'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
  });
  after(() => k.close());

  test('-granted: the permissions the caller holds on every item of a kind, with no failing request', async () => {
    const mine = await k.call('GET', '/org/acme/secret/-granted');
    assert.equal(mine.status, 200);
    assert.equal(mine.body.kind, 'grantedpermissions');
    assert.ok(mine.body.granted.includes('create') && mine.body.granted.includes('reveal'), JSON.stringify(mine.body));
    assert.equal((await k.call('GET', '/org/acme/gvc/-granted')).status, 200);
    const theirs = await k.call('GET', '/org/acme/gvc/any/workload/-granted', undefined, { token: viewer });
    assert.equal(theirs.status, 200);
    assert.deepEqual(theirs.body.granted, ['view']);
    assert.deepEqual((await k.call('GET', '/org/acme/secret/-granted', undefined, { token: viewer })).body.granted, []);
    // Another org's permissions are not told.
    assertError(await k.call('GET', '/org/other/secret/-granted', undefined, { token: viewer }), 403, 'forbidden');
    assertError(await k.call('GET', '/org/acme/secret/-granted', undefined, { token: null }), 401, 'unauthorized');
  });

  test('the Audit API pages newest first and leaves out status events when asked', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'trail', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } })).status, 201);
    const web = { name: 'web', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.25', ports: [{ protocol: 'http', number: 80 }] }] } };
    assert.equal((await k.call('POST', '/org/acme/gvc/trail/workload', web)).status, 201);
    await waitFor('status events of the workload', () => audit('/audit/org/acme?limit=1000&actionType=status&resourceType=deployment'), (r) => r.body.items.length > 0);
    for (let i = 0; i < 5; i++) assert.equal((await k.call('PATCH', '/org/acme/gvc/trail', { description: `change ${i}` })).status, 200);

    // The reconcilers may still be writing status events, so the pages are compared without them.
    const forward = (await audit('/audit/org/acme?limit=1000&exceptActionType=status')).body.items as any[];
    let pages: any[] = [];
    let next: string | undefined = '/audit/org/acme?limit=3&direction=backward&exceptActionType=status';
    while (next) {
      const page = await audit(next);
      assert.equal(page.status, 200);
      assert.ok(page.body.items.length <= 3);
      pages = pages.concat(page.body.items);
      next = page.body.links.find((l: { rel: string }) => l.rel === 'next')?.href;
    }
    assert.deepEqual(pages.map((e) => e.id), forward.map((e) => e.id).reverse(), 'every event once, newest first');
    assert.equal(pages[0].resource.name, 'trail');
    assert.equal(pages[0].action.type, 'edit');

    assert.ok(forward.length > 5 && forward.every((e) => e.action.type !== 'status'));
    const all = (await audit('/audit/org/acme?limit=1000')).body.items as any[];
    assert.ok(all.some((e) => e.action.type === 'status'));
    const newest = (await audit('/audit/org/acme?limit=1&direction=backward')).body.items[0];
    assert.ok(newest.id === all[all.length - 1].id || Date.parse(newest.eventTime) >= Date.parse(all[all.length - 1].eventTime), 'the first backward event is the newest');
    const sideways = await audit('/audit/org/acme?direction=sideways');
    assertError(sideways, 400, 'bad_request');
    assert.match(sideways.body.message, /direction must be forward or backward/);
  });

  test('-granted on an item: what the caller holds on it, by name too; told only to a caller that may read it', async () => {
    const policy = { name: 'viewer-edits-trail', targetKind: 'gvc', targetLinks: ['//gvc/trail'], bindings: [{ permissions: ['edit'], principalLinks: ['//serviceaccount/viewer'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    const onItem = await k.call('GET', '/org/acme/gvc/trail/-granted', undefined, { token: viewer });
    assert.equal(onItem.status, 200);
    assert.deepEqual(onItem.body.granted, ['edit', 'view']);
    assert.deepEqual((await k.call('GET', '/org/acme/gvc/-granted', undefined, { token: viewer })).body.granted, [], 'a grant by name is not one on every GVC');
    assert.deepEqual((await k.call('GET', '/org/acme/gvc/trail/workload/web/-granted', undefined, { token: viewer })).body.granted, ['view']);
    const admin = (await k.call('GET', '/org/acme/gvc/trail/workload/web/-granted')).body.granted as string[];
    for (const p of ['edit', 'delete', 'exec', 'exec.runCronWorkload', 'manage']) assert.ok(admin.includes(p), `${p} in ${admin}`);
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'hidden', type: 'opaque', data: { payload: 'x' } })).status, 201);
    // Refused in the words of the item's GET, so it tells nothing the GET does not.
    for (const name of ['hidden', 'missing']) {
      const asked = await k.call('GET', `/org/acme/secret/${name}/-granted`, undefined, { token: viewer });
      const read = await k.call('GET', `/org/acme/secret/${name}`, undefined, { token: viewer });
      assert.ok(asked.status >= 400);
      assert.deepEqual([asked.status, asked.body.code, asked.body.message], [read.status, read.body.code, read.body.message]);
    }
  });

  test('a tail opened with the key as a WebSocket subprotocol (a browser cannot send Authorization)', async () => {
    const offer = (key: string) => ['keel', `${TOKEN_PROTOCOL}${Buffer.from(key).toString('base64url')}`];
    const url = `ws://${host}/logs/org/acme/loki/api/v1/tail?query=${encodeURIComponent('{gvc="subprotocol"}')}`;
    await k.store.transaction((tx) => tx.appendLogs([{ org: 'acme', ts: stamp(Date.now()), labels: { gvc: 'subprotocol', workload: 'w' }, line: 'before the tail' }]));
    const ws = new WebSocket(url, offer(k.token));
    const got: string[] = [];
    ws.on('message', (data) => {
      for (const s of JSON.parse(String(data)).streams) for (const [, line] of s.values) got.push(line);
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    assert.equal(ws.protocol, 'keel', 'the server picks the plain subprotocol, so the key is not echoed');
    await waitFor('the history', async () => got, (g) => g.includes('before the tail'));
    await k.store.transaction((tx) => tx.appendLogs([{ org: 'acme', ts: stamp(Date.now()), labels: { gvc: 'subprotocol', workload: 'w' }, line: 'live line' }]));
    await waitFor('the live line', async () => got, (g) => g.includes('live line'));
    ws.close();

    const refused = (protocols: string[]) =>
      new Promise<number>((resolve, reject) => {
        const bad = new WebSocket(url, protocols);
        bad.once('unexpected-response', (_request, response) => {
          resolve(response.statusCode ?? 0);
          response.resume();
          bad.terminate();
        });
        bad.once('open', () => reject(new Error('the tail was opened')));
        bad.once('error', () => {});
      });
    assert.equal(await refused(offer('not-a-key')), 401);
    assert.equal(await refused(['keel']), 401);
    // A key without readLogs is refused as with the header.
    assert.equal(await refused(offer(viewer)), 403);
  });
});
