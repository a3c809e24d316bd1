// npm run bench: measures Keel against a raw node:http server in the same run and writes
// bench/out/report.md and report.json. Ratios, not absolute numbers, are the figures to compare
// across machines.
import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const outDir = join(root, 'bench', 'out');
const DURATION = Number(process.env.BENCH_SECONDS ?? 8);
const CONNECTIONS = 16;

interface Result {
  name: string;
  requestsPerSecond: number;
  p50: number;
  p99: number;
  non2xx: number;
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

function waitForLine(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      seen += chunk.toString();
      const m = pattern.exec(seen);
      if (m) resolve(m[1] ?? m[0]);
    });
    child.once('exit', (code) => reject(new Error(`child exited (${code}) before it was ready: ${seen}`)));
  });
}

async function load(name: string, url: string, headers: Record<string, string> = {}): Promise<Result> {
  await autocannon({ url, connections: CONNECTIONS, duration: 1, headers }); // warm-up
  const r = await autocannon({ url, connections: CONNECTIONS, duration: DURATION, headers });
  return { name, requestsPerSecond: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-'));
  const port = await freePort();
  const keel = spawn(process.execPath, [join(root, 'dist', 'src', 'cli.js'), 'serve'], {
    env: { ...process.env, KEEL_PORT: String(port), KEEL_AUDIT_PORT: String(await freePort()), KEEL_DATA_DIR: dataDir, KEEL_LOG_LEVEL: 'warn', KEEL_ORG: 'bench' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const raw = spawn(process.execPath, [join(here, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await waitForLine(keel, /cpln profile update/);
    const rawPort = Number(await waitForLine(raw, /^(\d+)\n/));
    const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
    const base = `http://127.0.0.1:${port}`;
    const auth = { authorization: `Bearer ${token}` };
    const created = await fetch(`${base}/org/bench/gvc`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bench' }) });
    if (created.status !== 201) throw new Error(`could not create the benchmark gvc: ${created.status}`);

    const baseline = await load('raw node:http', `http://127.0.0.1:${rawPort}/`);
    const keelGet = await load('Keel GET /org/bench/gvc/bench (SQLite, auth on)', `${base}/org/bench/gvc/bench`, auth);
    const ratio = keelGet.requestsPerSecond / baseline.requestsPerSecond;

    const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
    const report = { machine, durationSeconds: DURATION, connections: CONNECTIONS, results: [baseline, keelGet], ratios: { getVsRawHttp: ratio } };
    mkdirSync(outDir, { recursive: true });
    writeFileSync(join(outDir, 'report.json'), JSON.stringify(report, null, 2) + '\n');
    const rows = report.results.map((r) => `| ${r.name} | ${r.requestsPerSecond.toFixed(0)} | ${r.p50} | ${r.p99} | ${r.non2xx} |`);
    const md = [
      '# Keel benchmark report',
      '',
      `Machine: ${machine}. autocannon, ${CONNECTIONS} connections, ${DURATION} s per run after a 1 s warm-up; both servers run in this one session.`,
      '',
      '| Target | req/s | p50 ms | p99 ms | non-2xx |',
      '|---|---|---|---|---|',
      ...rows,
      '',
      `GET of one gvc with authentication against raw node:http: **${ratio.toFixed(2)}** (goal ≥ 0.5).`,
      '',
    ].join('\n');
    writeFileSync(join(outDir, 'report.md'), md);
    process.stdout.write(md);
  } finally {
    keel.kill('SIGTERM');
    raw.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
