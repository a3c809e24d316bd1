// Authorization on the hot paths: (a) GET of one gvc by a service-account key that holds `view`
// only through a group-bound policy, against raw node:http in the same run; (b) a list where the
// caller may view 1% of 100k items (a targetQuery on a tag), which the view filter does in SQL.
// Both on SQLite and on PostgreSQL.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../src/store/open.js';
import pg from 'pg';
import { BENCH_DIR, CONNECTIONS, PG_URL, load, loadTable, startKeel, waitForOutput, type LoadResult, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ITEMS = 100_000;
const VISIBLE_EVERY = 100; // 1%

async function ok(keel: RunningKeel, method: string, path: string, body?: unknown): Promise<any> {
  const res = await keel.call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** 100k `resource` items in one transaction from this process, straight into Keel's store (SQLite file or PostgreSQL schema). */
async function seed(dataDir: string, org: string, databaseUrl?: string): Promise<void> {
  const store = await openStore({ dataDir, databaseUrl });
  const now = new Date().toISOString();
  try {
    await store.transaction(async (tx) => {
      for (let i = 0; i < ITEMS; i++) {
        const name = `item-${String(i).padStart(6, '0')}`;
        const tags = i % VISIBLE_EVERY === 0 ? { team: 'blue' } : { team: 'red' };
        await tx.insert({ org, kind: 'resource', gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: { name, description: name, tags, spec: {} } });
      }
    });
  } finally {
    await store.close();
  }
  if (databaseUrl) {
    // What autovacuum would do shortly after a bulk load.
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      await client.query('ANALYZE');
    } finally {
      await client.end();
    }
  }
}

interface Measured {
  get: LoadResult;
  list: LoadResult;
  single: LoadResult;
  seedSeconds: number;
}

async function measure(label: string, databaseUrl?: string): Promise<Measured> {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-auth-'));
  const keel = await startKeel({ dataDir, databaseUrl });
  try {
    const org = keel.org;
    await ok(keel, 'POST', `/org/${org}/gvc`, { name: 'bench' });
    await ok(keel, 'POST', `/org/${org}/serviceaccount`, { name: 'reader' });
    const key = (await ok(keel, 'POST', `/org/${org}/serviceaccount/reader/-addKey`, { description: 'bench' })).key as string;
    await ok(keel, 'POST', `/org/${org}/group`, { name: 'readers', memberLinks: ['//serviceaccount/reader'] });
    await ok(keel, 'POST', `/org/${org}/policy`, { name: 'readers-gvc', targetKind: 'gvc', targetLinks: ['//gvc/bench'], bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }] });
    await ok(keel, 'POST', `/org/${org}/policy`, {
      name: 'readers-blue',
      targetKind: 'resource',
      targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'blue' }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }],
    });
    const started = Date.now();
    await seed(dataDir, org, databaseUrl);
    const seedSeconds = (Date.now() - started) / 1000;
    process.stderr.write(`bench auth: ${label} seeded ${ITEMS} items in ${seedSeconds.toFixed(1)} s\n`);
    const headers = { authorization: `Bearer ${key}` };
    const first = await fetch(`${keel.base}/org/${org}/resource`, { headers }).then((r) => r.json() as Promise<{ items: Array<{ tags: { team: string } }> }>);
    if (first.items.length !== 100 || first.items.some((i) => i.tags.team !== 'blue')) throw new Error(`${label}: the filtered list is wrong`);
    const get = await load(`GET one gvc, SA key, view through a group-bound policy (${label})`, { url: `${keel.base}/org/${org}/gvc/bench`, headers });
    const list = await load(`GET /org/${org}/resource (first page of the 1% of ${ITEMS / 1000}k the caller may view, ${label})`, { url: `${keel.base}/org/${org}/resource`, headers });
    const single = await load(`the same list, one client at a time (${label})`, { url: `${keel.base}/org/${org}/resource`, headers, connections: 1 });
    return { get, list, single, seedSeconds };
  } finally {
    await keel.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function benchAuth(): Promise<Section> {
  const raw = spawn(process.execPath, [join(BENCH_DIR, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const rawPort = Number(await waitForOutput(raw, /^(\d+)\n/));
    const baseline = await load('raw node:http hello', { url: `http://127.0.0.1:${rawPort}/` });
    const sqlite = await measure('SQLite');
    const postgres = await withBenchSchema(PG_URL, async (url) => measure('PostgreSQL', await url()));
    const ratio = sqlite.get.requestsPerSecond / baseline.requestsPerSecond;
    const pgRatio = postgres.get.requestsPerSecond / baseline.requestsPerSecond;
    return {
      title: 'Authorization: group-bound GET and a 1%-visible list of 100k',
      lines: [
        ...loadTable([baseline, sqlite.get, sqlite.list, sqlite.single, postgres.get, postgres.list, postgres.single]),
        '',
        `GET ratio Keel / raw node:http: SQLite **${ratio.toFixed(2)}**, PostgreSQL **${pgRatio.toFixed(2)}** (goal ≥ 0.5).`,
        `Filtered list, SQLite: p50 **${sqlite.list.p50} ms**, p99 **${sqlite.list.p99} ms** under ${CONNECTIONS} connections, p99 **${sqlite.single.p99} ms** one at a time (goal p99 ≤ 50 ms).`,
        `Filtered list, PostgreSQL: p50 **${postgres.list.p50} ms**, p99 **${postgres.list.p99} ms** under ${CONNECTIONS} connections, p99 **${postgres.single.p99} ms** one at a time.`,
        `${ITEMS} items seeded through the Store interface in one transaction: SQLite ${sqlite.seedSeconds.toFixed(1)} s, PostgreSQL ${postgres.seedSeconds.toFixed(1)} s (then ANALYZE).`,
      ],
      figures: {
        authGetRequestsPerSecond: sqlite.get.requestsPerSecond,
        authGetPostgresRequestsPerSecond: postgres.get.requestsPerSecond,
        rawRequestsPerSecond: baseline.requestsPerSecond,
        authGetVsRawRatio: ratio,
        authGetPostgresVsRawRatio: pgRatio,
        filteredListP50: sqlite.list.p50,
        filteredListP99: sqlite.list.p99,
        filteredListSingleClientP99: sqlite.single.p99,
        filteredListPostgresP50: postgres.list.p50,
        filteredListPostgresP99: postgres.list.p99,
        filteredListPostgresSingleClientP99: postgres.single.p99,
      },
      charts: [
        {
          file: 'filtered-list-latency.svg',
          title: 'List of 100k where the caller may view 1%: latency',
          unit: 'ms',
          kind: 'bar',
          categories: [`SQLite, ${CONNECTIONS} conns`, 'SQLite, 1 conn', `PostgreSQL, ${CONNECTIONS} conns`, 'PostgreSQL, 1 conn'],
          series: [
            { name: 'p50', values: [sqlite.list.p50, sqlite.single.p50, postgres.list.p50, postgres.single.p50] },
            { name: 'p99', values: [sqlite.list.p99, sqlite.single.p99, postgres.list.p99, postgres.single.p99] },
          ],
        },
        {
          file: 'auth-get-throughput.svg',
          title: 'GET with view granted through a group-bound policy',
          unit: 'requests/s',
          kind: 'bar',
          categories: ['raw node:http', 'Keel, SQLite', 'Keel, PostgreSQL'],
          series: [{ name: 'requests/s (16 connections)', values: [baseline.requestsPerSecond, sqlite.get.requestsPerSecond, postgres.get.requestsPerSecond] }],
        },
      ],
    };
  } finally {
    raw.kill('SIGTERM');
  }
}
