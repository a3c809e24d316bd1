// A replica flooding its stdout (KEEL_RUNTIME=runc): an unrelated caller's GET latency while one
// replica writes as fast as it can for BENCH_LOGFLOOD_SECONDS (default 30), against the same
// caller with no flood in the same run, and how much the database grew meanwhile (against
// KEEL_LOG_BYTES_PER_SECOND × the time, and KEEL_LOG_MAX_BYTES_PER_ORG). Keel runs with its default
// bounds, on SQLite and on PostgreSQL. Needs root, runc, umoci and /bin/busybox; otherwise the
// section says so.
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { busyboxImage, runtimeMissing } from '../test/support/runtime.js';
import { freePort } from '../test/support/ports.js';
import { cpuSeconds, PG_URL, startKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const LOCATION = 'aws-us-east-2';
const FLOOD_SECONDS = Number(process.env.BENCH_LOGFLOOD_SECONDS ?? 30);
const QUIET_SECONDS = 10;
const RATE = 256 * 1024;
const CAP = 1024 * 1024 * 1024;
const MB = 1024 * 1024;
const LINE = `flood ${'0123456789'.repeat(6)}`;

const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))];

interface Run {
  backend: string;
  quiet: { p50: number; p99: number; n: number };
  flood: { p50: number; p99: number; n: number };
  grownMb: number;
  keelCpu: number;
}

/** One caller's GETs, one after another, for `seconds`: their latencies in ms. */
async function caller(call: () => Promise<number>, seconds: number): Promise<number[]> {
  const latencies: number[] = [];
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    const started = performance.now();
    const status = await call();
    if (status !== 200) throw new Error(`GET answered ${status}`);
    latencies.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return latencies;
}

async function floodRun(backend: string, work: string, image: string, databaseUrl?: string): Promise<Run> {
  const dataDir = join(work, `keel-${backend}`);
  mkdirSync(dataDir);
  const env = { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: String(await freePort()), KEEL_RUNTIME_SUBNET: '10.217.0.0/16', KEEL_RECONCILE_SPEED: '100', KEEL_LOG_LEVEL: 'warn' };
  const keel = await startKeel({ dataDir, databaseUrl, env });
  const size = databaseUrl
    ? async () => {
        const client = new pg.Client({ connectionString: databaseUrl });
        await client.connect();
        try {
          const { rows } = await client.query("SELECT pg_total_relation_size('log_lines') + pg_total_relation_size('log_lines_usage') AS bytes");
          return Number(rows[0].bytes);
        } finally {
          await client.end();
        }
      }
    : async () => ['keel.db', 'keel.db-wal'].map((f) => join(dataDir, f)).reduce((sum, f) => sum + (existsSync(f) ? statSync(f).size : 0), 0);
  try {
    const org = keel.org;
    await keel.call('POST', `/org/${org}/gvc`, { name: 'bench', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
    const get = async () => (await keel.call('GET', `/org/${org}/gvc/bench`)).status;
    const quiet = await caller(get, QUIET_SECONDS);
    const before = await size();
    const cpuBefore = cpuSeconds(keel.pid);
    const created = await keel.call('POST', `/org/${org}/gvc/bench/workload`, {
      name: 'flood',
      spec: { type: 'standard', containers: [{ name: 'main', image, cpu: '1000m', memory: '64Mi' }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } },
    });
    if (created.status !== 201) throw new Error(`creating the workload: ${JSON.stringify(created.body)}`);
    const flood = await caller(get, FLOOD_SECONDS);
    const keelCpu = (cpuSeconds(keel.pid) - cpuBefore) / FLOOD_SECONDS;
    const grownMb = ((await size()) - before) / MB;
    await keel.call('DELETE', `/org/${org}/gvc/bench/workload/flood`);
    const stats = (l: number[]) => ({ p50: quantile(l, 0.5), p99: quantile(l, 0.99), n: l.length });
    return { backend, quiet: stats(quiet), flood: stats(flood), grownMb, keelCpu };
  } finally {
    await keel.stop();
  }
}

export async function benchLogFlood(): Promise<Section> {
  const title = 'A replica flooding its stdout (KEEL_RUNTIME=runc)';
  const missing = runtimeMissing();
  if (missing) return { title, lines: [`Not run: ${missing}.`], figures: {} };
  const work = mkdtempSync(join(tmpdir(), 'keel-bench-logflood-'));
  try {
    const image = busyboxImage(work, 'flood', ['/bin/busybox', 'yes', LINE]);
    const runs = [await floodRun('SQLite', work, image)];
    await withBenchSchema(PG_URL, async (schema) => runs.push(await floodRun('PostgreSQL', work, image, await schema())));
    const figures: Record<string, number> = {};
    const lines = [
      `One replica (1 CPU, 64Mi) runs busybox \`yes\` with a ${LINE.length + 1}-byte line for ${FLOOD_SECONDS} s. An unrelated caller (the bench, same`,
      `admin key) GETs a GVC one request at a time, 10 ms apart: ${QUIET_SECONDS} s before the replica exists, then while it floods. Keel runs with`,
      `its default bounds: KEEL_LOG_BYTES_PER_SECOND ${RATE} (so at most ${((RATE * (FLOOD_SECONDS + 1)) / MB).toFixed(1)} MB of lines in the window), KEEL_LOG_MAX_BYTES_PER_ORG ${CAP}.`,
      '',
      '| Backend | GET p50 / p99 quiet (ms) | GET p50 / p99 during the flood (ms) | p99 ÷ quiet | Goal | database growth during the flood (MB) | Goal | Keel CPU during the flood (cores) |',
      '|---|---|---|---|---|---|---|---|',
    ];
    for (const r of runs) {
      const ratio = r.flood.p99 / r.quiet.p99;
      const key = r.backend === 'SQLite' ? 'sqlite' : 'postgres';
      Object.assign(figures, {
        [`${key}_get_p99_quiet_ms`]: r.quiet.p99,
        [`${key}_get_p99_flood_ms`]: r.flood.p99,
        [`${key}_get_p99_ratio`]: ratio,
        [`${key}_db_growth_mb`]: r.grownMb,
        [`${key}_keel_cpu_cores`]: r.keelCpu,
      });
      lines.push(
        `| ${r.backend} | ${r.quiet.p50.toFixed(1)} / ${r.quiet.p99.toFixed(1)} (${r.quiet.n}) | ${r.flood.p50.toFixed(1)} / ${r.flood.p99.toFixed(1)} (${r.flood.n}) | ${ratio.toFixed(2)} | ≤ 5 | ${r.grownMb.toFixed(1)} | ≤ ${(CAP / MB).toFixed(0)} (the cap); rate × time ${((RATE * FLOOD_SECONDS) / MB).toFixed(1)} | ${r.keelCpu.toFixed(2)} |`,
      );
    }
    lines.push('', 'The database growth counts the file and its WAL on SQLite, and the log tables with their indexes on PostgreSQL; it includes the rows\' overhead and indexes, so it is above the bytes of text the rate lets in.');
    return { title, lines, figures };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
