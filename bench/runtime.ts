// The runc runtime (KEEL_RUNTIME=runc): time from creating a workload to its first 200 through
// Keel's ingress (p50/p99 over 20 workloads, one replica each, an httpGet readiness probe every
// second); the ingress's throughput against calling the replica directly, in alternating rounds
// of one run, to a keep-alive server (the host's node in an image of its own): by the workload
// endpoint's Host, which HAProxy in front of the ingress (KEEL_INGRESS_PROXY=haproxy) sends
// straight to the replica, and by the path form, which Keel's own ingress answers behind it, with
// a bare HAProxy (no routing, no headers added) in the same rounds as a reference; and
// Keel's memory per running replica with 50 replicas (and the runc processes' own, one per container).
// Needs root, runc, umoci, haproxy and /bin/busybox; otherwise the section says so.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { scopeOf } from '../src/runtime/runc.js';
import { freePort } from '../test/support/ports.js';
import { busyboxImage, haproxies, runtimeMissing } from '../test/support/runtime.js';
import { cpuSeconds, rssMb, startKeel, type Section } from './harness.js';

const WORKLOADS = 20;
const REPLICAS = 50;
const LOCATION = 'aws-us-east-2';

/** Rounds of the throughput comparison, each a run straight to the replica, by the endpoint's Host, by the path form and through a bare HAProxy. */
const ROUNDS = 5;
const ROUND_SECONDS = Number(process.env.BENCH_SECONDS ?? 8) / 2;
const THROUGHPUT_CONNECTIONS = 16;

const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))];

// A keep-alive HTTP server with a small fixed body; /address answers with the replica's own
// address (the one the connection came in on), which the bench then calls directly.
const SERVER = `const http = require('http');
const body = Buffer.from('hello\\n');
http.createServer((req, res) => {
  if (req.url === '/address') return res.end(req.socket.localAddress);
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length }).end(body);
}).listen(Number(process.env.PORT || 8080));
`;

/**
 * An OCI layout under `root` holding the host's node binary, the shared libraries and loader
 * `ldd` lists for it, and SERVER as /server.js, built with umoci as test/support/runtime.ts's
 * busyboxImage builds its images. Gives the `oci:DIR:TAG` reference.
 */
function nodeServerImage(root: string): string {
  const layout = join(root, 'node-layout');
  const bundle = join(root, 'node-bundle');
  const umoci = (...args: string[]) => execFileSync('umoci', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  umoci('init', '--layout', layout);
  umoci('new', '--image', `${layout}:node`);
  umoci('unpack', '--image', `${layout}:node`, bundle);
  const rootfs = join(bundle, 'rootfs');
  const node = realpathSync(process.execPath);
  const libraries = execFileSync('ldd', [node], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /(\/\S+) \(0x/.exec(line)?.[1])
    .filter((path): path is string => path !== undefined);
  for (const file of [node, ...libraries]) {
    mkdirSync(join(rootfs, dirname(file)), { recursive: true });
    copyFileSync(realpathSync(file), join(rootfs, file));
  }
  writeFileSync(join(rootfs, 'server.js'), SERVER);
  umoci('repack', '--image', `${layout}:node`, bundle);
  umoci('config', '--image', `${layout}:node`, '--config.workingdir', '/', '--config.cmd', node, '--config.cmd', '/server.js');
  rmSync(bundle, { recursive: true, force: true });
  return `oci:${layout}:node`;
}

/**
 * Requests/s of GETs of `path` on `connections` kept-alive connections to `port` of `address` (with
 * Host `host`), for `seconds`: each connection sends its next request when the last answer ends.
 */
async function keepAliveLoad(address: string, port: number, path: string, host: string, seconds: number): Promise<{ perSecond: number; requests: number; failed: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: THROUGHPUT_CONNECTIONS });
  const until = Date.now() + seconds * 1000;
  let done = 0;
  let failed = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const req = request({ host: address, port, path, agent, headers: { host } }, (res) => {
        if (res.statusCode !== 200) failed++;
        res.on('end', resolve).resume();
      });
      req.on('error', () => {
        failed++;
        resolve();
      });
      req.end();
    });
  const begun = Date.now();
  await Promise.all(
    Array.from({ length: THROUGHPUT_CONNECTIONS }, async () => {
      while (Date.now() < until) {
        await one();
        done++;
      }
    }),
  );
  const elapsed = (Date.now() - begun) / 1000;
  agent.destroy();
  return { perSecond: (done - failed) / elapsed, requests: done, failed };
}


/** CPU seconds used so far by the HAProxy processes serving the ingress of the Keel on `dataDir` (master and workers). */
function haproxyCpuSeconds(dataDir: string): number {
  return haproxies(dataDir).reduce((sum, line) => sum + cpuSeconds(Number(line.split(' ')[0])), 0);
}

/**
 * A reference for the ingress's figures: a bare HAProxy on one thread, forwarding every request on
 * `port` of loopback to `address:targetPort` with no routing and no headers added, keeping
 * connections alive on both sides and sharing those to the replica (`http-reuse always`).
 */
async function startHaproxy(dir: string, port: number, address: string, targetPort: number): Promise<ChildProcess> {
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(
    config,
    [
      'global',
      '  nbthread 1',
      '  maxconn 1024',
      'defaults',
      '  mode http',
      '  option http-keep-alive',
      '  http-reuse always',
      '  timeout connect 5s',
      '  timeout client 30s',
      '  timeout server 30s',
      'frontend ingress',
      `  bind 127.0.0.1:${port}`,
      '  default_backend replica',
      'backend replica',
      `  server r ${address}:${targetPort}`,
      '',
    ].join('\n'),
  );
  const proxy = spawn('haproxy', ['-f', config, '-db'], { stdio: ['ignore', 'ignore', 'inherit'] });
  for (const until = Date.now() + 10_000; ; ) {
    const ok = await fetch(`http://127.0.0.1:${port}/`).then(
      async (res) => (await res.arrayBuffer(), res.status === 200),
      () => false,
    );
    if (ok) return proxy;
    if (proxy.exitCode !== null || Date.now() > until) {
      proxy.kill();
      throw new Error(`haproxy did not answer on port ${port} (exit code ${proxy.exitCode})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The RSS of the `runc run` processes (each container's foreground runc) of the Keel on `dataDir`, in MB. */
function runcRssMb(dataDir: string): number {
  const root = join(dataDir, 'runtime', 'runc');
  let total = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (cmd[0].endsWith('runc') && cmd.includes('run') && cmd.includes(root)) total += rssMb(Number(pid));
    } catch {
      // gone
    }
  }
  return total;
}

/** CPU seconds used so far by the containers of the Keel on `dataDir` (their cgroups), 0 where unreadable. */
function containersCpuSeconds(dataDir: string): number {
  const prefix = `keel-${scopeOf(dataDir)}-`;
  let total = 0;
  for (const [root, file] of [['/sys/fs/cgroup/cpuacct', 'cpuacct.usage'], ['/sys/fs/cgroup', 'cpu.stat']]) {
    let names: string[] = [];
    try {
      names = readdirSync(root).filter((n) => n.startsWith(prefix));
    } catch {
      continue;
    }
    for (const name of names) {
      try {
        const text = readFileSync(join(root, name, file), 'utf8');
        total += file === 'cpu.stat' ? Number(/usage_usec (\d+)/.exec(text)?.[1] ?? 0) / 1e6 : Number(text) / 1e9;
      } catch {
        // gone
      }
    }
    if (names.length > 0) break;
  }
  return total;
}

/**
 * Waits until Keel on `dataDir` has torn down every replica (their directories gone), so the next
 * phase starts from nothing running and Keel is not stopped halfway through a teardown.
 */
async function stopped(dataDir: string): Promise<void> {
  const replicas = join(dataDir, 'runtime', 'replicas');
  for (const until = Date.now() + 120_000; readdirSync(replicas).length > 0; ) {
    if (Date.now() > until) throw new Error(`replicas still there two minutes after their workloads were deleted: ${readdirSync(replicas).join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

export async function benchRuntime(): Promise<Section> {
  const title = 'Runtime (KEEL_RUNTIME=runc)';
  const missing = runtimeMissing({ haproxy: true });
  if (missing) return { title, lines: [`Not run: ${missing}.`], figures: {} };
  const work = mkdtempSync(join(tmpdir(), 'keel-bench-runtime-'));
  const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
  const nodeImage = nodeServerImage(work);
  const ingressPort = await freePort();
  const dataDir = join(work, 'keel');
  mkdirSync(dataDir);
  const keel = await startKeel({ dataDir, env: { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PROXY: 'haproxy', KEEL_INGRESS_PORT: String(ingressPort), KEEL_RUNTIME_SUBNET: '10.216.0.0/16', KEEL_RECONCILE_SPEED: '100', KEEL_LOG_LEVEL: 'warn' } });
  const ingress = `http://127.0.0.1:${ingressPort}`;
  const org = keel.org;
  try {
    await keel.call('POST', `/org/${org}/gvc`, { name: 'bench', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
    const spec = (minScale: number, cpu = '50m') => ({
      type: 'standard',
      containers: [{ name: 'web', image, cpu, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 } }],
      defaultOptions: { autoscaling: { minScale, maxScale: minScale } },
      // External inbound is closed by default, as hosted: the bench's client is admitted by its rule.
      firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } },
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
    await stopped(dataDir);

    // Memory with 50 replicas.
    const idleRss = rssMb(keel.pid);
    const idleRunc = runcRssMb(dataDir);
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
    const busyRunc = runcRssMb(dataDir);
    const perReplicaKeel = (busyRss - idleRss) / REPLICAS;
    const perReplicaRunc = (busyRunc - idleRunc) / REPLICAS;
    await keel.call('DELETE', `/org/${org}/gvc/bench/workload/many`);
    await stopped(dataDir);

    // Throughput: one replica with two cores to itself, called straight, through the ingress by
    // the endpoint's Host (HAProxy to the replica) and by the path form (HAProxy, then Keel's
    // ingress) in alternating rounds (which goes first alternates too), so that other work on the
    // machine weighs on every side of each round's ratios alike.
    const echo = {
      type: 'standard',
      containers: [{ name: 'web', image: nodeImage, cpu: '2000m', memory: '512Mi', ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 } }],
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
      firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } },
    };
    await keel.call('POST', `/org/${org}/gvc/bench/workload`, { name: 'echo', spec: echo });
    let address = '';
    for (const begun = Date.now(); !address; ) {
      const res = await fetch(`${ingress}/-workload/${org}/bench/echo/address`).catch(() => undefined);
      if (res?.status === 200) address = await res.text();
      else await res?.arrayBuffer();
      if (Date.now() - begun > 120_000) throw new Error('the echo workload never answered 200 through the ingress');
      if (!address) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const endpoint = new URL((await keel.call('GET', `/org/${org}/gvc/bench/workload/echo`)).body.status.endpoint).host;
    // What each request costs in CPU time, µs: the client (this process), the ingress (HAProxy
    // and Keel, or the bare HAProxy's pid; none for direct calls), the replica.
    const costed = async (via: boolean | number, run: () => Promise<{ perSecond: number; requests: number; failed: number }>) => {
      const ingressCpu = () => (via === true ? cpuSeconds(keel.pid) + haproxyCpuSeconds(dataDir) : via === false ? 0 : cpuSeconds(via));
      const [client, proxyCpu, replica] = [process.cpuUsage(), ingressCpu(), containersCpuSeconds(dataDir)];
      const result = await run();
      const used = process.cpuUsage(client);
      const per = (seconds: number) => (seconds * 1e6) / Math.max(1, result.requests);
      return { ...result, clientUs: per((used.user + used.system) / 1e6), proxyUs: per(ingressCpu() - proxyCpu), replicaUs: per(containersCpuSeconds(dataDir) - replica) };
    };
    type Costed = Awaited<ReturnType<typeof costed>>;
    const barePort = await freePort();
    const bare = await startHaproxy(work, barePort, address, 8080);
    const targets: Array<() => Promise<Costed>> = [
      () => costed(false, () => keepAliveLoad(address, 8080, '/', `${address}:8080`, ROUND_SECONDS)),
      () => costed(true, () => keepAliveLoad('127.0.0.1', ingressPort, '/', endpoint, ROUND_SECONDS)),
      () => costed(true, () => keepAliveLoad('127.0.0.1', ingressPort, `/-workload/${org}/bench/echo/`, '127.0.0.1', ROUND_SECONDS)),
      () => costed(bare.pid!, () => keepAliveLoad('127.0.0.1', barePort, '/', endpoint, ROUND_SECONDS)),
    ];
    const rounds: Array<{ direct: Costed; ingress: Costed; byPath: Costed; bare: Costed; ratio: number; byPathRatio: number; bareRatio: number }> = [];
    try {
      for (const target of targets) await target();
      for (let r = 0; r < ROUNDS; r++) {
        // Which goes first alternates: direct, by Host, by path, bare HAProxy, then the other way round.
        const results: Costed[] = [];
        for (const i of r % 2 === 0 ? targets.keys() : [...targets.keys()].reverse()) results[i] = await targets[i]();
        const [d, i, p, b] = results;
        rounds.push({ direct: d, ingress: i, byPath: p, bare: b, ratio: i.perSecond / d.perSecond, byPathRatio: p.perSecond / d.perSecond, bareRatio: b.perSecond / d.perSecond });
      }
    } finally {
      bare.kill();
    }
    const ratios = rounds.map((r) => r.ratio);
    const byPathRatios = rounds.map((r) => r.byPathRatio);
    const bareRatios = rounds.map((r) => r.bareRatio);
    const median = (pick: (r: (typeof rounds)[number]) => number) => quantile(rounds.map(pick), 0.5);
    const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    await keel.call('DELETE', `/org/${org}/gvc/bench/workload/echo`);
    await stopped(dataDir);

    const figures = {
      applyToFirst200P50Ms: quantile(firsts, 0.5),
      applyToFirst200P99Ms: quantile(firsts, 0.99),
      ingressToDirectRatioMedian: quantile(ratios, 0.5),
      ingressToDirectRatioMean: mean(ratios),
      ingressToDirectRatioMin: Math.min(...ratios),
      ingressToDirectRatioMax: Math.max(...ratios),
      bareHaproxyToDirectRatioMedian: quantile(bareRatios, 0.5),
      bareHaproxyToDirectRatioMean: mean(bareRatios),
      bareHaproxyToDirectRatioMin: Math.min(...bareRatios),
      bareHaproxyToDirectRatioMax: Math.max(...bareRatios),
      byPathToDirectRatioMedian: quantile(byPathRatios, 0.5),
      byPathToDirectRatioMin: Math.min(...byPathRatios),
      byPathToDirectRatioMax: Math.max(...byPathRatios),
      directRequestsPerSecondMedian: median((r) => r.direct.perSecond),
      ingressRequestsPerSecondMedian: median((r) => r.ingress.perSecond),
      ingressCpuUsPerRequest: median((r) => r.ingress.proxyUs),
      byPathCpuUsPerRequest: median((r) => r.byPath.proxyUs),
      directReplicaCpuUsPerRequest: median((r) => r.direct.replicaUs),
      directClientCpuUsPerRequest: median((r) => r.direct.clientUs),
      ingressReplicaCpuUsPerRequest: median((r) => r.ingress.replicaUs),
      ingressClientCpuUsPerRequest: median((r) => r.ingress.clientUs),
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
        `| ingress throughput ÷ direct, by the endpoint's Host (HAProxy to the replica): median of ${ROUNDS} rounds (min–max); mean | ${figures.ingressToDirectRatioMedian.toFixed(2)} (${figures.ingressToDirectRatioMin.toFixed(2)}–${figures.ingressToDirectRatioMax.toFixed(2)}); ${figures.ingressToDirectRatioMean.toFixed(2)} | ≥ 0.7 |`,
        `| ingress throughput ÷ direct, by the path form (HAProxy, then Keel's ingress): median (min–max) | ${figures.byPathToDirectRatioMedian.toFixed(2)} (${figures.byPathToDirectRatioMin.toFixed(2)}–${figures.byPathToDirectRatioMax.toFixed(2)}) | |`,
        `| reference: a bare HAProxy (one thread, no routing, no headers added) ÷ direct: median (min–max); mean | ${figures.bareHaproxyToDirectRatioMedian.toFixed(2)} (${figures.bareHaproxyToDirectRatioMin.toFixed(2)}–${figures.bareHaproxyToDirectRatioMax.toFixed(2)}); ${figures.bareHaproxyToDirectRatioMean.toFixed(2)} | |`,
        '',
        `Throughput: GETs of a 6-byte body from one replica (the host's node, a keep-alive server, 2 CPUs), by a keep-alive client`,
        `in the bench's process on ${THROUGHPUT_CONNECTIONS} connections, in each round ${ROUND_SECONDS} s to the replica's address, ${ROUND_SECONDS} s to the ingress by the`,
        `endpoint's Host, ${ROUND_SECONDS} s to the ingress by the path form and ${ROUND_SECONDS} s through a bare HAProxy to the replica's address`,
        "(which goes first alternates). Keel runs with KEEL_INGRESS_PROXY=haproxy: HAProxy (one thread) serves the ingress port.",
        "Client, ingress and replica share the machine's cores. CPU time per request",
        "(µs, user + system) of the client, of the ingress (HAProxy's processes and Keel's) and of the replica's container shows where the time goes.",
        '',
        '| Round | direct req/s | by Host req/s (÷ direct) | by path req/s (÷ direct) | bare HAProxy req/s (÷ direct) | direct µs/req: client, replica | by Host µs/req: client, ingress, replica | by path µs/req: client, ingress, replica | bare HAProxy µs/req: client, HAProxy, replica | failed |',
        '|---|---|---|---|---|---|---|---|---|---|',
        ...rounds.map((r, i) => {
          const cost = (c: Costed) => `${c.clientUs.toFixed(0)}, ${c.proxyUs.toFixed(0)}, ${c.replicaUs.toFixed(0)}`;
          return `| ${i + 1} | ${r.direct.perSecond.toFixed(0)} | ${r.ingress.perSecond.toFixed(0)} (${r.ratio.toFixed(2)}) | ${r.byPath.perSecond.toFixed(0)} (${r.byPathRatio.toFixed(2)}) | ${r.bare.perSecond.toFixed(0)} (${r.bareRatio.toFixed(2)}) | ${r.direct.clientUs.toFixed(0)}, ${r.direct.replicaUs.toFixed(0)} | ${cost(r.ingress)} | ${cost(r.byPath)} | ${cost(r.bare)} | ${r.direct.failed + r.ingress.failed + r.byPath.failed + r.bare.failed} |`;
        }),
      ],
      figures,
    };
  } finally {
    await keel.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
