// Sandboxes: throw-away orgs through POST /-admin/sandboxes and the MCP create_sandbox tool.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { forEachBackend, startKeel, type Backend, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';

forEachBackend('sandboxes', (backend: Backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend, 'acme', { allowSandboxes: true, maxSandboxes: 25 });
  });
  after(async () => k.close());

  const orgCount = async () => (await k.store.orgs()).length;

  test('20 created in parallel: each its own, isolated from the others and the first org, the creator no member; gone after the TTL and the org count back', async () => {
    const before = await orgCount();
    const made = await Promise.all(
      Array.from({ length: 20 }, (_, i) => k.call('POST', '/-admin/sandboxes', { ttlSeconds: 10, seed: [{ kind: 'gvc', name: `g${i}`, tags: { n: String(i) } }] })),
    );
    for (const res of made) assert.equal(res.status, 201, res.raw);
    const boxes = made.map((r) => r.body as { org: string; key: string; expiresAt: string });
    assert.equal(new Set(boxes.map((b) => b.org)).size, 20);
    assert.equal(await orgCount(), before + 20);
    for (const [i, box] of boxes.entries()) {
      assert.ok(Date.parse(box.expiresAt) > Date.now());
      const own = await k.call('GET', `/org/${box.org}/gvc/g${i}`, undefined, { token: box.key });
      assert.equal(own.status, 200, own.raw);
      // Its key sees nothing of the first org nor of another sandbox.
      assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: box.key })).status, 403);
      const other = boxes[(i + 1) % 20];
      const peek = await k.call('GET', `/org/${other.org}/gvc`, undefined, { token: box.key });
      assert.equal(peek.status, 403, peek.raw);
      assert.equal((await k.call('POST', `/org/${other.org}/gvc`, { name: 'intruder' }, { token: box.key })).status, 403);
      // The creator is not a member of it.
      assert.equal((await k.call('GET', `/org/${box.org}/gvc`)).status, 403);
    }
    // Its own key cannot keep it alive: an org's status is not the client's to write (a PATCH of it is ignored).
    const keep = await k.call('PATCH', `/org/${boxes[0].org}`, { status: { sandbox: { expiresAt: '2999-01-01T00:00:00Z' } } }, { token: boxes[0].key });
    assert.equal(keep.status, 200, keep.raw);
    assert.equal(keep.body.status.sandbox.expiresAt, boxes[0].expiresAt);
    assert.equal((await k.call('GET', `/org/${boxes[0].org}`, undefined, { token: boxes[0].key })).body.status.sandbox.expiresAt, boxes[0].expiresAt);
    const expiry = Math.max(...boxes.map((b) => Date.parse(b.expiresAt)));
    // The list drops a sandbox once its removal has committed: by then its org is gone too.
    await waitFor('every sandbox gone from the list', async () => (await k.call('GET', '/-admin/sandboxes')).body.items, (items) => items.length === 0, expiry - Date.now() + 10_000);
    assert.equal(await orgCount(), before);
    // The first org's superusers (who may create orgs and sandboxes) are told it is gone; anyone
    // else is refused it as any org they are no member of, learning nothing of which names exist.
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: `viewer-${backend}` })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': [`/org/acme/serviceaccount/viewer-${backend}`] })).status, 200);
    const viewer = (await k.call('POST', `/org/acme/serviceaccount/viewer-${backend}/-addKey`, {})).body.key as string;
    const survivor = (await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 })).body as { org: string; key: string };
    for (const box of boxes) {
      const gone = await k.call('GET', `/org/${box.org}`);
      assert.equal(gone.status, 404, gone.raw);
      assert.match(gone.body.message, new RegExp(`org '${box.org}' not found`));
      assert.equal((await k.call('GET', `/org/${box.org}/gvc`)).status, 404);
      for (const token of [viewer, survivor.key]) {
        assert.equal((await k.call('GET', `/org/${box.org}`, undefined, { token })).status, 403);
        assert.equal((await k.call('GET', `/org/${box.org}/gvc`, undefined, { token })).status, 403);
      }
      assert.equal((await k.call('GET', `/org/${box.org}/gvc`, undefined, { token: box.key })).status, 401);
    }
    // An org that exists but is not theirs stays 403 for them too.
    assert.equal((await k.call('GET', `/org/${survivor.org}`, undefined, { token: viewer })).status, 403);
    assert.equal((await k.call('DELETE', `/-admin/sandboxes/${survivor.org}`)).status, 202);
  });

  test('refused: another key than the first org superuser, a TTL out of bounds, a bad seed (nothing made), past KEEL_MAX_SANDBOXES', async () => {
    const before = await orgCount();
    const box = (await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 })).body as { org: string; key: string };
    assert.equal((await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 }, { token: box.key })).status, 403);
    for (const body of [{}, { ttlSeconds: 0 }, { ttlSeconds: 86_401 }, { ttlSeconds: 1.5 }, { ttlSeconds: 60, extra: 1 }, { ttlSeconds: 60, seed: 'x' }]) {
      const res = await k.call('POST', '/-admin/sandboxes', body);
      assert.equal(res.status, 400, JSON.stringify(body));
    }
    const badSeed = await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 60, seed: [{ kind: 'gvc', name: 'ok' }, { kind: 'workload', name: 'w', gvc: 'missing', spec: {} }] });
    assert.equal(badSeed.status, 400, badSeed.raw);
    assert.equal(await orgCount(), before + 1);
    const many = await Promise.all(Array.from({ length: 30 }, () => k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 })));
    assert.equal(many.filter((r) => r.status === 201).length, 24);
    const over = many.find((r) => r.status !== 201)!;
    assert.equal(over.status, 429);
    assert.match(over.body.message, /KEEL_MAX_SANDBOXES/);
    // Deleted on demand.
    for (const r of [...many.filter((r) => r.status === 201), { body: box }]) assert.equal((await k.call('DELETE', `/-admin/sandboxes/${r.body.org}`)).status, 202);
    assert.equal(await orgCount(), before);
    assert.equal((await k.call('DELETE', '/-admin/sandboxes/acme')).status, 404);
    assert.equal((await k.call('GET', '/org/acme')).status, 200);
  });

  test('the TTL survives a restart: another Keel on the same store removes it at its time', async () => {
    const made = await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 4 });
    assert.equal(made.status, 201);
    const { org, key } = made.body;
    const second = await k.reopen();
    // The first Keel forgets it, as a process that went away would.
    await k.app.core.close();
    await waitFor('the sandbox removed by the second Keel', async () => (await second.app.core.inject({ method: 'GET', url: `/org/${org}/gvc`, headers: { authorization: `Bearer ${key}` } })).statusCode, (s) => s === 401, 15_000);
    assert.ok(!(await second.store.orgs()).includes(org));
  });
});

forEachBackend('sandboxes shared by two Keels on one store', (backend: Backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend, 'acme', { allowSandboxes: true, maxSandboxes: 5 });
  });
  after(async () => k.close());

  test('KEEL_MAX_SANDBOXES counts the store, not a process; each removal is an event in the first org\'s chain naming who removed it', async () => {
    const second = await k.reopen({ allowSandboxes: true, maxSandboxes: 5 });
    const apps = [k.app, second.app];
    const sandboxesIn = async () => (await k.store.orgs()).filter((o) => o.startsWith('sandbox-'));
    // Every sandbox of the limit's checks outlives the test: one removed at its TTL while they run
    // would make room, however long a loaded machine takes over them. The one removed at its TTL is made after.
    const burst = await Promise.all(Array.from({ length: 12 }, (_, i) => k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 }, { app: apps[i % 2] })));
    for (const res of burst) assert.ok(res.status === 201 || res.status === 429, res.raw);
    const made = burst.filter((r) => r.status === 201).map((r) => r.body.org as string);
    assert.ok(made.length >= 1 && made.length <= 5, `${made.length} made`);
    assert.deepEqual((await sandboxesIn()).sort(), [...made].sort());
    // Filled one by one through either process: never more than 5 in the store.
    for (let i = 0; made.length < 5; i++) {
      const res = await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 }, { app: apps[i % 2] });
      assert.equal(res.status, 201, res.raw);
      made.push(res.body.org);
    }
    for (const app of apps) {
      const over = await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 }, { app });
      assert.equal(over.status, 429, over.raw);
      assert.match(over.body.message, /KEEL_MAX_SANDBOXES/);
    }
    assert.equal((await sandboxesIn()).length, 5);

    // One removed on demand by the caller (through the other process), which makes room for one
    // removed at its TTL; a third Keel started after it is made finds it in the store and watches it too.
    const asked = made.pop()!;
    assert.equal((await k.call('DELETE', `/-admin/sandboxes/${asked}`, undefined, { app: second.app })).status, 202);
    const short = await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 2 });
    assert.equal(short.status, 201, short.raw);
    const third = await k.reopen({ allowSandboxes: true, maxSandboxes: 5 });
    const events = async () => {
      const res = await k.app.audit.inject({ method: 'GET', url: '/audit/org/acme?resourceType=org&actionType=delete', headers: { authorization: `Bearer ${k.token}` } });
      assert.equal(res.statusCode, 200, res.body);
      return (JSON.parse(res.body).items as Array<{ subject: { name: string; data: { type: string; principalLink?: string } }; resource: { name: string; data: { sandbox: { removedBy: string } } } }>);
    };
    const byTtl = await waitFor('an event for the sandbox removed at its TTL', events, (items) => items.some((e) => e.resource.data.sandbox.removedBy === 'ttl'), 20_000);
    const ttl = byTtl.find((e) => e.resource.data.sandbox.removedBy === 'ttl')!;
    assert.equal(ttl.resource.name, short.body.org);
    assert.equal(ttl.subject.name, 'keel');
    assert.equal(ttl.subject.data.type, 'keel');
    const request = byTtl.find((e) => e.resource.name === asked)!;
    assert.equal(request.resource.data.sandbox.removedBy, 'request');
    assert.equal(request.subject.data.principalLink, '/org/acme/serviceaccount/admin');
    // Exactly one event per removal, though two processes watch its TTL.
    assert.equal(byTtl.filter((e) => e.resource.name === ttl.resource.name).length, 1);
    assert.deepEqual((await sandboxesIn()).sort(), [...made].sort());
    // Room again: either process may make one.
    assert.equal((await k.call('POST', '/-admin/sandboxes', { ttlSeconds: 600 }, { app: second.app })).status, 201);
    for (const org of await sandboxesIn()) assert.equal((await k.call('DELETE', `/-admin/sandboxes/${org}`)).status, 202);
    await second.app.core.close();
    await third.app.core.close();
  });
});

forEachBackend('sandboxes through MCP', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { allowSandboxes: true });
    base = await k.listen();
  });
  after(async () => k.close());

  test('create_sandbox, then a session with its key creates a workload there; off, the route is a 404 naming the setting', async () => {
    const client = new Client({ name: 'agent', version: '1' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${k.token}` } } }));
    const made = await client.callTool({ name: 'create_sandbox', arguments: { ttlSeconds: 600, seed: [{ kind: 'gvc', name: 'play' }] } });
    assert.equal(made.isError, undefined, JSON.stringify(made));
    const { org, key } = made.structuredContent as { org: string; key: string };
    const inside = new Client({ name: 'agent', version: '1' });
    await inside.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
    const wl = await inside.callTool({ name: 'create_workload', arguments: { name: 'hello', gvc: 'play', image: 'nginx:1.27', port: 80 } });
    assert.equal(wl.isError, undefined, JSON.stringify(wl));
    assert.equal((await k.call('GET', `/org/${org}/gvc/play/workload/hello`, undefined, { token: key })).status, 200);
    const refused = await inside.callTool({ name: 'create_sandbox', arguments: { ttlSeconds: 60 } });
    assert.equal(refused.isError, true);
    assert.equal((await client.callTool({ name: 'delete_sandbox', arguments: { org } })).isError, undefined);
    assert.equal((await k.call('GET', `/org/${org}/gvc`, undefined, { token: key })).status, 401);
    assert.ok(!(await k.store.orgs()).includes(org));
    await inside.close();
    await client.close();
    const off = await startKeel(backend);
    try {
      const res = await off.call('POST', '/-admin/sandboxes', { ttlSeconds: 60 });
      assert.equal(res.status, 404);
      assert.match(res.body.message, /KEEL_ALLOW_SANDBOXES=on/);
    } finally {
      await off.close();
    }
  });
});
