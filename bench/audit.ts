// What the audit log costs: the same PATCH load against Keel with KEEL_AUDIT=on and =off.
import { CONNECTIONS, cpuSeconds, load, loadTable, PG_URL, postgresCpuSeconds, startKeel, type LoadResult, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ITEMS = 200;
/**
 * The report's 16 by default, like every section. At 16 a SQLite server still waits for requests a
 * few percent of the time, more so with audit on; more connections measure it saturated.
 */
const AUDIT_CONNECTIONS = Number(process.env.BENCH_AUDIT_CONNECTIONS ?? CONNECTIONS);

/** CPU per change, µs: Keel's main thread (where requests run), its other threads, and PostgreSQL's processes when it is the store. */
interface Cpu {
  main: number;
  helpers: number;
  postgres: number;
}

interface Run {
  load: LoadResult;
  cpu: Cpu;
}

/** CPU seconds used so far by the parts Cpu names. */
function cpuNow(keel: RunningKeel, postgres: boolean): Cpu {
  const main = cpuSeconds(keel.pid, true);
  return { main, helpers: cpuSeconds(keel.pid) - main, postgres: postgres ? postgresCpuSeconds() : 0 };
}

/** Every request changes a different group's tag to a new value, so each one is a real change (and event). */
async function patchLoad(keel: RunningKeel, name: string, postgres: boolean): Promise<Run> {
  for (let i = 0; i < ITEMS; i++) {
    const res = await keel.call('POST', `/org/${keel.org}/gvc`, { name: `audit-${i}` });
    if (res.status !== 201) throw new Error(`setup failed: ${res.status}`);
  }
  let n = 0;
  const before = cpuNow(keel, postgres);
  const result = await load(name, {
    url: keel.base,
    connections: AUDIT_CONNECTIONS,
    requests: [
      {
        method: 'PATCH',
        headers: { authorization: `Bearer ${keel.token}`, 'content-type': 'application/json' },
        setupRequest: (request) => {
          n++;
          return { ...request, path: `/org/${keel.org}/gvc/audit-${n % ITEMS}`, body: JSON.stringify({ tags: { n: String(n) } }) };
        },
      },
    ],
  });
  const after = cpuNow(keel, postgres);
  // Per request sent: the count and the CPU read around load() both take in its warm-up.
  const perChange = (part: keyof Cpu) => ((after[part] - before[part]) / n) * 1e6;
  return { load: result, cpu: { main: perChange('main'), helpers: perChange('helpers'), postgres: perChange('postgres') } };
}

/** Audit off and on, each run ROUNDS times, alternating which goes first (a run can slow the next: the host writes back its files). */
const ROUNDS = Number(process.env.BENCH_AUDIT_ROUNDS ?? 8);

interface Pair {
  off: LoadResult;
  on: LoadResult;
  /** Each round's cost (1 - on/off). */
  rounds: number[];
  /** Mean CPU per change. */
  cpu: Record<'off' | 'on', Cpu>;
}

async function pair(label: string, databaseUrl: () => Promise<string | undefined>): Promise<Pair> {
  const runs: Record<'off' | 'on', Run[]> = { off: [], on: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const audit of round % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
      const url = await databaseUrl();
      const keel = await startKeel({ databaseUrl: url, env: { KEEL_AUDIT: audit } });
      try {
        runs[audit].push(await patchLoad(keel, `PATCH, ${label}, audit ${audit}`, url !== undefined));
      } finally {
        await keel.stop();
      }
    }
  }
  const off = runs.off.map((r) => r.load);
  const on = runs.on.map((r) => r.load);
  const cpu = (rs: Run[]): Cpu => ({ main: average(rs.map((r) => r.cpu.main)), helpers: average(rs.map((r) => r.cpu.helpers)), postgres: average(rs.map((r) => r.cpu.postgres)) });
  return { off: mean(off), on: mean(on), rounds: on.map((r, i) => cost(off[i], r)), cpu: { off: cpu(runs.off), on: cpu(runs.on) } };
}

const average = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;

/** The rounds' results as one: mean throughput, median latencies, all non-2xx answers. */
function mean(results: LoadResult[]): LoadResult {
  const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  return {
    name: `${results[0].name} (${results.length} runs)`,
    requestsPerSecond: average(results.map((r) => r.requestsPerSecond)),
    p50: median(results.map((r) => r.p50)),
    p99: median(results.map((r) => r.p99)),
    non2xx: results.reduce((sum, r) => sum + r.non2xx, 0),
  };
}

const cost = (off: LoadResult, on: LoadResult) => 1 - on.requestsPerSecond / off.requestsPerSecond;
/** The throughput cost if Keel's main thread were the only limit. */
const mainThreadCost = (cpu: Pair['cpu']) => 1 - cpu.off.main / cpu.on.main;
const percent = (value: number) => `${(value * 100).toFixed(1)}%`;

export async function benchAudit(): Promise<Section> {
  const sqlite = await pair('SQLite', async () => undefined);
  const postgres = await withBenchSchema(PG_URL, (url) => pair('PostgreSQL', async () => url()));
  const [sqliteOff, sqliteOn, pgOff, pgOn] = [sqlite.off, sqlite.on, postgres.off, postgres.on];
  return {
    title: 'Audit overhead (mutation throughput with audit on against off)',
    lines: [
      ...loadTable([sqliteOff, sqliteOn, pgOff, pgOn]),
      '',
      `Each PATCH changes a tag of one of ${ITEMS} GVCs, so each is a real change with its event (appended in the same transaction).`,
      `Each backend runs audit off and on ${ROUNDS} times with ${AUDIT_CONNECTIONS} connections, alternating which goes first; the table gives mean req/s and median latencies.`,
      `Audit cost: SQLite **${percent(cost(sqliteOff, sqliteOn))}** (rounds: ${sqlite.rounds.map(percent).join(', ')}), ` +
        `PostgreSQL **${percent(cost(pgOff, pgOn))}** (rounds: ${postgres.rounds.map(percent).join(', ')}) of throughput (goal ≤ 20%).`,
      '',
      'CPU per change in µs (from /proc; mean of the rounds, warm-up included), off → on: steadier than throughput on this shared machine.',
      "Keel's main thread runs every request; its other threads are SQLite's housekeeping (seals, lookups) and V8's.",
      "'Main thread only' is the cost where that thread is the one limit (1 − off/on of its time per change): on a machine with cores to spare for the",
      'rest (the load generator, the housekeeping, PostgreSQL). Here everything shares two cores, so the extra work elsewhere also costs throughput.',
      '',
      '| Backend | Keel main thread | Keel other threads | PostgreSQL processes | all, extra with audit | main thread only |',
      '|---|---|---|---|---|---|',
      ...([['SQLite', sqlite], ['PostgreSQL', postgres]] as const).map(([name, { cpu }]) => {
        const span = (part: keyof Cpu) => `${cpu.off[part].toFixed(0)} → ${cpu.on[part].toFixed(0)}`;
        const total = (c: Cpu) => c.main + c.helpers + c.postgres;
        const extra = total(cpu.on) - total(cpu.off);
        return `| ${name} | ${span('main')} | ${span('helpers')} | ${name === 'SQLite' ? '–' : span('postgres')} | +${extra.toFixed(0)} (${percent(extra / total(cpu.off))}) | ${percent(mainThreadCost(cpu))} |`;
      }),
    ],
    figures: {
      sqliteAuditOff: sqliteOff.requestsPerSecond,
      sqliteAuditOn: sqliteOn.requestsPerSecond,
      postgresAuditOff: pgOff.requestsPerSecond,
      postgresAuditOn: pgOn.requestsPerSecond,
      sqliteAuditCost: cost(sqliteOff, sqliteOn),
      postgresAuditCost: cost(pgOff, pgOn),
      sqliteMainThreadCost: mainThreadCost(sqlite.cpu),
      postgresMainThreadCost: mainThreadCost(postgres.cpu),
      sqliteMainThreadUsOff: sqlite.cpu.off.main,
      sqliteMainThreadUsOn: sqlite.cpu.on.main,
      postgresMainThreadUsOff: postgres.cpu.off.main,
      postgresMainThreadUsOn: postgres.cpu.on.main,
      postgresServerUsOff: postgres.cpu.off.postgres,
      postgresServerUsOn: postgres.cpu.on.postgres,
    },
    charts: [
      {
        file: 'audit-overhead.svg',
        title: 'Mutation throughput with the audit log off and on',
        unit: 'PATCH requests/s',
        kind: 'bar',
        categories: ['SQLite', 'PostgreSQL'],
        series: [
          { name: 'audit off', values: [sqliteOff.requestsPerSecond, pgOff.requestsPerSecond] },
          { name: 'audit on', values: [sqliteOn.requestsPerSecond, pgOn.requestsPerSecond] },
        ],
      },
    ],
  };
}
