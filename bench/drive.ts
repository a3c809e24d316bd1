// Load from a process of its own: wrk (Debian's `wrk` package) when it is on PATH, which costs the
// shared cores far less per request than a Node client; otherwise autocannon inside the bench
// process. Either way the servers being measured are other processes, and the report names the
// generator used (their throughputs are not comparable with each other).
import autocannon from 'autocannon';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONNECTIONS } from './harness.js';

export interface Request {
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
}

export interface Driven {
  /** Requests completed in the run. */
  requests: number;
  seconds: number;
  requestsPerSecond: number;
  p50: number;
  p99: number;
  /** Answers other than 2xx/3xx, and connection errors or timeouts. */
  non2xx: number;
  errors: number;
}

function findWrk(): string | undefined {
  if (process.env.BENCH_LOAD === 'autocannon') return undefined;
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
    return 'wrk';
  } catch (e) {
    // wrk --version prints its usage and exits 1: it is there.
    return (e as { status?: number }).status === 1 ? 'wrk' : undefined;
  }
}

const WRK = findWrk();

/** Which load generator drive() uses, for the report. */
export const GENERATOR = WRK ? `wrk (1 thread, ${CONNECTIONS} connections)` : `autocannon in the bench process (${CONNECTIONS} connections; install Debian's wrk to load from a separate process)`;

const lua = (s: string) => JSON.stringify(s); // a JSON string is a valid Lua string literal for this ASCII text

/** `seconds` of load on one request with CONNECTIONS connections. */
export async function drive(request: Request, seconds: number): Promise<Driven> {
  return WRK ? wrk(request, seconds) : viaAutocannon(request, seconds);
}

async function wrk(request: Request, seconds: number): Promise<Driven> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-bench-wrk-'));
  try {
    const script = join(dir, 'request.lua');
    writeFileSync(
      script,
      [
        `wrk.method = ${lua(request.method ?? 'GET')}`,
        ...(request.body === undefined ? [] : [`wrk.body = ${lua(request.body)}`, 'wrk.headers["Content-Type"] = "application/json"']),
        ...Object.entries(request.headers ?? {}).map(([k, v]) => `wrk.headers[${lua(k)}] = ${lua(v)}`),
        // One parseable line at the end; latencies in µs, duration in µs.
        'done = function(summary, latency, requests)',
        '  local e = summary.errors',
        '  io.write(string.format("KEEL-BENCH %d %d %d %d %d %d\\n", summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(99)))',
        'end',
      ].join('\n') + '\n',
    );
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(WRK!, ['-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--timeout', '10s', '-s', script, request.url], { stdio: ['ignore', 'pipe', 'pipe'] });
      let text = '';
      child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`wrk exited ${code}: ${text}`))));
    });
    const m = /KEEL-BENCH (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)/.exec(out);
    if (!m) throw new Error(`wrk gave no summary: ${out}`);
    const [requests, micros, non2xx, errors, p50, p99] = m.slice(1).map(Number);
    return { requests, seconds: micros / 1e6, requestsPerSecond: requests / (micros / 1e6), p50: p50 / 1000, p99: p99 / 1000, non2xx, errors };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function viaAutocannon(request: Request, seconds: number): Promise<Driven> {
  const r = await autocannon({
    url: request.url,
    method: request.method ?? 'GET',
    headers: { ...(request.body === undefined ? {} : { 'content-type': 'application/json' }), ...request.headers },
    body: request.body,
    connections: CONNECTIONS,
    duration: seconds,
  });
  return { requests: r.requests.total, seconds, requestsPerSecond: r.requests.total / seconds, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors + r.timeouts };
}
