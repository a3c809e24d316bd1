// Writes BENCHMARKS.md at the repository root and its charts under bench/charts/ from a run's
// report (bench/out/report.json). `npm run bench` calls it at the end; `node dist/bench/report.js`
// redraws both from the last report.json without measuring again.
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT, type Section } from './harness.js';
import { renderChart } from './svg.js';

export interface Report {
  machine: string;
  /** CPU model, cores, memory, Node version, OS, load average when the run started. */
  machineDetails?: Record<string, string>;
  date?: string;
  durationSeconds: number;
  connections: number;
  totalSeconds?: number;
  sections: Section[];
}

export function writeBenchmarks(report: Report): string {
  const chartDir = join(ROOT, 'bench', 'charts');
  mkdirSync(chartDir, { recursive: true });
  for (const f of readdirSync(chartDir)) if (f.endsWith('.svg')) rmSync(join(chartDir, f));
  const details = report.machineDetails ?? { Machine: report.machine };
  const md: string[] = [
    '# Keel benchmarks',
    '',
    '_Written by `npm run bench` (bench/run.ts); do not edit by hand. Redraw from the last run with `node dist/bench/report.js`._',
    '',
    '## Machine',
    '',
    '| | |',
    '|---|---|',
    ...Object.entries(details).map(([k, v]) => `| ${k} | ${v} |`),
    '',
    `Load: autocannon, ${report.connections} connections, ${report.durationSeconds} s per run after a 1 s warm-up; Keel runs as \`keel serve\``,
    'from the built dist/ in its own process, on a fresh SQLite directory or a fresh PostgreSQL schema (PostgreSQL on the same machine),',
    "in its default configuration (log level info, request lines for errors and slow requests only) unless a section says otherwise.",
    'Compare ratios, not absolute numbers: these are shared 2-core machines, and other work may have been running on the',
    'machine during the run (see the load average above); the load generator shares the two cores with Keel and its database.',
    ...(report.totalSeconds ? ['', `The whole run took ${(report.totalSeconds / 60).toFixed(1)} minutes.`] : []),
    '',
    '## Summary',
    '',
    'Every figure of the run (also in bench/out/report.json); latencies in ms, rates in requests/s, memory in MiB, ratios and costs as fractions.',
    '',
    '| Section | Figure | Value |',
    '|---|---|---|',
    ...report.sections.flatMap((s) => Object.entries(s.figures).map(([k, v], i) => `| ${i === 0 ? s.title : ''} | \`${k}\` | ${Number.isInteger(v) ? v : v.toFixed(3)} |`)),
    '',
  ];
  for (const s of report.sections) {
    md.push(`## ${s.title}`, '');
    for (const chart of s.charts ?? []) {
      writeFileSync(join(chartDir, chart.file), renderChart(chart));
      md.push(`![${chart.title}](bench/charts/${chart.file})`, '');
    }
    md.push(...s.lines, '');
  }
  const text = md.join('\n');
  writeFileSync(join(ROOT, 'BENCHMARKS.md'), text);
  return text;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const report = JSON.parse(readFileSync(join(ROOT, 'bench', 'out', 'report.json'), 'utf8')) as Report;
  writeBenchmarks(report);
  process.stdout.write(`wrote BENCHMARKS.md and ${report.sections.reduce((n, s) => n + (s.charts?.length ?? 0), 0)} charts\n`);
}
