// The keel command line, run as a user runs it, on a fresh data directory.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import { buildApp } from '../src/server/app.js';
import { configFromEnv } from '../src/config.js';
import { openStore } from '../src/store/open.js';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
let dataDir: string;

function keel(...args: string[]) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', CLI, ...args], {
    env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_DATABASE_URL: '' },
    encoding: 'utf8',
  });
  return { code: result.status, stdout: result.stdout.trim(), stderr: result.stderr.trim() };
}

/** A GET with a key against the data directory, through a server built on it. */
async function getWith(token: string, url: string): Promise<number> {
  const config = configFromEnv({ KEEL_DATA_DIR: dataDir });
  const store = await openStore(config);
  const app = await buildApp(config, store, { logger: false });
  try {
    return (await app.core.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } })).statusCode;
  } finally {
    await app.core.close();
    await app.audit.close();
    await store.close();
  }
}

before(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'keel-cli-'));
});
after(() => rmSync(dataDir, { recursive: true, force: true }));

test('--help lists the commands; an unknown command is a usage error', () => {
  const help = keel('--help');
  assert.equal(help.code, 0);
  for (const command of ['serve', 'org create', 'key create', 'migrate', 'audit verify']) assert.match(help.stdout, new RegExp(command));
  const bad = keel('frobnicate');
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /Usage: keel/);
});

test('migrate brings an empty data directory up to date', () => {
  const res = keel('migrate');
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /up to date/);
});

test('org create prints a working superuser key of the new org; key create prints another', async () => {
  const created = keel('org', 'create', 'cli-org');
  assert.equal(created.code, 0, created.stderr);
  assert.match(created.stdout, /^s[a-z2-7]{15}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
  assert.equal(await getWith(created.stdout, '/org/cli-org/gvc'), 200);
  const again = keel('org', 'create', 'cli-org');
  assert.equal(again.code, 1);
  assert.match(again.stderr, /already exists/);
  const invalid = keel('org', 'create', 'Not_Valid');
  assert.equal(invalid.code, 2);
  const key = keel('key', 'create', '--org', 'cli-org');
  assert.equal(key.code, 0, key.stderr);
  assert.notEqual(key.stdout, created.stdout);
  assert.equal(await getWith(key.stdout, '/org/cli-org/serviceaccount/admin'), 200);
  assert.equal(keel('key', 'create', '--org', 'no-such-org').code, 1);
});

test('audit verify passes on an intact chain and names the first broken link', () => {
  const ok = keel('audit', 'verify', '--org', 'cli-org');
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /intact: 3 events \(1..3\)/, 'org, its admin account, the added key');
  const db = new Database(join(dataDir, 'keel.db'));
  db.prepare("UPDATE audit_events SET body = replace(body, 'keel', 'evil') WHERE org = 'cli-org' AND seq = 2").run();
  db.close();
  const broken = keel('audit', 'verify', '--org', 'cli-org');
  assert.equal(broken.code, 1);
  assert.match(broken.stderr, /BROKEN at event 2/);
});
