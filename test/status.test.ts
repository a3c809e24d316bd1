// What Keel tells its operator: the start-up lines name where each API, the console and the
// workload endpoints are served and which runtime runs; `keel status` says where Keel serves and
// whether it answers, its store, runtime and org, and the cpln profile line, with the key only when
// asked for (--show-key).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import pg from 'pg';
import { freePort } from './support/ports.js';
import { createTestSchema, PG_TEST_URL, postgresAvailable } from './support/postgres.js';
import { Service } from './support/processes.js';
import { waitFor } from './support/wait.js';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
const dataDir = mkdtempSync(join(tmpdir(), 'keel-status-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

const ENV = { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_DATABASE_URL: '', KEEL_HOST: '127.0.0.1', KEEL_ADMIN_KEY: '', KEEL_RUNTIME: '', KEEL_ORG: '' };

function keel(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', CLI, ...args], { env: { ...ENV, ...env }, encoding: 'utf8' });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

test('the start-up lines name the Core API, the Audit API, the console and the runtime; keel status tells where it serves, without the key unless asked', async () => {
  const [port, auditPort] = [await freePort(), await freePort()];
  const settings = { KEEL_PORT: String(port), KEEL_AUDIT_PORT: String(auditPort) };
  const before = keel(['status'], settings);
  assert.equal(before.code, 0, before.stderr);
  assert.match(before.stdout, new RegExp(`^Core API   http://127\\.0\\.0\\.1:${port} \\(not answering\\)$`, 'm'));
  assert.match(before.stdout, new RegExp(`^Store      SQLite ${dataDir}/keel\\.db \\(does not exist yet\\)$`, 'm'));

  const service = new Service(spawn(process.execPath, ['--import', 'tsx', CLI, 'serve'], { env: { ...ENV, ...settings, KEEL_RECONCILE: 'on' }, stdio: ['ignore', 'pipe', 'pipe'] }));
  try {
    await waitFor('Keel to serve', async () => service.output, (out) => /"msg":"keel is serving"/.test(out) || !service.running, 60_000);
    const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
    const startup = service.output;
    assert.match(startup, new RegExp(`^keel: Core API http://127\\.0\\.0\\.1:${port}, Audit API http://127\\.0\\.0\\.1:${auditPort}, console http://127\\.0\\.0\\.1:${port}/console/$`, 'm'));
    assert.match(startup, /^keel: runtime simulated: no replica runs \(KEEL_RUNTIME=runc runs them\)$/m);
    assert.match(startup, /"console":"http:\/\/127\.0\.0\.1:\d+\/console\/","store":"sqlite","runtime":"simulated","msg":"keel is serving"/);
    const page = await fetch(`http://127.0.0.1:${port}/console/`);
    assert.equal(page.status, 200, 'the console is where the line says');
    assert.match(await page.text(), /<html/i);

    const status = keel(['status'], settings);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, new RegExp(`^Core API   http://127\\.0\\.0\\.1:${port} \\(answering: Keel [^)]+\\)$`, 'm'));
    assert.match(status.stdout, new RegExp(`^Audit API  http://127\\.0\\.0\\.1:${auditPort}$`, 'm'));
    assert.match(status.stdout, new RegExp(`^Store      SQLite ${dataDir}/keel\\.db$`, 'm'));
    assert.match(status.stdout, /^Runtime    simulated \(no replica runs\)$/m);
    assert.match(status.stdout, /^Org        default$/m);
    assert.match(status.stdout, new RegExp(`^  cpln profile update keel --endpoint http://127\\.0\\.0\\.1:${port} --token <KEY> --org default --default$`, 'm'));
    assert.ok(!status.stdout.includes(token) && !status.stderr.includes(token), 'the key is not printed unless asked for');
    assert.ok(!status.stdout.includes(token.split('.')[0]), 'not even its name');

    const shown = keel(['status', '--show-key'], settings);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, new RegExp(`^  cpln profile update keel --endpoint http://127\\.0\\.0\\.1:${port} --token ${token.replace(/\./g, '\\.')} --org default --default$`, 'm'));
  } finally {
    await service.stop();
  }
});

test('keel status names a PostgreSQL store without its password, and the runc runtime with its ingress', () => {
  const status = keel(['status'], { KEEL_DATABASE_URL: 'postgres://keel:s3cr3t-pw@db.internal:5432/keel', KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: '9082', KEEL_ORG: 'acme' });
  assert.equal(status.code, 0, status.stderr);
  assert.match(status.stdout, /^Store      PostgreSQL postgres:\/\/keel:\*+@db\.internal:5432\/keel$/m);
  assert.ok(!status.stdout.includes('s3cr3t-pw') && !status.stderr.includes('s3cr3t-pw'), 'no password');
  assert.match(status.stdout, /^Runtime    runc, workload endpoints on http:\/\/127\.0\.0\.1:9082$/m);
  assert.match(status.stdout, /--org acme --default$/m);
});

test('a first start on an empty PostgreSQL database says what it is doing: waiting for another process, creating the tables, creating the org', async (t) => {
  if (!(await postgresAvailable())) return t.skip('PostgreSQL is not reachable');
  const db = await createTestSchema('keel_first');
  // Another Keel process preparing the same database holds its migration lock.
  const other = new pg.Client({ connectionString: PG_TEST_URL });
  await other.connect();
  let service: Service | undefined;
  try {
    await other.query('BEGIN');
    await other.query('SELECT pg_advisory_xact_lock($1)', [0x6b65656c]);
    const [port, auditPort] = [await freePort(), await freePort()];
    const dir = mkdtempSync(join(tmpdir(), 'keel-first-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    service = new Service(spawn(process.execPath, ['--import', 'tsx', CLI, 'serve'], { env: { ...ENV, KEEL_DATA_DIR: dir, KEEL_DATABASE_URL: db.url, KEEL_PORT: String(port), KEEL_AUDIT_PORT: String(auditPort) }, stdio: ['ignore', 'pipe', 'pipe'] }));
    const running = service;
    await waitFor('the waiting line', async () => running.output, (out) => /^keel: waiting for another Keel process to finish preparing the database$/m.test(out) || !running.running, 60_000);
    assert.doesNotMatch(running.output, /keel is serving/, 'it waits for the lock');
    await other.query('COMMIT');
    await waitFor('Keel to serve', async () => running.output, (out) => /"msg":"keel is serving"/.test(out) || !running.running, 60_000);
    const lines = running.output.split('\n').filter((l) => l.startsWith('keel: ')).map((l) => l.replace(/\d+ migrations/, 'N migrations').replace(/:\d+/g, ':PORT'));
    assert.deepEqual(lines.slice(0, 4), [
      `keel: store PostgreSQL ${db.url.replace(/:\d+/, ':PORT')}`,
      'keel: waiting for another Keel process to finish preparing the database',
      "keel: creating Keel's tables in an empty database (N migrations)",
      "keel: creating org 'default' with its built-ins and a superuser key",
    ]);
  } finally {
    await other.end().catch(() => {});
    await service?.stop();
    await db.drop();
  }
});
