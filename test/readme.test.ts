// The README names only CLI commands that the pinned CLI has (docs-run.test.ts runs its blocks).
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
