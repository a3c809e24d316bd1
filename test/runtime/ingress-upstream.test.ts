// The ingress's connections to a replica: kept alive from one request to the next, bounded per
// replica, and a replica that closes a kept-alive connection costs its client nothing. A plain
// HTTP server on the loopback stands in for the replica (no runc needed).
import assert from 'node:assert/strict';
import { Agent, createServer, request, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Ingress } from '../../src/runtime/ingress.js';

/** The workload these suites send traffic to admits every client (the firewall is firewall.test.ts's). */
const OPEN = { config: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } }, workload: 'web' };

describe("the ingress's connections to replicas", () => {
  let replica: Server;
  let ingress: Ingress;
  const connections = new Set<Socket>();
  let open = 0;
  let mostOpen = 0;
  let slow: Array<() => void> = [];

  before(async () => {
    replica = createServer((req, res) => {
      const answer = () => res.writeHead(200, { 'content-type': 'text/plain' }).end('hello\n');
      if (req.url === '/slow') slow.push(answer);
      else if (req.url === '/echo') {
        let body = '';
        req.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end(`${req.method} ${body}`));
      }
      else if (req.url === '/close') res.writeHead(200, { connection: 'close' }).end('bye\n');
      else if (req.url === '/cut') {
        // Promises 100 bytes, sends 4, then drops the connection.
        res.writeHead(200, { 'content-length': '100' });
        res.write('part', () => setTimeout(() => res.socket?.destroy(), 50));
      }
      else answer();
    });
    replica.on('connection', (socket: Socket) => {
      connections.add(socket);
      mostOpen = Math.max(mostOpen, ++open);
      socket.on('close', () => open--);
    });
    await new Promise<void>((resolve) => replica.listen(0, '127.0.0.1', resolve));
    const port = (replica.address() as AddressInfo).port;
    ingress = new Ingress((host, path) => (host === 'web-gvc' ? { key: 'web', targets: ['127.0.0.1'], port, path, holdMs: 0, firewall: OPEN } : undefined));
    await ingress.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await ingress.close();
    replica.closeAllConnections();
    await new Promise((resolve) => replica.close(resolve));
  });

  const get = (path: string, agent: Agent | false = false) =>
    new Promise<{ status: number; body: string; connection?: string }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: ingress.port, path, agent, headers: { host: 'web-gvc.localhost' } }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status: res.statusCode ?? 0, body, ...(agent ? { connection: res.headers.connection } : {}) }));
      });
      req.on('error', reject).end();
    });

  test("an answer the replica cuts short cuts the client's connection, rather than leave it waiting", async () => {
    const seen = await new Promise<{ body: string; complete: boolean }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the client was left waiting for the rest of the body')), 5_000);
      const req = request({ host: '127.0.0.1', port: ingress.port, path: '/cut', agent: false, headers: { host: 'web-gvc.localhost' } }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (c: string) => (body += c));
        res.on('error', () => undefined);
        res.on('close', () => {
          clearTimeout(timer);
          resolve({ body, complete: res.complete });
        });
      });
      req.on('error', () => undefined).end();
    });
    assert.deepEqual(seen, { body: 'part', complete: false });
  });

  test('requests one after another reuse one connection to the replica', async () => {
    connections.clear();
    // A new client connection for each request: what is kept alive is the ingress's own.
    for (let i = 0; i < 50; i++) assert.deepEqual(await get('/'), { status: 200, body: 'hello\n' });
    assert.equal(connections.size, 1);
  });

  test("a replica that closes its connections after each answer still answers every request, and the client's connection stays open", async () => {
    const client = new Agent({ keepAlive: true, maxSockets: 1 });
    for (let i = 0; i < 20; i++) {
      assert.deepEqual(await get('/close', client), { status: 200, body: 'bye\n', connection: 'keep-alive' });
      assert.deepEqual(await get('/'), { status: 200, body: 'hello\n' });
    }
    client.destroy();
  });

  test('more requests at once than the bound on one replica wait for a connection instead of opening more', async () => {
    mostOpen = open;
    const client = new Agent({ keepAlive: true, maxSockets: 300 });
    const all = Promise.all(Array.from({ length: 300 }, () => get('/slow', client)));
    // 256 reach the replica; the rest wait in the ingress until answers free connections.
    for (const until = Date.now() + 20_000; slow.length < 256; ) {
      assert.ok(Date.now() < until, `only ${slow.length} requests reached the replica`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    let finished = false;
    void all.finally(() => (finished = true));
    for (const until = Date.now() + 20_000; !finished; ) {
      assert.ok(Date.now() < until, 'the waiting requests never reached the replica');
      for (const answer of slow.splice(0)) answer();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const answers = await all;
    client.destroy();
    assert.equal(answers.filter((a) => a.status === 200).length, 300);
    assert.ok(mostOpen <= 256, `${mostOpen} connections were open to the replica at once`);
  });

  test('a GET that comes with a body has it passed on, not left for the replica to wait for', async () => {
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: ingress.port, path: '/echo', method: 'GET', agent: false, headers: { host: 'web-gvc.localhost', 'content-type': 'text/plain', 'content-length': '12' } }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.setTimeout(5_000, () => req.destroy(new Error('no answer in 5 s: the body never reached the replica')));
      req.on('error', reject).end('search terms');
    });
    assert.deepEqual(answer, { status: 200, body: 'GET search terms' });
  });
});

describe('the ingress under many idle or slow clients', () => {
  let replica: Server;
  let ingress: Ingress;

  before(async () => {
    replica = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('hello\n'));
    await new Promise<void>((resolve) => replica.listen(0, '127.0.0.1', resolve));
    const port = (replica.address() as AddressInfo).port;
    ingress = new Ingress((host, path) => (host === 'web-gvc' ? { key: 'web', targets: ['127.0.0.1'], port, path, holdMs: 0, firewall: OPEN } : undefined), undefined, { maxConnections: 3, headersTimeoutMs: 300 });
    await ingress.listen({ host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await ingress.close();
    replica.closeAllConnections();
    await new Promise((resolve) => replica.close(resolve));
  });

  const open = () =>
    new Promise<Socket>((resolve, reject) => {
      const socket = connect(ingress.port!, '127.0.0.1', () => resolve(socket));
      socket.on('error', reject);
    });
  const closed = (socket: Socket) => new Promise<void>((resolve) => (socket.destroyed ? resolve() : socket.once('close', () => resolve())));
  const ask = (socket: Socket) =>
    new Promise<string>((resolve) => {
      let got = '';
      socket.setEncoding('utf8').on('data', (c: string) => {
        got += c;
        if (got.includes('hello')) resolve(got);
      });
      socket.write('GET / HTTP/1.1\r\nHost: web-gvc.localhost\r\n\r\n');
    });

  test('clients past the connection bound are closed as they come, and a slow client is cut off before it holds one for long', { timeout: 10_000 }, async () => {
    // A client that sends half its headers and no more is cut off once its headers are overdue.
    const slow = await open();
    slow.write('GET / HTTP/1.1\r\nHost: web');
    await closed(slow);
    const idle = [await open(), await open(), await open()];
    const extra = await open();
    await closed(extra);
    assert.ok(idle.every((s) => !s.destroyed), 'the connections within the bound stay open');
    // One of those within the bound is served as usual.
    assert.match(await ask(idle[0]), /^HTTP\/1.1 200/);
    for (const s of idle) s.destroy();
  });
});
