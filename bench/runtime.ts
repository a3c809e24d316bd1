// The runc runtime (KEEL_RUNTIME=runc): time from creating a workload to its first 200 through
// Keel's ingress (p50/p99 over 20 workloads, one replica each, an httpGet readiness probe every
// second); the ingress's throughput against calling the replica directly, in alternating rounds
// of one run, to a keep-alive server (the host's node in an image of its own), with HAProxy in the
// same rounds as a reference for what a proxy in C reaches on the machine; and Keel's memory
// per running replica with 50 replicas (and the runc processes' own, one per container).
// Needs root, runc, umoci and /bin/busybox; otherwise the section says so.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { scopeOf } from '../src/runtime/runc.js';
import { freePort } from '../test/support/ports.js';
import { busyboxImage, runtimeMissing } from '../test/support/runtime.js';
import { cpuSeconds, rssMb, startKeel, type Section } from './harness.js';

const WORKLOADS = 20;
const REPLICAS = 50;
const LOCATION = 'aws-us-east-2';

/** Rounds of the throughput comparison, each a run straight to the replica, one through the ingress and one through HAProxy. */
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
 * Requests/s of GETs of / on `connections` kept-alive connections to `port` of `address` (with
 * Host `host`), for `seconds`: each connection sends its next request when the last answer ends.
 */
async function keepAliveLoad(address: string, port: number, host: string, seconds: number): Promise<{ perSecond: number; requests: number; failed: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: THROUGHPUT_CONNECTIONS });
  const until = Date.now() + seconds * 1000;
  let done = 0;
  let failed = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const req = request({ host: address, port, path: '/', agent, headers: { host } }, (res) => {
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


/** Where the reference proxy is (Debian's haproxy package); the bench runs without it where it is missing. */
const HAPROXY = '/usr/sbin/haproxy';

/**
 * A reference proxy for the ingress's figures: HAProxy on one thread, forwarding every request on
 * `port` of loopback to `address:targetPort`, keeping connections alive on both sides and sharing
 * those to the replica between clients (`http-reuse always`), as Keel's ingress does.
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
  const proxy = spawn(HAPROXY, ['-f', config, '-db'], { stdio: ['ignore', 'ignore', 'inherit'] });
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
  const missing = runtimeMissing();
  if (missing) return { title, lines: [`Not run: ${missing}.`], figures: {} };
  const work = mkdtempSync(join(tmpdir(), 'keel-bench-runtime-'));
  const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
  const nodeImage = nodeServerImage(work);
  const ingressPort = await freePort();
  const dataDir = join(work, 'keel');
  mkdirSync(dataDir);
  const keel = await startKeel({ dataDir, env: { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: String(ingressPort), KEEL_RUNTIME_SUBNET: '10.216.0.0/16', KEEL_RECONCILE_SPEED: '100', KEEL_LOG_LEVEL: 'warn' } });
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
    // Host and through HAProxy in alternating rounds (which goes first alternates too), so that
    // other work on the machine weighs on every side of each round's ratios alike.
    const echo = {
      type: 'standard',
      containers: [{ name: 'web', image: nodeImage, cpu: '2000m', memory: '512Mi', ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 1 } }],
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
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
    // The reference proxy, on the same replica address, where the machine has HAProxy.
    const haproxyPort = existsSync(HAPROXY) ? await freePort() : undefined;
    const haproxy = haproxyPort === undefined ? undefined : await startHaproxy(work, haproxyPort, address, 8080);
    // What each request costs in CPU time, µs: the client (this process), the proxy (Keel or
    // HAProxy; none for direct calls), the replica.
    const costed = async (proxyPid: number | undefined, run: () => Promise<{ perSecond: number; requests: number; failed: number }>) => {
      const [client, proxyCpu, replica] = [process.cpuUsage(), proxyPid === undefined ? 0 : cpuSeconds(proxyPid), containersCpuSeconds(dataDir)];
      const result = await run();
      const used = process.cpuUsage(client);
      const per = (seconds: number) => (seconds * 1e6) / Math.max(1, result.requests);
      return { ...result, clientUs: per((used.user + used.system) / 1e6), proxyUs: proxyPid === undefined ? 0 : per(cpuSeconds(proxyPid) - proxyCpu), replicaUs: per(containersCpuSeconds(dataDir) - replica) };
    };
    type Costed = Awaited<ReturnType<typeof costed>>;
    const targets: Array<() => Promise<Costed>> = [
      () => costed(undefined, () => keepAliveLoad(address, 8080, `${address}:8080`, ROUND_SECONDS)),
      () => costed(keel.pid, () => keepAliveLoad('127.0.0.1', ingressPort, endpoint, ROUND_SECONDS)),
      ...(haproxy ? [() => costed(haproxy.pid, () => keepAliveLoad('127.0.0.1', haproxyPort!, endpoint, ROUND_SECONDS))] : []),
    ];
    const rounds: Array<{ direct: Costed; ingress: Costed; haproxy?: Costed; ratio: number; haproxyRatio?: number }> = [];
    try {
      for (const target of targets) await target();
      for (let r = 0; r < ROUNDS; r++) {
        // Which goes first alternates: direct, ingress, haproxy, then the other way round.
        const results: Costed[] = [];
        for (const i of r % 2 === 0 ? targets.keys() : [...targets.keys()].reverse()) results[i] = await targets[i]();
        const [d, i, h] = results;
        rounds.push({ direct: d, ingress: i, haproxy: h, ratio: i.perSecond / d.perSecond, haproxyRatio: h && h.perSecond / d.perSecond });
      }
    } finally {
      haproxy?.kill();
    }
    const ratios = rounds.map((r) => r.ratio);
    const haproxyRatios = rounds.flatMap((r) => (r.haproxyRatio === undefined ? [] : [r.haproxyRatio]));
    const median = (pick: (r: (typeof rounds)[number]) => number) => quantile(rounds.map(pick), 0.5);
    await keel.call('DELETE', `/org/${org}/gvc/bench/workload/echo`);
    await stopped(dataDir);

    const figures = {
      applyToFirst200P50Ms: quantile(firsts, 0.5),
      applyToFirst200P99Ms: quantile(firsts, 0.99),
      ingressToDirectRatioMedian: quantile(ratios, 0.5),
      ingressToDirectRatioMin: Math.min(...ratios),
      ingressToDirectRatioMax: Math.max(...ratios),
      directRequestsPerSecondMedian: median((r) => r.direct.perSecond),
      ingressRequestsPerSecondMedian: median((r) => r.ingress.perSecond),
      ingressKeelCpuUsPerRequest: median((r) => r.ingress.proxyUs),
      ...(haproxyRatios.length > 0
        ? {
            haproxyToDirectRatioMedian: quantile(haproxyRatios, 0.5),
            haproxyToDirectRatioMin: Math.min(...haproxyRatios),
            haproxyToDirectRatioMax: Math.max(...haproxyRatios),
            haproxyCpuUsPerRequest: median((r) => r.haproxy?.proxyUs ?? 0),
          }
        : {}),
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
        `| ingress throughput ÷ direct, median of ${ROUNDS} rounds (min–max) | ${figures.ingressToDirectRatioMedian.toFixed(2)} (${figures.ingressToDirectRatioMin.toFixed(2)}–${figures.ingressToDirectRatioMax.toFixed(2)}) | ≥ 0.7 |`,
        haproxyRatios.length > 0
          ? `| reference: HAProxy (one thread) throughput ÷ direct, median (min–max) | ${quantile(haproxyRatios, 0.5).toFixed(2)} (${Math.min(...haproxyRatios).toFixed(2)}–${Math.max(...haproxyRatios).toFixed(2)}) | |`
          : `| reference: HAProxy | not run: ${HAPROXY} is missing | |`,
        '',
        `Throughput: GETs of a 6-byte body from one replica (the host's node, a keep-alive server, 2 CPUs), by a keep-alive client`,
        `in the bench's process on ${THROUGHPUT_CONNECTIONS} connections, ${ROUND_SECONDS} s to the replica's address, ${ROUND_SECONDS} s through the ingress by Host`,
        `and ${ROUND_SECONDS} s through HAProxy (one thread, keep-alive both sides, http-reuse always) to the same address in each round`,
        '(which goes first alternates); client, proxy and replica share the machine\'s cores. CPU time per request',
        '(µs, user + system) of the client, of the proxy (Keel or HAProxy) and of the replica\'s container shows where the time goes.',
        '',
        '| Round | direct req/s | ingress req/s (÷ direct) | HAProxy req/s (÷ direct) | direct µs/req: client, replica | ingress µs/req: client, Keel, replica | HAProxy µs/req: client, HAProxy, replica | failed |',
        '|---|---|---|---|---|---|---|---|',
        ...rounds.map((r, i) => {
          const h = r.haproxy;
          return `| ${i + 1} | ${r.direct.perSecond.toFixed(0)} | ${r.ingress.perSecond.toFixed(0)} (${r.ratio.toFixed(2)}) | ${h ? `${h.perSecond.toFixed(0)} (${r.haproxyRatio!.toFixed(2)})` : ''} | ${r.direct.clientUs.toFixed(0)}, ${r.direct.replicaUs.toFixed(0)} | ${r.ingress.clientUs.toFixed(0)}, ${r.ingress.proxyUs.toFixed(0)}, ${r.ingress.replicaUs.toFixed(0)} | ${h ? `${h.clientUs.toFixed(0)}, ${h.proxyUs.toFixed(0)}, ${h.replicaUs.toFixed(0)}` : ''} | ${r.direct.failed + r.ingress.failed + (h?.failed ?? 0)} |`;
        }),
      ],
      figures,
    };
  } finally {
    await keel.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
