// A snapshot restore under the runc runtime: the workloads and domains the restored state does not
// hold stop running and stop being served, and its volume sets' data goes, though no delete of
// theirs ever happened.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startKeel, type TestKeel } from '../support/keel.js';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { createGvc, LOCATION, runcSettings } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

describe('a snapshot restore with replicas running (KEEL_RUNTIME=runc)', { skip }, () => {
  let keel: TestKeel;
  let work: string;
  let ingressPort: number;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-restore-'));
    keel = await startKeel('sqlite', 'acme', { ...runcSettings(), allowSnapshots: true });
    ingressPort = (keel.app.core.runtime as unknown as { ingressPort: number }).ingressPort;
    await createGvc(keel);
  });
  after(async () => {
    await keel?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const page = (host: string) =>
    new Promise<number>((resolve, reject) => {
      request({ host: '127.0.0.1', port: ingressPort, path: '/', headers: { host } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
        .on('error', reject)
        .end();
    });

  test('what the snapshot did not hold stops: no container, no route through the domain', async () => {
    assert.equal((await keel.call('POST', '/-admin/snapshots', { name: 'before-web' })).status, 201);
    const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
    const created = await keel.call('POST', '/org/acme/gvc/web/workload', {
      name: 'shop',
      spec: { type: 'standard', containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } }] },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const domain = await keel.call('POST', '/org/acme/domain', { name: 'shop.example.com', spec: { ports: [{ number: 443, routes: [{ prefix: '/', workloadLink: '//gvc/web/workload/shop' }] }] } });
    assert.equal(domain.status, 201, JSON.stringify(domain.body));
    await waitFor('shop to be ready', async () => (await keel.call('GET', `/org/acme/gvc/web/workload/shop/deployment/${LOCATION}`)).body?.status, (s) => s?.ready === true, 60_000);
    await waitFor('the domain to serve shop', () => page('shop.example.com'), (status) => status === 200, 30_000);
    assert.equal(leftovers(keel.config.dataDir).containers.length, 1);

    const restored = await keel.call('POST', '/-admin/snapshots/before-web/-restore', {});
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
    assert.equal((await keel.call('GET', '/org/acme/gvc/web/workload/shop')).status, 404);
    await waitFor('nothing of shop to be left on the host', async () => leftovers(keel.config.dataDir), (l) => JSON.stringify(l) === JSON.stringify(NOTHING_LEFT), 30_000);
    await waitFor('the domain to be served no more', () => page('shop.example.com'), (status) => status === 404, 30_000);
  });

  test("a volume set the snapshot did not hold loses its data, so a new one of that name starts empty", async () => {
    assert.equal((await keel.call('POST', '/-admin/snapshots', { name: 'before-data' })).status, 201);
    const image = busyboxImage(work, 'writer', ['/bin/sh', '-c', 'echo written > /data/f; exec sleep 1000000']);
    assert.equal((await keel.call('POST', '/org/acme/gvc/web/volumeset', { name: 'cache', spec: { initialCapacity: 10, fileSystemType: 'ext4' } })).status, 201);
    const created = await keel.call('POST', '/org/acme/gvc/web/workload', {
      name: 'writer',
      spec: { type: 'stateful', containers: [{ name: 'main', image, volumes: [{ uri: 'cpln://volumeset/cache', path: '/data' }] }] },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const data = join(keel.config.dataDir, 'runtime', 'volumes', 'acme', 'web', 'cache');
    await waitFor('the replica to write its volume', async () => existsSync(join(data, LOCATION, '0', 'f')), (written) => written, 60_000);

    assert.equal((await keel.call('POST', '/-admin/snapshots/before-data/-restore', {})).status, 200);
    assert.equal((await keel.call('GET', '/org/acme/gvc/web/volumeset/cache')).status, 404);
    await waitFor("the volume set's data to be gone from the host", async () => existsSync(data), (left) => !left, 30_000);
    await waitFor('nothing of writer to be left on the host', async () => leftovers(keel.config.dataDir), (l) => JSON.stringify(l) === JSON.stringify(NOTHING_LEFT), 30_000);
  });
});
