// The routes the official clients find through /discovery and call beside the generic ones:
// the exporters, the billing account and org creation through it, the replica list behind a
// deployment's status.remote, and the routes of the CLI's REST map. Each is driven as a client
// would, and misused (less permission, no key, bad input, unknown names).
import assert from 'node:assert/strict';
import { get as httpGet, type IncomingMessage } from 'node:http';
import { after, before, test } from 'node:test';
import { accountIdOf } from '../../src/resources/orgs.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse } from '../support/sse.js';

const DEADLINE_MS = 15_000;

forEachBackend('client routes', (backend) => {
  let k: TestKeel;
  let viewerless: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: 40 });
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2', '//location/gcp-us-east1'] } } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'nobody' })).status, 201);
    viewerless = (await k.call('POST', '/org/acme/serviceaccount/nobody/-addKey', { description: 'no policies' })).body.key;
  });
  after(() => k.close());

  test('/discovery names every endpoint the clients read, each on the (loopback) host the caller used', async () => {
    const res = await k.call('GET', '/discovery', undefined, { token: null, headers: { host: 'localhost:9000' } });
    assert.equal(res.status, 200);
    const e = res.body.endpoints;
    // The endpoints of the public discovery type (types-ts discovery.ts) that Keel serves, and its own api; none it does not serve.
    assert.deepEqual(Object.keys(e).sort(), ['api', 'audit', 'billing', 'billing-ng', 'byok', 'console', 'k8s-crd-exporter', 'logs', 'registry', 'terraform-exporter']);
    for (const name of ['api', 'billing', 'billing-ng', 'registry', 'logs', 'byok']) assert.equal(e[name], 'http://localhost:9000', name);
    assert.equal(e.console, 'http://localhost:9000/console');
    assert.equal(e['terraform-exporter'], 'http://localhost:9000/-export/terraform');
    assert.equal(e['k8s-crd-exporter'], 'http://localhost:9000/-export/crd');
    assert.equal(res.body.firebase, null);
  });

  test('exporters: Terraform and custom resources for an item and a list, as the caller may read them', async () => {
    await k.call('PATCH', '/org/acme/gvc/web', { description: 'say "hi" ${x}', tags: { 'team/name': 'core' } });
    const tf = await k.call('GET', '/-export/terraform/org/acme/gvc/web');
    assert.equal(tf.status, 200);
    assert.match(tf.headers['content-type'] as string, /application\/json/);
    assert.equal(
      tf.body,
      [
        'resource "cpln_gvc" "web" {',
        '  name = "web"',
        '  description = "say \\"hi\\" $${x}"',
        '  tags = {',
        '    "team/name" = "core"',
        '  }',
        '  spec {',
        '    static_placement {',
        '      location_links = ["/org/acme/location/aws-us-east-2", "/org/acme/location/gcp-us-east1"]',
        '    }',
        '  }',
        '}',
        '',
      ].join('\n'),
    );
    const list = await k.call('GET', '/-export/terraform/org/acme/group');
    assert.deepEqual([...list.body.matchAll(/resource "cpln_group" "([^"]+)"/g)].map((m) => m[1]), ['superusers', 'viewers']);
    const crd = await k.call('GET', '/-export/crd/org/acme/gvc/web?namespace=infra&keep=true');
    assert.deepEqual(crd.body.metadata, { name: 'web', namespace: 'infra', annotations: { 'cpln.io/resource-policy': 'keep' } });
    assert.deepEqual([crd.body.apiVersion, crd.body.kind, crd.body.org], ['cpln.io/v1', 'gvc', 'acme']);
    assert.deepEqual(crd.body.spec.staticPlacement.locationLinks, ['//location/aws-us-east-2', '//location/gcp-us-east1']);
    assert.equal(crd.body.id, undefined);
    const crds = await k.call('GET', '/-export/crd/org/acme/gvc');
    assert.equal(crds.body.kind, 'list');
    assert.deepEqual(crds.body.items.map((c: { metadata: { name: string } }) => c.metadata.name), ['web']);
    const batch = await k.call('POST', '/-export/crd/batch?org=acme&namespace=ns', { resources: [{ kind: 'workload', name: 'w', gvc: 'web', spec: { type: 'standard' } }] });
    assert.deepEqual(batch.body.items[0], { apiVersion: 'cpln.io/v1', kind: 'workload', metadata: { name: 'w', namespace: 'ns' }, org: 'acme', gvc: 'web', spec: { type: 'standard' } });

    assert.equal((await k.call('GET', '/-export/terraform/org/acme/gvc/web', undefined, { token: viewerless })).status, 403);
    assert.equal((await k.call('GET', '/-export/crd/org/acme/gvc/web', undefined, { token: null })).status, 401);
    const hidden = await k.call('GET', '/-export/terraform/org/acme/gvc', undefined, { token: viewerless });
    assert.equal(hidden.status, 200);
    assert.equal(hidden.body, '', 'a list leaves out what the caller may not view');
    assert.equal((await k.call('GET', '/-export/terraform/org/acme/gvc/nope')).body.code, 'not_found');
    for (const bad of ['/-export/terraform/org/acme/frobs', '/-export/crd/org/acme/workload/x', '/-export/crd/nothing', '/-export/terraform/org/acme/gvc/web/identity/a/b']) {
      const res = await k.call('GET', bad);
      assert.equal(res.status, 404, bad);
      assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
    }
    assert.equal((await k.call('POST', '/-export/crd/batch?org=acme', { resources: [{ kind: 'nope', name: 'x' }] })).status, 400);
    assert.equal((await k.call('POST', '/-export/crd/batch', { resources: [] })).status, 400);
    assert.equal((await k.call('POST', '/-export/crd/batch?org=acme', { resources: 'x' })).status, 400);
  });

  test('billing: the account, and org creation through it with invitees as superusers', async () => {
    const id = accountIdOf('acme');
    const accounts = await k.call('GET', '/account');
    assert.deepEqual(accounts.body.items.map((a: { id: string }) => a.id), [id]);
    assert.equal((await k.call('GET', `/account/${id}`)).body.id, id);
    assert.equal((await k.call('GET', '/account/other')).status, 404);

    const created = await k.call('POST', `/account/${id}/org`, { org: { name: 'beta', description: 'Beta' }, invitees: ['[admin]', 'Ada@Example.com', null] });
    assert.equal(created.status, 201);
    assert.equal(created.headers.location, '/org/beta');
    assert.equal(created.body.description, 'Beta');
    assert.equal(created.body.status.accountLink, `/account/${id}`, 'the org names the account it was created through');
    const superusers = await k.call('GET', '/org/beta/group/superusers');
    assert.deepEqual(superusers.body.memberLinks.sort(), ['/org/acme/serviceaccount/admin', '/org/beta/user/ada@example.com']);

    const refused = await k.call('POST', `/account/${id}/org`, { org: { name: 'gamma' }, invitees: ['not an email'] });
    assert.equal(refused.status, 400);
    assert.ok(!(await k.call('GET', '/org')).body.items.some((o: { name: string }) => o.name === 'gamma'), 'a refused invitee leaves no org behind');
    assert.equal((await k.call('POST', `/account/${id}/org`, { org: { name: 'beta' } })).status, 409);
    assert.equal((await k.call('POST', `/account/${id}/org`, { name: 'delta' })).status, 400);
    assert.equal((await k.call('POST', `/account/${id}/org`, { org: { name: 'delta' } }, { token: null })).status, 401);
    assert.equal((await k.call('POST', '/account/other/org', { org: { name: 'delta' } })).status, 404);
    assert.match((await k.call('GET', `/account/${id}/-policy`)).body.message, /Keel keeps no billing data/);
  });

  test('replicas behind status.remote: listed per location for the caller; exec and port-forward refused with a reason', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc/web/workload', { name: 'api', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.27', ports: [{ protocol: 'http', number: 80 }] }] } })).status, 201);
    const until = Date.now() + DEADLINE_MS;
    let deployments;
    do {
      await new Promise((resolve) => setTimeout(resolve, 20));
      deployments = (await k.call('GET', '/org/acme/gvc/web/workload/api/deployment', undefined, { headers: { host: 'localhost:9000' } })).body;
    } while (!(deployments.items.length === 2 && deployments.items.every((d: { status: { ready: boolean } }) => d.status.ready)) && Date.now() < until);
    assert.deepEqual(deployments.items.map((d: { name: string }) => d.name).sort(), ['aws-us-east-2', 'gcp-us-east1'], JSON.stringify(deployments));
    const remote = deployments.items.find((d: { name: string }) => d.name === 'aws-us-east-2').status.remote;
    assert.equal(remote, 'http://localhost:9000/-remote/aws-us-east-2');
    const path = `${new URL(remote).pathname}/replicas/org/acme/gvc/web/workload/api`;
    const replicas = await k.call('GET', path);
    assert.equal(replicas.status, 200);
    assert.deepEqual(replicas.body.items, deployments.items.find((d: { name: string }) => d.name === 'aws-us-east-2').status.internal.replicas);
    assert.equal(replicas.body.items.length, 1);
    assert.ok(Array.isArray(replicas.body.links));
    assert.deepEqual((await k.call('GET', path.replace('/replicas/', '/replicas//'))).body.items, replicas.body.items, 'a doubled slash, as `cpln connect` builds it');
    assert.equal((await k.call('GET', path, undefined, { token: viewerless })).status, 403);
    assert.equal((await k.call('GET', path, undefined, { token: null })).status, 401);
    assert.equal((await k.call('GET', '/-remote/azure-eastus2/replicas/org/acme/gvc/web/workload/api')).status, 404);
    assert.equal((await k.call('GET', '/-remote/aws-us-east-2/replicas/org/acme/gvc/web/workload/nope')).status, 404);
    assert.equal((await k.call('GET', '/-remote/aws-us-east-2/replicas/org/acme/gvc/web')).status, 404);
    const ticket = await k.call('POST', '/-remote/aws-us-east-2/portforward-ticket', { workload: 'api', port: 80 }, { token: null });
    assert.equal(ticket.status, 400);
    assert.match(ticket.body.message, /port-forward is not available: Keel simulates replicas and runs no containers/);
    assert.match((await k.call('GET', '/-remote/aws-us-east-2/exec', undefined, { token: null })).body.message, /exec, connect and cp are not available/);
  });

  test('status.remote is stored Keel-relative: GET, list and watch resolve it against the address the caller used; audit keeps it as written', async () => {
    const base = await k.listen();
    const auth = { authorization: `Bearer ${k.token}` };
    const stream = await openSse(`${base}/org/acme/-watch?kind=deployment`, auth);
    try {
      assert.equal((await k.call('POST', '/org/acme/gvc/web/workload', { name: 'remote-check', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.27', ports: [{ protocol: 'http', number: 80 }] }] } })).status, 201);
      const self = '/org/acme/gvc/web/workload/remote-check/deployment/aws-us-east-2';
      const [event] = (await stream.takeUntil((e) => e.data.object.links?.[0]?.href === self)).slice(-1);
      const got = (await (await fetch(`${base}${self}`, { headers: auth })).json()) as { status: { remote: string } };
      const listed = (await (await fetch(`${base}/org/acme/gvc/web/workload/remote-check/deployment`, { headers: auth })).json()) as { items: Array<{ name: string; status: { remote: string } }> };
      const resolved = `${base}/-remote/aws-us-east-2`;
      assert.equal(got.status.remote, resolved);
      assert.equal(listed.items.find((d) => d.name === 'aws-us-east-2')?.status.remote, resolved);
      assert.equal(event.data.object.status.remote, resolved, 'a watch event shows what a GET shows');
      const audit = await k.app.audit.inject({ method: 'GET', url: '/audit/org/acme?resourceType=deployment', headers: auth });
      const recorded = JSON.parse(audit.body).items.filter((e: { resource: { link: string } }) => e.resource.link === self);
      assert.ok(recorded.length >= 1, audit.body.slice(0, 500));
      // Audit events come with their chain hash, so they show the value as written: the same path.
      for (const e of recorded) assert.equal(e.resource.data.status.remote, '/-remote/aws-us-east-2');
      assert.equal(new URL(recorded[0].resource.data.status.remote, base).href, resolved);
      assert.doesNotMatch(audit.body, /keel\.local/);
    } finally {
      stream.close();
    }
  });

  test('watchers that reached Keel at many addresses each see status.remote on their own address', async () => {
    const { port } = new URL(await k.listen());
    const hosts = Array.from({ length: 7 }, (_, i) => `127.0.0.${i + 1}:900${i}`);
    const self = '/org/acme/gvc/web/workload/many-hosts/deployment/gcp-us-east1';
    // fetch does not send a Host header of the caller's choosing; a plain request does.
    const streams = await Promise.all(
      hosts.map(
        (host) =>
          new Promise<IncomingMessage>((resolve, reject) => {
            const req = httpGet({ host: '127.0.0.1', port, path: '/org/acme/-watch?kind=deployment', headers: { host, accept: 'text/event-stream', authorization: `Bearer ${k.token}` } }, resolve);
            req.on('error', reject);
          }),
      ),
    );
    const remotes = streams.map(
      (res) =>
        new Promise<string>((resolve, reject) => {
          assert.equal(res.statusCode, 200);
          const timer = setTimeout(() => reject(new Error('no deployment event')), DEADLINE_MS);
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
            for (const line of text.split('\n')) {
              const object = line.startsWith('data: ') ? JSON.parse(line.slice(6)).object : undefined;
              if (object?.links?.[0]?.href !== self || !object.status?.remote) continue;
              clearTimeout(timer);
              res.destroy();
              return resolve(object.status.remote);
            }
          });
        }),
    );
    assert.equal((await k.call('POST', '/org/acme/gvc/web/workload', { name: 'many-hosts', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.27', ports: [{ protocol: 'http', number: 80 }] }] } })).status, 201);
    assert.deepEqual(await Promise.all(remotes), hosts.map((host) => `http://${host}/-remote/gcp-us-east1`));
  });

  test('REST map routes: secrets by type, cloud account instructions, agent info and manifests, tasks for me, and clear refusals', async () => {
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'login', type: 'userpass', data: { username: 'a', password: 'b' } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'blob', type: 'opaque', data: { payload: 'x' } })).status, 201);
    const userpass = await k.call('GET', '/org/acme/secret/-for/type/userpass');
    assert.deepEqual(userpass.body.items.map((s: { name: string }) => s.name), ['login']);
    assert.equal(userpass.body.items[0].data, undefined, 'no secret data in a list');
    assert.deepEqual((await k.call('GET', '/org/acme/secret/-for/type/userpass', undefined, { token: viewerless })).body.items, []);

    const how = await k.call('GET', '/org/acme/cloudaccount/-instructions/aws');
    assert.match(how.body.message, /Keel records aws cloud accounts/);
    assert.deepEqual(how.body.data, {});
    assert.equal((await k.call('GET', '/org/acme/cloudaccount/-instructions/oracle')).status, 404);

    assert.equal((await k.call('POST', '/org/acme/agent', { name: 'vpn' })).body.status.bootstrapConfig.agentLink, '/org/acme/agent/vpn');
    const info = await k.call('GET', '/org/acme/agent/vpn/-info');
    assert.equal(info.body.active, false);
    assert.equal((await k.call('GET', '/org/acme/agent/vpn/-info', undefined, { token: viewerless })).status, 403);
    const manifest = await k.call('POST', '/org/acme/agent/-helpwith/k8s', { namespace: 'net', bootstrap: { agentId: 'abc' }, replicas: 2, createNamespace: false });
    assert.match(manifest.body, /kind: Secret[\s\S]*kind: Deployment[\s\S]*replicas: 2/);
    assert.equal((await k.call('POST', '/org/acme/agent/-helpwith/k8s', { bootstrap: { agentId: 'abc' }, replicas: 1000 })).status, 400);
    assert.equal((await k.call('POST', '/org/acme/agent/-helpwith/k8s', {})).status, 400);
    assert.match((await k.call('POST', '/org/acme/agent/-helpwith/docker', { bootstrap: {} })).body.message, /agent up is not available/);

    const mine = await k.call('GET', '/task/-forme');
    assert.deepEqual([mine.status, mine.body.items], [200, []]);
    assert.equal((await k.call('GET', '/org/acme/task/-forme')).status, 200);
    // The first org's superuser (the admin) is told that an org does not exist; anyone else gets 403.
    assert.equal((await k.call('GET', '/org/beta-none/task/-forme')).status, 404);
    for (const path of ['/org/acme/-config', '/org/acme/gvc/web/-config', '/org/acme/gvc/web/workload/api/-config', '/user', '/q/abc']) {
      const res = await k.call('GET', path);
      assert.equal(res.status, 400, path);
      assert.match(res.body.message, /is not served by Keel: /, path);
    }
    assert.equal((await k.call('GET', '/task/some-id')).status, 404);

    const invited = await k.call('POST', '/org/acme/user/-invite', { emails: ['grace@example.com', 'lin@example.com'], groupLink: '/org/acme/group/viewers' });
    assert.deepEqual(invited.body.items.map((u: { name: string }) => u.name), ['grace@example.com', 'lin@example.com']);
    assert.deepEqual((await k.call('GET', '/org/acme/group/viewers')).body.memberLinks, ['/org/acme/user/grace@example.com', '/org/acme/user/lin@example.com']);
    assert.equal((await k.call('POST', '/org/acme/user/-invite', { emails: [] })).status, 400);
    assert.equal((await k.call('POST', '/org/acme/user/-invite', { emails: ['x@example.com'] }, { token: viewerless })).status, 403);
  });
});
