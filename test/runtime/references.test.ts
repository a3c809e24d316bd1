// The attack the review found, under runc and through the official CLI: a service account that may
// only create, edit and view workloads (no reveal on the secret, nothing on the identity) applies
// a workload that takes an identity granted reveal on a secret and mounts that secret, then reads
// the secret through the workload's endpoint. Keel refuses the workload: the identity needs `use`.
// Mounting the secret takes `use` on it too. Granted both, the same workload attaches the identity
// and its replica serves.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
const SECRET = 'the-crown-jewels';

describe('a workload may take an identity only for a caller granted use on it (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let files = 0;
  const admin = async (method: string, url: string, body?: unknown) => {
    const res = await rt.keel.call(method, url, body);
    assert.ok(res.status < 300, `${method} ${url}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  };
  const fileOf = (resource: Record<string, unknown>) => {
    const file = join(work, `resource-${++files}.json`);
    writeFileSync(file, JSON.stringify(resource));
    return file;
  };
  // Serves the directory the secret is mounted at, as the attacker's workload did.
  const leak = (name: string) => ({
    kind: 'workload',
    name,
    gvc: 'web',
    spec: {
      type: 'standard',
      identityLink: '//gvc/web/identity/vault',
      containers: [
        {
          name: 'main',
          image,
          cpu: '50m',
          memory: '64Mi',
          ports: [{ number: 8080, protocol: 'http' }],
          readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
          volumes: [{ uri: 'cpln://secret/topsecret', path: '/srv/s' }],
        },
      ],
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
      firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } },
    },
  });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-references-'));
    image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'exec httpd -f -p 8080 -h /srv/s']);
    rt = await startRuntimeKeel({ cliReachesIngress: true });
    await admin('POST', '/org/acme/secret', { name: 'topsecret', type: 'opaque', data: { payload: SECRET, encoding: 'plain' } });
    await admin('POST', '/org/acme/gvc/web/identity', { name: 'vault' });
    await admin('POST', '/org/acme/policy', {
      name: 'vault-reveals',
      targetKind: 'secret',
      targetLinks: ['//secret/topsecret'],
      bindings: [{ permissions: ['reveal'], principalLinks: ['//gvc/web/identity/vault'] }],
    });
    await admin('POST', '/org/acme/serviceaccount', { name: 'intruder' });
    const key = (await admin('POST', '/org/acme/serviceaccount/intruder/-addKey', { description: 'intruder' })).key;
    await admin('POST', '/org/acme/policy', {
      name: 'intruder-workloads',
      targetKind: 'workload',
      target: 'all',
      bindings: [{ permissions: ['create', 'edit', 'view'], principalLinks: ['//serviceaccount/intruder'] }],
    });
    await rt.run(['profile', 'update', 'intruder', '--endpoint', `http://127.0.0.1:${rt.port}`, '--token', key, '--org', 'acme', '--gvc', 'web']);
  });
  after(async () => {
    await rt?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  test('without use on the identity: cpln apply and cpln workload create are refused and nothing runs', async () => {
    // What the intruder may and may not do otherwise, as the review saw it.
    assert.equal((await rt.keel.call('GET', '/org/acme/secret/topsecret/-reveal', undefined, { token: (await rt.run(['profile', 'token', 'intruder'])).stdout })).status, 403);
    const applied = await rt.cpln.run(['apply', '--file', fileOf(leak('leak')), '--profile', 'intruder'], { timeoutMs: 60_000 });
    assert.equal(applied.code, 1, applied.stdout + applied.stderr);
    assert.match(applied.stderr + applied.stdout, /needs 'use' on \/org\/acme\/gvc\/web\/identity\/vault/);
    const created = await rt.cpln.run(['workload', 'create', '--name', 'leak2', '--image', image, '--port', '8080', '--identity', 'vault', '--profile', 'intruder'], { timeoutMs: 60_000 });
    assert.equal(created.code, 1, created.stdout + created.stderr);
    assert.match(created.stderr + created.stdout, /needs 'use' on \/org\/acme\/gvc\/web\/identity\/vault/);
    // Even when it may refer to the secret (`use`, still no reveal), the identity is what it lacks.
    await admin('POST', '/org/acme/policy', {
      name: 'intruder-uses-topsecret',
      targetKind: 'secret',
      targetLinks: ['//secret/topsecret'],
      bindings: [{ permissions: ['use'], principalLinks: ['//serviceaccount/intruder'] }],
    });
    const again = await rt.cpln.run(['apply', '--file', fileOf(leak('leak')), '--profile', 'intruder'], { timeoutMs: 60_000 });
    assert.equal(again.code, 1, again.stdout + again.stderr);
    assert.match(again.stderr + again.stdout, /spec\.identityLink refers to \/org\/acme\/gvc\/web\/identity\/vault: setting it needs 'use'/);
    for (const name of ['leak', 'leak2']) assert.equal((await rt.keel.call('GET', `/org/acme/gvc/web/workload/${name}`)).status, 404);
    const served = await rt.get('/-workload/acme/web/leak/payload');
    assert.ok(!served.body.includes(SECRET), served.body);
  });

  test('granted use on the identity: the same workload attaches it and its replica serves', async () => {
    await admin('POST', '/org/acme/policy', {
      name: 'intruder-uses-vault',
      targetKind: 'identity',
      targetLinks: ['//gvc/web/identity/vault'],
      bindings: [{ permissions: ['use'], principalLinks: ['//serviceaccount/intruder'] }],
    });
    await rt.run(['apply', '--file', fileOf(leak('leak')), '--profile', 'intruder']);
    assert.equal((await admin('GET', '/org/acme/gvc/web/workload/leak')).spec.identityLink, '/org/acme/gvc/web/identity/vault');
    await waitFor('the replica to be ready', () => rt.deployment('leak'), (d) => d.status?.ready === true, 60_000);
    const served = await waitFor('the endpoint to serve', () => rt.get('/-workload/acme/web/leak/payload'), (r) => r.status === 200, 30_000);
    assert.equal(served.body, SECRET);
    const created = await rt.cpln.run(['workload', 'create', '--name', 'leak2', '--image', image, '--port', '8080', '--identity', 'vault', '--profile', 'intruder', '-o', 'json'], { timeoutMs: 60_000 });
    assert.equal(created.code, 0, created.stderr);
    assert.equal(JSON.parse(created.stdout).spec.identityLink, '/org/acme/gvc/web/identity/vault');
  });
});
