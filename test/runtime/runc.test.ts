// The runc runtime end to end, as a user sees it through the cpln CLI: an image built here from
// busybox, a workload applied on it, readiness gated by its probe, the page through Keel's
// ingress, the replica's own log line, exec, a stopped replica replaced, and nothing left on the
// host once the workload is deleted.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

describe('workloads that really run (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-'));
    // The server starts answering two seconds after the container starts: readiness must wait for it.
    image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'sleep 2; echo server starting; exec httpd -f -vv -p 8080 -h /www'], { 'www/index.html': '<h1>hello from busybox</h1>\n', 'www/about.html': 'about\n' });
    rt = await startRuntimeKeel({ cliReachesIngress: true });
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('apply → ready only once the probe passes → the page through the ingress', async () => {
    const file = join(work, 'web.yaml');
    writeFileSync(
      file,
      JSON.stringify({
        kind: 'workload',
        name: 'hello',
        spec: {
          type: 'standard',
          containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/index.html', port: 8080 }, periodSeconds: 1, failureThreshold: 1 } }],
          defaultOptions: { autoscaling: { minScale: 2, maxScale: 2 } },
          // httpd as PID 1 ignores SIGTERM: a short grace period (the default is 90 s) lets the delete below end it soon.
          rolloutOptions: { terminationGracePeriodSeconds: 5 },
        },
      }),
    );
    const applied = Date.now();
    await rt.run(['apply', '--file', file]);
    // While the server is not up yet the deployment is not ready, and the ingress has no replica to send to.
    // The reconciler's first pass (which creates the deployment) may come a moment after the apply.
    const early = await waitFor('the deployment to be created', () => rt.deployment('hello'), (d) => typeof d?.status === 'object', 30_000);
    assert.equal(early.status.ready, false, JSON.stringify(early.status));
    assert.equal((await rt.get('/-workload/acme/web/hello/')).status, 503);
    const ready = await waitFor('the deployment to become ready', () => rt.deployment('hello'), (d) => d.status.ready === true, 60_000);
    const firstOk = Date.now();
    assert.equal(ready.status.internal.replicas.length, 2);
    const workload = (await rt.keel.call('GET', '/org/acme/gvc/web/workload/hello')).body;
    const host = new URL(workload.status.endpoint).host.split(':')[0];
    const page = await rt.get('/', host);
    assert.equal(page.status, 200);
    assert.equal(page.body, '<h1>hello from busybox</h1>\n');
    console.log(`# apply → ready and serving: ${firstOk - applied} ms`);
    // The path form reaches the same workload.
    const byPath = await rt.get('/-workload/acme/web/hello/index.html');
    assert.equal(byPath.status, 200);
    assert.equal(byPath.body, '<h1>hello from busybox</h1>\n');
    assert.equal((await rt.get('/', 'nothing-web.localhost')).status, 404);
    assert.equal((await rt.get('/about.html', host)).status, 200);
  });

  test("the replica's own output through cpln logs, with its replica label", async () => {
    const replicas = (await rt.deployment('hello')).status.internal.replicas as string[];
    const logs = await waitFor(
      'the server start and request lines',
      () => rt.run(['logs', '{gvc="web", workload="hello"}', '--output', 'jsonl', '--limit', '0']),
      (r) => /server starting/.test(r.stdout) && /url:\/about\.html/.test(r.stdout),
      30_000,
    );
    const lines = logs.stdout.split('\n').map((l) => JSON.parse(l) as { labels: Record<string, string>; line: string });
    const starting = lines.filter((l) => l.line === 'server starting');
    assert.deepEqual(starting.map((l) => l.labels.replica).sort(), [...replicas].sort(), 'each replica logged its start under its own name');
    assert.ok(starting.every((l) => l.labels.container === 'httpd' && l.labels.location === LOCATION));
    console.log(`# a request's log line: ${lines.find((l) => /about\.html/.test(l.line))?.line}`);
  });

  test('cpln workload exec runs in the replica and returns the exit code; get-replicas lists the real replicas', async () => {
    const listed = JSON.parse((await rt.run(['workload', 'get-replicas', 'hello', '--location', LOCATION, '--output', 'json'])).stdout);
    assert.deepEqual([...listed.items].sort(), [...(await rt.deployment('hello')).status.internal.replicas].sort());
    const hi = await rt.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', listed.items[0], '--', 'echo', 'hi']);
    assert.equal(hi.stdout, 'hi');
    // The replica's own filesystem and hostname, not the host's.
    assert.equal((await rt.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', listed.items[1], '--', 'cat', '/www/index.html'])).stdout, '<h1>hello from busybox</h1>');
    assert.equal((await rt.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', listed.items[1], '--', 'sh', '-c', 'echo $CPLN_REPLICA; hostname'])).stdout, `${listed.items[1]}\n${listed.items[1]}`);
    const failed = await rt.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', listed.items[0], '--', 'sh', '-c', 'echo bad >&2; exit 3'], 3);
    assert.match(failed.stdout, /bad/);
    const missing = await rt.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', 'nope', '--', 'true'], 1);
    assert.match(missing.stdout, /no replica nope runs/);
  });

  test('cpln cp copies files into a replica and out of it (tar through exec)', async () => {
    const replica = (await rt.deployment('hello')).status.internal.replicas[0];
    const local = join(work, 'upload.txt');
    writeFileSync(local, 'uploaded through cp\n');
    await rt.run(['cp', local, 'hello:/tmp', '--location', LOCATION, '--replica', replica]);
    const read = await rt.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', replica, '--', 'cat', '/tmp/upload.txt']);
    assert.equal(read.stdout, 'uploaded through cp');
    const out = join(work, 'downloaded');
    await rt.run(['cp', 'hello:/www/about.html', out, '--location', LOCATION, '--replica', replica]);
    assert.equal(readFileSync(existsSync(join(out, 'about.html')) ? join(out, 'about.html') : out, 'utf8'), 'about\n');
  });

  test("a replica sees its image, not the host: Keel's data directory is out of its reach", async () => {
    const replica = (await rt.deployment('hello')).status.internal.replicas[0];
    const exec = (...command: string[]) => rt.cpln.run(['workload', 'exec', 'hello', '--location', LOCATION, '--replica', replica, '--', ...command]);
    const dataDir = rt.keel.config.dataDir;
    const listed = await exec('ls', dataDir);
    assert.equal(listed.code, 1, listed.stdout);
    assert.match(listed.stdout, /No such file or directory/);
    const db = await exec('cat', join(dataDir, 'keel.db'));
    assert.notEqual(db.code, 0);
    assert.doesNotMatch(db.stdout, /SQLite format/);
    // Nor through the host's processes: in its own PID namespace, process 1 is the image's server.
    const pid1 = await exec('cat', '/proc/1/cmdline');
    assert.match(pid1.stdout, /^httpd\0-f/);
  });

  test('a key without exec permission on the workload gets no terminal session', async () => {
    assert.equal((await rt.keel.call('POST', '/org/acme/serviceaccount', { name: 'viewer' })).status, 201);
    const key = (await rt.keel.call('POST', '/org/acme/serviceaccount/viewer/-addKey', { description: 'view only' })).body.key;
    for (const [kind, name] of [['workload', 'view-workloads'], ['gvc', 'view-gvcs']]) {
      const policy = await rt.keel.call('POST', '/org/acme/policy', { name, targetKind: kind, target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/viewer'] }] });
      assert.equal(policy.status, 201, JSON.stringify(policy.body));
    }
    const { port } = rt;
    await rt.run(['profile', 'update', 'viewer', '--endpoint', `http://127.0.0.1:${port}`, '--token', key, '--org', 'acme', '--gvc', 'web']);
    const refused = await rt.cpln.run(['workload', 'exec', 'hello', '--profile', 'viewer', '--location', LOCATION, '--', 'echo', 'pwned']);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stdout, /^Unauthorized: /m);
    assert.doesNotMatch(refused.stdout, /pwned/);
    // A made-up key is refused the same way.
    const ws = new WebSocket(`ws://127.0.0.1:${port}/-remote/${LOCATION}/exec`);
    const said: string[] = [];
    await new Promise<void>((resolve) => {
      ws.on('open', () => ws.send(JSON.stringify({ token: 'not-a-key', org: 'acme', gvc: 'web', pod: 'any', command: ['echo', 'pwned'] })));
      ws.on('message', (m) => said.push(m.toString()));
      ws.on('close', () => resolve());
      ws.on('error', () => resolve());
    });
    assert.match(said.join(''), /^Unauthorized: /);
  });

  test('replica stop kills one replica and the controller starts it again', async () => {
    const replicas = (await rt.deployment('hello')).status.internal.replicas as string[];
    await rt.run(['workload', 'replica', 'stop', 'hello', '--location', LOCATION, '--replica-name', replicas[0]]);
    await waitFor('the stopped replica to go down', () => rt.deployment('hello'), (d) => d.status.ready === false || d.status.versions[0].containers.httpd.resources.replicasReady < 2, 30_000);
    await waitFor('the replica to be back and ready', () => rt.deployment('hello'), (d) => d.status.versions[0].containers.httpd.resources.replicasReady === 2, 60_000);
    const logs = await rt.run(['logs', `{workload="hello", replica="${replicas[0]}"}`, '--limit', '0']);
    assert.match(logs.stdout, /stopped on request/);
    assert.equal((logs.stdout.match(/server starting/g) ?? []).length, 2, 'the replica started twice');
    assert.equal((await rt.get('/', new URL((await rt.keel.call('GET', '/org/acme/gvc/web/workload/hello')).body.status.endpoint).hostname)).status, 200);
  });

  test('deleting the workload leaves no container, namespace, interface, mount or cgroup behind', async () => {
    await rt.run(['workload', 'delete', 'hello']);
    await waitFor('every container to be gone', async () => leftovers(rt.keel.config.dataDir).containers, (c) => c.length === 0, 30_000);
    await waitFor('the replicas\' directories to be gone', async () => readdirSync(join(rt.keel.config.dataDir, 'runtime', 'replicas')), (d) => d.length === 0, 30_000);
    assert.deepEqual(leftovers(rt.keel.config.dataDir), NOTHING_LEFT);
  });
});
