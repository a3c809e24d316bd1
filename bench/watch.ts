// Watch fan-out: 1,000 and 5,000 open watch streams on one Keel process (SQLite); the time one
// change takes to reach every one of them, and the memory the streams add to the process.
import { Agent, request, type IncomingMessage } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { cpuSeconds, PG_URL, rssMb, startKeel, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const COUNTS = (process.env.BENCH_WATCHERS ?? '1000,5000').split(',').map(Number);
/** Changes timed per watcher count. */
const CHANGES = Number(process.env.BENCH_WATCH_CHANGES ?? 5);
const OPEN_AT_ONCE = 100;


interface Stream {
  response: IncomingMessage;
  /** Resolves when the stream has received the event with this id. */
  waitFor(id: number): Promise<number>;
}

function openStream(keel: RunningKeel, agent: Agent): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const req = request(`${keel.base}/org/${keel.org}/-watch?kind=gvc`, { agent, headers: { authorization: `Bearer ${keel.token}` } }, (response) => {
      if (response.statusCode !== 200) return reject(new Error(`watch answered ${response.statusCode}`));
      let wanted: { marker: string; resolve: (at: number) => void } | undefined;
      let tail = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        const text = tail + chunk;
        if (wanted && text.includes(wanted.marker)) {
          const done = wanted;
          wanted = undefined;
          done.resolve(performance.now());
        }
        tail = text.slice(-64);
      });
      resolve({
        response,
        waitFor: (id) => new Promise((done) => (wanted = { marker: `id: ${id}\n`, resolve: done })),
      });
    });
    req.on('error', reject);
    req.end();
  });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

interface FanOut {
  watchers: number;
  p50: number;
  p99: number;
  max: number;
  extraMb: number;
  /** CPU the Keel process and this benchmark process (the streams' reader) used per change, in ms. */
  keelCpuMs: number;
  readerCpuMs: number;
}

async function fanOut(count: number): Promise<FanOut> {
  const keel = await startKeel({ env: { KEEL_WATCH_STREAMS_PER_PRINCIPAL: String(count + 10), KEEL_RECONCILE: 'off' } });
  const agent = new Agent({ keepAlive: false, maxSockets: Infinity });
  const streams: Stream[] = [];
  try {
    if ((await keel.call('POST', `/org/${keel.org}/gvc`, { name: 'fan' })).status !== 201) throw new Error('setup failed');
    // Warm the routes, then the baseline memory with no watchers.
    for (let i = 0; i < 20; i++) await keel.call('GET', `/org/${keel.org}/gvc/fan`);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const baseline = rssMb(keel.pid);
    for (let opened = 0; opened < count; opened += OPEN_AT_ONCE) {
      streams.push(...(await Promise.all(Array.from({ length: Math.min(OPEN_AT_ONCE, count - opened) }, () => openStream(keel, agent)))));
    }
    const latencies: number[] = [];
    let peak = rssMb(keel.pid);
    const keelCpu = cpuSeconds(keel.pid);
    const readerCpu = process.cpuUsage();
    for (let c = 0; c < CHANGES; c++) {
      const before = await keel.call('GET', `/org/${keel.org}/gvc/fan`);
      const next = before.body.version;
      // The change's seq is the head after it; each stream waits for the id that follows the read position.
      const position = Number((await fetch(`${keel.base}/org/${keel.org}/gvc`, { headers: { authorization: `Bearer ${keel.token}` } })).headers.get('keel-seq'));
      const arrivals = streams.map((s) => s.waitFor(position + 1));
      const started = performance.now();
      const res = await keel.call('PATCH', `/org/${keel.org}/gvc/fan`, { description: `change ${c} of ${next}` });
      if (res.status !== 200) throw new Error(`PATCH answered ${res.status}`);
      for (const at of await Promise.all(arrivals)) latencies.push(at - started);
      peak = Math.max(peak, rssMb(keel.pid));
    }
    const readerUsed = process.cpuUsage(readerCpu);
    const keelCpuMs = ((cpuSeconds(keel.pid) - keelCpu) * 1000) / CHANGES;
    const readerCpuMs = (readerUsed.user + readerUsed.system) / 1000 / CHANGES;
    latencies.sort((a, b) => a - b);
    return { watchers: count, p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies[latencies.length - 1], extraMb: peak - baseline, keelCpuMs, readerCpuMs };
  } finally {
    for (const s of streams) s.response.destroy();
    agent.destroy();
    await keel.stop();
  }
}

/**
 * What Keel-Seq adds to one read, in µs of CPU: the same item read alone (get) and with the org's
 * position read in its statement (getAt), alternated over rounds; the median round's difference.
 */
async function positionCost(store: Store): Promise<number> {
  const key = { org: 'bench', kind: 'gvc', gvc: '', name: 'fan' };
  const read = () => store.get(key);
  const positioned = async () => store.getAt(key);
  const N = 2000;
  // CPU time, not wall time: what a read costs the process, whatever else the machine runs.
  const time = async (fn: () => Promise<unknown>) => {
    const started = process.cpuUsage();
    for (let i = 0; i < N; i++) await fn();
    const used = process.cpuUsage(started);
    return (used.user + used.system) / N;
  };
  await time(positioned); // warm-up
  const deltas: number[] = [];
  for (let round = 0; round < 7; round++) {
    const plain = await time(read);
    deltas.push((await time(positioned)) - plain);
  }
  return deltas.sort((a, b) => a - b)[3];
}

async function positionCosts(): Promise<{ sqlite: number; postgres: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-bench-seq-'));
  try {
    const sqlite = await openStore({ dataDir: dir });
    const sqliteCost = await positionCost(sqlite);
    await sqlite.close();
    const postgresCost = await withBenchSchema(PG_URL, async (url) => {
      const store = await openStore({ dataDir: dir, databaseUrl: await url() });
      try {
        return await positionCost(store);
      } finally {
        await store.close();
      }
    });
    return { sqlite: sqliteCost, postgres: postgresCost };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function benchWatch(): Promise<Section> {
  const results: FanOut[] = [];
  for (const count of COUNTS) results.push(await fanOut(count));
  const seqCost = await positionCosts();
  const at = (n: number) => results.find((r) => r.watchers === n);
  const top = at(5000) ?? results[results.length - 1];
  return {
    title: 'Watch fan-out on one process',
    lines: [
      '| Watchers | change → all, p50 ms | p99 ms | max ms | extra memory (RSS) MB | Keel CPU per change ms | reader CPU per change ms |',
      '|---|---|---|---|---|---|---|',
      ...results.map((r) => `| ${r.watchers} | ${r.p50.toFixed(0)} | ${r.p99.toFixed(0)} | ${r.max.toFixed(0)} | ${r.extraMb.toFixed(0)} | ${r.keelCpuMs.toFixed(0)} | ${r.readerCpuMs.toFixed(0)} |`),
      '',
      `Goals at ${top.watchers} watchers: p99 ≤ 1000 ms (**${top.p99.toFixed(0)}**), extra memory ≤ 200 MB (**${top.extraMb.toFixed(0)}**).`,
      `Keel-Seq on a read (the org's position read in the same statement as the item) adds **${seqCost.sqlite.toFixed(1)} µs** of CPU per read on SQLite (cached with the item read) and **${seqCost.postgres.toFixed(0)} µs** on PostgreSQL (no extra round trip), measured in-process against the same store read alone.`,
      `Each of ${CHANGES} PATCHes of one GVC is timed from the request until every stream (SQLite, one Keel process, key auth) has received its event; the streams are read by this one benchmark process, so the figures include its own time to take 5,000 sockets' data (its CPU per change is shown next to Keel's: when it is well below Keel's, Keel is what the time is spent in). Memory: the Keel process's RSS at its peak during the changes minus before the streams opened.`,
    ],
    figures: {
      ...Object.fromEntries(results.flatMap((r) => [[`watch${r.watchers}P50Ms`, r.p50], [`watch${r.watchers}P99Ms`, r.p99], [`watch${r.watchers}ExtraMb`, r.extraMb], [`watch${r.watchers}KeelCpuMs`, r.keelCpuMs], [`watch${r.watchers}ReaderCpuMs`, r.readerCpuMs]])),
      keelSeqSqliteMicros: seqCost.sqlite,
      keelSeqPostgresMicros: seqCost.postgres,
    },
  };
}
