// What the audit log costs: the same PATCH load against Keel with KEEL_AUDIT=on and =off.
import { load, loadTable, PG_URL, startKeel, type LoadResult, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ITEMS = 200;

/** Every request changes a different group's tag to a new value, so each one is a real change (and event). */
async function patchLoad(keel: RunningKeel, name: string): Promise<LoadResult> {
  for (let i = 0; i < ITEMS; i++) {
    const res = await keel.call('POST', `/org/${keel.org}/gvc`, { name: `audit-${i}` });
    if (res.status !== 201) throw new Error(`setup failed: ${res.status}`);
  }
  let n = 0;
  return load(name, {
    url: keel.base,
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
}

/** Audit off and on, each run ROUNDS times, alternating which goes first (a run can slow the next: the host writes back its files). */
const ROUNDS = Number(process.env.BENCH_AUDIT_ROUNDS ?? 5);

interface Pair {
  off: LoadResult;
  on: LoadResult;
  /** Each round's cost (1 - on/off). */
  rounds: number[];
}

async function pair(label: string, databaseUrl: () => Promise<string | undefined>): Promise<Pair> {
  const runs: Record<string, LoadResult[]> = { off: [], on: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const audit of round % 2 === 0 ? ['off', 'on'] : ['on', 'off']) {
      const keel = await startKeel({ databaseUrl: await databaseUrl(), env: { KEEL_AUDIT: audit } });
      try {
        runs[audit].push(await patchLoad(keel, `PATCH, ${label}, audit ${audit}`));
      } finally {
        await keel.stop();
      }
    }
  }
  return { off: mean(runs.off), on: mean(runs.on), rounds: runs.on.map((on, i) => cost(runs.off[i], on)) };
}

/** The rounds' results as one: mean throughput, median latencies, all non-2xx answers. */
function mean(results: LoadResult[]): LoadResult {
  const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  return {
    name: `${results[0].name} (${results.length} runs)`,
    requestsPerSecond: results.reduce((sum, r) => sum + r.requestsPerSecond, 0) / results.length,
    p50: median(results.map((r) => r.p50)),
    p99: median(results.map((r) => r.p99)),
    non2xx: results.reduce((sum, r) => sum + r.non2xx, 0),
  };
}

const cost = (off: LoadResult, on: LoadResult) => 1 - on.requestsPerSecond / off.requestsPerSecond;
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
      `Each backend runs audit off and on ${ROUNDS} times, alternating which goes first; the table gives mean req/s and median latencies.`,
      `Audit cost: SQLite **${percent(cost(sqliteOff, sqliteOn))}** (rounds: ${sqlite.rounds.map(percent).join(', ')}), ` +
        `PostgreSQL **${percent(cost(pgOff, pgOn))}** (rounds: ${postgres.rounds.map(percent).join(', ')}) of throughput (goal ≤ 20%).`,
    ],
    figures: {
      sqliteAuditOff: sqliteOff.requestsPerSecond,
      sqliteAuditOn: sqliteOn.requestsPerSecond,
      postgresAuditOff: pgOff.requestsPerSecond,
      postgresAuditOn: pgOn.requestsPerSecond,
      sqliteAuditCost: cost(sqliteOff, sqliteOn),
      postgresAuditCost: cost(pgOff, pgOn),
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
