// The billing account routes (`cpln account get`, `cpln org create --accountId`) show a caller only
// its own account, with only its own orgs in it, on both backends. As an attacker: a key of another
// org, or one with no permission at all, learns nothing of this Keel's first org or any org it is
// not in, through the list, the item, its sub-routes or their errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { KEEL_ACTOR } from '../../src/audit/events.js';
import { accountIdOf, accountLinkOf, createOrg } from '../../src/resources/orgs.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

forEachBackend('account routes', (backend) => {
  let k: TestKeel;
  let outsider: string; // the superuser key of another org
  let powerless: string; // a key of that org with no policy at all
  const id = accountIdOf('first-org');
  before(async () => {
    k = await startKeel(backend, 'first-org');
    outsider = (await createOrg(k.store, { name: 'tenant', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf('first-org'), adminServiceAccount: 'admin' })).token!;
    const sa = await k.call('POST', '/org/tenant/serviceaccount', { name: 'nobody' }, { token: outsider });
    assert.equal(sa.status, 201, sa.raw);
    powerless = (await k.call('POST', '/org/tenant/serviceaccount/nobody/-addKey', { description: 'no policies' }, { token: outsider })).body.key;
  });
  after(() => k.close());

  test("as the client: the first org's superuser gets the account with its orgs, and creates an org through it", async () => {
    const list = await k.call('GET', '/account');
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.items.map((a: any) => [a.id, a.status.orgs]), [[id, ['first-org']]]);
    const created = await k.call('POST', `/account/${id}/org`, { org: { name: 'second' } });
    assert.equal(created.status, 201, created.raw);
    const item = await k.call('GET', `/account/${id}`);
    assert.deepEqual(item.body.status.orgs, ['first-org', 'second'], 'the org it created and belongs to now');
    assert.deepEqual(item.body.links.map((l: any) => l.href), [`/account/${id}`, '/org/first-org', '/org/second']);
  });

  test("as an attacker: another org's keys never see the first org, nor the orgs they are not in", async () => {
    for (const [who, token] of [['superuser of tenant', outsider], ['powerless key of tenant', powerless]] as const) {
      const list = await k.call('GET', '/account', undefined, { token });
      assert.equal(list.status, 200, `${who}: ${list.raw}`);
      assert.doesNotMatch(list.raw, /first-org|second/, who);
      assert.deepEqual(list.body.items.map((a: any) => [a.id, a.status.orgs]), [[id, ['tenant']]], who);
      const item = await k.call('GET', `/account/${id}`, undefined, { token });
      assert.equal(item.status, 200, who);
      assert.doesNotMatch(item.raw, /first-org|second/, who);
      // Its own account's billing routes are refused (Keel keeps no billing data); another account is not found.
      for (const [path, status] of [[`/account/${id}/-policy`, 400], [`/account/${id}/-eventlog`, 400], ['/account/no-such-account', 404], [`/account/${accountIdOf('tenant')}`, 404], [`/account/${accountIdOf('tenant')}/-policy`, 404]] as const) {
        const res = await k.call('GET', path, undefined, { token });
        assert.equal(res.status, status, `${who} ${path}`);
        assert.doesNotMatch(res.raw, /first-org|second/, `${who} ${path}`);
      }
      // Creating an org through the account is the operator's call (orgCreators), and says nothing of the first org either.
      const create = await k.call('POST', `/account/${id}/org`, { org: { name: 'sneaky' } }, { token });
      assert.equal(create.status, 403, `${who}: ${create.raw}`);
      assert.doesNotMatch(create.raw, /first-org/, who);
    }
    assert.equal((await k.call('GET', '/account', undefined, { token: null })).status, 401);
  });

  test('an account that is not the caller\'s is 404, as one that does not exist', async () => {
    const foreign = (await createOrg(k.store, { name: 'elsewhere', actor: KEEL_ACTOR, superusers: [], accountLink: '/account/00000000-0000-4000-8000-000000000000', adminServiceAccount: 'admin' })).token!;
    const mine = await k.call('GET', '/account', undefined, { token: foreign });
    assert.deepEqual(mine.body.items.map((a: any) => [a.id, a.status.orgs]), [['00000000-0000-4000-8000-000000000000', ['elsewhere']]]);
    const theirs = await k.call('GET', `/account/${id}`, undefined, { token: foreign });
    const missing = await k.call('GET', '/account/11111111-1111-4111-8111-111111111111', undefined, { token: foreign });
    assert.deepEqual([theirs.status, missing.status], [404, 404]);
    assert.equal(theirs.body.message.replace(id, 'X'), missing.body.message.replace('11111111-1111-4111-8111-111111111111', 'X'));
    assert.equal((await k.call('POST', `/account/${id}/org`, { org: { name: 'through-theirs' } }, { token: foreign })).status, 404);
  });
});
