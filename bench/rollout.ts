// Rollout duration under the runc runtime (KEEL_RUNTIME=runc): a standard workload of 4 replicas
// (busybox httpd, a TCP readiness probe every second) goes from one version to the next by a
// change of its env; the time from the PUT of the new spec to its deployment's status saying the
// new version is ready on all 4 replicas (the older ones gone), as a client polling the
// deployment sees it. Several rollouts in a row, one after the other; the hosted rollout defaults
// (maxSurgeReplicas and maxUnavailableReplicas 25%, so one of each) and a one-second scale policy.
// Needs root, runc, umoci and /bin/busybox; otherwise the section says so.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/support/ports.js';
import { busyboxImage, runtimeMissing } from '../test/support/runtime.js';
import { startKeel, type Section } from './harness.js';

const REPLICAS = 4;
const ROLLOUTS = 5;
const LOCATION = 'aws-us-east-2';
const POLL_MS = 50;

export async function benchRollout(): Promise<Section> {
  const title = 'Rollout (KEEL_RUNTIME=runc)';
  const missing = runtimeMissing();
  if (missing) return { title, lines: [`Not run: ${missing}.`], figures: {} };
  const work = mkdtempSync(join(tmpdir(), 'keel-bench-rollout-'));
  const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
  const dataDir = join(work, 'keel');
  mkdirSync(dataDir);
  const keel = await startKeel({ dataDir, env: { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: String(await freePort()), KEEL_RUNTIME_SUBNET: '10.217.0.0/16', KEEL_RECONCILE_SPEED: '100', KEEL_LOG_LEVEL: 'warn' } });
  const org = keel.org;
  const workload = `/org/${org}/gvc/bench/workload/roll`;
  const spec = (version: number) => ({
    type: 'standard',
    containers: [{ name: 'web', image, env: [{ name: 'VERSION', value: `v${version}` }], ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } }],
    defaultOptions: { autoscaling: { minScale: REPLICAS, maxScale: REPLICAS } },
  });
  /** Polls the deployment until the workload's `version` is ready on every replica; ms from `begun`. */
  const rolledOut = async (version: number, begun: number): Promise<number> => {
    for (;;) {
      const d = (await keel.call('GET', `${workload}/deployment/${LOCATION}`)).body;
      const current = d?.status?.versions?.[0];
      if (d?.status?.ready === true && current?.workload === version && current?.containers?.web?.resources?.replicasReady === REPLICAS) return Date.now() - begun;
      if (Date.now() - begun > 300_000) throw new Error(`version ${version} not rolled out in 5 minutes: ${JSON.stringify(d?.status).slice(0, 1000)}`);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  };
  try {
    await keel.call('POST', `/org/${org}/gvc`, { name: 'bench', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
    const created = await keel.call('POST', `/org/${org}/gvc/bench/workload`, { name: 'roll', spec: spec(1) });
    if (created.status !== 201) throw new Error(`creating the workload: ${created.status} ${JSON.stringify(created.body)}`);
    const first = await rolledOut(1, Date.now());
    const took: number[] = [];
    for (let i = 0; i < ROLLOUTS; i++) {
      const version = i + 2;
      const begun = Date.now();
      const put = await keel.call('PUT', workload, { name: 'roll', spec: spec(version) });
      if (put.status !== 200) throw new Error(`PUT of v${version}: ${put.status} ${JSON.stringify(put.body)}`);
      took.push(await rolledOut(version, begun));
    }
    const sorted = [...took].sort((a, b) => a - b);
    const figures = {
      createToReadyMs: first,
      rolloutMedianMs: sorted[Math.floor(sorted.length / 2)],
      rolloutMinMs: sorted[0],
      rolloutMaxMs: sorted[sorted.length - 1],
    };
    return {
      title,
      lines: [
        `| Figure | Value | Goal |`,
        `|---|---|---|`,
        `| create → v1 ready on all ${REPLICAS} replicas | ${first} ms | |`,
        `| rollout, PUT of the next version → it ready on all ${REPLICAS} (older ones gone): median of ${ROLLOUTS} (min–max) | ${figures.rolloutMedianMs} ms (${figures.rolloutMinMs}–${figures.rolloutMaxMs}) | |`,
        '',
        `Each rollout: ${took.map((ms, i) => `v${i + 1}→v${i + 2} ${ms} ms`).join(', ')}. A standard workload of ${REPLICAS} replicas (busybox httpd,`,
        'a tcpSocket readiness probe every second), the hosted rollout defaults (25% surge and unavailable: one replica of each), a new',
        `version by a change of one env value; the bench polls the deployment every ${POLL_MS} ms, so the figure includes the reconciler's`,
        "passes that write its status. A new replica counts once runc has started it and its probe passed (at most a second after it listens).",
      ],
      figures,
    };
  } finally {
    await keel.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
