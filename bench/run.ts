// npm run bench: runs every section in one session and writes bench/out/report.md and report.json,
// and BENCHMARKS.md at the repository root with its charts under bench/charts/.
// Compare ratios, not absolute numbers: these 2-core machines are noisy. BENCH_ONLY=get,patch
// runs some sections only: they replace their own in BENCHMARKS.md, and the other sections stay.
import { execSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem, type } from 'node:os';
import { join } from 'node:path';
import { benchAudit } from './audit.js';
import { benchGet } from './get.js';
import { benchAuth } from './auth.js';
import { benchPatch } from './patch.js';
import { CONNECTIONS, DURATION, PG_URL, ROOT, type Section } from './harness.js';
import { writeBenchmarks, type Report } from './report.js';

const SECTIONS: Record<string, () => Promise<Section>> = {
  get: benchGet,
  patch: benchPatch,
  audit: benchAudit,
  auth: benchAuth,
  query: () => import('./query.js').then((m) => m.benchQuery()),
  adversarial: () => import('./adversarial.js').then((m) => m.benchAdversarial()),
  console: () => import('./console.js').then((m) => m.benchConsole()),
  watch: () => import('./watch.js').then((m) => m.benchWatch()),
  reset: () => import('./admin.js').then((m) => m.benchReset()),
  faults: () => import('./admin.js').then((m) => m.benchFaults()),
  registry: () => import('./registry.js').then((m) => m.benchRegistry()),
  runtime: () => import('./runtime.js').then((m) => m.benchRuntime()),
  rollout: () => import('./rollout.js').then((m) => m.benchRollout()),
  firewall: () => import('./firewall.js').then((m) => m.benchFirewall()),
  names: () => import('./names.js').then((m) => m.benchNames()),
  logflood: () => import('./logflood.js').then((m) => m.benchLogFlood()),
  startup: () => import('./startup.js').then((m) => m.benchStartup()),
  mcp: () => import('./mcp.js').then((m) => m.benchMcp()),
  readcache: () => import('./read-cache.js').then((m) => m.benchReadCache()),
  pgsystem: () => import('./pg-system.js').then((m) => m.benchPgSystem()),
};

function postgresVersion(): string {
  try {
    return execSync(`psql "${PG_URL}" -At -c "show server_version"`, { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();
  } catch {
    return 'unknown (psql not available)';
  }
}

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY?.split(',');
  const started = Date.now();
  const cpu = cpus();
  const machine = `${cpu.length} × ${cpu[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
  const machineDetails: Record<string, string> = {
    CPU: cpu[0]?.model ?? 'unknown',
    Cores: String(cpu.length),
    Memory: `${(totalmem() / 2 ** 30).toFixed(1)} GiB`,
    OS: `${type()} ${release()}`,
    Node: process.version,
    PostgreSQL: postgresVersion(),
    Date: new Date().toISOString(),
    'Load average at start (1/5/15 min)': loadavg().map((l) => l.toFixed(2)).join(' / '),
  };
  const sections: Section[] = [];
  for (const [name, run] of Object.entries(SECTIONS)) {
    if (only && !only.includes(name)) continue;
    process.stderr.write(`bench: ${name}...\n`);
    sections.push(await run());
  }
  machineDetails['Load average at end (1/5/15 min)'] = loadavg().map((l) => l.toFixed(2)).join(' / ');
  const outDir = join(ROOT, 'bench', 'out');
  mkdirSync(outDir, { recursive: true });
  const report: Report = { machine, machineDetails, date: machineDetails.Date, durationSeconds: DURATION, connections: CONNECTIONS, totalSeconds: (Date.now() - started) / 1000, sections };
  writeFileSync(join(outDir, 'report.json'), JSON.stringify(report, null, 2) + '\n');
  const md = [
    '# Keel benchmark report',
    '',
    `Machine: ${machine}. Load: autocannon, ${CONNECTIONS} connections, ${DURATION} s per run after a 1 s warm-up.`,
    '',
    ...sections.flatMap((s) => [`## ${s.title}`, '', ...s.lines, '']),
  ].join('\n');
  writeFileSync(join(outDir, 'report.md'), md);
  writeBenchmarks(report, { merge: only !== undefined });
  process.stdout.write(md);
  process.stderr.write(`bench: wrote BENCHMARKS.md and bench/charts/ in ${((Date.now() - started) / 60000).toFixed(1)} min\n`);
}

await main();
