// The CLI's REST map (`cpln rest` completes and checks paths against it): every path it names,
// with every method it lists, is served by Keel or refused with a clear 4xx error object that says
// why; never a 404 while the item the path names exists, never a 5xx.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';
import { accountIdOf } from '../../src/resources/orgs.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';

const { ResourceMap } = createRequire(import.meta.url)('@controlplane/cli/dist/src/rest/map.js') as { ResourceMap: Array<{ path: string; supports: string[] }> };

const LOCATION = 'aws-us-east-2';

/** A value for each of the map's parameters that names an item the fixtures create (`:id` depends on the path). */
function fill(path: string, ids: { task: string }): string {
  const values: Record<string, string> = {
    org: 'acme', secret: 's1', resource: 'r1', serviceaccount: 'ci', domain: 'app.example.com', user: 'grace@example.com', cloudaccount: 'aws1',
    group: 'ops', gvc: 'prod', identity: 'app', quota: 'q1', location: LOCATION, policy: 'p1', workload: 'web', deployment: LOCATION,
    query: 'abc', type: 'opaque', email: 'grace@example.com', provider: 'aws',
  };
  const id = path.startsWith('/task/') ? ids.task : path.startsWith('/account/') ? accountIdOf('acme') : 'grace@example.com';
  return path.replace(/:([a-z]+)/g, (_, name: string) => encodeURIComponent(name === 'id' ? id : values[name]));
}

/** What a client would send: an answer for a task, an empty object for other writes. */
const bodyFor = (path: string, method: string) => (method === 'get' || method === 'delete' ? undefined : path === '/task/:id' ? { answer: 'accept' } : {});

/** Reads and writes first; then deletes, the deepest paths first (a workload's before its GVC's). */
function walk(): Array<{ path: string; method: string }> {
  const calls = ResourceMap.flatMap(({ path, supports }) => supports.map((method) => ({ path, method })));
  const depth = (p: string) => p.split('/').length;
  return [...calls.filter((c) => c.method !== 'delete'), ...calls.filter((c) => c.method === 'delete').sort((a, b) => depth(b.path) - depth(a.path))];
}

forEachBackend('the CLI REST map', (backend) => {
  let k: TestKeel;
  let task: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: 50 });
    const created = async (url: string, body: unknown) => {
      const res = await k.call('POST', url, body);
      assert.equal(res.status, 201, `${url}: ${res.raw}`);
      return res.body;
    };
    await created('/org/acme/secret', { name: 's1', type: 'opaque', data: { payload: 'x', encoding: 'plain' } });
    await created('/org/acme/resource', { name: 'r1' });
    await created('/org/acme/domain', { name: 'app.example.com', spec: {} });
    await created('/org/acme/user', { name: 'grace@example.com', email: 'grace@example.com' });
    await created('/org/acme/cloudaccount', { name: 'aws1', provider: 'aws', data: { roleArn: 'arn:aws:iam::123456789012:role/keel' } });
    await created('/org/acme/group', { name: 'ops' });
    await created('/org/acme/serviceaccount', { name: 'ci' });
    await created('/org/acme/quota', { name: 'q1', unit: 'count', max: 10 });
    await created('/org/acme/policy', { name: 'p1', targetKind: 'secret', targetLinks: ['//secret/s1'] });
    await created('/org/acme/gvc', { name: 'prod', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
    await created('/org/acme/gvc/prod/identity', { name: 'app' });
    await created('/org/acme/gvc/prod/workload', { name: 'web', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx', ports: [{ protocol: 'http', number: 80 }] }] } });
    task = (await created('/org/acme/task', { name: 't1', type: 'invitation', targetEmail: 'grace@example.com' })).id;
    await waitFor('the deployment', () => k.call('GET', `/org/acme/gvc/prod/workload/web/deployment/${LOCATION}`), (r) => r.status === 200);
  });
  after(() => k?.close());

  test('the paths Keel answers for the map find only what the caller may see, and 404 what is absent', async () => {
    const key = (await k.call('POST', '/org/acme/serviceaccount/ci/-addKey', { description: 'no permissions' })).body.key;
    assert.equal((await k.call('GET', `/task/${task}`)).body.name, 't1');
    assert.equal((await k.call('GET', '/task/t1')).body.id, task);
    const hidden = await k.call('GET', `/task/${task}`, undefined, { token: key });
    assert.deepEqual([hidden.status, hidden.body.message], [404, `task '${task}' not found in any org you may view`]);
    assert.equal((await k.call('DELETE', `/task/${task}`, undefined, { token: key })).status, 404);
    assert.match((await k.call('POST', `/task/${task}`, { answer: 'accept' })).body.message, /^POST \/task\/\S+ is not served by Keel: /);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod/workload/missing/-config')).status, 404);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/nowhere/-config', {})).status, 404);
    assert.equal((await k.call('DELETE', '/org/acme/-config', undefined, { token: key })).status, 403);
    const byName = (name: string) => k.call('POST', '/org/acme/-query', { spec: { match: 'all', terms: [{ op: '=', property: 'name', value: name }] } });
    assert.deepEqual((await byName('acme')).body.items.map((o: { name: string }) => o.name), ['acme']);
    assert.deepEqual((await byName('other')).body.items, []);
    assert.equal((await k.call('POST', '/org/acme/-query', { spec: { terms: [{ op: '=', property: 'name' }] }, bogus: 1 })).status, 400);
    const schema = await k.call('GET', '/account/-schema/permissions');
    assert.deepEqual([schema.status, schema.body.targetKind], [200, 'account']);
    assert.equal((await k.call('GET', '/account/no-such-account/-config')).status, 404);
  });

  test('every path with every method it lists is served, or refused with a 4xx that says why', async () => {
    const wrong: string[] = [];
    for (const { path, method } of walk()) {
      const url = fill(path, { task });
      const res = await k.call(method.toUpperCase(), url, bodyFor(path, method));
      const refused = res.status >= 400;
      if (res.status >= 500 || res.status === 404) wrong.push(`${method.toUpperCase()} ${url}: ${res.status} ${res.raw.slice(0, 200)}`);
      else if (refused && !(typeof res.body?.message === 'string' && res.body.message && res.body.code && res.body.id !== undefined)) wrong.push(`${method.toUpperCase()} ${url}: ${res.status} without the error object: ${res.raw.slice(0, 200)}`);
      // A method the path does not take names those it does, in the message and in Allow.
      else if (res.status === 405 && !(res.headers.allow && res.body.message.includes(String(res.headers.allow)))) wrong.push(`${method.toUpperCase()} ${url}: 405 without the allowed methods: ${res.raw.slice(0, 200)}`);
      // A path Keel knows but does not serve says why.
      else if (res.status === 400 && /not served/.test(res.body.message) && !/not served by Keel: \S/.test(res.body.message)) wrong.push(`${method.toUpperCase()} ${url}: refused without a reason: ${res.body.message}`);
    }
    assert.deepEqual(wrong, []);
  });
});
