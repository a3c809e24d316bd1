// Keel killed with SIGKILL leaves its replicas running; the next Keel on the same data directory
// finds every one of them, removes it and starts what the stored state wants; a graceful shutdown
// then stops everything and leaves nothing on the host.
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { freePort } from '../support/ports.js';
import { busyboxImage, haproxies, leftovers, NOTHING_LEFT, runtimeMissing, testSubnet } from '../support/runtime.js';
import { scopeOf } from '../../src/runtime/runc.js';
import { waitFor } from '../support/wait.js';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');
const LOCATION = 'aws-us-east-2';

for (const proxy of ['keel', 'haproxy'] as const) describe(`kill -9 of Keel with replicas running, then a restart (KEEL_INGRESS_PROXY=${proxy})`, { skip: runtimeMissing({ haproxy: proxy === 'haproxy' }) }, () => {
  const work = mkdtempSync(join(tmpdir(), 'keel-runtime-restart-'));
  const dataDir = join(work, 'data');
  const root = join(dataDir, 'runtime', 'runc');
  let child: ChildProcess | undefined;
  let port = 0;
  let ingressPort = 0;
  const subnet = testSubnet();

  const start = async () => {
    const proc = spawn(process.execPath, ['--import', 'tsx', CLI, 'serve'], {
      env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_PORT: String(port), KEEL_AUDIT_PORT: '0', KEEL_HOST: '127.0.0.1', KEEL_LOG_LEVEL: 'info', KEEL_RUNTIME: 'runc', KEEL_FIREWALL: 'open', KEEL_INGRESS_PORT: String(ingressPort), KEEL_RUNTIME_SUBNET: subnet, KEEL_RECONCILE_SPEED: '100', KEEL_INGRESS_PROXY: proxy },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    child = proc;
    await new Promise<void>((resolve, reject) => {
      let out = '';
      proc.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (/"msg":"keel is serving"/.test(out)) resolve();
      });
      proc.once('exit', () => reject(new Error(`keel exited before serving: ${out}`)));
    });
    return proc;
  };
  const api = async (method: string, path: string, body?: unknown) => {
    const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, body: (await res.json().catch(() => undefined)) as any };
  };
  const containers = () =>
    (JSON.parse(execFileSync('runc', ['--root', root, 'list', '--format', 'json'], { encoding: 'utf8' }) || '[]') as Array<{ id: string; pid: number; status: string }> | null) ?? [];
  const ready = () => waitFor('the deployment to be ready', async () => (await api('GET', `/org/default/gvc/web/workload/hello/deployment/${LOCATION}`)).body?.status, (s) => s?.ready === true, 60_000);
  const page = () => fetch(`http://127.0.0.1:${ingressPort}/-workload/default/web/hello/`).then(async (r) => [r.status, await r.text()]);

  let stray: ChildProcess | undefined;
  after(async () => {
    if (stray && stray.exitCode === null && stray.signalCode === null) stray.kill('SIGKILL');
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child!.once('exit', resolve));
    }
    for (const c of existsSync(root) ? containers() : []) execFileSync('runc', ['--root', root, 'delete', '--force', c.id]);
    rmSync(work, { recursive: true, force: true });
  });

  test('the restarted Keel removes what the killed one left and runs the replicas again; shutdown leaves nothing', async () => {
    port = await freePort();
    ingressPort = await freePort();
    const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'still here\n' });
    const first = await start();
    assert.equal((await api('POST', '/org/default/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } })).status, 201);
    const created = await api('POST', '/org/default/gvc/web/workload', {
      name: 'hello',
      spec: { type: 'standard', containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 } }], defaultOptions: { autoscaling: { minScale: 2 } } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await ready();
    assert.deepEqual(await page(), [200, 'still here\n']);
    const before = containers();
    assert.equal(before.length, 2);

    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    // Nothing stopped them: the replicas (and HAProxy) outlive the process that started them.
    assert.deepEqual(containers().map((c) => c.status), ['running', 'running']);
    assert.equal(haproxies(dataDir).length > 0, proxy === 'haproxy');
    // What a Keel killed while runc was creating a container leaves: a cgroup of its scope, with a
    // process in it, that runc does not list.
    stray = spawn('sleep', ['3600'], { stdio: 'ignore' });
    const strayCgroups = ['memory', 'pids', 'cpu'].map((c) => `/sys/fs/cgroup/${c}/keel-${scopeOf(dataDir)}-ffffffffffffffff-0`);
    for (const dir of strayCgroups) {
      mkdirSync(dir);
      writeFileSync(join(dir, 'cgroup.procs'), String(stray.pid));
    }
    const strayExit = new Promise((resolve) => stray!.once('exit', (code, signal) => resolve(signal)));

    await start();
    assert.equal(await strayExit, 'SIGKILL', "the stray cgroup's process was killed");
    assert.deepEqual(strayCgroups.filter((dir) => existsSync(dir)), [], 'the stray cgroups are gone');
    // The stored status may still say ready from before: what counts is a replica answering again.
    await waitFor('the page through the ingress again', page, ([status]) => status === 200, 60_000);
    await ready();
    const after = containers();
    assert.equal(after.length, 2);
    for (const old of before) assert.ok(!existsSync(`/proc/${old.pid}`) || !after.some((c) => c.pid === old.pid), `the old process ${old.pid} was removed`);

    child!.kill('SIGTERM');
    await new Promise((resolve) => child!.once('exit', resolve));
    assert.deepEqual(leftovers(dataDir), NOTHING_LEFT);
    assert.deepEqual(haproxies(dataDir), []);
    assert.equal(existsSync(`/run/keel-${scopeOf(dataDir)}`), false, "the ingress socket's directory is gone");
    assert.deepEqual(readdirSync(join(dataDir, 'runtime', 'replicas')), []);
    assert.equal(existsSync(`/sys/class/net/kb${scopeOf(dataDir)}`), false, 'the bridge is gone');
  });

  test('a shutdown right after a delete waits for the deleted replicas to be torn down', async () => {
    await start();
    // The stored status may still say ready from before the restart: the replicas' containers must run.
    await waitFor('both replicas running', async () => containers().filter((c) => c.status === 'running').length, (n) => n === 2, 60_000);
    assert.equal((await api('DELETE', '/org/default/gvc/web/workload/hello')).status, 202);
    // The moment the reconciler has let the replicas go, their teardown is under way: stop then.
    await waitFor('the deployment to be gone', async () => (await api('GET', `/org/default/gvc/web/workload/hello/deployment/${LOCATION}`)).status, (s) => s === 404, 30_000);
    child!.kill('SIGTERM');
    await new Promise((resolve) => child!.once('exit', resolve));
    assert.deepEqual(leftovers(dataDir), NOTHING_LEFT);
    assert.deepEqual(haproxies(dataDir), []);
    assert.deepEqual(readdirSync(join(dataDir, 'runtime', 'replicas')), []);
  });

  test('a delete and a shutdown while the replicas are still starting leave nothing behind', async () => {
    await start();
    const created = await api('POST', '/org/default/gvc/web/workload', {
      name: 'hello',
      spec: { type: 'standard', containers: [{ name: 'httpd', image: busyboxImage(work, 'web2', ['/bin/httpd', '-f', '-p', '8080']), ports: [{ number: 8080, protocol: 'http' }] }], defaultOptions: { autoscaling: { minScale: 2 } } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    // A replica's directory is made once its image is ready: its disk, network and containers come next.
    const replicas = join(dataDir, 'runtime', 'replicas');
    await waitFor('a replica starting', async () => readdirSync(replicas).length, (n) => n > 0, 60_000);
    assert.equal((await api('DELETE', '/org/default/gvc/web/workload/hello')).status, 202);
    await waitFor('the deployment to be gone', async () => (await api('GET', `/org/default/gvc/web/workload/hello/deployment/${LOCATION}`)).status, (s) => s === 404, 30_000);
    child!.kill('SIGTERM');
    await new Promise((resolve) => child!.once('exit', resolve));
    assert.deepEqual(leftovers(dataDir), NOTHING_LEFT);
    assert.deepEqual(readdirSync(replicas), []);
  });
});
