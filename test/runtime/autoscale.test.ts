// Autoscaling under the runc runtime, as a user sees it through the cpln CLI and the workload's
// endpoint: a serverless workload with minScale 0 (in its location's localOptions) runs nothing
// while idle, a request wakes it (held at the ingress until a replica is ready), it goes back to
// zero after scaleToZeroDelay, and concurrent requests scale it up to maxScale and never past it.
// Misuse: a flood of requests to a workload whose replica never becomes ready gets bounded 503s,
// not a hang.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
/** The shortest scaleToZeroDelay the API accepts. */
const DELAY_S = 30;

const CGI = {
  'www/index.html': 'awake\n',
  'www/cgi-bin/slow': '#!/bin/sh\nsleep 3\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nhostname\n',
};

describe('autoscaling and scale to zero (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  const apply = async (workload: Record<string, unknown>) => {
    const file = join(work, `${String(workload.name)}.json`);
    writeFileSync(file, JSON.stringify({ kind: 'workload', ...workload }));
    await rt.run(['apply', '--file', file]);
  };
  const replicas = async (workload: string) => JSON.parse((await rt.run(['workload', 'get-replicas', workload, '--location', LOCATION, '--output', 'json'])).stdout).items as string[];
  /** Samples the deployment's replica count and the containers runc runs until `stop` resolves: the most of each. */
  const most = async (workload: string, stop: Promise<unknown>) => {
    let done = false;
    void stop.finally(() => (done = true));
    let listed = 0;
    let containers = 0;
    while (!done) {
      listed = Math.max(listed, ((await rt.deployment(workload)).status?.internal?.replicas ?? []).length);
      containers = Math.max(containers, leftovers(rt.keel.config.dataDir).containers.length);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return { listed, containers };
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-autoscale-'));
    image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'chmod +x /www/cgi-bin/*; exec httpd -f -p 8080 -h /www'], CGI);
    rt = await startRuntimeKeel({ cliReachesIngress: true });
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('minScale 0: no replica while idle, a request wakes one, and after scaleToZeroDelay it is gone again', async () => {
    await apply({
      name: 'lazy',
      spec: {
        type: 'serverless',
        containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } }],
        // The location's own options are the ones that count there.
        defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
        localOptions: [{ location: LOCATION, timeoutSeconds: 30, autoscaling: { metric: 'concurrency', target: 1, minScale: 0, maxScale: 3, scaleToZeroDelay: DELAY_S } }],
      },
    });
    // Scaled to zero, the deployment is ready, as the hosted platform reports it.
    const idle = await waitFor('the deployment to be ready', () => rt.deployment('lazy'), (d) => d.status?.ready === true, 30_000);
    assert.deepEqual(idle.status.internal.replicas, []);
    assert.equal(idle.status.versions[0].containers.httpd.resources.replicas, 0);
    assert.deepEqual(await replicas('lazy'), []);
    assert.deepEqual(leftovers(rt.keel.config.dataDir).containers, []);

    const cold = await rt.get('/-workload/acme/web/lazy/index.html');
    assert.equal(cold.status, 200, cold.body);
    assert.equal(cold.body, 'awake\n');
    const served = Date.now();
    console.log(`# cold start: ${cold.ms} ms`);
    assert.equal((await replicas('lazy')).length, 1);
    assert.equal((await rt.deployment('lazy')).status.ready, true);
    const warm = await rt.get('/-workload/acme/web/lazy/index.html');
    assert.equal(warm.status, 200);

    await waitFor('the workload to scale back to zero', () => replicas('lazy'), (r) => r.length === 0, (DELAY_S + 30) * 1000);
    const idleFor = Date.now() - served;
    assert.ok(idleFor >= DELAY_S * 1000 - 1000, `scaled to zero after ${idleFor} ms, before scaleToZeroDelay (${DELAY_S} s)`);
    await waitFor('its containers to be gone', async () => leftovers(rt.keel.config.dataDir).containers, (c) => c.length === 0, 30_000);
    const after = await rt.deployment('lazy');
    assert.equal(after.status.ready, true, JSON.stringify(after.status));
    assert.equal(after.status.versions[0].containers.httpd.resources.replicas, 0);
  });

  test('a flood of requests to a workload that never becomes ready: bounded 503s, and never more than maxScale replicas', async () => {
    await apply({
      name: 'broken',
      spec: {
        type: 'serverless',
        // Nothing listens on 9999: the readiness probe never passes.
        containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 9999 }, periodSeconds: 1 } }],
        defaultOptions: { timeoutSeconds: 3, autoscaling: { metric: 'concurrency', target: 1, minScale: 0, maxScale: 2, scaleToZeroDelay: DELAY_S } },
      },
    });
    await waitFor('the deployment to be ready at zero', () => rt.deployment('broken'), (d) => d.status?.ready === true, 30_000);
    const started = Date.now();
    const flood = Promise.all(Array.from({ length: 150 }, () => rt.get('/-workload/acme/web/broken/')));
    const seen = most('broken', flood);
    const answers = await flood;
    const took = Date.now() - started;
    assert.ok(took < 15_000, `the flood took ${took} ms to be answered`);
    assert.ok(answers.every((a) => a.status === 503), JSON.stringify(answers.filter((a) => a.status !== 503)));
    const messages = answers.map((a) => JSON.parse(a.body) as { status: number; message: string });
    assert.ok(messages.every((m) => m.status === 503));
    const waited = messages.filter((m) => /became ready within 3 s/.test(m.message)).length;
    const refused = messages.filter((m) => /requests already wait for one/.test(m.message)).length;
    assert.equal(waited + refused, 150, JSON.stringify([...new Set(messages.map((m) => m.message))]));
    assert.ok(waited <= 100, `${waited} requests were held`);
    assert.ok(refused >= 50, `${refused} requests were refused at once`);
    const slowestRefused = Math.max(...answers.filter((a) => /already wait/.test(a.body)).map((a) => a.ms));
    const fastestWaited = Math.min(...answers.filter((a) => /became ready/.test(a.body)).map((a) => a.ms));
    assert.ok(slowestRefused < fastestWaited, `a request past the bound waited (${slowestRefused} ms; the held ones ${fastestWaited} ms)`);
    assert.ok(fastestWaited >= 2_900, `a held request was answered after ${fastestWaited} ms, before timeoutSeconds`);
    const { listed, containers } = await seen;
    assert.ok(listed <= 2, `the deployment listed ${listed} replicas, more than maxScale`);
    assert.ok(containers <= 2, `runc ran ${containers} containers, more than maxScale`);
    // The deployment says why it cannot serve.
    const d = await waitFor('the deployment to say why', () => rt.deployment('broken'), (x) => /Readiness probe/.test(x.status?.message ?? ''), 30_000);
    assert.equal(d.status.ready, false);
    await rt.run(['workload', 'delete', 'broken']);
    await waitFor('its containers to be gone', async () => leftovers(rt.keel.config.dataDir).containers, (c) => c.length === 0, 30_000);
  });

  test('concurrent requests scale the workload up to maxScale (target 1), never past it', async () => {
    const burst = Promise.all(Array.from({ length: 6 }, () => rt.get('/-workload/acme/web/lazy/cgi-bin/slow')));
    const seen = most('lazy', burst);
    const up = await waitFor('three replicas', () => replicas('lazy'), (r) => r.length === 3, 60_000);
    assert.equal(new Set(up).size, 3);
    const answers = await burst;
    assert.deepEqual(
      answers.map((a) => a.status),
      answers.map(() => 200),
      JSON.stringify(answers),
    );
    const { listed, containers } = await seen;
    assert.equal(listed, 3, 'the deployment listed more replicas than maxScale');
    assert.ok(containers <= 3, `runc ran ${containers} containers, more than maxScale`);
    assert.ok((await replicas('lazy')).length <= 3);
  });

  test('deleting the workload leaves nothing behind, and its endpoint answers 404', async () => {
    await rt.run(['workload', 'delete', 'lazy']);
    await waitFor('nothing to be left on the host', async () => leftovers(rt.keel.config.dataDir), (l) => JSON.stringify(l) === JSON.stringify(NOTHING_LEFT), 30_000);
    await waitFor('the endpoint to be gone', () => rt.get('/-workload/acme/web/lazy/'), (r) => r.status === 404, 30_000);
  });
});
