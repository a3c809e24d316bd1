// The environment of replicas under the runc runtime, as a user sees it through the cpln CLI: a
// secret named in env reaches the process only once the workload's identity is granted reveal on
// it (before that, the replica does not start and the deployment says which secret and which
// grant), the hosted CPLN_* variables with their values, the GVC's env for a container with
// inheritEnv (the container's own wins), and what should not work does not: a user's CPLN_ name,
// an identity without the grant, another org's secret, the secret's value anywhere but the process.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { toolMissing } from '../support/registry-tools.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, secondOrg, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing() || toolMissing('skopeo');

describe('the environment of replicas that really run (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let otherToken: string;
  let otherImage: string;
  let files = 0;
  const apply = async (resource: Record<string, unknown>, ...extra: string[]) => {
    const file = join(work, `resource-${++files}.json`);
    writeFileSync(file, JSON.stringify(resource));
    return rt.cpln.run(['apply', '--file', file, ...extra], { timeoutMs: 60_000 });
  };
  const deployment = async (workload: string, org = 'acme') =>
    (await rt.keel.call('GET', `/org/${org}/gvc/web/workload/${workload}/deployment/${LOCATION}`, undefined, org === 'acme' ? {} : { token: otherToken })).body;
  const exec = (workload: string, replica: string, ...command: string[]) => rt.cpln.run(['workload', 'exec', workload, '--location', LOCATION, '--replica', replica, '--', ...command], { timeoutMs: 60_000 });
  const workload = (name: string, { container = {}, ...spec }: Record<string, unknown> & { container?: Record<string, unknown> }) => ({
    kind: 'workload',
    name,
    spec: { type: 'standard', containers: [{ name: 'main', image, cpu: '50m', memory: '64Mi', ...container }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } }, ...spec },
  });
  const ready = async (name: string) => (await waitFor(`${name} to be ready`, () => deployment(name), (d) => d.status?.ready === true, 60_000)).status.internal.replicas[0] as string;
  const printenv = async (name: string, replica: string, variable: string) => {
    // The image's busybox has no printenv: its shell says whether the variable is set, and prints it.
    const r = await exec(name, replica, 'sh', '-c', `[ -n "\${${variable}+set}" ] && printf %s "$${variable}"`);
    return r.code === 0 ? r.stdout : undefined;
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-env-'));
    image = busyboxImage(work, 'idle', ['/bin/sh', '-c', 'exec sleep 1000000']);
    rt = await startRuntimeKeel();
    ({ token: otherToken, image: otherImage } = await secondOrg(rt, 'other', image) as { token: string; image: string });
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('a secret in env: the replica waits, naming the secret and the grant, and starts with the value once the identity may reveal it', async () => {
    assert.equal((await apply({ kind: 'secret', name: 'creds', type: 'userpass', data: { username: 'app', password: 'pw-7f3a' } })).code, 0);
    assert.equal((await apply({ kind: 'secret', name: 'blob', type: 'opaque', data: { payload: Buffer.from('hello world').toString('base64'), encoding: 'base64' } })).code, 0);
    assert.equal((await apply({ kind: 'secret', name: 'conf', type: 'dictionary', data: { region: 'eu', level: '3' } })).code, 0);
    assert.equal((await apply({ kind: 'identity', name: 'app' })).code, 0);
    const env = [
      { name: 'DB_PASSWORD', value: 'cpln://secret/creds.password' },
      { name: 'BLOB', value: 'cpln://secret/blob' },
      { name: 'CONF', value: 'cpln://secret/conf' },
      { name: 'REGION', value: 'cpln://secret/conf.region' },
    ];
    const applied = await apply(workload('printer', { identityLink: '//gvc/web/identity/app', container: { env } }));
    assert.equal(applied.code, 0, applied.stderr);
    const waiting = await waitFor('printer to say why it does not start', () => deployment('printer'), (d) => /not granted reveal on secret creds/.test(d.status?.message ?? ''), 30_000);
    assert.equal(waiting.status.ready, false);
    assert.match(waiting.status.message, /Environment variable DB_PASSWORD of container main: identity app is not granted reveal on secret creds \(a policy must grant it\)/);
    // The CLI shows the same.
    const shown = await rt.run(['workload', 'get-deployments', 'printer', '-o', 'json']);
    assert.match(shown.stdout, /identity app is not granted reveal on secret creds/);

    assert.equal(
      (
        await apply({
          kind: 'policy',
          name: 'printer-reads',
          targetKind: 'secret',
          targetLinks: ['//secret/creds', '//secret/blob', '//secret/conf'],
          bindings: [{ permissions: ['reveal'], principalLinks: ['//gvc/web/identity/app'] }],
        })
      ).code,
      0,
    );
    const replica = await ready('printer');
    assert.equal(await printenv('printer', replica, 'DB_PASSWORD'), 'pw-7f3a');
    assert.equal(await printenv('printer', replica, 'BLOB'), 'hello world', 'a base64 opaque secret is given decoded');
    assert.deepEqual(JSON.parse((await printenv('printer', replica, 'CONF'))!), { region: 'eu', level: '3' });
    assert.equal(await printenv('printer', replica, 'REGION'), 'eu');

    // The value is in the process and in its config.json (root's alone), nowhere the API shows.
    const replicas = join(rt.keel.config.dataDir, 'runtime', 'replicas');
    const configs = readdirSync(replicas).map((id) => join(replicas, id, 'c0', 'config.json')).filter((f) => existsSync(f) && readFileSync(f, 'utf8').includes('pw-7f3a'));
    assert.equal(configs.length, 1);
    assert.equal(statSync(configs[0]).mode & 0o777, 0o600);
    for (const path of ['/org/acme/gvc/web/workload/printer', `/org/acme/gvc/web/workload/printer/deployment/${LOCATION}`]) {
      assert.ok(!JSON.stringify((await rt.keel.call('GET', path)).body).includes('pw-7f3a'), path);
    }
    const logs = await rt.cpln.run(['logs', '{gvc="web",workload="printer"}', '--limit', '200'], { timeoutMs: 60_000 });
    assert.ok(!logs.stdout.includes('pw-7f3a'));
    await rt.run(['workload', 'delete', 'printer']);
  });

  test('the hosted CPLN_* set, PORT, and the GVC env for a container with inheritEnv (its own env wins)', async () => {
    const gvc = JSON.parse((await rt.run(['gvc', 'get', 'web', '-o', 'json'])).stdout);
    const updated = await apply({ kind: 'gvc', name: 'web', spec: { ...gvc.spec, env: [{ name: 'GREETING', value: 'from the gvc' }, { name: 'SHARED', value: 'gvc' }] } });
    assert.equal(updated.code, 0, updated.stderr);
    const env = [{ name: 'SHARED', value: 'container' }, { name: 'SELF', value: '$(CPLN_WORKLOAD)/x' }];
    assert.equal((await apply(workload('heir', { container: { inheritEnv: true, env, ports: [{ number: 8080, protocol: 'http' }] } }))).code, 0);
    assert.equal((await apply(workload('plain', { container: { env } }))).code, 0);
    const heir = await ready('heir');
    const plain = await ready('plain');
    assert.equal(await printenv('heir', heir, 'GREETING'), 'from the gvc');
    assert.equal(await printenv('heir', heir, 'SHARED'), 'container');
    assert.equal(await printenv('plain', plain, 'GREETING'), undefined, 'without inheritEnv the GVC env is not applied');
    assert.equal(await printenv('plain', plain, 'SHARED'), 'container');

    const item = JSON.parse((await rt.run(['workload', 'get', 'heir', '-o', 'json'])).stdout);
    const names = ['CPLN_ORG', 'CPLN_GVC', 'CPLN_GVC_ALIAS', 'CPLN_LOCATION', 'CPLN_PROVIDER', 'CPLN_WORKLOAD', 'CPLN_WORKLOAD_VERSION', 'CPLN_NAME', 'CPLN_IMAGE', 'CPLN_REPLICA', 'CPLN_GLOBAL_ENDPOINT', 'PORT', 'SELF'];
    const all: Record<string, string | undefined> = {};
    for (const n of names) all[n] = await printenv('heir', heir, n);
    assert.deepEqual(
      {
        CPLN_ORG: all.CPLN_ORG,
        CPLN_GVC: all.CPLN_GVC,
        CPLN_GVC_ALIAS: all.CPLN_GVC_ALIAS,
        CPLN_LOCATION: all.CPLN_LOCATION,
        CPLN_PROVIDER: all.CPLN_PROVIDER,
        CPLN_WORKLOAD: all.CPLN_WORKLOAD,
        CPLN_WORKLOAD_VERSION: all.CPLN_WORKLOAD_VERSION,
        CPLN_NAME: all.CPLN_NAME,
        CPLN_IMAGE: all.CPLN_IMAGE,
        CPLN_REPLICA: all.CPLN_REPLICA,
        CPLN_GLOBAL_ENDPOINT: all.CPLN_GLOBAL_ENDPOINT,
        PORT: all.PORT,
        SELF: all.SELF,
      },
      {
        CPLN_ORG: 'acme',
        CPLN_GVC: 'web',
        CPLN_GVC_ALIAS: gvc.alias,
        CPLN_LOCATION: LOCATION,
        CPLN_PROVIDER: 'aws',
        CPLN_WORKLOAD: '/org/acme/gvc/web/workload/heir',
        CPLN_WORKLOAD_VERSION: String(item.version),
        CPLN_NAME: 'heir',
        CPLN_IMAGE: image,
        CPLN_REPLICA: heir,
        CPLN_GLOBAL_ENDPOINT: item.status.canonicalEndpoint ?? item.status.endpoint,
        PORT: '8080',
        SELF: '/org/acme/gvc/web/workload/heir/x',
      },
    );
    await rt.run(['workload', 'delete', 'heir']);
    await rt.run(['workload', 'delete', 'plain']);
  });

  test('CPLN_ENDPOINT reaches Keel\'s API from inside the replica, which listens on loopback only', async () => {
    assert.equal((await apply(workload('caller', {}))).code, 0);
    const replica = await ready('caller');
    const endpoint = await printenv('caller', replica, 'CPLN_ENDPOINT');
    assert.match(endpoint ?? '', /^http:\/\/10\.\d+\.\d+\.1:\d+$/);
    assert.equal(new URL(endpoint!).port, String(rt.port), "the API's own port, at the bridge's host address");
    // The API answers through the relay as it answers anyone: an unauthenticated call is refused with 401.
    const anonymous = await exec('caller', replica, 'sh', '-c', 'wget -S -q -O - "$CPLN_ENDPOINT/org/acme" 2>&1; true');
    assert.match(anonymous.stdout, /401/);
    const open = await exec('caller', replica, 'sh', '-c', 'wget -q -O - "$CPLN_ENDPOINT/discovery"');
    assert.equal(open.code, 0, open.stdout);
    assert.ok(JSON.parse(open.stdout), 'the API answered');
    await rt.run(['workload', 'delete', 'caller']);
  });

  test("misuse: a user's CPLN_ name, an identity without the grant, no identity, another org's secret", async () => {
    const refused = await apply(workload('shadow', { container: { env: [{ name: 'CPLN_TOKEN', value: 'forged' }] } }));
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /spec\.containers\[0\]\.env\[0\]\.name/);
    assert.match(refused.stderr, /reserved/);
    assert.equal((await rt.keel.call('GET', '/org/acme/gvc/web/workload/shadow')).status, 404);

    assert.equal((await apply({ kind: 'identity', name: 'nobody' })).code, 0);
    assert.equal((await apply(workload('ungranted', { identityLink: '//gvc/web/identity/nobody', container: { env: [{ name: 'P', value: 'cpln://secret/creds.password' }] } }))).code, 0);
    assert.equal((await apply(workload('anonymous', { container: { env: [{ name: 'P', value: 'cpln://secret/creds.password' }] } }))).code, 0);
    assert.equal((await apply(workload('spy', { container: { image: otherImage, env: [{ name: 'P', value: 'cpln://secret/creds.password' }] } }), '--profile', 'other')).code, 0);
    for (const [name, org, why] of [
      ['ungranted', 'acme', /identity nobody is not granted reveal on secret creds/],
      ['anonymous', 'acme', /the workload has no identity of GVC web: secret creds is given only to an identity granted reveal on it/],
      ['spy', 'other', /secret creds does not exist in org other/],
    ] as const) {
      const d = await waitFor(`${name} to say why it does not start`, () => deployment(name, org), (x) => why.test(x.status?.message ?? ''), 30_000);
      assert.equal(d.status.ready, false);
      assert.ok(!JSON.stringify(d).includes('pw-7f3a'));
    }
  });
});
