// PATCH, PUT (replace and apply) and dry runs over HTTP, with the bodies the cpln CLI really
// sends (reference/cpln-cli.md §6–7), and every way such a write is refused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';
import { assertError } from '../support/errors.js';

/** A 400 whose details.errors name `path` (and, if given, a message matching `message`). */
function assertBadPath(res: Response, path: string, message?: RegExp): void {
  assertError(res, 400, 'bad_request');
  const errors: Array<{ path: string; message: string }> = res.body.details.errors;
  assert.ok(Array.isArray(errors), JSON.stringify(res.body));
  const hit = errors.find((e) => e.path === path);
  assert.ok(hit, `no error at ${path}: ${JSON.stringify(errors)}`);
  if (message) assert.match(hit.message, message);
}

/** The CLI's `workload create --name web --image nginx:latest` body. */
function cliWorkload(name: string): Record<string, unknown> {
  return {
    name,
    description: name,
    tags: {},
    spec: {
      type: 'standard',
      containers: [{ name: 'nginx', image: 'nginx:latest', env: [], inheritEnv: false, cpu: '50m', memory: '128Mi', volumes: [], ports: [{ protocol: 'http', number: 8080 }] }],
    },
  };
}

forEachBackend('PATCH, replace and apply', (backend) => {
  let k: TestKeel;
  const W = '/org/acme/gvc/prod/workload';
  const VS = '/org/acme/gvc/prod/volumeset';

  /** A write that must be refused: the item reads back byte-identical afterwards. */
  async function refusedUnchanged(url: string, write: () => Promise<Response>): Promise<Response> {
    const before = await k.call('GET', url);
    assert.equal(before.status, 200);
    const res = await write();
    assert.ok(res.status >= 400 && res.status < 500, `${res.status} ${res.raw}`);
    assert.equal((await k.call('GET', url)).raw, before.raw);
    return res;
  }

  before(async () => {
    k = await startKeel(backend);
    const gvc = await k.call('POST', '/org/acme/gvc', { name: 'prod', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } });
    assert.equal(gvc.status, 201, JSON.stringify(gvc.body));
  });
  after(() => k.close());

  test('workload update --set: $patch/containers with a nested $patch/env, numbers as strings, version and id from a GET', async () => {
    assert.equal((await k.call('POST', W, cliWorkload('web'))).status, 201);
    const got = (await k.call('GET', `${W}/web`)).body;
    const res = await k.call('PATCH', `${W}/web`, {
      version: got.version,
      id: got.id,
      spec: {
        '$patch/containers': [{ name: 'nginx', image: 'x', '$patch/env': [{ name: 'FOO', value: 'bar' }] }],
        defaultOptions: { autoscaling: { maxScale: '3' } },
      },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const [nginx] = res.body.spec.containers;
    assert.equal(nginx.image, 'x');
    assert.deepEqual(nginx.env, [{ name: 'FOO', value: 'bar' }]);
    assert.equal(nginx.cpu, '50m', 'unmentioned container fields are kept');
    assert.deepEqual(nginx.ports, [{ protocol: 'http', number: 8080 }]);
    assert.equal(res.body.spec.defaultOptions.autoscaling.maxScale, 3);
    assert.equal(res.body.spec.defaultOptions.autoscaling.minScale, 1, 'siblings of a merged field are kept');
    assert.equal(res.body.version, got.version + 1);
    assert.equal(res.body.id, got.id);
    assert.deepEqual((await k.call('GET', `${W}/web`)).body, res.body);
  });

  test('workload update --set on an existing env var patches it in place', async () => {
    const got = (await k.call('GET', `${W}/web`)).body;
    const res = await k.call('PATCH', `${W}/web`, {
      version: got.version,
      id: got.id,
      spec: { '$patch/containers': [{ name: 'nginx', '$patch/env': [{ name: 'FOO', value: 'baz' }, { name: 'BAR', value: '1' }] }] },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.spec.containers[0].env, [
      { name: 'FOO', value: 'baz' },
      { name: 'BAR', value: '1' },
    ]);
  });

  test('workload update --unset env: $drop/env inside $patch/containers', async () => {
    const got = (await k.call('GET', `${W}/web`)).body;
    const res = await k.call('PATCH', `${W}/web`, { version: got.version, id: got.id, spec: { '$patch/containers': [{ name: 'nginx', '$drop/env': ['FOO'] }] } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.spec.containers[0].env, [{ name: 'BAR', value: '1' }]);
    assert.equal(res.body.spec.containers[0].image, 'x');
    assert.equal(res.body.version, got.version + 1);
  });

  test('workload force-redeployment: a tag patch without version', async () => {
    const before = (await k.call('GET', `${W}/web`)).body;
    const stamp = new Date().toISOString();
    const res = await k.call('PATCH', `${W}/web`, { tags: { 'cpln/deployTimestamp': stamp } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.tags, { 'cpln/deployTimestamp': stamp });
    assert.equal(res.body.version, before.version + 1);
    assert.deepEqual(res.body.spec, before.spec);
  });

  test('workload stop and start: spec.defaultOptions.suspend', async () => {
    const stopped = await k.call('PATCH', `${W}/web`, { spec: { defaultOptions: { suspend: true } } });
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    assert.equal(stopped.body.spec.defaultOptions.suspend, true);
    assert.equal(stopped.body.spec.defaultOptions.autoscaling.maxScale, 3);
    const started = await k.call('PATCH', `${W}/web`, { spec: { defaultOptions: { suspend: false } } });
    assert.equal(started.body.spec.defaultOptions.suspend, false);
    assert.equal(started.body.version, stopped.body.version + 1);
  });

  test('gvc tag --tag a=b --remove-tag c: null removes one tag, the others merge', async () => {
    assert.equal((await k.call('PATCH', '/org/acme/gvc/prod', { tags: { c: '1', keep: 'me' } })).status, 200);
    const res = await k.call('PATCH', '/org/acme/gvc/prod', { tags: { a: 'b', c: null } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.tags, { keep: 'me', a: 'b' });
  });

  test('group add-member and remove-member: $append/memberLinks and $drop/memberLinks, users linked by email', async () => {
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'devs', tags: {}, memberLinks: [] })).status, 201);
    const added = await k.call('PATCH', '/org/acme/group/devs', { '$append/memberLinks': ['/org/acme/user/a@b.io', '/org/acme/serviceaccount/sa'] });
    assert.equal(added.status, 200, JSON.stringify(added.body));
    assert.deepEqual(added.body.memberLinks, ['/org/acme/user/a@b.io', '/org/acme/serviceaccount/sa']);
    const again = await k.call('PATCH', '/org/acme/group/devs', { '$append/memberLinks': ['/org/acme/serviceaccount/sa'] });
    assert.deepEqual(again.body.memberLinks, ['/org/acme/user/a@b.io', '/org/acme/serviceaccount/sa'], 'a link already there is not added twice');
    assert.equal(again.body.version, added.body.version, 'nothing changed, so the version stays');
    const removed = await k.call('PATCH', '/org/acme/group/devs', { '$drop/memberLinks': ['/org/acme/user/a@b.io'] });
    assert.equal(removed.status, 200, JSON.stringify(removed.body));
    assert.deepEqual(removed.body.memberLinks, ['/org/acme/serviceaccount/sa']);
  });

  test('group update --set memberLinks+= / -= / =a,b with version and id', async () => {
    let got = (await k.call('GET', '/org/acme/group/devs')).body;
    const plus = await k.call('PATCH', '/org/acme/group/devs', { version: got.version, id: got.id, '$append/memberLinks': ['/org/acme/serviceaccount/ci'] });
    assert.equal(plus.status, 200, JSON.stringify(plus.body));
    assert.deepEqual(plus.body.memberLinks, ['/org/acme/serviceaccount/sa', '/org/acme/serviceaccount/ci']);
    got = plus.body;
    const minus = await k.call('PATCH', '/org/acme/group/devs', { version: got.version, id: got.id, '$drop/memberLinks': ['/org/acme/serviceaccount/sa'] });
    assert.deepEqual(minus.body.memberLinks, ['/org/acme/serviceaccount/ci']);
    got = minus.body;
    const set = await k.call('PATCH', '/org/acme/group/devs', { version: got.version, id: got.id, memberLinks: ['/org/acme/user/x@y.io', '//serviceaccount/b'] });
    assert.deepEqual(set.body.memberLinks, ['/org/acme/user/x@y.io', '/org/acme/serviceaccount/b'], 'a plain array replaces; relative links come back in full');
  });

  test('serviceaccount remove-key: $drop/keys revokes the key (401 afterwards)', async () => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'robot', tags: {} })).status, 201);
    const keep = await k.call('POST', '/org/acme/serviceaccount/robot/-addKey', { description: 'keep' });
    const drop = await k.call('POST', '/org/acme/serviceaccount/robot/-addKey', { description: 'drop' });
    assert.equal(drop.status, 200, JSON.stringify(drop.body));
    // robot may do nothing yet, but a valid key is authenticated: 403, not 401
    assertError(await k.call('GET', '/org/acme/gvc/prod', undefined, { token: drop.body.key }), 403, 'forbidden');
    const res = await k.call('PATCH', '/org/acme/serviceaccount/robot', { '$drop/keys': [drop.body.name] });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.keys.map((key: any) => key.name), [keep.body.name]);
    assertError(await k.call('GET', '/org/acme/gvc/prod', undefined, { token: drop.body.key }), 401, 'unauthorized');
    assertError(await k.call('GET', '/org/acme/gvc/prod', undefined, { token: keep.body.key }), 403, 'forbidden');
  });

  test('policy add-binding: GET, then PATCH the full bindings array with version and id', async () => {
    const created = await k.call('POST', '/org/acme/policy', { name: 'gvc-view', targetKind: 'gvc', tags: {}, targetLinks: ['/org/acme/gvc/prod'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const got = (await k.call('GET', '/org/acme/policy/gvc-view')).body;
    const bindings = [{ permissions: ['view'], principalLinks: ['/org/acme/serviceaccount/robot', '/org/acme/group/devs', '/org/acme/user/a@b.io'] }];
    const res = await k.call('PATCH', '/org/acme/policy/gvc-view', { bindings, version: got.version, id: got.id });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.bindings, bindings);
    const key = await k.call('POST', '/org/acme/serviceaccount/robot/-addKey', { description: 'reader' });
    assert.equal((await k.call('GET', '/org/acme/gvc/prod', undefined, { token: key.body.key })).status, 200, 'the new binding grants view');
    // remove-binding: the recomputed, smaller array replaces the old one
    const removed = await k.call('PATCH', '/org/acme/policy/gvc-view', { bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/group/devs'] }], version: res.body.version, id: got.id });
    assert.equal(removed.status, 200, JSON.stringify(removed.body));
    assert.deepEqual(removed.body.bindings[0].principalLinks, ['/org/acme/group/devs']);
    assertError(await k.call('GET', '/org/acme/gvc/prod', undefined, { token: key.body.key }), 403, 'forbidden');
  });

  test('gvc edit: PATCH with the whole GET body (kind, id, version, created, lastModified, links, status) applies the edit', async () => {
    const got = (await k.call('GET', '/org/acme/gvc/prod')).body;
    assert.ok(got.alias && got.links.length > 2);
    const edited = structuredClone(got);
    edited.description = 'edited';
    edited.spec.staticPlacement.locationLinks.push('/org/acme/location/gcp-us-east1');
    const res = await k.call('PATCH', '/org/acme/gvc/prod', edited);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.description, 'edited');
    assert.deepEqual(res.body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2', '/org/acme/location/gcp-us-east1']);
    assert.equal(res.body.version, got.version + 1);
    assert.equal(res.body.id, got.id);
    assert.equal(res.body.created, got.created);
    assert.equal(res.body.alias, got.alias);
    assert.deepEqual(res.body.links, got.links);
    // saving the editor unchanged changes nothing, not even the version
    const unchanged = await k.call('PATCH', '/org/acme/gvc/prod', res.body);
    assert.equal(unchanged.status, 200);
    assert.deepEqual(unchanged.body, res.body);
    // the whole body of an older read is a stale precondition
    assertError(await k.call('PATCH', '/org/acme/gvc/prod', { ...got, description: 'lost update' }), 409, 'conflict');
  });

  test('gvc edit --replace: PUT on the item with the whole body', async () => {
    const got = (await k.call('GET', '/org/acme/gvc/prod')).body;
    const edited = structuredClone(got);
    edited.tags = { replaced: 'yes' };
    delete edited.description;
    const res = await k.call('PUT', '/org/acme/gvc/prod', edited);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.tags, { replaced: 'yes' });
    assert.equal(res.body.description, 'prod', 'an absent description falls back to the name');
    assert.equal(res.body.version, got.version + 1);
    assert.equal(res.body.id, got.id);
    assert.equal(res.body.alias, got.alias);
    assert.deepEqual((await k.call('GET', '/org/acme/gvc/prod')).body, res.body);
  });

  test('PUT item replaces the whole object: absent fields are reset to their defaults', async () => {
    const got = (await k.call('GET', `${W}/web`)).body;
    assert.equal(got.spec.defaultOptions.autoscaling.maxScale, 3);
    const res = await k.call('PUT', `${W}/web`, { name: 'web', spec: { containers: [{ name: 'main', image: 'nginx:2' }] } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.spec.containers, [{ name: 'main', image: 'nginx:2' }]);
    assert.equal(res.body.spec.type, 'standard');
    assert.equal(res.body.spec.defaultOptions.autoscaling.maxScale, 5);
    assert.equal(res.body.spec.defaultOptions.suspend, false);
    assert.deepEqual(res.body.tags, {});
    assert.equal(res.body.description, 'web');
    assert.equal(res.body.version, got.version + 1);
    assert.deepEqual((await k.call('GET', `${W}/web`)).body, res.body);
  });

  test('cpln apply: PUT on the collection with kind, gvc and relative links; 201 + Location, then 200 with a get -o yaml export', async () => {
    const gvc = { kind: 'gvc', name: 'applied', description: 'from a file', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } };
    const first = await k.call('PUT', '/org/acme/gvc', gvc);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.equal(first.headers.location, '/org/acme/gvc/applied');
    assert.deepEqual(first.body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2']);
    const wl = {
      kind: 'workload',
      name: 'api',
      gvc: 'applied',
      spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1', ports: [{ protocol: 'http', number: 80 }] }], identityLink: '//identity/app' },
    };
    const created = await k.call('PUT', '/org/acme/gvc/applied/workload', wl);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.headers.location, '/org/acme/gvc/applied/workload/api');
    assert.equal(created.body.spec.identityLink, '/org/acme/gvc/applied/identity/app');
    // the export of `cpln workload get api -o yaml`, edited and applied again
    const exported = (await k.call('GET', '/org/acme/gvc/applied/workload/api')).body;
    exported.spec.containers[0].image = 'nginx:2';
    const updated = await k.call('PUT', '/org/acme/gvc/applied/workload', exported);
    assert.equal(updated.status, 200, JSON.stringify(updated.body));
    assert.equal(updated.headers.location, undefined);
    assert.equal(updated.body.spec.containers[0].image, 'nginx:2');
    assert.equal(updated.body.version, exported.version + 1);
    assert.equal(updated.body.id, exported.id);
    assert.equal(updated.body.created, exported.created);
    // the same file applied again is a no-op
    const same = await k.call('PUT', '/org/acme/gvc/applied/workload', wl);
    assert.equal(same.status, 200);
    assert.equal(same.body.spec.containers[0].image, 'nginx:1');
    const again = await k.call('PUT', '/org/acme/gvc/applied/workload', wl);
    assert.equal(again.body.version, same.body.version);
  });

  test('volumeset update --set spec.initialCapacity=20 --set spec.snapshots.createFinalSnapshot=false: strings are coerced', async () => {
    const created = await k.call('POST', VS, {
      name: 'data',
      description: 'data',
      tags: {},
      spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd', fileSystemType: 'xfs', snapshots: { createFinalSnapshot: true, retentionDuration: '7d' } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const got = (await k.call('GET', `${VS}/data`)).body;
    const res = await k.call('PATCH', `${VS}/data`, { version: got.version, id: got.id, spec: { initialCapacity: '20', snapshots: { createFinalSnapshot: 'false' } } });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.spec.initialCapacity, 20);
    assert.equal(res.body.spec.snapshots.createFinalSnapshot, false);
    assert.equal(res.body.spec.snapshots.retentionDuration, '7d');
    assert.deepEqual((await k.call('GET', `${VS}/data`)).raw, JSON.stringify(res.body));
  });

  test('an unknown directive or field is 400 naming its path in details.errors, and nothing changes', async () => {
    const cases: Array<[string, unknown, string]> = [
      ['/org/acme/group/devs', { $frobnicate: ['x'] }, '$frobnicate'],
      ['/org/acme/group/devs', { '$merge/memberLinks': [] }, '$merge/memberLinks'],
      ['/org/acme/group/devs', { '$append/nope': ['x'] }, '$append/nope'],
      ['/org/acme/group/devs', { memberQuery: { spec: { $bogus: 1 } } }, 'memberQuery.spec.$bogus'],
      ['/org/acme/group/devs', { description: 'ok', notAField: 1 }, 'notAField'],
      [`${W}/web`, { spec: { '$patch/containers': [{ name: 'main', '$patch/env': [{ name: 'A', colour: 'red' }] }] } }, 'spec.$patch/containers[0].$patch/env[0].colour'],
      [`${VS}/data`, { spec: { autoscaling: { '$replace/predictive': { enabled: true, bogus: 1 } } } }, 'spec.autoscaling.$replace/predictive.bogus'],
      [`${VS}/data`, { spec: { '$append/snapshots': [1] } }, 'spec.$append/snapshots'],
    ];
    for (const [url, body, path] of cases) {
      const res = await refusedUnchanged(url, () => k.call('PATCH', url, body));
      assertBadPath(res, path);
    }
  });

  test('$drop of a required field is 400; $drop of an optional one works', async () => {
    assertBadPath(await refusedUnchanged('/org/acme/group/devs', () => k.call('PATCH', '/org/acme/group/devs', { $drop: ['name'] })), '$drop[0]', /required/);
    const res = await refusedUnchanged(`${W}/web`, () => k.call('PATCH', `${W}/web`, { spec: { '$patch/containers': [{ name: 'main', $drop: ['image'] }] } }));
    // A container's image is required for every type but vm: the workload's check names the field.
    assertBadPath(res, 'spec.containers[0].image', /required/);
    assertBadPath(await refusedUnchanged(`${W}/web`, () => k.call('PATCH', `${W}/web`, { $drop: ['spec'] })), '$drop[0]', /required/);
    const ok = await k.call('PATCH', '/org/acme/group/devs', { $drop: ['description', 'memberLinks'] });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.description, undefined);
    assert.equal(ok.body.memberLinks, undefined);
  });

  test('immutable fields: name, volumeset performanceClass and fileSystemType, workload spec.type', async () => {
    assertBadPath(await refusedUnchanged('/org/acme/group/devs', () => k.call('PATCH', '/org/acme/group/devs', { name: 'ops' })), 'name');
    assertBadPath(await refusedUnchanged('/org/acme/group/devs', () => k.call('PUT', '/org/acme/group/devs', { name: 'ops' })), 'name');
    const vs = `${VS}/data`;
    assertBadPath(await refusedUnchanged(vs, () => k.call('PATCH', vs, { spec: { performanceClass: 'high-throughput-ssd' } })), 'spec.performanceClass');
    assertBadPath(await refusedUnchanged(vs, () => k.call('PATCH', vs, { spec: { fileSystemType: 'ext4' } })), 'spec.fileSystemType');
    assertBadPath(await refusedUnchanged(vs, () => k.call('PATCH', vs, { spec: { fileSystemType: null } })), 'spec.fileSystemType', /immutable/);
    assertBadPath(await refusedUnchanged(vs, () => k.call('PATCH', vs, { spec: { $drop: ['performanceClass'] } })), 'spec.$drop[0]', /immutable/);
    assertBadPath(await refusedUnchanged(vs, () => k.call('PATCH', vs, { '$replace/spec': { initialCapacity: 30, fileSystemType: 'ext4' } })), 'spec.fileSystemType');
    assertError(await refusedUnchanged(vs, () => k.call('PUT', vs, { name: 'data', spec: { fileSystemType: 'ext4' } })), 400, 'bad_request');
    const wl = `${W}/web`;
    assertBadPath(await refusedUnchanged(wl, () => k.call('PATCH', wl, { spec: { type: 'serverless' } })), 'spec.type');
    assertError(await refusedUnchanged(wl, () => k.call('PUT', wl, { name: 'web', spec: { type: 'cron', containers: [{ name: 'main', image: 'x' }], job: { schedule: '* * * * *' } } })), 400, 'bad_request');
    // restating an immutable field unchanged, as edit does, is fine
    const same = await k.call('PATCH', vs, { spec: { performanceClass: 'general-purpose-ssd', fileSystemType: 'xfs', initialCapacity: 25 } });
    assert.equal(same.status, 200, JSON.stringify(same.body));
    assert.equal(same.body.spec.initialCapacity, 25);
  });

  test('origin is the server\'s: a built-in stays built in, a client cannot make its item built in', async () => {
    const loc = '/org/acme/location/aws-us-west-2';
    for (const body of [{ origin: 'custom' }, { origin: null }, { $drop: ['origin'] }]) {
      const res = await k.call('PATCH', loc, body);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.origin, 'builtin');
    }
    // a built-in location's tags and enabled flag may change (Terraform's cpln_location does)
    const tagged = await k.call('PATCH', loc, { tags: { region: 'west' }, spec: { enabled: 'false' } });
    assert.equal(tagged.status, 200, JSON.stringify(tagged.body));
    assert.equal(tagged.body.spec.enabled, false);
    assertBadPath(await refusedUnchanged(loc, () => k.call('PATCH', loc, { region: 'us-east-1' })), 'region');
    const mine = await k.call('PATCH', '/org/acme/group/devs', { origin: 'builtin' });
    assert.equal(mine.status, 200, JSON.stringify(mine.body));
    assert.equal(mine.body.origin, 'default');
  });

  test('built-in policies, service accounts and audit contexts cannot be edited: 400 and nothing changes', async () => {
    const cases: Array<[string, string, unknown]> = [
      ['PATCH', '/org/acme/policy/superusers-gvc', { description: 'mine now' }],
      ['PATCH', '/org/acme/policy/viewers-gvc', { bindings: [{ permissions: ['manage'], principalLinks: ['/org/acme/group/viewers'] }] }],
      ['PATCH', '/org/acme/serviceaccount/controlplane', { tags: { a: 'b' } }],
      ['PATCH', '/org/acme/auditctx/cpln', { description: 'x' }],
      ['PUT', '/org/acme/policy/superusers-gvc', { name: 'superusers-gvc', targetKind: 'gvc', target: 'all' }],
      ['PUT', '/org/acme/policy', { kind: 'policy', name: 'viewers-gvc', targetKind: 'gvc', target: 'all' }],
    ];
    for (const [method, url, body] of cases) {
      const item = method === 'PUT' && url.endsWith('/policy') ? `${url}/viewers-gvc` : url;
      assertError(await refusedUnchanged(item, () => k.call(method, url, body)), 400, 'bad_request');
    }
  });

  test('a stale version is 409 conflict on PATCH, PUT item and apply, and the item reads back byte-identical', async () => {
    const url = '/org/acme/group/devs';
    const current = (await k.call('GET', url)).body;
    assert.ok(current.version >= 2);
    const stale = current.version - 1;
    const writes: Array<() => Promise<Response>> = [
      () => k.call('PATCH', url, { version: stale, description: 'stale', '$append/memberLinks': ['/org/acme/serviceaccount/z'] }),
      () => k.call('PATCH', url, { version: String(stale), id: current.id, tags: { t: 'x' } }),
      () => k.call('PATCH', url, { version: current.version + 1, description: 'future' }),
      () => k.call('PUT', url, { name: 'devs', version: stale, description: 'stale' }),
      () => k.call('PUT', '/org/acme/group', { kind: 'group', name: 'devs', version: stale, description: 'stale' }),
    ];
    for (const write of writes) assertError(await refusedUnchanged(url, write), 409, 'conflict');
    const fresh = await k.call('PATCH', url, { version: current.version, description: 'fresh' });
    assert.equal(fresh.status, 200);
    assert.equal(fresh.body.version, current.version + 1);
  });

  test(
    'removing tags is no visible change, so the version stays',
    async () => {
      assert.equal((await k.call('POST', '/org/acme/group', { name: 'untagged' })).status, 201);
      for (const body of [{ tags: null }, { $drop: ['tags'] }, { '$replace/tags': {} }]) {
        const before = (await k.call('GET', '/org/acme/group/untagged')).body;
        const res = await k.call('PATCH', '/org/acme/group/untagged', body);
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.deepEqual(res.body.tags, {});
        assert.equal(res.body.version, before.version, JSON.stringify(body));
      }
    },
  );

  test('?dryRun=true on POST, PUT item, PUT collection and PATCH answers the would-be result and stores nothing', async () => {
    const posted = await k.call('POST', `${VS}?dryRun=true`, { name: 'dry', spec: { initialCapacity: '50' } });
    assert.equal(posted.status, 201, JSON.stringify(posted.body));
    assert.equal(posted.body.spec.initialCapacity, 50);
    assert.equal(posted.body.spec.performanceClass, 'general-purpose-ssd');
    assert.equal(posted.body.version, 1);
    assertError(await k.call('GET', `${VS}/dry`), 404, 'not_found');

    const appliedNew = await k.call('PUT', '/org/acme/group?dryRun=true', { kind: 'group', name: 'dry-group' });
    assert.equal(appliedNew.status, 201, JSON.stringify(appliedNew.body));
    assert.equal(appliedNew.headers.location, '/org/acme/group/dry-group');
    assertError(await k.call('GET', '/org/acme/group/dry-group'), 404, 'not_found');

    const url = `${VS}/data`;
    const before = await k.call('GET', url);
    const patched = await k.call('PATCH', `${url}?dryRun=true`, { version: before.body.version, spec: { initialCapacity: '99', autoscaling: { maxCapacity: 500 } } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.spec.initialCapacity, 99);
    assert.equal(patched.body.spec.autoscaling.maxCapacity, 500);
    assert.equal(patched.body.version, before.body.version + 1, 'the would-be version');
    const replaced = await k.call('PUT', `${url}?dryRun=true`, { name: 'data', spec: { fileSystemType: 'xfs', initialCapacity: 77 } });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.equal(replaced.body.spec.initialCapacity, 77);
    assert.equal(replaced.body.spec.snapshots, undefined);
    const applied = await k.call('PUT', `${VS}?dryRun=true`, { kind: 'volumeset', name: 'data', gvc: 'prod', spec: { fileSystemType: 'xfs', initialCapacity: 66 } });
    assert.equal(applied.status, 200, JSON.stringify(applied.body));
    assert.equal(applied.body.spec.initialCapacity, 66);
    assert.equal((await k.call('GET', url)).raw, before.raw, 'nothing was stored, the version is unchanged');

    // a dry run is checked like the real write
    assertError(await k.call('PATCH', `${url}?dryRun=true`, { version: before.body.version - 1, description: 'x' }), 409, 'conflict');
    assertBadPath(await k.call('PATCH', `${url}?dryRun=true`, { spec: { performanceClass: 'high-throughput-ssd' } }), 'spec.performanceClass');
    assertError(await k.call('POST', '/org/acme/gvc/prod/volumeset?dryRun=true', { name: 'data' }), 409, 'already_exists');
  });

  test('a replace that leaves out an immutable field keeps it instead of resetting it to its default', async () => {
    const created = await k.call('POST', '/org/acme/gvc/prod/volumeset', { name: 'fast', spec: { initialCapacity: 20, performanceClass: 'high-throughput-ssd', fileSystemType: 'xfs' } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const replaced = await k.call('PUT', '/org/acme/gvc/prod/volumeset/fast', { name: 'fast', spec: { initialCapacity: 30 } });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.equal(replaced.body.spec.performanceClass, 'high-throughput-ssd');
    assert.equal(replaced.body.spec.fileSystemType, 'xfs');
    assert.equal(replaced.body.spec.initialCapacity, 30);
    const changed = await k.call('PUT', '/org/acme/gvc/prod/volumeset/fast', { name: 'fast', spec: { initialCapacity: 30, performanceClass: 'general-purpose-ssd' } });
    assert.equal(changed.status, 400);
  });
});
