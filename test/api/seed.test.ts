// The nine operations of seed section 4, with their list shapes and error responses.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

forEachBackend('seed operations', (backend) => {
  let k: TestKeel;
  let stranger: string; // a key of another org
  let bystander: string; // a key of this org with no policy
  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'g1', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2', '//location/gcp-us-east1'] } } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/g1/volumeset', { name: 'data', spec: { initialCapacity: 10, fileSystemType: 'ext4' } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/g1/workload', { name: 'web', tags: { tier: 'front' }, spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }] } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/g1/workload', { name: 'db', tags: { tier: 'back' }, spec: { type: 'stateful', containers: [{ name: 'c', image: 'postgres' }] } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'bystander' })).status, 201);
    const key = await k.call('POST', '/org/acme/serviceaccount/bystander/-addKey', { description: 'test' });
    assert.equal(key.status, 200, JSON.stringify(key.body));
    bystander = key.body.key;
    assert.equal((await k.call('POST', '/org', { name: 'other-org' })).status, 201);
    assert.equal((await k.call('POST', '/org/other-org/serviceaccount', { name: 'outsider' })).status, 201);
    stranger = (await k.call('POST', '/org/other-org/serviceaccount/outsider/-addKey', { description: 'x' })).body.key;
  });
  after(() => k.close());

  test('1. GET /org/{org}/gvc/{gvc}/volumeset lists volume sets; 400 for a bad request, 403 when access is denied', async () => {
    const res = await k.call('GET', '/org/acme/gvc/g1/volumeset');
    assert.equal(res.status, 200);
    assert.deepEqual(Object.keys(res.body).sort(), ['itemKind', 'items', 'kind', 'links']);
    assert.equal(res.body.itemKind, 'volumeset');
    assert.deepEqual(res.body.items.map((v: any) => v.name), ['data']);
    assert.equal(res.body.items[0].spec.performanceClass, 'general-purpose-ssd');
    const bad = await k.call('GET', '/org/acme/gvc/g1/volumeset?limit=zero');
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'bad_request');
    const denied = await k.call('GET', '/org/acme/gvc/g1/volumeset', undefined, { token: stranger });
    assert.equal(denied.status, 403);
    assert.equal(denied.body.code, 'forbidden');
    const filtered = await k.call('GET', '/org/acme/gvc/g1/volumeset', undefined, { token: bystander });
    assert.equal(filtered.status, 200);
    assert.deepEqual(filtered.body.items, [], 'items the caller may not view are left out');
  });

  test('2. POST /org/{org}/workload/-query returns the matching workloads and the query', async () => {
    const body = { kind: 'workload', spec: { match: 'all', terms: [{ op: '=', tag: 'tier', value: 'front' }, { op: '=', rel: 'gvc', value: 'g1' }] } };
    const res = await k.call('POST', '/org/acme/workload/-query', body);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(Object.keys(res.body).sort(), ['itemKind', 'items', 'kind', 'links', 'query']);
    assert.equal(res.body.kind, 'queryresult');
    assert.deepEqual(res.body.items.map((w: any) => w.name), ['web']);
    assert.equal(res.body.query.kind, 'workload');
    assert.deepEqual(res.body.query.spec.terms, body.spec.terms);
    assert.equal(res.body.query.context.org, 'acme');
    const all = await k.call('POST', '/org/acme/workload/-query', undefined, { rawBody: '', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    assert.deepEqual(all.body.items.map((w: any) => w.name), ['db', 'web']);
    const hidden = await k.call('POST', '/org/acme/workload/-query', body, { token: bystander });
    assert.deepEqual(hidden.body.items, []);
    assert.equal((await k.call('POST', '/org/acme/workload/-query', body, { token: stranger })).status, 403);
    assert.equal((await k.call('POST', '/org/acme/workload/-query', { spec: { match: 'some' } })).status, 400);
  });

  test('3. POST /org/{org}/gvc/{gvc}/identity creates an identity', async () => {
    const body = {
      name: 'app-id',
      description: 'the app',
      tags: { a: 'b' },
      aws: { cloudAccountLink: '//cloudaccount/aws', policyRefs: ['aws::ReadOnlyAccess'], trustPolicy: { Version: '2012-10-17', Statement: [{ Effect: 'Allow' }] } },
      ngs: { cloudAccountLink: '//cloudaccount/ngs', pub: { allow: ['a.>'], deny: [] }, sub: { allow: [], deny: ['x'] }, resp: { max: 1, ttl: '5s' }, subs: 10, data: -1, payload: 1024 },
      networkResources: [{ name: 'db', agentLink: '//agent/a1', IPs: ['10.0.0.1'], ports: [5432] }],
      memcacheAccess: [{ clusterLink: '//memcachecluster/m', role: 'readWrite' }],
    };
    const res = await k.call('POST', '/org/acme/gvc/g1/identity', body);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.headers.location, '/org/acme/gvc/g1/identity/app-id');
    assert.equal(res.body.aws.cloudAccountLink, '/org/acme/cloudaccount/aws');
    assert.equal((await k.call('POST', '/org/acme/gvc/g1/identity', { name: 'xx', aws: { bogus: true } })).status, 400);
    assert.equal((await k.call('POST', '/org/acme/gvc/g1/identity', { name: 'yy' }, { token: bystander })).status, 403);
  });

  test('4. PATCH /org/{org}/group/{name} applies the directives of seed 4.1', async () => {
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'devs', memberLinks: ['/org/acme/serviceaccount/a'] })).status, 201);
    const res = await k.call('PATCH', '/org/acme/group/devs', {
      '$append/memberLinks': ['//serviceaccount/b'],
      memberQuery: { kind: 'user', spec: { match: 'all', terms: [{ op: '~', property: 'email', value: '@acme.com' }] } },
      '$replace/identityMatcher': { expression: 'groups', language: 'jmespath' },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.memberLinks, ['/org/acme/serviceaccount/a', '/org/acme/serviceaccount/b']);
    assert.equal(res.body.identityMatcher.language, 'jmespath');
    assert.equal(res.body.origin, 'default');
    const dropped = await k.call('PATCH', '/org/acme/group/devs', { $drop: ['memberQuery'], '$drop/memberLinks': ['/org/acme/serviceaccount/a'] });
    assert.equal(dropped.status, 200, JSON.stringify(dropped.body));
    assert.deepEqual(dropped.body.memberLinks, ['/org/acme/serviceaccount/b']);
    assert.equal(dropped.body.memberQuery, undefined);
    assert.equal((await k.call('PATCH', '/org/acme/group/devs', { $drop: ['name'] })).status, 400);
    assert.equal((await k.call('PATCH', '/org/acme/group/devs', { description: 'x' }, { token: bystander })).status, 403);
  });

  test('5. PATCH /org/{org}/gvc/{gvc}/volumeset/{name} applies the directives of seed 4.2', async () => {
    const res = await k.call('PATCH', '/org/acme/gvc/g1/volumeset/data', {
      spec: { initialCapacity: '30', autoscaling: { maxCapacity: 100, minFreePercentage: 10, scalingFactor: 1.5 }, '$replace/snapshots': { retentionDuration: '7d' } },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.spec.initialCapacity, 30);
    assert.equal(res.body.spec.autoscaling.maxCapacity, 100);
    assert.deepEqual(res.body.spec.snapshots, { retentionDuration: '7d' });
    assert.equal(res.body.version, 2);
    const immutable = await k.call('PATCH', '/org/acme/gvc/g1/volumeset/data', { spec: { performanceClass: 'high-throughput-ssd' } });
    assert.equal(immutable.status, 400);
    assert.equal((await k.call('GET', '/org/acme/gvc/g1/volumeset/data')).body.spec.performanceClass, 'general-purpose-ssd');
  });

  test('6. GET /org/{org}/identity/-schema/permissions lists grantable permissions', async () => {
    const res = await k.call('GET', '/org/acme/identity/-schema/permissions');
    assert.equal(res.status, 200);
    assert.equal(res.body.kind, 'permissions');
    assert.equal(res.body.targetKind, 'identity');
    const names = res.body.items.map((p: any) => p.name);
    for (const p of ['create', 'delete', 'edit', 'manage', 'view']) assert.ok(names.includes(p), p);
    for (const item of res.body.items) assert.equal(typeof item.description, 'string');
    assert.deepEqual(res.body.implied.edit, ['view']);
    assert.ok(res.body.implied.manage.includes('delete'));
    assert.ok(Array.isArray(res.body.links));
  });

  test('7. GET /org/{org}/mk8s lists clusters', async () => {
    const res = await k.call('GET', '/org/acme/mk8s');
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, { kind: 'list', itemKind: 'mk8s', items: [], links: [{ rel: 'self', href: '/org/acme/mk8s' }] });
  });

  test('8. GET /org/{org}/location/{name} returns a built-in location', async () => {
    const res = await k.call('GET', '/org/acme/location/aws-us-west-2');
    assert.equal(res.status, 200);
    assert.equal(res.body.kind, 'location');
    assert.equal(res.body.origin, 'builtin');
    assert.equal(res.body.provider, 'aws');
    assert.equal(res.body.region, 'us-west-2');
    assert.equal(res.body.spec.enabled, true);
    assert.equal(typeof res.body.status.geo.lat, 'number');
    assert.equal((await k.call('GET', '/org/acme/location/nowhere-1')).status, 404);
    assert.equal((await k.call('DELETE', '/org/acme/location/aws-us-west-2')).status, 403);
    const locations = await k.call('GET', '/org/acme/location?limit=1000');
    const providers = new Set(locations.body.items.map((l: any) => l.provider));
    assert.ok(locations.body.items.length >= 30);
    for (const p of ['aws', 'gcp', 'azure', 'linode', 'vultr', 'equinix', 'oci']) assert.ok(providers.has(p), p);
  });

  test('9. GET /org/{org}/gvc/{name} returns the GVC', async () => {
    const res = await k.call('GET', '/org/acme/gvc/g1');
    assert.equal(res.status, 200);
    assert.equal(res.body.kind, 'gvc');
    assert.match(res.body.alias, /^[a-z0-9]+$/);
    assert.deepEqual(res.body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2', '/org/acme/location/gcp-us-east1']);
    assert.deepEqual(res.body.links.map((l: any) => l.rel).slice(0, 2), ['self', 'org']);
    assert.equal((await k.call('GET', '/org/acme/gvc/nope')).status, 404);
    assert.equal((await k.call('GET', '/org/acme/gvc/g1', undefined, { token: bystander })).status, 403);
    assert.equal((await k.call('GET', '/org/acme/gvc/g1', undefined, { token: stranger })).status, 403);
  });
});
