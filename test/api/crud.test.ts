// The generic operations over HTTP, on kinds of both scopes, with the error cases.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { assertError } from '../support/errors.js';

forEachBackend('generic CRUD', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend);
    const gvc = await k.call('POST', '/org/acme/gvc', { name: 'prod', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } });
    assert.equal(gvc.status, 201, JSON.stringify(gvc.body));
  });
  after(() => k.close());

  test('create answers 201 with Location and the resource; defaults and server fields are filled', async () => {
    const res = await k.call('POST', '/org/acme/secret', { name: 'db-pass', type: 'opaque', data: { payload: 'hunter2', encoding: 'plain' }, tags: {} });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.headers.location, '/org/acme/secret/db-pass');
    assert.equal(res.body.kind, 'secret');
    assert.equal(res.body.name, 'db-pass');
    assert.equal(res.body.description, 'db-pass');
    assert.equal(res.body.version, 1);
    assert.match(res.body.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(res.body.created, res.body.lastModified);
    assert.equal(new Date(res.body.created).toISOString(), res.body.created);
    assert.deepEqual(res.body.links, [
      { rel: 'self', href: '/org/acme/secret/db-pass' },
      { rel: 'org', href: '/org/acme' },
    ]);
    assert.equal(res.body.data, undefined, 'secret values are not in ordinary reads');
  });

  test('read-only fields in a body are ignored and strings are coerced to the schema types', async () => {
    const res = await k.call('POST', '/org/acme/gvc/prod/volumeset', {
      name: 'vs-coerce',
      id: 'forged',
      version: 99,
      created: '2000-01-01T00:00:00.000Z',
      links: [{ rel: 'self', href: '/elsewhere' }],
      status: { parentId: 'forged' },
      spec: { initialCapacity: '20', snapshots: { createFinalSnapshot: 'false' } },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.notEqual(res.body.id, 'forged');
    assert.equal(res.body.version, 1);
    assert.notEqual(res.body.created, '2000-01-01T00:00:00.000Z');
    assert.equal(res.body.spec.initialCapacity, 20);
    assert.equal(res.body.spec.snapshots.createFinalSnapshot, false);
    assert.notEqual(res.body.status?.parentId, 'forged');
    assert.deepEqual(res.body.links.slice(0, 3), [
      { rel: 'self', href: '/org/acme/gvc/prod/volumeset/vs-coerce' },
      { rel: 'org', href: '/org/acme' },
      { rel: 'gvc', href: '/org/acme/gvc/prod' },
    ]);
  });

  test('relative links are stored and returned in full form', async () => {
    const res = await k.call('GET', '/org/acme/gvc/prod');
    assert.deepEqual(res.body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2']);
    const wl = await k.call('POST', '/org/acme/gvc/prod/workload', {
      name: 'api',
      spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1', ports: [{ protocol: 'http', number: 8080 }] }], identityLink: '//identity/app' },
    });
    assert.equal(wl.status, 201, JSON.stringify(wl.body));
    assert.equal(wl.body.spec.identityLink, '/org/acme/gvc/prod/identity/app');
    assert.ok(wl.body.links.some((l: any) => l.rel === 'deployment' && l.href === '/org/acme/gvc/prod/workload/api/deployment'));
  });

  test('get, list and the org-wide list of a gvc-scoped kind', async () => {
    for (const name of ['id-a', 'id-b']) assert.equal((await k.call('POST', '/org/acme/gvc/prod/identity', { name })).status, 201);
    const one = await k.call('GET', '/org/acme/gvc/prod/identity/id-a');
    assert.equal(one.status, 200);
    assert.equal(one.body.name, 'id-a');
    const list = await k.call('GET', '/org/acme/gvc/prod/identity');
    assert.deepEqual(Object.keys(list.body).sort(), ['itemKind', 'items', 'kind', 'links']);
    assert.equal(list.body.kind, 'list');
    assert.equal(list.body.itemKind, 'identity');
    assert.deepEqual(list.body.items.map((i: any) => i.name), ['id-a', 'id-b']);
    assert.ok(Array.isArray(list.body.links));
    const wide = await k.call('GET', '/org/acme/identity');
    assert.deepEqual(wide.body.items.map((i: any) => i.name), ['id-a', 'id-b']);
  });

  test('lists page through rel next links', async () => {
    for (let i = 0; i < 7; i++) await k.call('POST', '/org/acme/group', { name: `page-${i}` });
    const seen: string[] = [];
    let url: string | undefined = '/org/acme/group?limit=3';
    let pages = 0;
    while (url) {
      const res = await k.call('GET', url);
      assert.equal(res.status, 200);
      seen.push(...res.body.items.map((i: any) => i.name));
      url = res.body.links.find((l: any) => l.rel === 'next')?.href;
      pages++;
    }
    const expected = [...seen].sort();
    assert.deepEqual(seen, expected);
    assert.equal(new Set(seen).size, seen.length);
    assert.ok(seen.includes('page-0') && seen.includes('page-6') && seen.includes('superusers'));
    assert.ok(pages >= 3);
    assertError(await k.call('GET', '/org/acme/group?limit=5000'), 400, 'bad_request');
  });

  test('PATCH deep-merges objects, replaces arrays, removes nulls and bumps the version', async () => {
    const created = await k.call('POST', '/org/acme/gvc', { name: 'patchme', tags: { a: '1', b: '2' }, spec: { env: [{ name: 'X', value: '1' }], loadBalancer: { trustedProxies: 1 } } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const res = await k.call('PATCH', '/org/acme/gvc/patchme', { tags: { b: null, c: '3' }, spec: { env: [{ name: 'Y', value: '2' }] }, description: 'changed' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.tags, { a: '1', c: '3' });
    assert.deepEqual(res.body.spec.env, [{ name: 'Y', value: '2' }]);
    assert.equal(res.body.spec.loadBalancer.trustedProxies, 1);
    assert.equal(res.body.description, 'changed');
    assert.equal(res.body.version, 2);
    assert.ok(res.body.lastModified > created.body.lastModified || res.body.lastModified !== created.body.lastModified);
    const again = await k.call('GET', '/org/acme/gvc/patchme');
    assert.deepEqual(again.body, res.body);
  });

  test('a stale version is 409 conflict and changes nothing; the current one applies', async () => {
    const stale = await k.call('PATCH', '/org/acme/gvc/patchme', { version: 1, description: 'stale' });
    assertError(stale, 409, 'conflict');
    assert.equal((await k.call('GET', '/org/acme/gvc/patchme')).body.description, 'changed');
    const ok = await k.call('PATCH', '/org/acme/gvc/patchme', { version: '2', description: 'fresh' });
    assert.equal(ok.status, 200);
    assert.equal(ok.body.version, 3);
  });

  test('names are immutable: PATCH or PUT naming another item is 400', async () => {
    assertError(await k.call('PATCH', '/org/acme/gvc/patchme', { name: 'other' }), 400, 'bad_request');
    assertError(await k.call('PUT', '/org/acme/gvc/patchme', { name: 'other' }), 400, 'bad_request');
  });

  test('PUT item replaces the whole object; PUT collection applies (201 then 200)', async () => {
    const replaced = await k.call('PUT', '/org/acme/gvc/patchme', { name: 'patchme', description: 'replaced' });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.deepEqual(replaced.body.tags, {});
    assert.equal(replaced.body.spec?.env, undefined);
    assert.ok(replaced.body.alias, 'server-owned fields survive a replace');
    const first = await k.call('PUT', '/org/acme/group', { kind: 'group', name: 'applied', description: 'one' });
    assert.equal(first.status, 201);
    assert.equal(first.headers.location, '/org/acme/group/applied');
    const second = await k.call('PUT', '/org/acme/group', { kind: 'group', name: 'applied', description: 'two' });
    assert.equal(second.status, 200);
    assert.equal(second.body.description, 'two');
    assert.equal(second.body.version, 2);
  });

  test('dryRun returns the would-be result and stores nothing', async () => {
    const res = await k.call('POST', '/org/acme/group?dryRun=true', { name: 'dry' });
    assert.equal(res.status, 201);
    assert.equal(res.body.name, 'dry');
    assertError(await k.call('GET', '/org/acme/group/dry'), 404, 'not_found');
    const patched = await k.call('PATCH', '/org/acme/group/applied?dryRun=true', { description: 'would be' });
    assert.equal(patched.body.description, 'would be');
    assert.equal((await k.call('GET', '/org/acme/group/applied')).body.description, 'two');
    // Said twice, it is neither: a 400, and nothing is written.
    assertError(await k.call('POST', '/org/acme/group?dryRun=true&dryRun=false', { name: 'ambiguous' }), 400, 'bad_request');
    assertError(await k.call('GET', '/org/acme/group/ambiguous'), 404, 'not_found');
  });

  test('DELETE answers 202 with an empty body; the item is gone', async () => {
    const res = await k.call('DELETE', '/org/acme/group/applied');
    assert.equal(res.status, 202);
    assert.equal(res.raw, '');
    assertError(await k.call('GET', '/org/acme/group/applied'), 404, 'not_found');
    assertError(await k.call('DELETE', '/org/acme/group/applied'), 404, 'not_found');
  });

  test('deleting a GVC that still holds workloads, identities or volumesets is 409', async () => {
    const res = await k.call('DELETE', '/org/acme/gvc/prod');
    assertError(res, 409, 'conflict');
    assert.match(res.body.message, /workload|identity|volumeset/);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod')).status, 200);
  });

  test('a GVC that does not exist is 404 for create, list and get inside it', async () => {
    assertError(await k.call('POST', '/org/acme/gvc/nope/identity', { name: 'x' }), 404, 'not_found');
    assertError(await k.call('GET', '/org/acme/gvc/nope/identity'), 404, 'not_found');
    assertError(await k.call('GET', '/org/acme/gvc/nope/identity/x'), 404, 'not_found');
  });

  test('400: invalid bodies get field-level details', async () => {
    const res = await k.call('POST', '/org/acme/group', { name: 'Bad_Name', description: 'x'.repeat(251), bogus: 1 });
    assertError(res, 400, 'bad_request');
    const paths = res.body.details.errors.map((e: any) => e.path);
    assert.ok(paths.includes('name'), paths.join());
    assert.ok(paths.includes('description'), paths.join());
    assert.ok(paths.includes('bogus'), paths.join());
    assertError(await k.call('POST', '/org/acme/group', [1, 2]), 400, 'bad_request');
    assertError(await k.call('POST', '/org/acme/group', undefined, { rawBody: '{"name": ', headers: { 'content-type': 'application/json' } }), 400, 'bad_request');
    assertError(await k.call('POST', '/org/acme/group', { name: 'a'.repeat(65) }), 400, 'bad_request');
    assertError(await k.call('POST', '/org/acme/group', { name: 'x', tags: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`t${i}`, 'v'])) }), 400, 'bad_request');
  });

  test('401: no token, a malformed token, an unknown key', async () => {
    assertError(await k.call('GET', '/org/acme/gvc', undefined, { token: null }), 401, 'unauthorized');
    assertError(await k.call('GET', '/org/acme/gvc', undefined, { token: 'garbage' }), 401, 'unauthorized');
    const [name, middle] = k.token.split('.');
    assertError(await k.call('GET', '/org/acme/gvc', undefined, { token: `${name}.${middle}.wrongsecret` }), 401, 'unauthorized');
  });

  test('the bare token works as well as Bearer', async () => {
    const res = await k.call('GET', '/org/acme/gvc', undefined, { token: null, headers: { authorization: k.token } });
    assert.equal(res.status, 200);
  });

  test('405: methods a path does not have', async () => {
    assertError(await k.call('DELETE', '/org/acme'), 405, 'method_not_allowed');
    assertError(await k.call('POST', '/org/acme/gvc/prod'), 405, 'method_not_allowed');
    assertError(await k.call('DELETE', '/org/acme/gvc'), 405, 'method_not_allowed');
  });

  test('409: creating a name that exists', async () => {
    assertError(await k.call('POST', '/org/acme/gvc', { name: 'prod' }), 409, 'already_exists');
  });

  test('413 for a body over the limit, 415 for a body that is not JSON', async () => {
    const big = { name: 'big', description: 'x', tags: { blob: 'y'.repeat(1024 * 1024 + 10) } };
    assertError(await k.call('POST', '/org/acme/group', big), 413, 'payload_too_large');
    assertError(await k.call('POST', '/org/acme/group', undefined, { rawBody: 'name=x', headers: { 'content-type': 'text/plain' } }), 415, 'unsupported_media_type');
  });

  test('404 for unknown kinds and paths, as an error object', async () => {
    assertError(await k.call('GET', '/org/acme/nosuchkind'), 404, 'not_found');
    assertError(await k.call('GET', '/nowhere'), 404, 'not_found');
  });

  test('/about and /discovery answer without credentials', async () => {
    const about = await k.call('GET', '/about', undefined, { token: null });
    assert.equal(about.status, 200);
    assert.equal(typeof about.body.version, 'string');
    const discovery = await k.call('GET', '/discovery', undefined, { token: null });
    assert.equal(discovery.status, 200);
    assert.match(discovery.body.endpoints.audit, /^http:\/\//);
  });

  test('orgs: list, get, patch; DELETE is 405; POST /org makes the caller a superuser', async () => {
    const list = await k.call('GET', '/org');
    assert.deepEqual(list.body.items.map((o: any) => o.name), ['acme']);
    const patched = await k.call('PATCH', '/org/acme', { description: 'Acme Corp' });
    assert.equal(patched.status, 200);
    assert.equal(patched.body.description, 'Acme Corp');
    const created = await k.call('POST', '/org', { name: 'second-org' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.headers.location, '/org/second-org');
    const su = await k.call('GET', '/org/second-org/group/superusers');
    assert.equal(su.status, 200);
    assert.ok(su.body.memberLinks.includes('/org/acme/serviceaccount/admin'));
    const both = await k.call('GET', '/org');
    assert.deepEqual(both.body.items.map((o: any) => o.name), ['acme', 'second-org']);
  });
});
