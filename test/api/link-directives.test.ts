// $drop, $retain and $append on link lists compare links in full form, whichever form the client
// sends: a `$drop/memberLinks` of `//serviceaccount/x` is a revocation and must take effect.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';

forEachBackend('link directives normalize relative links', (backend) => {
  let k: TestKeel;
  let member: string;

  async function ok(method: string, url: string, body?: unknown, token?: string): Promise<Response> {
    const res = await k.call(method, url, body, { token });
    assert.ok(res.status >= 200 && res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  }
  const patch = (url: string, body: unknown) => ok('PATCH', url, body).then((res) => res.body);

  before(async () => {
    k = await startKeel(backend);
    for (const name of ['member', 'other']) await ok('POST', '/org/acme/serviceaccount', { name });
    member = (await ok('POST', '/org/acme/serviceaccount/member/-addKey', {})).body.key;
    await ok('POST', '/org/acme/secret', { name: 's1', type: 'opaque', data: { payload: 'x' } });
    await ok('POST', '/org/acme/secret', { name: 's2', type: 'opaque', data: { payload: 'y' } });
    await ok('POST', '/org/acme/gvc', { name: 'g1', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2', '//location/aws-eu-central-1'] } } });
    for (const name of ['front', 'back']) {
      await ok('POST', '/org/acme/gvc/g1/workload', { name, spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }] } });
    }
  });
  after(() => k.close());

  test('$drop of a relative member link revokes the member', async () => {
    await ok('POST', '/org/acme/group', { name: 'team', memberLinks: ['//serviceaccount/member', '//serviceaccount/other'] });
    await ok('POST', '/org/acme/policy', {
      name: 'team-secrets',
      targetKind: 'secret',
      target: 'all',
      bindings: [{ permissions: ['view'], principalLinks: ['//group/team'] }],
    });
    await ok('GET', '/org/acme/secret/s1', undefined, member);
    const group = await patch('/org/acme/group/team', { '$drop/memberLinks': ['//serviceaccount/member'] });
    assert.deepEqual(group.memberLinks, ['/org/acme/serviceaccount/other']);
    assertError(await k.call('GET', '/org/acme/secret/s1', undefined, { token: member }), 403, 'forbidden');
  });

  test('$retain keeps the members named in either form', async () => {
    await ok('PUT', '/org/acme/group/keep', { name: 'keep', memberLinks: ['/org/acme/serviceaccount/member', '/org/acme/serviceaccount/other'] });
    const group = await patch('/org/acme/group/keep', { '$retain/memberLinks': ['//serviceaccount/member'] });
    assert.deepEqual(group.memberLinks, ['/org/acme/serviceaccount/member']);
    const again = await patch('/org/acme/group/keep', { '$retain/memberLinks': ['/org/acme/serviceaccount/member'] });
    assert.deepEqual(again.memberLinks, ['/org/acme/serviceaccount/member']);
    assert.equal(again.version, group.version, 'retaining everything is no change');
  });

  test('$append of a link already present, in either form, adds no duplicate', async () => {
    await ok('PUT', '/org/acme/group/dup', { name: 'dup', memberLinks: ['//serviceaccount/member'] });
    const before = (await ok('GET', '/org/acme/group/dup')).body;
    const group = await patch('/org/acme/group/dup', { '$append/memberLinks': ['//serviceaccount/member', '/org/acme/serviceaccount/member'] });
    assert.deepEqual(group.memberLinks, ['/org/acme/serviceaccount/member']);
    assert.equal(group.version, before.version, 'nothing changed');
    const both = await patch('/org/acme/group/dup', { '$append/memberLinks': ['//serviceaccount/other', '/org/acme/serviceaccount/other'] });
    assert.deepEqual(both.memberLinks, ['/org/acme/serviceaccount/member', '/org/acme/serviceaccount/other']);
  });

  test('policy targetLinks: org-scoped and gvc-scoped relative links', async () => {
    await ok('POST', '/org/acme/policy', {
      name: 'some-secrets',
      targetKind: 'secret',
      targetLinks: ['//secret/s1', '//secret/s2'],
      bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/member'] }],
    });
    await ok('GET', '/org/acme/secret/s1', undefined, member);
    const policy = await patch('/org/acme/policy/some-secrets', { '$drop/targetLinks': ['//secret/s1'] });
    assert.deepEqual(policy.targetLinks, ['/org/acme/secret/s2']);
    assertError(await k.call('GET', '/org/acme/secret/s1', undefined, { token: member }), 403, 'forbidden');

    await ok('POST', '/org/acme/policy', { name: 'workloads', targetKind: 'workload', targetLinks: ['//gvc/g1/workload/front', '//gvc/g1/workload/back'] });
    const kept = await patch('/org/acme/policy/workloads', { '$retain/targetLinks': ['//gvc/g1/workload/back'] });
    assert.deepEqual(kept.targetLinks, ['/org/acme/gvc/g1/workload/back']);
    const appended = await patch('/org/acme/policy/workloads', { '$append/targetLinks': ['//gvc/g1/workload/back', '//gvc/g1/workload/front'] });
    assert.deepEqual(appended.targetLinks, ['/org/acme/gvc/g1/workload/back', '/org/acme/gvc/g1/workload/front']);
  });

  test('links in nested fields: gvc locationLinks and a workload list inside a GVC', async () => {
    const gvc = await patch('/org/acme/gvc/g1', { spec: { staticPlacement: { '$drop/locationLinks': ['//location/aws-us-west-2'] } } });
    assert.deepEqual(gvc.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-eu-central-1']);
    const appended = await patch('/org/acme/gvc/g1', { spec: { staticPlacement: { '$append/locationLinks': ['//location/aws-eu-central-1'] } } });
    assert.deepEqual(appended.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-eu-central-1']);

    // `//workload/x` inside a GVC means that GVC's workload, as when it is stored.
    await patch('/org/acme/gvc/g1/workload/front', {
      spec: { firewallConfig: { internal: { inboundAllowType: 'workload-list', inboundAllowWorkload: ['//workload/back', '//gvc/g1/workload/front'] } } },
    });
    const dropped = await patch('/org/acme/gvc/g1/workload/front', { spec: { firewallConfig: { internal: { '$drop/inboundAllowWorkload': ['//workload/back'] } } } });
    assert.deepEqual(dropped.spec.firewallConfig.internal.inboundAllowWorkload, ['/org/acme/gvc/g1/workload/front']);
    const retained = await patch('/org/acme/gvc/g1/workload/front', { spec: { firewallConfig: { internal: { '$retain/inboundAllowWorkload': ['//workload/front'] } } } });
    assert.deepEqual(retained.spec.firewallConfig.internal.inboundAllowWorkload, ['/org/acme/gvc/g1/workload/front']);
  });
});
