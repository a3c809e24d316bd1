// BENCH_ONLY=pgsystem: Keel measured as one system, in one run. Two Keel processes on one
// PostgreSQL schema behind HAProxy (round robin), two more on the same schema with the read cache
// off (KEEL_READ_CACHE_MB=0) behind a second HAProxy frontend, one Keel process on SQLite, and raw
// node:http, each loaded in turn from a separate process for several rounds whose order alternates.
// Three requests: GET of one gvc with the admin's (superuser) key; the same GET by a service account
// whose view comes from a group-bound policy; a query by tag over 1000 items by that service account,
// whose view of them comes from a policy's targetQuery. Each ratio is taken within a round (the
// machine is shared, so only figures measured minutes apart compare), then its mean and spread.
// BENCH_PGSYSTEM_RUNS (say `raw:get,sqlite:get,pgOn:get`) loads only those setup:request pairs.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '../test/support/ports.js';
import { drive, GENERATOR, type Driven, type Request } from './drive.js';
import { BENCH_DIR, DURATION, PG_URL, backendsCpu, backendsCpuSince, cpuSeconds, endProcess, startKeel, waitForOutput, withAppName, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ROUNDS = Number(process.env.BENCH_PGSYSTEM_ROUNDS ?? 3);
const ITEMS = 1000;
const HAPROXY = process.env.BENCH_HAPROXY ?? (existsSync('/usr/sbin/haproxy') ? '/usr/sbin/haproxy' : 'haproxy');
/** Every ITEMS/10-th item is tagged team=blue, and the reader may view half of those: the query answers 50. */
const BLUE_EVERY = 10;
const QUERY = JSON.stringify({ spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'blue' }] } });
const VISIBLE_MATCHES = 50;

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const sd = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));
const fmt = (x: number, digits: number) => (Number.isFinite(x) ? x.toFixed(digits) : '–');
const spread = (xs: number[], digits: number) => `${fmt(mean(xs), digits)} ± ${fmt(sd(xs), digits)}`;
const each = (xs: number[], digits: number) => `${spread(xs, digits)} (${xs.map((x) => fmt(x, digits)).join(', ')})`;

type Setup = 'raw' | 'sqlite' | 'pgOn' | 'pgOff';
type Call = 'get' | 'auth' | 'list';

/** What serves one setup: the processes whose CPU a request costs. */
interface Server {
  setup: Setup;
  label: string;
  base: string;
  keelPids: number[];
  /** application_name of its processes' PostgreSQL connections, and the schema they use. */
  appName?: string;
  schema?: string;
  proxyPid?: number;
}

interface Run extends Driven {
  setup: Setup;
  call: Call;
  /** Server CPU per completed request, µs: Keel (or raw node:http), its PostgreSQL backends, HAProxy. */
  keelMicros: number;
  pgMicros?: number;
  proxyMicros?: number;
  /** Requests per read of keel_cache_epoch (a catch-up's position read, or a whole catch-up). */
  perPositionRead?: number;
  load: number;
}

interface Secrets {
  admin: string;
  reader: string;
}

const ALL_RUNS: Array<[Setup, Call]> = [
  ['raw', 'get'],
  ['sqlite', 'get'],
  ['pgOn', 'get'],
  ['pgOff', 'get'],
  ['sqlite', 'auth'],
  ['pgOn', 'auth'],
  ['pgOff', 'auth'],
  ['sqlite', 'list'],
  ['pgOn', 'list'],
  ['pgOff', 'list'],
];
const CHOSEN = process.env.BENCH_PGSYSTEM_RUNS?.split(',').map((run) => run.trim());
const RUNS = CHOSEN ? ALL_RUNS.filter(([setup, call]) => CHOSEN.includes(`${setup}:${call}`)) : ALL_RUNS;

const SETUP_LABEL: Record<Setup, string> = {
  raw: 'raw node:http',
  sqlite: 'Keel, SQLite (1 process)',
  pgOn: 'Keel, PostgreSQL, read cache (2 processes + HAProxy)',
  pgOff: 'Keel, PostgreSQL, KEEL_READ_CACHE_MB=0 (2 processes + HAProxy)',
};
const CALL_LABEL: Record<Call, string> = {
  get: 'GET one gvc, superuser key',
  auth: 'GET one gvc, service account viewing through a policy',
  list: `query by tag over ${ITEMS} items, service account viewing ${VISIBLE_MATCHES} matches through a policy`,
};

function requestOf(server: Server, call: Call, secrets: Secrets): Request {
  if (server.setup === 'raw') return { url: `${server.base}/` };
  const org = 'bench';
  if (call === 'get') return { url: `${server.base}/org/${org}/gvc/bench`, headers: { authorization: `Bearer ${secrets.admin}` } };
  if (call === 'auth') return { url: `${server.base}/org/${org}/gvc/bench`, headers: { authorization: `Bearer ${secrets.reader}` } };
  return { url: `${server.base}/org/${org}/resource/-query`, method: 'POST', body: QUERY, headers: { authorization: `Bearer ${secrets.reader}` } };
}

async function ok(keel: RunningKeel, method: string, path: string, body?: unknown): Promise<any> {
  const res = await keel.call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** The gvcs, the reader service account with its key, its group and policies, and ITEMS tagged resources, all through the API. Returns the reader's key. */
async function seed(keel: RunningKeel): Promise<string> {
  const org = keel.org;
  await ok(keel, 'POST', `/org/${org}/gvc`, { name: 'bench' });
  await ok(keel, 'POST', `/org/${org}/gvc`, { name: 'hidden' });
  await ok(keel, 'POST', `/org/${org}/serviceaccount`, { name: 'reader' });
  const key = (await ok(keel, 'POST', `/org/${org}/serviceaccount/reader/-addKey`, { description: 'bench' })).key as string;
  await ok(keel, 'POST', `/org/${org}/group`, { name: 'readers', memberLinks: ['//serviceaccount/reader'] });
  await ok(keel, 'POST', `/org/${org}/policy`, { name: 'readers-gvc', targetKind: 'gvc', targetLinks: ['//gvc/bench'], bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }] });
  await ok(keel, 'POST', `/org/${org}/policy`, {
    name: 'readers-visible',
    targetKind: 'resource',
    targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'visible', value: 'yes' }] } },
    bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }],
  });
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < ITEMS) {
        const i = next++;
        const name = `r-${String(i).padStart(4, '0')}`;
        // Blue: every 10th; visible: i % 4 < 2, so half of the blue ones (0, 20, 40, ...).
        const tags = { team: i % BLUE_EVERY === 0 ? 'blue' : 'red', visible: i % 4 < 2 ? 'yes' : 'no', owner: `team-${i % 7}@example.com` };
        await ok(keel, 'POST', `/org/${org}/resource`, { name, description: `item ${i}`, tags, spec: { size: i, region: 'eu' } });
      }
    }),
  );
  return key;
}

/** Each request answers as it should before anything is loaded: the measured work is the intended one. */
async function check(server: Server, secrets: Secrets): Promise<void> {
  const call = async (r: Request) => {
    const res = await fetch(r.url, { method: r.method ?? 'GET', headers: { ...(r.body ? { 'content-type': 'application/json' } : {}), ...r.headers }, body: r.body });
    return { status: res.status, body: (await res.json()) as any };
  };
  const get = await call(requestOf(server, 'get', secrets));
  const auth = await call(requestOf(server, 'auth', secrets));
  const list = await call(requestOf(server, 'list', secrets));
  const hidden = await call({ url: `${server.base}/org/bench/gvc/hidden`, headers: { authorization: `Bearer ${secrets.reader}` } });
  const items = (list.body?.items ?? []) as Array<{ tags: Record<string, string> }>;
  const wrong = [
    get.status !== 200 && `admin GET ${get.status}`,
    auth.status !== 200 && `reader GET ${auth.status}`,
    hidden.status === 200 && 'the reader can read a gvc no policy grants it',
    list.status !== 200 && `reader query ${list.status} ${JSON.stringify(list.body)}`,
    items.length !== VISIBLE_MATCHES && `reader query answered ${items.length} items, not ${VISIBLE_MATCHES}`,
    items.some((i) => i.tags.team !== 'blue' || i.tags.visible !== 'yes') && 'reader query answered an item it should not',
  ].filter(Boolean);
  if (wrong.length) throw new Error(`${server.label}: ${wrong.join('; ')}`);
}

/**
 * Scans of the schema's keel_cache_epoch so far: every catch-up reads it once. Backends report their
 * counts about once a second, so a run's difference is off by up to a second's worth.
 */
async function epochReads(db: pg.Client, schema: string): Promise<number> {
  const { rows } = await db.query(`SELECT seq_scan + COALESCE(idx_scan, 0) AS n FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'keel_cache_epoch'`, [schema]);
  await db.query('SELECT pg_stat_clear_snapshot()');
  return Number(rows[0]?.n ?? NaN);
}

async function measure(db: pg.Client, server: Server, call: Call, secrets: Secrets): Promise<Run> {
  const request = requestOf(server, call, secrets);
  await drive(request, 1); // warm-up: connections open, pools filled, caches loaded
  const load = loadavg()[0];
  const keelCpu = () => server.keelPids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  const keelBefore = keelCpu();
  const pgBefore = server.appName ? await backendsCpu(db, server.appName) : undefined;
  const proxyBefore = server.proxyPid ? cpuSeconds(server.proxyPid) : 0;
  const readsBefore = server.schema ? await epochReads(db, server.schema) : NaN;
  const driven = await drive(request, DURATION);
  const keelAfter = keelCpu();
  const proxyAfter = server.proxyPid ? cpuSeconds(server.proxyPid) : 0;
  let pgSeconds: number | undefined;
  if (server.appName) {
    // A backend that closed during the run is missed: pools keep theirs under load.
    pgSeconds = backendsCpuSince(pgBefore!, await backendsCpu(db, server.appName));
  }
  const reads = server.schema ? (await epochReads(db, server.schema)) - readsBefore : NaN;
  const bad = driven.non2xx + driven.errors;
  if (driven.requests === 0 || bad > driven.requests / 100) throw new Error(`${server.label}, ${CALL_LABEL[call]}: ${driven.non2xx} non-2xx answers and ${driven.errors} errors of ${driven.requests}`);
  const per = (seconds: number) => (seconds * 1e6) / driven.requests;
  return {
    ...driven,
    setup: server.setup,
    call,
    keelMicros: per(keelAfter - keelBefore),
    pgMicros: pgSeconds === undefined ? undefined : per(pgSeconds),
    proxyMicros: server.proxyPid ? per(proxyAfter - proxyBefore) : undefined,
    perPositionRead: reads > 0 ? driven.requests / reads : undefined,
    load,
  };
}

/**
 * Waits until the processes together use under 50 ms of CPU in a second (what the writes of the
 * seeding left for later is done), at most a minute; seconds waited.
 */
async function settle(pids: number[]): Promise<number> {
  const started = Date.now();
  const used = () => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  while (Date.now() - started < 60_000) {
    const before = used();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    if (used() - before < 0.05) break;
  }
  return (Date.now() - started) / 1000;
}

/** HAProxy in the foreground on a minimal configuration: one frontend per pair of Keel ports, round robin. */
async function startHaproxy(dir: string, pairs: Array<{ name: string; targets: string[] }>): Promise<{ child: ChildProcess; ports: number[] }> {
  const ports: number[] = [];
  const lines = ['global', '  nbthread 1', '  maxconn 4096', 'defaults', '  mode http', '  timeout connect 5s', '  timeout client 60s', '  timeout server 60s', '  option http-keep-alive'];
  for (const pair of pairs) {
    const port = await freePort();
    ports.push(port);
    lines.push(`frontend ${pair.name}`, `  bind 127.0.0.1:${port}`, `  default_backend ${pair.name}`, `backend ${pair.name}`, '  balance roundrobin', ...pair.targets.map((t, i) => `  server k${i} ${new URL(t).host}`));
  }
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(config, lines.join('\n') + '\n');
  const child = spawn(HAPROXY, ['-db', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let errors = '';
  child.stderr!.on('data', (chunk: Buffer) => (errors += chunk.toString()));
  const failed = new Promise<never>((_, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`haproxy exited (${code}): ${errors}`)));
  });
  let gone = false;
  failed.catch(() => (gone = true)); // observed below while starting; after that an exit shows as failed requests
  const up = async () => {
    const deadline = Date.now() + 30_000;
    for (const port of ports) {
      for (;;) {
        if (gone) return;
        if (Date.now() > deadline) throw new Error(`haproxy did not answer on port ${port} within 30 s: ${errors}`);
        try {
          if ((await fetch(`http://127.0.0.1:${port}/about`)).ok) break;
        } catch {
          // not listening yet
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  };
  await Promise.race([up(), failed]);
  return { child, ports };
}

export async function benchPgSystem(): Promise<Section> {
  const date = new Date().toISOString();
  const dir = mkdtempSync(join(tmpdir(), 'keel-bench-pgsystem-'));
  const keels: RunningKeel[] = [];
  let raw: ChildProcess | undefined;
  let proxy: ChildProcess | undefined;
  const db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  try {
    return await withBenchSchema(PG_URL, async (newUrl) => {
      const url = await newUrl();
      const schema = /search_path=(\w+)/.exec(new URL(url).searchParams.get('options') ?? '')![1];
      const tag = schema.replace('keel_bench_', '');
      const appOn = `keel-bench-on-${tag}`;
      const appOff = `keel-bench-off-${tag}`;

      raw = spawn(process.execPath, [join(BENCH_DIR, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
      const rawPort = Number(await waitForOutput(raw, /^(\d+)\n/));

      // The query budget (250 ms by default) is for hostile queries; on a busy shared machine the
      // filtered list can pass it while queued behind the other 15 connections.
      const env = { KEEL_QUERY_BUDGET_MS: '10000' };
      const sqlite = await startKeel({ env });
      keels.push(sqlite);
      const pgDir = join(dir, 'pg');
      mkdirSync(pgDir);
      const start = async (app: string, more: Record<string, string> = {}) => {
        const keel = await startKeel({ databaseUrl: withAppName(url, app), dataDir: pgDir, env: { ...env, ...more } });
        keels.push(keel);
        return keel;
      };
      const on1 = await start(appOn);
      const on2 = await start(appOn);
      const off1 = await start(appOff, { KEEL_READ_CACHE_MB: '0' });
      const off2 = await start(appOff, { KEEL_READ_CACHE_MB: '0' });

      const seedStarted = Date.now();
      const sqliteReader = await seed(sqlite);
      const pgReader = await seed(on1);
      await db.query(`ANALYZE ${schema}.resources, ${schema}.resource_tags`); // as autovacuum would soon after
      const seedSeconds = (Date.now() - seedStarted) / 1000;

      const started = await startHaproxy(dir, [
        { name: 'cache_on', targets: [on1.base, on2.base] },
        { name: 'cache_off', targets: [off1.base, off2.base] },
      ]);
      proxy = started.child;
      const servers: Record<Setup, Server> = {
        raw: { setup: 'raw', label: SETUP_LABEL.raw, base: `http://127.0.0.1:${rawPort}`, keelPids: [raw.pid!] },
        sqlite: { setup: 'sqlite', label: SETUP_LABEL.sqlite, base: sqlite.base, keelPids: [sqlite.pid] },
        pgOn: { setup: 'pgOn', label: SETUP_LABEL.pgOn, base: `http://127.0.0.1:${started.ports[0]}`, keelPids: [on1.pid, on2.pid], appName: appOn, schema, proxyPid: proxy.pid },
        pgOff: { setup: 'pgOff', label: SETUP_LABEL.pgOff, base: `http://127.0.0.1:${started.ports[1]}`, keelPids: [off1.pid, off2.pid], appName: appOff, schema, proxyPid: proxy.pid },
      };
      const secretsOf = (setup: Setup): Secrets => (setup === 'sqlite' ? { admin: sqlite.token, reader: sqliteReader } : { admin: on1.token, reader: pgReader });
      for (const setup of ['sqlite', 'pgOn', 'pgOff'] as Setup[]) {
        // Twice: both processes behind the proxy answer.
        await check(servers[setup], secretsOf(setup));
        await check(servers[setup], secretsOf(setup));
      }

      const settled = await settle(keels.map((k) => k.pid));

      const runs: Run[][] = [];
      const loads: Array<{ start: number; end: number }> = [];
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 ? [...RUNS].reverse() : RUNS;
        const start = loadavg();
        const results: Run[] = [];
        for (const [setup, call] of order) {
          process.stderr.write(`bench pgsystem: round ${round + 1}/${ROUNDS}: ${SETUP_LABEL[setup]}, ${setup === 'raw' ? 'hello' : CALL_LABEL[call]}\n`);
          results.push(await measure(db, servers[setup], call, secretsOf(setup)));
        }
        runs.push(results);
        loads.push({ start: start[0], end: loadavg()[0] });
      }
      return report(runs, loads, seedSeconds, settled, date);
    });
  } finally {
    await endProcess(proxy?.pid);
    for (const keel of keels) await endProcess(keel.pid, () => keel.stop());
    await endProcess(raw?.pid);
    await db.end();
    rmSync(dir, { recursive: true, force: true });
  }
}

function report(runs: Run[][], loads: Array<{ start: number; end: number }>, seedSeconds: number, settled: number, date: string): Section {
  // A run left out (BENCH_PGSYSTEM_RUNS) reads as NaN everywhere: shown as –.
  const missing = { requestsPerSecond: NaN, p50: NaN, p99: NaN, keelMicros: NaN, load: NaN, non2xx: 0, errors: 0 } as Run;
  const find = (round: Run[], setup: Setup, call: Call) => round.find((r) => r.setup === setup && r.call === call) ?? missing;
  const series = (setup: Setup, call: Call, f: (r: Run) => number | undefined) => runs.map((round) => f(find(round, setup, call)) ?? NaN);
  const system = (r: Run) => r.keelMicros + (r.pgMicros ?? 0);
  const bySetup = (file: string, title: string, unit: string, f: (r: Run) => number | undefined) => ({
    file,
    title,
    unit,
    kind: 'bar' as const,
    categories: ['GET', 'authorized GET', 'filtered list'],
    series: (['sqlite', 'pgOn', 'pgOff'] as Setup[]).map((setup) => ({
      name: { sqlite: 'SQLite', pgOn: 'PostgreSQL ×2, cache', pgOff: 'PostgreSQL ×2, no cache', raw: '' }[setup],
      values: (['get', 'auth', 'list'] as Call[]).map((call) => mean(series(setup, call, f))),
    })),
  });
  /** Per round: the raw server's CPU per request over the setup's; its throughput over raw's. */
  const vsRaw = (setup: Setup, call: Call) => ({
    rps: runs.map((round) => find(round, setup, call).requestsPerSecond / find(round, 'raw', 'get').requestsPerSecond),
    keel: runs.map((round) => find(round, 'raw', 'get').keelMicros / find(round, setup, call).keelMicros),
    system: runs.map((round) => find(round, 'raw', 'get').keelMicros / system(find(round, setup, call))),
  });
  /** Per round: the cache's effect on PostgreSQL, as throughput on/off and CPU per request off/on. */
  const cache = (call: Call) => ({
    rps: runs.map((round) => find(round, 'pgOn', call).requestsPerSecond / find(round, 'pgOff', call).requestsPerSecond),
    keel: runs.map((round) => find(round, 'pgOff', call).keelMicros / find(round, 'pgOn', call).keelMicros),
    system: runs.map((round) => system(find(round, 'pgOff', call)) / system(find(round, 'pgOn', call))),
  });
  const verdict = (x: number, goal: number) => (x >= goal ? 'met' : 'not met');

  const targets = RUNS.map(([setup, call]) => {
    const name = setup === 'raw' ? 'raw node:http: a constant 60-byte JSON' : `${SETUP_LABEL[setup]}: ${CALL_LABEL[call]}`;
    const col = (f: (r: Run) => number | undefined, digits: number) => {
      const xs = series(setup, call, f);
      return xs.every((x) => Number.isNaN(x)) ? '' : spread(xs, digits);
    };
    return `| ${name} | ${col((r) => r.requestsPerSecond, 0)} | ${col((r) => r.p50, 1)} | ${col((r) => r.p99, 1)} | ${col((r) => r.keelMicros, 1)} | ${col((r) => r.pgMicros, 1)} | ${col((r) => r.proxyMicros, 1)} | ${col((r) => r.perPositionRead, 1)} | ${series(setup, call, (r) => r.non2xx + r.errors).reduce((a, b) => a + b, 0)} |`;
  });

  const sqliteGet = vsRaw('sqlite', 'get');
  const pgGet = vsRaw('pgOn', 'get');
  const pgGetOff = vsRaw('pgOff', 'get');
  const sqliteAuth = vsRaw('sqlite', 'auth');
  const pgAuth = vsRaw('pgOn', 'auth');
  const cacheGet = cache('get');
  const cacheAuth = cache('auth');
  const cacheList = cache('list');
  const row = (name: string, r: { rps: number[]; keel: number[]; system: number[] }, goal: string, met: string) => `| ${name} | ${each(r.rps, 2)} | ${each(r.keel, 2)} | ${each(r.system, 2)} | ${goal} | ${met} |`;

  return {
    title: 'One system: two Keel processes on PostgreSQL behind HAProxy, against SQLite and raw node:http',
    lines: [
      `In one run (${date}, ${((Date.now() - Date.parse(date)) / 60000).toFixed(1)} min): raw node:http (bench/raw-server.ts); one Keel process on SQLite; two Keel processes on one PostgreSQL schema behind HAProxy (\`${HAPROXY}\`, one thread, round robin per request, keep-alive to both) with the read cache at its default bound and read leases at their default length (reads under a lease ask the database nothing: docs/storage.md); two more on the same schema with \`KEEL_READ_CACHE_MB=0\` (no cache, so no lease: every batch of reads asks the database for its position) behind a second HAProxy frontend. Load: ${GENERATOR}, ${DURATION} s per run after a 1 s warm-up, each setup loaded alone while the others idle. Every Keel process runs with \`KEEL_QUERY_BUDGET_MS=10000\` (a queued query on a busy machine must not be refused); otherwise defaults. ${ROUNDS} rounds, the order of the ten runs reversed every other round.`,
      '',
      'The requests: **GET** of one gvc with the admin key (a superuser); **authorized GET**, the same gvc by a service-account key whose `view` comes from a policy bound to a group it is a member of; **filtered list**, `POST /org/bench/resource/-query` for the tag `team=blue` over ' +
        `${ITEMS} resources (100 match), by that service account, whose view of resources comes from a policy's \`targetQuery\` (\`visible=yes\`): it answers ${VISIBLE_MATCHES} items. Each answer is checked (status, item count, nothing the policy hides) before loading. Data seeded through the API (${seedSeconds.toFixed(0)} s for both stores); loading began once the Keel processes had been idle for a second (after ${settled.toFixed(0)} s), so no run pays for work the seeding left behind.`,
      '',
      'Per request, mean ± standard deviation over the rounds. CPU columns are server CPU time (user + system, from /proc) per completed request, in µs: **Keel** is the Keel processes of the setup together (raw node:http for the first row); **PostgreSQL** the backends serving that setup\'s connections (found by `application_name` in `pg_stat_activity`; not the WAL writer, checkpointer or autovacuum); **HAProxy** the proxy process. **Requests per catch-up**: completed requests over the scans of `keel_cache_epoch` meanwhile (each catch-up, position-only or whole, reads it once, as does the catch-up after each lease renewal; the statistics lag by up to a second). Latencies in ms.',
      '',
      '| Setup: request | req/s | p50 ms | p99 ms | Keel CPU µs | PostgreSQL CPU µs | HAProxy CPU µs | requests per catch-up | non-2xx + errors |',
      '|---|---|---|---|---|---|---|---|---|',
      ...targets,
      '',
      'Ratios, each taken within one round, then mean ± standard deviation over the rounds (each round in parentheses). Against raw node:http: **throughput** is the setup\'s req/s over raw\'s; **CPU (Keel)** raw\'s CPU per request over the Keel processes\'; **CPU (Keel + PostgreSQL)** raw\'s over Keel\'s and its backends\' together (for SQLite the same as Keel). The cache\'s effect: throughput with the cache over without, and CPU per request without over with. CPU ratios are what the server would do with the cores to itself; throughput ratios drift towards 1 when other work takes turns on the cores (see the load average) and include HAProxy, the load generator and PostgreSQL on the same two cores.',
      '',
      '| Ratio | throughput | CPU (Keel) | CPU (Keel + PostgreSQL) | goal | mean |',
      '|---|---|---|---|---|---|',
      row('SQLite GET / raw node:http', sqliteGet, '≥ 0.5 by CPU', verdict(mean(sqliteGet.keel), 0.5)),
      row('PostgreSQL GET (cache) / raw node:http', pgGet, '≥ 0.4 by CPU (Keel + PostgreSQL)', verdict(mean(pgGet.system), 0.4)),
      row('PostgreSQL GET (no cache) / raw node:http', pgGetOff, '', ''),
      row('SQLite authorized GET / raw node:http', sqliteAuth, '', ''),
      row('PostgreSQL authorized GET (cache) / raw node:http', pgAuth, '', ''),
      row('PostgreSQL GET: cache / no cache', cacheGet, '', ''),
      row('PostgreSQL authorized GET: cache / no cache', cacheAuth, '≥ 2', verdict(Math.min(mean(cacheAuth.rps), mean(cacheAuth.system)), 2)),
      row('PostgreSQL filtered list: cache / no cache', cacheList, '≥ 2', verdict(Math.min(mean(cacheList.rps), mean(cacheList.system)), 2)),
      '',
      '"met" compares the mean with the goal (for "≥ 2", both the throughput and the Keel + PostgreSQL CPU ratio).',
      '',
      '| Round | order | 1-min load average at the start of each run, in the order they ran | at round start → end |',
      '|---|---|---|---|',
      ...runs.map((round, i) => `| ${i + 1} | ${i % 2 ? 'reversed' : 'as listed'} | ${round.map((r) => r.load.toFixed(1)).join(', ')} | ${loads[i].start.toFixed(2)} → ${loads[i].end.toFixed(2)} |`),
    ],
    figures: {
      pgSystemSqliteGetVsRawCpu: mean(sqliteGet.keel),
      pgSystemSqliteGetVsRawThroughput: mean(sqliteGet.rps),
      pgSystemPostgresGetVsRawCpu: mean(pgGet.system),
      pgSystemPostgresGetVsRawKeelCpu: mean(pgGet.keel),
      pgSystemPostgresGetVsRawThroughput: mean(pgGet.rps),
      pgSystemPostgresNoCacheGetVsRawCpu: mean(pgGetOff.system),
      pgSystemCacheGetThroughput: mean(cacheGet.rps),
      pgSystemCacheAuthGetThroughput: mean(cacheAuth.rps),
      pgSystemCacheAuthGetCpu: mean(cacheAuth.system),
      pgSystemCacheListThroughput: mean(cacheList.rps),
      pgSystemCacheListCpu: mean(cacheList.system),
      pgSystemLoadAverage: mean(runs.flat().map((r) => r.load)),
    },
    charts: [
      bySetup('pg-system-throughput.svg', 'One system: requests/s by setup (mean over rounds)', 'requests/s', (r) => r.requestsPerSecond),
      bySetup('pg-system-cpu.svg', 'One system: server CPU µs per request (Keel + PostgreSQL backends)', 'µs', system),
    ],
  };
}
