// A suspended workload's endpoint says that the workload is suspended and how to resume it (503),
// rather than that nothing is served there; resumed with the CLI, it serves again.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

describe('a suspended workload under runc', { skip: runtimeMissing() }, () => {
  let rk: RuntimeKeel;
  let work: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-suspend-'));
    rk = await startRuntimeKeel();
  });
  after(async () => {
    await rk?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('its endpoint answers 503 saying it is suspended and how to resume it; started again, it serves', async () => {
    const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
    const created = await rk.keel.call('POST', '/org/acme/gvc/web/workload', { name: 'hello', spec: { type: 'standard', containers: [{ name: 'main', image, ports: [{ number: 8080, protocol: 'http' }] }] } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const host = await waitFor('the endpoint', async () => (await rk.keel.call('GET', '/org/acme/gvc/web/workload/hello')).body?.status?.endpoint as string | undefined, (e) => !!e, 30_000);
    const endpointHost = new URL(host!).hostname;
    await waitFor('the endpoint to serve', () => rk.get('/', endpointHost), (r) => r.status === 200, 60_000);

    await rk.run(['workload', 'stop', 'hello']);
    const refused = await waitFor('the endpoint to say the workload is suspended', () => rk.get('/', endpointHost), (r) => r.status !== 200, 60_000);
    assert.equal(refused.status, 503);
    const body = JSON.parse(refused.body);
    assert.equal(body.status, 503);
    assert.equal(body.message, "workload 'hello' of GVC 'web' is suspended: no replica serves it. Resume it with 'cpln workload start hello --gvc web' (spec.defaultOptions.suspend: false)");
    const byPath = await rk.get('/-workload/acme/web/hello/');
    assert.equal(byPath.status, 503, 'the path form says the same');
    assert.match(byPath.body, /is suspended/);
    const unknown = await rk.get('/', `nothing-${endpointHost.split('-').at(-1)}`);
    assert.equal(unknown.status, 404, 'a host no workload has is still not found');
    assert.doesNotMatch(unknown.body, /suspended/);

    await rk.run(['workload', 'start', 'hello']);
    await waitFor('the endpoint to serve again', () => rk.get('/', endpointHost), (r) => r.status === 200 && r.body === 'hello\n', 60_000);

    // Deleted while suspended, it is gone from the ingress too.
    await rk.run(['workload', 'stop', 'hello']);
    await waitFor('suspended again', () => rk.get('/', endpointHost), (r) => r.status === 503, 60_000);
    await rk.run(['workload', 'delete', 'hello']);
    await waitFor('the endpoint to be unknown', () => rk.get('/', endpointHost), (r) => r.status === 404, 60_000);
    assert.equal((await rk.deployment('hello'))?.status, 404);
  });
});
