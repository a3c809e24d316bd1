// Images of an org's own registry under the runc runtime: replicas of one new image that start
// together share one copy of it out of Keel's blob storage and one unpack, and all become ready;
// an org cannot use another org's copy of a manifest its own registry does not hold.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { KEEL_ACTOR } from '../../src/audit/events.js';
import { accountLinkOf, createOrg } from '../../src/resources/orgs.js';
import { startKeel, type TestKeel } from '../support/keel.js';
import { runTool, toolMissing } from '../support/registry-tools.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { createGvc, LOCATION, runcSettings } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing() || toolMissing('skopeo');

describe("several replicas of one image of the org's registry", { skip }, () => {
  let keel: TestKeel;
  let work: string;
  let digest: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-images-'));
    // A layer of some megabytes, so the copy out of blob storage takes long enough to overlap.
    const image = busyboxImage(work, 'big', ['/bin/sh', '-c', 'echo up; exec sleep 3600'], { 'data/filler': randomBytes(6 * 2 ** 20).toString('base64') });
    keel = await startKeel('sqlite', 'acme', runcSettings());
    await createGvc(keel);
    const host = new URL(await keel.listen()).host;
    const layout = image.slice('oci:'.length, image.lastIndexOf(':'));
    const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `anyone:${keel.token}`, `oci:${layout}:big`, `docker://${host}/big:v1`]);
    assert.equal(pushed.code, 0, pushed.stderr);
    digest = (await keel.call('GET', '/org/acme/image/big:v1')).body.digest;
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
  });
  after(async () => {
    await keel?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const apply = async (name: string, image: string, replicas: number) => {
    const created = await keel.call('POST', '/org/acme/gvc/web/workload', {
      name,
      spec: { type: 'standard', containers: [{ name: 'main', image, ports: [{ number: 8080, protocol: 'http' }] }], defaultOptions: { autoscaling: { minScale: replicas, maxScale: replicas } } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  };
  const deployment = async (name: string) => (await keel.call('GET', `/org/acme/gvc/web/workload/${name}/deployment/${LOCATION}`)).body?.status;
  const logs = async (name: string) => {
    const res = await keel.call('GET', `/logs/org/acme/loki/api/v1/query_range?query=${encodeURIComponent(`{workload="${name}"}`)}&limit=1000`);
    return (res.body?.data?.result ?? []).flatMap((s: { values: Array<[string, string]> }) => s.values.map(([, line]) => line)) as string[];
  };

  test('start together, all become ready on their first try, from one copy and one unpack', async () => {
    await apply('many', '//image/big:v1', 3);
    const status = await waitFor('the deployment of many to be ready with 3 replicas', () => deployment('many'), (s) => s?.ready === true && s.versions?.[0]?.containers?.main?.resources?.replicasReady === 3, 90_000);
    assert.equal(status.message, 'Ready');
    const lines = await waitFor("every replica of many to log 'up'", () => logs('many'), (l) => l.filter((line) => line === 'up').length === 3, 30_000);
    assert.deepEqual(lines.filter((line) => /Failed|Back-off/.test(line)), []);
    const runtime = join(keel.config.dataDir, 'runtime');
    assert.deepEqual(readdirSync(join(runtime, 'layouts')), [digest.replace(':', '-')]);
    assert.equal(readdirSync(join(runtime, 'unpacked')).length, 1);
  });

  test("an org's copy of a manifest is no way in for an org whose registry does not hold it", async () => {
    await apply('mine', `//image/big@${digest}`, 2);
    const foreign = `/org/other/image/big@${digest}`;
    const refused = await keel.call('POST', '/org/acme/gvc/web/workload', { name: 'theirs', spec: { type: 'standard', containers: [{ name: 'main', image: foreign }] } });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.equal(refused.body.details.errors[0].path, 'spec.containers[0].image');
    // One stored before writes refused such images still never runs: the runtime resolves no other org's image.
    await apply('theirs', '//image/never-pushed:v1', 1);
    await keel.store.transaction(async (tx) => {
      const item = (await tx.get({ org: 'acme', kind: 'workload', gvc: 'web', name: 'theirs' }, 'update'))!;
      const data = structuredClone(item.data) as { spec: { containers: Array<{ image: string }> } };
      data.spec.containers[0].image = foreign;
      await tx.update({ ...item, version: item.version + 1, data }, item.version);
    });
    const theirs = await waitFor('the deployment of theirs to fail its pull', () => deployment('theirs'), (s) => String(s?.message).startsWith(`Failed to pull image "${foreign}"`), 60_000);
    assert.match(theirs.message, /^Failed to pull image "\/org\/other\/image\/big@sha256:[0-9a-f]{64}": .*not found/);
    const mine = await waitFor('the deployment of mine to be ready', () => deployment('mine'), (s) => s?.ready === true && s.message === 'Ready', 60_000);
    assert.equal(mine.message, 'Ready');
    assert.equal((await deployment('theirs')).ready, false);
  });

  test("a host's oci: layouts are the first org's: another org's workload naming one never runs it, and says why", async () => {
    const layout = busyboxImage(work, 'host', ['/bin/sh', '-c', 'echo host-layout; exec sleep 3600']);
    const { token } = await createOrg(keel.store, { name: 'tenant', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(keel.org), adminServiceAccount: 'admin' });
    const as = { token: token! };
    assert.equal((await keel.call('POST', '/org/tenant/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } }, as)).status, 201);
    const created = await keel.call('POST', '/org/tenant/gvc/web/workload', { name: 'borrow', spec: { type: 'standard', containers: [{ name: 'main', image: layout }] } }, as);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const status = async () => (await keel.call('GET', `/org/tenant/gvc/web/workload/borrow/deployment/${LOCATION}`, undefined, as)).body?.status;
    const refused = await waitFor('the tenant deployment to fail its pull', status, (s) => String(s?.message).includes('Failed to pull image'), 60_000);
    assert.match(refused.message, /oci: images \(layouts on the Keel host\) are only for workloads of the first org, acme/);
    assert.equal(refused.ready, false);
    // The same layout in the first org runs.
    await apply('hosted', layout, 1);
    await waitFor('the first org to run the layout', () => deployment('hosted'), (s) => s?.ready === true, 60_000);
    assert.ok(!(await logs('borrow')).includes('host-layout'));
  });
});
