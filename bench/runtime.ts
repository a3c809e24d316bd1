// The runc runtime (KEEL_RUNTIME=runc): time from creating a workload to its first 200 through
// Keel's ingress (p50/p99 over 20 workloads, one replica each, an httpGet readiness probe every
// second), and Keel's memory per running replica with 50 replicas (and the runc processes' own,
// one per container). Needs root, runc, umoci and /bin/busybox; otherwise the section says so.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/support/ports.js';
import { busyboxImage, runtimeMissing } from '../test/support/runtime.js';
import { rssMb, startKeel, type Section } from './harness.js';

const WORKLOADS = 20;
const REPLICAS = 50;
const LOCATION = 'aws-us-east-2';

const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))];


/** The RSS of every `runc run` process (each container's foreground runc), in MB. */
function runcRssMb(): number {
  let total = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (cmd[0].endsWith('runc') && cmd.includes('run')) total += rssMb(Number(pid));
    } catch {
      // gone
    }
  }
  return total;
}

export async function benchRuntime(): Promise<Section> {
  const title = 'Runtime (KEEL_RUNTIME=runc)';
  const missing = runtimeMissing();
  if (missing) return { title, lines: [`Not run: ${missing}.`], figures: {} };
  const work = mkdtempSync(join(tmpdir(), 'keel-bench-runtime-'));
  const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
  const ingressPort = await freePort();
  const keel = await startKeel({ env: { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: String(ingressPort), KEEL_RUNTIME_SUBNET: '10.216.0.0/16', KEEL_RECONCILE_SPEED: '100', KEEL_LOG_LEVEL: 'warn' } });
  const ingress = `http://127.0.0.1:${ingressPort}`;
  const org = keel.org;
  try {
    await keel.call('POST', `/org/${org}/gvc`, { name: 'bench', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
    const spec = (minScale: number, cpu = '50m') => ({
      type: 'standard',
      containers: [{ name: 'web', image, cpu, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 } }],
      defaultOptions: { autoscaling: { minScale, maxScale: minScale } },
    });
    // Apply → first 200, one workload at a time.
    const firsts: number[] = [];
    for (let i = 0; i < WORKLOADS; i++) {
      const begun = Date.now();
      await keel.call('POST', `/org/${org}/gvc/bench/workload`, { name: `w${i}`, spec: spec(1) });
      for (;;) {
        const res = await fetch(`${ingress}/-workload/${org}/bench/w${i}/`).catch(() => undefined);
        if (res?.status === 200) break;
        await res?.arrayBuffer();
        if (Date.now() - begun > 120_000) throw new Error(`w${i} never answered 200 through the ingress`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      firsts.push(Date.now() - begun);
    }
    for (let i = 0; i < WORKLOADS; i++) await keel.call('DELETE', `/org/${org}/gvc/bench/workload/w${i}`);
    await new Promise((resolve) => setTimeout(resolve, 3000));

    // Memory with 50 replicas.
    const idleRss = rssMb(keel.pid);
    const idleRunc = runcRssMb();
    await keel.call('POST', `/org/${org}/gvc/bench/workload`, { name: 'many', spec: spec(REPLICAS) });
    const until = Date.now() + 300_000;
    let ready = 0;
    while (Date.now() < until) {
      const d = await keel.call('GET', `/org/${org}/gvc/bench/workload/many/deployment/${LOCATION}`);
      ready = d.body?.status?.versions?.[0]?.containers?.web?.resources?.replicasReady ?? 0;
      if (ready === REPLICAS) break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const busyRss = rssMb(keel.pid);
    const busyRunc = runcRssMb();
    const perReplicaKeel = (busyRss - idleRss) / REPLICAS;
    const perReplicaRunc = (busyRunc - idleRunc) / REPLICAS;
    await keel.call('DELETE', `/org/${org}/gvc/bench/workload/many`);
    await new Promise((resolve) => setTimeout(resolve, 5000));

    const figures = {
      applyToFirst200P50Ms: quantile(firsts, 0.5),
      applyToFirst200P99Ms: quantile(firsts, 0.99),
      keelMbPerReplica: perReplicaKeel,
      runcMbPerReplica: perReplicaRunc,
      replicasReady: ready,
    };
    return {
      title,
      lines: [
        `| Figure | Value | Goal |`,
        `|---|---|---|`,
        `| apply → first 200 through the ingress, p50 (${WORKLOADS} workloads) | ${figures.applyToFirst200P50Ms} ms | |`,
        `| apply → first 200 through the ingress, p99 | ${figures.applyToFirst200P99Ms} ms | |`,
        `| Keel RSS per running replica (${ready} of ${REPLICAS} ready) | ${perReplicaKeel.toFixed(2)} MB | |`,
        `| runc processes' RSS per replica (one foreground runc per container) | ${perReplicaRunc.toFixed(2)} MB | |`,
        '',
        // busybox httpd closes every connection and forks per request, so load against it measured
        // its own churn: direct and ingress figures swung from 0.9x to 18x between two runs.
        'Ingress throughput against a direct call is not measured yet: it needs a keep-alive server image (busybox httpd closes every connection).',
      ],
      figures,
    };
  } finally {
    await keel.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
