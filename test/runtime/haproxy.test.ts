// KEEL_INGRESS_PROXY=haproxy: HAProxy, started by Keel, serves the ingress port. A workload
// endpoint's traffic goes from HAProxy straight to the ready replicas (HAProxy's own stats show
// it, and Keel's autoscaler counts it); the path form, domains and requests Keel must hold go on
// to Keel's ingress, which answers them as it does alone. Misuse: a forged client address, a
// replica stopped under load, a replica that drops a POST unanswered, a malformed request.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ask } from '../../src/runtime/haproxy.js';
import { busyboxImage, haproxies, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing({ haproxy: true });

// Echoes what reached the replica: which replica and the request's headers (busybox httpd hands
// a CGI every header as HTTP_*); `slow` answers after 3 s.
const CGI = {
  'www/cgi-bin/echo': '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\necho "replica=$(hostname)"\nenv | grep ^HTTP_ | sort\n',
  'www/cgi-bin/slow': '#!/bin/sh\nsleep 3\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nhostname\n',
  // Notes the request, then kills the httpd process serving the connection: it closes unanswered.
  'www/cgi-bin/crash': '#!/bin/sh\necho "$REQUEST_METHOD" >> /tmp/hits\nkill -9 $PPID\n',
};

describe('HAProxy in front of the ingress (KEEL_INGRESS_PROXY=haproxy)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  const apply = async (workload: Record<string, unknown>) => {
    const file = join(work, `${String(workload.name)}.json`);
    writeFileSync(file, JSON.stringify({ kind: 'workload', gvc: 'web', ...workload }));
    await rt.run(['apply', '--file', file]);
  };
  const container = () => ({ name: 'main', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 } });
  /** The workload's endpoint Host, as `cpln workload get` shows it. */
  const hostOf = async (workload: string) => new URL(JSON.parse((await rt.run(['workload', 'get', workload, '--output', 'json'])).stdout).status.endpoint).host;
  /** Requests HAProxy has sent to each backend: `keel` (Keel's ingress) and one per served endpoint. */
  const forwarded = async () => {
    const csv = await ask(join(rt.keel.config.dataDir, 'runtime', 'haproxy', 'stats.sock'), 'show stat -1 2 -1');
    const [header, ...rows] = csv.trim().split('\n');
    const names = header.replace(/^# /, '').split(',');
    const total = new Map<string, number>();
    for (const row of rows) {
      const f = row.split(',');
      total.set(f[names.indexOf('pxname')], Number(f[names.indexOf('stot')]));
    }
    const keel = total.get('keel') ?? 0;
    total.delete('keel');
    return { keel, replicas: [...total.values()].reduce((a, b) => a + b, 0) };
  };
  /** Waits until the HAProxy serving now (after its last reload) sends the endpoint's requests to `replicas` replicas. */
  const served = async (host: string, replicas: number) => {
    const servers = async () => {
      const csv = await ask(join(rt.keel.config.dataDir, 'runtime', 'haproxy', 'stats.sock'), 'show stat -1 4 -1');
      const map = await ask(join(rt.keel.config.dataDir, 'runtime', 'haproxy', 'stats.sock'), `show map ${join(rt.keel.config.dataDir, 'runtime', 'haproxy', 'hosts.map')}`);
      const backend = / (\S+) (\S+)$/m.exec(map.split('\n').find((l) => l.includes(` ${host.split(':')[0]} `)) ?? '')?.[2];
      return backend === undefined ? 0 : csv.split('\n').filter((l) => l.startsWith(`${backend},`)).length;
    };
    await waitFor(`HAProxy to serve ${host} with ${replicas} replicas`, servers, (n) => n === replicas, 30_000);
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-haproxy-'));
    image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'chmod +x /www/cgi-bin/*; exec httpd -f -p 8080 -h /www'], CGI);
    rt = await startRuntimeKeel({ cliReachesIngress: true, ingressProxy: 'haproxy' });
    await apply({ name: 'api', spec: { type: 'standard', containers: [container()], defaultOptions: { autoscaling: { minScale: 2, maxScale: 2 } } } });
    await waitFor('api to be ready', async () => (await rt.deployment('api'))?.status, (s) => s?.ready === true, 90_000);
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test("an endpoint's requests go from HAProxy straight to both replicas; the path form reaches Keel's ingress", async () => {
    const host = await hostOf('api');
    await served(host, 2);
    const before = await forwarded();
    const seen = new Set<string>();
    for (let i = 0; i < 10; i++) {
      const r = await rt.get('/cgi-bin/echo', host);
      assert.equal(r.status, 200, r.body);
      seen.add(/^replica=(.*)$/m.exec(r.body)![1]);
    }
    const after = await forwarded();
    assert.deepEqual([after.replicas - before.replicas, after.keel - before.keel], [10, 0]);
    assert.equal(seen.size, 2, `both replicas answered: ${[...seen].join(', ')}`);

    const byPath = await rt.get('/-workload/acme/web/api/cgi-bin/echo');
    assert.equal(byPath.status, 200, byPath.body);
    assert.equal((await forwarded()).keel - after.keel, 1);
  });

  test("X-Forwarded-For names only the client's real address either way, upgrades included, and a client cannot forge what HAProxy tells Keel", async () => {
    const host = await hostOf('api');
    const forged = { 'x-forwarded-for': '1.2.3.4', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https', 'x-keel-client': '6.6.6.6' };
    for (const [path, via] of [['/cgi-bin/echo', host], ['/-workload/acme/web/api/cgi-bin/echo', undefined]] as const) {
      const r = await rt.get(path, via, forged);
      assert.equal(r.status, 200, r.body);
      assert.match(r.body, /^HTTP_X_FORWARDED_FOR=127\.0\.0\.1$/m, `${path}: ${r.body}`);
      assert.match(r.body, /^HTTP_X_FORWARDED_PROTO=http$/m);
      assert.doesNotMatch(r.body, /1\.2\.3\.4|6\.6\.6\.6|evil\.example|HTTP_X_KEEL_CLIENT/);
      // The same request asking for a WebSocket (the replica answers it as a plain request).
      const upgraded = await rawRequest(rt.ingressPort, path, via ?? '127.0.0.1', { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13', ...forged });
      assert.match(upgraded, /^HTTP_X_FORWARDED_FOR=127\.0\.0\.1\r?$/m, `${path} with Upgrade: ${upgraded}`);
      assert.doesNotMatch(upgraded, /1\.2\.3\.4|6\.6\.6\.6|evil\.example|HTTP_X_KEEL_CLIENT/);
    }
    // Only HAProxy reaches Keel's own ingress: its socket, and the directory it is in, are closed
    // to everyone but root and HAProxy's group; HAProxy's workers, which read what clients send, are not root.
    const dir = join(rt.keel.config.dataDir, 'runtime', 'haproxy');
    const socket = /^ {2}server keel (\S+)$/m.exec(readFileSync(join(dir, 'haproxy.cfg'), 'utf8'))![1];
    for (const path of [dir, dirname(socket), socket]) assert.equal(statSync(path).mode & 0o007, 0, `${path} is closed to others`);
    const master = readFileSync(join(dir, 'haproxy.pid'), 'utf8').trim();
    const workers = haproxies(rt.keel.config.dataDir)
      .map((line) => line.split(' ')[0])
      .filter((pid) => readFileSync(`/proc/${pid}/status`, 'utf8').includes(`\nPPid:\t${master}\n`));
    assert.ok(workers.length > 0, 'HAProxy has a worker');
    for (const pid of workers) assert.doesNotMatch(readFileSync(`/proc/${pid}/status`, 'utf8'), /^Uid:\t0\t/m, `worker ${pid} runs as root`);
  });

  test('a replica stopped under traffic is replaced, and no request to the endpoint fails meanwhile', async () => {
    const host = await hostOf('api');
    const replicas = JSON.parse((await rt.run(['workload', 'get-replicas', 'api', '--location', LOCATION, '--output', 'json'])).stdout).items as string[];
    assert.equal(replicas.length, 2);
    const statuses: number[] = [];
    let stop = false;
    const load = (async () => {
      while (!stop) statuses.push((await rt.get('/cgi-bin/echo', host)).status);
    })();
    await rt.run(['workload', 'replica', 'stop', 'api', '--location', LOCATION, '--replica-name', replicas[0]]);
    await waitFor('the stopped replica to go down', () => rt.deployment('api'), (d) => d.status.ready === false || d.status.versions[0].containers.main.resources.replicasReady < 2, 30_000);
    await waitFor('the replica to be back and ready', () => rt.deployment('api'), (d) => d.status.versions[0].containers.main.resources.replicasReady === 2, 60_000);
    // A loaded machine may take few requests while it replaces the replica: the load runs on until it has made enough.
    await waitFor('some traffic', async () => statuses.length, (n) => n > 10, 30_000);
    stop = true;
    await load;
    assert.ok(statuses.length > 10, `${statuses.length} requests were made`);
    assert.deepEqual([...new Set(statuses)], [200], `statuses: ${statuses.join(' ')}`);
  });

  test('traffic HAProxy serves counts for autoscaling: concurrent requests scale a workload up', async () => {
    await apply({ name: 'busy', spec: { type: 'standard', containers: [container()], defaultOptions: { autoscaling: { metric: 'concurrency', target: 1, minScale: 1, maxScale: 3 } } } });
    await waitFor('busy to be ready', async () => (await rt.deployment('busy'))?.status, (s) => s?.ready === true, 90_000);
    const host = await hostOf('busy');
    await served(host, 1);
    // Six clients, each asking again as soon as it is answered, until the workload has scaled up.
    let done = false;
    const statuses = new Set<number>();
    const clients = Array.from({ length: 6 }, async () => {
      while (!done) statuses.add((await rt.get('/cgi-bin/slow', host)).status);
    });
    let scaled: number;
    try {
      scaled = await waitFor('more replicas', async () => ((await rt.deployment('busy'))?.status?.internal?.replicas ?? []).length, (n) => n > 1, 30_000);
    } finally {
      done = true;
      await Promise.all(clients);
    }
    assert.deepEqual([...statuses], [200]);
    assert.ok(scaled <= 3, `${scaled} replicas: never more than maxScale`);
  });

  test('a POST a replica drops unanswered gets a 502 and is never sent twice; a GET is tried again', async () => {
    const host = await hostOf('api');
    const hits = async () => {
      const replicas = JSON.parse((await rt.run(['workload', 'get-replicas', 'api', '--location', LOCATION, '--output', 'json'])).stdout).items as string[];
      let all = '';
      for (const replica of replicas) all += (await rt.run(['workload', 'exec', 'api', '--location', LOCATION, '--replica', replica, '--', 'sh', '-c', 'cat /tmp/hits 2>/dev/null; rm -f /tmp/hits'])).stdout + '\n';
      return all.split('\n').filter(Boolean).sort();
    };
    await hits();
    const post = await rt.post('/cgi-bin/crash', host, 'order=1');
    assert.equal(post.status, 502, post.body);
    assert.equal(JSON.parse(post.body).status, 502);
    assert.deepEqual(await hits(), ['POST']);
    const get = await rt.get('/cgi-bin/crash', host);
    assert.equal(get.status, 502, get.body);
    assert.ok((await hits()).length > 1, 'the GET was sent again');
  });

  test("a WebSocket upgrade by the endpoint's Host becomes a byte pipe from HAProxy to the replica, and outlives a reload", async () => {
    // The replica answers each connection 101 (the accept for the key sent below), then echoes it.
    const pipe = busyboxImage(work, 'pipe', ['/bin/sh', '-c', 'chmod +x /upgrade; exec nc -ll -p 8080 -e /upgrade'], {
      upgrade: '#!/bin/sh\nprintf "HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\\r\\n\\r\\n"\nexec cat\n',
    });
    await apply({ name: 'pipe', spec: { type: 'standard', containers: [{ ...container(), image: pipe }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } });
    await waitFor('pipe to be ready', async () => (await rt.deployment('pipe'))?.status, (s) => s?.ready === true, 90_000);
    const host = await hostOf('pipe');
    await served(host, 1);
    const before = await forwarded();
    const socket = connect(rt.ingressPort, '127.0.0.1');
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (got += chunk));
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(`GET /chat HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`);
    await waitFor('the 101 and the echoed request', async () => got, (g) => g.startsWith('HTTP/1.1 101') && g.includes('GET /chat HTTP/1.1'), 10_000);
    socket.write('ping over the pipe\n');
    await waitFor('the echoed bytes', async () => got, (g) => g.includes('ping over the pipe\n'), 10_000);
    const after = await forwarded();
    assert.deepEqual([after.replicas - before.replicas, after.keel - before.keel], [1, 0]);

    // Another workload becoming ready reloads HAProxy: the open pipe is not cut.
    await apply({ name: 'later', spec: { type: 'standard', containers: [container()], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } });
    await waitFor('later to be ready', async () => (await rt.deployment('later'))?.status, (s) => s?.ready === true, 90_000);
    await served(await hostOf('later'), 1);
    socket.write('still open after a reload\n');
    await waitFor('the echo after the reload', async () => got, (g) => g.includes('still open after a reload\n'), 10_000);
    socket.destroy();
  });

  test('an HAProxy that dies is started again and serves the endpoint', async () => {
    const host = await hostOf('api');
    const pidFile = join(rt.keel.config.dataDir, 'runtime', 'haproxy', 'haproxy.pid');
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    process.kill(pid, 'SIGKILL');
    await waitFor('a new HAProxy', async () => Number(readFileSync(pidFile, 'utf8').trim()), (p) => p !== pid && existsSync(`/proc/${p}`), 10_000);
    const r = await waitFor('the endpoint to answer again', () => rt.get('/cgi-bin/echo', host).catch(() => ({ status: 0, body: '' })), (x) => x.status === 200, 10_000);
    assert.match(r.body, /^replica=api-/m);
  });

  test('a malformed request is answered 400 and its connection closed, not passed on or left hanging', async () => {
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(rt.ingressPort, '127.0.0.1');
      let got = '';
      socket.setEncoding('utf8');
      socket.on('data', (d: string) => (got += d));
      socket.on('end', () => resolve(got));
      socket.on('error', reject);
      socket.write('GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n');
    });
    assert.match(answer, /^HTTP\/1\.1 400 /);
  });
});

/** A request written on a socket of its own (so its Connection and Upgrade headers go as written); resolves with what came back once the echo CGI's output has. */
async function rawRequest(port: number, path: string, host: string, headers: Record<string, string>): Promise<string> {
  const socket = connect(port, '127.0.0.1');
  let got = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (got += chunk));
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
  try {
    return await waitFor('the echoed headers', async () => got, (g) => /HTTP_X_FORWARDED_PROTO=|^HTTP\/1\.1 [45]/m.test(g), 10_000);
  } finally {
    socket.destroy();
  }
}
