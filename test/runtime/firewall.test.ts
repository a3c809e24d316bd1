// A workload's firewallConfig under KEEL_RUNTIME=runc, set through the CLI as a user sets it:
// external inbound closed until inboundAllowCIDR opens it, at Keel's ingress and at HAProxy's
// (a forged X-Forwarded-For or x-keel-client admits no one), blocked CIDRs and header filters;
// internal inbound between replicas by inboundAllowType, refused at once (never a hang), and
// another org's replica never reached; egress to a listener in a network namespace this test
// makes, allowed and refused by CIDR and port, and by hostname (a name the test puts in the
// host's /etc/hosts); outside names looked up only for replicas that may go out; traffic routed
// towards the bridge from elsewhere refused; KEEL_FIREWALL=open, where a new replica's very first
// connection out goes through.
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
    // A rollout (each apply below starts one) replaces the replica the CLI picks: the old one may
    // be stopping, the new one not started yet. That is no answer yet, and the caller asks again.
    if (/is not running|no replica .* runs/.test(r.stderr) && !/rc=/.test(r.stdout)) return { ok: false, out: r.stderr, ms: NaN };
    const rc = Number(/rc=(\d+)/.exec(r.stdout)?.[1] ?? -1);
    // The wget's own duration, from the kernel's uptime (hundredths of a second) before and after it.
    const [a, b] = (/uptime=([\d.]+)\.\.([\d.]+)/.exec(r.stdout) ?? []).slice(1).map(Number);
    const ms = (b - a) * 1000;
    assert.ok(Number.isFinite(ms), `exec in ${from}: ${r.stdout} ${r.stderr}`);
    return { ok: rc === 0 && / 200 OK/.test(r.stdout), out: r.stdout, ms };
  };
  return { apply, ready, addressOf, call };
}

/**
 * A listener outside the bridge: busybox httpd on ports 80 and 9180 in a network namespace of this
 * test's own, joined to the host by a veth pair (a /30: the host's side, then the listener's). It
 * serves `index.html` saying `outside`. No other address is ever a target of the tests.
 */
function outsideListener(work: string, tag: string): { netns: string; address: string; host: string; close: () => void } {
  const netns = `kfw-${tag}-${process.pid}`;
  const hostVeth = `kf${tag}${process.pid % 100000}`;
  const third = (process.pid % 200) + 20;
  const fourth = tag === 'o' ? 4 : 0;
  const host = `10.214.${third}.${fourth + 1}`;
  const address = `10.214.${third}.${fourth + 2}`;
  const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  ip('netns', 'add', netns);
  ip('link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
  ip('addr', 'add', `${host}/30`, 'dev', hostVeth);
  ip('link', 'set', hostVeth, 'up');
  ip('-n', netns, 'addr', 'add', `${address}/30`, 'dev', 'eth0');
  ip('-n', netns, 'link', 'set', 'eth0', 'up');
  ip('-n', netns, 'link', 'set', 'lo', 'up');
  const www = join(work, `outside-${tag}`);
  mkdirSync(www);
  writeFileSync(join(www, 'index.html'), 'outside\n');
  const listening: ChildProcess[] = ['80', '9180'].map((port) => spawn('ip', ['netns', 'exec', netns, '/bin/busybox', 'httpd', '-f', '-p', port, '-h', www], { stdio: 'ignore' }));
  return {
    netns,
    address,
    host,
    close: () => {
      for (const l of listening) l.kill('SIGKILL');
      for (const args of [['link', 'del', hostVeth], ['netns', 'del', netns]]) {
        try {
          execFileSync('ip', args, { stdio: 'ignore' });
        } catch {
          // Gone with its namespace already, or never made.
        }
      }
    },
  };
}

/** Waits until the listener in `netns` answers on both its ports. */
async function listenerUp(netns: string): Promise<void> {
  for (const port of [80, 9180]) {
    await waitFor(`the listener in its namespace on port ${port}`, async () => {
      try {
        return execFileSync('ip', ['netns', 'exec', netns, '/bin/busybox', 'wget', '-q', '-O', '-', `http://127.0.0.1:${port}/index.html`], { encoding: 'utf8' });
      } catch {
        return '';
      }
    }, (out) => out === 'outside\n');
  }
}

describe('the firewall between replicas and outbound (KEEL_FIREWALL=enforce)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let h: Awaited<ReturnType<typeof setup>>;
  // The listener the egress rules are tested against, in a network namespace of this test's own.
  let outside: ReturnType<typeof outsideListener> | undefined;
  let listener: string;
  let netns: string;
  // A name the test gives the listener's address in the host's /etc/hosts, where Keel's lookups of outboundAllowHostname find it.
  const hostname = `keel-egress-${process.pid}.test`;
  let hostsLine: string | undefined;

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

    outside = outsideListener(work, 'e');
    listener = outside.address;
    netns = outside.netns;
    // The other name resolves without asking any DNS server, to an address no test connects to.
    hostsLine = `${listener} ${hostname}\n127.0.0.1 other-${hostname}\n`;
    appendFileSync('/etc/hosts', hostsLine);
  });
  after(async () => {
    if (hostsLine) writeFileSync('/etc/hosts', readFileSync('/etc/hosts', 'utf8').replace(hostsLine, ''));
    outside?.close();
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

  /** Waits until client's call to the listener on `port` is let through (or refused, within REFUSED_WITHIN_MS). */
  const out = async (allowed: boolean, port = 9180) => {
    const r = await waitFor(`client's call out to port ${port} to be ${allowed ? 'let through' : 'refused'}`, () => h.call('client', listener, port, '/index.html'), (x) => (allowed ? x.ok : REFUSED.test(x.out)), 30_000);
    if (allowed) assert.match(r.out, /^outside$/m);
    else {
      assert.match(r.out, REFUSED);
      assert.ok(r.ms < REFUSED_WITHIN_MS, `refused after ${r.ms} ms: ${r.out}`);
    }
  };

  test('outbound: refused by default, allowed by CIDR, refused by a blocked CIDR or another port', async () => {
    await listenerUp(netns);
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

  test('outbound by hostname: the addresses outboundAllowHostname names are reached on ports 80 and 443, nothing else', async () => {
    await listenerUp(netns);
    await h.apply(workload('client', image, { external: { outboundAllowHostname: [hostname] } }));
    await out(true, 80);
    // The name allows ports 80 and 443 only.
    await out(false, 9180);
    // Another name (one that resolves to nothing here) lets nothing out.
    await h.apply(workload('client', image, { external: { outboundAllowHostname: [`other-${hostname}`] } }));
    await out(false, 80);
    // A wildcard stands for the name under it.
    await h.apply(workload('client', image, { external: { outboundAllowHostname: [`*.${hostname}`] } }));
    await out(true, 80);
  });

  test("outside names are looked up only for replicas that may go out: REFUSED without egress, only the hostnames allowed by name", async () => {
    /** busybox nslookup's verdict on `name` (of `type`) from inside `from`'s replica: REFUSED, NOTIMP, NXDOMAIN, or an address. */
    const lookUp = async (from: string, name: string, type = 'A') => {
      const r = await rt.cpln.run(['workload', 'exec', from, '--org', 'acme', '--gvc', 'web', '--location', LOCATION, '--', '/bin/busybox', 'nslookup', `-type=${type}`, name], { timeoutMs: 60_000 });
      return /: (REFUSED|NOTIMP|NXDOMAIN|SERVFAIL)\b/.exec(r.stdout)?.[1] ?? /Address: (10\.[\d.]+)$/m.exec(r.stdout.split(/\n\n/).slice(1).join('\n'))?.[1] ?? r.stdout;
    };
    // An MX question is answered NOTIMP by Keel itself once a lookup would be forwarded: nothing leaves this host.
    await h.apply(workload('client', image, { external: { outboundAllowHostname: [hostname] } }));
    await h.ready('client');
    assert.equal(await lookUp('client', hostname, 'MX'), 'NOTIMP', 'an allowed name is forwarded');
    assert.equal(await lookUp('client', 'example.com'), 'REFUSED', 'a name it may not reach is not');
    assert.equal(await lookUp('client', `x.${hostname}`), 'REFUSED', 'nor a name under the allowed one');
    // No egress at all (server's firewall says nothing of outbound): no outside name, of any type.
    assert.equal(await lookUp('server', 'example.com'), 'REFUSED');
    assert.equal(await lookUp('server', hostname, 'MX'), 'REFUSED');
    // Its own names still resolve.
    assert.match(await lookUp('server', 'client.web.cpln.local'), /^10\./);
    // Egress by CIDR: any name.
    await h.apply(workload('client', image, { external: { outboundAllowCIDR: [`${listener}/32`] } }));
    await h.ready('client');
    await waitFor('client to be let look up any name', () => lookUp('client', 'example.com', 'MX'), (v) => v === 'NOTIMP', 30_000);
  });

  test('traffic routed towards the bridge from another interface is refused at once, whatever the replica allows', async () => {
    await listenerUp(netns);
    const subnet = (rt.keel.config as { runtimeSubnet: string }).runtimeSubnet;
    await h.apply(workload('server', image, { external: { outboundAllowCIDR: ['0.0.0.0/0'] }, internal: { inboundAllowType: 'same-org' } }));
    await h.ready('server');
    const target = await waitFor('server to have one ready replica', async () => h.addressOf('server'), (a) => a !== undefined, 30_000);
    execFileSync('ip', ['-n', netns, 'route', 'replace', subnet, 'via', outside!.host]);
    const started = Date.now();
    const r = spawnSync('ip', ['netns', 'exec', netns, '/bin/busybox', 'nc', '-w', '5', target!, '8080'], { input: 'GET /cgi-bin/who HTTP/1.0\r\n\r\n', encoding: 'utf8' });
    const ms = Date.now() - started;
    assert.doesNotMatch(r.stdout, /replica=/, 'the server was reached from outside the bridge');
    assert.match(r.stderr, /can't connect|refused|unreachable/i, r.stderr);
    assert.ok(ms < REFUSED_WITHIN_MS, `refused after ${ms} ms`);
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
  let image: string;
  let outside: ReturnType<typeof outsideListener> | undefined;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-firewall-open-'));
    image = busyboxImage(work, 'web', SERVE, CGI);
    outside = outsideListener(work, 'o');
    rt = await startRuntimeKeel({ settings: { firewall: 'open' } });
    const h = await setup(rt, work);
    await h.apply(workload('api', image));
    await h.apply(workload('client', image));
    await Promise.all([h.ready('api'), h.ready('client')]);
  });
  after(async () => {
    outside?.close();
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

  test("a new replica's first connection out, made the moment it starts, goes through", async () => {
    await listenerUp(outside!.netns);
    const h = await setup(rt, work);
    // The container's first act: one call out, its answer kept where the test reads it.
    const first = `printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${outside!.address} 9180 > /first 2>&1; echo "rc=$?" >> /first; exec sleep 1000000`;
    const spec = workload('early', image);
    (spec.spec.containers[0] as Record<string, unknown>).command = '/bin/sh';
    (spec.spec.containers[0] as Record<string, unknown>).args = ['-c', first];
    delete (spec.spec.containers[0] as Record<string, unknown>).readinessProbe;
    await h.apply(spec);
    await h.ready('early');
    const r = await waitFor('the first call to be done', () => rt.cpln.run(['workload', 'exec', 'early', '--location', LOCATION, '--', 'cat', '/first'], { timeoutMs: 60_000 }), (x) => /rc=/.test(x.stdout), 30_000);
    assert.match(r.stdout, /^outside$/m, r.stdout);
    assert.match(r.stdout, /rc=0/);
  });
});
