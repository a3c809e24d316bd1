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

async function pair(label: string, databaseUrl: () => Promise<string | undefined>): Promise<[LoadResult, LoadResult]> {
  const results: LoadResult[] = [];
  for (const audit of ['off', 'on']) {
    const keel = await startKeel({ databaseUrl: await databaseUrl(), env: { KEEL_AUDIT: audit } });
    try {
      results.push(await patchLoad(keel, `PATCH, ${label}, audit ${audit}`));
    } finally {
      await keel.stop();
    }
  }
  return [results[0], results[1]];
}

export async function benchAudit(): Promise<Section> {
  const [sqliteOff, sqliteOn] = await pair('SQLite', async () => undefined);
  const [pgOff, pgOn] = await withBenchSchema(PG_URL, (url) => pair('PostgreSQL', async () => url()));
  const cost = (off: LoadResult, on: LoadResult) => 1 - on.requestsPerSecond / off.requestsPerSecond;
  return {
    title: 'Audit overhead (mutation throughput with audit on against off)',
    lines: [
      ...loadTable([sqliteOff, sqliteOn, pgOff, pgOn]),
      '',
      `Each PATCH changes a tag of one of ${ITEMS} GVCs, so each is a real change with its event (appended in the same transaction).`,
      `Audit cost: SQLite **${(cost(sqliteOff, sqliteOn) * 100).toFixed(1)}%**, PostgreSQL **${(cost(pgOff, pgOn) * 100).toFixed(1)}%** of throughput (goal ≤ 20%).`,
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
