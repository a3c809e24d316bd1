// What a query can reveal: a caller with `view` but not `reveal` on secrets (a member of the
// built-in `viewers` group) tries to recover secret values through -query terms, `*` terms, sorts,
// hand-made `next` tokens and policy targetQuery, as an attacker with an ordinary key would.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';

const SECRET = 'hunter2-Zq9';

forEachBackend('queries never reveal hidden fields', (backend) => {
  let k: TestKeel;
  let spy: string; // a viewer: view on every kind, reveal on none

  async function ok(method: string, url: string, body?: unknown, token?: string): Promise<Response> {
    const res = await k.call(method, url, body, { token });
    assert.ok(res.status >= 200 && res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  }
  const query = (spec: unknown, token = spy) => k.call('POST', '/org/acme/secret/-query', { spec }, { token });
  const names = (res: Response) => res.body.items.map((i: { name: string }) => i.name);

  before(async () => {
    k = await startKeel(backend);
    await ok('POST', '/org/acme/secret', { name: 'opaque', type: 'opaque', data: { payload: SECRET, encoding: 'plain' } });
    await ok('POST', '/org/acme/secret', { name: 'creds', type: 'userpass', data: { username: 'root', password: SECRET } });
    await ok('POST', '/org/acme/secret', { name: 'dict', type: 'dictionary', data: { token: SECRET } });
    // docker data is a string at the top level: what `property: "*"` compares.
    await ok('POST', '/org/acme/secret', { name: 'registry', type: 'docker', data: `{"auths":{"r.io":{"auth":"${SECRET}"}}}` });
    await ok('POST', '/org/acme/secret', { name: 'other', type: 'opaque', data: { payload: 'nothing-alike' } });
    await ok('POST', '/org/acme/serviceaccount', { name: 'spy' });
    spy = (await ok('POST', '/org/acme/serviceaccount/spy/-addKey', {})).body.key;
    await ok('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/spy'] });
  });
  after(() => k.close());

  test('the spy may view secrets but not reveal them', async () => {
    assert.equal((await ok('GET', '/org/acme/secret/opaque', undefined, spy)).body.data, undefined);
    assertError(await k.call('GET', '/org/acme/secret/opaque/-reveal', undefined, { token: spy }), 403, 'forbidden');
    assert.deepEqual(names(await query({})), ['creds', 'dict', 'opaque', 'other', 'registry']);
  });

  test('a term on data or under it is refused, whatever the op, and names the term', async () => {
    const terms: unknown[] = [
      { op: '~', property: 'data.payload', value: 'hunter' },
      { op: '=', property: 'data.password', value: SECRET },
      { op: '>=', property: 'data.token', value: 'h' },
      { op: '<', property: 'data.payload', value: 'i' },
      { op: '!=', property: 'data.payload', value: 'x' },
      { op: 'exists', property: 'data.payload' },
      { op: '!exists', property: 'data' },
      { op: '~', property: 'data', value: 'hunter' },
    ];
    for (const term of terms) {
      const res = await query({ terms: [{ op: 'exists', property: 'name' }, term] });
      assertError(res, 400, 'bad_request');
      assert.ok(
        res.body.details.errors.some((e: { path: string }) => e.path === 'spec.terms[1].property'),
        `${JSON.stringify(term)}: ${JSON.stringify(res.body.details)}`,
      );
      assert.ok(!res.raw.includes(SECRET));
    }
  });

  test('the rule is the same for a caller who may reveal: queries never look at secret values', async () => {
    assertError(await query({ terms: [{ op: '=', property: 'data.payload', value: SECRET }] }, k.token), 400, 'bad_request');
  });

  test('property "*" does not look at data', async () => {
    // Each of these matches the docker secret's data and none of its shown fields (all below '{').
    for (const op of ['~', '=', '>=', '>']) {
      const value = op === '~' ? SECRET.toLowerCase() : op === '=' ? `{"auths":{"r.io":{"auth":"${SECRET}"}}}` : '{"auths"';
      const res = await ok('POST', '/org/acme/secret/-query', { spec: { terms: [{ op, property: '*', value }] } }, spy);
      assert.ok(!names(res).includes('registry'), `${op}: ${names(res)}`);
    }
    // Other top-level fields still match.
    assert.deepEqual(names(await ok('POST', '/org/acme/secret/-query', { spec: { terms: [{ op: '=', property: '*', value: 'docker' }] } }, spy)), ['registry']);
  });

  test('sorting by data or under it is refused', async () => {
    for (const by of ['data', 'data.payload', 'data.token']) {
      const res = await query({ sort: { by, order: 'asc' } });
      assertError(res, 400, 'bad_request');
      assert.ok(res.body.details.errors.some((e: { path: string }) => e.path === 'spec.sort.by'), JSON.stringify(res.body.details));
    }
  });

  test('a hand-made next token cannot sort or filter by data either', async () => {
    const first = await ok('POST', '/org/acme/secret/-query?limit=1', { spec: {} }, spy);
    const next = first.body.links.find((l: { rel: string }) => l.rel === 'next');
    assert.ok(next, 'a second page exists');
    const token = JSON.parse(Buffer.from(new URL(next.href, 'http://x').searchParams.get('next')!, 'base64url').toString('utf8'));
    const forge = (queryBody: unknown, after: unknown[]) =>
      Buffer.from(JSON.stringify({ ...token, query: queryBody, after: Buffer.from(JSON.stringify(after)).toString('base64url') })).toString('base64url');
    const bySecret = { spec: { sort: { by: 'data.payload', order: 'asc' } } };
    const res = await k.call('GET', `/org/acme/secret/-query?next=${forge(bySecret, ['data.payload', 'asc', 3, null, 'hunter2', '', ''])}`, undefined, { token: spy });
    assertError(res, 400, 'bad_request');
    const withTerm = { spec: { terms: [{ op: '~', property: 'data.payload', value: 'hunter' }] } };
    assertError(await k.call('GET', `/org/acme/secret/-query?next=${forge(withTerm, ['name', 'asc', 3, null, '', '', ''])}`, undefined, { token: spy }), 400, 'bad_request');
  });

  test('a policy targetQuery on data is refused at write', async () => {
    const res = await k.call('POST', '/org/acme/policy', {
      name: 'by-value',
      targetKind: 'secret',
      targetQuery: { spec: { terms: [{ op: '~', property: 'data.payload', value: 'hunter' }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/serviceaccount/spy'] }],
    });
    assertError(res, 400, 'bad_request');
    assert.ok(res.body.details.errors.some((e: { path: string }) => e.path.startsWith('targetQuery.spec.terms[0]')), JSON.stringify(res.body.details));
  });

  test('a policy targetQuery on "*" grants by the shown fields only', async () => {
    await ok('POST', '/org/acme/serviceaccount', { name: 'narrow' });
    const narrow = (await ok('POST', '/org/acme/serviceaccount/narrow/-addKey', {})).body.key;
    await ok('POST', '/org/acme/policy', {
      name: 'by-anything',
      targetKind: 'secret',
      targetQuery: { spec: { terms: [{ op: '~', property: '*', value: 'hunter2' }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/serviceaccount/narrow'] }],
    });
    assert.deepEqual(names(await query({}, narrow)), [], 'the list (SQL) grants nothing');
    assertError(await k.call('GET', '/org/acme/secret/registry', undefined, { token: narrow }), 403, 'forbidden');
  });

  test('a service account query shows no key secret', async () => {
    const key: string = (await ok('POST', '/org/acme/serviceaccount/spy/-addKey', {})).body.key;
    const secret = key.split('.')[2];
    const res = await ok('POST', '/org/acme/serviceaccount/-query', { spec: { terms: [{ op: '~', property: '*', value: secret.slice(0, 8) }] } }, spy);
    assert.deepEqual(res.body.items, []);
    const all = await ok('POST', '/org/acme/serviceaccount/-query', { spec: {} }, spy);
    assert.ok(!all.raw.includes(secret));
    for (const sa of all.body.items) for (const entry of sa.keys ?? []) assert.deepEqual(Object.keys(entry).filter((f) => !['name', 'created', 'description'].includes(f)), []);
  });
});
