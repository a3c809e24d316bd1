// Names that are Object.prototype members (`__proto__`, `constructor`, `toString`...) are plain
// names in queries, sorts, tags and policy targetQuery: never a 500, and a list (SQL) and a
// single read (in memory) decide the same way.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';

const NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', '__defineGetter__'];

forEachBackend('prototype member names in queries', (backend) => {
  let k: TestKeel;

  async function ok(method: string, url: string, body?: unknown, token?: string): Promise<Response> {
    const res = await k.call(method, url, body, { token });
    assert.ok(res.status >= 200 && res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  }
  const names = (res: Response) => res.body.items.map((i: { name: string }) => i.name);
  const query = (spec: unknown, token?: string) => ok('POST', '/org/acme/gvc/-query', { spec }, token);

  before(async () => {
    k = await startKeel(backend);
    // Tags named like prototype members, as own data (JSON.parse makes them so; `__proto__` the server refuses to parse).
    await ok('POST', '/org/acme/gvc', { name: 'tagged', tags: { constructor: 'c', toString: 't', hasOwnProperty: 'h', valueOf: 1 } });
    await ok('POST', '/org/acme/gvc', { name: 'plain', tags: { team: 'x' } });
  });
  after(() => k.close());

  test('properties and sorts named like prototype members match nothing and sort as absent', async () => {
    for (const name of NAMES) {
      assert.deepEqual(names(await query({ terms: [{ op: 'exists', property: name }] })), [], `exists ${name}`);
      assert.deepEqual(names(await query({ terms: [{ op: '!exists', property: name }] })), ['plain', 'tagged'], `!exists ${name}`);
      assert.deepEqual(names(await query({ terms: [{ op: '=', property: name, value: 'x' }] })), [], `= ${name}`);
      assert.deepEqual(names(await query({ sort: { by: name, order: 'desc' } })), ['tagged', 'plain'], `sort by ${name}`);
      assert.deepEqual(names(await query({ sort: { by: `spec.${name}` } })), ['plain', 'tagged'], `sort by spec.${name}`);
      assert.deepEqual(names(await query({ terms: [{ op: 'exists', rel: name }] })), [], `rel ${name}`);
    }
  });

  test('tags named like prototype members are ordinary tags', async () => {
    assert.deepEqual(names(await query({ terms: [{ op: '=', tag: 'constructor', value: 'c' }] })), ['tagged']);
    assert.deepEqual(names(await query({ terms: [{ op: 'exists', tag: 'toString' }] })), ['tagged']);
    assert.deepEqual(names(await query({ terms: [{ op: 'exists', tag: 'isPrototypeOf' }] })), []);
    assert.deepEqual(names(await query({ terms: [{ op: '=', property: 'tags.valueOf', value: 1 }] })), ['tagged']);
    assert.deepEqual(names(await query({ terms: [{ op: 'exists', property: 'tags.isPrototypeOf' }] })), []);
    assert.deepEqual(names(await query({ sort: { by: 'tags.constructor', order: 'desc' } })), ['tagged', 'plain']);
    const tagged = (await ok('GET', '/org/acme/gvc/tagged')).body;
    assert.deepEqual(tagged.tags, { constructor: 'c', toString: 't', hasOwnProperty: 'h', valueOf: 1 });
    const patched = (await ok('PATCH', '/org/acme/gvc/tagged', { tags: { toString: null, isPrototypeOf: 'i' } })).body;
    assert.deepEqual(patched.tags, { constructor: 'c', hasOwnProperty: 'h', valueOf: 1, isPrototypeOf: 'i' });
    assertError(await k.call('POST', '/org/acme/gvc', undefined, { rawBody: '{"name":"p","tags":{"__proto__":"x"}}', headers: { 'content-type': 'application/json' } }), 400, 'bad_request');
  });

  test('a policy targetQuery on such names: the list and the single read agree', async () => {
    await ok('POST', '/org/acme/serviceaccount', { name: 'reader' });
    const reader = (await ok('POST', '/org/acme/serviceaccount/reader/-addKey', {})).body.key;
    await ok('POST', '/org/acme/policy', {
      name: 'odd-query',
      targetKind: 'gvc',
      targetQuery: { spec: { match: 'any', terms: [{ op: 'exists', property: 'constructor' }, { op: '=', property: 'toString', value: 'x' }, { op: '=', tag: 'constructor', value: 'c' }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/reader'] }],
    });
    const listed = names(await query({}, reader));
    assert.deepEqual(listed, ['tagged'], 'only the tag term matches');
    for (const name of ['tagged', 'plain']) {
      const res = await k.call('GET', `/org/acme/gvc/${name}`, undefined, { token: reader });
      assert.equal(res.status === 200, listed.includes(name), `GET ${name}: ${res.status}`);
    }
  });
});
