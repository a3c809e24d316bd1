// Writes BENCHMARKS.md at the repository root and its charts under bench/charts/ from a run's
// report (bench/out/report.json). `npm run bench` calls it at the end; `node dist/bench/report.js`
// redraws both from the last report.json without measuring again.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
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

/**
 * With `merge` (a run of some sections only), the run's sections replace theirs in the BENCHMARKS.md
 * there is, summary rows included, and the other sections and their charts stay.
 */
export function writeBenchmarks(report: Report, options: { merge?: boolean } = {}): string {
  const chartDir = join(ROOT, 'bench', 'charts');
  const file = join(ROOT, 'BENCHMARKS.md');
  const previous = options.merge && existsSync(file) ? readFileSync(file, 'utf8') : undefined;
  mkdirSync(chartDir, { recursive: true });
  if (previous === undefined) for (const f of readdirSync(chartDir)) if (f.endsWith('.svg')) rmSync(join(chartDir, f));
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
  const fresh = md.join('\n');
  const text = previous === undefined ? fresh : merged(previous, fresh, report.sections.map((s) => s.title));
  writeFileSync(file, text);
  return text;
}

/** `previous` with the sections named `titles` (and their summary rows) taken from `fresh`; sections new to it go last. */
function merged(previous: string, fresh: string, titles: string[]): string {
  const split = (text: string) => {
    const [head, ...parts] = text.split(/^(?=## )/m);
    return { head, sections: parts.map((part) => ({ title: part.slice(3, part.indexOf('\n')), text: part })) };
  };
  const old = split(previous);
  const now = new Map(split(fresh).sections.map((s) => [s.title, s.text]));
  const rerun = new Set(titles);
  // Summary rows: a section's rows begin with the row naming it.
  const rowsOf = (summary: string) => {
    const groups: Array<{ title: string; rows: string[] }> = [];
    for (const row of summary.split('\n').filter((l) => /^\| /.test(l) && !/^\| Section \|/.test(l))) {
      const title = row.split('|')[1].trim();
      if (title) groups.push({ title, rows: [row] });
      else groups.at(-1)?.rows.push(row);
    }
    return groups;
  };
  const sections = old.sections.map((s) => {
    if (s.title === 'Summary') {
      const kept = rowsOf(s.text).filter((g) => !rerun.has(g.title));
      const added = rowsOf(now.get('Summary') ?? '');
      const table = s.text.split('\n').filter((l) => !/^\| /.test(l) || /^\| Section \|/.test(l));
      const header = table.findIndex((l) => /^\|---/.test(l));
      const at = header >= 0 ? header + 1 : table.length;
      return [...table.slice(0, at), ...kept.flatMap((g) => g.rows), ...added.flatMap((g) => g.rows), ...table.slice(at)].join('\n');
    }
    return rerun.has(s.title) && now.has(s.title) ? now.get(s.title)! : s.text;
  });
  for (const title of titles) if (!old.sections.some((s) => s.title === title) && now.has(title)) sections.push(now.get(title)!);
  return [old.head, ...sections.map((text) => text.replace(/\n*$/, '\n\n'))].join('').replace(/\n+$/, '\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const report = JSON.parse(readFileSync(join(ROOT, 'bench', 'out', 'report.json'), 'utf8')) as Report;
  writeBenchmarks(report);
  process.stdout.write(`wrote BENCHMARKS.md and ${report.sections.reduce((n, s) => n + (s.charts?.length ?? 0), 0)} charts\n`);
}
