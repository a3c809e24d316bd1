// BENCH_ONLY=readcache: the PostgreSQL read cache. Two Keel processes on one database, one with the
// cache (KEEL_READ_CACHE_MB, default) and one without (KEEL_READ_CACHE_MB=0), loaded in turn for
// several alternating rounds: GET of one item, its throughput and the server's CPU per request. Then
// ITEMS groups are read once through each and the growth of each process's memory is compared.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { DURATION, PG_URL, load, postgresCpuSeconds, rssMb, startKeel, type LoadResult, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ROUNDS = Number(process.env.BENCH_READCACHE_ROUNDS ?? 3);
const ITEMS = Number(process.env.BENCH_READCACHE_ITEMS ?? 20_000);

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const sd = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));
const show = (xs: number[], digits = 0) => `${mean(xs).toFixed(digits)} ± ${sd(xs).toFixed(digits)} (${xs.map((x) => x.toFixed(digits)).join(', ')})`;

/** Reads every path once, `parallel` at a time. */
async function readAll(keel: RunningKeel, paths: string[], parallel = 16): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < paths.length) {
        const res = await keel.call('GET', paths[next++]);
        if (res.status !== 200) throw new Error(`GET: ${res.status}`);
      }
    }),
  );
}

export async function benchReadCache(): Promise<Section> {
  return withBenchSchema(PG_URL, async (newUrl) => {
    const url = await newUrl();
    const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-'));
    const on = await startKeel({ databaseUrl: url, dataDir });
    const off = await startKeel({ databaseUrl: url, dataDir, env: { KEEL_READ_CACHE_MB: '0' } });
    try {
      const created = await on.call('POST', `/org/${on.org}/gvc`, { name: 'bench' });
      if (created.status !== 201) throw new Error(`could not create the benchmark gvc: ${created.status}`);
      const target = (keel: RunningKeel) => ({ url: `${keel.base}/org/${keel.org}/gvc/bench`, headers: { authorization: `Bearer ${keel.token}` } });
      const runs: Record<'on' | 'off', Array<LoadResult & { pgMicros: number }>> = { on: [], off: [] };
      for (let round = 0; round < ROUNDS; round++) {
        for (const [mode, keel] of (round % 2 ? [['off', off], ['on', on]] : [['on', on], ['off', off]]) as Array<['on' | 'off', RunningKeel]>) {
          const pgBefore = postgresCpuSeconds();
          const result = await load(`GET, cache ${mode}`, target(keel), keel.pid);
          // Over the warm-up and the measured run: per request of the measured run, an upper bound.
          const pgMicros = ((postgresCpuSeconds() - pgBefore) * 1e6) / (result.requestsPerSecond * (DURATION + 1));
          runs[mode].push({ ...result, pgMicros });
        }
      }
      const rps = (mode: 'on' | 'off') => runs[mode].map((r) => r.requestsPerSecond);
      const cpu = (mode: 'on' | 'off') => runs[mode].map((r) => r.cpuMicrosPerRequest ?? 0);
      const pgCpu = (mode: 'on' | 'off') => runs[mode].map((r) => r.pgMicros);
      const p99 = (mode: 'on' | 'off') => runs[mode].map((r) => r.p99);

      // Memory: ITEMS groups copied in by SQL, then each read once through both processes.
      const db = new pg.Client({ connectionString: url });
      await db.connect();
      let textBytes = 0;
      try {
        const made = await on.call('POST', `/org/${on.org}/group`, { name: 'template', description: 'a group as a team has one', tags: { team: 'payments', tier: 'gold', owner: 'someone@example.com' } });
        if (made.status !== 201) throw new Error(`could not create the template group: ${made.status}`);
        await db.query(
          `INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data)
           SELECT org, kind, gvc, 'g' || i, gen_random_uuid()::text, version, created, last_modified, data
           FROM resources, generate_series(1, $1) i WHERE kind = 'group' AND name = 'template'`,
          [ITEMS],
        );
        textBytes = Number((await db.query("SELECT length(data::text) AS n FROM resources WHERE kind = 'group' AND name = 'template'")).rows[0].n);
      } finally {
        await db.end();
      }
      const paths = Array.from({ length: ITEMS }, (_, i) => `/org/${on.org}/group/g${i + 1}`);
      const rss: Record<'on' | 'off', { before: number; after: number }> = { on: { before: 0, after: 0 }, off: { before: 0, after: 0 } };
      for (const [mode, keel] of [['on', on], ['off', off]] as Array<['on' | 'off', RunningKeel]>) {
        rss[mode].before = rssMb(keel.pid);
        await readAll(keel, paths);
        await readAll(keel, paths.slice(0, 1000)); // settle
        rss[mode].after = rssMb(keel.pid);
      }
      const grew = (mode: 'on' | 'off') => rss[mode].after - rss[mode].before;
      const perEntry = ((grew('on') - grew('off')) * 1024 * 1024) / ITEMS;
      const estimate = 1800 + 4 * textBytes;
      const ratio = mean(rps('on')) / mean(rps('off'));
      return {
        title: 'PostgreSQL read cache: GET with the cache on and off',
        lines: [
          `Two Keel processes on one PostgreSQL schema, one with the read cache (default bound, 64 MB) and one with \`KEEL_READ_CACHE_MB=0\`, loaded in turn for ${ROUNDS} alternating rounds of ${DURATION} s (16 connections, key auth) on GET of one GVC. Mean ± standard deviation (each round):`,
          '',
          '| | cache on | cache off |',
          '|---|---|---|',
          `| requests/s | ${show(rps('on'))} | ${show(rps('off'))} |`,
          `| Keel CPU µs per GET | ${show(cpu('on'), 1)} | ${show(cpu('off'), 1)} |`,
          `| PostgreSQL CPU µs per GET (every postgres process on the machine, warm-up included) | ${show(pgCpu('on'), 1)} | ${show(pgCpu('off'), 1)} |`,
          `| p99 ms | ${show(p99('on'))} | ${show(p99('off'))} |`,
          '',
          `Throughput with the cache / without: **${ratio.toFixed(2)}**. With the cache a GET still waits for one catch-up statement (shared by the GETs that arrived while the one before was under way) but no item read, row parsing or presentation.`,
          '',
          `Memory: ${ITEMS} groups (data ${textBytes} bytes of JSON each), each read once through both processes. RSS grew ${grew('on').toFixed(0)} MB with the cache (${rss.on.before.toFixed(0)} → ${rss.on.after.toFixed(0)} MB) and ${grew('off').toFixed(0)} MB without (${rss.off.before.toFixed(0)} → ${rss.off.after.toFixed(0)} MB): about ${perEntry.toFixed(0)} bytes per held entry, against the ${estimate} bytes the cache counts for one (1800 + 4 × its JSON) toward its bound.`,
        ],
        figures: {
          readCacheOnRequestsPerSecond: mean(rps('on')),
          readCacheOffRequestsPerSecond: mean(rps('off')),
          readCacheOnCpuMicrosPerRequest: mean(cpu('on')),
          readCacheOffCpuMicrosPerRequest: mean(cpu('off')),
          readCacheOnVsOffRatio: ratio,
          readCacheBytesPerEntry: perEntry,
        },
      };
    } finally {
      await on.stop();
      await off.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
}
