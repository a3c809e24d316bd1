// Every accepted form of a link is stored as the one full form, once, whether it arrives in a plain
// field, a create, or a patch directive ($append, $replace, $patch, $drop, $retain), on both
// backends; so a directive, a policy or a membership means the same whatever form was sent. As an
// attacker: eleven spellings of one link appended to a group are one member; a spelling cannot
// slip past a $drop; a link with a query or fragment is refused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const MEMBER = '/org/acme/serviceaccount/ci-bot';
/** Spellings of MEMBER that the API accepts. */
const MEMBER_FORMS = [
  MEMBER,
  '//serviceaccount/ci-bot',
  `${MEMBER}/`,
  '/org/acme//serviceaccount/ci-bot',
  '/org/acme/serviceaccount/%63i-bot',
  '/org/acme/serviceaccount/ci%2Dbot',
  '//serviceaccount/ci-bot/',
  '/org/acme/./serviceaccount/ci-bot',
  '///serviceaccount/ci-bot',
  '/org/acme/serviceaccount/../serviceaccount/ci-bot',
  '//serviceaccount//ci-bot//',
];

forEachBackend('links are stored in one form', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend);
    for (const name of ['ci-bot', 'other-bot']) assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'web' })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/web/identity', { name: 'app' })).status, 201);
  });
  after(() => k.close());

  test('as an attacker: eleven forms of one link appended to a group are stored once, in full form', async () => {
    const res = await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': MEMBER_FORMS });
    assert.equal(res.status, 200, res.raw);
    assert.deepEqual(res.body.memberLinks, [MEMBER]);
    // Appended again one at a time: nothing new.
    for (const form of MEMBER_FORMS) {
      assert.deepEqual((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': [form] })).body.memberLinks, [MEMBER], form);
    }
    assert.deepEqual((await k.call('GET', '/org/acme/group/viewers')).body.memberLinks, [MEMBER]);
  });

  test('a $drop or $retain in any form finds the stored link; a plain list and a create store each link once', async () => {
    for (const form of MEMBER_FORMS) {
      assert.deepEqual((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': [MEMBER, '//serviceaccount/other-bot'] })).body.memberLinks, [MEMBER, '/org/acme/serviceaccount/other-bot']);
      const dropped = await k.call('PATCH', '/org/acme/group/viewers', { '$drop/memberLinks': [form] });
      assert.deepEqual(dropped.body.memberLinks, ['/org/acme/serviceaccount/other-bot'], `$drop ${form}`);
      await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': [MEMBER] });
      const retained = await k.call('PATCH', '/org/acme/group/viewers', { '$retain/memberLinks': [form] });
      assert.deepEqual(retained.body.memberLinks, [MEMBER], `$retain ${form}`);
    }
    assert.deepEqual((await k.call('PATCH', '/org/acme/group/viewers', { memberLinks: MEMBER_FORMS })).body.memberLinks, [MEMBER]);
    const created = await k.call('POST', '/org/acme/group', { name: 'made-with-forms', memberLinks: MEMBER_FORMS });
    assert.equal(created.status, 201, created.raw);
    assert.deepEqual(created.body.memberLinks, [MEMBER]);
  });

  test('policy targetLinks, bindings and gvc locationLinks: directives store the full form once', async () => {
    const policy = await k.call('POST', '/org/acme/policy', { name: 'bots', targetKind: 'serviceaccount', targetLinks: [], bindings: [] });
    assert.equal(policy.status, 201, policy.raw);
    const targets = await k.call('PATCH', '/org/acme/policy/bots', { '$append/targetLinks': ['//serviceaccount/other-bot', '/org/acme/serviceaccount/other-bot/', '/org/acme/serviceaccount/%6Fther-bot'] });
    assert.equal(targets.status, 200, targets.raw);
    assert.deepEqual(targets.body.targetLinks, ['/org/acme/serviceaccount/other-bot']);
    const bound = await k.call('PATCH', '/org/acme/policy/bots', { '$append/bindings': [{ permissions: ['view'], principalLinks: MEMBER_FORMS }] });
    assert.equal(bound.status, 200, bound.raw);
    assert.deepEqual(bound.body.bindings[0].principalLinks, [MEMBER]);

    const places = ['//location/aws-us-west-2', '/org/acme/location/aws-us-west-2/', '/org/acme//location/./aws-us-west-2'];
    const gvc = await k.call('PATCH', '/org/acme/gvc/web', { spec: { staticPlacement: { '$append/locationLinks': places } } });
    assert.equal(gvc.status, 200, gvc.raw);
    assert.deepEqual(gvc.body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2']);
    const replaced = await k.call('PATCH', '/org/acme/gvc/web', { spec: { '$replace/staticPlacement': { locationLinks: [...places].reverse() } } });
    assert.equal(replaced.status, 200, replaced.raw);
    assert.deepEqual(replaced.body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2']);
    // A gvc-scoped kind inside a GVC: the short relative form and the long one are one link.
    const workload = await k.call('POST', '/org/acme/gvc/web/workload', {
      name: 'api',
      spec: { type: 'standard', identityLink: '//identity/app/', containers: [{ name: 'main', image: 'nginx:1.27', ports: [{ protocol: 'http', number: 80 }] }] },
    });
    assert.equal(workload.status, 201, workload.raw);
    assert.equal(workload.body.spec.identityLink, '/org/acme/gvc/web/identity/app');
    const patched = await k.call('PATCH', '/org/acme/gvc/web/workload/api', { spec: { identityLink: '//gvc/web/identity/%61pp' } });
    assert.equal(patched.body.spec.identityLink, '/org/acme/gvc/web/identity/app');
  });

  test('the form sent changes nothing that links decide: a target in an odd form grants what the full form grants', async () => {
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'creds', type: 'opaque', data: { payload: 'x' } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'reader' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/reader/-addKey', { description: 'r' })).body.key;
    assert.equal((await k.call('GET', '/org/acme/secret/creds', undefined, { token: key })).status, 403);
    const res = await k.call('POST', '/org/acme/policy', {
      name: 'reader-reads-creds',
      targetKind: 'secret',
      targetLinks: ['/org/acme/./secret/%63reds/'],
      bindings: [{ permissions: ['view'], principalLinks: ['///serviceaccount/reader/'] }],
    });
    assert.equal(res.status, 201, res.raw);
    assert.deepEqual([res.body.targetLinks, res.body.bindings[0].principalLinks], [['/org/acme/secret/creds'], ['/org/acme/serviceaccount/reader']]);
    assert.equal((await k.call('GET', '/org/acme/secret/creds', undefined, { token: key })).status, 200);
  });

  test('as an attacker: a link with a query or a fragment, or one that is not a path, is refused with 400 and stores nothing', async () => {
    const before = (await k.call('GET', '/org/acme/group/viewers')).body;
    for (const bad of [`${MEMBER}?x=1`, `${MEMBER}#frag`, 'serviceaccount/ci-bot', '/serviceaccount/ci-bot', `${MEMBER} `]) {
      for (const body of [{ '$append/memberLinks': [bad] }, { memberLinks: [bad] }]) {
        const res = await k.call('PATCH', '/org/acme/group/viewers', body);
        assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.raw}`);
        assert.equal(res.body.code, 'bad_request');
      }
    }
    const after = (await k.call('GET', '/org/acme/group/viewers')).body;
    assert.equal(after.version, before.version);
  });
});
