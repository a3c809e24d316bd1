// Keel for CI: (a) reset time (POST /-admin/reset's work: everything dropped, the first org and the
// seed made again, in one transaction) with 1,000 and 10,000 items on each backend, goal 200 ms at
// 1,000; (b) what fault injection costs a request when it is on but no rule matches, against it
// being off (goal: within noise), in alternating rounds against two servers running side by side.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { changeEvent, KEEL_ACTOR } from '../src/audit/events.js';
import { resetStore } from '../src/admin/reset.js';
import { DEFAULTS, type Config } from '../src/config.js';
import { findKind } from '../src/kinds/index.js';
import { accountLinkOf, createOrg } from '../src/resources/orgs.js';
import { present } from '../src/resources/present.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/types.js';
import { PG_URL, load, startKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const RESET_ROUNDS = Number(process.env.BENCH_RESET_ROUNDS ?? 5);
const FAULT_ROUNDS = Number(process.env.BENCH_FAULT_ROUNDS ?? 6);
const SIZES = [1_000, 10_000];
const ORG = 'bench';
const BATCH = 500;

const SEED = `kind: gvc
name: demo
spec:
  staticPlacement:
    locationLinks: [//location/aws-us-west-2]
---
kind: workload
name: web
gvc: demo
spec:
  type: standard
  containers: [{name: nginx, image: nginx:latest, ports: [{protocol: http, number: 8080}]}]
---
kind: secret
name: creds
type: opaque
data: {payload: s3cret}
`;

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** `count` secrets, each with its create event, written straight into the store in batches. */
async function fill(store: Store, count: number): Promise<void> {
  const def = findKind('secret')!;
  for (let at = 0; at < count; at += BATCH) {
    await store.transaction(async (tx) => {
      const now = new Date().toISOString();
      for (let i = at; i < Math.min(count, at + BATCH); i++) {
        const name = `item-${i}`;
        const item = { org: ORG, kind: 'secret', gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: { name, description: name, tags: {}, type: 'opaque', data: { payload: 'x', encoding: 'plain' } } };
        await tx.insert(item);
        await tx.appendAudit(changeEvent(ORG, KEEL_ACTOR, 'create', present(def, item)));
      }
    });
  }
}

async function resetTimes(databaseUrl: string | undefined): Promise<number[]> {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-reset-'));
  const init = join(dataDir, 'seed.yaml');
  writeFileSync(init, SEED);
  const store = await openStore({ dataDir, databaseUrl });
  const config: Config = { ...DEFAULTS, dataDir, databaseUrl, org: ORG, init, allowReset: true };
  try {
    await createOrg(store, { name: ORG, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(ORG), adminServiceAccount: 'admin' });
    // The first reset of a process compiles validators and makes the state later resets restore.
    await resetStore(store, config);
    const medians: number[] = [];
    for (const size of SIZES) {
      const times: number[] = [];
      for (let round = 0; round < RESET_ROUNDS; round++) {
        await fill(store, size);
        // Chained and indexed first: the background work the writes left is not the reset's.
        await store.auditHead(ORG);
        await store.audit({ org: ORG, limit: 1 });
        const started = performance.now();
        await resetStore(store, config);
        times.push(performance.now() - started);
      }
      medians.push(median(times));
    }
    return medians;
  } finally {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function benchReset(): Promise<Section> {
  const sqlite = await resetTimes(undefined);
  const postgres = await withBenchSchema(PG_URL, async (url) => resetTimes(await url()));
  const row = (label: string, ms: number[]) => `| ${label} | ${ms.map((m) => m.toFixed(0)).join(' | ')} |`;
  return {
    title: 'Reset (KEEL_ALLOW_RESET): back to the seed',
    lines: [
      `Median of ${RESET_ROUNDS} resets of an instance holding N secrets (each with its audit event) plus the seed, measured in-process around resetStore (what POST /-admin/reset runs). Goal: ≤ 200 ms at 1,000 items.`,
      '',
      `| Backend | ${SIZES.map((s) => `${s.toLocaleString('en')} items, ms`).join(' | ')} |`,
      `|---|${SIZES.map(() => '---').join('|')}|`,
      row('SQLite', sqlite),
      row('PostgreSQL', postgres),
    ],
    figures: Object.fromEntries(SIZES.flatMap((s, i) => [[`resetSqliteMs${s}`, sqlite[i]], [`resetPostgresMs${s}`, postgres[i]]])),
  };
}

export async function benchFaults(): Promise<Section> {
  // Two servers at once, loaded in turn: each round measures one while the other idles.
  const off = await startKeel();
  const on = await startKeel({ env: { KEEL_FAULTS: 'on' } });
  try {
    for (const keel of [off, on]) {
      const res = await keel.call('POST', `/org/${ORG}/gvc`, { name: 'target' });
      if (res.status !== 201) throw new Error(`create gvc: ${res.status}`);
    }
    const rule = await on.call('PUT', '/-admin/faults', { rules: [{ name: 'elsewhere', path: '/org/other/*', status: 503 }, { name: 'deletes', method: 'DELETE', kind: 'workload', status: 500 }] });
    if (rule.status !== 200) throw new Error(`set rules: ${rule.status}`);
    const rates: { off: number[]; on: number[] } = { off: [], on: [] };
    for (let round = 0; round < FAULT_ROUNDS; round++) {
      // Alternating which goes first cancels a drift of the machine over a round.
      const order = round % 2 === 0 ? (['off', 'on'] as const) : (['on', 'off'] as const);
      for (const which of order) {
        const keel = which === 'off' ? off : on;
        const r = await load(`GET gvc, faults ${which}`, { url: `${keel.base}/org/${ORG}/gvc/target`, headers: { authorization: `Bearer ${keel.token}` } });
        if (r.non2xx) throw new Error(`${r.non2xx} non-2xx answers with faults ${which}`);
        rates[which].push(r.requestsPerSecond);
      }
    }
    const hits = (await on.call('GET', '/-admin/faults')).body.rules.map((r: { hits: number }) => r.hits);
    const offMedian = median(rates.off);
    const onMedian = median(rates.on);
    const cost = (1 - onMedian / offMedian) * 100;
    return {
      title: 'Fault injection on, no rule matching: request-path cost',
      lines: [
        `GET of one gvc on SQLite, two servers side by side (KEEL_FAULTS off, and on with two rules that match nothing), ${FAULT_ROUNDS} alternating rounds each. Goal: within noise.`,
        '',
        '| | median req/s | rounds (req/s) |',
        '|---|---|---|',
        `| faults off | ${offMedian.toFixed(0)} | ${rates.off.map((r) => r.toFixed(0)).join(' / ')} |`,
        `| faults on, no match | ${onMedian.toFixed(0)} | ${rates.on.map((r) => r.toFixed(0)).join(' / ')} |`,
        '',
        `Cost: ${cost.toFixed(1)}% of throughput (negative: faster). Rules hit: ${hits.join(', ')} (none expected).`,
      ],
      figures: { faultsOffRps: offMedian, faultsOnRps: onMedian, faultsCostPercent: cost },
    };
  } finally {
    await off.stop();
    await on.stop();
  }
}
