// Hostile principals against everyone else: 1, 10 and 20 service-account keys, each running one kind
// of costly call — (a) heavy queries, (b) history reads of an item with thousands of versions, (c) slow
// request bodies, (d) watch replays of a long chain, (e) a LogQL line filter with a hostile regex — while
// an unrelated caller (an ordinary key, not exempt) reads one item and lists a page, in the same run on
// the same server as its no-attack figures. Measured: the event loop's delay inside the Keel process
// (p50/p99, perf_hooks.monitorEventLoopDelay, see lag-probe.ts) and the unrelated GET's and list's
// latency. Goals at 20 principals: loop delay p99 ≤ 50 ms, GET p99 and list p99 ≤ 5 × their no-attack value.
// BENCH_ONLY=adversarial runs it alone; BENCH_ADVERSARIAL_ATTACKS and BENCH_ADVERSARIAL_PRINCIPALS narrow it.
import autocannon from 'autocannon';
import { fork } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../src/store/open.js';
import { stamp } from '../src/logs/time.js';
import { BENCH_DIR, DURATION, PG_URL, startKeel, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

/** Workloads the heavy queries scan. */
const WORKLOADS = Number(process.env.BENCH_ADVERSARIAL_WORKLOADS ?? 3000);
/** Audit events in the org's chain the replays read: the workloads' creates, then edits of one workload (its versions, which the history reads look through). */
const EVENTS = Number(process.env.BENCH_ADVERSARIAL_EVENTS ?? 10_000);
/** Log lines the LogQL filter looks through. */
const LOG_LINES = Number(process.env.BENCH_ADVERSARIAL_LOG_LINES ?? 20_000);
/** `.*` repeated this many times, then `Z`: about 4 KB of pattern that backtracks on every line. */
const REGEX_REPEAT = Number(process.env.BENCH_ADVERSARIAL_REGEX_REPEAT ?? 2000);
const BACKENDS = (process.env.BENCH_ADVERSARIAL_BACKENDS ?? 'sqlite,postgres').split(',');
const ATTACKS = (process.env.BENCH_ADVERSARIAL_ATTACKS ?? 'queries,history,slowbodies,replays,regex').split(',');
const PRINCIPALS = (process.env.BENCH_ADVERSARIAL_PRINCIPALS ?? '1,10,20').split(',').map(Number);
const MOST = Math.max(...PRINCIPALS);
/** A hostile watcher drops its stream and replays from 0 again this often. */
const REPLAY_EVERY_MS = 1000;
/** Connections of the unrelated GET and of its list: few, so their latency is the server's and not a queue's. */
const CALLER_CONNECTIONS = 2;
/** How long the lag probe may take to answer (it answers on the event loop it measures). */
const PROBE_WAIT_MS = 120_000;

const ATTACK_WORDS: Record<string, string> = {
  queries: '(a) heavy queries',
  history: '(b) history reads',
  slowbodies: '(c) slow bodies',
  replays: '(d) watch replays',
  regex: '(e) hostile LogQL regex',
};

interface Lag {
  p50: number;
  p99: number;
  max: number;
  rssMiB: number;
}

interface Latency {
  p50: number;
  p99: number;
  rps: number;
  non2xx: number;
  /** Requests that failed or timed out (autocannon's 10 s) rather than being answered. */
  errors: number;
}

interface Phase {
  attack: string;
  principals: number;
  lag: Lag;
  get: Latency;
  list: Latency;
  /** The same caller's figures with no attack, measured just before this phase: other work on a shared machine comes and goes, so each ratio is taken against its neighbour. */
  calm: { get: Latency; list: Latency };
  /** The attack's answers by status. */
  answers: Record<string, number>;
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

interface Keys {
  hostile: string[];
  bystander: string;
}

async function seed(keel: RunningKeel, storeAt: { databaseUrl?: string; dataDir: string }): Promise<Keys> {
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
  // One item with thousands of versions: its history is what the history readers ask for.
  for (let i = 0; i < Math.max(0, EVENTS - WORKLOADS); i++) await must(keel.call('PATCH', `/org/${org}/gvc/g0/workload/w0`, { description: `edit ${i}` }), 200, 'edit');
  const key = async (name: string) => {
    await must(keel.call('POST', `/org/${org}/serviceaccount`, { name }), 201, 'serviceaccount');
    return (await must(keel.call('POST', `/org/${org}/serviceaccount/${name}/-addKey`, {}), 200, 'key')).key as string;
  };
  const hostile: string[] = [];
  for (let i = 0; i < MOST; i++) hostile.push(await key(`hostile-${i}`));
  const bystander = await key('bystander');
  const everyone = [...hostile.map((_, i) => `//serviceaccount/hostile-${i}`), '//serviceaccount/bystander'];
  for (const kind of ['gvc', 'workload']) {
    await must(keel.call('POST', `/org/${org}/policy`, { name: `bench-view-${kind}`, targetKind: kind, target: 'all', bindings: [{ permissions: ['view'], principalLinks: everyone }] }), 201, 'policy');
  }
  await must(keel.call('POST', `/org/${org}/policy`, { name: 'bench-logs', targetKind: 'org', target: 'all', bindings: [{ permissions: ['readLogs'], principalLinks: everyone }] }), 201, 'policy');
  // The slow PATCHes of (c) name a GVC the hostile keys may edit: a key that may not is refused before its body, which would measure a flood of refusals instead.
  await must(keel.call('POST', `/org/${org}/policy`, { name: 'bench-edit-g0', targetKind: 'gvc', targetLinks: ['//gvc/g0'], bindings: [{ permissions: ['edit'], principalLinks: hostile.map((_, i) => `//serviceaccount/hostile-${i}`) }] }), 201, 'policy');
  // Log lines written straight to the store (Keel writes them only as it runs workloads, which this bench does not).
  const store = await openStore(storeAt);
  try {
    const now = Date.now() - 10 * 60_000;
    for (let at = 0; at < LOG_LINES; at += 1000) {
      const lines = Array.from({ length: Math.min(1000, LOG_LINES - at) }, (_, i) => ({
        org,
        ts: stamp(now + at + i),
        labels: { gvc: 'g0', workload: `w${(at + i) % 50}`, location: 'aws-us-west-2', container: 'app', replica: `w${(at + i) % 50}-0` },
        line: `GET /items/${at + i} 200 in ${(at + i) % 97} ms from 10.0.${(at + i) % 255}.7 user-agent=bench-client/1.0`,
      }));
      await store.transaction(async (tx) => tx.appendLogs(lines));
    }
  } finally {
    await store.close();
  }
  return { hostile, bystander };
}

async function unrelated(keel: RunningKeel, key: string, path: string): Promise<Latency> {
  const r = await autocannon({ url: `${keel.base}${path}`, headers: { authorization: `Bearer ${key}` }, connections: CALLER_CONNECTIONS, duration: DURATION });
  return { p50: r.latency.p50, p99: r.latency.p99, rps: r.requests.average, non2xx: r.non2xx, errors: r.errors + r.timeouts };
}

/** The unrelated caller's GET of one item and its list of a page, at the same time. */
async function caller(keel: RunningKeel, key: string): Promise<{ get: Latency; list: Latency }> {
  const [get, list] = await Promise.all([unrelated(keel, key, `/org/${keel.org}/gvc/g0`), unrelated(keel, key, `/org/${keel.org}/gvc/g0/workload?limit=10`)]);
  return { get, list };
}

/** The attack, in a process of its own (see attacker.ts), until stop(): then its answers by status. */
async function attack(keel: RunningKeel, kind: string, keys: string[]): Promise<{ stop: () => Promise<Record<string, number>> }> {
  const child = fork(join(BENCH_DIR, 'attacker.js'), [keel.base, keel.org, kind, keys.join(','), String(REPLAY_EVERY_MS), String(REGEX_REPEAT)]);
  await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`the attacker exited (${code}) before it started`)));
  });
  return {
    stop: () =>
      new Promise((resolve) => {
        child.once('message', (answers) => resolve(answers as Record<string, number>));
        child.send('stop');
      }),
  };
}

/** Waits until the server answers /about again after an attack (refused or reset connections meanwhile are expected). */
async function settled(keel: RunningKeel): Promise<void> {
  const until = Date.now() + PROBE_WAIT_MS;
  while (Date.now() < until) {
    const ok = await fetch(`${keel.base}/about`, { signal: AbortSignal.timeout(10_000) }).then((res) => res.ok, () => false);
    if (ok) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  await new Promise((r) => setTimeout(r, 1000));
}

async function run(backend: string, databaseUrl?: string): Promise<Phase[]> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-bench-lag-'));
  const dataDir = join(dir, 'data');
  const lagFile = join(dir, 'lag.json');
  const keel = await startKeel({ databaseUrl, dataDir, env: { KEEL_RECONCILE: 'off', BENCH_LAG_FILE: lagFile }, nodeArgs: ['--import', join(BENCH_DIR, 'lag-probe.js')] });
  const phases: Phase[] = [];
  try {
    const started = Date.now();
    const keys = await seed(keel, { databaseUrl, dataDir });
    process.stderr.write(`bench adversarial: ${backend} seeded (${WORKLOADS} workloads, ${Math.max(EVENTS, WORKLOADS)} events, ${LOG_LINES} log lines) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
    await caller(keel, keys.bystander); // warm-up
    await lagSince(keel.pid, lagFile);
    const quiet = await caller(keel, keys.bystander);
    phases.push({ attack: 'none', principals: 0, lag: await lagSince(keel.pid, lagFile), ...quiet, calm: quiet, answers: {} });
    for (const kind of ATTACKS) {
      for (const principals of PRINCIPALS) {
        const calm = await caller(keel, keys.bystander);
        const hostile = await attack(keel, kind, keys.hostile.slice(0, principals));
        await new Promise((r) => setTimeout(r, 1000)); // the attack under way
        await lagSince(keel.pid, lagFile);
        const measured = await caller(keel, keys.bystander);
        const lag = await lagSince(keel.pid, lagFile);
        const answers = await hostile.stop();
        phases.push({ attack: kind, principals, lag, ...measured, calm, answers });
        process.stderr.write(
          `bench adversarial: ${backend} ${kind} × ${principals}: lag p99 ${lag.p99.toFixed(1)} ms, GET p99 ${measured.get.p99} ms (quiet ${calm.get.p99}), list p99 ${measured.list.p99} ms (quiet ${calm.list.p99})\n`,
        );
        // What the attack left running (a statement, a stream) ends before the next phase.
        await settled(keel);
      }
    }
    return phases;
  } finally {
    await keel.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const tally = (counts: Record<string, number>) => Object.entries(counts).map(([s, n]) => `${n} × ${s}`).join(', ') || 'none';

export async function benchAdversarial(): Promise<Section> {
  const results: Array<{ backend: string; phases: Phase[] }> = [];
  if (BACKENDS.includes('sqlite')) results.push({ backend: 'SQLite', phases: await run('SQLite') });
  if (BACKENDS.includes('postgres')) results.push({ backend: 'PostgreSQL', phases: await withBenchSchema(PG_URL, async (url) => run('PostgreSQL', await url())) });
  const figures: Record<string, number> = {};
  const lines = [
    `${WORKLOADS} workloads; one of them has ${Math.max(0, EVENTS - WORKLOADS)} versions; ${Math.max(EVENTS, WORKLOADS)} audit events in the org's chain; ${LOG_LINES} log lines. Each hostile principal (a key that may view, read logs, and edit the GVC its slow PATCHes name) runs two at a time of: (a) a query with 10 \`~\` terms on \`property: "*"\`, (b) \`-history?limit=1\` of the item with many versions, (d) a watch \`?since=0\` replayed again every ${REPLAY_EVERY_MS} ms, (e) a LogQL \`|~\` filter of \`.*\` × ${REGEX_REPEAT} then \`Z\`; or (c) 60 PATCHes whose bodies come a byte a second. The unrelated caller, an ordinary key, reads \`GET /org/bench/gvc/g0\` and lists \`/org/bench/gvc/g0/workload?limit=10\` on ${CALLER_CONNECTIONS} connections each for ${DURATION} s. Event-loop delay is measured inside the Keel process; the attack runs in a process of its own, on the same cores.`,
    '',
    `"Quiet" is the same caller with no attack, measured just before each attack on the same server (other work on this shared machine comes and goes, so each ratio is taken against its neighbour); latencies are autocannon's, in whole milliseconds.`,
    '',
  ];
  const header = [
    '| Backend | Attack | Principals | loop delay p99 ms | max ms | GET p50 ms | GET p99 ms | quiet GET p99 ms | GET × quiet | list p50 ms | list p99 ms | quiet list p99 ms | list × quiet | caller non-2xx / errors | attack answers |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const f1 = (n: number) => n.toFixed(1);
  const verdict = (ok: boolean) => (ok ? 'met' : '**not met**');
  for (const { backend, phases } of results) {
    // No call answered at all under attack is the worst case, not a ratio of 0.
    const ratio = (attacked: Latency, calm: Latency) => (attacked.rps > 0 ? attacked.p99 / Math.max(1, calm.p99) : Infinity);
    // A table of its own per backend: rows after the list below would not render as a table.
    lines.push(...header);
    for (const p of phases) {
      const getRatio = ratio(p.get, p.calm.get);
      const listRatio = ratio(p.list, p.calm.list);
      lines.push(
        `| ${backend} | ${p.attack === 'none' ? 'no attack' : ATTACK_WORDS[p.attack]} | ${p.principals} | ${f1(p.lag.p99)} | ${f1(p.lag.max)} | ${p.get.p50} | ${p.get.p99} | ${p.calm.get.p99} | ${f1(getRatio)} | ${p.list.p50} | ${p.list.p99} | ${p.calm.list.p99} | ${f1(listRatio)} | ${p.get.non2xx + p.list.non2xx} / ${p.get.errors + p.list.errors} | ${tally(p.answers)} |`,
      );
      const key = `${backend === 'SQLite' ? 'sqlite' : 'postgres'}_${p.attack}_${p.principals}`;
      Object.assign(figures, { [`${key}_lagP99`]: p.lag.p99, [`${key}_getP99`]: p.get.p99, [`${key}_listP99`]: p.list.p99, [`${key}_getRatio`]: getRatio, [`${key}_listRatio`]: listRatio });
    }
    lines.push('');
    for (const p of phases.filter((x) => x.principals === MOST)) {
      const getRatio = ratio(p.get, p.calm.get);
      const listRatio = ratio(p.list, p.calm.list);
      lines.push(
        `- ${backend}, ${ATTACK_WORDS[p.attack]} by ${MOST}: loop delay p99 ${f1(p.lag.p99)} ms (≤ 50: ${verdict(p.lag.p99 <= 50)}); GET p99 ${f1(getRatio)} × (≤ 5: ${verdict(getRatio <= 5)}); list p99 ${f1(listRatio)} × (≤ 5: ${verdict(listRatio <= 5)}).`,
      );
    }
    lines.push('');
  }
  return { title: 'Hostile principals: event-loop delay and an unrelated caller, with and without an attack', lines, figures };
}
