// A query with one tag term that returns 100 workloads, over 10k, 100k and 1M workloads on SQLite
// and 100k on PostgreSQL: cost should grow with the matches, not with the total.
//
// Seeding 1M workloads through HTTP would take hours, so Keel first bootstraps the org and one
// template workload through the API, then this process writes further rows straight into the
// store's tables (same layout as src/store/migrations.ts: resources + resource_tags), growing one
// SQLite database 10k -> 100k -> 1M between runs of `keel serve`. Names are hashes, so the 100
// tagged workloads are spread over the whole name order at every size.
import Database from 'better-sqlite3';
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { PG_URL, startKeel, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ORG = 'bench';
const GVCS = 10;
const MATCHES = 100;
const TAG = { key: 'bench', value: 'hit' };
const REQUESTS = Number(process.env.BENCH_QUERY_REQUESTS ?? 400);
const WARMUP = 40;
const QUERY = JSON.stringify({ spec: { match: 'all', terms: [{ op: '=', tag: TAG.key, value: TAG.value }] } });

interface Row {
  gvc: string;
  name: string;
  id: string;
  created: string;
  data: string;
  tags: Array<[string, string]>;
}

interface Figures {
  label: string;
  workloads: number;
  p50: number;
  p99: number;
  mean: number;
  rssMiB?: number;
}

/** The i-th seeded workload: a hashed name, a `team` tag, and the queried tag on every (total/100)-th one. */
function rowOf(template: Record<string, unknown>, i: number, tagged: boolean, now: string): Row {
  const name = `w-${createHash('sha1').update(String(i)).digest('hex').slice(0, 16)}`;
  const tags: Record<string, string> = { team: `t${i % 50}` };
  if (tagged) tags[TAG.key] = TAG.value;
  return {
    gvc: `g${i % GVCS}`,
    name,
    id: randomUUID(),
    created: now,
    data: JSON.stringify({ ...template, name, description: name, tags }),
    tags: Object.entries(tags),
  };
}

/** Rows from..to-1 without the queried tag (retag() places it). */
function* rows(template: Record<string, unknown>, from: number, to: number): Generator<Row> {
  const now = new Date().toISOString();
  for (let i = from; i < to; i++) yield rowOf(template, i, false, now);
}

/** Moves the queried tag so that exactly MATCHES workloads of 0..total-1 carry it, spread over them. */
function retag(template: Record<string, unknown>, oldStride: number, stride: number, total: number): Array<{ row: Row; had: boolean }> {
  const changed: Array<{ row: Row; had: boolean }> = [];
  const now = new Date().toISOString();
  for (let j = 0; j < MATCHES; j++) {
    if (oldStride) changed.push({ row: rowOf(template, j * oldStride, false, now), had: true });
  }
  for (let j = 0; j < MATCHES && j * stride < total; j++) changed.push({ row: rowOf(template, j * stride, true, now), had: false });
  return changed;
}

// ---- SQLite ----------------------------------------------------------------------------------

function sqliteSeed(file: string, template: Record<string, unknown>, from: number, to: number, oldStride: number): void {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF');
  const insert = db.prepare("INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data) VALUES (?, 'workload', ?, ?, ?, 1, ?, ?, ?)");
  const insertTag = db.prepare("INSERT INTO resource_tags (id, org, kind, gvc, name, key, value) VALUES (?, ?, 'workload', ?, ?, ?, ?)");
  const stride = to / MATCHES;
  const batch = db.transaction((list: Row[]) => {
    for (const r of list) {
      insert.run(ORG, r.gvc, r.name, r.id, r.created, r.created, r.data);
      for (const [k, v] of r.tags) insertTag.run(r.id, ORG, r.gvc, r.name, k, v);
    }
  });
  let list: Row[] = [];
  for (const r of rows(template, from, to)) {
    list.push(r);
    if (list.length === 50_000) {
      batch(list);
      list = [];
    }
  }
  batch(list);
  // Exactly MATCHES of all rows carry the tag, spread over 0..to-1.
  const idOf = db.prepare("SELECT id FROM resources WHERE org = ? AND kind = 'workload' AND gvc = ? AND name = ?");
  const update = db.prepare("UPDATE resources SET data = ? WHERE org = ? AND kind = 'workload' AND gvc = ? AND name = ?");
  const dropTag = db.prepare('DELETE FROM resource_tags WHERE id = ? AND key = ?');
  db.transaction(() => {
    for (const { row, had } of retag(template, oldStride, stride, to)) {
      const { id } = idOf.get(ORG, row.gvc, row.name) as { id: string };
      update.run(row.data, ORG, row.gvc, row.name);
      if (had) dropTag.run(id, TAG.key);
      else insertTag.run(id, ORG, row.gvc, row.name, TAG.key, TAG.value);
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
}

function sqliteTemplate(file: string): Record<string, unknown> {
  const db = new Database(file, { readonly: true });
  const row = db.prepare("SELECT data FROM resources WHERE org = ? AND kind = 'workload' AND name = 'template'").get(ORG) as { data: string };
  db.close();
  const { name: _n, description: _d, tags: _t, ...rest } = JSON.parse(row.data) as Record<string, unknown>;
  return rest;
}

// ---- PostgreSQL ------------------------------------------------------------------------------

async function postgresSeed(url: string, template: Record<string, unknown>, total: number): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const stride = total / MATCHES;
    let list: Row[] = [];
    const flush = async () => {
      if (list.length === 0) return;
      await client.query(
        `INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data)
         SELECT $1, 'workload', g, n, i, 1, c, c, d::jsonb FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS t(g, n, i, c, d)`,
        [ORG, list.map((r) => r.gvc), list.map((r) => r.name), list.map((r) => r.id), list.map((r) => r.created), list.map((r) => r.data)],
      );
      const tags = list.flatMap((r) => r.tags.map(([k, v]) => [r.id, r.gvc, r.name, k, v]));
      await client.query(
        `INSERT INTO resource_tags (id, org, kind, gvc, name, key, value)
         SELECT i, $1, 'workload', g, n, k, v FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS t(i, g, n, k, v)`,
        [ORG, ...[0, 1, 2, 3, 4].map((c) => tags.map((t) => t[c]))],
      );
      list = [];
    };
    await client.query('BEGIN');
    const now = new Date().toISOString();
    for (let i = 0; i < total; i++) {
      list.push(rowOf(template, i, i % stride === 0, now));
      if (list.length === 10_000) await flush();
    }
    await flush();
    await client.query('COMMIT');
    // What autovacuum would do shortly after a bulk load.
    await client.query('ANALYZE resources');
    await client.query('ANALYZE resource_tags');
  } finally {
    await client.end();
  }
}

async function postgresTemplate(url: string): Promise<Record<string, unknown>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows: found } = await client.query("SELECT data FROM resources WHERE org = $1 AND kind = 'workload' AND name = 'template'", [ORG]);
    const { name: _n, description: _d, tags: _t, ...rest } = found[0].data as Record<string, unknown>;
    return rest;
  } finally {
    await client.end();
  }
}

// ---- HTTP ------------------------------------------------------------------------------------

/** Creates the GVCs and the template workload through the API. */
async function bootstrap(keel: RunningKeel): Promise<void> {
  for (let g = 0; g < GVCS; g++) {
    const res = await keel.call('POST', `/org/${ORG}/gvc`, { name: `g${g}` });
    if (res.status !== 201) throw new Error(`gvc create: ${res.status}`);
  }
  const res = await keel.call('POST', `/org/${ORG}/gvc/g0/workload`, {
    name: 'template',
    spec: { type: 'standard', containers: [{ name: 'app', image: 'nginx:latest', ports: [{ protocol: 'http', number: 8080 }] }] },
  });
  if (res.status !== 201) throw new Error(`workload create: ${res.status}`);
}

function post(agent: Agent, keel: RunningKeel): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(`${keel.base}/org/${ORG}/workload/-query`);
    const req = request(
      { agent, host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { authorization: `Bearer ${keel.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(QUERY) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(QUERY);
  });
}

function rssMiB(pid: number): number | undefined {
  try {
    const kb = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];

/** Sequential requests on one keep-alive connection: the latency of one query, not of a queue. */
async function measure(keel: RunningKeel, label: string, workloads: number): Promise<Figures> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const check = await post(agent, keel);
    const body = JSON.parse(check.body);
    if (check.status !== 200 || body.items.length !== MATCHES || body.links.some((l: { rel: string }) => l.rel === 'next')) {
      throw new Error(`${label}: expected ${MATCHES} items in one page, got ${check.status} ${body.items?.length}`);
    }
    for (let i = 0; i < WARMUP; i++) await post(agent, keel);
    const times: number[] = [];
    for (let i = 0; i < REQUESTS; i++) {
      const start = performance.now();
      const res = await post(agent, keel);
      times.push(performance.now() - start);
      if (res.status !== 200) throw new Error(`${label}: ${res.status}`);
    }
    times.sort((a, b) => a - b);
    return { label, workloads, p50: percentile(times, 50), p99: percentile(times, 99), mean: times.reduce((a, b) => a + b, 0) / times.length, rssMiB: rssMiB(keel.pid) };
  } finally {
    agent.destroy();
  }
}

async function sqliteRuns(sizes: number[]): Promise<Figures[]> {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-query-'));
  const file = join(dataDir, 'keel.db');
  const results: Figures[] = [];
  try {
    const first = await startKeel({ dataDir });
    try {
      await bootstrap(first);
    } finally {
      await first.stop();
    }
    const template = sqliteTemplate(file);
    let have = 0;
    let stride = 0;
    for (const size of sizes) {
      const started = Date.now();
      sqliteSeed(file, template, have, size, stride);
      process.stderr.write(`bench query: SQLite seeded to ${size} workloads in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
      have = size;
      stride = size / MATCHES;
      const keel = await startKeel({ dataDir, env: QUIET });
      try {
        results.push(await measure(keel, `SQLite, ${label(size)} workloads`, size));
      } finally {
        await keel.stop();
      }
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
  return results;
}

async function postgresRun(size: number): Promise<Figures> {
  return withBenchSchema(PG_URL, async (newSchemaUrl) => {
    const url = await newSchemaUrl();
    const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-query-pg-')); // keeps admin.token across restarts
    const first = await startKeel({ databaseUrl: url, dataDir });
    try {
      await bootstrap(first);
    } finally {
      await first.stop();
    }
    const started = Date.now();
    await postgresSeed(url, await postgresTemplate(url), size);
    process.stderr.write(`bench query: PostgreSQL seeded to ${size} workloads in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    const keel = await startKeel({ databaseUrl: url, dataDir, env: QUIET });
    try {
      return await measure(keel, `PostgreSQL, ${label(size)} workloads`, size);
    } finally {
      await keel.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
}

// The workloads are bulk-written into the tables, never created through the API, so on start the
// reconcilers would set out to roll out every one of them (10k to 1M deployments) while the queries
// are timed: the query is measured alone, as the watch and adversarial sections are.
const QUIET = { KEEL_RECONCILE: 'off' };

const label = (n: number) => (n >= 1_000_000 ? `${n / 1_000_000}M` : `${n / 1000}k`);

export async function benchQuery(): Promise<Section> {
  const sizes = (process.env.BENCH_QUERY_SIZES ?? '10000,100000,1000000').split(',').map(Number);
  const sqlite = await sqliteRuns(sizes);
  const postgres = await postgresRun(Number(process.env.BENCH_QUERY_PG_SIZE ?? 100_000));
  const small = sqlite[0];
  const big = sqlite[sqlite.length - 1];
  const p99Ratio = big.p99 / small.p99;
  const p50Ratio = big.p50 / small.p50;
  const ms = (n: number) => n.toFixed(2);
  return {
    title: 'Query with one tag term returning 100 workloads, by workload count',
    lines: [
      '| Store, workloads | p50 ms | p99 ms | mean ms | Keel RSS MiB |',
      '|---|---|---|---|---|',
      ...[...sqlite, postgres].map((f) => `| ${f.label} | ${ms(f.p50)} | ${ms(f.p99)} | ${ms(f.mean)} | ${f.rssMiB?.toFixed(0) ?? '?'} |`),
      '',
      `POST /org/${ORG}/workload/-query \`${QUERY}\` as the admin, ${REQUESTS} sequential requests on one keep-alive connection after ${WARMUP} warm-up requests;`,
      `exactly ${MATCHES} workloads (spread over the name order) carry the tag, so every answer is one full page with no next link.`,
      `Workloads carry a second tag (team, 50 values); rows were bulk-written into the store's tables between runs${postgres ? ' (PostgreSQL: then ANALYZE, as autovacuum would)' : ''}, and Keel runs with its reconcilers off (bulk-written workloads would otherwise all be rolled out while the queries are timed).`,
      '',
      `${label(big.workloads)}/${label(small.workloads)} ratio (SQLite): p99 **${p99Ratio.toFixed(2)}**, p50 **${p50Ratio.toFixed(2)}** (goal ≤ 2); p99 at ${label(big.workloads)}: **${ms(big.p99)} ms** (goal ≤ 20 ms).`,
    ],
    figures: {
      ...Object.fromEntries(sqlite.flatMap((f) => [[`sqlite${label(f.workloads)}P50`, f.p50], [`sqlite${label(f.workloads)}P99`, f.p99]])),
      [`postgres${label(postgres.workloads)}P50`]: postgres.p50,
      [`postgres${label(postgres.workloads)}P99`]: postgres.p99,
      queryP99Ratio: p99Ratio,
      queryP50Ratio: p50Ratio,
      ...(big.rssMiB !== undefined ? { keelRssMiBAtLargest: big.rssMiB } : {}),
      ...Object.fromEntries([...sqlite, postgres].filter((f) => f.rssMiB !== undefined).map((f) => [`${f === postgres ? 'postgres' : 'sqlite'}${label(f.workloads)}RssMiB`, f.rssMiB!])),
    },
    charts: [
      {
        file: 'query-latency.svg',
        title: 'Query returning 100 workloads, by workload count',
        unit: 'ms',
        kind: 'line',
        categories: sizes.map(label),
        series: [
          { name: 'SQLite p50', values: sqlite.map((f) => f.p50) },
          { name: 'SQLite p99', values: sqlite.map((f) => f.p99) },
          { name: 'PostgreSQL p50', values: sizes.map((n) => (n === postgres.workloads ? postgres.p50 : null)) },
          { name: 'PostgreSQL p99', values: sizes.map((n) => (n === postgres.workloads ? postgres.p99 : null)) },
        ],
      },
      {
        file: 'memory.svg',
        title: 'Keel resident memory (RSS) after the query runs, by workload count',
        unit: 'MiB',
        kind: 'bar',
        categories: sizes.map(label),
        series: [
          { name: 'SQLite', values: sqlite.map((f) => f.rssMiB ?? null) },
          { name: 'PostgreSQL', values: sizes.map((n) => (n === postgres.workloads ? (postgres.rssMiB ?? null) : null)) },
        ],
      },
    ],
  };
}
