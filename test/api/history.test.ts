// An item's history (GET <item>/-history) from its audit events; the routes the console relies on:
// `/` sends a browser to /console, the kind registry at /-kinds, and CORS on the Audit API for the
// Core API's origin only.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import { join } from 'node:path';
import pg from 'pg';
import { PLATFORM_CONTEXT } from '../../src/audit/events.js';
import { auditQuery } from '../../src/store/audit-sql.js';
import { AUDIT_LAYOUT } from '../../src/store/postgres/statements.js';
import { auditLayout, lookupFileOf, ORG_SPAN } from '../../src/store/sqlite/lookup.js';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

forEachBackend('item history', (backend) => {
  let k: TestKeel;
  let viewer: string;

  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'viewer' })).status, 201);
    viewer = (await k.call('POST', '/org/acme/serviceaccount/viewer/-addKey', { description: 'v' })).body.key;
    // The viewer may view GVCs named "seen" only.
    const policy = { name: 'viewer-seen', targetKind: 'gvc', targetLinks: ['//gvc/seen'], bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/viewer'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
  });
  after(() => k.close());

  test('lists every version newest first with who, when, the action and the item as it then was', async () => {
    const created = await k.call('POST', '/org/acme/gvc', { name: 'seen', description: 'one' });
    assert.equal(created.status, 201);
    const second = await k.call('PATCH', '/org/acme/gvc/seen', { description: 'two', tags: { team: 'a' } });
    const third = await k.call('PUT', '/org/acme/gvc/seen', { name: 'seen', description: 'three' });
    assert.equal(third.status, 200);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/seen?dryRun=true', { description: 'not saved' })).status, 200);
    const res = await k.call('GET', '/org/acme/gvc/seen/-history');
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(res.body).sort(), ['itemKind', 'items', 'kind', 'links']);
    assert.equal(res.body.kind, 'list');
    assert.equal(res.body.itemKind, 'history');
    const items = res.body.items as any[];
    assert.deepEqual(items.map((h) => h.version), [3, 2, 1]);
    assert.deepEqual(items.map((h) => h.action), ['edit', 'edit', 'create']);
    assert.deepEqual(items[0].resource, third.body);
    assert.deepEqual(items[1].resource, second.body);
    assert.deepEqual(items[2].resource, created.body);
    for (const h of items) {
      assert.deepEqual(Object.keys(h).sort(), ['action', 'at', 'resource', 'subject', 'version']);
      assert.equal(h.subject.name, 'admin');
      assert.ok(!Number.isNaN(Date.parse(h.at)));
    }
    assert.ok(Date.parse(items[0].at) >= Date.parse(items[2].at));
  });

  test('pages through next links, newest first, without repeating or skipping a version', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'paged' })).status, 201);
    for (let i = 1; i <= 6; i++) assert.equal((await k.call('PATCH', '/org/acme/gvc/paged', { description: `d${i}` })).status, 200);
    const seen: number[] = [];
    let url: string | undefined = '/org/acme/gvc/paged/-history?limit=3';
    while (url) {
      const page = await k.call('GET', url);
      assert.equal(page.status, 200);
      assert.ok(page.body.items.length <= 3);
      seen.push(...page.body.items.map((h: any) => h.version));
      url = page.body.links.find((l: any) => l.rel === 'next')?.href;
    }
    assert.deepEqual(seen, [7, 6, 5, 4, 3, 2, 1]);
    assertError(await k.call('GET', '/org/acme/gvc/paged/-history?next=abc'), 400, 'bad_request');
    assertError(await k.call('GET', '/org/acme/gvc/paged/-history?next=-4'), 400, 'bad_request');
  });

  test('is authorized like -eventlog: view on the item, 403 without it, 404 for a missing item', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'hidden' })).status, 201);
    const allowed = await k.call('GET', '/org/acme/gvc/seen/-history', undefined, { token: viewer });
    assert.equal(allowed.status, 200);
    assert.ok(allowed.body.items.length >= 3);
    assertError(await k.call('GET', '/org/acme/gvc/hidden/-history', undefined, { token: viewer }), 403, 'forbidden');
    assertError(await k.call('GET', '/org/acme/gvc/hidden/-eventlog', undefined, { token: viewer }), 403, 'forbidden');
    assertError(await k.call('GET', '/org/acme/gvc/hidden/-history', undefined, { token: null }), 401, 'unauthorized');
    assertError(await k.call('GET', '/org/acme/gvc/nowhere/-history'), 404, 'not_found');
    assertError(await k.call('GET', '/org/acme/gvc/nowhere/workload/w/-history'), 404, 'not_found');
    assertError(await k.call('POST', '/org/acme/gvc/seen/-history', {}), 405, 'method_not_allowed');
  });

  test('works for every kind through the same route, including gvc-scoped kinds and the org', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc/seen/identity', { name: 'who' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/seen/identity/who', { description: 'changed' })).status, 200);
    const identity = await k.call('GET', '/org/acme/gvc/seen/identity/who/-history');
    assert.equal(identity.status, 200);
    assert.deepEqual(identity.body.items.map((h: any) => [h.version, h.resource.description ?? null]), [[2, 'changed'], [1, 'who']]);
    assert.equal((await k.call('PATCH', '/org/acme', { description: 'the org' })).status, 200);
    const org = await k.call('GET', '/org/acme/-history');
    assert.equal(org.status, 200);
    assert.equal(org.body.items[0].resource.description, 'the org');
  });

  test('secret values never appear, even to a caller who may reveal them', async () => {
    const value = 'history-must-not-show-this-7731';
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'vault', type: 'opaque', data: { payload: value, encoding: 'plain' } })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/secret/vault', { data: { payload: `${value}-2`, encoding: 'plain' } })).status, 200);
    const res = await k.call('GET', '/org/acme/secret/vault/-history');
    assert.equal(res.status, 200);
    assert.equal(res.body.items.length, 2);
    assert.ok(!res.raw.includes(value));
    assert.ok(res.body.items.every((h: any) => h.resource.data === undefined && h.resource.type === 'opaque'));
  });

  test('restore: replacing with an old version carrying the current version is itself a new, audited version', async () => {
    const history = (await k.call('GET', '/org/acme/gvc/seen/-history')).body.items as any[];
    const first = history[history.length - 1].resource;
    const restored = await k.call('PUT', '/org/acme/gvc/seen', { ...first, version: history[0].version });
    assert.equal(restored.status, 200);
    assert.equal(restored.body.description, 'one');
    const stale = await k.call('PUT', '/org/acme/gvc/seen', { ...first, version: history[0].version });
    assertError(stale, 409, 'conflict');
    const after = (await k.call('GET', '/org/acme/gvc/seen/-history')).body.items as any[];
    assert.equal(after[0].version, history[0].version + 1);
    assert.equal(after[0].resource.description, 'one');
  });

  test('documented in the OpenAPI document', async () => {
    const doc = (await k.call('GET', '/openapi.json', undefined, { token: null })).body;
    const op = doc.paths['/org/{org}/gvc/{gvc}/workload/{name}/-history']?.get;
    assert.ok(op, 'the workload history route is documented');
    assert.match(JSON.stringify(op.responses['200']), /History/);
    assert.ok(doc.paths['/org/{org}/secret/{name}/-history']?.get);
  });
});

forEachBackend('history of an item with thousands of versions', (backend) => {
  let k: TestKeel;
  const VERSIONS = 2000;
  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'busy' })).status, 201);
    for (let i = 2; i <= VERSIONS; i++) assert.equal((await k.call('PATCH', '/org/acme/gvc/busy', { description: `v${i}` })).status, 200);
  });
  after(() => k.close());

  test('?limit=1 answers the newest version and a next link; following it gives the one before', async () => {
    const first = await k.call('GET', '/org/acme/gvc/busy/-history?limit=1');
    assert.equal(first.status, 200, first.raw);
    assert.deepEqual(first.body.items.map((h: any) => h.version), [VERSIONS]);
    const next = first.body.links.find((l: any) => l.rel === 'next').href;
    assert.match(next, /\?limit=1&next=\d+$/);
    const second = await k.call('GET', next);
    assert.deepEqual(second.body.items.map((h: any) => [h.version, h.resource.description]), [[VERSIONS - 1, `v${VERSIONS - 1}`]]);
    // Pages of 1000 go down to version 1 and stop.
    const versions: number[] = [];
    for (let url: string | undefined = '/org/acme/gvc/busy/-history?limit=1000'; url; ) {
      const page = await k.call('GET', url);
      versions.push(...page.body.items.map((h: any) => h.version));
      url = page.body.links.find((l: any) => l.rel === 'next')?.href;
    }
    assert.deepEqual(versions, Array.from({ length: VERSIONS }, (_, i) => VERSIONS - i));
  });

  test('one page reads one page: the database walks the item\'s index newest first and stops at the limit', async () => {
    const item = await k.store.get({ org: 'acme', kind: 'gvc', gvc: '', name: 'busy' });
    const filter = { org: 'acme', context: PLATFORM_CONTEXT, resourceId: item!.id, exceptActionType: 'status', newestFirst: true, limit: 2 };
    if (backend === 'postgres') {
      const { sql, values } = auditQuery(AUDIT_LAYOUT, filter);
      const client = new pg.Client({ connectionString: k.config.databaseUrl });
      await client.connect();
      try {
        const plan = (await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, values)).rows[0]['QUERY PLAN'][0].Plan;
        // Every scan under the limit looked at a handful of rows, not the item's thousands of events.
        const scans: any[] = [];
        const walk = (node: any) => {
          if (/Scan/.test(node['Node Type'])) scans.push(node);
          for (const child of node.Plans ?? []) walk(child);
        };
        walk(plan);
        assert.ok(scans.length > 0, JSON.stringify(plan));
        for (const scan of scans) assert.ok(scan['Actual Rows'] + (scan['Rows Removed by Filter'] ?? 0) <= 10, JSON.stringify(scan));
      } finally {
        await client.end();
      }
    } else {
      const db = new Database(join(k.config.dataDir, 'keel.db'), { readonly: true });
      try {
        db.exec(`ATTACH DATABASE '${lookupFileOf(join(k.config.dataDir, 'keel.db'))}' AS lookup`);
        const no = db.prepare('SELECT org_no FROM audit_heads WHERE org = ?').pluck().get('acme') as number;
        const { sql, values } = auditQuery(auditLayout(no * ORG_SPAN), filter);
        const plan = (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...values) as Array<{ detail: string }>).map((r) => r.detail);
        // Driven by the item's lookup entries in order (no list built first, no sort), so LIMIT stops the walk.
        assert.match(plan[0], /^SEARCH l USING PRIMARY KEY \(org=\? AND key=\? AND pos>\? AND pos<\?\)$/, plan.join('\n'));
        assert.ok(!plan.some((d) => /TEMP B-TREE|LIST SUBQUERY|SCAN/.test(d)), plan.join('\n'));
      } finally {
        db.close();
      }
    }
  });
});

forEachBackend(
  'console routes',
  (backend) => {
    let k: TestKeel;
    before(async () => {
      k = await startKeel(backend);
      await k.app.core.listen({ host: '127.0.0.1', port: 0 });
      await k.app.audit.listen({ host: '127.0.0.1', port: 0 });
    });
    after(() => k.close());

    test('GET / sends a browser to /console and leaves API clients a 404', async () => {
      const browser = await k.call('GET', '/', undefined, { token: null, headers: { accept: 'text/html,application/xhtml+xml' } });
      assert.equal(browser.status, 302);
      assert.equal(browser.headers.location, '/console/');
      assertError(await k.call('GET', '/', undefined, { token: null, headers: { accept: 'application/json' } }), 404, 'not_found');
    });

    test('/-kinds lists the registry with each kind scope and operations, without credentials', async () => {
      const res = await k.call('GET', '/-kinds', undefined, { token: null });
      assert.equal(res.status, 200);
      const byKind = new Map((res.body.items as any[]).map((d) => [d.kind, d]));
      assert.equal(byKind.get('workload').scope, 'gvc');
      assert.equal(byKind.get('secret').scope, 'org');
      assert.equal(byKind.get('deployment').operations.create, false);
      assert.equal(byKind.get('policy').operations.create, true);
    });

    test('the Audit API answers CORS for the Core API origin only', async () => {
      const corePort = (k.app.core.server.address() as AddressInfo).port;
      const auditPort = (k.app.audit.server.address() as AddressInfo).port;
      const origin = `http://127.0.0.1:${corePort}`;
      const preflight = await fetch(`http://127.0.0.1:${auditPort}/audit/org/acme`, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
      });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('access-control-allow-origin'), origin);
      assert.match(preflight.headers.get('access-control-allow-headers') ?? '', /authorization/);
      const read = await fetch(`http://127.0.0.1:${auditPort}/audit/org/acme`, { headers: { origin, authorization: `Bearer ${k.token}` } });
      assert.equal(read.status, 200);
      assert.equal(read.headers.get('access-control-allow-origin'), origin);
      // A rebound name on the Core API's port (DNS rebinding) is not the Core API's origin; loopback names are.
      const local = await fetch(`http://127.0.0.1:${auditPort}/audit/org/acme`, { headers: { origin: `http://localhost:${corePort}`, authorization: `Bearer ${k.token}` } });
      assert.equal(local.headers.get('access-control-allow-origin'), `http://localhost:${corePort}`);
      for (const other of ['http://evil.example', `http://evil.example:${corePort}`, `http://127.0.0.1:${auditPort}`, 'null', `http://127.0.0.1:${corePort + 1}`]) {
        const res = await fetch(`http://127.0.0.1:${auditPort}/audit/org/acme`, { headers: { origin: other, authorization: `Bearer ${k.token}` } });
        assert.equal(res.headers.get('access-control-allow-origin'), null, other);
        const pre = await fetch(`http://127.0.0.1:${auditPort}/audit/org/acme`, { method: 'OPTIONS', headers: { origin: other, 'access-control-request-method': 'GET' } });
        assert.equal(pre.headers.get('access-control-allow-origin'), null, other);
        assert.equal(pre.headers.get('access-control-allow-methods'), null, other);
      }
      assert.equal(read.headers.get('access-control-allow-origin') === '*', false);
    });

    test('console paths need no credentials and never leave the console folder', async () => {
      const escape = await k.call('GET', '/console/..%2f..%2fpackage.json', undefined, { token: null });
      assert.notEqual(escape.status, 401);
      assert.ok(!escape.raw.includes('"devDependencies"'));
      const missing = await k.call('GET', '/console/assets/nope-123.js', undefined, { token: null });
      assertError(missing, 404, 'not_found');
    });
  },
  ['sqlite'],
);

forEachBackend(
  'item history with reconcilers',
  (backend) => {
    let k: TestKeel;
    before(async () => {
      k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: 20 });
    });
    after(() => k.close());

    test("status written by Keel's reconcilers is not a version", async () => {
      assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'gv', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } })).status, 201);
      assert.equal((await k.call('POST', '/org/acme/gvc/gv/workload', { name: 'wl', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }] } })).status, 201);
      const deadline = Date.now() + 30_000;
      while (!(await k.call('GET', '/org/acme/gvc/gv/workload/wl/deployment')).body.items.some((d: any) => d.status?.ready)) {
        assert.ok(Date.now() < deadline, 'the deployment became ready in time');
        await new Promise((r) => setTimeout(r, 50));
      }
      const events = (await k.call('GET', '/org/acme/gvc/gv/workload/wl/-eventlog')).body.items as any[];
      assert.ok(events.some((e) => e.action.type === 'status'), 'the reconcilers recorded status');
      const history = (await k.call('GET', '/org/acme/gvc/gv/workload/wl/-history')).body.items as any[];
      assert.deepEqual(history.map((h) => [h.version, h.action]), [[1, 'create']]);
    });
  },
  ['sqlite'],
);
