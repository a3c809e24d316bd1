// IPv4 forwarding for replicas' egress is turned on per interface, never host-wide, and the host
// forwards nothing new between unrelated interfaces because of Keel. Run in network namespaces of
// the test's own, so the "host" starts with forwarding off whatever the real host does: R plays
// the host, with Keel's firewall (firewall.ts, in a process inside R) and three interfaces: `ra`
// to a replica (A, the bridge's part), `rb` to an outside listener (B), `rc` to an unrelated
// network (C). Only these namespaces' addresses are ever targets.
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { runtimeMissing } from '../support/runtime.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
/** A refused connection fails within this long (a reset, not a timeout). */
const REFUSED_WITHIN_MS = 2_000;
const FIREWALL = resolve('src/runtime/firewall.ts');

describe('forwarding for egress: per interface, and nothing new between unrelated interfaces', { skip }, () => {
  const tag = `kfd${process.pid % 100000}`;
  const ns = { r: `${tag}r`, a: `${tag}a`, b: `${tag}b`, c: `${tag}c` };
  const third = (process.pid % 200) + 20;
  const net = (n: number) => `10.${215 + n}.${third}`;
  let work: string;
  let marks: string;
  let firewall: ChildProcess | undefined;
  let lines: AsyncIterator<string>;
  const listeners: ChildProcess[] = [];

  const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const sysctl = (key: string) => execFileSync('ip', ['netns', 'exec', ns.r, 'cat', `/proc/sys/net/ipv4/${key}`], { encoding: 'utf8' }).trim();
  /** A GET from namespace `from` to `to`:9000: what it printed, and how long it took. */
  const get = (from: string, to: string) => {
    const started = Date.now();
    const r = spawnSync('ip', ['netns', 'exec', from, '/bin/busybox', 'nc', '-w', '5', to, '9000'], { input: 'GET /index.html HTTP/1.0\r\n\r\n', encoding: 'utf8' });
    return { out: r.stdout, err: r.stderr, ms: Date.now() - started };
  };
  const refused = (r: ReturnType<typeof get>) => {
    assert.doesNotMatch(r.out, /outside/, 'the call went through');
    assert.match(r.err, /can't connect|refused|unreachable/i, r.err);
    assert.ok(r.ms < REFUSED_WITHIN_MS, `refused after ${r.ms} ms`);
  };
  /** Tells the firewall process `what` and waits for its answer line. */
  const ask = async (what: string) => {
    firewall!.stdin!.write(`${what}\n`);
    const line = await lines.next();
    assert.ok(!line.done, 'the firewall process ended');
    return JSON.parse(line.value);
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-forwarding-'));
    marks = join(work, 'marks');
    for (const n of Object.values(ns)) ip('netns', 'add', n);
    // The "host" forwards nothing to begin with (a new namespace takes the real host's settings).
    execFileSync('ip', ['netns', 'exec', ns.r, 'sh', '-c', 'echo 0 > /proc/sys/net/ipv4/conf/all/forwarding; echo 0 > /proc/sys/net/ipv4/conf/default/forwarding']);
    ip('-n', ns.r, 'link', 'set', 'lo', 'up');
    for (const [i, side] of (['a', 'b', 'c'] as const).entries()) {
      ip('-n', ns.r, 'link', 'add', `r${side}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns[side]);
      ip('-n', ns.r, 'addr', 'add', `${net(i)}.1/24`, 'dev', `r${side}`);
      ip('-n', ns.r, 'link', 'set', `r${side}`, 'up');
      ip('-n', ns[side], 'addr', 'add', `${net(i)}.2/24`, 'dev', 'eth0');
      ip('-n', ns[side], 'link', 'set', 'eth0', 'up');
      ip('-n', ns[side], 'link', 'set', 'lo', 'up');
      ip('-n', ns[side], 'route', 'add', 'default', 'via', `${net(i)}.1`);
    }
    for (const side of ['b', 'c'] as const) {
      const www = join(work, side);
      mkdirSync(www);
      writeFileSync(join(www, 'index.html'), 'outside\n');
      listeners.push(spawn('ip', ['netns', 'exec', ns[side], '/bin/busybox', 'httpd', '-f', '-p', '9000', '-h', www], { stdio: 'ignore' }));
    }
    // Keel's firewall, in R: one replica (A's address) on the "bridge" ra, allowed out to B alone.
    const peer = { org: 'acme', gvc: 'web', workload: 'client', replica: 'client-0', address: `${net(0)}.2`, ready: true, spec: { firewallConfig: { external: { outboundAllowCIDR: [`${net(1)}.2/32`] } } } };
    const script = `
      const { KernelFirewall } = await import(${JSON.stringify(FIREWALL)});
      const { createInterface } = await import('node:readline');
      const fw = new KernelFirewall({ scope: 'fwdtest', bridge: 'ra', subnet: '${net(0)}.0/24', mode: 'enforce', dir: ${JSON.stringify(work)}, marks: ${JSON.stringify(marks)}, onError: (err) => console.log(JSON.stringify({ error: String(err) })) });
      for await (const line of createInterface({ input: process.stdin })) {
        if (line === 'egress') { fw.refresh([${JSON.stringify(peer)}]); await fw.settled(); }
        if (line === 'stop') await fw.stop();
        console.log(JSON.stringify({ done: line }));
        if (line === 'stop') process.exit(0);
      }`;
    firewall = spawn('ip', ['netns', 'exec', ns.r, process.execPath, '--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
    lines = createInterface({ input: firewall.stdout! })[Symbol.asyncIterator]();
    for (const side of ['b', 'c'] as const) {
      await waitFor(`the listener in ${side}`, async () => execFileSync('ip', ['netns', 'exec', ns[side], '/bin/busybox', 'wget', '-q', '-O', '-', 'http://127.0.0.1:9000/index.html'], { encoding: 'utf8' }), (out) => out === 'outside\n');
    }
  });
  after(() => {
    firewall?.kill('SIGKILL');
    for (const l of listeners) l.kill('SIGKILL');
    for (const n of Object.values(ns)) spawnSync('ip', ['netns', 'del', n]);
    rmSync(work, { recursive: true, force: true });
  });

  test('egress by CIDR turns forwarding on for the bridge and the uplink only; other forwarding is refused; stop turns it off', async () => {
    assert.deepEqual(await ask('egress'), { done: 'egress' });
    // Not host-wide: only the bridge (the replica's traffic enters there) and the uplink (its answers enter there).
    assert.equal(sysctl('ip_forward'), '0');
    assert.equal(sysctl('conf/all/forwarding'), '0');
    assert.equal(sysctl('conf/ra/forwarding'), '1');
    assert.equal(sysctl('conf/rb/forwarding'), '1');
    assert.equal(sysctl('conf/rc/forwarding'), '0');
    assert.deepEqual(readdirSync(join(marks, 'rb')), ['fwdtest']);

    // The replica reaches what it may, and nothing else.
    assert.match(get(ns.a, `${net(1)}.2`).out, /^outside$/m);
    refused(get(ns.a, `${net(2)}.2`));
    // Unrelated interfaces: a new connection in through the uplink Keel turned on goes nowhere, nor one towards the replica.
    refused(get(ns.b, `${net(2)}.2`));
    refused(get(ns.b, `${net(0)}.2`));
    // The interface Keel left alone still forwards nothing (the kernel drops it, as before Keel).
    assert.doesNotMatch(get(ns.c, `${net(1)}.2`).out, /outside/);

    assert.deepEqual(await ask('stop'), { done: 'stop' });
    assert.equal(sysctl('conf/rb/forwarding'), '0', 'the uplink Keel turned on is off again');
    assert.equal(sysctl('ip_forward'), '0');
    assert.equal(existsSync(join(marks, 'rb')), false);
  });
});
