// Status and sub-resources have the shapes of the public type definitions (test/support/
// public-types.ts), with values that follow the simulated state: a ready deployment's `internal`
// says the sync did not fail and names its replicas, container resources are numbers, a cron
// workload's runs appear in `jobExecutions` (scheduled ones and those a runCronWorkload command
// starts; a failed one says why), and a command can be cancelled. Every other kind's status has
// its public shape too, and mk8s clusters answer -cacerts, -join and -cloudinit.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { after, before, test } from 'node:test';
import { reconcileCommand } from '../../src/reconcile/commands.js';
import { accountIdOf } from '../../src/resources/orgs.js';
import { commandKey } from '../../src/reconcile/views.js';
import { reconcileWorkload } from '../../src/reconcile/workloads.js';
import type { ItemKey } from '../../src/store/types.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { mismatches } from '../support/public-types.js';
import { waitFor } from '../support/wait.js';
import { STEP, W1, W2, startLivingKeel } from '../support/living.js';


const cronWorkload = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  spec: { type: 'cron', containers: [{ name: 'job', image: 'busybox', cpu: '0.25', memory: '1Gi' }], job: { schedule: '0 3 * * *', historyLimit: 2 }, ...extra },
});

forEachBackend('status shapes (with the reconcilers)', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startLivingKeel(backend);
  });
  after(() => k.close());

  test('a ready deployment: internal.syncFailed false, its replicas named, container resources in numbers', async () => {
    const created = await k.call('POST', '/org/acme/gvc/prod/workload', {
      name: 'web',
      spec: {
        type: 'standard',
        containers: [{ name: 'app', image: 'nginx:1.27', cpu: '500m', memory: '256Mi', ports: [{ protocol: 'http', number: 8080 }] }],
        defaultOptions: { autoscaling: { minScale: 2, maxScale: 4 } },
        localOptions: [{ location: W2, autoscaling: { minScale: 3, maxScale: 4 } }],
      },
    });
    assert.equal(created.status, 201);
    const list = await waitFor('both deployments ready', () => k.call('GET', '/org/acme/gvc/prod/workload/web/deployment').then((r) => r.body), (l) => l.items.length === 2 && l.items.every((d: any) => d.status.ready));
    for (const d of list.items) {
      assert.deepEqual(mismatches(d.status, 'DeploymentStatus'), []);
      const wanted = d.name === W2 ? 3 : 2;
      assert.equal(d.status.internal.syncFailed, false);
      assert.equal(d.status.internal.replicas.length, wanted);
      assert.equal(new Set(d.status.internal.replicas).size, wanted);
      for (const r of d.status.internal.replicas) assert.match(r, /^web-[0-9a-f]{10}-[0-9a-f]{5}$/);
      const app = d.status.versions[0].containers.app;
      assert.deepEqual(app.resources, { replicas: wanted, replicasReady: wanted, cpu: 500, memory: 256 });
      assert.equal(app.ready, true);
      assert.equal(d.status.lastProcessedVersion, 1);
      assert.equal(d.status.expectedDeploymentVersion, 1);
    }

    // Suspended in one location: nothing runs there and it is not ready; the other stays ready.
    const patched = await k.call('PATCH', '/org/acme/gvc/prod/workload/web', { spec: { localOptions: [{ location: W2, suspend: true }] } });
    assert.equal(patched.status, 200);
    const after2 = await waitFor('W2 suspended', () => k.call('GET', '/org/acme/gvc/prod/workload/web/deployment').then((r) => r.body), (l) =>
      l.items.every((d: any) => d.status.lastProcessedVersion === 2 && !d.status.deploying) && l.items.some((d: any) => d.name === W2 && d.status.message === 'Suspended'),
    );
    const byName = Object.fromEntries(after2.items.map((d: any) => [d.name, d.status]));
    assert.equal(byName[W2].ready, false);
    assert.deepEqual(byName[W2].internal.replicas, []);
    assert.equal(byName[W1].ready, true);
    assert.equal(byName[W1].internal.replicas.length, 2);
    for (const d of after2.items) assert.deepEqual(mismatches(d.status, 'DeploymentStatus'), []);
  });

  test('a cron run started by a command appears in jobExecutions; a failed run says why', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', cronWorkload('nightly'))).status, 201);
    await waitFor('cron deployed', () => k.call('GET', `/org/acme/gvc/prod/workload/nightly/deployment/${W1}`).then((r) => r.body), (d) => d?.status?.ready === true);

    const run = await k.call('POST', '/org/acme/gvc/prod/workload/nightly/-command', { type: 'runCronWorkload', spec: { location: `//location/${W1}` } });
    assert.equal(run.status, 201);
    assert.deepEqual(mismatches(run.body, 'Command'), []);
    const id = run.body.id;
    const done = await waitFor('run completed', () => k.call('GET', run.headers.location as string).then((r) => r.body), (c) => c.lifecycleStage === 'completed');
    assert.deepEqual(mismatches(done.status, 'RunCronWorkloadStatus'), []);
    assert.ok(done.status.replica.includes(id), 'the replica is named after the command, as the CLI looks it up');
    const dep = await waitFor('run reported', () => k.call('GET', `/org/acme/gvc/prod/workload/nightly/deployment/${W1}`).then((r) => r.body), (d) =>
      (d.status.jobExecutions ?? []).some((e: any) => e.name === `command-${id}` && e.status === 'successful'),
    );
    assert.deepEqual(mismatches(dep.status, 'DeploymentStatus'), []);
    const exec = dep.status.jobExecutions.find((e: any) => e.name === `command-${id}`);
    assert.equal(exec.workloadVersion, 1);
    assert.equal(exec.replica, done.status.replica);
    assert.ok(Date.parse(exec.completionTime) >= Date.parse(exec.startTime));
    assert.equal(exec.conditions[0].type, 'Complete');
    assert.deepEqual(exec.containers.job.resources, { replicas: 1, replicasReady: 0, cpu: 250, memory: 1024 });
    // The other location ran nothing.
    const other = await k.call('GET', `/org/acme/gvc/prod/workload/nightly/deployment/${W2}`);
    assert.deepEqual(other.body.status.jobExecutions ?? [], []);

    // An override of a container the workload lacks: the command fails, and the run says why
    // under that container (where `cpln workload cron run --container` reads it).
    const bad = await k.call('POST', '/org/acme/gvc/prod/workload/nightly/-command', { type: 'runCronWorkload', spec: { location: W1, containerOverrides: [{ name: 'ghost', command: 'false' }] } });
    assert.equal(bad.status, 201);
    const failed = await waitFor('run failed', () => k.call('GET', bad.headers.location as string).then((r) => r.body), (c) => ['completed', 'failed'].includes(c.lifecycleStage));
    assert.equal(failed.lifecycleStage, 'failed');
    assert.match(failed.status.messages.join(' '), /ghost/);
    const dep2 = await waitFor('failed run reported', () => k.call('GET', `/org/acme/gvc/prod/workload/nightly/deployment/${W1}`).then((r) => r.body), (d) =>
      (d.status.jobExecutions ?? []).some((e: any) => e.name === `command-${bad.body.id}` && e.status === 'failed'),
    );
    const failedExec = dep2.status.jobExecutions.find((e: any) => e.name === `command-${bad.body.id}`);
    assert.match(failedExec.containers.ghost.message, /ghost/);
    assert.equal(failedExec.conditions[0].type, 'Failed');
    assert.match(failedExec.conditions[0].message, /ghost/);
    assert.deepEqual(mismatches(dep2.status, 'DeploymentStatus'), []);

    // Misuse: a schedule that never parses is refused; a run without a location is refused; a
    // run of a service workload fails with a message.
    const badSchedule = await k.call('POST', '/org/acme/gvc/prod/workload', cronWorkload('broken', { job: { schedule: '61 * * * *' } }));
    assert.equal(badSchedule.status, 400);
    assert.equal(badSchedule.body.details.errors[0].path, 'spec.job.schedule');
    assert.match(badSchedule.body.message, /'61' is not in 0-59/);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload/nightly/-command', { type: 'runCronWorkload', spec: {} })).status, 400);
    const svc = await k.call('POST', '/org/acme/gvc/prod/workload/web/-command', { type: 'runCronWorkload', spec: { location: W1 } });
    const svcDone = await waitFor('service run failed', () => k.call('GET', svc.headers.location as string).then((r) => r.body), (c) => ['completed', 'failed'].includes(c.lifecycleStage));
    assert.equal(svcDone.lifecycleStage, 'failed');
    assert.match(svcDone.status.messages.join(' '), /cron workload/);
  });

  test('a finished command cannot be cancelled; cancelling needs the permission that runs it', async () => {
    const base = '/org/acme/gvc/prod/workload/nightly/-command';
    const list = await k.call('GET', base);
    const completed = list.body.items.find((c: any) => c.lifecycleStage === 'completed');
    const refused = await k.call('DELETE', `${base}/${completed.id}`);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, 'conflict');
    assert.match(refused.body.message, /already completed/);
    assert.equal((await k.call('GET', `${base}/${completed.id}`)).body.lifecycleStage, 'completed');
    assert.equal((await k.call('DELETE', `${base}/00000000-0000-0000-0000-000000000000`)).status, 404);

    // A viewer may read commands but not cancel them.
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'watcher' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/watcher/-addKey', { description: 't' })).body.key as string;
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/watcher'] })).status, 200);
    assert.equal((await k.call('GET', `${base}/${completed.id}`, undefined, { token: key })).status, 200);
    const denied = await k.call('DELETE', `${base}/${completed.id}`, undefined, { token: key });
    assert.equal(denied.status, 403);
  });
});

forEachBackend('status of every kind (with the reconcilers)', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startLivingKeel(backend);
  });
  after(() => k.close());
  const get = async (path: string) => (await k.call('GET', path)).body;

  test('workload status: replica counts, health check, resolved images, load balancer, replica internal names', async () => {
    const created = await k.call('POST', '/org/acme/gvc/prod/workload', {
      name: 'db',
      spec: {
        type: 'stateful',
        containers: [{ name: 'pg', image: 'postgres:16', ports: [{ protocol: 'tcp', number: 5432 }] }],
        defaultOptions: { autoscaling: { minScale: 2, maxScale: 2 } },
        loadBalancer: { direct: { enabled: true, ports: [{ externalPort: 5432, protocol: 'TCP', scheme: 'tcp' }] } },
      },
    });
    assert.equal(created.status, 201);
    const wl = await waitFor('workload ready', () => get('/org/acme/gvc/prod/workload/db'), (w) => w.status?.ready === true && w.status.currentReplicaCount === 4);
    assert.deepEqual(mismatches(wl.status, 'WorkloadStatus'), []);
    assert.deepEqual(wl.status.replicaInternalNames, ['db-0.db.prod.cpln.local', 'db-1.db.prod.cpln.local']);
    assert.equal(wl.status.healthCheck.active, true);
    assert.equal(wl.status.healthCheck.success, true);
    assert.equal(wl.status.resolvedImages.resolvedForVersion, 1);
    assert.match(wl.status.resolvedImages.images[0].digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(wl.status.resolvedImages.images[0].manifests[0].image, 'postgres:16');
    assert.deepEqual(wl.status.loadBalancer.map((l: any) => l.origin).sort(), [W1, W2].sort());
    assert.match(wl.status.loadBalancer[0].url, /^tcp:\/\/db-.*:5432$/);
    assert.equal(wl.version, 1, 'status changes no version');
    assert.equal(wl.status.suspendedStatus, 'notSuspended');

    // Scaled down and given a new image: counts follow, images are resolved for the new version.
    assert.equal((await k.call('PATCH', '/org/acme/gvc/prod/workload/db', { spec: { containers: [{ name: 'pg', image: 'postgres:17' }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } })).status, 200);
    const rolled = await waitFor('rolled', () => get('/org/acme/gvc/prod/workload/db'), (w) => w.status.resolvedImages.resolvedForVersion === 2 && w.status.currentReplicaCount === 2 && w.status.readyLatest);
    assert.equal(rolled.status.resolvedImages.images[0].manifests[0].image, 'postgres:17');
    assert.deepEqual(rolled.status.replicaInternalNames, ['db-0.db.prod.cpln.local']);

    // Suspended in one location, then in all: suspendedStatus follows, and replicas stop.
    assert.equal((await k.call('PATCH', '/org/acme/gvc/prod/workload/db', { spec: { localOptions: [{ location: W1, suspend: true }] } })).status, 200);
    const partly = await waitFor('partly suspended', () => get('/org/acme/gvc/prod/workload/db'), (w) => w.status.suspendedStatus === 'partiallySuspended');
    assert.equal(partly.status.currentReplicaCount, 1);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/prod/workload/db', { spec: { defaultOptions: { suspend: true } } })).status, 200);
    const stopped = await waitFor('suspended', () => get('/org/acme/gvc/prod/workload/db'), (w) => w.status.suspendedStatus === 'suspended');
    assert.equal(stopped.status.currentReplicaCount, 0);
    assert.deepEqual(mismatches(stopped.status, 'WorkloadStatus'), []);

    // A cron workload has no health check and, between runs, no replicas.
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', cronWorkload('tick'))).status, 201);
    const cron = await waitFor('cron ready', () => get('/org/acme/gvc/prod/workload/tick'), (w) => w.status?.ready === true);
    assert.deepEqual(cron.status.healthCheck, { active: false, lastChecked: cron.status.healthCheck.lastChecked });
    assert.equal(cron.status.currentReplicaCount, 0);
    assert.deepEqual(cron.status.loadBalancer, []);
    assert.deepEqual(mismatches(cron.status, 'WorkloadStatus'), []);
  });

  test('org, identity, cloud account, IP set, volume set, agent, location, domain and SpiceDB status', async () => {
    const org = await get('/org/acme');
    assert.deepEqual(mismatches(org.status, 'OrgStatus'), []);
    assert.equal(org.status.active, true);
    assert.equal(org.status.endpointPrefix, 'acme');
    // The billing account that owns every org of this Keel, readable where the link says.
    assert.equal(org.status.accountLink, `/account/${accountIdOf('acme')}`);
    assert.equal((await get(org.status.accountLink)).id, accountIdOf('acme'));
    assert.equal((await k.call('PATCH', '/org/acme', { description: 'renamed', status: { accountLink: '/account/mine' } })).status, 200);
    assert.equal((await get('/org/acme')).status.accountLink, org.status.accountLink, 'kept across an update, and not the caller\'s to set');
    const made = await k.call('POST', '/org', { name: 'second' });
    assert.equal(made.status, 201);
    assert.equal(made.body.status.accountLink, org.status.accountLink);
    assert.deepEqual(mismatches(made.body.status, 'OrgStatus'), []);

    assert.equal((await k.call('POST', '/org/acme/cloudaccount', { name: 'aws1', provider: 'aws', data: { roleArn: 'arn:aws:iam::123456789012:role/cpln' } })).status, 201);
    const account = await get('/org/acme/cloudaccount/aws1');
    assert.deepEqual(mismatches(account.status, 'CloudAccountStatus'), []);
    assert.equal(account.status.usable, true);

    assert.equal((await k.call('POST', '/org/acme/gvc/prod/identity', { name: 'app', aws: { cloudAccountLink: '//cloudaccount/aws1', policyRefs: ['aws::AmazonS3ReadOnlyAccess'] } })).status, 201);
    const identity = await get('/org/acme/gvc/prod/identity/app');
    assert.deepEqual(mismatches(identity.status, 'IdentityStatus'), []);
    assert.equal(identity.status.objectName, 'acme-prod-app');
    assert.deepEqual(identity.status.aws, { usable: true });
    assert.equal(identity.status.gcp, undefined, 'only the clouds it has access to');
    // The same status in lists and queries.
    const listed = (await get('/org/acme/gvc/prod/identity')).items.find((i: any) => i.name === 'app');
    assert.deepEqual(listed.status, identity.status);

    const ipset = await k.call('POST', '/org/acme/ipset', { name: 'ips', spec: { link: '//gvc/prod/workload/db', locations: [{ name: `//location/${W1}`, retentionPolicy: 'keep' }] } });
    assert.equal(ipset.status, 201);
    assert.deepEqual(mismatches(ipset.body.status, 'IpSetStatus'), []);
    const [address] = ipset.body.status.ipAddresses;
    assert.equal(address.name, W1);
    assert.equal(address.state, 'bound');
    assert.match(address.ip, /^198\.1[89]\.\d+\.\d+$/);
    assert.deepEqual((await get('/org/acme/ipset/ips')).status, ipset.body.status, 'the same address on every read');
    const unbound = await k.call('PATCH', '/org/acme/ipset/ips', { spec: { link: null } });
    assert.equal(unbound.body.status.ipAddresses[0].state, 'unbound');
    assert.equal(unbound.body.status.ipAddresses[0].ip, address.ip);

    assert.equal((await k.call('POST', '/org/acme/gvc/prod/volumeset', { name: 'data', spec: { initialCapacity: 10 } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', {
      name: 'pg',
      spec: { type: 'stateful', containers: [{ name: 'pg', image: 'postgres:16', volumes: [{ uri: 'cpln://volumeset/data', path: '/data' }] }] },
    })).status, 201);
    const vs = await waitFor('volume set bound', () => get('/org/acme/gvc/prod/volumeset/data'), (v) => typeof v.status?.bindingId === 'string');
    assert.deepEqual(mismatches(vs.status, 'VolumeSetStatus'), []);
    assert.equal(vs.status.usedByWorkload, '/org/acme/gvc/prod/workload/pg');

    // The create response carries the bootstrap configuration (Terraform keeps it from there).
    const agent = await k.call('POST', '/org/acme/agent', { name: 'edge' });
    assert.equal(agent.status, 201);
    assert.deepEqual(mismatches(agent.body.status, 'AgentStatus'), []);
    assert.equal(agent.body.status.protocolVersion, 'v1');
    assert.equal(agent.body.status.bootstrapConfig.agentLink, '/org/acme/agent/edge');
    assert.equal(agent.body.status.bootstrapConfig.agentId, agent.body.id);
    assert.deepEqual((await get('/org/acme/agent/edge')).status, agent.body.status);

    const location = await get(`/org/acme/location/${W1}`);
    assert.deepEqual(mismatches(location.status, 'LocationStatus'), []);

    assert.equal((await k.call('POST', '/org/acme/domain', { name: 'app.example.com', spec: { dnsMode: 'cname', gvcLink: '//gvc/prod' } })).status, 201);
    const domain = await waitFor('domain ready', () => get('/org/acme/domain/app.example.com'), (d) => d.status?.status === 'ready');
    assert.deepEqual(mismatches(domain.status, 'DomainStatus'), []);

    const spicedb = await k.call('POST', '/org/acme/spicedbcluster', { name: 'authz', spec: { version: '1.35.3', locations: [`//location/${W1}`] } });
    assert.equal(spicedb.status, 201);
    assert.match(spicedb.body.alias, /^[a-z][a-z0-9]{12}$/);
    assert.deepEqual(mismatches(spicedb.body.status, 'SpicedbClusterStatus'), []);
    assert.ok(spicedb.body.status.externalEndpoint.startsWith(spicedb.body.alias));
  });

  test('mk8s: an alias kept across changes, status, -cacerts, -join and -cloudinit', async () => {
    const created = await k.call('POST', '/org/acme/mk8s', {
      name: 'k1',
      alias: 'chosen-by-client',
      spec: { version: '1.28.4', provider: { generic: { location: `/org/acme/location/${W1}`, nodePools: [{ name: 'workers' }] } }, addOns: { dashboard: {}, logs: {}, metrics: {}, awsWorkloadIdentity: {} } },
    });
    assert.equal(created.status, 201);
    const alias = created.body.alias;
    assert.match(alias, /^[a-z][a-z0-9]{12}$/, 'the server sets the alias');
    const ready = await waitFor('mk8s ready', () => get('/org/acme/mk8s/k1'), (c) => typeof c.status?.serverUrl === 'string');
    assert.deepEqual(mismatches(ready.status, 'Mk8sStatus'), []);
    assert.deepEqual(Object.keys(ready.status.addOns).sort(), ['awsWorkloadIdentity', 'dashboard', 'logs', 'metrics']);
    assert.match(ready.status.addOns.logs.lokiAddress, /^https:\/\//);
    assert.ok(ready.status.serverUrl.includes(alias));
    const replaced = await k.call('PUT', '/org/acme/mk8s/k1', { name: 'k1', alias: 'other', spec: { version: '1.29.0', provider: { generic: { location: `/org/acme/location/${W1}`, nodePools: [{ name: 'workers' }] } } } });
    assert.equal(replaced.status, 200);
    assert.equal(replaced.body.alias, alias);
    assert.equal((await k.call('PATCH', '/org/acme/mk8s/k1', { description: 'changed' })).body.alias, alias);

    const ca = await k.call('GET', '/org/acme/mk8s/k1/-cacerts');
    assert.equal(ca.status, 200);
    const cert = new X509Certificate(ca.body.cacerts);
    assert.equal(cert.ca, true);
    assert.ok(cert.verify(cert.publicKey), 'self-signed');
    assert.equal(cert.subject, 'CN=acme/k1');
    assert.equal((await k.call('GET', '/org/acme/mk8s/k1/-cacerts')).body.cacerts, ca.body.cacerts, 'the same CA on every read');

    const join = await k.call('POST', '/org/acme/mk8s/k1/-join', { nodepool: 'workers' });
    assert.equal(join.status, 200);
    assert.match(join.body.script, /^#!\/bin\/sh\n/);
    assert.match(join.body.script, /node pool 'workers'/);
    assert.match(join.body.script, /exit 1/);
    const cloudinit = await k.call('POST', '/org/acme/mk8s/k1/-cloudinit', {});
    assert.match(cloudinit.body.script, /^#cloud-config\n/);

    // Misuse: a pool the cluster lacks, options that are not a map of strings, no such cluster,
    // a viewer joining nodes, a caller with no access reading the CA.
    const pool = await k.call('POST', '/org/acme/mk8s/k1/-join', { nodepool: 'ghost' });
    assert.equal(pool.status, 400);
    assert.match(pool.body.message, /no node pool 'ghost'/);
    assert.equal((await k.call('POST', '/org/acme/mk8s/k1/-join', ['x'])).status, 400);
    assert.equal((await k.call('POST', '/org/acme/mk8s/k1/-join', { nodepool: { deep: true } })).status, 400);
    assert.equal((await k.call('GET', '/org/acme/mk8s/nope/-cacerts')).status, 404);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'outsider' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/outsider/-addKey', { description: 't' })).body.key as string;
    assert.equal((await k.call('GET', '/org/acme/mk8s/k1/-cacerts', undefined, { token: key })).status, 403);
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/outsider'] })).status, 200);
    assert.equal((await k.call('GET', '/org/acme/mk8s/k1/-cacerts', undefined, { token: key })).status, 200);
    assert.equal((await k.call('POST', '/org/acme/mk8s/k1/-join', {}, { token: key })).status, 403);
  });
});

forEachBackend('cron runs at a chosen clock (the reconcilers called directly)', (backend) => {
  const CLOCK_STEP = 1_000;
  const T0 = Date.parse('2026-03-01T02:58:30.000Z');
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend, 'acme', { reconcile: false });
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'batch', spec: { staticPlacement: { locationLinks: [`//location/${W1}`] } } })).status, 201);
  });
  after(() => k.close());

  const workloadKey = (name: string): ItemKey => ({ org: 'acme', kind: 'workload', gvc: 'batch', name });
  const pass = (key: ItemKey, now: number) =>
    k.store.transaction((tx) => (key.kind === 'workload' ? reconcileWorkload : reconcileCommand)({ store: k.store, tx, now, stepMs: CLOCK_STEP, audit: true, appended: [] }, key));
  const deployment = async (name: string) => (await k.call('GET', `/org/acme/gvc/batch/workload/${name}/deployment/${W1}`)).body;

  test('the schedule starts runs on the clock, each active for a step, keeping historyLimit finished runs', async () => {
    // Every minute from 03:00 to 03:03 (a range with a step), in UTC.
    assert.equal((await k.call('POST', '/org/acme/gvc/batch/workload', cronWorkload('ticker', { job: { schedule: '0-3/1 3 * * *', historyLimit: 2 } }))).status, 201);
    const key = workloadKey('ticker');
    await pass(key, T0);
    const first = await pass(key, T0 + CLOCK_STEP);
    assert.equal((await deployment('ticker')).status.ready, true);
    assert.deepEqual((await deployment('ticker')).status.jobExecutions, []);
    // It asks to be woken when the schedule next fires (03:00:00, 89 s on).
    assert.equal(first.after, Date.parse('2026-03-01T03:00:00.000Z') - (T0 + CLOCK_STEP));

    const at0300 = Date.parse('2026-03-01T03:00:00.000Z');
    await pass(key, at0300 + 10);
    let d = await deployment('ticker');
    assert.deepEqual(mismatches(d.status, 'DeploymentStatus'), []);
    assert.deepEqual(d.status.jobExecutions.map((e: any) => [e.name, e.status]), [[`ticker-${at0300 / 60_000}`, 'active']]);
    assert.deepEqual(d.status.internal.replicas, [d.status.jobExecutions[0].replica]);
    assert.equal(d.status.versions[0].containers.job.resources.replicas, 1);

    await pass(key, at0300 + 10 + CLOCK_STEP);
    d = await deployment('ticker');
    assert.equal(d.status.jobExecutions[0].status, 'successful');
    assert.equal(d.status.jobExecutions[0].completionTime, new Date(at0300 + 10 + CLOCK_STEP).toISOString());
    assert.deepEqual(d.status.internal.replicas, []);

    // A pass that comes late (after 03:01, 03:02 and 03:03 fired) starts the runs it missed, at
    // most historyLimit of them; finished runs beyond historyLimit are dropped.
    const late = Date.parse('2026-03-01T03:10:00.000Z');
    await pass(key, late);
    await pass(key, late + CLOCK_STEP);
    d = await deployment('ticker');
    assert.deepEqual(
      d.status.jobExecutions.map((e: any) => [e.name, e.status]),
      [
        [`ticker-${at0300 / 60_000 + 2}`, 'successful'],
        [`ticker-${at0300 / 60_000 + 3}`, 'successful'],
      ],
    );
    assert.deepEqual(mismatches(d.status, 'DeploymentStatus'), []);

    // Suspended: the schedule starts nothing, and the runs it missed are not made up later.
    assert.equal((await k.call('PATCH', '/org/acme/gvc/batch/workload/ticker', { spec: { defaultOptions: { suspend: true } } })).status, 200);
    const nextDay = Date.parse('2026-03-02T03:01:30.000Z');
    await pass(key, nextDay);
    await pass(key, nextDay + CLOCK_STEP);
    d = await deployment('ticker');
    assert.equal(d.status.message, 'Suspended');
    assert.equal(d.status.jobExecutions.length, 2);
    assert.ok(d.status.jobExecutions.every((e: any) => e.startTime < '2026-03-02'));
    assert.equal((await k.call('PATCH', '/org/acme/gvc/batch/workload/ticker', { spec: { defaultOptions: { suspend: false } } })).status, 200);
    await pass(key, nextDay + 2 * CLOCK_STEP);
    await pass(key, nextDay + 3 * CLOCK_STEP);
    d = await deployment('ticker');
    assert.ok(d.status.jobExecutions.every((e: any) => e.startTime < '2026-03-02'), 'no run made up for 03:00 and 03:01 of the suspended day');
  });

  test('concurrencyPolicy Forbid skips a run while one is active', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc/batch/workload', cronWorkload('strict', { job: { schedule: '* * * * *', concurrencyPolicy: 'Forbid' } }))).status, 201);
    const key = workloadKey('strict');
    await pass(key, T0);
    await pass(key, T0 + CLOCK_STEP);
    const run = await k.call('POST', '/org/acme/gvc/batch/workload/strict/-command', { type: 'runCronWorkload', spec: { location: W1 } });
    // A long step: the scheduled run of 02:59 stays active when 03:00 fires.
    const long = 120_000;
    const at0259 = Date.parse('2026-03-01T02:59:00.000Z');
    await k.store.transaction((tx) => reconcileWorkload({ store: k.store, tx, now: at0259 + 1, stepMs: long, audit: true, appended: [] }, key));
    await k.store.transaction((tx) => reconcileWorkload({ store: k.store, tx, now: at0259 + 60_001, stepMs: long, audit: true, appended: [] }, key));
    const d = await deployment('strict');
    assert.deepEqual(d.status.jobExecutions.map((e: any) => [e.name, e.status]), [[`strict-${at0259 / 60_000}`, 'active']]);
    assert.equal(run.status, 201);
  });

  test('a pending command cancelled: final, never started, cancelling again changes nothing', async () => {
    const run = await k.call('POST', '/org/acme/gvc/batch/workload/strict/-command', { type: 'runCronWorkload', spec: { location: W1 } });
    assert.equal(run.status, 201);
    const cancel = await k.call('DELETE', run.headers.location as string);
    assert.equal(cancel.status, 202);
    assert.equal(cancel.raw, '');
    const got = (await k.call('GET', run.headers.location as string)).body;
    assert.equal(got.lifecycleStage, 'cancelled');
    assert.equal(got.version, 2);
    assert.deepEqual(got.status.messages, ['cancelled by admin']);
    assert.deepEqual(mismatches(got, 'Command'), []);
    assert.equal((await k.call('DELETE', run.headers.location as string)).status, 202);
    assert.equal((await k.call('GET', run.headers.location as string)).body.version, 2);
    const ckey = commandKey('acme', 'batch', 'workload', 'strict', run.body.id);
    await pass(ckey, Date.parse(run.body.created) + 10 * CLOCK_STEP);
    assert.equal((await k.call('GET', run.headers.location as string)).body.lifecycleStage, 'cancelled');
    assert.ok(!(await deployment('strict')).status.jobExecutions.some((e: any) => e.name === `command-${run.body.id}`));
    const events = await k.store.audit({ org: 'acme', resourceType: 'command', limit: 1000 });
    assert.deepEqual(events.filter((e) => JSON.parse(e.body).resource.id === run.body.id).map((e) => e.actionType), ['create', 'edit']);
  });

  test('cancelling a running cron run removes the run from the deployment', async () => {
    const key = workloadKey('strict');
    const run = await k.call('POST', '/org/acme/gvc/batch/workload/strict/-command', { type: 'runCronWorkload', spec: { location: W1 } });
    const ckey = commandKey('acme', 'batch', 'workload', 'strict', run.body.id);
    const started = Date.parse(run.body.created) + CLOCK_STEP;
    await pass(ckey, started);
    assert.equal((await k.call('GET', run.headers.location as string)).body.lifecycleStage, 'running');
    let d = await deployment('strict');
    assert.equal(d.status.jobExecutions.find((e: any) => e.name === `command-${run.body.id}`).status, 'active');

    assert.equal((await k.call('DELETE', run.headers.location as string)).status, 202);
    d = await deployment('strict');
    const exec = d.status.jobExecutions.find((e: any) => e.name === `command-${run.body.id}`);
    assert.equal(exec.status, 'removed');
    assert.match(exec.containers.job.message, /Cancelled by admin/);
    assert.deepEqual(mismatches(d.status, 'DeploymentStatus'), []);
    // The reconciler leaves a cancelled command alone.
    await pass(ckey, started + 5 * CLOCK_STEP);
    await pass(key, started + 5 * CLOCK_STEP);
    const got = (await k.call('GET', run.headers.location as string)).body;
    assert.equal(got.lifecycleStage, 'cancelled');
  });
});
