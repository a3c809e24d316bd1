// A Keel running workloads under the runc runtime, driven as a user drives it: the Core API and
// the ingress on real sockets, the official CLI with a default profile for org acme, and GVC web
// in LOCATION. Kept apart from runtime.ts, which the bench and the restart suite import without
// wanting keel.ts (it probes PostgreSQL when loaded).
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { KEEL_ACTOR } from '../../src/audit/events.js';
import type { Config } from '../../src/config.js';
import { accountLinkOf, createOrg } from '../../src/resources/orgs.js';
import { Cpln, type CplnResult } from './cpln.js';
import { startKeel, type TestKeel } from './keel.js';
import { freePort } from './ports.js';
import { runTool } from './registry-tools.js';
import { testSubnet } from './runtime.js';
import { waitFor } from './wait.js';

export const LOCATION = 'aws-us-east-2';

/**
 * What the runtime suites run Keel with: replicas in runc, the ingress on a free port, this
 * process's own subnet. KEEL_TEST_INGRESS_PROXY=haproxy runs every suite with HAProxy in front of
 * the ingress (haproxy.test.ts always does). The suites about something else than the firewall
 * open it, as a demo would (KEEL_FIREWALL=open); Keel's default, enforce, is firewall.test.ts's.
 */
export function runcSettings(ingressProxy: Config['ingressProxy'] = process.env.KEEL_TEST_INGRESS_PROXY === 'haproxy' ? 'haproxy' : 'keel', firewall: Config['firewall'] = 'open'): Partial<Config> {
  // Busybox as PID 1 ignores SIGTERM: a stopped replica would wait out the hosted 90 s default;
  // rollouts.test.ts, which is about grace periods, sets its own bound.
  return { reconcile: true, reconcileStepMs: 100, runtime: 'runc', ingressPort: 0, ingressProxy, firewall, runtimeSubnet: testSubnet(), maxTerminationGraceSeconds: 2 };
}

export interface RuntimeKeel {
  keel: TestKeel;
  cpln: Cpln;
  /** The Core API's port. */
  port: number;
  ingressPort: number;
  /** The ingress's base URL. */
  ingress: string;
  /** Runs the CLI and asserts it exits with `expect`. */
  run(args: string[], expect?: number, input?: string): Promise<CplnResult>;
  /** The body of `workload`'s deployment in LOCATION (GVC web of acme). */
  deployment(workload: string): Promise<any>;
  /** A GET through the ingress, with `host` as the Host header (fetch() would not send one of our choosing). */
  get(path: string, host?: string, headers?: Record<string, string>): Promise<{ status: number; body: string; ms: number }>;
  /** A POST of `body` through the ingress, with `host` as the Host header. */
  post(path: string, host: string | undefined, body: string): Promise<{ status: number; body: string; ms: number }>;
  close(): Promise<void>;
}

/**
 * `cliReachesIngress`: the CLI's guard lets it reach the ingress too (`cpln workload open` and the
 * like), not only the API. `settings`: more of Keel's configuration (bounds made small, say).
 */
export async function startRuntimeKeel(options: { cliReachesIngress?: boolean; ingressProxy?: Config['ingressProxy']; settings?: Partial<Config> } = {}): Promise<RuntimeKeel> {
  const port = await freePort();
  const keel = await startKeel('sqlite', 'acme', { port, ...runcSettings(options.ingressProxy), ...options.settings });
  await keel.app.core.listen({ host: '127.0.0.1', port });
  const ingressPort = (keel.app.core.runtime as unknown as { ingressPort: number }).ingressPort;
  const ingress = `http://127.0.0.1:${ingressPort}`;
  const cpln = new Cpln(options.cliReachesIngress ? [`127.0.0.1:${port}`, `127.0.0.1:${ingressPort}`] : [`127.0.0.1:${port}`]);
  const run = async (args: string[], expect = 0, input?: string) => {
    const r = await cpln.run(args, { timeoutMs: 60_000, input });
    assert.equal(r.code, expect, `cpln ${args.join(' ')} exited ${r.code}: ${r.stderr || r.stdout}`);
    return r;
  };
  const deployment = async (workload: string) => (await keel.call('GET', `/org/acme/gvc/web/workload/${workload}/deployment/${LOCATION}`)).body;
  const send = (method: string, path: string, host?: string, headers: Record<string, string> = {}, body?: string) =>
    new Promise<{ status: number; body: string; ms: number }>((resolve, reject) => {
      const started = Date.now();
      // A connection of its own: a kept-alive one may meet an HAProxy that a reload is retiring,
      // which closes it unanswered, as any HTTP client may see and retry.
      const req = httpRequest(`${ingress}${path}`, { method, agent: false, headers: host ? { ...headers, host } : headers }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, ms: Date.now() - started }));
      });
      req.on('error', reject);
      req.end(body);
    });
  const get = (path: string, host?: string, headers: Record<string, string> = {}) => send('GET', path, host, headers);
  const post = (path: string, host: string | undefined, body: string) => send('POST', path, host, { 'content-type': 'application/x-www-form-urlencoded' }, body);
  const close = async () => {
    cpln.cleanup();
    await keel.close();
  };
  try {
    await run(['profile', 'update', 'keel', '--endpoint', `http://127.0.0.1:${port}`, '--token', keel.token, '--org', 'acme', '--gvc', 'web', '--default']);
    await run(['gvc', 'create', '--name', 'web', '--location', LOCATION]);
  } catch (err) {
    await close();
    throw err;
  }
  return { keel, cpln, port, ingressPort, ingress, run, deployment, get, post, close };
}

/** GVC web in LOCATION, made through the API, for the suites that drive Keel without the CLI. */
export async function createGvc(keel: TestKeel): Promise<void> {
  const created = await keel.call('POST', '/org/acme/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
}

/**
 * A second org, `name`, made by its own superuser: a key, a cpln profile of the org's name (GVC web
 * its default) and GVC web in LOCATION. With `image` (an `oci:` reference from busyboxImage), the
 * image is pushed into that org's registry, as only the first org runs the host's layouts, and
 * `image` in the answer names it there.
 */
export async function secondOrg(rt: RuntimeKeel, name: string, image?: string): Promise<{ token: string; image?: string }> {
  const token = (await createOrg(rt.keel.store, { name, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(name), adminServiceAccount: 'admin' })).token!;
  await rt.run(['profile', 'update', name, '--endpoint', `http://127.0.0.1:${rt.port}`, '--token', token, '--org', name, '--gvc', 'web']);
  await rt.run(['gvc', 'create', '--name', 'web', '--location', LOCATION, '--profile', name]);
  if (!image) return { token };
  const layout = image.slice('oci:'.length, image.lastIndexOf(':'));
  const tag = image.slice(image.lastIndexOf(':') + 1);
  const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `${name}:${token}`, `oci:${layout}:${tag}`, `docker://127.0.0.1:${rt.port}/${tag}:v1`]);
  assert.equal(pushed.code, 0, pushed.stderr);
  return { token, image: `//image/${tag}:v1` };
}

/**
 * Workload `name` of GVC web: one replica of `image`, an httpd on port 8080 with a TCP readiness
 * probe, applied through the CLI from a file in `work`. Answers the replica's name once it is ready.
 */
export async function serveOne(rt: RuntimeKeel, work: string, name: string, image: string): Promise<string> {
  const file = join(work, `${name}.json`);
  const container = { name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } };
  writeFileSync(file, JSON.stringify({ kind: 'workload', name, gvc: 'web', spec: { type: 'standard', containers: [container], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } }));
  await rt.run(['apply', '--file', file]);
  const ready = await waitFor(`${name} to be ready`, async () => (await rt.deployment(name))?.status, (s) => s?.ready === true, 90_000);
  return ready.internal.replicas[0];
}

/**
 * Service account `name` of acme with a key, given `permissions` on all workloads (and view on
 * GVCs), and a cpln profile of its name (GVC web its default). Answers the key.
 */
export async function serviceAccountWith(rt: RuntimeKeel, name: string, permissions: string[]): Promise<{ key: string; name: string }> {
  assert.equal((await rt.keel.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
  const key = (await rt.keel.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: name })).body as { key: string; name: string };
  for (const [kind, perms] of [['workload', permissions], ['gvc', ['view']]] as const) {
    const policy = await rt.keel.call('POST', '/org/acme/policy', { name: `${name}-${kind}`, targetKind: kind, target: 'all', bindings: [{ permissions: perms, principalLinks: [`//serviceaccount/${name}`] }] });
    assert.equal(policy.status, 201, JSON.stringify(policy.body));
  }
  await rt.run(['profile', 'update', name, '--endpoint', `http://127.0.0.1:${rt.port}`, '--token', key.key, '--org', 'acme', '--gvc', 'web']);
  return key;
}
