// BENCH_ONLY=readcache: the PostgreSQL read cache's memory at ITEMS (100k) items. ITEMS resources
// copied in by SQL from one created through the API, read through a Keel process whose cache bound
// holds them all (some a second time, from memory), and some through one with the cache off (the
// control). Memory is V8's heap after a full collection (over the inspector protocol) and RSS, set
// against what the cache counts toward its bound.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '../test/support/ports.js';
import { PG_URL, ROOT, backendsCpu, backendsCpuSince, cpuSeconds, endProcess, memoryAfterGc, rssMb, startKeel, withAppName, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ITEMS = Number(process.env.BENCH_READCACHE_ITEMS ?? 100_000);
/** Items read through the process without the cache, the control (fewer: it only has to show that reading retains next to nothing). */
const CONTROL = Math.min(ITEMS, Number(process.env.BENCH_READCACHE_CONTROL ?? 10_000));
/** Items read a second time through the cached process: enough to show they come from memory. */
const AGAIN = Math.min(ITEMS, Number(process.env.BENCH_READCACHE_AGAIN ?? 10_000));
const PARALLEL = 16;
const MB = 1024 * 1024;

/** The cache's own cost model (src/store/postgres/read-cache.ts), read from its source so the report follows it. */
function costModel(): { overhead: number; factor: number } | undefined {
  try {
    const source = readFileSync(join(ROOT, 'src', 'store', 'postgres', 'read-cache.ts'), 'utf8');
    const overhead = /const ENTRY_OVERHEAD = (\d+)/.exec(source)?.[1];
    const factor = /const ENTRY_FACTOR = (\d+)/.exec(source)?.[1];
    return overhead && factor ? { overhead: Number(overhead), factor: Number(factor) } : undefined;
  } catch {
    return undefined;
  }
}

/** Reads every path once, PARALLEL at a time; seconds taken. */
async function readAll(keel: RunningKeel, paths: string[]): Promise<number> {
  const started = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < paths.length) {
        const path = paths[next++];
        const res = await keel.call('GET', path);
        if (res.status !== 200 || res.body?.name !== path.slice(path.lastIndexOf('/') + 1)) throw new Error(`GET ${path}: ${res.status}`);
      }
    }),
  );
  return (Date.now() - started) / 1000;
}

interface Pass {
  items: number;
  seconds: number;
  /** CPU µs per GET: the Keel process, its PostgreSQL backends. */
  keelMicros: number;
  pgMicros: number;
  before: Memory;
  after: Memory;
}

type Memory = Awaited<ReturnType<typeof memoryAfterGc>> & { procRssMb: number };

async function memory(keel: RunningKeel, inspectPort: number): Promise<Memory> {
  return { ...(await memoryAfterGc(inspectPort)), procRssMb: rssMb(keel.pid) };
}

async function pass(db: pg.Client, keel: RunningKeel, inspectPort: number, appName: string, paths: string[]): Promise<Pass> {
  const before = await memory(keel, inspectPort);
  const keelBefore = cpuSeconds(keel.pid);
  const pgBefore = await backendsCpu(db, appName);
  const seconds = await readAll(keel, paths);
  const pgMicros = (backendsCpuSince(pgBefore, await backendsCpu(db, appName)) * 1e6) / paths.length;
  const keelMicros = ((cpuSeconds(keel.pid) - keelBefore) * 1e6) / paths.length;
  return { items: paths.length, seconds, keelMicros, pgMicros, before, after: await memory(keel, inspectPort) };
}

export async function benchReadCache(): Promise<Section> {
  const model = costModel();
  const started = { date: new Date().toISOString(), load: loadavg() };
  const db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  try {
    return await withBenchSchema(PG_URL, async (newUrl) => {
      const url = await newUrl();
      const tag = /search_path=keel_bench_(\w+)/.exec(new URL(url).searchParams.get('options') ?? '')?.[1] ?? 'x';
      const [appOn, appOff] = [`keel-bench-cache-${tag}`, `keel-bench-nocache-${tag}`];
      const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-'));
      const keels: RunningKeel[] = [];
      try {
        const inspectOff = await freePort();
        const off = await startKeel({ databaseUrl: withAppName(url, appOff), dataDir, env: { KEEL_READ_CACHE_MB: '0' }, nodeArgs: [`--inspect=127.0.0.1:${inspectOff}`] });
        keels.push(off);
        const made = await off.call('POST', `/org/${off.org}/resource`, {
          name: 'template',
          description: 'a resource as a team has one',
          tags: { team: 'payments', tier: 'gold', owner: 'someone@example.com' },
          spec: { region: 'eu-central', replicas: 3, size: 'large', endpoints: ['https://a.example.com', 'https://b.example.com'] },
        });
        if (made.status !== 201) throw new Error(`could not create the template resource: ${made.status}`);
        const seedStarted = Date.now();
        const schema = new pg.Client({ connectionString: url });
        await schema.connect();
        let dataBytes = 0;
        try {
          await schema.query('BEGIN');
          await schema.query(
            `INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data)
             SELECT org, kind, gvc, 'r' || i, gen_random_uuid()::text, version, created, last_modified,
               jsonb_set(jsonb_set(data, '{name}', to_jsonb('r' || i)), '{description}', to_jsonb('item ' || i))
             FROM resources, generate_series(1, $1) i WHERE kind = 'resource' AND name = 'template'`,
            [ITEMS],
          );
          await schema.query(
            `INSERT INTO resource_tags (id, org, kind, gvc, name, key, value)
             SELECT r.id, r.org, r.kind, r.gvc, r.name, t.key, t.value FROM resources r
             JOIN resource_tags t ON t.kind = 'resource' AND t.name = 'template' AND t.org = r.org
             WHERE r.kind = 'resource' AND r.name <> 'template'`,
          );
          await schema.query('COMMIT');
          await schema.query('ANALYZE');
          // What the cache sizes an entry by: the data's JSON text.
          dataBytes = Number((await schema.query("SELECT sum(octet_length(data::text)) AS n FROM resources WHERE kind = 'resource' AND name <> 'template'")).rows[0].n);
        } finally {
          await schema.end();
        }
        const seedSeconds = (Date.now() - seedStarted) / 1000;
        const counted = model ? ITEMS * model.overhead + model.factor * dataBytes : undefined;
        // A bound well above what the items are counted at, so that none is dropped.
        const boundMb = Math.ceil(((counted ?? ITEMS * 8192) * 2) / MB) + 64;
        const inspectOn = await freePort();
        const on = await startKeel({ databaseUrl: withAppName(url, appOn), dataDir, env: { KEEL_READ_CACHE_MB: String(boundMb) }, nodeArgs: [`--inspect=127.0.0.1:${inspectOn}`] });
        keels.push(on);

        const paths = Array.from({ length: ITEMS }, (_, i) => `/org/${on.org}/resource/r${i + 1}`);
        const control = paths.slice(0, CONTROL);
        // A first few reads each, so that no pass includes its process's first requests' setup.
        await readAll(on, paths.slice(-200));
        await readAll(off, paths.slice(-200));
        process.stderr.write(`bench readcache: ${ITEMS} items seeded in ${seedSeconds.toFixed(1)} s; reading them\n`);
        const miss = await pass(db, on, inspectOn, appOn, paths);
        const hit = await pass(db, on, inspectOn, appOn, paths.slice(0, AGAIN));
        const uncached = await pass(db, off, inspectOff, appOff, control);
        const heapPerItem = (p: Pass) => ((p.after.heapUsedMb - p.before.heapUsedMb) * MB) / p.items;
        const rssPerItem = (p: Pass) => ((p.after.procRssMb - p.before.procRssMb) * MB) / p.items;
        const perItem = heapPerItem(miss) - heapPerItem(uncached);
        const countedPerItem = counted === undefined ? undefined : counted / ITEMS;
        const fitsDefault = countedPerItem === undefined ? undefined : Math.floor((64 * MB) / countedPerItem);
        const mb = (before: number, after: number) => `${before.toFixed(0)} → ${after.toFixed(0)} (${after - before >= 0 ? '+' : ''}${(after - before).toFixed(0)})`;
        const row = (name: string, p: Pass) =>
          `| ${name} | ${p.items} | ${mb(p.before.heapUsedMb, p.after.heapUsedMb)} | ${heapPerItem(p).toFixed(0)} | ${mb(p.before.procRssMb, p.after.procRssMb)} | ${rssPerItem(p).toFixed(0)} | ${(p.items / p.seconds).toFixed(0)} | ${p.keelMicros.toFixed(0)} | ${p.pgMicros.toFixed(0)} |`;
        return {
          title: 'PostgreSQL read cache: resident memory per held item',
          lines: [
            `${ITEMS} resources (each ${(dataBytes / ITEMS).toFixed(0)} bytes of JSON data: a description, three tags, a small spec) copied by SQL from one created through the API (${seedSeconds.toFixed(0)} s), then read by GET with the admin key, ${PARALLEL} at a time from the bench process: each once (and ${AGAIN} of them a second time) through a Keel process whose cache bound (\`KEEL_READ_CACHE_MB=${boundMb}\`) is about twice what these items are counted at, so none is dropped, and ${CONTROL} of them through a Keel process with \`KEEL_READ_CACHE_MB=0\` (the control: what reading retains without a cache). Both on one PostgreSQL schema.`,
            '',
            'Memory before and after each pass: **heap** is V8\'s used heap right after two full garbage collections (triggered over the inspector protocol; the processes run with `--inspect`), so garbage not yet collected does not count; **RSS** is the process\'s resident memory from /proc/<pid>/status, which includes it and what V8 keeps for later. MB; per item in bytes.',
            '',
            '| Pass | GETs | heap MB before → after | heap bytes per GET | RSS MB before → after | RSS bytes per GET | GETs/s | Keel CPU µs per GET | PostgreSQL backends CPU µs per GET |',
            '|---|---|---|---|---|---|---|---|---|',
            row('cache on, first read of each item (a miss: read from the database and kept)', miss),
            row('cache on, second read of some (from memory)', hit),
            row('cache off (control)', uncached),
            '',
            `Memory held by the cache: **${perItem.toFixed(0)} bytes per item** (heap growth per item with the cache, less the control's), ${((perItem * ITEMS) / MB).toFixed(0)} MB for ${ITEMS}; RSS grew ${rssPerItem(miss).toFixed(0)} bytes per item. ` +
              (model && countedPerItem !== undefined
                ? `The cache counts an entry as ${model.overhead} + ${model.factor} × its data's JSON (ENTRY_OVERHEAD and ENTRY_FACTOR in src/store/postgres/read-cache.ts), **${countedPerItem.toFixed(0)} bytes** for these items: measured heap / counted = **${(perItem / countedPerItem).toFixed(2)}**, RSS / counted = **${(rssPerItem(miss) / countedPerItem).toFixed(2)}** (above 1: the process holds more than its bound says). At the default bound of 64 MB about ${fitsDefault} such items are held; ${ITEMS} take ${((counted ?? 0) / MB).toFixed(0)} MB of bound.`
                : "The cache's cost model (ENTRY_OVERHEAD, ENTRY_FACTOR) was not found in src/store/postgres/read-cache.ts, so no comparison."),
            '',
            `Run ${started.date}; load average (1/5/15 min) ${started.load.map((l) => l.toFixed(1)).join(' / ')} at the start, ${loadavg().map((l) => l.toFixed(1)).join(' / ')} at the end; the section took ${((Date.now() - Date.parse(started.date)) / 60000).toFixed(1)} min.`,
            '',
            "The second pass should cost PostgreSQL only the catch-up statement that a batch of GETs shares, no item reads, and leave the heap where it was: against the first pass's figures, that shows the items were held. Throughput here is that of one Node client in the bench process, not the server's.",
          ],
          figures: {
            readCacheItems: ITEMS,
            readCacheHeapBytesPerItem: perItem,
            readCacheRssBytesPerItem: rssPerItem(miss),
            ...(countedPerItem === undefined ? {} : { readCacheCountedBytesPerItem: countedPerItem, readCacheHeapVsCounted: perItem / countedPerItem, readCacheRssVsCounted: rssPerItem(miss) / countedPerItem }),
            readCacheHitPgCpuMicros: hit.pgMicros,
            readCacheMissPgCpuMicros: miss.pgMicros,
          },
        };
      } finally {
        for (const keel of keels) await endProcess(keel.pid, () => keel.stop());
        rmSync(dataDir, { recursive: true, force: true });
      }
    });
  } finally {
    await db.end();
  }
}
