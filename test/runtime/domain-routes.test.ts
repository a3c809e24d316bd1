// The ingress's domain table on its own (no containers, so it runs where the runc suites skip):
// which route a Host and path pick, and what a domain's spec cannot make it do.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DomainRoutes } from '../../src/runtime/domains.js';

const link = (org: string, workload: string) => `/org/${org}/gvc/web/workload/${workload}`;

test('the longest prefix wins, its prefix replaced, the query kept', () => {
  const t = new DomainRoutes();
  t.set('acme', 'App.Example.com', {
    ports: [
      {
        routes: [
          { prefix: '/', workloadLink: link('acme', 'site') },
          { prefix: '/api/', replacePrefix: '/', workloadLink: link('acme', 'api'), port: 9000 },
          { prefix: '/api/v2/', replacePrefix: 'v2/', workloadLink: link('acme', 'api2'), replica: 1 },
        ],
      },
    ],
  });
  assert.deepEqual(t.match('app.example.com', '/api/x?y=1'), { org: 'acme', gvc: 'web', workload: 'api', port: 9000, path: '/x?y=1', headers: {}, replica: undefined, domain: 'app.example.com' });
  assert.equal((t.match('APP.example.com.', '/api/v2/z') as { path: string }).path, '/v2/z');
  assert.equal((t.match('app.example.com', '/api/v2/z') as { replica: number }).replica, 1);
  assert.equal((t.match('app.example.com', '/other') as { workload: string }).workload, 'site');
  assert.equal(t.match('example.com', '/'), undefined);
});

test('a route cannot set framing or forwarding headers, nor a value with a line break', () => {
  const t = new DomainRoutes();
  const set = { 'X-Ok': 'yes', 'Content-Length': '0', 'Transfer-Encoding': 'chunked', 'X-Forwarded-For': '6.6.6.6', 'X-Bad': 'a\r\nb', 'bad name': 'x' };
  t.set('acme', 'a.example.com', { ports: [{ routes: [{ prefix: '/', workloadLink: link('acme', 'w'), headers: { request: { set } } }] }] });
  assert.deepEqual((t.match('a.example.com', '/') as { headers: unknown }).headers, { 'x-ok': 'yes' });
});

test("another org's workload, an unmatched path and a subdomain are refused with the reason", () => {
  const t = new DomainRoutes();
  t.set('evil', 'e.example.com', { ports: [{ routes: [{ prefix: '/', workloadLink: link('acme', 'api') }] }] });
  assert.match((t.match('e.example.com', '/') as { message: string }).message, /routes only to workloads of its own org/);
  t.set('acme', 'p.example.com', { ports: [{ routes: [{ prefix: '/only/', workloadLink: link('acme', 'api') }] }] });
  assert.deepEqual(t.match('p.example.com', '/else'), { status: 404, message: "domain 'p.example.com' has no route for path /else" });
  assert.match((t.match('x.p.example.com', '/only/') as { message: string }).message, /acceptAllSubdomains/);
});

test('of two orgs holding one name the first to create it is served; a deleted domain is not', () => {
  const t = new DomainRoutes();
  t.set('late', 'same.example.com', { workloadLink: link('late', 'w') }, '2026-02-01T00:00:00.000Z');
  t.set('early', 'same.example.com', { workloadLink: link('early', 'w') }, '2026-01-01T00:00:00.000Z');
  assert.equal((t.match('same.example.com', '/') as { org: string }).org, 'early');
  t.set('early', 'same.example.com', undefined);
  assert.equal((t.match('same.example.com', '/') as { org: string }).org, 'late');
  t.set('late', 'same.example.com', undefined);
  assert.equal(t.match('same.example.com', '/'), undefined);
});

test("no domain takes a workload endpoint's .localhost name, and an overlong Host is not looked up", () => {
  const t = new DomainRoutes();
  t.set('evil', 'api-web.localhost', { workloadLink: link('evil', 'w') });
  assert.equal(t.match('api-web.localhost', '/'), undefined);
  t.set('acme', 'example.com', { acceptAllSubdomains: true, workloadLink: link('acme', 'w') });
  assert.equal((t.match('a.example.com', '/') as { workload: string }).workload, 'w');
  assert.equal(t.match(`${'a.'.repeat(200)}example.com`, '/'), undefined);
});
