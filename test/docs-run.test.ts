// Every shell block of README.md and docs/*.md says whether it runs here: `<!-- run -->` on the line
// before it, or `<!-- not run: WHY -->` naming what it needs and the test that covers it. The blocks
// marked to run do, as written, one page at a time in one shell (so a page's variables carry from
// block to block, as in a reader's terminal), against a fresh Keel started as `npm start` starts it,
// from a folder that looks like the checkout, with the official CLI on PATH. There `npx keel` runs
// this checkout's built command (npx's own lookup from a checkout is test/packaging's to show).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { CPLN_BIN } from './support/cpln.js';
import { freePort } from './support/ports.js';
import { spawnKeel } from './support/spawn-keel.js';

const ROOT = join(import.meta.dirname, '..');
const NPX_KEEL = (root: string) => `npx() { if [ "$1" = keel ]; then shift; node '${root}/dist/src/cli.js' "$@"; else command npx "$@"; fi; }`;
const PAGES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
const SHELL = /^\s*```(bash|sh|shell|console)\s*$/;
const MARK = /^\s*<!--\s*(run|not run:\s*(.+?))\s*-->\s*$/;

interface Block {
  page: string;
  line: number;
  code: string;
  marked: boolean;
  /** Why it is not run here; undefined when it is. */
  notRun?: string;
}

function blocksOf(page: string): Block[] {
  const lines = readFileSync(join(ROOT, page), 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!SHELL.test(lines[i])) continue;
    const indent = /^\s*/.exec(lines[i])![0].length;
    let end = i + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end])) end++;
    let before = i - 1;
    while (before >= 0 && lines[before].trim() === '') before--;
    const mark = before >= 0 ? MARK.exec(lines[before]) : null;
    blocks.push({ page, line: i + 1, code: lines.slice(i + 1, end).map((l) => l.slice(indent)).join('\n'), marked: mark !== null, notRun: mark?.[2] });
    i = end;
  }
  return blocks;
}

const ALL = PAGES.flatMap(blocksOf);

test('every shell block in README.md and docs/ says whether it runs here, and why when it does not', () => {
  assert.ok(ALL.length >= 10, `only ${ALL.length} shell blocks found`);
  assert.deepEqual(ALL.filter((b) => !b.marked).map((b) => `${b.page}:${b.line}`), [], 'blocks with neither <!-- run --> nor <!-- not run: WHY --> before them');
  for (const b of ALL.filter((x) => x.notRun !== undefined)) assert.ok(b.notRun!.length >= 10, `${b.page}:${b.line}: say why it is not run`);
});

// A page that installs the CLI globally gets the pinned one, already on PATH (the version is checked).
const GLOBAL_CLI = /^npm install -g @controlplane\/cli@([0-9.]+)$/;
const CLI_VERSION = JSON.parse(readFileSync(join(ROOT, 'node_modules/@controlplane/cli/package.json'), 'utf8')).version as string;

function scriptOf(blocks: Block[], port: number, auditPort: number): string {
  return blocks
    .map((b) => {
      const code = b.code
        .split('\n')
        .map((line) => {
          const global = GLOBAL_CLI.exec(line.trim());
          if (!global) return line;
          assert.equal(global[1], CLI_VERSION, `${b.page}:${b.line} installs a CLI other than the pinned one`);
          return ': the pinned CLI is on PATH';
        })
        .join('\n')
        // The documented default ports, on ports free for this run.
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)
        .replaceAll('127.0.0.1:8081', `127.0.0.1:${auditPort}`);
      return `echo '::block ${b.line}::' >&2\n${code}`;
    })
    .join('\n');
}

for (const page of PAGES) {
  const runnable = ALL.filter((b) => b.page === page && b.marked && b.notRun === undefined);
  if (!runnable.length) continue;
  test(`${page}: its runnable blocks run as written against a fresh Keel`, async () => {
    const build = spawnSync(process.execPath, ['scripts/build-if-stale.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(build.status, 0, build.stderr);
    // A folder that looks like the checkout: `npx keel` finds this package there, and `data/` is its own.
    const work = mkdtempSync(join(tmpdir(), 'keel-docs-'));
    for (const entry of ['package.json', 'node_modules']) symlinkSync(join(ROOT, entry), join(work, entry));
    mkdirSync(join(work, 'home'));
    const port = await freePort();
    const auditPort = await freePort();
    const settings = { KEEL_PORT: String(port), KEEL_AUDIT_PORT: String(auditPort), KEEL_DATA_DIR: join(work, 'data'), KEEL_DATABASE_URL: '' };
    const keel = await spawnKeel('', { ...settings, KEEL_RECONCILE: 'on' }, { dataDir: join(work, 'data') });
    try {
      const run = spawnSync('bash', ['-euo', 'pipefail', '-c', `${NPX_KEEL(ROOT)}\n${scriptOf(runnable, port, auditPort)}`], {
        cwd: work,
        env: { ...process.env, ...settings, HOME: join(work, 'home'), PATH: `${dirname(CPLN_BIN)}:${process.env.PATH}` },
        encoding: 'utf8',
        timeout: 180_000,
      });
      const failedIn = [...run.stderr.matchAll(/::block (\d+)::/g)].at(-1)?.[1];
      assert.equal(run.status, 0, `${page}: the block at line ${failedIn} failed\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`);
      // curl prints an API error object and still exits 0: none may appear.
      assert.doesNotMatch(run.stdout, /"status":[45]\d\d,/, `${page}: a block got an error answer\n${run.stdout}`);
    } finally {
      await keel.stop();
      rmSync(work, { recursive: true, force: true });
    }
  });
}
