// Hostile callers against everyone else: the event loop's delay inside the Keel process (p50/p99,
// perf_hooks.monitorEventLoopDelay, see lag-probe.ts) and the latency of an unrelated GET, first with
// no attack, then while 12 watch replays from the start of a long chain (by a key that may see
// nothing, reconnecting to replay again) and 4 heavy queries (many `~` terms on property "*") run,
// in the same run on the same server. Goals: lag p99 ≤ 100 ms, GET p99 ≤ 5 × its no-attack value.
import autocannon from 'autocannon';
import { fork } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BENCH_DIR, DURATION, PG_URL, startKeel, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

/** Workloads the heavy queries scan. */
const WORKLOADS = Number(process.env.BENCH_ADVERSARIAL_WORKLOADS ?? 3000);
/** Audit events in the org's chain the replays read (creates, then edits). */
const EVENTS = Number(process.env.BENCH_ADVERSARIAL_EVENTS ?? 20_000);
const BACKENDS = (process.env.BENCH_ADVERSARIAL_BACKENDS ?? 'sqlite,postgres').split(',');
const WATCHERS = Number(process.env.BENCH_ADVERSARIAL_WATCHERS ?? 12);
const HEAVY_QUERIES = Number(process.env.BENCH_ADVERSARIAL_QUERIES ?? 4);
/** A hostile watcher drops its stream and replays from 0 again this often. */
const REPLAY_EVERY_MS = 1000;
/** Connections of the unrelated GET: few, so its latency is the server's and not a queue's. */
const GET_CONNECTIONS = 4;
/** How long the lag probe may take to answer (it answers on the event loop it measures). */
const PROBE_WAIT_MS = 120_000;

interface Lag {
  p50: number;
  p99: number;
  max: number;
  rssMiB: number;
}

interface Phase {
  lag: Lag;
  getP50: number;
  getP99: number;
  getRps: number;
  getNon2xx: number;
  /** Requests that failed or timed out (autocannon's 10 s) rather than being answered. */
  getErrors: number;
}

interface Figures {
  backend: string;
  quiet: Phase;
  attacked: Phase;
  /** Watch opens by status. */
  replays: Record<string, number>;
  queries: Record<string, number>;
}

/** The probe's figures since the last call (it resets on each signal). */
async function lagSince(pid: number, file: string): Promise<Lag> {
  rmSync(file, { force: true });
  process.kill(pid, 'SIGUSR2');
  // A stalled event loop answers the signal late: that wait is part of what is measured, not an error.
  const until = Date.now() + PROBE_WAIT_MS;
  while (!existsSync(file) && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
  for (let i = 0; i < 40; i++) {
    try {
      return JSON.parse(readFileSync(file, 'utf8')) as Lag;
    } catch {
      await new Promise((r) => setTimeout(r, 25)); // still being written
    }
  }
  throw new Error(`the lag probe of process ${pid} did not write ${file}`);
}

/** Runs `fn` over `items` with `width` of them at a time. */
async function pool<T>(items: T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await fn(items[next++]);
  }));
}

async function seed(keel: RunningKeel): Promise<string> {
  const org = keel.org;
  const must = async (res: Promise<{ status: number; body: any }>, status: number, what: string) => {
    const r = await res;
    if (r.status !== status) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  await must(keel.call('POST', `/org/${org}/gvc`, { name: 'g0' }), 201, 'gvc');
  const text = 'a workload of the adversarial benchmark, with some text for the heavy queries to look through. '.repeat(8);
  const names = Array.from({ length: WORKLOADS }, (_, i) => `w${i}`);
  await pool(names, 16, async (name) => {
    await must(keel.call('POST', `/org/${org}/gvc/g0/workload`, {
      name,
      description: text.slice(0, 240),
      tags: { team: `t${name.length}`, note: text.slice(0, 200) },
      spec: { type: 'standard', containers: [{ name: 'app', image: 'nginx:latest', env: [{ name: 'NOTE', value: text }], ports: [{ protocol: 'http', number: 8080 }] }] },
    }), 201, 'workload');
  });
  const edits = Array.from({ length: Math.max(0, EVENTS - WORKLOADS) }, (_, i) => i);
  await pool(edits, 16, async (i) => {
    await must(keel.call('PATCH', `/org/${org}/gvc/g0/workload/w${i % WORKLOADS}`, { description: `edit ${i}` }), 200, 'edit');
  });
  await must(keel.call('POST', `/org/${org}/serviceaccount`, { name: 'hostile' }), 201, 'serviceaccount');
  const key = await must(keel.call('POST', `/org/${org}/serviceaccount/hostile/-addKey`, {}), 200, 'key');
  return key.key as string;
}

async function unrelatedGet(keel: RunningKeel): Promise<Omit<Phase, 'lag'>> {
  const r = await autocannon({ url: `${keel.base}/org/${keel.org}/gvc/g0`, headers: { authorization: `Bearer ${keel.token}` }, connections: GET_CONNECTIONS, duration: DURATION });
  return { getP50: r.latency.p50, getP99: r.latency.p99, getRps: r.requests.average, getNon2xx: r.non2xx, getErrors: r.errors + r.timeouts };
}

/** The attack, in a process of its own (see attacker.ts), until stop(): then its counts. */
async function attack(keel: RunningKeel, hostileKey: string): Promise<{ stop: () => Promise<{ replays: Record<string, number>; queries: Record<string, number> }> }> {
  const child = fork(join(BENCH_DIR, 'attacker.js'), [keel.base, keel.org, hostileKey, keel.token, String(WATCHERS), String(HEAVY_QUERIES), String(REPLAY_EVERY_MS)]);
  await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`the attacker exited (${code}) before it started`)));
  });
  return {
    stop: () =>
      new Promise((resolve) => {
        child.once('message', (counts) => resolve(counts as { replays: Record<string, number>; queries: Record<string, number> }));
        child.send('stop');
      }),
  };
}

async function run(backend: string, databaseUrl?: string): Promise<Figures> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-bench-lag-'));
  const lagFile = join(dir, 'lag.json');
  const keel = await startKeel({ databaseUrl, env: { KEEL_RECONCILE: 'off', BENCH_LAG_FILE: lagFile }, nodeArgs: ['--import', join(BENCH_DIR, 'lag-probe.js')] });
  try {
    const started = Date.now();
    const hostileKey = await seed(keel);
    process.stderr.write(`bench adversarial: ${backend} seeded (${WORKLOADS} workloads, ${Math.max(EVENTS, WORKLOADS)} events) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    await unrelatedGet(keel); // warm-up
    await lagSince(keel.pid, lagFile);
    const quiet = await unrelatedGet(keel);
    const quietLag = await lagSince(keel.pid, lagFile);
    const hostile = await attack(keel, hostileKey);
    await new Promise((r) => setTimeout(r, 500)); // the attack under way
    await lagSince(keel.pid, lagFile);
    const attacked = await unrelatedGet(keel);
    const attackedLag = await lagSince(keel.pid, lagFile);
    const counts = await hostile.stop();
    return { backend, quiet: { ...quiet, lag: quietLag }, attacked: { ...attacked, lag: attackedLag }, replays: counts.replays, queries: counts.queries };
  } finally {
    await keel.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const f1 = (n: number) => n.toFixed(1);
const tally = (counts: Record<string, number>) => Object.entries(counts).map(([s, n]) => `${n} × ${s}`).join(', ') || 'none';

export async function benchAdversarial(): Promise<Section> {
  const results: Figures[] = [];
  if (BACKENDS.includes('sqlite')) results.push(await run('SQLite'));
  if (BACKENDS.includes('postgres')) results.push(await withBenchSchema(PG_URL, async (url) => run('PostgreSQL', await url())));
  const figures: Record<string, number> = {};
  const lines = [
    `${WORKLOADS} workloads, ${Math.max(EVENTS, WORKLOADS)} audit events in the org's chain. Attack: ${WATCHERS} watch streams \`?since=0\` by a key that may see nothing, each replaying again every ${REPLAY_EVERY_MS} ms, and ${HEAVY_QUERIES} loops of a query with 10 \`~\` terms on \`property: "*"\`; the unrelated GET is \`GET /org/bench/gvc/g0\` on ${GET_CONNECTIONS} connections for ${DURATION} s. Event-loop delay is measured inside the Keel process.`,
    '',
    '| Backend | Phase | loop delay p50 ms | p99 ms | max ms | GET p50 ms | GET p99 ms | GET req/s | GET non-2xx | GET errors | Keel RSS MiB |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    for (const [phase, p] of [['no attack', r.quiet], ['under attack', r.attacked]] as const) {
      lines.push(`| ${r.backend} | ${phase} | ${f1(p.lag.p50)} | ${f1(p.lag.p99)} | ${f1(p.lag.max)} | ${p.getP50} | ${p.getP99} | ${p.getRps.toFixed(0)} | ${p.getNon2xx} | ${p.getErrors} | ${p.lag.rssMiB.toFixed(0)} |`);
    }
    const key = r.backend === 'SQLite' ? 'sqlite' : 'postgres';
    // No GET answered at all under attack is the worst case, not a ratio of 0.
    const ratio = r.attacked.getRps > 0 ? r.attacked.getP99 / Math.max(1, r.quiet.getP99) : Infinity;
    Object.assign(figures, {
      [`${key}LagP99Quiet`]: r.quiet.lag.p99,
      [`${key}LagP99Attacked`]: r.attacked.lag.p99,
      [`${key}GetP99Quiet`]: r.quiet.getP99,
      [`${key}GetP99Attacked`]: r.attacked.getP99,
      [`${key}GetP99Ratio`]: ratio,
    });
    figures[`${key}Replays`] = Object.values(r.replays).reduce((a, b) => a + b, 0);
    const verdict = (ok: boolean) => (ok ? 'met' : '**not met**');
    lines.push('');
    lines.push(
      `${r.backend}: loop delay p99 under attack **${f1(r.attacked.lag.p99)} ms** (goal ≤ 100 ms: ${verdict(r.attacked.lag.p99 <= 100)}); unrelated GET p99 **${ratio.toFixed(1)} ×** its no-attack value (goal ≤ 5 ×: ${verdict(ratio <= 5)}). ` +
        `Watch opens answered: ${tally(r.replays)} (429: refused, held for a second when reopened at once); heavy queries answered: ${tally(r.queries)} (400: over the query budget). The attack runs in a process of its own, on the same cores.`,
    );
    lines.push('');
  }
  return { title: 'Hostile callers: event-loop delay and an unrelated GET, with and without an attack', lines, figures };
}
