// Workloads find each other by name inside their replicas, as the hosted platform's
// service-to-service guide says: `WORKLOAD.GVC.cpln.local` (or the short name, through the search
// list) reaches the ready replicas, `REPLICA.WORKLOAD.GVC.cpln.local` one stateful replica. All
// through the real cpln CLI, busybox's own resolver and wget in real replicas. Another org's names
// never resolve, names go with their workload, and malformed packets or a flood from a replica
// leave the DNS server answering.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as packet from 'dns-packet';
import { toolMissing } from '../support/registry-tools.js';
import { busyboxImage, leftovers, runtimeMissing, testSubnet } from '../support/runtime.js';
import { LOCATION, secondOrg, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { scopeOf } from '../../src/runtime/runc.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing() || toolMissing('skopeo');
const gateway = () => testSubnet().replace(/\.0\/\d+$/, '.1');

describe('names of workloads inside replicas (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let otherImage: string;

  const apply = async (profile: string, name: string, type: string, replicas: number) => {
    const file = join(work, `${profile}-${name}.json`);
    const spec = {
      type,
      containers: [{ name: 'main', image: profile === 'other' ? otherImage : image, ports: [{ number: 8080, protocol: 'http' }] }],
      defaultOptions: { autoscaling: { minScale: replicas, maxScale: replicas } },
    };
    writeFileSync(file, JSON.stringify({ kind: 'workload', name, spec }));
    await rt.run(['apply', '--file', file, '--profile', profile]);
  };
  const deployment = async (name: string, token?: string) =>
    (await rt.keel.call('GET', `/org/${token ? 'other' : 'acme'}/gvc/web/workload/${name}/deployment/${LOCATION}`, undefined, token ? { token } : {})).body;
  const ready = (name: string, count: number, token?: string) =>
    waitFor(`${name} to run ${count} ready replicas`, () => deployment(name, token), (d) => d?.status?.ready === true && d.status.internal?.replicas?.length === count, 90_000);
  const exec = (workload: string, replica: string, command: string[], profile = 'keel') =>
    rt.cpln.run(['workload', 'exec', workload, '--location', LOCATION, '--replica', replica, '--profile', profile, '--', ...command], { timeoutMs: 60_000 });
  let webReplica: string;
  const fromWeb = (...command: string[]) => exec('web', webReplica, command);

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-names-'));
    image = busyboxImage(work, 'serve', ['/bin/sh', '-c', 'mkdir -p /www && echo "$CPLN_NAME $CPLN_REPLICA" > /www/index.html && exec httpd -f -p 8080 -h /www']);
    rt = await startRuntimeKeel();
    const other = await secondOrg(rt, 'other', image);
    const otherToken = other.token;
    otherImage = other.image!;
    await apply('keel', 'api', 'standard', 2);
    await apply('keel', 'web', 'standard', 1);
    await apply('keel', 'db', 'stateful', 2);
    await apply('other', 'secret', 'standard', 1);
    await ready('api', 2);
    webReplica = (await ready('web', 1)).status.internal.replicas[0];
    await ready('db', 2);
    await ready('secret', 1, otherToken);
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('one workload calls another by its name and by the short name; the name holds every ready replica', async () => {
    const conf = await fromWeb('cat', '/etc/resolv.conf');
    assert.equal(conf.stdout, `nameserver ${gateway()}\nsearch web.cpln.local cpln.local\noptions ndots:2 timeout:2 attempts:2`);
    const full = await fromWeb('wget', '-qO-', 'http://api.web.cpln.local:8080/');
    assert.equal(full.code, 0, full.stdout);
    assert.match(full.stdout, /^api api-/);
    const short = await fromWeb('wget', '-qO-', 'http://api:8080/');
    assert.equal(short.code, 0, short.stdout);
    assert.match(short.stdout, /^api api-/);
    const looked = await fromWeb('/bin/busybox', 'nslookup', 'api.web.cpln.local');
    assert.equal(looked.code, 0, looked.stdout);
    const addresses = [...looked.stdout.matchAll(/Address: (10\.[\d.]+)$/gm)].map((m) => m[1]).filter((a) => a !== gateway());
    assert.equal(new Set(addresses).size, 2, looked.stdout);
    // AAAA of a known name: no address, and no error either.
    const six = await fromWeb('/bin/busybox', 'nslookup', '-type=AAAA', 'api.web.cpln.local');
    assert.doesNotMatch(six.stdout, /NXDOMAIN/);
  });

  test("a stateful replica's name (as status.replicaInternalNames reports it) reaches that replica alone", async () => {
    const workload = (await rt.keel.call('GET', '/org/acme/gvc/web/workload/db')).body;
    assert.equal(workload.status.internalName, 'db.web.cpln.local');
    assert.deepEqual([...workload.status.replicaInternalNames].sort(), ['db-0.db.web.cpln.local', 'db-1.db.web.cpln.local']);
    for (const name of workload.status.replicaInternalNames as string[]) {
      for (let i = 0; i < 3; i++) {
        const page = await fromWeb('wget', '-qO-', `http://${name}:8080/`);
        assert.equal(page.stdout, `db ${name.split('.')[0]}`);
      }
    }
    const one = await fromWeb('/bin/busybox', 'nslookup', 'db-1.db.web.cpln.local');
    assert.equal([...one.stdout.matchAll(/Address: (10\.[\d.]+)$/gm)].filter((m) => m[1] !== gateway()).length, 1, one.stdout);
    assert.match((await fromWeb('/bin/busybox', 'nslookup', 'db-7.db.web.cpln.local')).stdout, /NXDOMAIN/);
  });

  test("another org's workload name does not resolve from a replica; in its own org it does", async () => {
    const own = await waitFor(
      "secret's replica",
      async () => JSON.parse((await rt.run(['workload', 'get-replicas', 'secret', '--location', LOCATION, '--profile', 'other', '--output', 'json'])).stdout).items as string[],
      (items) => items.length === 1,
    );
    const inside = await exec('secret', own[0], ['wget', '-qO-', 'http://secret.web.cpln.local:8080/'], 'other');
    assert.match(inside.stdout, /^secret secret-/);
    const across = await fromWeb('/bin/busybox', 'nslookup', 'secret.web.cpln.local');
    assert.notEqual(across.code, 0);
    assert.match(across.stdout, /NXDOMAIN/);
    const wget = await fromWeb('wget', '-qO-', '-T', '5', 'http://secret.web.cpln.local:8080/');
    // Busybox's static wget fails (with "bad address", or a crash in glibc's static resolver): no page either way.
    assert.notEqual(wget.code, 0);
    assert.doesNotMatch(wget.stdout, /secret/);
  });

  test('malformed, huge and flooding queries from a replica get FORMERR or nothing, and names keep resolving', async () => {
    // The host's side of the bridge is no replica: a well-formed query from it is refused, a malformed one is FORMERR, a
    // runt or oversized one is dropped.
    const udp = createSocket('udp4');
    await new Promise<void>((r) => udp.bind(0, gateway(), () => r()));
    const replies: Buffer[] = [];
    udp.on('message', (m) => replies.push(m));
    const send = (b: Buffer) => new Promise<void>((r) => udp.send(b, 53, gateway(), () => r()));
    const garbage = Buffer.alloc(40, 0xff);
    garbage.writeUInt16BE(0x1234, 0);
    garbage[2] = 0x01;
    await send(garbage);
    await send(Buffer.from([1, 2, 3]));
    await send(Buffer.alloc(60_000, 7));
    const query = packet.encode({ type: 'query', id: 0x4242, flags: packet.RECURSION_DESIRED, questions: [{ type: 'A', name: 'api.web.cpln.local' }] });
    await send(query);
    await waitFor('the replies', async () => replies.length, (n) => n >= 2, 5_000);
    const decoded = replies.map((r) => ({ id: r.readUInt16BE(0), rcode: r.readUInt16BE(2) & 0xf }));
    assert.deepEqual(decoded.sort((a, b) => a.id - b.id), [{ id: 0x1234, rcode: 1 }, { id: 0x4242, rcode: 5 }]);
    udp.close();
    // TCP: a length past any query closes the connection at once.
    const closed = await new Promise<boolean>((resolve) => {
      const s = connect(53, gateway(), () => s.write(Buffer.from([0xff, 0xff, 1, 2, 3])));
      s.on('close', () => resolve(true));
      s.on('error', () => undefined);
      setTimeout(() => resolve(false), 5_000).unref();
    });
    assert.ok(closed, 'an oversized TCP query is cut off');
    // A flood from a replica's own address (a script in its network namespace): 300 TCP connections left open, and
    // datagrams as fast as the script can send them, mostly real queries with garbage and oversized ones mixed in, until
    // the queries outrun the per-source rate (1 000 a second) by 2 000 whatever the machine's speed. The answers stay
    // within the rate, and another replica's lookups meanwhile still resolve.
    const namespaces = leftovers(rt.keel.config.dataDir).netns;
    assert.ok(namespaces.length > 0);
    const flood = `
      const dgram = require('node:dgram'); const net = require('node:net');
      const s = dgram.createSocket('udp4'); let replies = 0; let lastReply = 0; s.on('message', () => { replies++; lastReply = Date.now(); });
      const q = Buffer.from('${query.toString('hex')}', 'hex'); const junk = Buffer.alloc(30, 0xee); const big = Buffer.alloc(9000, 1);
      const conns = []; for (let i = 0; i < 300; i++) { const c = net.connect(53, '${gateway()}'); c.on('error', () => {}); conns.push(c); }
      let sent = 0, queries = 0; const started = Date.now();
      const outrun = () => queries > 1000 * (Math.ceil((Date.now() - started) / 1000) + 1) + 2000;
      const tick = setInterval(() => {
        for (let i = 0; i < 100; i++, sent++) { const b = sent % 100 === 99 ? big : sent % 10 === 9 ? junk : q; if (b === q) queries++; s.send(b, 53, '${gateway()}'); }
        if (!outrun() && Date.now() - started < 20000) return;
        clearInterval(tick);
        setTimeout(() => { console.log(JSON.stringify({ replies, queries, ms: Math.max(Date.now() - started - 1000, lastReply - started) })); process.exit(0); }, 1000);
      }, 10);`;
    const flooding = new Promise<string>((resolve, reject) =>
      execFile('ip', ['netns', 'exec', namespaces[0], process.execPath, '-e', flood], { timeout: 60_000 }, (err, stdout) => (err ? reject(err) : resolve(stdout))),
    );
    const during = await exec('db', 'db-0', ['wget', '-qO-', 'http://api.web.cpln.local:8080/']);
    assert.match(during.stdout, /^api api-/);
    const { replies: answered, queries, ms } = JSON.parse(await flooding) as { replies: number; queries: number; ms: number };
    console.log(`# flood: ${queries} queries, answers over ${ms} ms, ${answered} answered`);
    // The rate's windows are whole seconds: sending and answering span at most ceil(ms / 1000) + 1 of them.
    const bound = 1_000 * (Math.ceil(ms / 1000) + 1);
    assert.ok(queries > bound, `the flood (${queries} queries) outruns the rate`);
    assert.ok(answered <= bound, `replies ${answered} within the per-source rate`);
    assert.match((await fromWeb('wget', '-qO-', 'http://api.web.cpln.local:8080/')).stdout, /^api api-/);
  });

  test("the gateway keeps its hardware address while replicas come and go, so another replica's lookups go on at once", async () => {
    const ports = () => readdirSync(`/sys/class/net/kb${scopeOf(rt.keel.config.dataDir)}/brif`);
    const earlier = new Set(ports());
    await apply('keel', 'brief', 'standard', 1);
    await ready('brief', 1);
    const added = ports().filter((p) => !earlier.has(p));
    assert.equal(added.length, 1, 'one port for the new replica');
    // The lowest hardware address there is: a bridge that took its ports' lowest as its own would
    // take this one, and lose it with the replica.
    execFileSync('ip', ['link', 'set', 'dev', added[0], 'address', '02:00:00:00:00:01']);
    await apply('keel', 'watcher', 'standard', 1);
    const watcher = (await ready('watcher', 1)).status.internal.replicas[0];
    const lookup = () => exec('watcher', watcher, ['/bin/busybox', 'nslookup', 'api.web.cpln.local']);
    assert.equal((await lookup()).code, 0, 'the watcher has learned where the gateway is');
    await rt.run(['workload', 'delete', 'brief']);
    await waitFor("brief's port to go", async () => ports(), (now) => !now.includes(added[0]), 60_000);
    // Once, with no retry: what the watcher's ARP cache holds for the gateway still reaches it.
    const looked = await lookup();
    assert.equal(looked.code, 0, looked.stdout);
    assert.doesNotMatch(looked.stdout, /NXDOMAIN|timed out/);
    await rt.run(['workload', 'delete', 'watcher']);
  });

  test('a name stops resolving once its workload is scaled to 0, and again once it is deleted', async () => {
    await apply('keel', 'db', 'stateful', 0);
    await waitFor(
      'db-0.db.web.cpln.local to stop resolving',
      () => fromWeb('/bin/busybox', 'nslookup', 'db-0.db.web.cpln.local'),
      (r) => /NXDOMAIN/.test(r.stdout),
      60_000,
    );
    await rt.run(['workload', 'delete', 'api']);
    await waitFor('api.web.cpln.local to stop resolving', () => fromWeb('/bin/busybox', 'nslookup', 'api.web.cpln.local'), (r) => /NXDOMAIN/.test(r.stdout), 60_000);
    const gone = await fromWeb('wget', '-qO-', '-T', '5', 'http://api.web.cpln.local:8080/');
    assert.notEqual(gone.code, 0);
    assert.doesNotMatch(gone.stdout, /api api-/);
  });
});
