// Living resources: reconcilers move volume set, workload (deployments), command, mk8s and
// domain status along; status writes leave version and lastModified alone and are visible to
// the change stream; with two Keel instances on one PostgreSQL each transition is written once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { App } from '../../src/server/app.js';
import type { Store } from '../../src/store/types.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';
import { STEP, W1, W2, startLivingKeel } from '../support/living.js';


type Vol = { index: number; lifecycle: string; currentSize: number; volumeSnapshots?: unknown[]; iops: number; throughput: number };
const volumesOf = (vs: any): Record<string, Vol[]> =>
  Object.fromEntries(((vs?.status?.locations ?? []) as Array<{ name: string; volumes: Vol[] }>).map((l) => [l.name, l.volumes]));

/** The status events of one item, oldest first, as the audit chain (the change stream) holds them. */
async function statusEvents(store: Store, kind: string, name?: string): Promise<any[]> {
  const records = await store.audit({ org: 'acme', resourceType: kind, actionType: 'status', limit: 10_000 });
  return records.map((r) => JSON.parse(r.body)).filter((e) => name === undefined || e.resource.name === name);
}

/** Per volume, the lifecycles its status events went through (each change once). */
function lifecycleHistory(events: any[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const e of events) {
    for (const [loc, vols] of Object.entries(volumesOf(e.resource.data))) {
      for (const v of vols) {
        const h = (out[`${loc}/${v.index}`] ??= []);
        if (h[h.length - 1] !== v.lifecycle) h.push(v.lifecycle);
      }
    }
  }
  return out;
}

const mounting = (vs: string, extra: Record<string, unknown> = {}) => ({
  name: 'db',
  spec: {
    type: 'stateful',
    containers: [{ name: 'pg', image: 'postgres:16', cpu: '100m', memory: '256Mi', ports: [{ protocol: 'tcp', number: 5432 }], volumes: [{ uri: `cpln://volumeset/${vs}`, path: '/var/lib/postgresql' }] }],
    ...extra,
  },
});

forEachBackend('living resources', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startLivingKeel(backend);
  });
  after(() => k.close());

  test('a volume set moves through its lifecycle, follows its workload and autoscales; version and lastModified stay', async () => {
    const created = await k.call('POST', '/org/acme/gvc/prod/volumeset', {
      name: 'data',
      spec: {
        initialCapacity: 10,
        performanceClass: 'general-purpose-ssd',
        snapshots: { schedule: '0 * * * *', retentionDuration: '7d' },
        autoscaling: { maxCapacity: 100, minFreePercentage: 20, scalingFactor: 1.5 },
      },
    });
    assert.equal(created.status, 201);
    const get = () => k.call('GET', '/org/acme/gvc/prod/volumeset/data').then((r) => r.body);
    const unbound = await waitFor('volumes unbound in both locations', get, (vs) => {
      const v = volumesOf(vs);
      return [W1, W2].every((l) => v[l]?.[0]?.lifecycle === 'unbound');
    });
    const loc = unbound.status.locations.find((l: any) => l.name === W1);
    assert.equal(loc.desiredVolumeCount, 1);
    assert.match(loc.clusterId, /^cpln-aws-us-west-2-/);
    const vol = loc.volumes[0];
    assert.equal(vol.currentSize, 10);
    assert.equal(vol.iops, 3000);
    assert.equal(vol.throughput, 125);
    assert.equal(vol.driver, 'ebs.csi.aws.com');
    assert.equal(unbound.status.usedByWorkload, undefined);

    // A workload mounts the set: the volumes bind, fill to the simulated 90% and grow 10 -> 15.
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', mounting('data'))).status, 201);
    const grown = await waitFor('bound, used by the workload, grown and snapshotted', get, (vs) => {
      const v = volumesOf(vs);
      return [W1, W2].every((l) => v[l]?.[0]?.lifecycle === 'bound' && v[l][0].currentSize === 15 && (v[l][0].volumeSnapshots ?? []).length === 1);
    });
    assert.equal(grown.status.usedByWorkload, '/org/acme/gvc/prod/workload/db');
    assert.deepEqual(grown.status.workloadLinks, ['/org/acme/gvc/prod/workload/db']);
    assert.equal(grown.version, created.body.version);
    assert.equal(grown.lastModified, created.body.lastModified);

    // The change stream (audit chain) saw every transition once, in order.
    const history = lifecycleHistory(await statusEvents(k.store, 'volumeset', 'data'));
    assert.deepEqual(history[`${W1}/0`], ['creating', 'unbound', 'bound']);
    assert.deepEqual(history[`${W2}/0`], ['creating', 'unbound', 'bound']);

    // A PATCH still works (status validates) and keeps the status; only the API's change counts.
    const patched = await k.call('PATCH', '/org/acme/gvc/prod/volumeset/data', { version: grown.version, description: 'pg data' });
    assert.equal(patched.status, 200);
    assert.equal(patched.body.version, grown.version + 1);
    assert.equal(volumesOf(patched.body)[W1][0].currentSize, 15);

    // The GVC's placement shrinks: that location's volumes are deleted and its entry goes.
    assert.equal((await k.call('PATCH', '/org/acme/gvc/prod', { spec: { staticPlacement: { locationLinks: [`//location/${W1}`] } } })).status, 200);
    await waitFor('location removed', get, (vs) => !volumesOf(vs)[W2] && volumesOf(vs)[W1]?.[0]?.lifecycle === 'bound');
    assert.deepEqual(lifecycleHistory(await statusEvents(k.store, 'volumeset', 'data'))[`${W2}/0`], ['creating', 'unbound', 'bound', 'deleted']);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/prod', { spec: { staticPlacement: { locationLinks: [`//location/${W1}`, `//location/${W2}`] } } })).status, 200);
    await waitFor('location back', get, (vs) => volumesOf(vs)[W2]?.[0]?.lifecycle === 'bound');
  });

  test('deployments: one per GVC location, ready, reporting the workload version that runs there', async () => {
    const created = await k.call('POST', '/org/acme/gvc/prod/workload', {
      name: 'web',
      spec: { type: 'standard', containers: [{ name: 'nginx', image: 'nginx:latest', ports: [{ protocol: 'http', number: 8080 }] }] },
    });
    assert.equal(created.status, 201);
    const link = created.body.links.find((l: any) => l.rel === 'deployment').href;
    assert.equal(link, '/org/acme/gvc/prod/workload/web/deployment');
    const list = () => k.call('GET', link).then((r) => r.body);
    const ready = await waitFor('deployments ready at version 1', list, (l) => l.items.length === 2 && l.items.every((d: any) => d.status.ready && d.status.versions[0].workload === 1));
    assert.equal(ready.kind, 'list');
    assert.equal(ready.itemKind, 'deployment');
    assert.deepEqual(ready.items.map((d: any) => d.name).sort(), [W2, W1].sort());
    const one = await k.call('GET', `${link}/${W1}`);
    assert.equal(one.status, 200);
    assert.equal(one.body.kind, 'deployment');
    assert.equal(one.body.links[0].href, `${link}/${W1}`);
    assert.equal((await k.call('GET', `${link}/nowhere`)).status, 404);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod/workload/missing/deployment')).status, 404);

    const wl = await waitFor('workload status', () => k.call('GET', '/org/acme/gvc/prod/workload/web').then((r) => r.body), (w) => w.status?.ready === true);
    assert.match(wl.status.endpoint, /^https:\/\/web-.*\.simulated\.invalid$/);
    assert.equal(wl.version, 1);
    assert.equal(wl.lastModified, created.body.lastModified);

    // A change through the API is version 2: every location rolls to it.
    const patched = await k.call('PATCH', '/org/acme/gvc/prod/workload/web', { spec: { containers: [{ name: 'nginx', image: 'nginx:1.27' }] } });
    assert.equal(patched.body.version, 2);
    const rolled = await waitFor('deployments ready at version 2', list, (l) => l.items.length === 2 && l.items.every((d: any) => d.status.ready && !d.status.deploying && d.status.versions.length === 1 && d.status.versions[0].workload === 2));
    assert.equal(rolled.items[0].status.versions[0].containers.nginx.image, 'nginx:1.27');
    const after2 = await k.call('GET', '/org/acme/gvc/prod/workload/web');
    assert.equal(after2.body.version, 2);
    assert.equal(after2.body.lastModified, patched.body.lastModified);
    assert.equal(after2.body.status.readyLatest, true);

    // Deleting the workload removes its deployments.
    assert.equal((await k.call('DELETE', '/org/acme/gvc/prod/workload/web')).status, 202);
    await waitFor('deployments gone', () => k.store.list({ org: 'acme', kind: 'deployment', gvc: 'prod', limit: 100, build: () => ({ where: "r.name LIKE 'web:%'", orderBy: 'r.name' }) }), (rows) => rows.length === 0);
  });

  test('commands: 201 + Location, pending -> running -> completed, expandVolume changes the capacity', async () => {
    const base = '/org/acme/gvc/prod/volumeset/data/-command';
    await waitFor('volume ready', () => k.call('GET', '/org/acme/gvc/prod/volumeset/data').then((r) => r.body), (vs) => volumesOf(vs)[W1]?.[0]?.lifecycle === 'bound');
    const posted = await k.call('POST', base, { type: 'expandVolume', spec: { location: `//location/${W1}`, volumeIndex: 0, newStorageCapacity: '50' } });
    assert.equal(posted.status, 201);
    const location = posted.headers.location as string;
    assert.match(location, new RegExp(`^${base}/[0-9a-f-]{36}$`));
    assert.equal(posted.body.lifecycleStage, 'pending');
    assert.deepEqual(posted.body.spec, { location: W1, volumeIndex: 0, newStorageCapacity: 50 });
    const done = await waitFor('command completed', () => k.call('GET', location).then((r) => r.body), (c) => c.lifecycleStage === 'completed');
    assert.equal(done.type, 'expandVolume');
    const stages = (await statusEvents(k.store, 'command')).filter((e) => e.resource.id === done.id).map((e) => e.resource.data.lifecycleStage);
    assert.deepEqual(stages, ['running', 'completed']);
    const vs = await waitFor('volume expanded', () => k.call('GET', '/org/acme/gvc/prod/volumeset/data').then((r) => r.body), (v) => volumesOf(v)[W1][0].currentSize === 50);
    assert.equal(volumesOf(vs)[W2][0].currentSize, 15);

    // A shrink below the data on the volume fails, with a message.
    const shrink = await k.call('POST', base, { type: 'shrinkVolume', spec: { location: W1, newStorageCapacity: 5 } });
    assert.equal(shrink.status, 201);
    const failed = await waitFor('shrink failed', () => k.call('GET', shrink.headers.location as string).then((r) => r.body), (c) => ['failed', 'completed'].includes(c.lifecycleStage));
    assert.equal(failed.lifecycleStage, 'failed');
    assert.match(failed.status.messages.join(' '), /smaller than the data/);

    const list = await k.call('GET', base);
    assert.equal(list.body.kind, 'list');
    assert.equal(list.body.itemKind, 'command');
    assert.equal(list.body.items.length, 2);
    const query = await k.call('POST', `${base}/-query`, { spec: { match: 'all', terms: [{ op: '=', property: 'type', value: 'expandVolume' }] } });
    assert.equal(query.status, 200);
    assert.equal(query.body.kind, 'queryresult');
    assert.deepEqual(query.body.items.map((c: any) => c.id), [done.id]);

    assert.equal((await k.call('POST', base, { type: 'launchRocket' })).status, 400);
    assert.equal((await k.call('POST', base, { type: 'expandVolume', spec: { location: W1 } })).status, 400);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/volumeset/missing/-command', { type: 'expandVolume', spec: { location: W1, newStorageCapacity: 20 } })).status, 404);
    assert.equal((await k.call('GET', `${base}/00000000-0000-0000-0000-000000000000`)).status, 404);
    assert.equal((await k.call('DELETE', base)).status, 405);

    const wcmd = await k.call('POST', '/org/acme/gvc/prod/workload/db/-command', { type: 'stopReplica', spec: { location: W1, replica: 'db-0' } });
    assert.equal(wcmd.status, 201);
    await waitFor('workload command completed', () => k.call('GET', wcmd.headers.location as string).then((r) => r.body), (c) => c.lifecycleStage === 'completed');
  });

  test('deployments and commands need view on the parent; commands need exec', async () => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'nobody' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/nobody/-addKey', { description: 't' })).body.key as string;
    assert.equal((await k.call('GET', '/org/acme/gvc/prod/workload/db/deployment', undefined, { token: key })).status, 403);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod/volumeset/data/-command', undefined, { token: key })).status, 403);
    // Viewers may read, but not run commands.
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/nobody'] })).status, 200);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod/workload/db/deployment', undefined, { token: key })).status, 200);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod/volumeset/data/-command', undefined, { token: key })).status, 200);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/volumeset/data/-command', { type: 'expandVolume', spec: { location: W1, newStorageCapacity: 60 } }, { token: key })).status, 403);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload/db/-command', { type: 'stopReplica', spec: { location: W1 } }, { token: key })).status, 403);
  });

  test('a dry-run command checks permission and body and stores nothing; a key with only exec.runCronWorkload may run, not stop', async () => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'scheduler' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/scheduler/-addKey', { description: 't' })).body.key as string;
    const path = '/org/acme/gvc/prod/workload/db/-command';
    const count = async () => (await k.call('GET', path)).body.items.length as number;
    const before = await count();
    const run = { type: 'runCronWorkload', spec: { location: W1 } };
    assert.equal((await k.call('POST', `${path}?dryRun=true`, run, { token: key })).status, 403);
    const policy = { name: 'scheduler-runs', targetKind: 'workload', targetLinks: ['//gvc/prod/workload/db'], bindings: [{ permissions: ['exec.runCronWorkload', 'view'], principalLinks: ['//serviceaccount/scheduler'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    const dry = await k.call('POST', `${path}?dryRun=true`, run, { token: key });
    assert.equal(dry.status, 201, JSON.stringify(dry.body));
    assert.deepEqual([dry.body.type, dry.body.spec.location, dry.body.lifecycleStage], ['runCronWorkload', W1, 'pending']);
    assert.equal((await k.call('GET', dry.body.links[0].href)).status, 404, 'the dry-run command was not stored');
    assert.equal((await k.call('POST', `${path}?dryRun=true`, { type: 'runCronWorkload', spec: {} }, { token: key })).status, 400);
    assert.equal((await k.call('POST', `${path}?dryRun=true`, { type: 'stopReplica', spec: { location: W1 } }, { token: key })).status, 403);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload/missing/-command?dryRun=true', run)).status, 404);
    assert.equal(await count(), before);
    assert.equal((await k.call('POST', path, run, { token: key })).status, 201);
    assert.equal(await count(), before + 1);
  });

  test('mk8s becomes ready, domains reach ready, agents get their bootstrap config; all without new versions', async () => {
    const mk8s = await k.call('POST', '/org/acme/mk8s', { name: 'k1', spec: { version: '1.28.4', provider: { aws: { region: 'us-west-2' } }, addOns: { dashboard: {} } } });
    assert.equal(mk8s.status, 201);
    const ready = await waitFor('mk8s ready', () => k.call('GET', '/org/acme/mk8s/k1').then((r) => r.body), (c) => typeof c.status?.serverUrl === 'string');
    assert.equal(ready.status.homeLocation, 'aws-us-west-2');
    assert.ok(ready.status.addOns.dashboard.url);
    assert.equal(ready.version, 1);

    const domain = await k.call('POST', '/org/acme/domain', { name: 'app.example.com', spec: { dnsMode: 'cname', gvcLink: '//gvc/prod', ports: [{ number: 443, protocol: 'http2', routes: [{ prefix: '/', workloadLink: '//gvc/prod/workload/db' }] }] } });
    assert.equal(domain.status, 201);
    const d = await waitFor('domain ready', () => k.call('GET', '/org/acme/domain/app.example.com').then((r) => r.body), (x) => x.status?.status === 'ready');
    assert.equal(d.version, 1);
    assert.equal(d.status.endpoints[0].workloadLink, '/org/acme/gvc/prod/workload/db');
    assert.ok(d.status.dnsConfig.some((r: any) => r.type === 'CNAME'));
    const stages = (await statusEvents(k.store, 'domain', 'app.example.com')).map((e) => e.resource.data.status.status);
    assert.deepEqual(stages, ['pendingDnsConfig', 'pendingCertificate', 'ready']);

    assert.equal((await k.call('POST', '/org/acme/agent', { name: 'edge' })).status, 201);
    const agent = await waitFor('agent status', () => k.call('GET', '/org/acme/agent/edge').then((r) => r.body), (a) => !!a.status?.bootstrapConfig);
    assert.equal(agent.status.bootstrapConfig.agentLink, '/org/acme/agent/edge');
  });
});

forEachBackend('a reconciler following its own changes and another process\'s', (backend) => {
  // Slow steps put the periodic scan (every 30 steps) beyond the deadline: only following the
  // change stream can bring these volume sets along in time.
  const SLOW_STEP = 600;
  let k: TestKeel;
  let other: App;
  before(async () => {
    k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: SLOW_STEP });
    other = (await k.reopen({ reconcile: false })).app;
  });
  after(() => k.close());

  test('changes from both, interleaved, each reach the reconciler', async () => {
    const placed = (locations: string[]) => ({ spec: { staticPlacement: { locationLinks: locations.map((l) => `//location/${l}`) } } });
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'mixed', ...placed([W1]) }, { app: other })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/mixed/volumeset', { name: 'near', spec: { initialCapacity: 10 } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/mixed/volumeset', { name: 'far', spec: { initialCapacity: 10 } }, { app: other })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/mixed/volumeset/near', { description: 'after the other process wrote' })).status, 200);
    const sets = () => Promise.all(['near', 'far'].map((n) => k.call('GET', `/org/acme/gvc/mixed/volumeset/${n}`).then((r) => volumesOf(r.body))));
    await waitFor('both volume sets unbound', sets, (all) => all.every((v) => v[W1]?.[0]?.lifecycle === 'unbound'));
    // A placement change by the other process, then one by this one: the volume sets follow each.
    assert.equal((await k.call('PATCH', '/org/acme/gvc/mixed', placed([W1, W2]), { app: other })).status, 200);
    await waitFor('both volume sets in the added location', sets, (all) => all.every((v) => v[W2]?.[0]?.lifecycle === 'unbound'));
    assert.equal((await k.call('PATCH', '/org/acme/gvc/mixed', placed([W2]))).status, 200);
    await waitFor('both volume sets out of the removed location', sets, (all) => all.every((v) => !v[W1] && v[W2]?.[0]?.lifecycle === 'unbound'));
  });
});

forEachBackend(
  'living resources with two Keel processes',
  () => {
    let k: TestKeel;
    let second: App;
    before(async () => {
      k = await startKeel('postgres', 'acme', { reconcile: true, reconcileStepMs: STEP });
      second = (await k.reopen()).app;
    });
    after(() => k.close());

    test('each transition is reconciled exactly once', async () => {
      assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'g2', spec: { staticPlacement: { locationLinks: [`//location/${W1}`, `//location/${W2}`] } } }, { app: second })).status, 201);
      assert.equal((await k.call('POST', '/org/acme/gvc/g2/volumeset', { name: 'vs', spec: { initialCapacity: 20 } })).status, 201);
      await waitFor('unbound everywhere', () => k.call('GET', '/org/acme/gvc/g2/volumeset/vs', undefined, { app: second }).then((r) => r.body), (vs) => [W1, W2].every((l) => volumesOf(vs)[l]?.[0]?.lifecycle === 'unbound'));
      assert.equal((await k.call('POST', '/org/acme/gvc/g2/workload', mounting('vs'), { app: second })).status, 201);
      await waitFor('bound everywhere', () => k.call('GET', '/org/acme/gvc/g2/volumeset/vs').then((r) => r.body), (vs) => [W1, W2].every((l) => volumesOf(vs)[l]?.[0]?.lifecycle === 'bound'));
      await waitFor('deployments ready', () => k.call('GET', '/org/acme/gvc/g2/workload/db/deployment', undefined, { app: second }).then((r) => r.body), (l) => l.items.length === 2 && l.items.every((d: any) => d.status.ready));
      // Let both runners look again (timers, scans) before counting.
      await new Promise((r) => setTimeout(r, STEP * 5));

      const vsEvents = await statusEvents(k.store, 'volumeset', 'vs');
      const history = lifecycleHistory(vsEvents);
      assert.deepEqual(history[`${W1}/0`], ['creating', 'unbound', 'bound']);
      assert.deepEqual(history[`${W2}/0`], ['creating', 'unbound', 'bound']);
      // No event repeats a state: every status event is a real transition.
      const strip = (e: any) => JSON.stringify(e.resource.data.status, (key, value) => (key === 'keel/since' ? undefined : value));
      for (let i = 1; i < vsEvents.length; i++) assert.notEqual(strip(vsEvents[i]), strip(vsEvents[i - 1]), `status event ${i} repeats the previous state`);
      // Volumes move independently per location, so at most 2 events per transition step; at least one.
      assert.ok(vsEvents.length >= 3 && vsEvents.length <= 6, `volume set status events: ${vsEvents.length}`);

      const deployments = await statusEvents(k.store, 'deployment');
      for (const loc of [W1, W2]) {
        const mine = deployments.filter((e) => e.resource.link === `/org/acme/gvc/g2/workload/db/deployment/${loc}`);
        assert.deepEqual(mine.map((e) => e.resource.data.status.ready), [false, true], `deployment ${loc}`);
      }
    });
  },
  ['postgres'],
);
