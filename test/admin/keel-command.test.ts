// The CI features through the keel command, on both backends: a fixed bootstrap key, a seed on
// start (and what a bad one does), reset and snapshots, as a pipeline would run them.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { openStore } from '../../src/store/open.js';
import { createTestSchema } from '../support/postgres.js';
import { forEachBackend } from '../support/keel.js';
import { SEEDED, seedDir } from './fixtures.js';
import { keel, serveKeel } from './server.js';

const KEY = /^s[a-z2-7]{15}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/;

forEachBackend('the keel command for CI', (backend) => {
  let dir: string;
  let env: Record<string, string>;
  let dropSchema = async () => {};
  let adminKey: string;
  const get = async (endpoint: string, path: string, token = adminKey) => {
    const res = await fetch(`${endpoint}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: (await res.json()) as any };
  };
  const withStore = async <T>(fn: (store: Awaited<ReturnType<typeof openStore>>) => Promise<T>) => {
    const store = await openStore({ dataDir: dir, databaseUrl: env.KEEL_DATABASE_URL || undefined });
    try {
      return await fn(store);
    } finally {
      await store.close();
    }
  };
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'keel-ci-'));
    env = { KEEL_DATA_DIR: dir, KEEL_DATABASE_URL: '', KEEL_ORG: 'acme', KEEL_LOG_LEVEL: 'info', KEEL_RECONCILE: 'off' };
    if (backend === 'postgres') {
      const schema = await createTestSchema();
      env.KEEL_DATABASE_URL = schema.url;
      dropSchema = schema.drop;
    }
  });
  after(async () => {
    rmSync(dir, { recursive: true, force: true });
    await dropSchema();
  });

  test('key generate prints a fresh key of the org; a malformed, weak or foreign KEEL_ADMIN_KEY stops the start naming it', async () => {
    const one = keel(env, 'key', 'generate', '--org', 'acme');
    assert.equal(one.code, 0, one.stderr);
    assert.match(one.stdout, KEY);
    assert.notEqual(keel(env, 'key', 'generate', '--org', 'acme').stdout, one.stdout);
    assert.equal(keel(env, 'key', 'generate').code, 2);
    adminKey = one.stdout;
    const [keyName, middle] = adminKey.split('.');
    const other = keel(env, 'key', 'generate', '--org', 'other').stdout;
    for (const [value, why] of [
      ['not-a-key', /not a Keel key/],
      [`${keyName}.${middle}.${'A'.repeat(43)}`, /weak/],
      [`${keyName}.${middle}.${Buffer.from(Array.from({ length: 32 }, (_, i) => i)).toString('base64url')}`, /weak/],
      [`${keyName}.${middle}.short`, /32 bytes/],
      [other, /org 'other'/],
    ] as const) {
      await assert.rejects(serveKeel({ ...env, KEEL_ADMIN_KEY: value }), (err: any) => {
        assert.equal(err.code, 1);
        assert.match(err.stderr, /KEEL_ADMIN_KEY/);
        assert.match(err.stderr, why);
        assert.doesNotMatch(err.stderr, /A{43}/, 'the value itself is not echoed');
        return true;
      });
    }
    assert.equal(await withStore((s) => s.isEmpty()), true, 'nothing was written');
  });

  test('a bad seed stops the start with its file, document and field, and applies nothing of the run', async () => {
    const seed = seedDir();
    writeFileSync(join(seed, 'zz-bad.yaml'), 'kind: gvc\nname: fine-gvc\n---\nkind: workload\nname: bad\ngvc: demo\nspec:\n  type: standard\n  containers:\n    - name: c\n      image: nginx\n      cpu: lots\n      colour: red\n');
    await assert.rejects(serveKeel({ ...env, KEEL_ADMIN_KEY: adminKey, KEEL_INIT: seed }), (err: any) => {
      assert.equal(err.code, 1);
      assert.match(err.stderr, /zz-bad\.yaml: document 2 \(workload 'bad'\): spec\.containers\[0\]\.(colour|cpu)/);
      return true;
    });
    await withStore(async (store) => {
      assert.deepEqual(await store.orgs(), ['acme'], 'the org and its key were made before the seed');
      for (const kind of ['gvc', 'secret', 'serviceaccount']) {
        const items = await store.list({ org: 'acme', kind, limit: 100, build: () => ({ where: '1 = 1', orderBy: 'r.name' }) });
        assert.deepEqual(items.filter((i) => i.data.origin !== 'builtin' && i.name !== 'admin').map((i) => i.name), [], `no ${kind} of the failed run`);
      }
    });
    const yaml = join(seed, 'zz-bad.yaml');
    writeFileSync(yaml, 'kind: gvc\nname: x\n  bad indent: [\n');
    await assert.rejects(serveKeel({ ...env, KEEL_ADMIN_KEY: adminKey, KEEL_INIT: seed }), (err: any) => /zz-bad\.yaml: document 1: not valid YAML/.test(err.stderr));
    rmSync(seed, { recursive: true });
  });

  test('serve with KEEL_ADMIN_KEY and KEEL_INIT: the key works, admin.token holds it, the seed is there; a restart writes nothing', async () => {
    const seed = seedDir();
    const settings = { ...env, KEEL_ADMIN_KEY: adminKey, KEEL_INIT: seed };
    let served = await serveKeel(settings);
    try {
      assert.equal((await get(served.endpoint, '/org/acme/gvc/demo/workload/web')).status, 200);
      assert.equal((await get(served.endpoint, '/org/acme/gvc/demo')).body.spec.staticPlacement.locationLinks[0], '/org/acme/location/aws-us-west-2');
      assert.ok(served.lines.some((l) => l.includes('"seed applied"') && l.includes('"created":6')));
    } finally {
      await served.stop();
    }
    const { readFileSync } = await import('node:fs');
    assert.equal(readFileSync(join(dir, 'admin.token'), 'utf8').trim(), adminKey);
    const head = await withStore((s) => s.auditHead('acme'));
    served = await serveKeel(settings);
    try {
      assert.ok(served.lines.some((l) => l.includes('"seed applied"') && l.includes('"unchanged":6')));
      assert.equal((await get(served.endpoint, '/org/acme/gvc')).status, 200);
    } finally {
      await served.stop();
    }
    assert.deepEqual(await withStore((s) => s.auditHead('acme')), head, 'no audit event from the second start');
  });

  test('keel reset: refused naming KEEL_ALLOW_RESET when off; on, back to the seed with the bootstrap key', async () => {
    const seed = seedDir();
    const settings = { ...env, KEEL_ADMIN_KEY: adminKey, KEEL_INIT: seed };
    assert.equal(keel(settings, 'org', 'create', 'scratch').code, 0);
    const off = keel(settings, 'reset');
    assert.notEqual(off.code, 0);
    assert.match(off.stderr, /KEEL_ALLOW_RESET/);
    assert.deepEqual(await withStore((s) => s.orgs()), ['acme', 'scratch']);
    const on = keel({ ...settings, KEEL_ALLOW_RESET: 'on' }, 'reset');
    assert.equal(on.code, 0, on.stderr);
    assert.match(on.stdout, /6 seeded documents/);
    assert.deepEqual(await withStore((s) => s.orgs()), ['acme']);
    const served = await serveKeel(settings);
    try {
      assert.deepEqual((await get(served.endpoint, '/org/acme/gvc')).body.items.map((g: any) => g.name), SEEDED.gvc);
    } finally {
      await served.stop();
    }
    assert.equal(keel(env, 'audit', 'verify', '--org', 'acme').code, 0);
  });

  test('keel snapshot: refused naming KEEL_ALLOW_SNAPSHOTS when off; on, save, list, restore, delete; audit verify stays intact and shows the restore; bad names are refused', () => {
    for (const args of [['save', 'prepared'], ['list'], ['restore', 'prepared'], ['delete', 'prepared']]) {
      const off = keel(env, 'snapshot', ...args);
      assert.notEqual(off.code, 0, `keel snapshot ${args.join(' ')} while off`);
      assert.match(off.stderr, /KEEL_ALLOW_SNAPSHOTS/);
    }
    const on = { ...env, KEEL_ALLOW_SNAPSHOTS: 'on' };
    assert.equal(keel(on, 'snapshot', 'list').stdout, '', 'nothing was saved while off');
    assert.equal(keel(on, 'snapshot', 'save', 'prepared').code, 0);
    assert.equal(keel(on, 'snapshot', 'save', 'prepared').code, 1, 'a second save of a name');
    const before = keel(env, 'audit', 'verify', '--org', 'acme').stdout;
    assert.equal(keel(env, 'org', 'create', 'later').code, 0);
    assert.match(keel(env, 'org', 'list').stdout, /later/);
    const list = keel(on, 'snapshot', 'list');
    assert.match(list.stdout, /^prepared\t\d{4}-/);
    const restored = keel(on, 'snapshot', 'restore', 'prepared');
    assert.equal(restored.code, 0, restored.stderr);
    assert.match(restored.stdout, /later to position 0/);
    assert.doesNotMatch(keel(env, 'org', 'list').stdout, /later/);
    assert.equal(keel(env, 'audit', 'verify', '--org', 'acme').stdout, before, 'an org the restore did not change has no restore event');
    const verify = keel(env, 'audit', 'verify', '--org', 'later');
    assert.equal(verify.code, 0, verify.stderr);
    assert.match(verify.stdout, /intact/);
    assert.match(verify.stdout, /keel restored snapshot 'prepared', back to the state at event 0/);
    for (const name of ['../../etc/passwd', '..', 'Bad Name']) {
      const res = keel(on, 'snapshot', 'save', name);
      assert.equal(res.code, 1);
      assert.match(res.stderr, /not a valid snapshot name/);
    }
    assert.match(keel(on, 'snapshot', 'restore', 'missing').stderr, /snapshot 'missing' not found/);
    assert.equal(keel(on, 'snapshot', 'delete', 'prepared').code, 0);
    assert.equal(keel(on, 'snapshot', 'list').stdout, '');
  });
});
