// Rollouts under runc, driven with the official CLI: a new version rolls out within
// rolloutOptions' surge while the ingress keeps answering; a version that never becomes ready
// leaves the old one serving and says which probe fails; preStop runs before SIGTERM, what a
// replica prints after SIGTERM reaches its logs, and the grace period is honoured.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, leftovers, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

describe('rollouts under runc', { skip: runtimeMissing() }, () => {
  let rk: RuntimeKeel;
  let work: string;
  let web: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-rollouts-'));
    rk = await startRuntimeKeel({ settings: { maxTerminationGraceSeconds: 900 } });
    // Serves its VERSION at / (and nothing at /healthz).
    web = busyboxImage(work, 'web', ['/bin/sh', '-c', 'mkdir -p /tmp/www && echo "$VERSION" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www']);
  });
  after(async () => {
    await rk?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const apply = async (name: string, spec: Record<string, any>, tags: Record<string, string> = {}) => {
    const file = join(work, `${name}.json`);
    writeFileSync(file, JSON.stringify({ kind: 'workload', name, tags, spec }));
    await rk.run(['apply', '--file', file, '--gvc', 'web']);
  };
  const webSpec = (version: string, extra: Record<string, any> = {}) => ({
    type: 'standard',
    containers: [{ name: 'main', image: web, env: [{ name: 'VERSION', value: version }], ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 }, ...extra }],
    defaultOptions: { autoscaling: { minScale: 4, maxScale: 4 } },
    rolloutOptions: { maxSurgeReplicas: '1', maxUnavailableReplicas: '0', terminationGracePeriodSeconds: 2 },
  });
  const runtime = () => rk.keel.app.core.runtime as unknown as { replicasOf(d: object): Array<{ name: string; ready: boolean }> };
  const running = (workload: string) => runtime().replicasOf({ org: 'acme', gvc: 'web', workload, location: LOCATION });
  const served = async (workload: string) => {
    const r = await fetch(`${rk.ingress}/-workload/acme/web/${workload}/`).catch((err: Error) => ({ status: 0, text: async () => err.message }));
    return { status: r.status, body: (await r.text()).trim() };
  };

  test('v1 → v2 of 4 replicas: every request answered, never more than 4 + surge replicas', async () => {
    await apply('roll', webSpec('v1'));
    await waitFor('v1 to be ready', () => rk.deployment('roll'), (d) => d?.status?.ready === true && running('roll').length === 4, 90_000);
    let stop = false;
    const failed: string[] = [];
    const answers = new Set<string>();
    let most = 0;
    const traffic = (async () => {
      while (!stop) {
        const r = await served('roll');
        if (r.status !== 200) failed.push(`${r.status} ${r.body}`);
        else answers.add(r.body);
      }
    })();
    const sampling = setInterval(() => (most = Math.max(most, running('roll').length)), 20);
    const begun = Date.now();
    await apply('roll', webSpec('v2'));
    await waitFor('v2 to roll out', async () => ({ d: await rk.deployment('roll'), r: running('roll') }), ({ d, r }) => d?.status?.ready === true && d.status.versions?.[0]?.workload === 2 && r.length === 4, 120_000);
    const took = Date.now() - begun;
    // Whatever answers now is v2.
    for (let i = 0; i < 8; i++) assert.equal((await served('roll')).body, 'v2');
    stop = true;
    await traffic;
    clearInterval(sampling);
    assert.deepEqual(failed, [], 'no request failed during the rollout');
    assert.deepEqual([...answers].sort(), ['v1', 'v2'], 'both versions served during the rollout');
    assert.ok(most <= 5, `at most 4 + 1 replicas at once, saw ${most}`);
    assert.ok(most >= 4);
    console.log(`# rollout of 4 replicas took ${took} ms`);
  });

  test('a v2 that never becomes ready leaves v1 serving, and the deployment says which probe fails', async () => {
    const spec = webSpec('v3', { readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1, failureThreshold: 1 } });
    await apply('roll', spec);
    const d = await waitFor('the deployment to name the failing probe', () => rk.deployment('roll'), (x) => /Readiness probe of container main failed: HTTP GET \/healthz on port 8080 answered 404/.test(JSON.stringify(x?.status?.versions ?? [])), 60_000);
    assert.ok(d.status.ready, `the deployment still serves: ${JSON.stringify(d.status)}`);
    // v2 keeps serving on all of its replicas, with one v3 surge replica that is not ready.
    for (let i = 0; i < 12; i++) assert.deepEqual(await served('roll'), { status: 200, body: 'v2' });
    const replicas = running('roll');
    assert.equal(replicas.length, 5, JSON.stringify(replicas));
    assert.equal(replicas.filter((r) => r.ready).length, 4);
    // Another update while the bad one rolls: v4, healthy, takes over.
    await apply('roll', webSpec('v4'));
    await waitFor('v4 to roll out', async () => ({ d: await rk.deployment('roll'), r: running('roll') }), ({ d, r }) => d?.status?.ready === true && r.length === 4 && r.every((x) => x.ready), 120_000);
    for (let i = 0; i < 8; i++) assert.equal((await served('roll')).body, 'v4');
  });

  test('preStop runs before SIGTERM and what the replica prints after SIGTERM reaches its logs', async () => {
    const image = busyboxImage(work, 'polite', ['/bin/sh', '-c', "trap 'echo got SIGTERM; sleep 1; echo said goodbye after SIGTERM; exit 0' TERM; echo started; while true; do sleep 0.2; done"]);
    await apply('polite', {
      type: 'standard',
      containers: [{ name: 'main', image, lifecycle: { preStop: { exec: { command: ['/bin/sh', '-c', 'echo preStop ran > /proc/1/fd/1'] } } } }],
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
      rolloutOptions: { terminationGracePeriodSeconds: 20 },
    });
    await waitFor('polite to be ready', () => rk.deployment('polite'), (d) => d?.status?.ready === true, 60_000);
    await rk.run(['workload', 'delete', 'polite']);
    const logs = await waitFor(
      'its last words in the logs',
      async () => (await rk.run(['logs', '{gvc="web", workload="polite"}', '--limit', '0'])).stdout,
      (out) => out.includes('said goodbye after SIGTERM'),
      60_000,
    );
    const order = ['started', 'preStop ran', 'got SIGTERM', 'said goodbye after SIGTERM'].map((l) => logs.indexOf(l));
    assert.ok(order.every((i, n) => i >= 0 && (n === 0 || i > order[n - 1])), `in order: ${logs}`);
  });

  test('a process that ignores SIGTERM is killed after the grace period, not before', async () => {
    const image = busyboxImage(work, 'stubborn', ['/bin/sh', '-c', "trap '' TERM; echo started; while true; do sleep 0.2; done"]);
    await apply('stubborn', {
      type: 'standard',
      containers: [{ name: 'main', image }],
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
      rolloutOptions: { terminationGracePeriodSeconds: 4 },
    });
    await waitFor('stubborn to be ready', () => rk.deployment('stubborn'), (d) => d?.status?.ready === true, 60_000);
    // runc list fails when a container is deleted while it lists (another test's replicas going): such a read counts as no change.
    const containers = () => {
      try {
        return leftovers(rk.keel.config.dataDir).containers.length;
      } catch {
        return undefined;
      }
    };
    const before = await waitFor('the containers', async () => containers(), (n) => n !== undefined);
    const begun = Date.now();
    await rk.run(['workload', 'delete', 'stubborn']);
    await waitFor('its container to be killed', async () => containers(), (n) => n !== undefined && n < before!, 30_000);
    const took = Date.now() - begun;
    assert.ok(took >= 3_500, `killed after ${took} ms, before its grace period of 4 s`);
    assert.ok(took < 15_000, `killed only after ${took} ms`);
  });

  test("as an attacker: an hour's grace period (the most hosted allows) holds the host no longer than the operator's bound", async () => {
    await rk.close();
    rk = await startRuntimeKeel({ settings: { maxTerminationGraceSeconds: 3 } });
    const image = busyboxImage(work, 'squatter', ['/bin/sh', '-c', "trap '' TERM; echo started; while true; do sleep 0.2; done"]);
    await apply('squatter', {
      type: 'standard',
      containers: [{ name: 'main', image }],
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
      rolloutOptions: { terminationGracePeriodSeconds: 3600 },
    }, { 'cpln/relaxGracePeriodMax': 'true' });
    await waitFor('squatter to be ready', () => rk.deployment('squatter'), (d) => d?.status?.ready === true, 60_000);
    await rk.run(['workload', 'delete', 'squatter']);
    await waitFor('its container to be gone, after the bound and not an hour', async () => {
      try {
        return leftovers(rk.keel.config.dataDir).containers.length;
      } catch {
        return undefined;
      }
    }, (n) => n === 0, 30_000);
  });
});
