// What operators rely on: the OpenAPI document, health endpoints, request ids in logs, and limits.
import { Validator } from '@seriousme/openapi-schema-validator';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { DEFAULTS, type Config } from '../../src/config.js';
import { buildApp, type App } from '../../src/server/app.js';
import type { Store } from '../../src/store/types.js';
import { startKeel, storeFor, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';

/** A Keel app with settings of the test's choosing, on a fresh SQLite store with org acme. */
/** A log stream for an app, and the lines written to it so far. */
function logLines(): { lines: string[]; stream: Writable } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return { lines, stream };
}

async function appWith(settings: Partial<Config>, options: Parameters<typeof buildApp>[2] = {}) {
  const k = await startKeel('sqlite');
  const config: Config = { ...k.config, ...settings };
  const app = await buildApp(config, k.store, { logger: false, ...options });
  return {
    k,
    app,
    async close() {
      await app.core.close();
      await app.audit.close();
      await k.close();
    },
  };
}

describe('OpenAPI document', () => {
  let k: TestKeel;
  const mounted: Record<'core' | 'audit', Array<{ method: string; url: string }>> = { core: [], audit: [] };
  let app: App;
  let store: Store;
  let cleanup: () => Promise<void>;
  before(async () => {
    k = await startKeel('sqlite');
    ({ store, cleanup } = await storeFor('sqlite'));
    app = await buildApp(k.config, store, {
      logger: false,
      onRoute: (route, api) => {
        const config = (route.config ?? {}) as { methodNotAllowed?: boolean };
        for (const method of [route.method].flat()) {
          if (method === 'HEAD' || method === 'OPTIONS' || config.methodNotAllowed || route.url.startsWith('/docs') || route.url.startsWith('/console') || route.url === '/openapi.json') continue;
          mounted[api].push({ method, url: route.url });
        }
      },
    });
  });
  after(async () => {
    await app.core.close();
    await app.audit.close();
    await store.close();
    await cleanup();
    await k.close();
  });

  test('is served without credentials and is valid OpenAPI 3.1', async () => {
    const res = await k.call('GET', '/openapi.json', undefined, { token: null });
    assert.equal(res.status, 200);
    assert.equal(res.body.openapi, '3.1.0');
    const result = await new Validator().validate(res.body);
    assert.equal(result.valid, true, JSON.stringify(result.errors)?.slice(0, 2000));
  });

  test('documents every route each API mounts, and nothing more', async () => {
    for (const api of ['core', 'audit'] as const) {
      const doc = (await app[api].inject({ method: 'GET', url: '/openapi.json' })).json() as { paths: Record<string, Record<string, unknown>> };
      const documented = Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`));
      const expected = mounted[api].map((r) => `${r.method} ${r.url.replace(/:(\w+)/g, '{$1}').replace(/\*$/, '{*}')}`);
      assert.ok(expected.length > (api === 'core' ? 300 : 5), `only ${expected.length} routes`);
      const undocumented = expected.filter((r) => !documented.includes(r));
      const unmounted = documented.filter((r) => !expected.includes(r));
      assert.deepEqual({ api, undocumented, unmounted }, { api, undocumented: [], unmounted: [] });
    }
  });

  test('bodies and responses refer to the kind schemas; errors to the error object', async () => {
    const doc = (await k.call('GET', '/openapi.json', undefined, { token: null })).body;
    const create = doc.paths['/org/{org}/gvc/{gvc}/volumeset'].post;
    assert.equal(create.requestBody.content['application/json'].schema.$ref, '#/components/schemas/Kind_volumeset');
    assert.equal(create.responses['201'].content['application/json'].schema.$ref, '#/components/schemas/Kind_volumeset');
    assert.equal(create.responses['4XX'].content['application/json'].schema.$ref, '#/components/schemas/Error');
    assert.deepEqual(doc.components.schemas.Error.required, ['status', 'message', 'code', 'details', 'id']);
    // Codes the server answers outside the resource routes (a slow body, oversized headers, a pruned watch position) are documented too.
    for (const code of ['request_timeout', 'headers_too_large', 'gone']) assert.ok(doc.components.schemas.Error.properties.code.enum.includes(code), code);
    const command = doc.paths['/org/{org}/gvc/{gvc}/workload/{name}/-command'].post;
    assert.equal(command.responses['201'].content['application/json'].schema.$ref, '#/components/schemas/Kind_command');
    assert.ok(command.parameters.some((p: { in: string; name: string }) => p.in === 'query' && p.name === 'dryRun'), 'a command documents dryRun');
    const vs = doc.components.schemas.Kind_volumeset;
    assert.equal(vs.properties.spec.properties.performanceClass.enum.includes('general-purpose-ssd'), true);
    assert.equal(vs.properties.description.maxLength, 250);
    assert.deepEqual(doc.paths['/about'].get.security, []);
    const audit = await k.app.audit.inject({ method: 'GET', url: '/openapi.json' });
    assert.equal(audit.statusCode, 200);
    assert.ok(Object.keys(audit.json().paths).includes('/audit/org/{org}'));
  });
});

describe('health, logs and limits', () => {
  test('liveness and readiness answer without credentials; readiness fails when the store is gone', async () => {
    const k = await startKeel('sqlite');
    assert.deepEqual((await k.call('GET', '/healthz', undefined, { token: null })).body, { status: 'ok' });
    const ready = await k.call('GET', '/readyz', undefined, { token: null });
    assert.equal(ready.status, 200);
    assert.equal(ready.body.status, 'ready');
    const about = await k.call('GET', '/about', undefined, { token: null });
    assert.equal(typeof about.body.version, 'string');
    assert.equal(typeof about.body.build, 'string');
    await k.store.close();
    const gone = await k.call('GET', '/readyz', undefined, { token: null });
    assert.equal(gone.status, 503);
    assert.equal(gone.body.code, 'service_unavailable');
    await k.app.core.close();
    await k.app.audit.close();
  });

  test('log lines carry the request id that error objects return, and never the token', async () => {
    const { lines, stream } = logLines();
    const { k, app, close } = await appWith({ logLevel: 'info' }, { logger: true, logStream: stream });
    try {
      const res = await app.core.inject({ method: 'GET', url: '/org/acme/gvc/missing', headers: { authorization: `Bearer ${k.token}` } });
      assert.equal(res.statusCode, 404);
      const id = res.json().id;
      const mine = lines.map((l) => JSON.parse(l)).filter((l) => l.reqId === id);
      assert.ok(mine.length >= 1, 'the request is logged under its id');
      assert.ok(mine.some((l) => l.msg === 'request' && l.statusCode === 404 && l.principal === '/org/acme/serviceaccount/admin'));
      assert.ok(!lines.join('\n').includes(k.token.split('.')[2]), 'no key material in logs');
    } finally {
      await close();
    }
  });

  test('a caller flooding the server with refused requests gets 20 request lines a second, then one line saying how many more were not logged; another caller\'s refusals are still logged', async () => {
    const { lines, stream } = logLines();
    const { k, app, close } = await appWith({ logLevel: 'info' }, { logger: true, logStream: stream });
    try {
      const bad = `/logs/org/acme/loki/api/v1/query_range?query=${encodeURIComponent(`{gvc="g"} |~ "${'.*'.repeat(600)}Z"`)}`;
      const started = Date.now();
      const statuses: number[] = [];
      // Fifty at a time: more would be over the key's requests in flight (503).
      for (let batch = 0; batch < 6; batch++) {
        statuses.push(...(await Promise.all(Array.from({ length: 50 }, () => app.core.inject({ method: 'GET', url: bad, headers: { authorization: `Bearer ${k.token}` } }).then((r) => r.statusCode)))));
      }
      const tookMs = Date.now() - started;
      assert.deepEqual([...new Set(statuses)], [400]);
      // Another caller (no key: its address) is counted on its own.
      assert.equal((await app.core.inject({ method: 'GET', url: '/org/acme/gvc/other-caller' })).statusCode, 401);
      const summary = await waitFor('the line counting what was not logged', async () => lines.map((l) => JSON.parse(l)).find((l) => l.notLogged !== undefined), (l) => l !== undefined, 5000);
      const logged = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
      const mine = logged.filter((l) => l.principal === '/org/acme/serviceaccount/admin');
      // All 300 came within a second or two: at most 20 lines in each second they spanned.
      assert.ok(mine.length >= 20 && mine.length <= 20 * Math.ceil(tookMs / 1000 + 1), `${mine.length} lines for 300 refusals in ${tookMs} ms`);
      assert.equal(summary.principal, '/org/acme/serviceaccount/admin');
      assert.match(summary.msg, /^\d+ more answers of 400 to 499 to this caller in the last second were not logged$/);
      assert.ok(logged.some((l) => l.statusCode === 401 && l.url === '/org/acme/gvc/other-caller'), 'the other caller\'s refusal has its line');
    } finally {
      await close();
    }
  });

  test('request lines: by default only errors and slow requests, one line each; all and off as set', async () => {
    const faultsFile = join(mkdtempSync(join(tmpdir(), 'keel-faults-')), 'faults.json');
    writeFileSync(faultsFile, JSON.stringify({ rules: [{ name: 'slow-list', kind: 'gvc', operation: 'list', latencyMs: 1200 }] }));
    const requestLines = async (settings: Partial<Config>) => {
      const { lines, stream } = logLines();
      const { k, app, close } = await appWith({ logLevel: 'info', faults: true, faultsFile, slowRequestMs: 1000, ...settings }, { logger: true, logStream: stream });
      try {
        const get = async (url: string) => (await app.core.inject({ method: 'GET', url, headers: { authorization: `Bearer ${k.token}` } })).statusCode;
        assert.equal(await get('/org/acme/secret'), 200); // the first request warms the app up
        assert.equal(await get('/org/acme/secret'), 200); // fast
        assert.equal(await get('/org/acme/gvc'), 200); // slow: 1200 ms of injected latency
        assert.equal(await get('/org/acme/gvc/missing'), 404);
        assert.equal((await app.core.inject({ method: 'GET', url: '/org/acme/gvc' })).statusCode, 401);
        return lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request').map((l) => `${l.statusCode} ${l.url}`);
      } finally {
        await close();
      }
    };
    assert.deepEqual(await requestLines({}), ['200 /org/acme/gvc', '404 /org/acme/gvc/missing', '401 /org/acme/gvc']);
    assert.deepEqual(await requestLines({ accessLog: 'all' }), ['200 /org/acme/secret', '200 /org/acme/secret', '200 /org/acme/gvc', '404 /org/acme/gvc/missing', '401 /org/acme/gvc']);
    assert.deepEqual(await requestLines({ accessLog: 'off' }), []);
    assert.deepEqual(await requestLines({ accessLog: 'all', logLevel: 'warn' }), [], 'request lines are info lines');
  });

  test('a key over its rate limit gets 429 rate_limited with Retry-After, not a quota error', async () => {
    const { k, app, close } = await appWith({ rateLimit: 2, rateBurst: 3 });
    try {
      const statuses: number[] = [];
      let limited: { statusCode: number; headers: Record<string, unknown>; json(): any } | undefined;
      for (let i = 0; i < 6; i++) {
        const res = await app.core.inject({ method: 'GET', url: '/org/acme/gvc', headers: { authorization: `Bearer ${k.token}` } });
        statuses.push(res.statusCode);
        if (res.statusCode === 429) limited ??= res;
      }
      assert.deepEqual(statuses.slice(0, 3), [200, 200, 200]);
      assert.ok(limited, statuses.join());
      const body = limited.json();
      assert.equal(body.code, 'rate_limited');
      assert.equal(body.status, 429);
      assert.ok(!/quota/i.test(body.message), 'clients retry a 429 unless it says quota');
      assert.ok(Number(limited.headers['retry-after']) >= 1);
      const other = await app.core.inject({ method: 'GET', url: '/about' });
      assert.equal(other.statusCode, 200, 'the limit is per key');
    } finally {
      await close();
    }
  });

  test('the in-flight cap answers 503 while it is full, and a request that outlives its timeout gets 503', async () => {
    const { k, app, close } = await appWith({ maxInFlight: 1, requestTimeoutMs: 400 });
    try {
      // The first org's superusers pass the server-wide caps, so the cap is shown with a plain key.
      assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'plain' })).status, 201);
      const token = ((await k.call('POST', '/org/acme/serviceaccount/plain/-addKey', {})).body as { key: string }).key;
      for (const [kind, permissions] of [['group', ['create']], ['gvc', ['view']]] as const) {
        const policy = await k.call('POST', '/org/acme/policy', { name: `plain-${kind}`, targetKind: kind, target: 'all', bindings: [{ permissions, principalLinks: ['//serviceaccount/plain'] }] });
        assert.equal(policy.status, 201, policy.raw);
      }
      await app.core.listen({ host: '127.0.0.1', port: 0 });
      const port = (app.core.server.address() as { port: number }).port;
      // A request whose body never finishes holds the only slot until its timeout.
      const slow = connect(port, '127.0.0.1');
      const answer = new Promise<string>((resolve) => {
        let data = '';
        slow.on('data', (d) => (data += d.toString()));
        slow.on('end', () => resolve(data));
        slow.on('close', () => resolve(data));
      });
      await new Promise<void>((resolve) => slow.once('connect', () => resolve()));
      slow.write(`POST /org/acme/group HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":`);
      // Until the slot frees, another request is refused.
      let refused: Response | undefined;
      for (let i = 0; i < 50 && !refused; i++) {
        const res = await fetch(`http://127.0.0.1:${port}/org/acme/gvc`, { headers: { authorization: `Bearer ${token}` } });
        if (res.status === 503) refused = res;
      }
      assert.ok(refused, 'a second request is refused while the slot is taken');
      const refusal = (await refused.json()) as { code: string; message: string };
      assert.equal(refusal.code, 'service_unavailable');
      const raw = await answer;
      assert.match(raw, /^HTTP\/1.1 503/);
      assert.match(raw, /did not finish within 400 ms/);
      slow.destroy();
      const after = await fetch(`http://127.0.0.1:${port}/org/acme/gvc`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(after.status, 200, 'the slot is free again');
    } finally {
      await close();
    }
  });

  test('the largest page is configurable; asking for more is 400', async () => {
    const { k, app, close } = await appWith({ maxPageSize: 5 });
    try {
      const get = (url: string) => app.core.inject({ method: 'GET', url, headers: { authorization: `Bearer ${k.token}` } });
      const page = (await get('/org/acme/location')).json();
      assert.equal(page.items.length, 5, 'the default page is no larger than the largest');
      assert.ok(page.links.some((l: { rel: string }) => l.rel === 'next'));
      assert.equal((await get('/org/acme/location?limit=5')).statusCode, 200);
      const over = await get('/org/acme/location?limit=6');
      assert.equal(over.statusCode, 400);
      assert.match(over.json().message, /from 1 to 5/);
      assert.equal((await app.audit.inject({ method: 'GET', url: '/audit/org/acme?limit=6', headers: { authorization: `Bearer ${k.token}` } })).statusCode, 400);
    } finally {
      await close();
    }
  });
});
