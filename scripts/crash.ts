// npm run crash: crash safety under write load. Runs `keel serve` as a child process, drives
// creates and version-checked patches at it, kills it with SIGKILL at random moments, restarts it,
// and checks after every restart that
//   - every acknowledged (2xx) write is there, at least at the version its answer reported;
//   - nothing half-written is visible: every item validates against its kind's schema and carries
//     the data of its version (each write sets tag n to the version it produces), and
//   - every change has exactly its audit event (versions 1..v of each item, with that version's
//     data, none beyond), and the org's audit hash chain verifies.
// Scenarios: SQLite; PostgreSQL; two Keel processes on one PostgreSQL, of which one is killed while
// the other keeps serving (its clients must see no error at all meanwhile).
//
// CRASH_CYCLES (default 12) kills per scenario, CRASH_SCENARIOS=sqlite,postgres,two-postgres,
// CRASH_WORKERS (default 8) concurrent clients. Keel runs from source through tsx, or from dist/
// with CRASH_DIST=1 (npm run build first). test/reliability/crash.test.ts runs a few cycles of each.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyChain } from '../src/audit/verify.js';
import { findKind } from '../src/kinds/index.js';
import { validateResource } from '../src/resources/validate.js';
import { openStore } from '../src/store/open.js';
import { freePort } from '../test/support/ports.js';
import { createTestSchema, postgresAvailable } from '../test/support/postgres.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const ORG = 'crash';
const READY_TIMEOUT_MS = 60_000;
const REQUEST_TIMEOUT_MS = 20_000;

export type Scenario = 'sqlite' | 'postgres' | 'two-postgres';

export interface CrashOptions {
  scenario: Scenario;
  cycles: number;
  workers?: number;
  /** Load runs this long (random within) before each kill. */
  loadMs?: [number, number];
  /** …and at least until this many writes of the cycle were acknowledged, however slow the machine. */
  minWritesPerCycle?: number;
  log?: (line: string) => void;
}

export interface CrashReport {
  scenario: Scenario;
  cycles: number;
  acknowledged: number;
  creates: number;
  patches: number;
  /** Requests that got no answer because their server was killed (outcome unknown, allowed either way). */
  unanswered: number;
  items: number;
  auditEvents: number;
  /** Requests served by the surviving process while the other one was down (two-postgres). */
  servedBySurvivor: number;
}

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** How long a cycle waits for its minimum of writes (or, with two processes, for the survivor to serve) before it goes on. */
const PROGRESS_WAIT_MS = 60_000;

/** Resolves once `done()` holds, or after `ms` (the checks after the kill then report what was missing). */
async function until(done: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!done() && Date.now() < end) await delay(10);
}

/** One `keel serve` process that can be killed and started again on the same port and store. */
class KeelProcess {
  child?: ChildProcess;
  exited?: Promise<void>;
  stderr = '';

  constructor(
    readonly name: string,
    readonly port: number,
    readonly auditPort: number,
    readonly dataDir: string,
    readonly databaseUrl: string | undefined,
  ) {}

  get base(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const dist = process.env.CRASH_DIST === '1';
    const args = dist ? [join(ROOT, 'dist', 'src', 'cli.js'), 'serve'] : ['--import', 'tsx', join(ROOT, 'src', 'cli.ts'), 'serve'];
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.KEEL_DATABASE_URL;
    delete env.KEEL_CONFIG;
    const child = spawn(process.execPath, args, {
      cwd: ROOT,
      env: {
        ...env,
        KEEL_HOST: '127.0.0.1',
        KEEL_PORT: String(this.port),
        KEEL_AUDIT_PORT: String(this.auditPort),
        KEEL_DATA_DIR: this.dataDir,
        KEEL_ORG: ORG,
        KEEL_LOG_LEVEL: 'warn',
        KEEL_RECONCILE: 'off',
        ...(this.databaseUrl ? { KEEL_DATABASE_URL: this.databaseUrl } : {}),
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child = child;
    this.stderr = '';
    child.stderr!.on('data', (c: Buffer) => (this.stderr = (this.stderr + c.toString()).slice(-4000)));
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    let gone = false;
    void this.exited.then(() => (gone = true));
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (gone) throw new Error(`keel ${this.name} exited while starting: ${this.stderr}`);
      if (Date.now() > deadline) throw new Error(`keel ${this.name} was not ready within ${READY_TIMEOUT_MS} ms: ${this.stderr}`);
      try {
        const res = await fetch(`${this.base}/about`, { signal: AbortSignal.timeout(2000) });
        if (res.ok && !gone) return;
      } catch {
        // not listening yet
      }
      await delay(50);
    }
  }

  async kill(): Promise<void> {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** How the process ended, with the tail of its stderr; undefined while it runs. */
  exitNote(): string | undefined {
    const child = this.child;
    if (!child || (child.exitCode === null && child.signalCode === null)) return undefined;
    return `keel ${this.name} exited (code ${child.exitCode}, signal ${child.signalCode}); its stderr ends: ${this.stderr.slice(-1500) || '(empty)'}`;
  }

  /** Graceful stop at the end of a run. */
  async stop(): Promise<void> {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    const exited = await Promise.race([this.exited!.then(() => true), delay(15_000).then(() => false)]);
    if (!exited) await this.kill();
  }
}

interface Answer {
  status: number;
  body: any;
}

/** Why a request got no answer (connection refused or reset: the server died, or was cut off). */
interface NoAnswer {
  status?: undefined;
  reason: string;
}

/** A request as the admin. */
async function call(base: string, token: string, method: string, path: string, body?: unknown): Promise<Answer | NoAnswer> {
  let res: Response;
  try {
    res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (e) {
    if ((e as Error).name === 'TimeoutError') throw new Error(`${method} ${path}: no answer within ${REQUEST_TIMEOUT_MS} ms from a live server`);
    return { reason: failureOf(e) };
  }
  let text: string;
  try {
    text = await res.text();
  } catch (e) {
    return { reason: `cut off mid-answer: ${failureOf(e)}` };
  }
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

function failureOf(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  return [(e as Error).message, cause?.code ?? cause?.message].filter(Boolean).join(': ');
}

export async function runCrash(options: CrashOptions): Promise<CrashReport> {
  const log = options.log ?? (() => {});
  const workers = options.workers ?? 8;
  const [loadMin, loadMax] = options.loadMs ?? [300, 2000];
  const pg = options.scenario === 'sqlite' ? undefined : await createTestSchema('keel_crash');
  const dirs = [mkdtempSync(join(tmpdir(), 'keel-crash-a-')), mkdtempSync(join(tmpdir(), 'keel-crash-b-'))];
  const procs = [new KeelProcess('A', await freePort(), await freePort(), dirs[0], pg?.url)];
  if (options.scenario === 'two-postgres') procs.push(new KeelProcess('B', await freePort(), await freePort(), dirs[1], pg?.url));

  /** name -> highest version a 2xx answer reported. */
  const acked = new Map<string, number>();
  const report: CrashReport = { scenario: options.scenario, cycles: 0, acknowledged: 0, creates: 0, patches: 0, unanswered: 0, items: 0, auditEvents: 0, servedBySurvivor: 0 };
  const problems: string[] = [];
  let seq = 0;

  try {
    await procs[0].start();
    const tokenFile = join(dirs[0], 'admin.token');
    if (!existsSync(tokenFile)) throw new Error('keel did not write admin.token');
    const token = readFileSync(tokenFile, 'utf8').trim();
    for (const p of procs.slice(1)) await p.start();

    for (let cycle = 0; cycle < options.cycles; cycle++) {
      const victim = procs[0]; // with two processes, A dies and B keeps serving
      const survivor = procs[1];
      let stop = false;
      let victimDead = false;
      const worker = async (w: number) => {
        const target = survivor && w % 2 === 1 ? survivor : victim;
        const mine: string[] = [];
        /** A request that got no answer: expected from the victim (it was killed, and this worker
         * stops), a problem from the survivor. True when the worker should stop. */
        const unanswered = (what: string, res: NoAnswer): boolean => {
          report.unanswered++;
          if (target === victim) return true;
          const exit = target.exitNote();
          problems.push(`the surviving process gave no answer to a ${what} (victim dead: ${victimDead}): ${res.reason}${exit ? `; ${exit}` : ''}`);
          return exit !== undefined; // a dead survivor answers nothing more
        };
        while (!stop) {
          const createNew = mine.length === 0 || Math.random() < 0.35;
          if (createNew) {
            const name = `c${cycle}-w${w}-${seq++}`;
            const res = await call(target.base, token, 'POST', `/org/${ORG}/group`, { name, description: `crash ${cycle}`, tags: { n: '1', w: String(w) } });
            if (res.status === undefined) {
              if (unanswered('create', res)) break;
              continue;
            }
            if (res.status !== 201) problems.push(`create ${name} on ${target.name}: ${res.status} ${JSON.stringify(res.body)}`);
            else {
              if (res.body.version !== 1 || res.body.tags?.n !== '1') problems.push(`create ${name} answered ${JSON.stringify(res.body)}`);
              acked.set(name, 1);
              mine.push(name);
              report.creates++;
              report.acknowledged++;
              if (victimDead && target === survivor) report.servedBySurvivor++;
            }
          } else {
            const name = mine[Math.floor(Math.random() * mine.length)];
            const current = await call(target.base, token, 'GET', `/org/${ORG}/group/${name}`);
            if (current.status === undefined) {
              if (unanswered('read', current)) break;
              continue;
            }
            if (current.status !== 200) {
              problems.push(`GET ${name} on ${target.name}: ${current.status} ${JSON.stringify(current.body)}`);
              continue;
            }
            const version = current.body.version as number;
            const res = await call(target.base, token, 'PATCH', `/org/${ORG}/group/${name}`, { version, tags: { n: String(version + 1) } });
            if (res.status === undefined) {
              if (unanswered('patch', res)) break;
              continue;
            }
            if (res.status >= 500) problems.push(`patch ${name} on ${target.name}: ${res.status} ${JSON.stringify(res.body)}`);
            if (res.status === 200) {
              if (res.body.version !== version + 1 || res.body.tags?.n !== String(version + 1)) problems.push(`patch ${name} answered ${JSON.stringify(res.body)}`);
              acked.set(name, Math.max(acked.get(name) ?? 0, res.body.version));
              report.patches++;
              report.acknowledged++;
              if (victimDead && target === survivor) report.servedBySurvivor++;
            } else if (res.status !== 409) {
              problems.push(`patch ${name} on ${target.name}: ${res.status} ${JSON.stringify(res.body)}`);
            }
          }
        }
      };
      const ackedBefore = report.acknowledged;
      const running = Array.from({ length: workers }, (_, w) => worker(w));
      await delay(loadMin + Math.random() * (loadMax - loadMin));
      await until(() => report.acknowledged - ackedBefore >= (options.minWritesPerCycle ?? 0), PROGRESS_WAIT_MS);
      await victim.kill();
      victimDead = true;
      if (survivor) {
        // The survivor keeps serving its clients while the victim is down (and restarts).
        const servedBefore = report.servedBySurvivor;
        await delay(300);
        await until(() => report.servedBySurvivor > servedBefore, PROGRESS_WAIT_MS);
      }
      // Restart while the survivor's clients still run, then stop the load and check.
      await victim.start();
      stop = true;
      await Promise.all(running);
      report.cycles++;
      await verify(procs, token, acked, report, problems);
      log(`crash [${options.scenario}] cycle ${cycle + 1}/${options.cycles}: ${report.acknowledged} acknowledged writes, ${report.unanswered} unanswered, ${report.items} items verified, ${report.auditEvents} audit events`);
      if (problems.length) break;
    }
    if (problems.length) throw new Error(`crash [${options.scenario}]: ${problems.length} problem(s):\n  ${problems.slice(0, 20).join('\n  ')}`);
    return report;
  } finally {
    for (const p of procs) await p.stop().catch(() => {});
    await pg?.drop().catch(() => {});
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

/** Checks every acknowledged write, every visible item and the audit log, through every process. */
async function verify(procs: KeelProcess[], token: string, acked: Map<string, number>, report: CrashReport, problems: string[]): Promise<void> {
  const def = findKind('group')!;
  // Every visible item (through the API, all pages), on every process.
  const items = new Map<string, any>();
  for (const p of procs) {
    let path: string | undefined = `/org/${ORG}/group?limit=1000`;
    while (path) {
      const page = await call(p.base, token, 'GET', path);
      if (page.status !== 200) {
        problems.push(`listing groups on ${p.name}: ${page.status === undefined ? page.reason : `${page.status} ${JSON.stringify(page.body)}`}`);
        return;
      }
      for (const item of page.body.items) {
        if (!item.name.startsWith('c')) continue;
        const seen = items.get(item.name);
        if (seen && seen.version !== item.version) problems.push(`${item.name} is at version ${seen.version} on one process and ${item.version} on another`);
        items.set(item.name, item);
      }
      path = page.body.links.find((l: { rel: string }) => l.rel === 'next')?.href;
    }
  }
  for (const [name, version] of acked) {
    const item = items.get(name);
    if (!item) problems.push(`acknowledged ${name} (version ${version}) is gone`);
    else if (item.version < version) problems.push(`acknowledged ${name} at version ${version} reads as version ${item.version}`);
  }
  for (const item of items.values()) {
    try {
      validateResource(def, structuredClone(item));
    } catch (e) {
      problems.push(`${item.name} does not validate: ${(e as Error).message}`);
    }
    if (item.tags?.n !== String(item.version)) problems.push(`${item.name} is half-written: version ${item.version} with the data of version ${item.tags?.n}`);
  }
  report.items = items.size;
  // The audit log, straight from the store: the chain verifies and each item has exactly the events of its versions.
  const store = await openStore({ dataDir: procs[0].dataDir, databaseUrl: procs[0].databaseUrl });
  try {
    const chain = await verifyChain(store, ORG);
    if (!chain.ok) problems.push(`the audit chain does not verify: ${chain.reason}`);
    else report.auditEvents = chain.events;
    const versions = new Map<string, number[]>();
    let afterSeq = 0;
    for (;;) {
      const page = await store.audit({ org: ORG, resourceType: 'group', afterSeq, limit: 1000 });
      if (page.length === 0) break;
      for (const event of page) {
        afterSeq = Math.max(afterSeq, event.seq);
        if (!event.resourceName.startsWith('c')) continue;
        const body = JSON.parse(event.body);
        const v = body.resource.version as number;
        if (body.resource.data?.tags?.n !== String(v)) problems.push(`the audit event of ${event.resourceName} version ${v} carries the data of version ${body.resource.data?.tags?.n}`);
        versions.set(event.resourceName, [...(versions.get(event.resourceName) ?? []), v]);
      }
    }
    for (const item of items.values()) {
      const got = (versions.get(item.name) ?? []).sort((a, b) => a - b);
      const want = Array.from({ length: item.version }, (_, i) => i + 1);
      if (got.join() !== want.join()) problems.push(`${item.name} is at version ${item.version} but its audit events are for versions [${got.join(', ')}]`);
    }
    for (const name of versions.keys()) {
      if (!items.has(name)) problems.push(`audit events exist for ${name}, which is not there`);
    }
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  const cycles = Number(process.env.CRASH_CYCLES ?? 12);
  const workers = Number(process.env.CRASH_WORKERS ?? 8);
  const pgUp = await postgresAvailable();
  const wanted = (process.env.CRASH_SCENARIOS?.split(',') as Scenario[] | undefined) ?? ['sqlite', 'postgres', 'two-postgres'];
  let failed = false;
  for (const scenario of wanted) {
    if (scenario !== 'sqlite' && !pgUp) {
      process.stdout.write(`crash [${scenario}]: SKIPPED, PostgreSQL is not reachable\n`);
      continue;
    }
    const started = Date.now();
    try {
      const r = await runCrash({ scenario, cycles, workers, log: (line) => process.stderr.write(line + '\n') });
      process.stdout.write(
        `crash [${scenario}]: OK: ${r.cycles} SIGKILLs in ${((Date.now() - started) / 1000).toFixed(0)} s; ${r.acknowledged} acknowledged writes (${r.creates} creates, ${r.patches} version-checked patches) all present; ` +
          `${r.unanswered} requests cut off by a kill; ${r.items} items validate with their version's data; ${r.auditEvents} audit events, chain verified, one per change` +
          (scenario === 'two-postgres' ? `; ${r.servedBySurvivor} writes served by the surviving process while the other was down` : '') +
          '\n',
      );
    } catch (e) {
      failed = true;
      process.stdout.write(`${(e as Error).message}\n`);
    }
  }
  process.exit(failed ? 1 : 0);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
