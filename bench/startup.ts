// A newcomer's first steps, timed: `npm ci` in a fresh clone of HEAD (with this machine's npm cache:
// what is downloaded is not what this measures), the build that `npm install` runs (prepare), a
// `keel` command through npx and straight through node, and a first start until Keel serves, on an
// empty SQLite directory and an empty PostgreSQL schema. Medians of a few runs each.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { freePort } from '../test/support/ports.js';
import { PG_URL, ROOT, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const ROUNDS = Number(process.env.BENCH_STARTUP_ROUNDS ?? 5);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

function timed(command: string, args: string[], cwd: string, env: Record<string, string> = {}): number {
  const start = performance.now();
  const run = spawnSync(command, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${run.stderr}`);
  return performance.now() - start;
}

/** From spawning `keel serve` to its "keel is serving" line. */
async function firstStart(env: Record<string, string>): Promise<number> {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-start-'));
  const start = performance.now();
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'src', 'cli.js'), 'serve'], {
    env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_PORT: String(await freePort()), KEEL_AUDIT_PORT: String(await freePort()), KEEL_DATABASE_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  try {
    return await new Promise<number>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('"msg":"keel is serving"')) resolve(performance.now() - start);
      });
      child.once('exit', (code) => reject(new Error(`keel serve exited (${code}) before serving: ${out}`)));
    });
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function benchStartup(): Promise<Section> {
  const clone = mkdtempSync(join(tmpdir(), 'keel-bench-clone-'));
  try {
    timed('git', ['clone', '-q', ROOT, clone], tmpdir());
    const install = timed('npm', ['ci', '--no-audit', '--no-fund', '--prefer-offline'], clone);
    const builds: number[] = [];
    for (let i = 0; i < 3; i++) {
      rmSync(join(clone, 'dist'), { recursive: true, force: true });
      builds.push(timed(process.execPath, ['scripts/build-if-stale.mjs'], clone));
    }
    const npx: number[] = [];
    const direct: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      npx.push(timed('npx', ['keel', 'status'], clone));
      direct.push(timed(process.execPath, ['dist/src/cli.js', 'status'], clone));
    }
    const sqlite: number[] = [];
    const postgres: number[] = [];
    await withBenchSchema(PG_URL, async (newSchema) => {
      for (let i = 0; i < 3; i++) {
        sqlite.push(await firstStart({}));
        postgres.push(await firstStart({ KEEL_DATABASE_URL: await newSchema() }));
      }
    });
    const figures = {
      npmCiSeconds: install / 1000,
      prepareSeconds: median(builds) / 1000,
      npxStatusSeconds: median(npx) / 1000,
      nodeStatusSeconds: median(direct) / 1000,
      firstStartSqliteSeconds: median(sqlite) / 1000,
      firstStartPostgresSeconds: median(postgres) / 1000,
    };
    return {
      title: 'First steps: install, a keel command, a first start',
      lines: [
        '| Step | Time |',
        '|---|---|',
        `| \`npm ci\` in a fresh clone (npm cache warm; better-sqlite3 compiled from source when its prebuilt binary cannot be fetched) | ${seconds(install)} |`,
        `| of which the build npm install runs (prepare: server and console), median of 3 | ${seconds(median(builds))} |`,
        `| \`npx keel status\`, median of ${ROUNDS} | ${seconds(median(npx))} |`,
        `| \`node dist/src/cli.js status\` (the same command without npx), median of ${ROUNDS} | ${seconds(median(direct))} |`,
        `| first start until Keel serves, empty SQLite directory, median of 3 | ${seconds(median(sqlite))} |`,
        `| first start until Keel serves, empty PostgreSQL schema, median of 3 | ${seconds(median(postgres))} |`,
      ],
      figures,
    };
  } finally {
    rmSync(clone, { recursive: true, force: true });
  }
}
