// The address Keel names as its own (/discovery, a deployment's status.remote in a GET, a list and a
// watch, the Audit API's CORS), on both backends: from KEEL_PUBLIC_URL when set; otherwise from the
// Host header only when it names a loopback address or the address Keel listens on. As an attacker:
// a rebound or forged Host (`evil.example`) never comes back as Keel's address, and an origin on
// such a name gets no CORS grant from the Audit API.
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../../src/config.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { freePort } from '../support/ports.js';
import { waitFor } from '../support/wait.js';

/** A request over a real socket with the Host header of the caller's choosing (fetch sets its own). */
function call(port: number, path: string, headers: Record<string, string>, method = 'GET'): Promise<{ status: number; headers: Record<string, unknown>; body: any; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        // A watch: the first deployment event with a remote is enough.
        if (res.headers['content-type']?.startsWith('text/event-stream') && /"remote":"[^"]+"/.test(text)) res.destroy();
      });
      const done = () => {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        resolve({ status: res.statusCode!, headers: res.headers, body, text });
      };
      res.on('end', done);
      res.on('close', done);
    });
    req.on('error', reject);
    req.end();
  });
}

const WORKLOAD = { name: 'api', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.27', ports: [{ protocol: 'http', number: 80 }] }] } };
const HOSTILE_HOSTS = ['evil.example', 'evil.example:9000', 'localhost.evil.example', '127.0.0.1.evil.example', 'user@localhost', 'localhost/evil', 'localhost:9000@evil.example', 'localhost%2F@evil.example'];

forEachBackend('the public address: without KEEL_PUBLIC_URL', (backend) => {
  let k: TestKeel;
  let core: number;
  let audit: number;
  before(async () => {
    k = await startKeel(backend, 'acme', { auditPort: await freePort(), reconcile: true, reconcileStepMs: 40 });
    core = Number(new URL(await k.listen()).port);
    await k.app.audit.listen({ host: '127.0.0.1', port: k.config.auditPort });
    audit = (k.app.audit.server.address() as AddressInfo).port;
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/web/workload', WORKLOAD)).status, 201);
  });
  after(() => k.close());

  test('a loopback Host is used as the client sent it', async () => {
    for (const host of ['localhost:9000', '127.0.0.1:9000', '[::1]:9000', `127.0.0.1:${core}`, 'localhost:80', 'localhost']) {
      const res = await call(core, '/discovery', { host });
      assert.equal(res.body.endpoints.api, `http://${host}`, host);
      assert.equal(res.body.endpoints.audit, `http://${host.replace(/:\d+$/, '')}:${k.config.auditPort}`, host);
    }
  });

  test('as an attacker: a forged or rebound Host never appears in /discovery, status.remote or a watch', async () => {
    const listen = `http://127.0.0.1:${core}`;
    const auth = { authorization: `Bearer ${k.token}` };
    const deployment = '/org/acme/gvc/web/workload/api/deployment/aws-us-east-2';
    await waitFor('the deployment', () => call(core, deployment, { ...auth, host: 'localhost' }), (res) => res.status === 200 && Boolean(res.body.status?.remote));
    for (const host of HOSTILE_HOSTS) {
      const discovery = await call(core, '/discovery', { host });
      assert.equal(discovery.status, 200, host);
      assert.doesNotMatch(discovery.text, /evil/, host);
      assert.equal(discovery.body.endpoints.api, listen, host);
      assert.equal(discovery.body.endpoints.registry, listen, host);
      assert.equal(discovery.body.endpoints.audit, `http://127.0.0.1:${k.config.auditPort}`, host);
      const got = await call(core, deployment, { ...auth, host });
      assert.equal(got.body.status.remote, `${listen}/-remote/aws-us-east-2`, host);
      const listed = await call(core, '/org/acme/gvc/web/workload/api/deployment', { ...auth, host });
      assert.equal(listed.body.items[0].status.remote, `${listen}/-remote/aws-us-east-2`, host);
    }
    const watched = await call(core, '/org/acme/-watch?kind=deployment&since=0', { ...auth, host: 'evil.example', accept: 'text/event-stream' });
    assert.match(watched.text, /"remote":"http:\/\/127\.0\.0\.1:\d+\/-remote\//);
    assert.doesNotMatch(watched.text, /evil/);
  });

  test("as an attacker: the Audit API grants CORS to the Core API's loopback origin only, never to a rebound name", async () => {
    const auth = { authorization: `Bearer ${k.token}` };
    for (const origin of [`http://127.0.0.1:${core}`, `http://localhost:${core}`]) {
      const res = await call(audit, '/audit/org/acme?limit=1', { ...auth, origin, host: `127.0.0.1:${audit}` });
      assert.equal(res.headers['access-control-allow-origin'], origin);
    }
    // DNS rebinding: a page on evil.example:CORE whose name now resolves to 127.0.0.1 calls evil.example:AUDIT.
    for (const origin of [`http://evil.example:${core}`, `http://evil.example`, `http://127.0.0.1.evil.example:${core}`, 'null']) {
      const read = await call(audit, '/audit/org/acme?limit=1', { ...auth, origin, host: `evil.example:${audit}` });
      assert.equal(read.headers['access-control-allow-origin'], undefined, origin);
      const preflight = await call(audit, '/audit/org/acme', { origin, host: `evil.example:${audit}`, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' }, 'OPTIONS');
      assert.equal(preflight.headers['access-control-allow-origin'], undefined, origin);
      assert.equal(preflight.headers['access-control-allow-methods'], undefined, origin);
    }
  });
});

forEachBackend('the public address: KEEL_PUBLIC_URL set', (backend) => {
  const PUBLIC = 'https://keel.example.com';
  let k: TestKeel;
  let core: number;
  let audit: number;
  before(async () => {
    k = await startKeel(backend, 'acme', { publicUrl: PUBLIC, auditPort: await freePort(), reconcile: true, reconcileStepMs: 40 });
    core = Number(new URL(await k.listen()).port);
    await k.app.audit.listen({ host: '127.0.0.1', port: k.config.auditPort });
    audit = (k.app.audit.server.address() as AddressInfo).port;
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/web/workload', WORKLOAD)).status, 201);
  });
  after(() => k.close());

  test('discovery and status.remote name the public URL whatever Host the caller sent', async () => {
    const auth = { authorization: `Bearer ${k.token}` };
    const deployment = '/org/acme/gvc/web/workload/api/deployment/aws-us-east-2';
    await waitFor('the deployment', () => call(core, deployment, { ...auth, host: 'localhost' }), (res) => res.status === 200 && Boolean(res.body.status?.remote));
    for (const host of ['localhost:9000', `127.0.0.1:${core}`, ...HOSTILE_HOSTS]) {
      const discovery = await call(core, '/discovery', { host });
      assert.equal(discovery.body.endpoints.api, PUBLIC, host);
      assert.equal(discovery.body.endpoints.audit, `https://keel.example.com:${k.config.auditPort}`, host);
      assert.equal((await call(core, deployment, { ...auth, host })).body.status.remote, `${PUBLIC}/-remote/aws-us-east-2`, host);
    }
  });

  test("the Audit API's CORS grants the public URL's origin only", async () => {
    const auth = { authorization: `Bearer ${k.token}` };
    assert.equal((await call(audit, '/audit/org/acme?limit=1', { ...auth, origin: PUBLIC, host: `keel.example.com:${audit}` })).headers['access-control-allow-origin'], PUBLIC);
    for (const origin of [`http://127.0.0.1:${core}`, `http://localhost:${core}`, 'http://keel.example.com', 'https://keel.example.com:444', 'https://evil.example']) {
      assert.equal((await call(audit, '/audit/org/acme?limit=1', { ...auth, origin, host: `127.0.0.1:${audit}` })).headers['access-control-allow-origin'], undefined, origin);
    }
  });
});

describe('KEEL_PUBLIC_URL as a setting', () => {
  test('an http(s) URL is kept without its trailing slash; anything else stops the start naming the setting', () => {
    assert.equal(loadConfig({ env: { KEEL_PUBLIC_URL: 'https://keel.example.com/' } }).publicUrl, 'https://keel.example.com');
    assert.equal(loadConfig({ env: { KEEL_PUBLIC_URL: 'http://10.0.0.5:8080/keel/' } }).publicUrl, 'http://10.0.0.5:8080/keel');
    assert.equal(loadConfig({ argv: ['--public-url', 'https://a.example'] }).publicUrl, 'https://a.example');
    for (const bad of ['keel.example.com', 'ftp://keel.example.com', 'https://user:pw@keel.example.com', 'https://keel.example.com/?x=1', 'javascript:alert(1)']) {
      assert.throws(() => loadConfig({ env: { KEEL_PUBLIC_URL: bad } }), /KEEL_PUBLIC_URL/, bad);
    }
  });
});
