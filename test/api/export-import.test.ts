// Export → import → `cpln apply -f`: an org where cron runs and volume-set operations happened
// is exported; `keel import` loads the file into a second org and the official CLI applies it to
// a third; all three export the same documents. An import that fails halfway leaves nothing.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { applySeed, readSeed, SeedError } from '../../src/admin/seed.js';
import { documentsText, exportOrg, type Document } from '../../src/resources/transfer.js';
import { Cpln } from '../support/cpln.js';
import { forEachBackend, type TestKeel } from '../support/keel.js';
import { startLivingKeel, W1 } from '../support/living.js';
import { waitFor } from '../support/wait.js';

const SERVER_OWNED = ['id', 'version', 'created', 'lastModified', 'links', 'status', 'origin', 'lifecycleStage'];

forEachBackend('export and import', (backend) => {
  let k: TestKeel;
  let cpln: Cpln;
  let exported: Document[];
  let file: string;

  before(async () => {
    k = await startLivingKeel(backend);
    const created = async (url: string, body: unknown) => {
      const res = await k.call('POST', url, body);
      assert.equal(res.status, 201, `${url}: ${JSON.stringify(res.body)}`);
      return res;
    };
    await created('/org/acme/secret', { name: 'db-pass', type: 'opaque', data: { payload: 'hunter2', encoding: 'plain' } });
    await created('/org/acme/gvc/prod/identity', { name: 'app', tags: { team: 'a' } });
    await created('/org/acme/gvc/prod/volumeset', { name: 'data', spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd' } });
    await created('/org/acme/gvc/prod/workload', {
      name: 'db',
      spec: { type: 'stateful', containers: [{ name: 'pg', image: 'postgres:16', cpu: '100m', memory: '256Mi', ports: [{ protocol: 'tcp', number: 5432 }], volumes: [{ uri: 'cpln://volumeset/data', path: '/var/lib/postgresql' }] }] },
    });
    await created('/org/acme/gvc/prod/workload', {
      name: 'job',
      description: 'nightly',
      spec: { type: 'cron', identityLink: '//identity/app', containers: [{ name: 'main', image: 'busybox:1', cpu: '50m', memory: '64Mi' }], job: { schedule: '0 0 * * *' } },
    });
    await created('/org/acme/policy', { name: 'reads-secret', targetKind: 'secret', targetLinks: ['//secret/db-pass'], bindings: [{ permissions: ['reveal'], principalLinks: ['//gvc/prod/identity/app'] }] });
    await created('/org/acme/group', { name: 'ops', memberLinks: ['//serviceaccount/admin'] });

    // A cron run and a volume expansion run to completion: they leave commands, deployments and status behind.
    const cron = await created('/org/acme/gvc/prod/workload/job/-command', { type: 'runCronWorkload', spec: { location: W1 } });
    await waitFor('volume bound', () => k.call('GET', '/org/acme/gvc/prod/volumeset/data').then((r) => r.body), (vs) =>
      (vs?.status?.locations ?? []).some((l: any) => l.name === W1 && l.volumes?.[0]?.lifecycle === 'bound'), 60_000);
    const expand = await created('/org/acme/gvc/prod/volumeset/data/-command', { type: 'expandVolume', spec: { location: W1, volumeIndex: 0, newStorageCapacity: 50 } });
    for (const command of [cron, expand]) {
      await waitFor('command completed', () => k.call('GET', command.headers.location as string).then((r) => r.body), (c) => c.lifecycleStage === 'completed', 60_000);
    }

    exported = await exportOrg(k.store, 'acme');
    const endpoint = await k.listen();
    cpln = new Cpln([endpoint.replace('http://', '')]);
    const profile = await cpln.run(['profile', 'update', 'keel', '--endpoint', endpoint, '--token', k.token, '--org', 'acme', '--default']);
    assert.equal(profile.code, 0, profile.stderr);
    file = join(cpln.home, 'export.yaml');
    writeFileSync(file, documentsText(exported, 'yaml'));
  });
  after(async () => {
    cpln?.cleanup();
    await k?.close();
  });

  test('the export holds what the user declared and nothing Keel made', () => {
    const kinds = new Set(exported.map((d) => d.kind));
    assert.ok(!kinds.has('command') && !kinds.has('deployment'), [...kinds].join(', '));
    const names = exported.map((d) => `${d.kind}/${d.name}`);
    for (const declared of ['secret/db-pass', 'gvc/prod', 'identity/app', 'volumeset/data', 'workload/db', 'workload/job', 'policy/reads-secret', 'group/ops']) assert.ok(names.includes(declared), `${declared} in ${names.join(', ')}`);
    assert.ok(!names.some((n) => /^(location|auditctx)\/|superusers|viewers|controlplane/.test(n)), `built-ins exported: ${names.join(', ')}`);
    for (const doc of exported) for (const field of SERVER_OWNED) assert.ok(!(field in doc), `${doc.kind} '${doc.name}' carries ${field}`);
    const job = exported.find((d) => d.name === 'job')!;
    assert.equal((job.spec as any).identityLink, '//gvc/prod/identity/app');
    assert.equal(job.description, 'nightly');
    assert.equal((exported.find((d) => d.name === 'db-pass')!.data as any).payload, 'hunter2');
  });

  test('keel import and cpln apply -f of the export make orgs that export the same documents', async () => {
    for (const org of ['second', 'third']) assert.equal((await k.call('POST', '/org', { name: org })).status, 201);
    const imported = await applySeed(k.store, 'second', readSeed(file, 'keel import'));
    assert.deepEqual(imported.map((o) => o.outcome), exported.map(() => 'created'));
    const applied = await cpln.run(['apply', '-f', file, '--org', 'third'], { timeoutMs: 90_000 });
    assert.equal(applied.code, 0, `${applied.stdout}\n${applied.stderr}`);
    assert.deepEqual(await exportOrg(k.store, 'second'), exported);
    assert.deepEqual(await exportOrg(k.store, 'third'), exported);
    // Importing it again changes nothing.
    assert.ok((await applySeed(k.store, 'second', readSeed(file, 'keel import'))).every((o) => o.outcome === 'unchanged'));
  });

  test('an import that fails at its last document leaves nothing behind and names that document', async () => {
    assert.equal((await k.call('POST', '/org', { name: 'fourth' })).status, 201);
    const before = await exportOrg(k.store, 'fourth');
    const broken = join(cpln.home, 'broken.yaml');
    writeFileSync(broken, documentsText([...exported, { kind: 'workload', name: 'zzz', gvc: 'prod', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx', ports: 'many' }] } }], 'yaml'));
    await assert.rejects(applySeed(k.store, 'fourth', readSeed(broken, 'keel import')), (err: unknown) => {
      assert.ok(err instanceof SeedError);
      assert.match(err.message, new RegExp(`broken\\.yaml: document ${exported.length + 1} \\(workload 'zzz'\\): spec\\.containers\\[0\\]\\.ports`));
      return true;
    });
    assert.deepEqual(await exportOrg(k.store, 'fourth'), before);
    assert.equal((await k.call('GET', '/org/fourth/gvc/prod')).status, 404);
    assert.equal((await k.call('GET', '/org/fourth/secret/db-pass')).status, 404);
  });
});
