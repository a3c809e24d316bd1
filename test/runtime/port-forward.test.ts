// `cpln port-forward` against a workload that really runs (busybox httpd): HTTP through the local
// port, one connection after another and two at once, a large download and a large upload echoed;
// a key without `connect`, a revoked key, a forged or misused ticket and another org get nothing
// forwarded; one caller's connections to a replica are bounded. Tickets' expiry runs on a clock of
// the test's own.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { FORWARDS_PER_REPLICA, TICKET_IDLE_MS, TICKET_LIFETIME_MS, TICKETS_PER_CALLER, Tickets, type Ticket } from '../../src/server/port-forward.js';
import { freePort } from '../support/ports.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, secondOrg, serveOne, serviceAccountWith, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

describe('port-forward tickets', () => {
  const ticket: Ticket = { who: '/org/acme/serviceaccount/a', org: 'acme', gvc: 'web', workload: 'web', location: LOCATION, replica: 'web-0', port: 8080, chosen: true };

  test('a ticket lasts while it is used, up to its lifetime, and not past a pause', () => {
    let now = 1_000_000;
    const tickets = new Tickets(() => now);
    const id = tickets.issue(ticket);
    assert.match(id, /^[A-Za-z0-9_-]{43}$/);
    assert.equal(tickets.use('forged'), undefined);
    assert.equal(tickets.use(undefined), undefined);
    // Used every idle period less a minute, it stays until its lifetime is over.
    const issued = now;
    while (now + TICKET_IDLE_MS - 60_000 < issued + TICKET_LIFETIME_MS) {
      now += TICKET_IDLE_MS - 60_000;
      assert.deepEqual(tickets.use(id), ticket, `at ${(now - issued) / 60_000} min`);
    }
    now = issued + TICKET_LIFETIME_MS;
    assert.equal(tickets.use(id), undefined, 'past its lifetime');

    const idle = tickets.issue(ticket);
    now += TICKET_IDLE_MS;
    assert.equal(tickets.use(idle), undefined, 'unused for the idle period');
  });

  test("one caller's tickets are bounded: a further one replaces its oldest, not another caller's", () => {
    const tickets = new Tickets();
    const other = tickets.issue({ ...ticket, who: '/org/acme/serviceaccount/b' });
    const mine = Array.from({ length: TICKETS_PER_CALLER + 1 }, () => tickets.issue(ticket));
    assert.equal(tickets.use(mine[0]), undefined);
    for (const id of mine.slice(1)) assert.ok(tickets.use(id));
    assert.ok(tickets.use(other));
    tickets.drop(other);
    assert.equal(tickets.use(other), undefined);
  });
});

const skip = runtimeMissing();

describe('cpln port-forward to a replica (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let replica: string;
  /** What the replica serves at /big.bin: larger than 1 MB. */
  const big = randomBytes(1536 * 1024).toString('hex');

  const account = (name: string, permissions: string[]) => serviceAccountWith(rt, name, permissions);

  /** `cpln port-forward web LOCAL:8080` as `profile`; `listening` resolves once it says it forwards (or it has exited). */
  const forward = async (profile?: string) => {
    const local = await freePort();
    const stop = new AbortController();
    let said!: () => void;
    const listening = new Promise<void>((resolve) => (said = resolve));
    const result = rt.cpln.run(['port-forward', 'web', `${local}:8080`, '--location', LOCATION, ...(profile ? ['--profile', profile] : [])], {
      timeoutMs: 180_000,
      signal: stop.signal,
      onStdout: (out) => out.includes(`Forwarding from 127.0.0.1:${local} -> 8080`) && said(),
    });
    void result.then(() => said());
    return { local, listening, result, stop: () => stop.abort() };
  };

  /** One HTTP request on a connection of its own to the local port. */
  const http = (port: number, method: string, path: string, body?: Buffer) =>
    new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
      const headers = body ? { 'content-type': 'application/octet-stream', 'content-length': String(body.length) } : {};
      const req = httpRequest({ host: '127.0.0.1', port, method, path, agent: false, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });

  const ticketFor = (token: string, body: Record<string, unknown>) => rt.keel.call('POST', `/-remote/${LOCATION}/portforward-ticket`, { org: 'acme', gvc: 'web', workload: 'web', port: 8080, ...body }, { token });

  /**
   * One forwarded connection opened as the CLI opens one, a request sent on it at once: what came
   * back as text (errors) and as bytes, and the close code. `open` resolves once the stream is open.
   */
  const stream = (request: Record<string, unknown>, send = 'GET /index.html HTTP/1.0\r\n\r\n') => {
    const ws = new WebSocket(`ws://127.0.0.1:${rt.port}/-remote/${LOCATION}/portforward`);
    const said: string[] = [];
    const bytes: Buffer[] = [];
    const open = new Promise<void>((resolve, reject) => {
      ws.on('open', () => {
        ws.send(JSON.stringify({ contextId: 'test', org: 'acme', gvc: 'web', workload: 'web', port: 8080, ...request }));
        if (send) ws.send(Buffer.from(send));
        resolve();
      });
      ws.on('error', reject);
    });
    ws.on('message', (m: Buffer, isBinary) => (isBinary ? bytes.push(m) : said.push(m.toString())));
    const closed = new Promise<{ said: string[]; data: string; code: number; reason: string }>((resolve) =>
      ws.on('close', (code, reason) => resolve({ said, data: Buffer.concat(bytes).toString(), code, reason: reason.toString() })),
    );
    return { ws, open, closed, bytes };
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-port-forward-'));
    const echo = '#!/bin/sh\nprintf "Content-Type: application/octet-stream\\r\\n\\r\\n"\nhead -c "$CONTENT_LENGTH"\n';
    const image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'chmod 755 /www/cgi-bin/echo && exec httpd -f -p 8080 -h /www'], { 'www/index.html': 'forwarded\n', 'www/big.bin': big, 'www/cgi-bin/echo': echo });
    rt = await startRuntimeKeel();
    replica = await serveOne(rt, work, 'web', image);
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('HTTP through the local port: connections one after another, two at once, a large download and a large upload', async () => {
    const f = await forward();
    try {
      await f.listening;
      for (let i = 0; i < 3; i++) assert.deepEqual(await http(f.local, 'GET', '/index.html').then((r) => ({ status: r.status, body: r.body.toString() })), { status: 200, body: 'forwarded\n' }, `request ${i + 1}`);
      const upload = randomBytes(1200 * 1024);
      const [download, echoed] = await Promise.all([http(f.local, 'GET', '/big.bin'), http(f.local, 'POST', '/cgi-bin/echo', upload)]);
      assert.equal(download.status, 200);
      assert.equal(download.body.length, big.length);
      assert.ok(download.body.toString() === big, 'the download arrived whole and unchanged');
      assert.equal(echoed.status, 200);
      assert.equal(echoed.body.length, upload.length);
      assert.ok(echoed.body.equals(upload), 'the upload came back whole and unchanged');
    } finally {
      f.stop();
    }
    const r = await f.result;
    assert.equal(r.timedOut, false);
    assert.deepEqual(r.foreign, []);
    assert.equal(r.stdout.match(/Handling connection for \d+/g)?.length, 5, r.stdout);
    assert.doesNotMatch(r.stdout + r.stderr, /error/i);
  });

  test('a view-only key is refused its ticket with the reason, and nothing is forwarded', async () => {
    await account('looker', ['view']);
    const f = await forward('looker');
    await f.listening;
    const got = await http(f.local, 'GET', '/index.html').then(
      (res) => res.body.toString(),
      (err: Error) => err.message,
    );
    assert.doesNotMatch(got, /forwarded/);
    const r = await f.result;
    f.stop();
    assert.equal(r.timedOut, false);
    assert.equal(r.code, 1);
    assert.match(r.stderr + r.stdout, /Failed to create ticket/);
    assert.match(r.stderr + r.stdout, /may not port-forward to workload 'web' of GVC 'web': it needs the connect permission/);
    // Straight to Keel: the same refusal, and a ticket without a key is refused too.
    const key = (await rt.keel.call('POST', '/org/acme/serviceaccount/looker/-addKey', { description: 'direct' })).body.key as string;
    const refused = await ticketFor(key, { pod: replica });
    assert.equal(refused.status, 403);
    assert.match(refused.body.message, /needs the connect permission/);
    assert.equal((await ticketFor(null as unknown as string, {})).status, 401);
  });

  test('a revoked key forwards nothing more: its next connection ends the CLI with the reason', async () => {
    const temp = await account('temp', ['view', 'connect']);
    const f = await forward('temp');
    try {
      await f.listening;
      assert.equal((await http(f.local, 'GET', '/index.html')).body.toString(), 'forwarded\n');
      await rt.run(['serviceaccount', 'remove-key', 'temp', '--key', temp.name]);
      const got = await http(f.local, 'GET', '/index.html').then(
        (res) => res.body.toString(),
        (err: Error) => err.message,
      );
      assert.doesNotMatch(got, /forwarded/);
    } finally {
      f.stop();
    }
    const r = await f.result;
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stdout + r.stderr, /Unauthorized: .*(invalid|revoked)/);
  });

  test('a forged ticket, a ticket for another port and another caller\'s ticket open nothing', async () => {
    const issued = await ticketFor(rt.keel.token, {});
    assert.equal(issued.status, 200, JSON.stringify(issued.body));
    const ticket = issued.body.ticket as string;
    // The ticket works, in the CLI's protocol.
    const good = await stream({ token: rt.keel.token, ticket }).closed;
    assert.match(good.data, /^HTTP\/1\.[01] 200 OK\r\n[\s\S]*\r\n\r\nforwarded\n$/);
    assert.deepEqual(good.said, []);

    const forged = await stream({ token: rt.keel.token, ticket: 'x'.repeat(43) }).closed;
    assert.equal(forged.data, '');
    assert.equal(forged.said.length, 1);
    // Code 1: the CLI asks a new ticket for its next connection.
    assert.deepEqual(JSON.parse(forged.said[0].replace(/^Port-forward error: /, '')), { message: 'the port-forward ticket is unknown or has expired; a new one is needed', code: 1 });

    const otherPort = await stream({ token: rt.keel.token, ticket, port: 22 }).closed;
    assert.equal(otherPort.data, '');
    assert.match(otherPort.said[0], /^Port-forward error: .*issued to another caller, or for another workload, replica, location or port.*"code":0/);

    const connector = await account('connector', ['view', 'connect']);
    const borrowed = await stream({ token: connector.key, ticket }).closed;
    assert.equal(borrowed.data, '');
    assert.match(borrowed.said[0], /issued to another caller/);
    const noKey = await stream({ ticket }).closed;
    assert.equal(noKey.data, '');
    assert.match(noKey.said[0], /^Port-forward error: \{"message":"Unauthorized: /);

    // A ticket is for a port, a workload that exists and a replica of it that runs.
    assert.equal((await ticketFor(rt.keel.token, { port: 70000 })).status, 400);
    assert.equal((await ticketFor(rt.keel.token, { workload: 'nope' })).status, 404);
    assert.match((await ticketFor(rt.keel.token, { pod: 'web-not-running' })).body.message, /no replica web-not-running of workload 'web' runs/);
    // Nothing listens on port 9: the CLI would print this and end.
    const closedPort = await ticketFor(rt.keel.token, { port: 9 });
    const nothing = await stream({ token: rt.keel.token, ticket: closedPort.body.ticket, port: 9 }).closed;
    assert.match(nothing.said[0], /nothing accepts connections on port 9 of replica/);
  });

  test("another org's key gets no ticket for this org's replica, and cannot use this org's ticket", async () => {
    const globex = await secondOrg(rt, 'globex');
    const refused = await ticketFor(globex.token, { pod: replica });
    assert.equal(refused.status, 403, JSON.stringify(refused.body));
    assert.match(refused.body.message, /may not port-forward/);
    // Named from its own org, acme's replica is not there.
    const elsewhere = await ticketFor(globex.token, { org: 'globex', pod: replica });
    assert.equal(elsewhere.status, 404, JSON.stringify(elsewhere.body));
    const acmeTicket = (await ticketFor(rt.keel.token, {})).body.ticket as string;
    for (const org of ['acme', 'globex']) {
      const used = await stream({ token: globex.token, ticket: acmeTicket, org }).closed;
      assert.equal(used.data, '', org);
      assert.match(used.said[0], /^Port-forward error: /, org);
    }
  });

  test(`one caller's open connections to a replica are bounded (${FORWARDS_PER_REPLICA}); another caller's are not`, async () => {
    const ticket = (await ticketFor(rt.keel.token, {})).body.ticket as string;
    // Held open: httpd waits for a request that has not come.
    const held = Array.from({ length: FORWARDS_PER_REPLICA }, () => stream({ token: rt.keel.token, ticket }, ''));
    try {
      await Promise.all(held.map((s) => s.open));
      // Each is counted once its request has been checked: wait until the bound refuses.
      const refused = await waitFor(
        'the bound to refuse a connection',
        async () => stream({ token: rt.keel.token, ticket }).closed,
        (r) => r.code === 1013,
        30_000,
      );
      assert.equal(refused.data, '');
      assert.deepEqual(refused.said, [], 'no error message, which would end the CLI and its other connections');
      assert.match(refused.reason, /too many forwarded connections/);
      const other = await account('second', ['view', 'connect']);
      const theirs = (await ticketFor(other.key, {})).body.ticket as string;
      assert.match((await stream({ token: other.key, ticket: theirs }).closed).data, /forwarded\n$/);
    } finally {
      for (const s of held) s.ws.close();
      await Promise.all(held.map((s) => s.closed));
    }
    // Closed connections no longer count.
    await waitFor('a connection to be admitted again', async () => (await stream({ token: rt.keel.token, ticket }).closed).data, (d) => d.endsWith('forwarded\n'), 15_000);
  });
});
