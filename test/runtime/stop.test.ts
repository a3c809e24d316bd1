// Stopping Keel with replicas running, started the ways a user starts it (`node dist/src/cli.js
// serve`, `npm start`, `npx keel serve`) and stopped the ways a user, `timeout`, a cancelled CI job
// or systemd stop it (SIGTERM or SIGINT to Keel, to the wrapper, or to the whole process group):
// Keel says "stopped" and leaves nothing on the host: no container, network namespace, interface,
// mount, cgroup, bridge or HAProxy, and no process of its group. After a kill -9 of the whole group,
// the next Keel on the data directory removes what the first left.
// These run the built Keel (dist/), as a user does: it is built first when missing or stale, as
// `npm ci` does (`scripts/build-if-stale.mjs`).
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { scopeOf } from '../../src/runtime/runc.js';
import { freePort } from '../support/ports.js';
import { busyboxImage, haproxies, leftovers, NOTHING_LEFT, runtimeMissing, testSubnet } from '../support/runtime.js';
import { waitFor } from '../support/wait.js';

const ROOT = join(import.meta.dirname, '..', '..');
const LOCATION = 'aws-us-east-2';

type Way = 'node' | 'npm start' | 'npx';
const COMMANDS: Record<Way, [string, string[]]> = {
  node: [process.execPath, ['dist/src/cli.js', 'serve']],
  'npm start': ['npm', ['start']],
  npx: ['npx', ['keel', 'serve']],
};

/** Ids of the processes in process group `group`. */
function groupMembers(group: number): number[] {
  return readdirSync('/proc')
    .filter((pid) => /^\d+$/.test(pid))
    .filter((pid) => {
      try {
        // pid (comm) state ppid pgrp …; comm may hold spaces, so count from the last ')'.
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === group;
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe('stopping Keel with replicas running under runc', { skip: runtimeMissing({ haproxy: true }) }, () => {
  const work = mkdtempSync(join(tmpdir(), 'keel-stop-'));
  const dataDir = join(work, 'data');
  const subnet = testSubnet();
  const started: ChildProcess[] = [];
  let image = '';

  before(() => {
    const build = spawnSync(process.execPath, ['scripts/build-if-stale.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(build.status, 0, `building dist/ failed:\n${build.stdout}\n${build.stderr}`);
    // The shell traps SIGTERM, so a replica stops at once when asked (as a well-behaved server does).
    image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'trap "exit 0" TERM; httpd -f -p 8080 -h /www & wait'], { 'www/index.html': 'up\n' });
  });

  after(() => {
    for (const child of started) {
      if (groupMembers(child.pid!).length > 0) process.kill(-child.pid!, 'SIGKILL');
    }
    const root = join(dataDir, 'runtime', 'runc');
    for (const id of leftovers(dataDir).containers) spawnSync('runc', ['--root', root, 'delete', '--force', id]);
    rmSync(work, { recursive: true, force: true });
  });

  /** Starts Keel `way` in a process group of its own, with the workload `hello` serving (created on the first start). */
  async function start(way: Way, proxy: 'keel' | 'haproxy' = 'keel') {
    const [port, ingressPort] = [await freePort(), await freePort()];
    const [command, args] = COMMANDS[way];
    const child = spawn(command, args, {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_PORT: String(port), KEEL_AUDIT_PORT: '0', KEEL_HOST: '127.0.0.1', KEEL_LOG_LEVEL: 'info', KEEL_RUNTIME: 'runc', KEEL_FIREWALL: 'open', KEEL_INGRESS_PORT: String(ingressPort), KEEL_INGRESS_PROXY: proxy, KEEL_RUNTIME_SUBNET: subnet, KEEL_RECONCILE_SPEED: '100', KEEL_DATABASE_URL: '' },
    });
    started.push(child);
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const serving = await waitFor('Keel to serve', async () => /"pid":(\d+).*"msg":"keel is serving"/.exec(output), (m) => m !== null || child.exitCode !== null, 60_000);
    assert.ok(serving, `keel exited before serving: ${output}`);
    const keel = Number(serving[1]);
    const runtimeLine = `keel: runtime runc: replicas run as containers; workload endpoints on http://127.0.0.1:${ingressPort}${proxy === 'haproxy' ? ' (HAProxy in front)' : ''}\n`;
    await waitFor('the start-up line naming the runtime and the ingress', async () => output, (out) => out.includes(runtimeLine), 10_000);
    const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
    const api = (method: string, path: string, body?: unknown) =>
      fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    if ((await api('GET', '/org/default/gvc/web')).status === 404) {
      assert.equal((await api('POST', '/org/default/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } })).status, 201);
      const created = await api('POST', '/org/default/gvc/web/workload', { name: 'hello', spec: { type: 'standard', containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }] }], defaultOptions: { autoscaling: { minScale: 1 } } } });
      assert.equal(created.status, 201, await created.text());
    }
    await waitFor(
      'the replica to serve through the ingress',
      () => fetch(`http://127.0.0.1:${ingressPort}/-workload/default/web/hello/`).then(async (r) => `${r.status} ${await r.text()}`, (err) => String(err)),
      (answer) => answer === '200 up\n',
      60_000,
    );
    assert.equal(leftovers(dataDir).containers.length, 1, 'one replica runs');
    if (proxy === 'haproxy') assert.ok(haproxies(dataDir).length > 0, 'HAProxy serves the ingress');
    return { child, keel, output: () => output };
  }

  /** Everything Keel had on the host, once every process of its group has ended. */
  async function afterStop(group: number) {
    await waitFor('every process of the group to end', async () => groupMembers(group), (pids) => pids.length === 0, 60_000);
    const scope = scopeOf(dataDir);
    return { leftovers: leftovers(dataDir), bridge: existsSync(`/sys/class/net/kb${scope}`), ingressSocketDir: existsSync(`/run/keel-${scope}`), haproxy: haproxies(dataDir), replicaDirs: readdirSync(join(dataDir, 'runtime', 'replicas')) };
  }

  const cases: Array<{ way: Way; signal: NodeJS.Signals; to: 'process' | 'group'; proxy?: 'haproxy' }> = [
    { way: 'node', signal: 'SIGTERM', to: 'process' },
    { way: 'node', signal: 'SIGTERM', to: 'group' },
    { way: 'npm start', signal: 'SIGTERM', to: 'process' },
    { way: 'npm start', signal: 'SIGTERM', to: 'group', proxy: 'haproxy' },
    { way: 'npm start', signal: 'SIGINT', to: 'group' },
    { way: 'npx', signal: 'SIGTERM', to: 'process' },
    { way: 'npx', signal: 'SIGTERM', to: 'group', proxy: 'haproxy' },
    { way: 'npx', signal: 'SIGINT', to: 'group' },
  ];
  for (const { way, signal, to, proxy } of cases) {
    test(`${way === 'npx' ? 'npx keel serve' : way === 'node' ? 'node dist/src/cli.js serve' : way}${proxy ? ' (HAProxy in front)' : ''}, ${signal} to the ${to}: Keel says stopped and leaves nothing`, async () => {
      const { child, keel, output } = await start(way, proxy);
      process.kill(to === 'group' ? -child.pid! : child.pid!, signal);
      const left = await afterStop(child.pid!);
      assert.match(output(), new RegExp(`"pid":${keel},[^\\n]*"msg":"stopped"`), `Keel printed its "stopped" line:\n${output().slice(-3000)}`);
      assert.deepEqual(left, { leftovers: NOTHING_LEFT, bridge: false, ingressSocketDir: false, haproxy: [], replicaDirs: [] });
    });
  }

  test('kill -9 of the whole group, then a start on the same data directory: the old replicas go, and a stop leaves nothing', async () => {
    const first = await start('npx', 'haproxy');
    const before = leftovers(dataDir).containers;
    process.kill(-first.child.pid!, 'SIGKILL');
    await waitFor('the group to end', async () => groupMembers(first.child.pid!).filter((pid) => pid === first.keel), (pids) => pids.length === 0, 30_000);
    assert.deepEqual(leftovers(dataDir).containers, before, 'nothing stopped the replica: it outlives a killed Keel');

    const second = await start('node', 'haproxy');
    process.kill(-second.child.pid!, 'SIGTERM');
    const left = await afterStop(second.child.pid!);
    assert.match(second.output(), /"msg":"stopped"/);
    assert.deepEqual(left, { leftovers: NOTHING_LEFT, bridge: false, ingressSocketDir: false, haproxy: [], replicaDirs: [] });
  });
});
