// References a spec makes: a caller who may write an item still needs the reference's permission
// on every item the spec newly names (a workload's identity and secrets, an identity's cloud
// account, a domain's workloads ...). Refused writes change nothing; a reference that is not new
// needs nothing; a missing item reads like a forbidden one. Workloads run only their org's images.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';
import { startLivingKeel } from '../support/living.js';
import { waitFor } from '../support/wait.js';

const container = (extra: Record<string, unknown> = {}) => ({ name: 'main', image: 'nginx:1.27', ports: [{ protocol: 'http', number: 8080 }], ...extra });
const workload = (name: string, spec: Record<string, unknown> = {}) => ({ name, spec: { type: 'standard', containers: [container()], ...spec } });

interface Case {
  title: string;
  /** Who writes: `editor` may write workloads, identities, GVCs, cloud accounts, clusters; `router` only domains. */
  who: 'editor' | 'router';
  collection: string;
  body: (name: string) => Record<string, unknown>;
  /** The referenced item's kind and link, the permission needed on it, and the field that names it. */
  kind: string;
  link: string;
  permission: string;
  path: string;
}

const G = '/org/acme/gvc/g1';
const WL = `${G}/workload`;
const CASES: Case[] = [
  { title: 'workload identityLink', who: 'editor', collection: WL, body: (n) => workload(n, { identityLink: '//gvc/g1/identity/id1' }), kind: 'identity', link: `${G}/identity/id1`, permission: 'use', path: 'spec.identityLink' },
  {
    title: 'cron workload identityLink',
    who: 'editor',
    collection: WL,
    body: (n) => ({ name: n, spec: { type: 'cron', identityLink: '//identity/id1', job: { schedule: '0 * * * *' }, containers: [{ name: 'main', image: 'busybox:1.36' }] } }),
    kind: 'identity',
    link: `${G}/identity/id1`,
    permission: 'use',
    path: 'spec.identityLink',
  },
  { title: 'workload env secret', who: 'editor', collection: WL, body: (n) => workload(n, { containers: [container({ env: [{ name: 'DB', value: 'cpln://secret/topsecret.payload' }] })] }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'spec.containers[0].env[0].value' },
  { title: 'workload secret volume', who: 'editor', collection: WL, body: (n) => workload(n, { containers: [container({ volumes: [{ uri: 'cpln://secret/topsecret', path: '/etc/secret' }] })] }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'spec.containers[0].volumes[0].uri' },
  { title: 'workload volume set', who: 'editor', collection: WL, body: (n) => workload(n, { containers: [container({ volumes: [{ uri: 'cpln://volumeset/vs1', path: '/data' }] })] }), kind: 'volumeset', link: `${G}/volumeset/vs1`, permission: 'view', path: 'spec.containers[0].volumes[0].uri' },
  { title: 'workload image of the org registry', who: 'editor', collection: WL, body: (n) => workload(n, { containers: [container({ image: '//image/app:v1' })] }), kind: 'image', link: '/org/acme/image/app:v1', permission: 'pull', path: 'spec.containers[0].image' },
  { title: 'workload image by the hosted registry name', who: 'editor', collection: WL, body: (n) => workload(n, { containers: [container({ image: 'acme.registry.cpln.io/team/app:v2' })] }), kind: 'image', link: '/org/acme/image/team%2Fapp:v2', permission: 'pull', path: 'spec.containers[0].image' },
  { title: 'identity cloudAccountLink', who: 'editor', collection: `${G}/identity`, body: (n) => ({ name: n, aws: { cloudAccountLink: '//cloudaccount/ca1', policyRefs: [] } }), kind: 'cloudaccount', link: '/org/acme/cloudaccount/ca1', permission: 'use', path: 'aws.cloudAccountLink' },
  { title: 'identity agentLink', who: 'editor', collection: `${G}/identity`, body: (n) => ({ name: n, networkResources: [{ name: 'db', agentLink: '//agent/ag1', IPs: ['10.0.0.1'], ports: [5432] }] }), kind: 'agent', link: '/org/acme/agent/ag1', permission: 'use', path: 'networkResources[0].agentLink' },
  { title: 'domain route workloadLink', who: 'router', collection: '/org/acme/domain', body: (n) => ({ name: n, spec: { dnsMode: 'cname', ports: [{ number: 443, routes: [{ prefix: '/', workloadLink: `${WL}/target` }] }] } }), kind: 'workload', link: `${WL}/target`, permission: 'view', path: 'spec.ports[0].routes[0].workloadLink' },
  { title: 'domain certificate secretLink', who: 'router', collection: '/org/acme/domain', body: (n) => ({ name: n, spec: { dnsMode: 'cname', ports: [{ number: 443, tls: { serverCertificate: { secretLink: '//secret/topsecret' } } }] } }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'spec.ports[0].tls.serverCertificate.secretLink' },
  { title: 'gvc keda identityLink', who: 'editor', collection: '/org/acme/gvc', body: (n) => ({ name: n, spec: { keda: { enabled: true, identityLink: `${G}/identity/id1` } } }), kind: 'identity', link: `${G}/identity/id1`, permission: 'use', path: 'spec.keda.identityLink' },
  { title: 'gvc keda secrets', who: 'editor', collection: '/org/acme/gvc', body: (n) => ({ name: n, spec: { keda: { enabled: true, secrets: ['//secret/topsecret'] } } }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'spec.keda.secrets[0]' },
  { title: 'gvc pullSecretLinks', who: 'editor', collection: '/org/acme/gvc', body: (n) => ({ name: n, spec: { pullSecretLinks: ['//secret/topsecret'] } }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'spec.pullSecretLinks[0]' },
  { title: 'cloud account secretLink', who: 'editor', collection: '/org/acme/cloudaccount', body: (n) => ({ name: n, provider: 'azure', data: { secretLink: '//secret/topsecret' } }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'data.secretLink' },
  { title: 'mk8s provider token secret', who: 'editor', collection: '/org/acme/mk8s', body: (n) => ({ name: n, spec: { version: '1.28.2', provider: { hetzner: { region: 'fsn1', tokenSecretLink: '//secret/topsecret' } } } }), kind: 'secret', link: '/org/acme/secret/topsecret', permission: 'use', path: 'spec.provider.hetzner.tokenSecretLink' },
];

forEachBackend('references a spec makes', (backend) => {
  let k: TestKeel;
  const keys: Record<string, string> = {};
  const as = (who: string, method: string, url: string, body?: unknown) => k.call(method, url, body, { token: keys[who] });
  const admin = async (method: string, url: string, body?: unknown, status = 200) => {
    const res = await k.call(method, url, body);
    assert.equal(res.status, status, `${method} ${url}: ${JSON.stringify(res.body)}`);
    return res.body;
  };
  let grants = 0;
  /** Grants `who` one permission on one item (or, with target 'all', on every item of the kind); returns the policy's path. */
  const grant = async (who: string, kind: string, permission: string, link?: string) => {
    const name = `grant-${++grants}`;
    await admin('POST', '/org/acme/policy', { name, targetKind: kind, ...(link ? { targetLinks: [link] } : { target: 'all' }), bindings: [{ permissions: [permission], principalLinks: [`//serviceaccount/${who}`] }] }, 201);
    return `/org/acme/policy/${name}`;
  };
  const refusedFor = (res: Response, c: { permission: string; link: string; path: string }, what: string) => {
    assert.equal(res.status, 403, `${what}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.code, 'forbidden');
    assert.ok(res.body.message.includes(`needs '${c.permission}' on ${c.link}`), `${what}: ${res.body.message}`);
    assert.deepEqual(res.body.details.errors.map((e: { path: string }) => e.path), [c.path]);
  };

  before(async () => {
    k = await startKeel(backend);
    await admin('POST', '/org/acme/gvc', { name: 'g1' }, 201);
    for (const id of ['id1', 'id2']) await admin('POST', `${G}/identity`, { name: id }, 201);
    await admin('POST', '/org/acme/secret', { name: 'topsecret', type: 'opaque', data: { payload: 'c2VjcmV0', encoding: 'base64' } }, 201);
    await admin('POST', `${G}/volumeset`, { name: 'vs1', spec: { initialCapacity: 10, fileSystemType: 'ext4' } }, 201);
    await admin('POST', '/org/acme/cloudaccount', { name: 'ca1', provider: 'aws', data: { roleArn: 'arn:aws:iam::1:role/x' } }, 201);
    await admin('POST', '/org/acme/agent', { name: 'ag1' }, 201);
    await admin('POST', WL, workload('target'), 201);
    for (const who of ['editor', 'router']) {
      await admin('POST', '/org/acme/serviceaccount', { name: who }, 201);
      keys[who] = (await admin('POST', `/org/acme/serviceaccount/${who}/-addKey`, { description: who })).key;
    }
    // As the review found it: create, edit and view on what each writes, nothing on what it refers to.
    for (const kind of ['workload', 'identity', 'gvc', 'cloudaccount', 'mk8s']) await grant('editor', kind, 'create'), await grant('editor', kind, 'edit'), await grant('editor', kind, 'view');
    for (const permission of ['create', 'edit', 'view']) await grant('router', 'domain', permission);
    await grant('editor', 'org', 'edit');
  });
  after(() => k.close());

  for (const c of CASES) {
    test(`${c.title}: needs '${c.permission}' on the ${c.kind}`, async () => {
      const name = `r-${grants + 1}`;
      refusedFor(await as(c.who, 'POST', `${c.collection}?dryRun=true`, c.body(name)), c, 'dry run');
      refusedFor(await as(c.who, 'POST', c.collection, c.body(name)), c, 'create');
      refusedFor(await as(c.who, 'PUT', c.collection, c.body(name)), c, 'apply');
      await admin('GET', `${c.collection}/${name}`, undefined, 404);
      const policy = await grant(c.who, c.kind, c.permission, c.link);
      const created = await as(c.who, 'POST', c.collection, c.body(name));
      assert.equal(created.status, 201, JSON.stringify(created.body));
      await admin('DELETE', policy, undefined, 202);
    });
  }

  test('patch, replace and apply of an existing workload: setting or changing the identity needs use; other changes do not', async () => {
    const item = `${WL}/w-edit`;
    assert.equal((await as('editor', 'POST', WL, workload('w-edit'))).status, 201);
    const id1 = { permission: 'use', link: `${G}/identity/id1`, path: 'spec.identityLink' };
    const withIdentity = workload('w-edit', { identityLink: '//identity/id1' });
    refusedFor(await as('editor', 'PATCH', item, { spec: { identityLink: '//identity/id1' } }), id1, 'patch');
    refusedFor(await as('editor', 'PATCH', `${item}?dryRun=true`, { spec: { identityLink: '//identity/id1' } }), id1, 'patch, dry run');
    refusedFor(await as('editor', 'PUT', item, withIdentity), id1, 'replace');
    refusedFor(await as('editor', 'PUT', WL, withIdentity), id1, 'apply');
    const untouched = await admin('GET', item);
    assert.equal(untouched.version, 1);
    assert.equal(untouched.spec.identityLink, undefined);

    const policy = await grant('editor', 'identity', 'use', id1.link);
    assert.equal((await as('editor', 'PATCH', item, { spec: { identityLink: '//identity/id1' } })).status, 200);
    await admin('DELETE', policy, undefined, 202);

    // The identity is set already: changing anything else, in any write, needs nothing more.
    const ok = (res: Response, what: string) => assert.equal(res.status, 200, `${what}: ${JSON.stringify(res.body)}`);
    ok(await as('editor', 'PATCH', item, { description: 'patched', spec: { defaultOptions: { autoscaling: { maxScale: 3 } } } }), 'patch');
    ok(await as('editor', 'PUT', item, { ...withIdentity, description: 'replaced' }), 'replace');
    ok(await as('editor', 'PUT', WL, { ...withIdentity, description: 'applied' }), 'apply');
    assert.equal((await admin('GET', item)).description, 'applied');

    // Changing it to another identity is setting a new reference.
    const id2 = { ...id1, link: `${G}/identity/id2` };
    refusedFor(await as('editor', 'PATCH', item, { spec: { identityLink: '//identity/id2' } }), id2, 'change');
    assert.equal((await admin('GET', item)).spec.identityLink, id1.link);
  });

  test('a missing item reads like a forbidden one; granted, a missing item keeps what Keel did before', async () => {
    const forbidden = await as('editor', 'POST', WL, workload('w-x', { identityLink: '//identity/id2' }));
    const missing = await as('editor', 'POST', WL, workload('w-x', { identityLink: '//identity/nope' }));
    assert.equal(missing.status, forbidden.status);
    assert.equal(missing.body.message.replaceAll('nope', 'id2'), forbidden.body.message);
    assert.deepEqual(JSON.stringify(missing.body.details).replaceAll('nope', 'id2'), JSON.stringify(forbidden.body.details));
    const policy = await grant('editor', 'identity', 'use');
    assert.equal((await as('editor', 'POST', WL, workload('w-x', { identityLink: '//identity/nope' }))).status, 201);
    await admin('DELETE', policy, undefined, 202);
  });

  test('org logging credentials: setting them needs use on the secret', async () => {
    const c = { permission: 'use', link: '/org/acme/secret/topsecret', path: 'spec.logging.s3.credentials' };
    const body = { spec: { logging: { s3: { bucket: 'logs', region: 'us-east-1', credentials: '//secret/topsecret' } } } };
    refusedFor(await as('editor', 'PATCH', '/org/acme', body), c, 'patch');
    assert.equal((await admin('GET', '/org/acme')).spec?.logging, undefined);
    const policy = await grant('editor', 'secret', 'use', c.link);
    assert.equal((await as('editor', 'PATCH', '/org/acme', body)).status, 200);
    await admin('DELETE', policy, undefined, 202);
  });

  test("an image at Keel's own address (as cpln image build --push names it) is of the org's registry: it needs pull", async () => {
    const host = (await k.listen()).replace('http://', '');
    const c = { permission: 'pull', link: '/org/acme/image/team%2Fapp:v3', path: 'spec.containers[0].image' };
    const body = workload('w-keel-address', { containers: [container({ image: `${host}/team/app:v3` })] });
    refusedFor(await as('editor', 'POST', WL, body), c, 'create');
    const policy = await grant('editor', 'image', 'pull', c.link);
    assert.equal((await as('editor', 'POST', WL, body)).status, 201);
    await admin('DELETE', policy, undefined, 202);
  });

  test('a link of the wrong kind is refused with 400 naming the field', async () => {
    const res = await admin('POST', WL, workload('w-wrong', { identityLink: '//secret/topsecret' }), 400);
    assert.equal(res.code, 'bad_request');
    assert.deepEqual(res.details.errors.map((e: { path: string }) => e.path), ['spec.identityLink']);
  });

  test("another org's image is refused with 400 naming the field; the org's own is accepted", async () => {
    await admin('POST', '/org', { name: 'other' }, 201);
    const res = await admin('POST', WL, workload('w-foreign', { containers: [container({ name: 'a', image: '/org/other/image/x:v1' }), container({ name: 'b', image: 'other.registry.cpln.io/x:v1' })] }), 400);
    assert.equal(res.code, 'bad_request');
    assert.match(res.message, /spec\.containers\[0\]\.image/);
    assert.deepEqual(res.details.errors.map((e: { path: string }) => e.path), ['spec.containers[0].image', 'spec.containers[1].image']);
    await admin('GET', `${WL}/w-foreign`, undefined, 404);
    // As a change of an existing workload, by patch, replace and apply alike.
    const foreign = { spec: { containers: [{ name: 'main', image: '/org/other/image/x:v1@sha256:' + '0'.repeat(64) }] } };
    assert.equal((await admin('PATCH', `${WL}/target`, foreign, 400)).details.errors[0].path, 'spec.containers[0].image');
    assert.equal((await admin('PUT', WL, workload('target', foreign.spec), 400)).details.errors[0].path, 'spec.containers[0].image');
    assert.equal((await admin('GET', `${WL}/target`)).spec.containers[0].image, 'nginx:1.27');
    for (const image of ['/org/acme/image/app:v1', 'acme.registry.cpln.io/app:v1', '//image/app:v1']) {
      await admin('POST', WL, workload(`w-own-${grants++}`, { containers: [container({ image })] }), 201);
    }
  });
});

forEachBackend("images of another org under the simulated runtime", (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startLivingKeel(backend);
  });
  after(() => k.close());

  test("a workload stored with another org's image shows nothing of it: the pull fails as for a missing image", async () => {
    assert.equal((await k.call('POST', '/org', { name: 'other' })).status, 201);
    // Org `other` holds x:v1 (as a push records it).
    const digest = `sha256:${'ab'.repeat(32)}`;
    const now = new Date().toISOString();
    await k.store.transaction((tx) =>
      tx.insert({ org: 'other', kind: 'image', gvc: '', name: 'x:v1', id: 'img-other-x', version: 1, created: now, lastModified: now, data: { name: 'x:v1', description: 'x:v1', tags: {}, repository: 'x', tag: 'v1', digest, manifest: { mediaType: 'application/vnd.oci.image.manifest.v1+json' } } }),
    );
    // Workloads written before the write-time rule (the API refuses them now): one names x:v1, one a tag other lacks.
    for (const [name, image] of [['held', '/org/other/image/x:v1'], ['absent', '/org/other/image/nope:v1'], ['hosted', 'other.registry.cpln.io/x:v1']]) {
      assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', workload(name))).status, 201);
      await k.store.transaction(async (tx) => {
        const item = (await tx.get({ org: 'acme', kind: 'workload', gvc: 'prod', name }, 'update'))!;
        const data = structuredClone(item.data) as any;
        data.spec.containers[0].image = image;
        await tx.update({ ...item, version: item.version + 1, data }, item.version);
      });
    }
    const seen: Record<string, any> = {};
    for (const name of ['held', 'absent', 'hosted']) {
      const deployment = await waitFor(`${name}: the pull fails`, async () => (await k.call('GET', `/org/acme/gvc/prod/workload/${name}/deployment/aws-us-west-2`)).body, (d) => /Failed to pull image/.test(String(d?.status?.message)));
      const status = (await k.call('GET', `/org/acme/gvc/prod/workload/${name}`)).body.status;
      assert.ok(!JSON.stringify({ deployment, status }).includes(digest), `${name} shows the other org's digest`);
      assert.equal(status.ready, false);
      assert.deepEqual(status.resolvedImages?.images ?? [], []);
      seen[name] = deployment.status.message;
    }
    // Held or not, the same words (but for the reference the workload itself names).
    assert.equal(seen.held.replaceAll('x:v1', 'nope:v1'), seen.absent);
  });
});
