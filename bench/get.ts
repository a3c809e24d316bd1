// GET of one gvc with authentication on, against a raw node:http server, in the same run; Keel on
// SQLite and on PostgreSQL.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BENCH_DIR, PG_URL, load, loadTable, startKeel, waitForOutput, type LoadResult, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

async function keelGet(label: string, databaseUrl?: string): Promise<LoadResult> {
  const keel = await startKeel({ databaseUrl });
  try {
    const created = await keel.call('POST', `/org/${keel.org}/gvc`, { name: 'bench' });
    if (created.status !== 201) throw new Error(`could not create the benchmark gvc: ${created.status}`);
    return await load(`Keel GET /org/bench/gvc/bench (${label}, key auth)`, { url: `${keel.base}/org/${keel.org}/gvc/bench`, headers: { authorization: `Bearer ${keel.token}` } }, keel.pid);
  } finally {
    await keel.stop();
  }
}

export async function benchGet(): Promise<Section> {
  const raw = spawn(process.execPath, [join(BENCH_DIR, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const rawPort = Number(await waitForOutput(raw, /^(\d+)\n/));
    const baseline = await load('raw node:http hello', { url: `http://127.0.0.1:${rawPort}/` }, raw.pid);
    const get = await keelGet('SQLite');
    const pgGet = await withBenchSchema(PG_URL, async (url) => keelGet('PostgreSQL', await url()));
    const ratio = get.requestsPerSecond / baseline.requestsPerSecond;
    const pgRatio = pgGet.requestsPerSecond / baseline.requestsPerSecond;
    const cpuRatio = baseline.cpuMicrosPerRequest && get.cpuMicrosPerRequest ? baseline.cpuMicrosPerRequest / get.cpuMicrosPerRequest : undefined;
    return {
      title: 'GET throughput against raw node:http',
      lines: [
        ...loadTable([baseline, get, pgGet]),
        '',
        `Ratio Keel / raw node:http: SQLite **${ratio.toFixed(2)}**, PostgreSQL **${pgRatio.toFixed(2)}** (goal ≥ 0.5).`,
        'The raw server answers a constant 60-byte JSON; Keel authenticates the key, authorizes, reads the GVC and serializes it.',
        ...(cpuRatio === undefined
          ? []
          : [
              '',
              `Server CPU time per request: raw node:http ${baseline.cpuMicrosPerRequest!.toFixed(1)} µs, Keel on SQLite ${get.cpuMicrosPerRequest!.toFixed(1)} µs; ratio **${cpuRatio.toFixed(2)}** (the throughput ratio where the server has a core to itself; other work on the machine changes it little).`,
            ]),
      ],
      figures: {
        getRequestsPerSecond: get.requestsPerSecond,
        getPostgresRequestsPerSecond: pgGet.requestsPerSecond,
        rawRequestsPerSecond: baseline.requestsPerSecond,
        getVsRawRatio: ratio,
        getPostgresVsRawRatio: pgRatio,
        ...(cpuRatio === undefined ? {} : { rawCpuMicrosPerRequest: baseline.cpuMicrosPerRequest!, getCpuMicrosPerRequest: get.cpuMicrosPerRequest!, getVsRawCpuRatio: cpuRatio }),
      },
      charts: [
        {
          file: 'get-throughput.svg',
          title: 'GET one item: Keel against raw node:http',
          unit: 'requests/s',
          kind: 'bar',
          categories: ['raw node:http', 'Keel, SQLite', 'Keel, PostgreSQL'],
          series: [{ name: 'requests/s (16 connections)', values: [baseline.requestsPerSecond, get.requestsPerSecond, pgGet.requestsPerSecond] }],
        },
        {
          file: 'get-latency.svg',
          title: 'GET one item: latency',
          unit: 'ms',
          kind: 'bar',
          categories: ['raw node:http', 'Keel, SQLite', 'Keel, PostgreSQL'],
          series: [
            { name: 'p50', values: [baseline.p50, get.p50, pgGet.p50] },
            { name: 'p99', values: [baseline.p99, get.p99, pgGet.p99] },
          ],
        },
      ],
    };
  } finally {
    raw.kill('SIGTERM');
  }
}
