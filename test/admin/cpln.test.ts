// The official cpln CLI against a Keel started for CI (fixed key, seed, fault injection, fast
// reconcilers), on both backends: it rides out injected 503s with its own retries, applying the
// seed again changes nothing, and it reports a workload whose deployments never become ready.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { mintKey } from '../../src/auth/keys.js';
import { openStore } from '../../src/store/open.js';
import { forEachBackend } from '../support/keel.js';
import { createTestSchema } from '../support/postgres.js';
import { seedDir } from './fixtures.js';
import { serveKeel, type Served } from './server.js';

const CPLN = join(import.meta.dirname, '..', '..', 'node_modules', '.bin', 'cpln');
const run = promisify(execFile);
const DEADLINE_MS = 30_000;

forEachBackend('the cpln CLI against Keel for CI', (backend) => {
  let dir: string;
  let home: string;
  let seed: string;
  let served: Served;
  let databaseUrl: string | undefined;
  let dropSchema = async () => {};
  const token = mintKey('acme', 'admin').token;
  const cplnEnv = () => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CPLN_') && v !== undefined) env[k] = v;
    return { ...env, CPLN_HOME: home, CPLN_SKIP_UPDATE_CHECK: '1' };
  };
  const cpln = async (...args: string[]) => {
    try {
      const { stdout, stderr } = await run(CPLN, args, { env: cplnEnv(), timeout: 90_000 });
      return { code: 0, stdout, stderr };
    } catch (err: any) {
      return { code: err.code ?? 1, stdout: String(err.stdout ?? ''), stderr: String(err.stderr ?? err.message) };
    }
  };
  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${served.endpoint}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (res.status === 202 ? undefined : await res.json()) as any };
  };
  const auditHead = async () => {
    const store = await openStore({ dataDir: dir, databaseUrl });
    try {
      return (await store.auditHead('acme')).seq;
    } finally {
      await store.close();
    }
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'keel-cpln-'));
    home = mkdtempSync(join(tmpdir(), 'cpln-home-'));
    seed = seedDir();
    if (backend === 'postgres') {
      const schema = await createTestSchema();
      databaseUrl = schema.url;
      dropSchema = schema.drop;
    }
    served = await serveKeel({
      KEEL_DATA_DIR: dir,
      KEEL_DATABASE_URL: databaseUrl ?? '',
      KEEL_ORG: 'acme',
      KEEL_ADMIN_KEY: token,
      KEEL_INIT: seed,
      KEEL_FAULTS: 'on',
      KEEL_RECONCILE_SPEED: '50',
      KEEL_LOG_LEVEL: 'info',
    });
    const profile = await cpln('profile', 'update', 'keel', '--endpoint', served.endpoint, '--token', token, '--org', 'acme', '--gvc', 'demo', '--default');
    assert.equal(profile.code, 0, profile.stderr);
  });
  after(async () => {
    await served?.stop();
    for (const d of [dir, home, seed]) rmSync(d, { recursive: true, force: true });
    await dropSchema();
  });

  test('cpln gvc get succeeds after two injected 503s (the CLI retries them)', { timeout: 120_000 }, async () => {
    assert.equal((await admin('PUT', '/-admin/faults', { rules: [{ name: 'flaky', method: 'GET', path: '/org/acme/gvc/demo', status: 503, times: 2 }] })).status, 200);
    const res = await cpln('gvc', 'get', 'demo', '-o', 'json');
    assert.equal(res.code, 0, res.stderr);
    assert.equal(JSON.parse(res.stdout).name, 'demo');
    const rules = (await admin('GET', '/-admin/faults')).body.rules;
    assert.equal(rules[0].hits, 2, 'both injected failures were met, and retried');
    assert.equal((await admin('DELETE', '/-admin/faults')).status, 202);
  });

  test('cpln apply -f of the seed documents changes nothing the second time', { timeout: 120_000 }, async () => {
    const head = await auditHead();
    const versions = async () => (await admin('GET', '/org/acme/gvc/demo/workload/web')).body.version + '/' + (await admin('GET', '/org/acme/gvc/demo')).body.version;
    const before = await versions();
    for (const file of [join(seed, 'app.yaml'), join(seed, 'nested', 'base.json')]) {
      const res = await cpln('apply', '-f', file);
      assert.equal(res.code, 0, res.stderr);
      assert.match(res.stdout, /Updated/);
      assert.doesNotMatch(res.stdout, /Created/);
    }
    assert.equal(await versions(), before);
    assert.equal(await auditHead(), head, 'no audit event');
  });

  test('cpln reports a workload whose deployments never become ready', { timeout: 120_000 }, async () => {
    assert.equal((await admin('PUT', '/-admin/faults', { rules: [{ name: 'never', scenario: 'deploymentNeverReady', path: '/org/acme/gvc/demo/workload/stuck' }] })).status, 200);
    const created = await cpln('workload', 'create', '--name', 'stuck', '--image', 'nginx:latest', '--gvc', 'demo');
    assert.equal(created.code, 0, created.stderr);
    const deployments = async (name: string) => {
      const res = await cpln('workload', 'get-deployments', name, '--gvc', 'demo', '-o', 'json');
      assert.equal(res.code, 0, res.stderr);
      const parsed = JSON.parse(res.stdout);
      return (parsed.items ?? parsed) as any[];
    };
    // The seeded workload is ready; the faulted one has its deployment, which still deploys after the fault was met again and again.
    const until = Date.now() + DEADLINE_MS;
    let web: any[] = [];
    while (Date.now() < until && !(web.length === 1 && web[0].status?.ready === true)) web = await deployments('web');
    assert.equal(web[0]?.status?.ready, true, JSON.stringify(web));
    let hits = 0;
    while (Date.now() < until && hits < 3) hits = (await admin('GET', '/-admin/faults')).body.rules[0].hits;
    assert.ok(hits >= 3, `hits ${hits}`);
    const stuck = await deployments('stuck');
    assert.equal(stuck.length, 1);
    assert.equal(stuck[0].status.ready, false);
    assert.equal(stuck[0].status.message, 'Deploying');
    const workload = await cpln('workload', 'get', 'stuck', '--gvc', 'demo', '-o', 'json');
    assert.equal(workload.code, 0, workload.stderr);
    assert.equal(JSON.parse(workload.stdout).status.ready, false);
  });
});
