// /openapi.json against the routes fastify really mounts: every route is described with a summary,
// its path parameters and its answers, a body where it takes one, and every query parameter its
// handler reads. Which query parameters a handler reads is observed, not declared: each mounted
// handler runs once with real path values while a proxy records the names it asks request.query for.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { buildApp, type App } from '../../src/server/app.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

type Api = 'core' | 'audit';
interface Mounted {
  api: Api;
  method: string;
  url: string;
  /** Query parameter names the handler read (after it ran). */
  read: Set<string>;
  ran: boolean;
}

/** Real values for path parameters (the fixtures below create them); `*` is a self link. */
const PATH_VALUES: Record<string, string> = {
  org: 'acme', gvc: 'prod', name: 'web', location: 'aws-us-east-2', email: 'grace@example.com', id: 'none', ctx: 'cpln', kind: 'gvc', '*': 'org/acme/gvc/prod',
  type: 'opaque', provider: 'aws', deployment: 'aws-us-east-2',
};
const docPath = (url: string) => url.replace(/:(\w+)/g, '{$1}').replace(/\*$/, '{*}');
const BODY_METHODS = ['POST', 'PUT', 'PATCH'];

forEachBackend('the OpenAPI document and the mounted routes', (backend) => {
  let k: TestKeel;
  let app: App;
  const mounted: Mounted[] = [];
  before(async () => {
    k = await startKeel(backend);
    app = await buildApp(k.config, k.store, {
      logger: false,
      onRoute: (route, api) => {
        const options = route as typeof route & { handler?: unknown };
        const config = (route.config ?? {}) as { methodNotAllowed?: boolean };
        if (!options.handler || config.methodNotAllowed || route.url.startsWith('/docs') || route.url.startsWith('/console') || route.url === '/openapi.json') return;
        const entries = [route.method].flat().filter((m) => m !== 'HEAD' && m !== 'OPTIONS').map((method): Mounted => ({ api, method, url: route.url, read: new Set(), ran: false }));
        mounted.push(...entries);
        // Installed first thing for the request, so reads in hooks (a preHandler) count as well as the handler's.
        const record = async (request: { method: string; query: unknown }) => {
          const entry = entries.find((e) => e.method === request.method) ?? entries[0];
          entry.ran = true;
          request.query = new Proxy(request.query as Record<string, unknown>, {
            get(target, key) {
              if (typeof key === 'string') entry.read.add(key);
              return Reflect.get(target, key);
            },
            ownKeys(target) {
              entry.read.add('*');
              return Reflect.ownKeys(target);
            },
          });
        };
        const hooks = (options as { onRequest?: unknown }).onRequest;
        (options as { onRequest?: unknown }).onRequest = [record, ...(hooks ? [hooks].flat() : [])];
      },
    });
    const call = (method: string, url: string, body?: unknown) => k.call(method, url, body, { app });
    assert.equal((await call('POST', '/org/acme/gvc', { name: 'prod' })).status, 201);
    assert.equal((await call('POST', '/org/acme/gvc/prod/workload', { name: 'web', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }] } })).status, 201);
    assert.equal((await call('POST', '/org/acme/user', { name: 'grace@example.com', email: 'grace@example.com' })).status, 201);
  });
  after(async () => {
    await app?.core.close();
    await app?.audit.close();
    await k?.close();
  });

  test('every handler\'s query parameters, bodies and answers are in the document', async () => {
    // Each route once, with real path values, as a dry run where a write takes one; deletes are not sent.
    for (const route of mounted) {
      if (route.method === 'DELETE') continue;
      const url = route.url.replace(/:(\w+)|\*$/g, (all, name?: string) => encodeURIComponent(PATH_VALUES[name ?? '*'] ?? 'x').replace(/%2F/g, '/'));
      // A position past the head ends a watch at once (400) rather than holding a stream open; log
      // reads get a valid selector, so that they read on past it.
      const withQuery = route.url.startsWith('/logs/') ? `${url}?query=${encodeURIComponent('{gvc="prod"}')}` : `${url}?dryRun=true&since=999999999`;
      const answered = app[route.api].inject({
        method: route.method as 'GET',
        url: withQuery,
        headers: { authorization: `Bearer ${k.token}`, ...(BODY_METHODS.includes(route.method) ? { 'content-type': 'application/json' } : {}) },
        payload: BODY_METHODS.includes(route.method) ? '{}' : undefined,
      });
      let timer: NodeJS.Timeout | undefined;
      const res = await Promise.race([answered, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${route.method} ${withQuery}: no answer`)), 20_000)))]);
      clearTimeout(timer);
      assert.ok(res.statusCode < 500, `${route.method} ${withQuery}: ${res.statusCode} ${res.body.slice(0, 300)}`);
    }
    const ran = mounted.filter((r) => r.ran);
    assert.ok(ran.length > 0.8 * mounted.filter((r) => r.method !== 'DELETE').length, `only ${ran.length} of ${mounted.length} handlers ran`);
    const watch = mounted.find((r) => r.url === '/org/:org/-watch')!;
    assert.deepEqual(['gvc', 'kind', 'name', 'query', 'since'].filter((p) => !watch.read.has(p)), [], 'the recording sees what -watch reads');

    const missing: string[] = [];
    for (const api of ['core', 'audit'] as const) {
      const doc = (await app[api].inject({ method: 'GET', url: '/openapi.json' })).json() as { paths: Record<string, Record<string, any>> };
      for (const route of mounted.filter((r) => r.api === api)) {
        const op = doc.paths[docPath(route.url)]?.[route.method.toLowerCase()];
        const where = `${route.method} ${route.url}`;
        if (!op) {
          missing.push(`${where}: not in the document`);
          continue;
        }
        if (!op.summary) missing.push(`${where}: no summary`);
        const parameters = (op.parameters ?? []) as Array<{ in: string; name: string }>;
        for (const name of (route.url.match(/:(\w+)/g) ?? []).map((p) => p.slice(1))) {
          if (!parameters.some((p) => p.in === 'path' && p.name === name)) missing.push(`${where}: path parameter ${name}`);
        }
        const documented = new Set(parameters.filter((p) => p.in === 'query').map((p) => p.name));
        for (const name of route.read) if (!documented.has(name)) missing.push(`${where}: query parameter ${name}`);
        // A route that only refuses says so, and has no successful answer or body to describe.
        if (/^Refused: \S/.test(op.summary ?? '')) continue;
        const answers = Object.keys(op.responses ?? {});
        if (!answers.some((code) => /^[23]/.test(code))) missing.push(`${where}: no successful answer`);
        if (!answers.includes('4XX')) missing.push(`${where}: no error answer`);
        if (BODY_METHODS.includes(route.method) && !op.requestBody) missing.push(`${where}: no body`);
      }
    }
    assert.deepEqual(missing, []);
  });
});
