// Domains under the runc runtime: a request whose Host is a domain's name goes, by the domain's
// routes, to a workload of its org, its prefix replaced, the route's headers set, to one replica
// of a stateful workload when the route names it; what a domain may not do, it does not.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

// Echoes what reached the replica: which replica, the request's URI and its headers (busybox
// httpd hands a CGI every header as HTTP_*).
const ECHO = { 'www/cgi-bin/echo': '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\necho "replica=$(hostname)"\necho "uri=$REQUEST_URI"\nenv | grep ^HTTP_ | sort\n' };

describe('domains routed by the ingress (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  const apply = async (resource: unknown) => {
    const file = join(work, `apply-${Date.now()}.json`);
    writeFileSync(file, JSON.stringify(resource));
    return rt.run(['apply', '--file', file]);
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-domains-'));
    const image = busyboxImage(work, 'echo', ['/bin/sh', '-c', 'chmod +x /www/cgi-bin/*; exec httpd -f -p 8080 -h /www'], ECHO);
    rt = await startRuntimeKeel({ cliReachesIngress: true });
    const probe = { tcpSocket: { port: 8080 }, periodSeconds: 1 };
    const container = { name: 'main', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: probe };
    for (const [name, type, scale] of [['api', 'standard', 1], ['site', 'standard', 1], ['db', 'stateful', 2]] as const) {
      await apply({ kind: 'workload', name, gvc: 'web', spec: { type, containers: [container], defaultOptions: { autoscaling: { minScale: scale, maxScale: scale } } } });
    }
    for (const name of ['api', 'site', 'db']) {
      // Ready once one replica serves: db's routes name its second replica, so every replica must be.
      await waitFor(`every replica of ${name} to be ready`, async () => (await rt.deployment(name))?.status, (s) => s?.ready === true && s.versions?.[0]?.containers?.main?.resources?.replicasReady === (name === 'db' ? 2 : 1), 90_000);
    }
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('cpln apply a domain: each prefix reaches its workload, the prefix replaced and the headers set', async () => {
    await apply({
      kind: 'domain',
      name: 'app.example.com',
      spec: {
        dnsMode: 'cname',
        ports: [
          {
            number: 443,
            protocol: 'http',
            routes: [
              { prefix: '/', replacePrefix: '/cgi-bin/echo/', workloadLink: '//gvc/web/workload/site' },
              { prefix: '/api/', replacePrefix: '/cgi-bin/echo/v1/', workloadLink: '//gvc/web/workload/api', headers: { request: { set: { 'X-Route': 'api', 'X-Tenant': 'acme' } } } },
              { prefix: '/db/', replacePrefix: '/cgi-bin/echo/', workloadLink: '//gvc/web/workload/db', replica: 1 },
            ],
          },
        ],
      },
    });
    const api = await waitFor('the domain to route', () => rt.get('/api/things?page=2', 'app.example.com:443'), (r) => r.status === 200, 30_000);
    assert.match(api.body, /^replica=api-/m);
    assert.match(api.body, /^uri=\/cgi-bin\/echo\/v1\/things\?page=2$/m);
    assert.match(api.body, /^HTTP_X_ROUTE=api$/m);
    assert.match(api.body, /^HTTP_X_TENANT=acme$/m);
    // A header the route sets wins over the client's.
    assert.match((await rt.get('/api/x', 'app.example.com', { 'x-route': 'mine' })).body, /^HTTP_X_ROUTE=api$/m);

    const site = await rt.get('/about', 'App.Example.com');
    assert.equal(site.status, 200);
    assert.match(site.body, /^replica=site-/m);
    assert.match(site.body, /^uri=\/cgi-bin\/echo\/about$/m);
    assert.doesNotMatch(site.body, /HTTP_X_ROUTE/);
  });

  test("a route with replica goes to that replica of the stateful workload, every time", async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = await rt.get('/db/row', 'app.example.com');
      assert.equal(r.status, 200, r.body);
      seen.add(/^replica=(.*)$/m.exec(r.body)![1]);
    }
    assert.deepEqual([...seen], ['db-1']);
  });

  test('a gvcLink domain serves WORKLOAD.DOMAIN; with acceptAllSubdomains, hostPrefix tells subdomains apart', async () => {
    await apply({ kind: 'domain', name: 'apps.example.com', spec: { dnsMode: 'ns', gvcLink: '//gvc/web' } });
    const site = await waitFor('the domain to route', () => rt.get('/cgi-bin/echo/x', 'site.apps.example.com'), (r) => r.status === 200, 30_000);
    assert.match(site.body, /^replica=site-/m);
    assert.match((await rt.get('/cgi-bin/echo/x', 'api.apps.example.com')).body, /^replica=api-/m);

    await apply({
      kind: 'domain',
      name: 'wild.example.com',
      spec: {
        acceptAllSubdomains: true,
        ports: [
          {
            number: 443,
            routes: [
              { prefix: '/', replacePrefix: '/cgi-bin/echo/', workloadLink: '//gvc/web/workload/site' },
              { prefix: '/', replacePrefix: '/cgi-bin/echo/', workloadLink: '//gvc/web/workload/api', hostPrefix: 'api' },
            ],
          },
        ],
      },
    });
    const api = await waitFor('the domain to route', () => rt.get('/x', 'api.wild.example.com'), (r) => r.status === 200, 30_000);
    assert.match(api.body, /^replica=api-/m);
    assert.match((await rt.get('/x', 'www.wild.example.com')).body, /^replica=site-/m);
    assert.match((await rt.get('/x', 'wild.example.com')).body, /^replica=site-/m);

    // A domain that does not accept subdomains says so.
    const sub = await rt.get('/x', 'www.app.example.com');
    assert.equal(sub.status, 404);
    assert.match(JSON.parse(sub.body).message, /domain 'app\.example\.com' does not accept subdomains .*acceptAllSubdomains/);
  });

  test('X-Forwarded-For is the client address alone: neither the client nor a route can set it', async () => {
    await apply({
      kind: 'domain',
      name: 'hdr.example.com',
      spec: {
        ports: [{ number: 443, routes: [{ prefix: '/', replacePrefix: '/cgi-bin/echo/', workloadLink: '//gvc/web/workload/api', headers: { request: { set: { 'X-Forwarded-For': '6.6.6.6', 'Content-Length': '5', 'X-Split': 'a\r\nX-Injected: 1', 'X-Kept': 'yes' } } } }] }],
      },
    });
    const r = await waitFor('the domain to route', () => rt.get('/who', 'hdr.example.com', { 'x-forwarded-for': '1.2.3.4' }), (x) => x.status === 200, 30_000);
    assert.match(r.body, /^HTTP_X_FORWARDED_FOR=127\.0\.0\.1$/m);
    assert.doesNotMatch(r.body, /1\.2\.3\.4|6\.6\.6\.6|HTTP_X_INJECTED|HTTP_X_SPLIT/);
    assert.match(r.body, /^HTTP_X_KEPT=yes$/m);
  });

  test('an unknown Host, a missing workload and another org are answered with a clear error', async () => {
    const unknown = await rt.get('/', 'nothing.example.org');
    assert.equal(unknown.status, 404);
    assert.match(JSON.parse(unknown.body).message, /no workload is served at host 'nothing\.example\.org'/);

    await apply({ kind: 'domain', name: 'gone.example.com', spec: { ports: [{ number: 443, routes: [{ prefix: '/', workloadLink: '//gvc/web/workload/nope' }] }] } });
    const missing = await waitFor('the domain to be known', () => rt.get('/', 'gone.example.com'), (x) => x.status !== 404, 30_000);
    assert.equal(missing.status, 503);
    assert.match(JSON.parse(missing.body).message, /domain 'gone\.example\.com' routes to workload 'nope' of GVC 'web', which runs no replica/);

    // Another org's domain reaches none of acme's workloads, and cannot take acme's domain name.
    assert.equal((await rt.keel.call('POST', '/org', { name: 'evil' })).status, 201);
    const cross = await rt.keel.call('POST', '/org/evil/domain', { name: 'evil.example.com', spec: { ports: [{ number: 443, routes: [{ prefix: '/', workloadLink: '/org/acme/gvc/web/workload/api' }] }] } });
    assert.equal(cross.status, 201, JSON.stringify(cross.body));
    const r = await waitFor('the domain to be known', () => rt.get('/', 'evil.example.com'), (x) => !/no workload is served/.test(x.body), 30_000);
    assert.equal(r.status, 404);
    assert.match(JSON.parse(r.body).message, /a domain routes only to workloads of its own org/);
    const taken = await rt.keel.call('POST', '/org/evil/domain', { name: 'app.example.com', spec: { workloadLink: '/org/evil/gvc/web/workload/api' } });
    assert.equal(taken.status, 201, JSON.stringify(taken.body));
    await waitFor('evil\'s domain to be reconciled', async () => (await rt.keel.call('GET', '/org/evil/domain/app.example.com')).body?.status?.status, (s) => s !== undefined, 30_000);
    const still = await rt.get('/api/x', 'app.example.com');
    assert.equal(still.status, 200);
    assert.match(still.body, /^replica=api-/m);
    // Nor can a domain take the host name of a workload's endpoint.
    const endpoint = new URL((await rt.keel.call('GET', '/org/acme/gvc/web/workload/api')).body.status.endpoint).hostname;
    assert.equal((await rt.keel.call('POST', '/org/evil/domain', { name: endpoint, spec: { workloadLink: '/org/evil/gvc/web/workload/api' } })).status, 201);
    await waitFor("evil's endpoint domain to be reconciled", async () => (await rt.keel.call('GET', `/org/evil/domain/${endpoint}`)).body?.status?.status, (s) => s !== undefined, 30_000);
    const own = await rt.get('/cgi-bin/echo/x', endpoint);
    assert.equal(own.status, 200);
    assert.match(own.body, /^replica=api-/m);
  });

  test('a deleted domain is no longer served', async () => {
    await rt.run(['domain', 'delete', 'hdr.example.com']);
    const r = await waitFor('the domain to be gone', () => rt.get('/who', 'hdr.example.com'), (x) => x.status === 404, 30_000);
    assert.match(JSON.parse(r.body).message, /no workload is served at host/);
  });
});
