// What the hosted API refuses, Keel refuses: CPU and memory quantities (grammar, floors, the
// memory-to-CPU ratio), ports and protocols, cron schedules, durations, image references and DNS
// names. Each refusal is a 400 error object whose details.errors name the field and say what is
// allowed, and nothing is written; the real `cpln apply -f` prints that error.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Cpln } from '../support/cpln.js';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';

const WORKLOADS = '/org/acme/gvc/prod/workload';
const container = (extra: Record<string, unknown> = {}) => ({ name: 'web', image: 'nginx:1.27', cpu: '50m', memory: '128Mi', ...extra });
const workload = (name: string, containerFields: Record<string, unknown> = {}, spec: Record<string, unknown> = {}, tags: Record<string, unknown> = {}) => ({
  name,
  tags,
  spec: { type: 'standard', containers: [container(containerFields)], ...spec },
});

/** A 400 whose details.errors name `path` with a message matching `message`. */
function refusedAt(res: Response, path: string, message: RegExp): void {
  assertError(res, 400, 'bad_request');
  const errors = res.body.details.errors as Array<{ path: string; message: string }>;
  const hit = errors.find((e) => e.path === path);
  assert.ok(hit, `no error for ${path} in ${JSON.stringify(errors)}`);
  assert.match(hit.message, message);
  assert.match(res.body.message, new RegExp(path.replace(/[.[\]]/g, '\\$&')));
}

forEachBackend('validation as the hosted API does it', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend);
    const gvc = await k.call('POST', '/org/acme/gvc', { name: 'prod', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } });
    assert.equal(gvc.status, 201, JSON.stringify(gvc.body));
  });
  after(() => k.close());

  test('header filters: a pattern Keel cannot match in linear time (a backreference, a lookaround) is refused naming it; a nested quantifier is fine', async () => {
    const filters = (values: string[]) => ({ firewallConfig: { external: { http: { inboundHeaderFilter: [{ key: 'x-team', allowedValues: ['ok', ...values] }] } } } });
    for (const bad of ['(a)\\1', '(?=a)a', '(?<!b)a']) {
      refusedAt(await k.call('POST', WORKLOADS, workload('filtered', {}, filters([bad]))), 'spec.firewallConfig.external.http.inboundHeaderFilter[0].allowedValues[1]', /lookaround .* or a backreference .* linear time/);
    }
    refusedAt(await k.call('POST', WORKLOADS, workload('filtered', {}, filters(['team-[0-9']))), 'spec.firewallConfig.external.http.inboundHeaderFilter[0].allowedValues[1]', /^is not a valid regular expression \(Unterminated character class\)$/);
    assert.equal((await k.call('GET', `${WORKLOADS}/filtered`)).status, 404, 'nothing was stored');
    const created = await k.call('POST', WORKLOADS, workload('filtered', {}, filters(['(a+)+', 'team-[0-9]+'])));
    assert.equal(created.status, 201, created.raw);
  });

  test('terminationGracePeriodSeconds: at most 900, or 3600 with the tag cpln/relaxGracePeriodMax, as hosted', async () => {
    const grace = (seconds: number) => ({ rolloutOptions: { terminationGracePeriodSeconds: seconds } });
    refusedAt(await k.call('POST', WORKLOADS, workload('graceful', {}, grace(901))), 'spec.rolloutOptions.terminationGracePeriodSeconds', /at most 900 \(the tag cpln\/relaxGracePeriodMax allows up to 3600\)/);
    assertError(await k.call('POST', WORKLOADS, workload('graceful', {}, grace(3601), { 'cpln/relaxGracePeriodMax': 'true' })), 400, 'bad_request');
    assert.equal((await k.call('GET', `${WORKLOADS}/graceful`)).status, 404, 'nothing was stored');
    assert.equal((await k.call('POST', WORKLOADS, workload('graceful', {}, grace(900)))).status, 201);
    // The tag's removal takes the relaxed bound with it.
    assert.equal((await k.call('PATCH', `${WORKLOADS}/graceful`, { tags: { 'cpln/relaxGracePeriodMax': 'true' }, spec: grace(3600) })).status, 200);
    refusedAt(await k.call('PATCH', `${WORKLOADS}/graceful`, { tags: { 'cpln/relaxGracePeriodMax': null } }), 'spec.rolloutOptions.terminationGracePeriodSeconds', /at most 900/);
    assert.equal((await k.call('GET', `${WORKLOADS}/graceful`)).body.spec.rolloutOptions.terminationGracePeriodSeconds, 3600);
  });

  test('lifecycle hooks run a command only: preStop.httpGet is refused, as hosted', async () => {
    const res = await k.call('POST', WORKLOADS, workload('hooked', { lifecycle: { preStop: { httpGet: { path: '/drain', port: 8080 } } } }));
    assertError(res, 400, 'bad_request');
    assert.match(res.body.message, /spec\.containers\[0\]\.lifecycle\.preStop/);
    assert.equal((await k.call('GET', `${WORKLOADS}/hooked`)).status, 404);
    assert.equal((await k.call('POST', WORKLOADS, workload('hooked', { lifecycle: { preStop: { exec: { command: ['sleep', '1'] } } } }))).status, 201);
  });

  test('CPU and memory: Kubernetes quantities, positive, above the floors, memory at most 8Mi per millicore', async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ cpu: 'lots' }, 'spec.containers[0].cpu', /'lots' is not a quantity: must be a positive CPU quantity .*50m/],
      [{ cpu: '-5' }, 'spec.containers[0].cpu', /'-5' is not a quantity/],
      [{ cpu: '0' }, 'spec.containers[0].cpu', /must be more than zero/],
      [{ cpu: '10m' }, 'spec.containers[0].cpu', /at least 25m/],
      [{ memory: 'huge' }, 'spec.containers[0].memory', /'huge' is not a quantity: must be a positive memory quantity .*128Mi/],
      [{ memory: '1.5.Gi' }, 'spec.containers[0].memory', /not a quantity/],
      [{ memory: '16Mi' }, 'spec.containers[0].memory', /at least 32Mi/],
      [{ cpu: '100m', memory: '2Gi' }, 'spec.containers[0].memory', /at most 8Mi per millicore of cpu: 2048Mi needs a cpu of at least 256m/],
      [{ memory: '2Gi' }, 'spec.containers[0].memory', /needs a cpu of at least 256m/],
      [{ cpu: '100m', minCpu: '200m' }, 'spec.containers[0].minCpu', /must not be more than cpu/],
      [{ memory: '128Mi', minMemory: '256Mi' }, 'spec.containers[0].minMemory', /must not be more than memory/],
    ];
    for (const [fields, path, message] of cases) {
      const res = await k.call('POST', WORKLOADS, workload('bad', fields));
      refusedAt(res, path, message);
    }
    assert.equal((await k.call('GET', `${WORKLOADS}/bad`)).status, 404, 'nothing was stored');

    for (const [name, fields] of [['decimal', { cpu: '0.25', memory: '1Gi' }], ['exponent', { cpu: '2', memory: '5e8' }], ['milli', { cpu: '1500m', memory: '4G' }]] as const) {
      const ok = await k.call('POST', WORKLOADS, workload(name, fields));
      assert.equal(ok.status, 201, `${name}: ${JSON.stringify(ok.body)}`);
    }
    // The ratio's ceiling is 32Mi per millicore for a workload tagged cpln/relaxMemoryToCpuRatio.
    const relaxed = await k.call('POST', WORKLOADS, workload('relaxed', { cpu: '100m', memory: '2Gi' }, {}, { 'cpln/relaxMemoryToCpuRatio': 'true' }));
    assert.equal(relaxed.status, 201, JSON.stringify(relaxed.body));
    refusedAt(await k.call('POST', WORKLOADS, workload('too-much', { cpu: '25m', memory: '1Gi' }, {}, { 'cpln/relaxMemoryToCpuRatio': 'true' })), 'spec.containers[0].memory', /at most 32Mi per millicore/);
    // A stateful workload's minimums stay within a quarter of its resources.
    refusedAt(
      await k.call('POST', WORKLOADS, workload('db', { cpu: '1', minCpu: '100m' }, { type: 'stateful' })),
      'spec.containers[0].minCpu',
      /at least a quarter of cpu/,
    );
  });

  test('a patch that breaks a quantity is refused and changes nothing', async () => {
    const made = await k.call('POST', WORKLOADS, workload('patched'));
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const res = await k.call('PATCH', `${WORKLOADS}/patched`, { spec: { containers: [{ name: 'web', cpu: 'lots' }] } });
    refusedAt(res, 'spec.containers[0].cpu', /not a quantity/);
    const after = await k.call('GET', `${WORKLOADS}/patched`);
    assert.equal(after.body.version, made.body.version);
    assert.equal(after.body.spec.containers[0].cpu, '50m');
  });

  test('ports: 80 to 65535, not a reserved one; protocols from the list', async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ ports: [{ protocol: 'http', number: 0 }] }, 'spec.containers[0].ports[0].number', /must be >= 80/],
      [{ ports: [{ protocol: 'http', number: 70000 }] }, 'spec.containers[0].ports[0].number', /must be <= 65535/],
      [{ ports: [{ protocol: 'http', number: 15001 }] }, 'spec.containers[0].ports[0].number', /must not be one of: .*15001.* \(reserved\)/],
      [{ ports: [{ protocol: 'udp', number: 8080 }] }, 'spec.containers[0].ports[0].protocol', /must be one of: http, http2, grpc, tcp/],
      [{ port: 'eighty' }, 'spec.containers[0].port', /must be integer/],
      [{ readinessProbe: { tcpSocket: { port: 9090 } } }, 'spec.containers[0].readinessProbe.tcpSocket.port', /reserved/],
    ];
    for (const [fields, path, message] of cases) refusedAt(await k.call('POST', WORKLOADS, workload('ports', fields)), path, message);
    const domain = await k.call('POST', '/org/acme/domain', { name: 'ports.example.com', spec: { ports: [{ number: 99999, protocol: 'quic' }] } });
    refusedAt(domain, 'spec.ports[0].number', /must be <= 65535/);
    refusedAt(domain, 'spec.ports[0].protocol', /must be one of: http, http2, tcp/);
  });

  test('cron schedules: five fields in range, or a shorthand', async () => {
    const cron = (schedule: string) => workload('nightly', {}, { type: 'cron', job: { schedule } });
    for (const [schedule, message] of [['61 * * * *', /'61' is not in 0-59: must be a cron schedule/], ['every day', /: must be a cron schedule of five fields/], ['* * * *', /: must be a cron schedule/]] as const) {
      refusedAt(await k.call('POST', WORKLOADS, cron(schedule)), 'spec.job.schedule', message);
    }
    const volumeset = await k.call('POST', '/org/acme/gvc/prod/volumeset', { name: 'data', spec: { initialCapacity: 10, snapshots: { schedule: '0 25 * * *' } } });
    refusedAt(volumeset, 'spec.snapshots.schedule', /'25' is not in 0-23/);
    assert.equal((await k.call('POST', WORKLOADS, cron('@daily'))).status, 201);
  });

  test('durations, image references and DNS names', async () => {
    const cors = (maxAge: string) => ({ name: 'cors.example.com', spec: { ports: [{ number: 443, protocol: 'http2', cors: { maxAge } }] } });
    refusedAt(await k.call('POST', '/org/acme/domain', cors('a day')), 'spec.ports[0].cors.maxAge', /'a day' is not a duration: must be a duration .*1h30m/);
    refusedAt(await k.call('POST', '/org/acme/domain', cors('10')), 'spec.ports[0].cors.maxAge', /not a duration/);
    assert.equal((await k.call('POST', '/org/acme/domain', cors('24h'))).status, 201);

    for (const image of ['NGINX:latest', 'nginx:', 'nginx::1', 'my image', 'registry.example.com/app@sha256:xyz']) {
      refusedAt(await k.call('POST', WORKLOADS, workload('img', { image })), 'spec.containers[0].image', /is not an image reference: must be an image reference/);
    }
    for (const [name, image] of [['img-a', 'ghcr.io/team/app:v2'], ['img-b', 'registry.example.com:5000/a/b/c@sha256:0123456789abcdef0123456789abcdef'], ['img-c', '//image/app:v1'], ['img-d', '/org/acme/image/app:v1']]) {
      const ok = await k.call('POST', WORKLOADS, workload(name, { image }));
      assert.equal(ok.status, 201, `${image}: ${JSON.stringify(ok.body)}`);
    }

    refusedAt(await k.call('POST', '/org/acme/domain', { name: 'bad_name.example.com' }), 'name', /is not a DNS name: must be a DNS name/);
    refusedAt(await k.call('POST', '/org/acme/domain', { name: `${'a'.repeat(64)}.example.com` }), 'name', /not a DNS name/);
    refusedAt(await k.call('PATCH', '/org/acme/gvc/prod', { spec: { domain: 'exa mple.com' } }), 'spec.domain', /not a DNS name/);
    refusedAt(
      await k.call('POST', WORKLOADS, workload('egress', {}, { firewallConfig: { external: { outboundAllowHostname: ['api.example.com', 'bad..host'] } } })),
      'spec.firewallConfig.external.outboundAllowHostname[1]',
      /or \*\.example\.com for all its subdomains/,
    );
    const egress = await k.call('POST', WORKLOADS, workload('egress', {}, { firewallConfig: { external: { outboundAllowHostname: ['*.example.com'] } } }));
    assert.equal(egress.status, 201, JSON.stringify(egress.body));
  });

  test('workload types: vm needs spec.vm and only vm has it; its volumes are named disks', async () => {
    refusedAt(await k.call('POST', WORKLOADS, workload('vm', {}, { type: 'vm' })), 'spec.vm', /is required for vm workloads/);
    refusedAt(await k.call('POST', WORKLOADS, workload('std', {}, { vm: {} })), 'spec.vm', /is only allowed for vm workloads/);
    const disk = { uri: 'cpln://volumeset/data', path: '/data' };
    refusedAt(await k.call('POST', WORKLOADS, workload('vm', { volumes: [disk] }, { type: 'vm', vm: {} })), 'spec.containers[0].volumes[0].path', /not allowed for a vm/);
    refusedAt(await k.call('POST', WORKLOADS, workload('std', { volumes: [{ ...disk, bus: 'sata' }] })), 'spec.containers[0].volumes[0].bus', /only allowed for vm/);
    refusedAt(await k.call('POST', WORKLOADS, workload('std', { image: undefined })), 'spec.containers[0].image', /is required/);
    refusedAt(
      await k.call('POST', WORKLOADS, workload('vm', {}, { type: 'vm', vm: { bootDisk: { source: { oci: { image: 'quay.io/containerdisks/ubuntu:22.04' }, http: { url: 'https://example.com/disk.img' } } } } })),
      'spec.vm.bootDisk.source',
      /must NOT have more than 1 properties/,
    );
    const vm = await k.call('POST', WORKLOADS, {
      name: 'vm',
      spec: {
        type: 'vm',
        containers: [{ name: 'guest', cpu: '1', memory: '2Gi', volumes: [{ uri: 'cpln://volumeset/data', name: 'data', bus: 'virtio', bootOrder: 2 }] }],
        vm: { bootDisk: { source: { oci: { image: 'quay.io/containerdisks/ubuntu:22.04' } } }, cpu: { sockets: 1, threads: 2 }, runStrategy: 'Always', guestOS: 'linux' },
      },
    });
    assert.equal(vm.status, 201, JSON.stringify(vm.body));
    assert.equal(vm.body.spec.vm.runStrategy, 'Always');
  });

  test("volumes: a uri is a volume URI and a path a plain absolute path outside /proc, /sys and /dev, once per container", async () => {
    const at = 'spec.containers[0].volumes[0]';
    for (const path of ['/proc', '/proc/self', '/sys/fs', '/dev', '/']) {
      refusedAt(await k.call('POST', WORKLOADS, workload('vol', { volumes: [{ uri: 'scratch://x', path }] })), `${at}.path`, /must not be/);
    }
    for (const path of ['/data/../etc', '/data/./x', '/data//x', '/data/', 'data']) {
      refusedAt(await k.call('POST', WORKLOADS, workload('vol', { volumes: [{ uri: 'scratch://x', path }] })), `${at}.path`, /plain path|absolute/);
    }
    for (const uri of ['cpln://volumeset/../x', 'cpln://volumeset/data/sub', 'cpln://secret/s/../../t', 'cpln://secret/s...', 'scratch://../x', 'file:///etc', '/etc', 'hostpath://x']) {
      refusedAt(await k.call('POST', WORKLOADS, workload('vol', { volumes: [{ uri, path: '/data' }] })), `${at}.uri`, /is not a volume URI/);
    }
    const twice = [{ uri: 'scratch://a', path: '/data' }, { uri: 'scratch://b', path: '/data' }];
    refusedAt(await k.call('POST', WORKLOADS, workload('vol', { volumes: twice })), 'spec.containers[0].volumes[1].path', /mounted twice/);
    const volumes = [
      { uri: 'cpln://volumeset/data', path: '/var/lib/data' },
      { uri: 'cpln://secret/db.DB_HOST', path: '/etc/db-host' },
      { uri: 'scratch://work', path: '/tmp/work' },
      { uri: 's3://my-bucket', path: '/s3' },
      { uri: 'azureblob://account/container', path: '/blob' },
    ];
    const ok = await k.call('POST', WORKLOADS, workload('vol', { volumes }));
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
  });

  test('env: names beginning CPLN_ are the platform\'s and refused, on create and on patch; others pass', async () => {
    for (const name of ['CPLN_TOKEN', 'CPLN_WORKLOAD', 'CPLN_ANYTHING', 'cpln_token']) {
      refusedAt(await k.call('POST', WORKLOADS, workload('env', { env: [{ name: 'OK', value: '1' }, { name, value: 'mine' }] })), 'spec.containers[0].env[1].name', /reserved.*CPLN_/);
    }
    assert.equal((await k.call('GET', `${WORKLOADS}/env`)).status, 404, 'nothing was written');
    const ok = await k.call('POST', WORKLOADS, workload('env', { env: [{ name: 'CPLNX', value: '1' }, { name: 'MY_CPLN_TOKEN', value: 'cpln://secret/s.key' }] }));
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    const patched = await k.call('PATCH', `${WORKLOADS}/env`, { spec: { containers: [container({ env: [{ name: 'CPLN_ENDPOINT', value: 'http://evil' }] })] } });
    refusedAt(patched, 'spec.containers[0].env[0].name', /reserved/);
    const kept = await k.call('GET', `${WORKLOADS}/env`);
    assert.deepEqual(kept.body.spec.containers[0].env.map((e: { name: string }) => e.name).sort(), ['CPLNX', 'MY_CPLN_TOKEN']);
  });

  test('cpln apply -f of a manifest Keel refuses prints the field and what is allowed', async () => {
    const endpoint = await k.listen();
    const cpln = new Cpln([endpoint.replace('http://', '')]);
    try {
      const profile = await cpln.run(['profile', 'update', 'keel', '--endpoint', endpoint, '--token', k.token, '--org', 'acme', '--gvc', 'prod', '--default']);
      assert.equal(profile.code, 0, profile.stderr);
      const path = join(cpln.home, 'bad.yaml');
      writeFileSync(path, 'kind: workload\nname: greedy\nspec:\n  type: standard\n  containers:\n    - name: main\n      image: nginx:1.27\n      cpu: lots\n      memory: 128Mi\n');
      const applied = await cpln.run(['apply', '-f', path]);
      assert.equal(applied.code, 1, applied.stdout + applied.stderr);
      assert.deepEqual(applied.foreign, []);
      assert.match(applied.stderr, /bad_request/);
      assert.match(applied.stderr, /spec\.containers\[0\]\.cpu/);
      assert.match(applied.stderr, /must be a positive CPU quantity/);
      assert.equal((await k.call('GET', `${WORKLOADS}/greedy`)).status, 404);
    } finally {
      cpln.cleanup();
    }
  });
});
