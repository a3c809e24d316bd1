// Keel's ingress under the runc runtime: requests spread over the ready replicas, a response
// streams through as the replica writes it, and an Upgrade request becomes a byte pipe both ways.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startKeel, type TestKeel } from '../support/keel.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { runcSettings } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
const LOCATION = 'aws-us-east-2';

const CGI = {
  'www/cgi-bin/who': '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nhostname\n',
  'www/cgi-bin/slow': '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\necho first\nsleep 2\necho second\n',
  'www/cgi-bin/forwarded': '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nenv | grep ^HTTP_X_FORWARDED_ | sort\n',
};

describe('the ingress (KEEL_RUNTIME=runc)', { skip }, () => {
  let keel: TestKeel;
  let work: string;
  let ingressPort: number;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-ingress-'));
    const web = busyboxImage(work, 'web', ['/bin/sh', '-c', 'chmod +x /www/cgi-bin/*; exec httpd -f -p 8080 -h /www'], CGI);
    // Each connection is answered 101, then echoed: the request as the ingress passed it on, then the bytes that follow.
    const echo = busyboxImage(work, 'echo', ['/bin/sh', '-c', 'chmod +x /upgrade; exec nc -ll -p 8080 -e /upgrade'], {
      upgrade: '#!/bin/sh\nprintf "HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\\r\\n\\r\\n"\nexec cat\n',
    });
    keel = await startKeel('sqlite', 'acme', runcSettings());
    ingressPort = (keel.app.core.runtime as unknown as { ingressPort: number }).ingressPort;
    assert.equal((await keel.call('POST', '/org/acme/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } })).status, 201);
    const probe = { tcpSocket: { port: 8080 }, periodSeconds: 1 };
    for (const [name, image] of [['pages', web], ['echo', echo]]) {
      const created = await keel.call('POST', '/org/acme/gvc/web/workload', { name, spec: { type: 'standard', containers: [{ name: 'main', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: probe }], defaultOptions: { autoscaling: { minScale: 2 } } } });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      await waitFor(`${name} to be ready`, async () => (await keel.call('GET', `/org/acme/gvc/web/workload/${name}/deployment/${LOCATION}`)).body?.status, (s) => s?.ready === true, 60_000);
    }
  });
  after(async () => {
    await keel?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('requests take turns over the ready replicas', async () => {
    const replicas = (await keel.call('GET', `/org/acme/gvc/web/workload/pages/deployment/${LOCATION}`)).body.status.internal.replicas as string[];
    // A replica whose probe times out on a loaded machine is rightly left out for a while, so the
    // turns are judged over rounds of ten: in a round where every replica is ready, each answers
    // and none answers most of them. One such round of three is enough.
    const rounds: string[][] = [];
    const balanced = (seen: string[]) =>
      [...new Set(seen)].sort().join() === [...replicas].sort().join() && replicas.every((replica) => seen.filter((r) => r === replica).length <= 7);
    while (rounds.length < 3 && !rounds.some(balanced)) {
      const seen: string[] = [];
      for (let i = 0; i < 10; i++) seen.push((await (await fetch(`http://127.0.0.1:${ingressPort}/-workload/acme/web/pages/cgi-bin/who`)).text()).trim());
      rounds.push(seen);
    }
    assert.ok(rounds.some(balanced), `no round of ten took turns over ${replicas.join(', ')}: ${rounds.map((r) => r.join(' ')).join(' | ')}`);
  });

  test('a response streams through as the replica writes it', async () => {
    const begun = Date.now();
    const arrivals: Array<[number, string]> = [];
    await new Promise<void>((resolve, reject) => {
      httpRequest(`http://127.0.0.1:${ingressPort}/-workload/acme/web/pages/cgi-bin/slow`, (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => arrivals.push([Date.now() - begun, chunk]));
        res.on('end', () => resolve());
      })
        .on('error', reject)
        .end();
    });
    const first = arrivals.find(([, c]) => c.includes('first'))!;
    const second = arrivals.find(([, c]) => c.includes('second'))!;
    assert.ok(second[0] - first[0] >= 1500, `"first" came at ${first[0]} ms and "second" at ${second[0]} ms: the response was held back`);
  });

  test('an Upgrade request becomes a byte pipe to the replica', async () => {
    const socket = connect(ingressPort, '127.0.0.1');
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (got += chunk));
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('GET /-workload/acme/web/echo/chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n');
    await waitFor('the echoed request', async () => got, (g) => g.startsWith('HTTP/1.1 101') && g.includes('GET /chat HTTP/1.1'), 10_000);
    socket.write('ping over the pipe\n');
    await waitFor('the echoed bytes', async () => got, (g) => g.includes('ping over the pipe\n'), 10_000);
    socket.destroy();
  });

  test('X-Forwarded-* name the real client, whatever the client sent, upgrades included', async () => {
    const forged = { 'x-forwarded-for': '1.2.3.4', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https' };
    const plain = await (await fetch(`http://127.0.0.1:${ingressPort}/-workload/acme/web/pages/cgi-bin/forwarded`, { headers: forged })).text();
    assert.equal(plain, `HTTP_X_FORWARDED_FOR=127.0.0.1\nHTTP_X_FORWARDED_HOST=127.0.0.1:${ingressPort}\nHTTP_X_FORWARDED_PROTO=http\n`);

    const socket = connect(ingressPort, '127.0.0.1');
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (got += chunk));
    await new Promise((resolve) => socket.once('connect', resolve));
    const lines = Object.entries(forged).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    socket.write(`GET /-workload/acme/web/echo/chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n${lines}\r\n`);
    // The echo replica sends back the request as the ingress passed it on.
    const echoed = await waitFor('the echoed request', async () => got, (g) => g.includes('GET /chat HTTP/1.1') && g.slice(g.indexOf('GET /chat')).includes('\r\n\r\n'), 10_000);
    socket.destroy();
    const request = echoed.slice(echoed.indexOf('GET /chat'));
    const values = (name: string) => [...request.matchAll(new RegExp(`^${name}: (.*)\r$`, 'gmi'))].map((m) => m[1]);
    assert.deepEqual(values('x-forwarded-for'), ['127.0.0.1'], request);
    assert.deepEqual(values('x-forwarded-host'), ['x'], request);
    assert.deepEqual(values('x-forwarded-proto'), ['http'], request);
  });
});
