// What one hostile caller with an ordinary key can do to everyone else, and the limits that stop it:
// query budgets, slow bodies, per-principal slots, failed authentications, org creation, parser
// errors, and apply under racing creates and deletes. Written as the attacker calls the API.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { parseIssuers } from '../../src/auth/issuers.js';
import type { Config } from '../../src/config.js';
import { buildApp, type App } from '../../src/server/app.js';
import { assertError, ERROR_KEYS } from '../support/errors.js';
import { forEachBackend, startKeel, type Backend, type TestKeel } from '../support/keel.js';

/** A Keel with the test's settings on the same store as `k` (the first org acme, its admin key). */
async function appOn(k: TestKeel, settings: Partial<Config>): Promise<App> {
  return buildApp({ ...k.config, ...settings }, k.store, { logger: false });
}

async function call(app: App, token: string | null, method: string, url: string, body?: unknown, remoteAddress?: string) {
  const headers: Record<string, string> = token === null ? {} : { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await app.core.inject({ method: method as 'GET', url, headers, remoteAddress, payload: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.statusCode, headers: res.headers, body: res.body ? JSON.parse(res.body) : undefined };
}

/** A key of a new service account in `org`, which no policy names (it may do nothing). */
async function keyWithoutPermissions(k: TestKeel, name: string, org = k.org): Promise<string> {
  assert.equal((await k.call('POST', `/org/${org}/serviceaccount`, { name })).status, 201);
  const res = await k.call('POST', `/org/${org}/serviceaccount/${name}/-addKey`, {});
  assert.equal(res.status, 200, res.raw);
  return res.body.key;
}

async function listen(app: App): Promise<number> {
  await app.core.listen({ host: '127.0.0.1', port: 0 });
  return (app.core.server.address() as { port: number }).port;
}

/** A raw connection: what arrives on it until the server closes it (or `deadlineMs` passes). */
function rawConnection(port: number, deadlineMs: number): { socket: Socket; answer: Promise<string> } {
  const socket = connect(port, '127.0.0.1');
  const answer = new Promise<string>((resolve) => {
    let data = '';
    const timer = setTimeout(() => resolve(data), deadlineMs);
    socket.on('data', (d) => (data += d.toString()));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(data);
    });
  });
  return { socket, answer };
}

/** The status and JSON body of a raw HTTP answer. */
function parseRaw(raw: string): { status: number; headers: string; body: any } {
  const [head, ...rest] = raw.split('\r\n\r\n');
  return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1]), headers: head, body: rest.length ? JSON.parse(rest.join('\r\n\r\n')) : undefined };
}

function assertRawError(raw: string, status: number, code: string): any {
  const res = parseRaw(raw);
  assert.equal(res.status, status, raw);
  assert.match(res.headers, /content-type: application\/json/i);
  assert.deepEqual(Object.keys(res.body).sort(), ERROR_KEYS);
  assert.equal(res.body.status, status);
  assert.equal(res.body.code, code);
  assert.match(res.body.id, /^[0-9a-f-]{36}$/);
  return res.body;
}

forEachBackend('query budget', (backend: Backend) => {
  let k: TestKeel;
  let app: App;
  let attacker: string;
  before(async () => {
    k = await startKeel(backend);
    app = await appOn(k, { queryBudgetMs: 20 });
    attacker = await keyWithoutPermissions(k, 'attacker');
    assert.equal((await k.call('POST', '/org/acme/policy', { name: 'attacker-views', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/attacker'] }] })).status, 201);
    // Thousands of items with long values, written straight to the store (the API would take minutes).
    const long = 'lorem ipsum dolor sit amet '.repeat(600);
    const now = new Date().toISOString();
    for (let batch = 0; batch < 6; batch++) {
      await k.store.transaction(async (tx) => {
        for (let i = 0; i < 500; i++) {
          const name = `g-${batch}-${i}`;
          await tx.insert({ org: 'acme', kind: 'gvc', gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: { name, description: long, tags: { n: String(i) }, spec: { note: long } } });
        }
      });
    }
  });
  after(async () => {
    await app.core.close();
    await app.audit.close();
    await k.close();
  });

  test('a query that runs past its budget is refused with 400 naming the budget, and the server answers others', async () => {
    const terms = Array.from({ length: 10 }, (_, i) => ({ op: '~', property: '*', value: `nothing-matches-${i}` }));
    const started = Date.now();
    const res = await call(app, attacker, 'POST', '/org/acme/gvc/-query', { spec: { match: 'any', terms } });
    assertError(res, 400, 'bad_request');
    assert.match(res.body.message, /budget of 20 ms/);
    assert.match(res.body.message, /queryBudgetMs/);
    assert.ok(Date.now() - started < 5000, `refused after ${Date.now() - started} ms`);
    const cheap = await call(app, attacker, 'POST', '/org/acme/gvc/-query', { spec: { terms: [{ op: '=', property: 'name', value: 'g-1-7' }] } });
    assert.equal(cheap.status, 200, JSON.stringify(cheap.body));
    assert.deepEqual(cheap.body.items.map((i: { name: string }) => i.name), ['g-1-7']);
    const page = await call(app, attacker, 'GET', '/org/acme/gvc?limit=5');
    assert.equal(page.status, 200, JSON.stringify(page.body));
  });

  test("one caller's heavy queries wait their turn: another caller's query goes ahead of its line, and a flood past the line is 429", async () => {
    // Injected requests hand over their bodies only when read, so the 34 at once all count as bodies
    // on their way (over a socket, a body that comes with its headers is there before the next request).
    const turns = await appOn(k, { queryBudgetMs: 100, maxListsInFlight: 1, maxBodiesPerPrincipal: 64 });
    try {
      const other = await keyWithoutPermissions(k, `bystander-${backend}`);
      const terms = Array.from({ length: 10 }, (_, i) => ({ op: '~', property: '*', value: `nothing-matches-${i}` }));
      let attackerDone = 0;
      // One running, 32 in line (listsQueuedPerPrincipal), and one more than the line holds.
      const flood = Array.from({ length: 34 }, () => call(turns, attacker, 'POST', '/org/acme/gvc/-query', { spec: { match: 'any', terms } }).then((res) => (attackerDone++, res)));
      const read = await call(turns, other, 'GET', '/org/acme/gvc/g-2-9');
      const doneBefore = attackerDone;
      const cheap = await call(turns, other, 'POST', '/org/acme/gvc/-query', { spec: { terms: [{ op: '=', property: 'name', value: 'g-3-4' }] } });
      const answeredMeanwhile = attackerDone - doneBefore;
      assertError(read, 403, 'forbidden');
      assert.equal(cheap.status, 200, JSON.stringify(cheap.body));
      assert.deepEqual(cheap.body.items, [], 'it may view no gvc');
      assert.ok(answeredMeanwhile <= 2, `the other caller's query waited behind ${answeredMeanwhile} of the attacker's`);
      const results = await Promise.all(flood);
      const refused = results.filter((r) => r.status === 429);
      assert.equal(refused.length, 1, results.map((r) => r.status).join(' '));
      assertError(refused[0], 429, 'rate_limited');
      assert.equal(refused[0].headers['retry-after'], '1');
      assert.match(refused[0].body.message, /maxListsInFlight, listsQueuedPerPrincipal/);
      for (const r of results) if (r.status !== 429) assertError(r, 400, 'bad_request');
    } finally {
      await turns.core.close();
      await turns.audit.close();
    }
  });

  test('SQLite: the list worker thread runs below the request thread (nice 10), so queries take only the CPU requests leave', { skip: backend !== 'sqlite' || process.platform !== 'linux' }, async () => {
    const res = await call(app, attacker, 'POST', '/org/acme/gvc/-query', { spec: { terms: [{ op: '=', property: 'name', value: 'g-0-1' }] } });
    assert.equal(res.status, 200);
    const niceOf = (task: string) => {
      const stat = readFileSync(`/proc/self/task/${task}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
    };
    const threads = readdirSync('/proc/self/task');
    assert.equal(niceOf(String(process.pid)), 0, 'the request thread keeps its priority');
    assert.ok(threads.some((task) => niceOf(task) === 10), `no thread at nice 10: ${threads.map(niceOf).join(' ')}`);
  });

  test('a query whose terms alone cost too much is refused before it runs', async () => {
    const wildcards = Array.from({ length: 11 }, () => ({ op: '~', property: '*', value: 'x' }));
    const res = await call(app, attacker, 'POST', '/org/acme/gvc/-query', { spec: { terms: wildcards } });
    assertError(res, 400, 'bad_request');
    assert.match(res.body.message, /property "\*"/);
    const long = Array.from({ length: 5 }, () => ({ op: '~', property: 'description', value: 'y'.repeat(4000) }));
    const tooLong = await call(app, attacker, 'POST', '/org/acme/gvc/-query', { spec: { terms: long } });
    assertError(tooLong, 400, 'bad_request');
    assert.match(tooLong.body.message, /characters/);
  });
});

forEachBackend('apply under racing creates and deletes', (backend: Backend) => {
  let k: TestKeel;
  before(async () => (k = await startKeel(backend)));
  after(async () => k.close());

  test('PUT on a collection ends in 200 or 201 however creates and deletes of the same name interleave', async () => {
    const seen = new Map<number, number>();
    for (let round = 0; round < 25; round++) {
      const calls = [
        k.call('PUT', '/org/acme/gvc', { name: 'contested', description: `apply ${round} a` }),
        k.call('DELETE', '/org/acme/gvc/contested'),
        k.call('PUT', '/org/acme/gvc', { name: 'contested', description: `apply ${round} b` }),
        k.call('POST', '/org/acme/gvc', { name: 'contested' }),
        k.call('PUT', '/org/acme/gvc', { name: 'contested', description: `apply ${round} c` }),
        k.call('DELETE', '/org/acme/gvc/contested'),
      ];
      const results = await Promise.all(calls);
      for (const i of [0, 2, 4]) {
        seen.set(results[i].status, (seen.get(results[i].status) ?? 0) + 1);
        assert.ok([200, 201].includes(results[i].status), `apply answered ${results[i].status}: ${results[i].raw}`);
      }
      assert.ok([202, 404].includes(results[1].status), results[1].raw);
    }
    assert.ok(seen.get(201), 'some applies created the item');
  });
});

// The limits below do not depend on the store: SQLite only.
test('slow bodies: one principal holds at most its share of the slots, and a body that does not arrive in time gets 408', async () => {
  const k = await startKeel('sqlite');
  const app = await appOn(k, { maxInFlight: 8, maxInFlightPerPrincipal: 2, bodyTimeoutMs: 800 });
  const dribblers: Socket[] = [];
  try {
    const attacker = await keyWithoutPermissions(k, 'dribbler');
    // It may create GVCs (and do nothing else): its bodies are read, within its own share.
    const policy = await k.call('POST', '/org/acme/policy', { name: 'dribbler-creates', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['create'], principalLinks: ['//serviceaccount/dribbler'] }] });
    assert.equal(policy.status, 201, policy.raw);
    const port = await listen(app);
    // Eight connections, each sending a body one byte at a time.
    const answers: Array<Promise<string>> = [];
    for (let i = 0; i < 8; i++) {
      const { socket, answer } = rawConnection(port, 10_000);
      dribblers.push(socket);
      answers.push(answer);
      socket.write(`POST /org/acme/gvc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${attacker}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
    }
    const drip = setInterval(() => dribblers.forEach((s) => s.writable && s.write(' ')), 100);
    try {
      // Everyone else is still served while the attack goes on.
      const other = await fetch(`http://127.0.0.1:${port}/org/acme/gvc`, { headers: { authorization: `Bearer ${k.token}` } });
      assert.equal(other.status, 200, await other.text());
      const raws = await Promise.all(answers);
      const statuses = raws.map((raw) => parseRaw(raw).status).sort();
      assert.deepEqual(statuses, [408, 408, 503, 503, 503, 503, 503, 503], raws.join('\n'));
      const timedOut = assertRawError(raws.find((r) => r.startsWith('HTTP/1.1 408'))!, 408, 'request_timeout');
      assert.match(timedOut.message, /800 ms/);
      const refused = assertRawError(raws.find((r) => r.startsWith('HTTP/1.1 503'))!, 503, 'service_unavailable');
      assert.match(refused.message, /in flight/);
    } finally {
      clearInterval(drip);
    }
    const again = await fetch(`http://127.0.0.1:${port}/org/acme/gvc`, { headers: { authorization: `Bearer ${attacker}` } });
    assert.equal(again.status, 200, 'its slots are free again');
    assert.deepEqual(((await again.json()) as { items: unknown[] }).items, [], 'and it still sees nothing');
  } finally {
    dribblers.forEach((s) => s.destroy());
    await app.core.close();
    await app.audit.close();
    await k.close();
  }
});

test('a principal that is no member of the org in the path is refused before its body is read', async () => {
  const k = await startKeel('sqlite');
  const app = await appOn(k, {});
  try {
    assert.equal((await k.call('POST', '/org', { name: 'elsewhere' })).status, 201);
    const outsider = await keyWithoutPermissions(k, 'outsider', 'elsewhere');
    const port = await listen(app);
    const { socket, answer } = rawConnection(port, 5000);
    // The body is announced but never sent: the refusal cannot have waited for it.
    socket.write(`PUT /org/acme/gvc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${outsider}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"name":`);
    const first = await new Promise<string>((resolve) => {
      socket.once('data', (d) => resolve(d.toString()));
      void answer.then(resolve);
    });
    socket.destroy();
    assert.match(first, /^HTTP\/1\.1 403/, first);
    assert.match(first, /access to org 'acme' is denied/);
  } finally {
    await app.core.close();
    await app.audit.close();
    await k.close();
  }
});

test('failed authentications are rate limited per address, in bounded time, without touching other addresses', async () => {
  const k = await startKeel('sqlite');
  const app = await appOn(k, { authFailureLimit: 5 });
  try {
    const guesses: number[] = [];
    for (let i = 0; i < 8; i++) guesses.push((await call(app, `s${'x'.repeat(15)}.${Buffer.from('acme.admin.guess').toString('base64url')}.guess${i}`, 'GET', '/org/acme/gvc', undefined, '10.0.0.1')).status);
    assert.deepEqual(guesses.slice(0, 5), [401, 401, 401, 401, 401]);
    assert.deepEqual(guesses.slice(5), [429, 429, 429]);
    const limited = await call(app, 'still-guessing', 'GET', '/org/acme/gvc', undefined, '10.0.0.1');
    assertError(limited, 429, 'rate_limited');
    assert.match(limited.body.message, /failed authentications/);
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    // Another address is not affected, and a known key from it works.
    assert.equal((await call(app, 'wrong', 'GET', '/org/acme/gvc', undefined, '10.0.0.2')).status, 401);
    assert.equal((await call(app, k.token, 'GET', '/org/acme/gvc', undefined, '10.0.0.2')).status, 200);
  } finally {
    await app.core.close();
    await app.audit.close();
    await k.close();
  }
});

forEachBackend('failed authentications count against what failed, never against a valid key', (backend: Backend) => {
  test('dozens of bad keys from one address are throttled, and a valid key from that address still works', async () => {
    const k = await startKeel(backend);
    const app = await appOn(k, { authFailureLimit: 10 });
    const from = '10.0.0.9';
    try {
      const victim = await keyWithoutPermissions(k, 'victim');
      const [victimId, victimMiddle] = victim.split('.');
      const bad = (i: number) =>
        i % 3 === 0 ? `s${'q'.repeat(15)}.${Buffer.from(`acme.admin.s${'q'.repeat(15)}`).toString('base64url')}.guess${i}` // an unknown key id
          : i % 3 === 1 ? `garbage-${i}` // no key at all
            : `${victimId}.${victimMiddle}.wrong${i}`; // a key id that exists, with a wrong secret
      const statuses: number[] = [];
      for (let i = 0; i < 48; i++) {
        statuses.push((await call(app, bad(i), 'GET', '/org/acme/gvc', undefined, from)).status);
        // The admin's valid key, from the same address, between the bad ones: never throttled.
        if (i % 4 === 3) assert.equal((await call(app, k.token, 'GET', '/org/acme/gvc', undefined, from)).status, 200, `after ${i + 1} bad keys`);
      }
      // The unknown keys and the garbage share the address's bucket (10): 10 refusals, then 429.
      const unknown = statuses.filter((_, i) => i % 3 !== 2);
      assert.deepEqual(unknown.slice(0, 10), Array(10).fill(401));
      assert.deepEqual(unknown.slice(10), Array(unknown.length - 10).fill(429));
      // The wrong secrets for one key id have their own bucket at this address: 10, then 429.
      const wrong = statuses.filter((_, i) => i % 3 === 2);
      assert.deepEqual(wrong.slice(0, 10), Array(10).fill(401));
      assert.deepEqual(wrong.slice(10), Array(wrong.length - 10).fill(429));
      const refused = await call(app, bad(0), 'GET', '/org/acme/gvc', undefined, from);
      assertError(refused, 429, 'rate_limited');
      assert.ok(Number(refused.headers['retry-after']) >= 1);
      // That key's owner, from its own address, is not affected (its list is empty, but answered).
      assert.equal((await call(app, victim, 'GET', '/org/acme/gvc', undefined, '10.0.0.10')).status, 200);
    } finally {
      await app.core.close();
      await app.audit.close();
      await k.close();
    }
  });
});

test('a JWT user has one rate bucket, whatever org its requests name', async () => {
  const k = await startKeel('sqlite');
  const dir = mkdtempSync(join(tmpdir(), 'keel-jwks-'));
  const pair = await generateKeyPair('RS256');
  writeFileSync(join(dir, 'jwks.json'), JSON.stringify({ keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }] }));
  const issuers = parseIssuers(JSON.stringify([{ issuer: 'https://idp.test', audience: 'keel', jwksFile: join(dir, 'jwks.json') }]));
  const app = await appOn(k, { jwtIssuers: issuers, rateLimit: 1, rateBurst: 3 });
  try {
    const token = await signed(pair.privateKey, 'roamer@example.com');
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await call(app, token, 'GET', `/org/org-${i}/gvc`)).status);
    assert.deepEqual(statuses.slice(0, 3), [403, 403, 403], 'no member anywhere');
    assert.deepEqual(statuses.slice(3), [429, 429, 429], 'a fresh org name is no fresh bucket');
  } finally {
    await app.core.close();
    await app.audit.close();
    await k.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

async function signed(key: CryptoKey, email: string): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ iss: 'https://idp.test', aud: 'keel', email, iat: now, exp: now + 600 }).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).sign(key);
}

test('what Node\'s HTTP parser refuses is answered with the error object, on both APIs', async () => {
  const k = await startKeel('sqlite');
  const app = await appOn(k, {});
  try {
    const core = await listen(app);
    await app.audit.listen({ host: '127.0.0.1', port: 0 });
    const audit = (app.audit.server.address() as { port: number }).port;
    for (const port of [core, audit]) {
      const send = async (request: string) => {
        const { socket, answer } = rawConnection(port, 5000);
        socket.write(request);
        return answer;
      };
      const huge = await send(`GET /about HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
      assertRawError(huge, 431, 'headers_too_large');
      const conflicting = await send('POST /org/acme/gvc HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n');
      assertRawError(conflicting, 400, 'bad_request');
      const garbage = await send('HELLO THERE\r\n\r\n');
      assertRawError(garbage, 400, 'bad_request');
    }
  } finally {
    await app.core.close();
    await app.audit.close();
    await k.close();
  }
});

forEachBackend('org creation is the operator\'s decision', (backend: Backend) => {
  let k: TestKeel;
  let nobody: string;
  before(async () => {
    k = await startKeel(backend);
    nobody = await keyWithoutPermissions(k, 'nobody');
  });
  after(async () => k.close());

  test('by default only superusers of the first org create orgs, up to a limit each', async () => {
    const app = await appOn(k, { maxOrgsPerPrincipal: 3 });
    try {
      const refused = await call(app, nobody, 'POST', '/org', { name: 'squatted' });
      assertError(refused, 403, 'forbidden');
      assert.match(refused.body.message, /orgCreators/);
      assert.equal((await call(app, k.token, 'GET', '/org/squatted')).status, 404, 'nothing was created');
      // The admin is superuser of acme; two more bring it to the limit of three.
      assert.equal((await call(app, k.token, 'POST', '/org', { name: 'second' })).status, 201);
      assert.equal((await call(app, k.token, 'POST', '/org', { name: 'third' })).status, 201);
      const over = await call(app, k.token, 'POST', '/org', { name: 'fourth' });
      assertError(over, 429, 'quota_exceeded');
      assert.match(over.body.message, /maxOrgsPerPrincipal/);
    } finally {
      await app.core.close();
      await app.audit.close();
    }
  });

  test('an operator may let anyone, or listed principals, create orgs', async () => {
    const open = await appOn(k, { orgCreators: ['anyone'], maxOrgsPerPrincipal: 1 });
    const listed = await appOn(k, { orgCreators: ['/org/acme/serviceaccount/nobody'] });
    try {
      assert.equal((await call(open, nobody, 'POST', '/org', { name: 'by-nobody' })).status, 201);
      assertError(await call(open, nobody, 'POST', '/org', { name: 'by-nobody-again' }), 429, 'quota_exceeded');
      assertError(await call(listed, k.token, 'POST', '/org', { name: 'by-admin' }), 403, 'forbidden');
    } finally {
      for (const a of [open, listed]) {
        await a.core.close();
        await a.audit.close();
      }
    }
  });
});
