// npm run fuzz: the HTTP fuzzing of test/fuzz/http.test.ts for longer, on SQLite and (when it
// answers) PostgreSQL. FUZZ_SECONDS (default 120) per backend, or FUZZ_RUNS requests per backend;
// FUZZ_SEED to replay; FUZZ_BACKENDS=sqlite to pick. Prints how many requests it sent, the status
// codes seen, and every failure (5xx, hang, malformed error object, prototype pollution), each
// with its request; exits 1 when there was any.
import fc from 'fast-check';
import { KINDS } from '../src/kinds/index.js';
import { startKeel, type Backend } from '../test/support/keel.js';
import { postgresAvailable } from '../test/support/postgres.js';
import { anyRequest, assertNoPollution, AUDIT_CONTEXT, auditRequest, checkAnswer, GVC, hostileRequests, kindRequest, send, seedTargets, type FuzzRequest, type Targets } from '../test/fuzz/requests.js';

const SECONDS = Number(process.env.FUZZ_SECONDS ?? 120);
const RUNS = process.env.FUZZ_RUNS ? Number(process.env.FUZZ_RUNS) : undefined;
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Date.now() % 2 ** 31;
const MAX_FAILURES = 20;

interface Tally {
  sent: number;
  statuses: Map<number, number>;
  failures: string[];
}

async function run(backend: Backend): Promise<Tally> {
  const tally: Tally = { sent: 0, statuses: new Map(), failures: [] };
  const k = await startKeel(backend);
  try {
    const gvc = await k.call('POST', '/org/acme/gvc', { name: GVC });
    if (gvc.status !== 201) throw new Error(`could not create the GVC: ${gvc.status}`);
    if ((await k.call('POST', '/org/acme/auditctx', { name: AUDIT_CONTEXT })).status !== 201) throw new Error('could not create the audit context');
    await k.app.core.listen({ port: 0, host: '127.0.0.1' });
    const port = (k.app.core.server.address() as { port: number }).port;
    const targets: Targets = { token: k.token, seeded: await seedTargets(k.app, k.token) };
    const exercise = async (req: FuzzRequest) => {
      try {
        const res = await send(k.app, port, req);
        tally.sent++;
        tally.statuses.set(res.status, (tally.statuses.get(res.status) ?? 0) + 1);
        checkAnswer(req, res);
        assertNoPollution(req.label);
      } catch (e) {
        if (tally.failures.length < MAX_FAILURES) tally.failures.push((e as Error).message);
      }
    };
    for (const req of hostileRequests(targets)) await exercise(req);
    // Kinds in turn, then anything, until the time or the run budget is spent.
    const deadline = Date.now() + SECONDS * 1000;
    const streams = [...KINDS.map((def) => kindRequest(def, targets)), anyRequest(targets), auditRequest(targets)];
    let round = 0;
    while (RUNS ? tally.sent < RUNS : Date.now() < deadline) {
      const arb = streams[round % streams.length];
      for (const req of fc.sample(arb, { numRuns: 50, seed: SEED + round })) {
        await exercise(req);
        if (tally.failures.length >= MAX_FAILURES) break;
      }
      if (tally.failures.length >= MAX_FAILURES) break;
      round++;
      if (round % 40 === 0) process.stderr.write(`fuzz [${backend}]: ${tally.sent} requests, ${tally.failures.length} failures\n`);
    }
    // Keel still works afterwards.
    const probe = await k.call('POST', '/org/acme/group', { name: 'after-fuzz' });
    if (probe.status !== 201 && probe.status !== 409) tally.failures.push(`after the run, creating a group answered ${probe.status}`);
  } finally {
    await k.close();
  }
  return tally;
}

const backends = (process.env.FUZZ_BACKENDS?.split(',') as Backend[] | undefined) ?? ['sqlite', ...((await postgresAvailable()) ? (['postgres'] as Backend[]) : [])];
let failed = false;
process.stdout.write(`fuzz: seed ${SEED}, ${RUNS ? `${RUNS} requests` : `${SECONDS} s`} per backend on ${backends.join(', ')}\n`);
for (const backend of backends) {
  const started = Date.now();
  const tally = await run(backend);
  const seconds = (Date.now() - started) / 1000;
  const statuses = [...tally.statuses].sort(([a], [b]) => a - b).map(([s, n]) => `${s}×${n}`).join(' ');
  process.stdout.write(`\nfuzz [${backend}]: ${tally.sent} requests in ${seconds.toFixed(0)} s (${(tally.sent / seconds).toFixed(0)}/s); statuses ${statuses}\n`);
  if (tally.failures.length) {
    failed = true;
    process.stdout.write(`fuzz [${backend}]: ${tally.failures.length} failure(s)${tally.failures.length >= MAX_FAILURES ? ' (stopped at the first ' + MAX_FAILURES + ')' : ''}:\n`);
    for (const f of tally.failures) process.stdout.write(`  - ${f.replace(/\n/g, '\n    ')}\n`);
  } else {
    process.stdout.write(`fuzz [${backend}]: no failures\n`);
  }
}
process.exit(failed ? 1 : 0);
