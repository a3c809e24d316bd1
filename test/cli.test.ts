// The keel command line, run as a user runs it, on a fresh data directory.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import { buildApp } from '../src/server/app.js';
import { configFromEnv } from '../src/config.js';
import { openStore } from '../src/store/open.js';
import { SQLITE_EVENT_AT } from './support/raw-sql.js';

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
  assert.equal(db.prepare(`UPDATE audit_events SET body = replace(body, 'keel', 'evil') WHERE ${SQLITE_EVENT_AT}`).run('cli-org', 2).changes, 1);
  db.close();
  const broken = keel('audit', 'verify', '--org', 'cli-org');
  assert.equal(broken.code, 1);
  assert.match(broken.stderr, /BROKEN at event 2/);
});

test('every command answers --help with its usage', () => {
  for (const command of [['serve'], ['org', 'create'], ['org', 'list'], ['key', 'create'], ['key', 'revoke'], ['migrate'], ['audit', 'verify'], ['export'], ['import']]) {
    const res = keel(...command, '--help');
    assert.equal(res.code, 0, command.join(' '));
    assert.match(res.stdout, new RegExp(`^Usage: keel ${command.join(' ')}`));
  }
  const missing = keel('key', 'create');
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /missing --org ORG/);
});

test('serve --print-config shows the merged configuration with secrets masked, and refuses a bad value', () => {
  const printed = keel('serve', '--print-config', '--port', '9999', '--database-url', 'postgres://keel:hunter2@db/keel');
  assert.equal(printed.code, 0, printed.stderr);
  const config = JSON.parse(printed.stdout);
  assert.equal(config.port, 9999);
  assert.equal(config.dataDir, dataDir);
  assert.equal(config.databaseUrl, 'postgres://keel:****@db/keel');
  const bad = keel('serve', '--port', 'abc');
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /--port must be a whole number from 0 to 65535, got 'abc'/);
});

test('org list lists the orgs; key revoke stops a key at once', async () => {
  const list = keel('org', 'list');
  assert.equal(list.code, 0);
  assert.ok(list.stdout.split('\n').includes('cli-org'));
  const key = keel('key', 'create', '--org', 'cli-org').stdout;
  assert.equal(await getWith(key, '/org/cli-org/gvc'), 200);
  const revoked = keel('key', 'revoke', '--org', 'cli-org', key.split('.')[0]);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.equal(await getWith(key, '/org/cli-org/gvc'), 401);
  assert.equal(keel('key', 'revoke', '--org', 'cli-org', 'snosuchkeyxxxxxx').code, 1);
});

test('export writes documents that import loads into another org unchanged', async () => {
  const token = keel('org', 'create', 'source-org').stdout;
  const config = configFromEnv({ KEEL_DATA_DIR: dataDir });
  const store = await openStore(config);
  const app = await buildApp(config, store, { logger: false });
  const call = async (method: string, url: string, body?: unknown, tok = token) => {
    const res = await app.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined };
  };
  try {
    assert.equal((await call('POST', '/org/source-org/gvc', { name: 'prod', tags: { t: '1' }, spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } })).status, 201);
    assert.equal((await call('POST', '/org/source-org/gvc/prod/identity', { name: 'app' })).status, 201);
    assert.equal((await call('POST', '/org/source-org/gvc/prod/workload', { name: 'web', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }], identityLink: '//identity/app' } })).status, 201);
    assert.equal((await call('POST', '/org/source-org/secret', { name: 'db', type: 'opaque', data: { payload: 'pw', encoding: 'plain' } })).status, 201);
    assert.equal((await call('POST', '/org/source-org/policy', { name: 'view-prod', targetKind: 'gvc', targetLinks: ['//gvc/prod'], bindings: [{ permissions: ['view'], principalLinks: ['//group/viewers'] }] })).status, 201);
  } finally {
    await app.core.close();
    await app.audit.close();
    await store.close();
  }
  const file = join(dataDir, 'export.yaml');
  const exported = keel('export', '--org', 'source-org', '--out', file);
  assert.equal(exported.code, 0, exported.stderr);
  const text = readFileSync(file, 'utf8');
  assert.ok(!/\bid:|version:|created:|lastModified:|links:/.test(text), 'no server-owned fields');
  assert.ok(!text.includes('superusers-'), 'built-ins are not exported');
  assert.ok(text.indexOf('kind: gvc') < text.indexOf('kind: workload'), 'in apply order');
  const target = keel('org', 'create', 'target-org').stdout;
  const imported = keel('import', '--org', 'target-org', file);
  assert.equal(imported.code, 0, imported.stderr);
  assert.match(imported.stdout, /created workload 'web' \(gvc prod\)/);
  const again = keel('import', '--org', 'target-org', file);
  assert.equal(again.code, 0);
  assert.match(again.stdout, /unchanged gvc 'prod'/);
  const second = await openStore(config);
  const app2 = await buildApp(config, second, { logger: false });
  try {
    const get = async (url: string) => JSON.parse((await app2.core.inject({ method: 'GET', url, headers: { authorization: `Bearer ${target}` } })).body);
    const wl = await get('/org/target-org/gvc/prod/workload/web');
    assert.equal(wl.spec.identityLink, '/org/target-org/gvc/prod/identity/app');
    assert.equal((await get('/org/target-org/gvc/prod')).tags.t, '1');
    assert.equal((await get('/org/target-org/secret/db/-reveal')).data.payload, 'pw');
    assert.deepEqual((await get('/org/target-org/policy/view-prod')).targetLinks, ['/org/target-org/gvc/prod']);
  } finally {
    await app2.core.close();
    await app2.audit.close();
    await second.close();
  }
  // One transaction: the good document before the bad one is not left behind, and the bad one is named.
  const broken = join(dataDir, 'broken.yaml');
  writeFileSync(broken, 'kind: gvc\nname: fresh\n---\nkind: gvc\nname: Bad_Name\n');
  const failed = keel('import', '--org', 'target-org', broken);
  assert.equal(failed.code, 1);
  assert.match(failed.stderr, /nothing imported: .*broken\.yaml: document 2 \(gvc 'Bad_Name'\): name: /);
  assert.equal(await getWith(target, '/org/target-org/gvc/fresh'), 404);
  writeFileSync(broken, 'kind: gvc\nname: fresh\n---\nkind: nosuchkind\nname: x\n');
  const unknown = keel('import', '--org', 'target-org', broken);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /document 2: kind: 'nosuchkind' is not a kind/);
});

/** The keel command run in `cwd` with only the given KEEL_* settings (none from this test run). */
function keelIn(cwd: string, env: Record<string, string>, ...args: string[]) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('KEEL_')));
  const result = spawnSync(process.execPath, ['--import', import.meta.resolve('tsx'), CLI, ...args], { cwd, env: { ...clean, ...env }, encoding: 'utf8' });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

test('a command left to the default store refuses to create ./data there; named, it says which store it uses', () => {
  const elsewhere = mkdtempSync(join(tmpdir(), 'keel-cwd-'));
  try {
    for (const command of [['org', 'list'], ['org', 'create', 'acme'], ['key', 'create', '--org', 'default'], ['migrate'], ['audit', 'verify', '--org', 'default']]) {
      const refused = keelIn(elsewhere, {}, ...command);
      assert.equal(refused.code, 1, command.join(' '));
      assert.equal(refused.stdout, '', 'no listing, no key');
      assert.match(refused.stderr, /no Keel store at .*data\/keel\.db.*KEEL_DATA_DIR/);
    }
    assert.deepEqual(readdirSync(elsewhere), [], 'nothing was created');
    // Named by KEEL_DATA_DIR, --data-dir or a config file, the store is used (and made when new).
    const byEnv = keelIn(elsewhere, { KEEL_DATA_DIR: dataDir }, 'org', 'list');
    assert.equal(byEnv.code, 0, byEnv.stderr);
    assert.equal(byEnv.stderr.trim(), `keel: store SQLite ${join(dataDir, 'keel.db')}`);
    const fresh = join(elsewhere, 'fresh');
    const byFlag = keelIn(elsewhere, {}, 'migrate', '--data-dir', fresh);
    assert.equal(byFlag.code, 0, byFlag.stderr);
    assert.match(byFlag.stderr, new RegExp(`store SQLite ${fresh}/keel\\.db`));
    const config = join(elsewhere, 'keel.yaml');
    writeFileSync(config, `dataDir: ${fresh}\n`);
    assert.equal(keelIn(elsewhere, {}, 'org', 'list', '--config', config).code, 0);
    // A store that exists where the default points is the server's: it is used.
    const served = keelIn(elsewhere, {}, 'org', 'create', 'here', '--data-dir', join(elsewhere, 'data'));
    assert.equal(served.code, 0, served.stderr);
    const byDefault = keelIn(elsewhere, {}, 'org', 'list');
    assert.equal(byDefault.code, 0, byDefault.stderr);
    assert.equal(byDefault.stdout, 'here\n');
    // PostgreSQL is always named; its password is not shown.
    const pg = keelIn(elsewhere, { KEEL_DATABASE_URL: 'postgres://keel:hunter2@127.0.0.1:1/nothing' }, 'org', 'list');
    assert.equal(pg.code, 1);
    assert.match(pg.stderr, /keel: store PostgreSQL postgres:\/\/keel:\*\*\*\*@127\.0\.0\.1:1\/nothing/);
    assert.doesNotMatch(pg.stderr, /hunter2/);
  } finally {
    rmSync(elsewhere, { recursive: true, force: true });
  }
});

test('script-facing commands print only their value on stdout and their notes on stderr', () => {
  const generated = keelIn(dataDir, {}, 'key', 'generate', '--org', 'default');
  assert.equal(generated.code, 0, generated.stderr);
  assert.match(generated.stdout, /^[a-z0-9]{16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}\n$/);
  assert.match(generated.stderr, /stored nowhere/);
  const created = keelIn(dataDir, { KEEL_DATA_DIR: dataDir }, 'org', 'create', 'script-org');
  assert.equal(created.code, 0, created.stderr);
  assert.match(created.stdout, /^[a-z0-9]{16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}\n$/);
  assert.match(created.stderr, /store SQLite[\s\S]*created org 'script-org'/);
  const key = keelIn(dataDir, { KEEL_DATA_DIR: dataDir }, 'key', 'create', '--org', 'script-org');
  assert.equal(key.code, 0, key.stderr);
  assert.match(key.stdout, /^[a-z0-9]{16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}\n$/);
  // A failure leaves stdout empty, so $(…) captures nothing rather than a message.
  const failed = keelIn(dataDir, { KEEL_DATA_DIR: dataDir }, 'key', 'create', '--org', 'no-such-org');
  assert.equal(failed.code, 1);
  assert.equal(failed.stdout, '');
});
