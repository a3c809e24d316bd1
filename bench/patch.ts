// PATCH with directives and a version precondition, on SQLite and on PostgreSQL.
import type autocannon from 'autocannon';
import { CONNECTIONS, PG_URL, load, loadTable, startKeel, type LoadResult, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

// Enough GVCs that every connection always finds an idle one, plus the few a finished run strands.
const TARGETS = 256;
const GOALS = { sqlite: 5000, postgres: 2000 };
const LOCATION = '/org/bench/location/aws-us-west-2';

/** What one request remembers between being built and its answer. */
interface Slot {
  name: string;
}

/**
 * Load where every request carries the version its target is at, so none conflicts: a GVC is
 * taken from the idle pool when a request is built and returned with the version its answer
 * reports. A request the run cut off never returns its GVC, which is then never used again.
 */
function versionedPatches(keel: RunningKeel, versions: Map<string, number>): autocannon.Options {
  const idle = [...versions.keys()];
  let seq = 0;
  return {
    url: keel.base,
    requests: [
      {
        method: 'PATCH',
        setupRequest(request, context) {
          const name = idle.shift();
          if (!name) throw new Error('no idle gvc left: raise TARGETS');
          (context as Slot).name = name;
          const n = String(++seq);
          const body = {
            version: versions.get(name),
            tags: { seq: n },
            spec: {
              '$patch/env': [{ name: 'SEQ', value: n }],
              staticPlacement: { '$drop/locationLinks': [LOCATION], '$append/locationLinks': [LOCATION] },
            },
          };
          return {
            ...request,
            path: `/org/${keel.org}/gvc/${name}`,
            headers: { authorization: `Bearer ${keel.token}`, 'content-type': 'application/json' },
            body: JSON.stringify(body),
          };
        },
        onResponse(status, body, context) {
          const { name } = context as Slot;
          if (status === 200) versions.set(name, (JSON.parse(body) as { version: number }).version);
          idle.push(name);
        },
      },
    ],
  };
}

async function measure(backend: 'sqlite' | 'postgres', databaseUrl?: string): Promise<LoadResult> {
  const keel = await startKeel({ databaseUrl });
  try {
    const versions = new Map<string, number>();
    for (let i = 0; i < TARGETS; i++) {
      const name = `g${i}`;
      const created = await keel.call('POST', `/org/${keel.org}/gvc`, { name, spec: { env: [{ name: 'SEQ', value: '0' }], staticPlacement: { locationLinks: [LOCATION] } } });
      if (created.status !== 201) throw new Error(`could not create gvc ${name}: ${created.status} ${JSON.stringify(created.body)}`);
      versions.set(name, created.body.version);
    }
    return await load(`Keel PATCH gvc, directives + version (${backend})`, versionedPatches(keel, versions));
  } finally {
    await keel.stop();
  }
}

export async function benchPatch(): Promise<Section> {
  const sqlite = await measure('sqlite');
  const postgres = await withBenchSchema(PG_URL, async (url) => measure('postgres', await url()));
  const verdict = (r: LoadResult, goal: number) => `${r.requestsPerSecond.toFixed(0)}/s against a goal of ≥ ${goal}/s: **${r.requestsPerSecond >= goal ? 'met' : 'missed'}**`;
  return {
    title: 'PATCH with directives and a version precondition',
    lines: [
      ...loadTable([sqlite, postgres]),
      '',
      `Each request is \`PATCH /org/bench/gvc/gN\` with \`version\` (the one the GVC is at), a \`tags\` merge, \`spec.$patch/env\`, and \`$drop/\` + \`$append/locationLinks\`:`,
      `every request changes its GVC (version + 1). ${TARGETS} GVCs are shared by the ${CONNECTIONS} connections through an idle pool, so no two`,
      'requests in flight address the same GVC and each sends the version the previous answer reported: non-2xx must be 0.',
      '',
      `SQLite: ${verdict(sqlite, GOALS.sqlite)}. PostgreSQL: ${verdict(postgres, GOALS.postgres)}.`,
    ],
    figures: {
      patchSqliteRequestsPerSecond: sqlite.requestsPerSecond,
      patchSqliteP50: sqlite.p50,
      patchSqliteP99: sqlite.p99,
      patchSqliteNon2xx: sqlite.non2xx,
      patchPostgresRequestsPerSecond: postgres.requestsPerSecond,
      patchPostgresP50: postgres.p50,
      patchPostgresP99: postgres.p99,
      patchPostgresNon2xx: postgres.non2xx,
    },
    charts: [
      {
        file: 'patch-rate.svg',
        title: 'PATCH with directives and a version precondition',
        unit: 'requests/s',
        kind: 'bar',
        categories: ['SQLite', 'PostgreSQL'],
        series: [
          { name: 'measured', values: [sqlite.requestsPerSecond, postgres.requestsPerSecond] },
          { name: 'goal', values: [GOALS.sqlite, GOALS.postgres] },
        ],
      },
      {
        file: 'patch-latency.svg',
        title: 'PATCH latency',
        unit: 'ms',
        kind: 'bar',
        categories: ['SQLite', 'PostgreSQL'],
        series: [
          { name: 'p50', values: [sqlite.p50, postgres.p50] },
          { name: 'p99', values: [sqlite.p99, postgres.p99] },
        ],
      },
    ],
  };
}
