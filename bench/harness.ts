// Shared pieces of `npm run bench`: a Keel server in a child process, load generation, and the
// section shape every benchmark returns for the report.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../test/support/ports.js';
import type { Chart } from './svg.js';

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url)); // dist/bench when built
export const ROOT = join(BENCH_DIR, '..', '..');
export const DURATION = Number(process.env.BENCH_SECONDS ?? 8);
export const CONNECTIONS = 16;
export const PG_URL = process.env.KEEL_BENCH_DATABASE_URL ?? process.env.KEEL_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** One part of the report: a table plus the figures compared with their goals. */
export interface Section {
  title: string;
  /** Markdown lines (a table, notes). */
  lines: string[];
  /** Named figures, kept in report.json. */
  figures: Record<string, number>;
  /** Charts drawn as SVG under bench/charts/ and shown in BENCHMARKS.md. */
  charts?: Chart[];
}

export interface LoadResult {
  name: string;
  requestsPerSecond: number;
  p50: number;
  p99: number;
  non2xx: number;
  cpuMicrosPerRequest?: number;
}

export function waitForOutput(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    let found = false;
    // Keeps reading after the match (the default configuration logs errors and slow requests), so
    // the pipe never fills and blocks the server; only what comes before the match is kept.
    child.stdout!.on('data', (chunk: Buffer) => {
      if (found) return;
      seen += chunk.toString();
      const m = pattern.exec(seen);
      if (m) {
        found = true;
        resolve(m[1] ?? m[0]);
      }
    });
    child.once('exit', (code) => reject(new Error(`child exited (${code}) before it was ready: ${seen}`)));
  });
}

async function waitForAbout(base: string, child: ChildProcess): Promise<void> {
  let exited = false;
  child.once('exit', () => (exited = true));
  for (;;) {
    if (exited) throw new Error('keel exited before it was ready');
    try {
      if ((await fetch(`${base}/about`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** CPU time (user + system) a process has used so far, in microseconds; undefined where /proc is missing. */
function cpuMicros(pid: number): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * (1_000_000 / 100); // clock ticks of 1/100 s
  } catch {
    return undefined;
  }
}

/**
 * With `pid`, also the server's CPU time per request: other work on a shared machine takes turns
 * on the cores and so lowers requests/s, but adds little to what each request costs the server.
 */
export async function load(name: string, options: autocannon.Options, pid?: number): Promise<LoadResult> {
  await autocannon({ connections: CONNECTIONS, ...options, duration: 1 }); // warm-up
  const before = pid === undefined ? undefined : cpuMicros(pid);
  const r = await autocannon({ connections: CONNECTIONS, duration: DURATION, ...options });
  const after = pid === undefined ? undefined : cpuMicros(pid);
  const cpuMicrosPerRequest = before !== undefined && after !== undefined && r.requests.total > 0 ? (after - before) / r.requests.total : undefined;
  return { name, requestsPerSecond: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, cpuMicrosPerRequest };
}

export function loadTable(results: LoadResult[]): string[] {
  return ['| Target | req/s | p50 ms | p99 ms | non-2xx |', '|---|---|---|---|---|', ...results.map((r) => `| ${r.name} | ${r.requestsPerSecond.toFixed(0)} | ${r.p50} | ${r.p99} | ${r.non2xx} |`)];
}

export interface RunningKeel {
  base: string;
  token: string;
  org: string;
  /** The keel process. */
  pid: number;
  /** A JSON request as the admin. */
  call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  stop(): Promise<void>;
}

/** Starts `keel serve` (built) on a fresh SQLite directory (or `dataDir`, kept on stop), or on PostgreSQL when `databaseUrl` is given. */
export async function startKeel(options: { databaseUrl?: string; env?: Record<string, string>; dataDir?: string; nodeArgs?: string[] } = {}): Promise<RunningKeel> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'keel-bench-'));
  const port = await freePort();
  const org = 'bench';
  // BENCH_NODE_ARGS (say `--cpu-prof --cpu-prof-dir=/tmp/prof`) profiles the server under load.
  const nodeArgs = [...(process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? []), ...(options.nodeArgs ?? [])];
  const child = spawn(process.execPath, [...nodeArgs, join(ROOT, 'dist', 'src', 'cli.js'), 'serve'], {
    env: {
      ...process.env,
      KEEL_PORT: String(port),
      KEEL_AUDIT_PORT: String(await freePort()),
      KEEL_DATA_DIR: dataDir,
      KEEL_ORG: org,
      ...(options.databaseUrl ? { KEEL_DATABASE_URL: options.databaseUrl } : {}),
      ...(options.env ?? {}),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const base = `http://127.0.0.1:${port}`;
  // A restart on an existing store prints nothing: wait for /about instead.
  if (options.dataDir) {
    child.stdout!.resume();
    await waitForAbout(base, child);
  }
  else await waitForOutput(child, /cpln profile update/);
  const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
  return {
    base,
    token,
    org,
    pid: child.pid!,
    async call(method, path, body) {
      const res = await fetch(base + path, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    },
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** CPU seconds (user + system) a process has used so far, or with `mainThread` its main thread alone; 0 where /proc cannot be read (not Linux). */
export function cpuSeconds(pid: number | string, mainThread = false): number {
  try {
    const stat = readFileSync(mainThread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}
/** A process's resident memory in MB, from /proc (0 where it cannot be read: not Linux, or the process is gone). */
export function rssMb(pid: number): number {
  try {
    const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
    return kb / 1024;
  } catch {
    return 0;
  }
}

/** USER_HZ: 100 on every Linux this runs on. */
const CLOCK_TICKS = 100;

/** CPU seconds used so far by every process named postgres on this machine (the server and its backends). */
export function postgresCpuSeconds(): number {
  let total = 0;
  let entries: string[] = [];
  try {
    entries = readdirSync('/proc');
  } catch {
    return 0;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') total += cpuSeconds(entry);
    } catch {
      // exited meanwhile
    }
  }
  return total;
}

/** `url` (a postgres:// URL) naming its connections `name`, so pg_stat_activity tells a process's backends apart. */
export function withAppName(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

/** CPU seconds so far of each PostgreSQL backend serving connections named `appName`, by pid (`db` is any connection to the server). */
export async function backendsCpu(db: { query: (text: string, values: unknown[]) => Promise<{ rows: Array<{ pid: number }> }> }, appName: string): Promise<Map<number, number>> {
  const { rows } = await db.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [appName]);
  return new Map(rows.map((r) => [r.pid, cpuSeconds(r.pid)]));
}

/** CPU seconds the backends of `after` used since `before` (both from backendsCpu); one opened meanwhile counts from zero, one closed meanwhile is missed. */
export function backendsCpuSince(before: Map<number, number>, after: Map<number, number>): number {
  return [...after].reduce((sum, [pid, cpu]) => sum + cpu - (before.get(pid) ?? 0), 0);
}

/** Ends a child process: `stop` (or SIGTERM) and, if it is still there after 10 s, SIGKILL. A process already gone is fine. */
export async function endProcess(pid: number | undefined, stop?: () => Promise<unknown>): Promise<void> {
  if (pid === undefined) return;
  const alive = () => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (!alive()) return;
  const gone = async () => {
    if (stop) await stop().catch(() => {});
    else {
      process.kill(pid, 'SIGTERM');
      while (alive()) await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([gone(), new Promise((resolve) => (timer = setTimeout(resolve, 10_000)))]);
  clearTimeout(timer);
  if (alive()) process.kill(pid, 'SIGKILL');
}

/**
 * A Keel process started with `--inspect=127.0.0.1:<port>` (see startKeel's nodeArgs): its memory
 * right after a full garbage collection, read over the inspector protocol, so that what a process
 * holds is told apart from garbage not yet collected (which RSS includes).
 */
export async function memoryAfterGc(inspectPort: number): Promise<{ heapUsedMb: number; rssMb: number; externalMb: number }> {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json()) as Array<{ webSocketDebuggerUrl: string }>;
  const { default: WebSocket } = await import('ws');
  const socket = new WebSocket(targets[0].webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  let id = 0;
  const send = (method: string, params: Record<string, unknown> = {}) =>
    new Promise<any>((resolve, reject) => {
      const mine = ++id;
      const onMessage = (data: Buffer) => {
        const message = JSON.parse(data.toString());
        if (message.id !== mine) return;
        socket.off('message', onMessage);
        if (message.error) reject(new Error(`${method}: ${JSON.stringify(message.error)}`));
        else resolve(message.result);
      };
      socket.on('message', onMessage);
      socket.send(JSON.stringify({ id: mine, method, params }));
    });
  try {
    await send('HeapProfiler.collectGarbage');
    await send('HeapProfiler.collectGarbage'); // a second pass frees what the first one's finalizers let go
    const result = await send('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true });
    const usage = JSON.parse(result.result.value) as { heapUsed: number; rss: number; external: number };
    return { heapUsedMb: usage.heapUsed / 2 ** 20, rssMb: usage.rss / 2 ** 20, externalMb: usage.external / 2 ** 20 };
  } finally {
    socket.close();
  }
}
