// Admission per principal on every route: callers sending their bodies a byte at a time, from one
// address without credentials (the registry's token endpoint) or as a swarm of keys, spend only
// their own share; the first org's superusers, a key of another org and anonymous callers of the
// public routes are answered meanwhile. Written as the attackers call the API, over real sockets.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type Backend, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';

/** Slow writers: each connection sends its headers and then one byte of its body every 100 ms. */
class Dribblers {
  private readonly sockets: Socket[] = [];
  /** What has come back on each connection so far. */
  private readonly received: string[] = [];
  private readonly closed: Array<Promise<void>> = [];
  /** Bytes of body each connection has sent after its headers. */
  private readonly sent: number[] = [];
  private readonly drip = setInterval(() => this.sockets.forEach((s, i) => s.writable && !this.received[i] && s.write(' ') && this.sent[i]++), 100);

  constructor(private readonly port: number) {}

  open(head: string): void {
    const socket = connect(this.port, '127.0.0.1');
    const at = this.sockets.push(socket) - 1;
    this.received.push('');
    this.sent.push(0);
    socket.on('data', (d) => (this.received[at] += d.toString()));
    socket.on('error', () => {});
    this.closed.push(new Promise((resolve) => socket.on('close', () => resolve())));
    socket.write(head);
  }

  /** Resolves once the attack is under way: every connection has been answered or has sent three more bytes of its body. */
  underWay(): Promise<unknown> {
    return waitFor('the attack to be under way', async () => this.received.map((r, i) => r !== '' || this.sent[i] >= 3), (ready) => ready.every(Boolean));
  }

  /** The answers that have begun to come, one per connection ('' for none yet). */
  async answered(): Promise<string[]> {
    return [...this.received];
  }

  /** The status of each answer, once every connection is closed. */
  async statuses(): Promise<number[]> {
    await Promise.all(this.closed);
    return this.received.map((raw) => Number(/^HTTP\/1\.1 (\d+)/.exec(raw)?.[1] ?? 0));
  }

  close(): void {
    clearInterval(this.drip);
    this.sockets.forEach((s) => s.destroy());
  }
}

/** A request from another client, with how long it took: it must be answered, and promptly. */
async function timed(url: string, init: RequestInit = {}): Promise<{ status: number; ms: number; body: string }> {
  const started = performance.now();
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(10_000) });
  const body = await res.text();
  return { status: res.status, ms: performance.now() - started, body };
}

const PROMPT_MS = 2000;

function assertPrompt(res: { status: number; ms: number; body: string }, status: number, what: string): void {
  assert.equal(res.status, status, `${what}: ${res.body}`);
  assert.ok(res.ms < PROMPT_MS, `${what} took ${Math.round(res.ms)} ms`);
}

async function keyOf(k: TestKeel, org: string, name: string, token = k.token): Promise<string> {
  assert.equal((await k.call('POST', `/org/${org}/serviceaccount`, { name }, { token })).status, 201);
  const res = await k.call('POST', `/org/${org}/serviceaccount/${name}/-addKey`, {}, { token });
  assert.equal(res.status, 200, res.raw);
  return res.body.key;
}

forEachBackend('admission per principal on every route', (backend: Backend) => {
  let k: TestKeel;
  let port: number;
  let base: string;
  /** A key of another org (made by the admin, who founds it), which may view that org's GVCs. */
  let otherOrgKey: string;

  before(async () => {
    // 64 requests in flight at most, server-wide, and bodies that must arrive within 1.5 s.
    k = await startKeel(backend, 'acme', { maxInFlight: 64, bodyTimeoutMs: 1500 });
    base = await k.listen();
    port = Number(new URL(base).port);
    assert.equal((await k.call('POST', '/org', { name: 'elsewhere' })).status, 201);
    otherOrgKey = await keyOf(k, 'elsewhere', 'neighbour');
    const policy = await k.call('POST', '/org/elsewhere/policy', { name: 'neighbour-gvc', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/neighbour'] }] });
    assert.equal(policy.status, 201, policy.raw);
  });
  after(async () => k?.close());

  test('64 slow bodies on /v2/token from one address: the registry, /about and other keys are still answered', async () => {
    const attack = new Dribblers(port);
    try {
      for (let i = 0; i < 64; i++) {
        attack.open('POST /v2/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ngrant_type=password&password=');
      }
      await attack.underWay();
      // The same address, without credentials: the public routes.
      assertPrompt(await timed(`${base}/about`), 200, '/about');
      assertPrompt(await timed(`${base}/discovery`), 200, '/discovery');
      // The same address with a key: the registry and the API.
      const basic = `Basic ${Buffer.from(`user:${k.token}`).toString('base64')}`;
      assertPrompt(await timed(`${base}/v2/`, { headers: { authorization: basic } }), 200, 'the registry with a key');
      assertPrompt(await timed(`${base}/v2/token`, { headers: { authorization: basic } }), 200, 'a registry token for a key');
      assertPrompt(await timed(`${base}/org/acme/gvc`, { headers: { authorization: `Bearer ${k.token}` } }), 200, 'the API with a key');
      assertPrompt(await timed(`${base}/org/elsewhere/gvc`, { headers: { authorization: `Bearer ${otherOrgKey}` } }), 200, "another org's key");
      // The attacker's share: four bodies, each read until bodyTimeoutMs; the rest refused before their
      // body, or as soon as it is slow (within a tenth of a second).
      const statuses = await attack.statuses();
      assert.deepEqual(statuses.filter((s) => s !== 429), [408, 408, 408, 408], statuses.join(' '));
    } finally {
      attack.close();
    }
    // The address's share is free again.
    const form = await timed(`${base}/v2/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `grant_type=password&password=${encodeURIComponent(k.token)}` });
    assertPrompt(form, 200, 'a token through the form');
  });

  test('70 view-only keys sending slow creates: each is refused 403 before its body, and the superusers and another org are answered', async () => {
    const viewers: string[] = [];
    for (let i = 0; i < 70; i++) viewers.push(await keyOf(k, 'acme', `viewer-${backend}-${i}`));
    const policy = await k.call('POST', '/org/acme/policy', {
      name: `viewers-${backend}`,
      targetKind: 'gvc',
      target: 'all',
      bindings: [{ permissions: ['view'], principalLinks: viewers.map((_, i) => `//serviceaccount/viewer-${backend}-${i}`) }],
    });
    assert.equal(policy.status, 201, policy.raw);
    const attack = new Dribblers(port);
    try {
      for (const key of viewers) attack.open(`POST /org/acme/gvc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"name":`);
      await attack.underWay();
      // The first org's superusers (the admin) read and write; a key of another org reads.
      assertPrompt(await timed(`${base}/org/acme/gvc`, { headers: { authorization: `Bearer ${k.token}` } }), 200, "the first org's superuser");
      assertPrompt(
        await timed(`${base}/org/acme/gvc`, { method: 'POST', headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: `made-${backend}` }) }),
        201,
        "the first org's superuser creating",
      );
      assertPrompt(await timed(`${base}/org/elsewhere/gvc`, { headers: { authorization: `Bearer ${otherOrgKey}` } }), 200, "another org's key");
      const answers = await waitFor('every slow create to be answered', () => attack.answered(), (all) => all.every((a) => a !== ''));
      for (const answer of answers) {
        assert.match(answer, /^HTTP\/1\.1 403/, answer);
        assert.match(answer, /not granted \[create\] on gvc/);
      }
    } finally {
      attack.close();
    }
  });

  test('a key that may not add keys, sending a slow -addKey body, is refused 403 before its body', async () => {
    const key = await keyOf(k, 'acme', `no-keys-${backend}`);
    const attack = new Dribblers(port);
    try {
      attack.open(`POST /org/acme/serviceaccount/no-keys-${backend}/-addKey HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"description":`);
      const [answer] = await waitFor('the slow -addKey to be answered', () => attack.answered(), (all) => all[0] !== '');
      assert.match(answer, /^HTTP\/1\.1 403/, answer);
      assert.match(answer, /not granted \[addKey\] on \/org\/acme\/serviceaccount\/no-keys-/);
    } finally {
      attack.close();
    }
  });

  test("70 keys of one org that may create, sending slow bodies, hold at most their org's share", async () => {
    const creators: string[] = [];
    for (let i = 0; i < 70; i++) creators.push(await keyOf(k, 'acme', `creator-${backend}-${i}`));
    const policy = await k.call('POST', '/org/acme/policy', {
      name: `creators-${backend}`,
      targetKind: 'gvc',
      target: 'all',
      bindings: [{ permissions: ['create'], principalLinks: creators.map((_, i) => `//serviceaccount/creator-${backend}-${i}`) }],
    });
    assert.equal(policy.status, 201, policy.raw);
    const attack = new Dribblers(port);
    try {
      for (const key of creators) attack.open(`POST /org/acme/gvc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"name":`);
      await attack.underWay();
      assertPrompt(await timed(`${base}/org/acme/gvc`, { headers: { authorization: `Bearer ${k.token}` } }), 200, "the first org's superuser");
      assertPrompt(await timed(`${base}/org/elsewhere/gvc`, { headers: { authorization: `Bearer ${otherOrgKey}` } }), 200, "another org's key");
      assertPrompt(await timed(`${base}/about`), 200, '/about');
      // The org's share of bodies on their way (an eighth of maxInFlight, at least maxBodiesPerPrincipal:
      // 16) are read; the others are refused before their body.
      const answers = await attack.answered();
      assert.equal(answers.filter((a) => a.startsWith('HTTP/1.1 429')).length, 70 - 16, answers.join('\n'));
      assert.equal(answers.filter((a) => a === '').length, 16);
      const refused = answers.find((a) => a.startsWith('HTTP/1.1 429'))!;
      assert.match(refused, /"code":"rate_limited"/);
      assert.match(refused, /retry-after: 1/i);
      assert.match(refused, /org 'acme'/);
    } finally {
      attack.close();
    }
  });

  test('a key that may create still creates with a body, and /about needs no credentials', async () => {
    const maker = await keyOf(k, 'acme', `maker-${backend}`);
    const policy = await k.call('POST', '/org/acme/policy', { name: `maker-${backend}`, targetKind: 'gvc', targetLinks: [`//gvc/mine-${backend}`], bindings: [{ permissions: ['create', 'view'], principalLinks: [`//serviceaccount/maker-${backend}`] }] });
    assert.equal(policy.status, 201, policy.raw);
    const created = await timed(`${base}/org/acme/gvc`, { method: 'POST', headers: { authorization: `Bearer ${maker}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: `mine-${backend}` }) });
    assert.equal(created.status, 201, created.body);
    // Granted by name only: another name is refused after its body is read, as before.
    const other = await timed(`${base}/org/acme/gvc`, { method: 'POST', headers: { authorization: `Bearer ${maker}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: `theirs-${backend}` }) });
    assert.equal(other.status, 403, other.body);
    assert.equal((await timed(`${base}/about`)).status, 200);
  });
});

