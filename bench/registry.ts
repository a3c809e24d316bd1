// The registry: push and pull throughput of a ~200 MB image of several layers with skopeo, against
// Keel (SQLite and PostgreSQL) and Debian's docker-registry (the CNCF Distribution reference
// server) on loopback in the same run; each round starts both on empty storage, so every push
// uploads everything. Goals: Keel ≥ 0.8× docker-registry's throughput, and Keel's RSS growth
// during a push ≤ 64 MB (blobs are streamed, never held whole).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/support/ports.js';
import { buildOciImage } from '../test/support/oci.js';
import { runTool } from '../test/support/registry-tools.js';
import { PG_URL, rssMb, startKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ROUNDS = Number(process.env.BENCH_REGISTRY_ROUNDS ?? 3);
const LAYER_MB = [80, 60, 40, 20];
const MB = 1024 * 1024;

interface Target {
  name: string;
  /** Starts the server on empty storage: its host:port, its pid, credentials, and how to stop it. */
  start(): Promise<{ host: string; pid: number; creds?: string; stop(): Promise<void> }>;
}

interface Round {
  pushSeconds: number;
  pullSeconds: number;
  rssGrowthMb: number;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];


const distribution: Target = {
  name: 'docker-registry (Distribution)',
  async start() {
    const dir = mkdtempSync(join(tmpdir(), 'bench-distribution-'));
    const port = await freePort();
    const config = join(dir, 'config.yml');
    writeFileSync(config, `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'data')}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:${port}\n`);
    const child = spawn('/usr/bin/docker-registry', ['serve', config], { stdio: 'ignore' });
    const host = `127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      try {
        if ((await fetch(`http://${host}/v2/`)).ok) break;
      } catch {
        if (i > 200) throw new Error('docker-registry did not start');
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    return {
      host,
      pid: child.pid!,
      async stop() {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

const keelOn = (name: string, databaseUrl: () => Promise<string | undefined>): Target => ({
  name,
  async start() {
    const keel = await startKeel({ databaseUrl: await databaseUrl() });
    return { host: keel.base.replace('http://', ''), pid: keel.pid, creds: `bench:${keel.token}`, stop: () => keel.stop() };
  },
});

async function round(target: Target, layout: string, out: string): Promise<Round> {
  const server = await target.start();
  try {
    const creds = (flag: string) => (server.creds ? [flag, server.creds] : []);
    const before = rssMb(server.pid);
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb(server.pid))), 25);
    let started = performance.now();
    const pushed = await runTool('skopeo', ['copy', '--quiet', '--dest-tls-verify=false', ...creds('--dest-creds'), `oci:${layout}:bench`, `docker://${server.host}/bench/app:v1`], { timeoutMs: 600_000 });
    const pushSeconds = (performance.now() - started) / 1000;
    clearInterval(sampler);
    if (pushed.code !== 0) throw new Error(`${target.name}: push failed: ${pushed.stderr}`);
    rmSync(out, { recursive: true, force: true });
    started = performance.now();
    const pulled = await runTool('skopeo', ['copy', '--quiet', '--src-tls-verify=false', ...creds('--src-creds'), `docker://${server.host}/bench/app:v1`, `oci:${out}:bench`], { timeoutMs: 600_000 });
    const pullSeconds = (performance.now() - started) / 1000;
    if (pulled.code !== 0) throw new Error(`${target.name}: pull failed: ${pulled.stderr}`);
    return { pushSeconds, pullSeconds, rssGrowthMb: peak - before };
  } finally {
    await server.stop();
    rmSync(out, { recursive: true, force: true });
  }
}

export async function benchRegistry(): Promise<Section> {
  const work = mkdtempSync(join(tmpdir(), 'bench-registry-'));
  try {
    const image = buildOciImage(work, 'bench', LAYER_MB.map((mb, i) => ({ [`layer-${i}.bin`]: mb * MB })));
    const totalMb = (image.manifest.layers as Array<{ size: number }>).reduce((n, l) => n + l.size, image.manifest.config.size) / MB;
    const out = join(work, 'pulled');
    return await withBenchSchema(PG_URL, async (newSchema) => {
      const targets = [distribution, keelOn('Keel (SQLite)', async () => undefined), keelOn('Keel (PostgreSQL)', newSchema)];
      const rounds = new Map<string, Round[]>(targets.map((t) => [t.name, []]));
      // Alternating rounds: a slow patch of the shared machine falls on every target alike.
      for (let i = 0; i < ROUNDS; i++) for (const target of targets) rounds.get(target.name)!.push(await round(target, image.dir, out));
      const summary = (name: string) => {
        const rs = rounds.get(name)!;
        const push = rs.map((r) => totalMb / r.pushSeconds);
        const pull = rs.map((r) => totalMb / r.pullSeconds);
        const rss = rs.map((r) => r.rssGrowthMb);
        return { push: median(push), pull: median(pull), rss: Math.max(...rss), pushRange: [Math.min(...push), Math.max(...push)], pullRange: [Math.min(...pull), Math.max(...pull)] };
      };
      const base = summary(distribution.name);
      // Each round's ratio to docker-registry's round next to it: a busy stretch of the shared machine
      // slows both, so the ratios spread less than the throughputs.
      const paired = (name: string, of: (r: Round) => number) => {
        const ratios = rounds.get(name)!.map((r, i) => of(rounds.get(distribution.name)![i]) / of(r));
        return { median: median(ratios), range: [Math.min(...ratios), Math.max(...ratios)] };
      };
      const figures: Record<string, number> = { registryImageMb: totalMb, distributionPushMbPerSecond: base.push, distributionPullMbPerSecond: base.pull };
      const rows = targets.map((t) => {
        const s = summary(t.name);
        const key = t === distribution ? 'distribution' : t.name.includes('PostgreSQL') ? 'keelPostgres' : 'keelSqlite';
        figures[`${key}PushMbPerSecond`] = s.push;
        figures[`${key}PullMbPerSecond`] = s.pull;
        figures[`${key}PushRssGrowthMb`] = s.rss;
        const push = paired(t.name, (r) => r.pushSeconds);
        const pull = paired(t.name, (r) => r.pullSeconds);
        if (t !== distribution) {
          figures[`${key}PushRatio`] = push.median;
          figures[`${key}PullRatio`] = pull.median;
        }
        const ratio = (r: { median: number; range: number[] }) => (t === distribution ? '1.00' : `${r.median.toFixed(2)} (${r.range.map((v) => v.toFixed(2)).join('–')})`);
        return `| ${t.name} | ${s.push.toFixed(0)} (${s.pushRange.map((v) => v.toFixed(0)).join('–')}) | ${ratio(push)} | ${s.pull.toFixed(0)} (${s.pullRange.map((v) => v.toFixed(0)).join('–')}) | ${ratio(pull)} | ${s.rss.toFixed(0)} |`;
      });
      return {
        title: 'Registry: push and pull with skopeo',
        lines: [
          `An image of ${LAYER_MB.length} layers (${totalMb.toFixed(0)} MB, random content) copied with skopeo from an OCI layout into each registry and back, on loopback; each round starts every server on empty storage; ${ROUNDS} alternating rounds, median (min–max); × Distribution is the median (min–max) of each round's ratio to docker-registry's round beside it. Goals: Keel ≥ 0.8× docker-registry, Keel's RSS growth during a push ≤ 64 MB.`,
          '',
          '| Target | push MB/s | × Distribution | pull MB/s | × Distribution | RSS growth during push (MB, max) |',
          '|---|---|---|---|---|---|',
          ...rows,
        ],
        figures,
      };
    });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
