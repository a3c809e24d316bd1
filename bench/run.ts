// npm run bench: runs every section in one session and writes bench/out/report.md and report.json.
// Compare ratios, not absolute numbers: these 2-core machines are noisy. BENCH_ONLY=get,patch
// runs some sections only.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { benchAudit } from './audit.js';
import { benchGet } from './get.js';
import { benchAuth } from './auth.js';
import { benchPatch } from './patch.js';
import { CONNECTIONS, DURATION, ROOT, type Section } from './harness.js';

const SECTIONS: Record<string, () => Promise<Section>> = {
  get: benchGet,
  patch: benchPatch,
  audit: benchAudit,
  auth: benchAuth,
  query: () => import('./query.js').then((m) => m.benchQuery()),
};

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY?.split(',');
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`;
  const sections: Section[] = [];
  for (const [name, run] of Object.entries(SECTIONS)) {
    if (only && !only.includes(name)) continue;
    process.stderr.write(`bench: ${name}...\n`);
    sections.push(await run());
  }
  const outDir = join(ROOT, 'bench', 'out');
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'report.json'), JSON.stringify({ machine, durationSeconds: DURATION, connections: CONNECTIONS, sections }, null, 2) + '\n');
  const md = [
    '# Keel benchmark report',
    '',
    `Machine: ${machine}. Load: autocannon, ${CONNECTIONS} connections, ${DURATION} s per run after a 1 s warm-up.`,
    '',
    ...sections.flatMap((s) => [`## ${s.title}`, '', ...s.lines, '']),
  ].join('\n');
  writeFileSync(join(outDir, 'report.md'), md);
  process.stdout.write(md);
}

await main();
