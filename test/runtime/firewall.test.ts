// A workload's firewallConfig under KEEL_RUNTIME=runc, set through the CLI as a user sets it:
// external inbound closed until inboundAllowCIDR opens it, at Keel's ingress and at HAProxy's
// (a forged X-Forwarded-For or x-keel-client admits no one), blocked CIDRs and header filters;
// internal inbound between replicas by inboundAllowType, refused at once (never a hang), and
// another org's replica never reached; egress to a listener in a network namespace this test
// makes, allowed and refused by CIDR and port; KEEL_FIREWALL=open.
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { scopeOf, type RuncRuntime } from '../../src/runtime/runc.js';
import { runTool, toolMissing } from '../support/registry-tools.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing() || toolMissing('skopeo');

const CGI = { 'www/cgi-bin/who': '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\necho "replica=$(hostname)"\n' };
const SERVE = ['/bin/sh', '-c', 'chmod +x /www/cgi-bin/*; exec httpd -f -p 8080 -h /www'];

/** A call refused by the firewall fails within this long (a reset or ICMP refusal, not a timeout). */
const REFUSED_WITHIN_MS = 2_000;
/** What busybox nc says when its connection is refused (a reset or an ICMP refusal). */
const REFUSED = /nc: can't connect to remote host/;

/** The workload the test applies, with the firewall given. */
const workload = (name: string, image: string, firewallConfig?: Record<string, unknown>, gvc = 'web') => ({
  kind: 'workload',
  name,
  gvc,
  spec: {
    type: 'standard',
    containers: [{ name: 'main', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } }],
    defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } },
    ...(firewallConfig ? { firewallConfig } : {}),
  },
});

async function setup(rt: RuntimeKeel, work: string) {
  const apply = async (doc: Record<string, unknown>, org = 'acme') => {
    const file = join(work, `${org}-${String(doc.gvc)}-${String(doc.name)}.json`);
    writeFileSync(file, JSON.stringify(doc));
    await rt.run(['apply', '--file', file, '--org', org]);
  };
  const ready = (name: string, gvc = 'web', org = 'acme') =>
    waitFor(`${org}/${gvc}/${name} to be ready`, async () => (await rt.keel.call('GET', `/org/${org}/gvc/${gvc}/workload/${name}/deployment/${LOCATION}`)).body?.status, (s) => s?.ready === true, 90_000);
  /** The address of the workload's one ready replica, as the runtime holds it (undefined while a new version replaces it). */
  const addressOf = (name: string, gvc = 'web', org = 'acme') => {
    const replicas = (rt.keel.app.core.runtime as unknown as RuncRuntime).replicasOf({ org, gvc, workload: name, location: LOCATION });
    return replicas.length === 1 && replicas[0].ready ? replicas[0].address : undefined;
  };
  /**
   * An HTTP GET of `path` at `address:port` from inside `from`'s replica, through `cpln workload
   * exec` (busybox `nc`: the image's static busybox has no resolver libraries for `wget`): what it
   * printed, and how long the call itself took.
   */
  const call = async (from: string, address: string, port: number, path: string, gvc = 'web', org = 'acme') => {
    const get = `printf 'GET ${path} HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${address} ${port}`;
    const r = await rt.cpln.run(['workload', 'exec', from, '--org', org, '--gvc', gvc, '--location', LOCATION, '--', 'sh', '-c', `read a _ < /proc/uptime; ${get}; echo "rc=$?"; read b _ < /proc/uptime; echo "uptime=$a..$b"`], { timeoutMs: 60_000 });
    const rc = Number(/rc=(\d+)/.exec(r.stdout)?.[1] ?? -1);
    // The wget's own duration, from the kernel's uptime (hundredths of a second) before and after it.
    const [a, b] = (/uptime=([\d.]+)\.\.([\d.]+)/.exec(r.stdout) ?? []).slice(1).map(Number);
    const ms = (b - a) * 1000;
    assert.ok(Number.isFinite(ms), `exec in ${from}: ${r.stdout} ${r.stderr}`);
    return { ok: rc === 0 && / 200 OK/.test(r.stdout), out: r.stdout, ms };
  };
  return { apply, ready, addressOf, call };
}

describe('the firewall between replicas and outbound (KEEL_FIREWALL=enforce)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let h: Awaited<ReturnType<typeof setup>>;
  // The listener the egress rules are tested against, in a network namespace of this test's own.
  const netns = `kfw-test-${process.pid}`;
  const hostVeth = `kfwh${process.pid % 100000}`;
  const third = (process.pid % 200) + 20;
  const listener = `10.214.${third}.2`;
  let listening: ChildProcess | undefined;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-firewall-'));
    image = busyboxImage(work, 'web', SERVE, CGI);
    rt = await startRuntimeKeel({ settings: { firewall: 'enforce' } });
    h = await setup(rt, work);
    await rt.run(['gvc', 'create', '--name', 'other', '--location', LOCATION]);
    assert.equal((await rt.keel.call('POST', '/org', { name: 'evil' })).status, 201);
    assert.equal((await rt.keel.call('POST', '/org/evil/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } })).status, 201);
    await h.apply(workload('server', image));
    await h.apply(workload('client', image));
    await h.apply(workload('far', image, undefined, 'other'));
    // Only the first org runs the host's layouts: the other org's image comes from its own registry.
    assert.equal((await rt.keel.call('POST', '/org/evil/serviceaccount', { name: 'pusher' })).status, 201);
    const pusher = (await rt.keel.call('PATCH', '/org/evil/group/superusers', { '$append/memberLinks': ['//serviceaccount/pusher'] })).status;
    assert.equal(pusher, 200);
    const key = (await rt.keel.call('POST', '/org/evil/serviceaccount/pusher/-addKey', { description: 'push' })).body.key;
    const layout = image.slice('oci:'.length, image.lastIndexOf(':'));
    const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `pusher:${key}`, `oci:${layout}:web`, `docker://127.0.0.1:${rt.port}/web:v1`]);
    assert.equal(pushed.code, 0, pushed.stderr);
    await h.apply(workload('stranger', '//image/web:v1'), 'evil');
    await Promise.all([h.ready('server'), h.ready('client'), h.ready('far', 'other'), h.ready('stranger', 'web', 'evil')]);

    const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    ip('netns', 'add', netns);
    ip('link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
    ip('addr', 'add', `10.214.${third}.1/30`, 'dev', hostVeth);
    ip('link', 'set', hostVeth, 'up');
    ip('-n', netns, 'addr', 'add', `${listener}/30`, 'dev', 'eth0');
    ip('-n', netns, 'link', 'set', 'eth0', 'up');
    ip('-n', netns, 'link', 'set', 'lo', 'up');
    mkdirSync(join(work, 'outside'));
    writeFileSync(join(work, 'outside', 'index.html'), 'outside\n');
    listening = spawn('ip', ['netns', 'exec', netns, '/bin/busybox', 'httpd', '-f', '-p', '9180', '-h', join(work, 'outside')], { stdio: 'ignore' });
  });
  after(async () => {
    listening?.kill('SIGKILL');
    try {
      execFileSync('ip', ['link', 'del', hostVeth], { stdio: 'ignore' });
    } catch {
      // Gone with its namespace already.
    }
    try {
      execFileSync('ip', ['netns', 'del', netns], { stdio: 'ignore' });
    } catch {
      // Never made.
    }
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  /** Waits until `from` reaches (or is refused by) the server; a refusal must come within REFUSED_WITHIN_MS. */
  const expectCall = async (from: string, to: string, allowed: boolean, fromGvc = 'web', fromOrg = 'acme', toGvc = 'web') => {
    const r = await waitFor(
      `${fromOrg}/${fromGvc}/${from} (${h.addressOf(from, fromGvc, fromOrg)}) to be ${allowed ? 'let through' : 'refused'} to ${to} (${h.addressOf(to, toGvc)}) under ${(() => { try { return execFileSync('nft', ['list', 'set', 'ip', `keel-${scopeOf(rt.keel.config.dataDir)}`, 'inside'], { encoding: 'utf8' }).replace(/\s+/g, ' '); } catch (err) { return String(err); } })()}`,
      async () => {
        const address = h.addressOf(to, toGvc);
        return address ? h.call(from, address, 8080, '/cgi-bin/who', fromGvc, fromOrg) : { ok: false, out: `${to} has no single ready replica: ${JSON.stringify((rt.keel.app.core.runtime as unknown as RuncRuntime).replicasOf({ org: 'acme', gvc: toGvc, workload: to, location: LOCATION }))}`, ms: NaN };
      },
      (x) => (allowed ? x.ok : REFUSED.test(x.out)),
      30_000,
    );
    if (allowed) assert.match(r.out, new RegExp(`replica=${to}-`));
    else {
      assert.match(r.out, REFUSED);
      assert.ok(r.ms < REFUSED_WITHIN_MS, `refused after ${r.ms} ms: ${r.out}`);
    }
  };

  test('inboundAllowType none (the default) refuses every other workload at once', async () => {
    await expectCall('client', 'server', false);
    await expectCall('far', 'server', false, 'other');
    // The server itself answers (Keel's probes and ingress reach it: it is ready).
    assert.equal((await rt.deployment('server')).status.ready, true);
  });

  test('same-gvc admits the GVC, same-org the org, never another org; workload-list only the workloads it names', async () => {
    await rt.run(['workload', 'update', 'server', '--set', 'spec.firewallConfig.internal.inboundAllowType=same-gvc']);
    await expectCall('client', 'server', true);
    await expectCall('far', 'server', false, 'other');

    await rt.run(['workload', 'update', 'server', '--set', 'spec.firewallConfig.internal.inboundAllowType=same-org']);
    await expectCall('far', 'server', true, 'other');
    // Another org's replica, on the same bridge, is refused whatever the rules say.
    await expectCall('stranger', 'server', false, 'web', 'evil');

    await h.apply(workload('server', image, { internal: { inboundAllowType: 'workload-list', inboundAllowWorkload: ['//gvc/other/workload/far'] } }));
    await expectCall('client', 'server', false);
    await expectCall('far', 'server', true, 'other');
    // Nor can another org's replica reach acme's when acme's names a workload of the same name as the stranger's.
    await h.apply(workload('server', image, { internal: { inboundAllowType: 'workload-list', inboundAllowWorkload: ['//gvc/web/workload/stranger'] } }));
    await expectCall('far', 'server', false, 'other');
    await expectCall('stranger', 'server', false, 'web', 'evil');
  });

  test('outbound: refused by default, allowed by CIDR, refused by a blocked CIDR or another port', async () => {
    await waitFor('the listener in its namespace', async () => {
      try {
        return execFileSync('ip', ['netns', 'exec', netns, '/bin/busybox', 'wget', '-q', '-O', '-', `http://127.0.0.1:9180/index.html`], { encoding: 'utf8' });
      } catch {
        return '';
      }
    }, (out) => out === 'outside\n');
    const out = async (allowed: boolean) => {
      const r = await waitFor(`client's call out to be ${allowed ? 'let through' : 'refused'}`, () => h.call('client', listener, 9180, '/index.html'), (x) => (allowed ? x.ok : REFUSED.test(x.out)), 30_000);
      if (allowed) assert.match(r.out, /^outside$/m);
      else {
        assert.match(r.out, REFUSED);
        assert.ok(r.ms < REFUSED_WITHIN_MS, `refused after ${r.ms} ms: ${r.out}`);
      }
    };
    await out(false);
    await h.apply(workload('client', image, { external: { outboundAllowCIDR: [`${listener}/32`] } }));
    await out(true);
    await h.apply(workload('client', image, { external: { outboundAllowCIDR: ['10.214.0.0/16'], outboundBlockedCIDR: [`${listener}/32`] } }));
    await out(false);
    await h.apply(workload('client', image, { external: { outboundAllowCIDR: [`${listener}/32`], outboundAllowPort: [{ protocol: 'tcp', number: 9181 }] } }));
    await out(false);
    await h.apply(workload('client', image, { external: { outboundAllowCIDR: [`${listener}/32`], outboundAllowPort: [{ protocol: 'http', number: 9180 }] } }));
    await out(true);
  });
});

for (const proxy of ['keel', 'haproxy'] as const) {
  describe(`the external firewall at the ingress (KEEL_INGRESS_PROXY=${proxy})`, { skip: skip || (proxy === 'haproxy' && runtimeMissing({ haproxy: true })) }, () => {
    let rt: RuntimeKeel;
    let work: string;
    let image: string;
    let h: Awaited<ReturnType<typeof setup>>;
    let host: string;

    before(async () => {
      work = mkdtempSync(join(tmpdir(), 'keel-runtime-firewall-ext-'));
      image = busyboxImage(work, 'web', SERVE, CGI);
      rt = await startRuntimeKeel({ ingressProxy: proxy, settings: { firewall: 'enforce' } });
      h = await setup(rt, work);
      await h.apply(workload('api', image));
      await h.ready('api');
      host = new URL(JSON.parse((await rt.run(['workload', 'get', 'api', '--output', 'json'])).stdout).status.endpoint).hostname;
    });
    after(async () => {
      await rt?.close();
      rmSync(work, { recursive: true, force: true });
    });

    /** The endpoint by Host (HAProxy serves it itself) and by path (Keel's ingress): both answer `status`. */
    const both = async (status: number, headers: Record<string, string> = {}, body = /./) => {
      const byHost = await waitFor(`the endpoint to answer ${status} ${body}`, () => rt.get('/cgi-bin/who', host, headers), (r) => r.status === status && body.test(r.body), 30_000);
      const byPath = await rt.get('/-workload/acme/web/api/cgi-bin/who', undefined, headers);
      assert.equal(byPath.status, status, byPath.body);
      assert.match(byPath.body, body);
      return [byHost, byPath];
    };

    test('closed by default: 403 with a body that says why; opened by inboundAllowCIDR', async () => {
      for (const r of await both(403)) {
        assert.equal(JSON.parse(r.body).status, 403);
        assert.match(JSON.parse(r.body).message, /workload 'api' of GVC 'web'.s firewall does not admit external traffic from .*inboundAllowCIDR/);
      }
      await rt.run(['workload', 'update', 'api', '--set', 'spec.firewallConfig.external.inboundAllowCIDR=127.0.0.1/32']);
      for (const r of await both(200)) assert.match(r.body, /^replica=api-/m);
    });

    test('a forged X-Forwarded-For or x-keel-client admits no one: the real peer is checked', async () => {
      await h.apply(workload('api', image, { external: { inboundAllowCIDR: ['10.0.0.0/8'] } }));
      await waitFor('the rule to hold', () => rt.get('/cgi-bin/who', host), (r) => r.status === 403, 30_000);
      await both(403, { 'x-forwarded-for': '10.1.2.3', 'x-keel-client': '10.1.2.3', 'x-real-ip': '10.1.2.3' });
    });

    test("a custom domain routed to the workload gets the workload's firewall", async () => {
      await h.apply(workload('api', image, { external: { inboundAllowCIDR: ['10.0.0.0/8'] } }));
      await waitFor('the rule to hold', () => rt.get('/cgi-bin/who', host), (r) => r.status === 403, 30_000);
      const file = join(work, 'domain.json');
      writeFileSync(file, JSON.stringify({ kind: 'domain', name: 'fw.example.com', spec: { ports: [{ number: 443, routes: [{ prefix: '/', workloadLink: '//gvc/web/workload/api' }] }] } }));
      await rt.run(['apply', '--file', file]);
      const refused = await waitFor('the domain to be routed', () => rt.get('/cgi-bin/who', 'fw.example.com'), (r) => r.status !== 404, 30_000);
      assert.equal(refused.status, 403, refused.body);
      assert.match(JSON.parse(refused.body).message, /workload 'api' of GVC 'web'.s firewall does not admit external traffic from 127\.0\.0\.1/);
      await h.apply(workload('api', image, { external: { inboundAllowCIDR: ['127.0.0.1'] } }));
      const served = await waitFor('the domain to serve', () => rt.get('/cgi-bin/who', 'fw.example.com'), (r) => r.status === 200, 30_000);
      assert.match(served.body, /^replica=api-/m);
    });

    test('inboundBlockedCIDR wins over the allowed ones', async () => {
      await h.apply(workload('api', image, { external: { inboundAllowCIDR: ['0.0.0.0/0'], inboundBlockedCIDR: ['127.0.0.0/8'] } }));
      await both(403, {}, /firewall blocks .*inboundBlockedCIDR/);
    });

    test('header filters: allowedValues and blockedValues', async () => {
      await h.apply(workload('api', image, { external: { inboundAllowCIDR: ['0.0.0.0/0'], http: { inboundHeaderFilter: [{ key: 'X-Team', allowedValues: ['blue-.*'] }, { key: 'User-Agent', blockedValues: ['.*bot.*'] }] } } }));
      await both(403, {}, /x-team header matches its allowedValues/);
      await both(200, { 'x-team': 'blue-7' });
      await both(403, { 'x-team': 'red-7' });
      await both(403, { 'x-team': 'blue-7', 'user-agent': 'evilbot/1' }, /user-agent header/);
    });
  });
}

describe('KEEL_FIREWALL=open keeps every endpoint and replica of the org open', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-firewall-open-'));
    const image = busyboxImage(work, 'web', SERVE, CGI);
    rt = await startRuntimeKeel({ settings: { firewall: 'open' } });
    const h = await setup(rt, work);
    await h.apply(workload('api', image));
    await h.apply(workload('client', image));
    await Promise.all([h.ready('api'), h.ready('client')]);
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('no firewallConfig: served to every client, reached by the org\'s replicas', async () => {
    const r = await rt.get('/-workload/acme/web/api/cgi-bin/who');
    assert.equal(r.status, 200, r.body);
    const h = await setup(rt, work);
    const called = await waitFor('client to reach api', () => h.call('client', h.addressOf('api')!, 8080, '/cgi-bin/who'), (x) => x.ok, 30_000);
    assert.match(called.out, /^replica=api-/m);
  });
});
