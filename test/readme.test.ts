// The README's block of `npx keel` commands (more orgs and keys, export and import, audit, migrate)
// runs as written, in the checkout, on a fresh store; and the README names only CLI commands that
// the pinned CLI has.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CPLN_BIN } from './support/cpln.js';

const ROOT = join(import.meta.dirname, '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const dataDir = mkdtempSync(join(tmpdir(), 'keel-readme-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

test("the README's npx keel commands run as written", () => {
  const block = /More orgs and keys[\s\S]*?```bash\n([\s\S]*?)```/.exec(README)?.[1];
  assert.ok(block, 'the block is in the README');
  const written = ['acme.yaml'].filter((f) => block.includes(f)).map((f) => join(ROOT, f));
  for (const file of written) assert.ok(!existsSync(file), `${file} is in the way`);
  const build = spawnSync(process.execPath, ['scripts/build-if-stale.mjs'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(build.status, 0, build.stderr);
  try {
    const run = spawnSync('bash', ['-euo', 'pipefail', '-c', block], { cwd: ROOT, env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_DATABASE_URL: '' }, encoding: 'utf8', timeout: 120_000 });
    assert.equal(run.status, 0, `the block failed:\n${block}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`);
    assert.match(run.stdout, /^(created|updated|unchanged) serviceaccount 'admin'$/m, 'the import loaded acme\'s documents into the other org');
    assert.match(run.stdout, /audit chain of org 'acme' is intact/);
    assert.match(run.stdout, /--token <KEY> --org default --default$/m, 'keel status gives the profile line without the key');
  } finally {
    for (const file of written) rmSync(file, { force: true });
  }
});

test('the README names the CLI commands as the pinned CLI spells them', () => {
  const help = spawnSync(CPLN_BIN, ['--help'], { env: { ...process.env, CPLN_SKIP_UPDATE_CHECK: '1', HOME: dataDir }, encoding: 'utf8' });
  assert.match(help.stdout, /^\s+cpln cp\b/m, 'the CLI has cpln cp');
  const workload = spawnSync(CPLN_BIN, ['workload', '--help'], { env: { ...process.env, CPLN_SKIP_UPDATE_CHECK: '1', HOME: dataDir }, encoding: 'utf8' });
  assert.doesNotMatch(workload.stdout, /cpln workload cp\b/, 'and no cpln workload cp');
  for (const file of ['README.md', 'docs/runtime.md', 'docs/limits.md', 'docs/security.md', 'docs/clients.md']) {
    const text = readFileSync(join(ROOT, file), 'utf8').replace(/\s+/g, ' ');
    assert.doesNotMatch(text, /cpln workload cp\b/, `${file} names cpln workload cp`);
    assert.doesNotMatch(text, /`connect`,? (and )?`cp`/, `${file} lists cp among the workload subcommands`);
  }
});
