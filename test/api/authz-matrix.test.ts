// The authorization matrix: for every kind clients can create, and every operation on it, a
// principal without the operation's permission is refused (or sees a filtered list) and nothing
// changes, and a principal granted exactly that permission through a group-bound policy succeeds.
// Across two orgs nothing leaks through get, list, query or access reports.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { requiredPermission } from '../../src/auth/permissions.js';
import { KINDS, grants } from '../../src/kinds/index.js';
import type { KindDef } from '../../src/kinds/types.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const container = { name: 'web', image: 'nginx:latest', ports: [{ protocol: 'http', number: 8080 }] };

/** A valid create body per kind, for a given name. */
const BODIES: Record<string, (name: string) => Record<string, unknown>> = {
  cloudaccount: (name) => ({ name, provider: 'aws', data: { roleArn: 'arn:aws:iam::1:role/x' } }),
  policy: (name) => ({ name, targetKind: 'secret', targetLinks: ['//secret/db'], bindings: [{ permissions: ['reveal'], principalLinks: ['//group/devs'] }] }),
  user: (name) => ({ name, email: name }),
  group: (name) => ({ name, memberLinks: ['//user/a@b.c'] }),
  resource: (name) => ({ name, spec: { any: 1 } }),
  task: (name) => ({ name, type: 'invite', targetEmail: 'a@b.c', context: {} }),
  serviceaccount: (name) => ({ name }),
  secret: (name) => ({ name, type: 'opaque', data: { payload: 'aGk=', encoding: 'base64' } }),
  location: (name) => ({ name, provider: 'byok', spec: { enabled: true } }),
  gvc: (name) => ({ name, spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } }),
  workload: (name) => ({ name, spec: { type: 'standard', containers: [container] } }),
  quota: (name) => ({ name, unit: 'count', max: 10, dimensions: {} }),
  identity: (name) => ({ name }),
  account: (name) => ({ name, spec: {} }),
  domain: (name) => ({ name, spec: { dnsMode: 'cname' } }),
  ipset: (name) => ({ name, spec: {} }),
  resourcepolicy: (name) => ({ name, spec: {} }),
  agent: (name) => ({ name }),
  auditctx: (name) => ({ name }),
  dbcluster: (name) => ({ name, spec: { postgres: { version: '13.4', storageGB: 20, defaults: { size: 'small-2c-8g', instances: 1 } } } }),
  memcachecluster: (name) => ({ name, spec: { nodeCount: 2, nodeSizeGiB: 1, locations: ['//location/aws-us-west-2'] } }),
  spicedbcluster: (name) => ({ name, spec: { version: '1.14.1', locations: [] } }),
  tenant: (name) => ({ name, spec: {} }),
  mk8s: (name) => ({ name, spec: { version: '1.28.2', provider: { generic: { location: 'x' } } } }),
  command: (name) => ({ name, type: 'runCronWorkload', spec: {} }),
  policymembership: (name) => ({ name, spec: {} }),
  primitive: (name) => ({ name, spec: {} }),
  foreign: (name) => ({ name, spec: {} }),
  link: (name) => ({ name, spec: {} }),
  imagesummary: (name) => ({ name, spec: {} }),
  volumeset: (name) => ({ name, spec: { initialCapacity: 10, fileSystemType: 'ext4' } }),
};

const allowed = (def: KindDef, op: 'create' | 'update' | 'delete') => def.operations?.[op] === undefined;
const CREATABLE = KINDS.filter((def) => def.kind !== 'org' && allowed(def, 'create'));
const nameFor = (def: KindDef, base: string) => (def.kind === 'user' ? `${base}@example.com` : base);

test('every kind clients can create has a body in this matrix', () => {
  assert.deepEqual(CREATABLE.map((d) => d.kind).filter((k) => !BODIES[k]), []);
});

forEachBackend('authorization matrix', (backend) => {
  let k: TestKeel;
  const keys: Record<string, string> = {};

  const as = (who: string, method: string, url: string, body?: unknown) => k.call(method, url, body, { token: keys[who] });
  const admin = async (method: string, url: string, body?: unknown, status = 200) => {
    const res = await k.call(method, url, body);
    assert.equal(res.status, status, `${method} ${url}: ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const forbidden = (res: { status: number; body: any }, what: string) => {
    assert.equal(res.status, 403, `${what}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.code, 'forbidden', what);
  };

  before(async () => {
    k = await startKeel(backend);
    await admin('POST', '/org/acme/gvc', { name: 'prod' }, 201);
    for (const who of ['granted', 'denied']) {
      await admin('POST', '/org/acme/serviceaccount', { name: who }, 201);
      keys[who] = (await admin('POST', `/org/acme/serviceaccount/${who}/-addKey`, { description: who })).key;
      await admin('POST', '/org/acme/group', { name: `g-${who}`, memberLinks: [`//serviceaccount/${who}`] }, 201);
    }
    // A second org whose superuser is a stranger to acme.
    await admin('POST', '/org', { name: 'other' }, 201);
    await admin('POST', '/org/other/serviceaccount', { name: 'outsider' }, 201);
    keys.outsider = (await admin('POST', '/org/other/serviceaccount/outsider/-addKey', { description: 'x' })).key;
    await admin('PATCH', '/org/other/group/superusers', { '$append/memberLinks': ['//serviceaccount/outsider'] });
    await admin('POST', '/org/other/gvc', { name: 'prod' }, 201);
  });
  after(() => k.close());

  /** Grants `g-granted` exactly `permission` on the kind, and `g-denied` every permission of it that does not imply it. */
  async function grantOnly(def: KindDef, permission: string): Promise<void> {
    const others = def.permissions.map((p) => p.name).filter((p) => !grants(def, p, permission));
    const bindings = [{ permissions: [permission], principalLinks: ['//group/g-granted'] }];
    if (others.length) bindings.push({ permissions: others, principalLinks: ['//group/g-denied'] });
    const res = await k.call('PUT', `/org/acme/policy/matrix-${def.kind}`, { name: `matrix-${def.kind}`, targetKind: def.kind, target: 'all', bindings });
    assert.ok(res.status === 200 || res.status === 201, JSON.stringify(res.body));
  }

  for (const def of CREATABLE) {
    test(`${def.kind}: every operation needs its permission`, async () => {
      const body = BODIES[def.kind];
      const collection = def.scope === 'gvc' ? `/org/acme/gvc/prod/${def.kind}` : `/org/acme/${def.kind}`;
      const itemName = nameFor(def, 'mx-item');
      const item = `${collection}/${itemName}`;
      const query = `/org/acme/${def.kind}/-query`;
      await admin('POST', collection, body(itemName), 201);
      const version = async () => (await admin('GET', item)).version;
      const perm = (p: string) => requiredPermission(def, p);

      // create
      await grantOnly(def, perm('create'));
      const fresh = nameFor(def, 'mx-new');
      forbidden(await as('denied', 'POST', collection, body(fresh)), 'create');
      await admin('GET', `${collection}/${fresh}`, undefined, 404);
      assert.equal((await as('granted', 'POST', collection, body(fresh))).status, 201, 'create granted');

      // get, list, query
      await grantOnly(def, perm('view'));
      forbidden(await as('denied', 'GET', item), 'get');
      assert.equal((await as('granted', 'GET', item)).body.name, itemName);
      const names = async (who: string, method: string, url: string) => {
        const res = await as(who, method, url, method === 'POST' ? {} : undefined);
        assert.equal(res.status, 200, `${method} ${url}: ${JSON.stringify(res.body)}`);
        return res.body.items.map((i: any) => i.name);
      };
      assert.ok(!(await names('denied', 'GET', collection)).includes(itemName), 'list filtered');
      assert.ok((await names('granted', 'GET', collection)).includes(itemName), 'list granted');
      assert.ok(!(await names('denied', 'POST', query)).includes(itemName), 'query filtered');
      assert.ok((await names('granted', 'POST', query)).includes(itemName), 'query granted');

      // patch, replace, apply
      await grantOnly(def, perm('edit'));
      const before = await version();
      forbidden(await as('denied', 'PATCH', item, { description: 'by denied' }), 'patch');
      forbidden(await as('denied', 'PUT', item, { ...body(itemName), description: 'by denied' }), 'replace');
      forbidden(await as('denied', 'PUT', collection, { ...body(itemName), description: 'by denied' }), 'apply');
      assert.equal(await version(), before, 'nothing changed');
      assert.equal((await as('granted', 'PATCH', item, { description: 'patched' })).status, 200, 'patch granted');
      assert.equal((await as('granted', 'PUT', item, { ...body(itemName), description: 'replaced' })).status, 200, 'replace granted');
      assert.equal((await as('granted', 'PUT', collection, { ...body(itemName), description: 'applied' })).status, 200, 'apply granted');
      assert.equal((await admin('GET', item)).description, 'applied');

      // delete
      if (allowed(def, 'delete')) {
        const doomed = nameFor(def, 'mx-del');
        await admin('POST', collection, body(doomed), 201);
        await grantOnly(def, perm('delete'));
        forbidden(await as('denied', 'DELETE', `${collection}/${doomed}`), 'delete');
        await admin('GET', `${collection}/${doomed}`);
        assert.equal((await as('granted', 'DELETE', `${collection}/${doomed}`)).status, 202, 'delete granted');
        await admin('GET', `${collection}/${doomed}`, undefined, 404);
      }

      // kind-specific actions
      if (def.kind === 'serviceaccount') {
        await grantOnly(def, 'addKey');
        forbidden(await as('denied', 'POST', `${item}/-addKey`, { description: 'x' }), 'addKey');
        assert.deepEqual((await admin('GET', item)).keys, []);
        assert.equal((await as('granted', 'POST', `${item}/-addKey`, { description: 'x' })).status, 200, 'addKey granted');
      }
      if (def.kind === 'secret') {
        await grantOnly(def, 'reveal');
        forbidden(await as('denied', 'GET', `${item}/-reveal`), 'reveal');
        assert.equal((await as('granted', 'GET', `${item}/-reveal`)).body.data.payload, 'aGk=');
      }

      // access report: manage on the item (or the org's viewAccessReport, tested elsewhere)
      await grantOnly(def, 'manage');
      forbidden(await as('denied', 'GET', `${item}/-accessreport`), 'accessreport');
      assert.equal((await as('granted', 'GET', `${item}/-accessreport`)).body.kind, 'accessreport');

      // another org's superuser sees nothing of acme
      forbidden(await as('outsider', 'GET', item), 'cross-org get');
      forbidden(await as('outsider', 'GET', collection), 'cross-org list');
      forbidden(await as('outsider', 'POST', query, {}), 'cross-org query');
      forbidden(await as('outsider', 'GET', `${item}/-accessreport`), 'cross-org accessreport');
      forbidden(await as('outsider', 'POST', collection, body(nameFor(def, 'mx-evil'))), 'cross-org create');
      const otherCollection = collection.replace('/org/acme/', '/org/other/');
      const leaked = (await admin('GET', otherCollection)).items.filter((i: any) => i.name === itemName);
      assert.deepEqual(leaked, [], 'acme items never appear in other');
    });
  }

  test('the org itself: view, edit and access report need their permissions', async () => {
    const org = KINDS.find((d) => d.kind === 'org')!;
    await grantOnly(org, 'view');
    forbidden(await as('denied', 'GET', '/org/acme'), 'org get');
    assert.equal((await as('granted', 'GET', '/org/acme')).status, 200);
    await grantOnly(org, 'edit');
    forbidden(await as('denied', 'PATCH', '/org/acme', { description: 'x' }), 'org patch');
    assert.equal((await as('granted', 'PATCH', '/org/acme', { description: 'edited' })).status, 200);
    await grantOnly(org, 'viewAccessReport');
    forbidden(await as('denied', 'GET', '/org/acme/-accessreport'), 'org accessreport');
    assert.equal((await as('granted', 'GET', '/org/acme/-accessreport')).status, 200);
    forbidden(await as('outsider', 'GET', '/org/acme'), 'cross-org org get');
    forbidden(await as('outsider', 'GET', '/org/acme/-accessreport'), 'cross-org org accessreport');
    assert.ok(!(await as('outsider', 'GET', '/org')).body.items.some((o: any) => o.name === 'acme'));
  });
});
