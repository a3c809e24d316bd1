// Key guessing through the terminal WebSocket (what `cpln workload exec` and `connect` open): the key
// travels in the stream's first message, and a wrong one counts against the failed-authentication
// limit exactly as over HTTP. The refusal comes before any replica is looked up, so none runs here.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { startKeel, type TestKeel } from '../support/keel.js';
import { LOCATION, runcSettings } from '../support/runtime-keel.js';
import { runtimeMissing } from '../support/runtime.js';

const skip = runtimeMissing();

/** What a terminal session opened with `token` says before the server closes it. */
function session(base: string, token: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/-remote/${LOCATION}/exec`);
    let said = '';
    ws.on('open', () => ws.send(JSON.stringify({ token, org: 'acme', gvc: 'web', pod: 'web-0', command: ['echo', 'pwned'] })));
    ws.on('message', (m) => (said += m.toString()));
    ws.on('error', reject);
    ws.on('close', () => resolve(said));
  });
}

/** A well-formed key whose id no org has. */
const guess = (i: number) => `s${'x'.repeat(15)}.${Buffer.from('acme.admin.guessed').toString('base64url')}.secret-${i}`;

describe('key guessing over the terminal WebSocket (KEEL_RUNTIME=runc)', { skip }, () => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel('sqlite', 'acme', runcSettings());
    base = await k.listen();
  });
  after(async () => k?.close());

  test('300 guesses: refused as unauthorized up to authFailureLimit, then 429 rate_limited with Retry-After, like HTTP', async () => {
    const answers: string[] = [];
    const started = performance.now();
    for (let i = 0; i < 300; i++) answers.push(await session(base, guess(i)));
    const limit = k.config.authFailureLimit;
    for (const answer of answers.slice(0, limit)) assert.match(answer, /^Unauthorized: the token is invalid, expired or revoked; exit code 1$/);
    // The bucket refills at limit/60 a second while the guesses go on: a few more may be let through.
    const limited = answers.slice(limit).filter((a) => a.startsWith('Rate limited'));
    assert.ok(limited.length >= 300 - limit - Math.ceil(((performance.now() - started) / 1000) * (limit / 60)) - 1, `${limited.length} of the last ${300 - limit} were rate limited`);
    assert.match(limited[0], /^Rate limited \(429 rate_limited, Retry-After: \d+\): too many failed authentications from this address \(authFailureLimit: 120 a minute\); retry after \d+ s; exit code 1$/);
    for (const answer of answers) assert.doesNotMatch(answer, /pwned/);
    // One limiter: the same address guessing over HTTP is refused too (the bucket refills two a
    // second, so of three guesses in a row at most one finds a token).
    const http = [];
    for (let i = 0; i < 3; i++) http.push(await fetch(`${base}/org/acme/gvc`, { headers: { authorization: `Bearer ${guess(301 + i)}` } }));
    const limitedHttp = http.find((res) => res.status === 429);
    assert.ok(limitedHttp, http.map((res) => res.status).join(' '));
    assert.ok(Number(limitedHttp.headers.get('retry-after')) >= 1);
    // A valid key from that address still signs in: it is told about the replica, not refused.
    const valid = await session(base, k.token);
    assert.doesNotMatch(valid, /^(Unauthorized|Rate limited)/);
    assert.match(valid, /^Failed to create terminal session: /);
  });

  test('streams that never send their key hold only their address\'s small share, and for at most bodyTimeoutMs', async () => {
    const other = await startKeel('sqlite', 'acme', { ...runcSettings(), bodyTimeoutMs: 1500 });
    const silent: WebSocket[] = [];
    try {
      const url = `${(await other.listen()).replace(/^http/, 'ws')}/-remote/${LOCATION}/exec`;
      const said: string[] = [];
      const closed: Array<Promise<void>> = [];
      for (let i = 0; i < other.config.maxBodiesPerAddress; i++) {
        const ws = new WebSocket(url);
        silent.push(ws);
        said.push('');
        ws.on('message', (m) => (said[i] += m.toString()));
        closed.push(new Promise((resolve) => ws.on('close', () => resolve())));
        await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
      }
      // One more from the same address is refused at its upgrade, as HTTP would refuse it.
      const refused = await new Promise<{ status: number; retryAfter?: string; body: string }>((resolve, reject) => {
        const ws = new WebSocket(url);
        ws.on('open', () => reject(new Error('the stream was accepted')));
        ws.on('error', () => undefined);
        ws.on('unexpected-response', (_request, response) => {
          let body = '';
          response.on('data', (d: Buffer) => (body += d.toString()));
          response.on('end', () => resolve({ status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'] as string | undefined, body }));
        });
      });
      assert.equal(refused.status, 429);
      assert.equal(refused.retryAfter, '1');
      assert.equal(JSON.parse(refused.body).code, 'rate_limited');
      // The silent ones are cut at bodyTimeoutMs; then the address's share is free again.
      await Promise.all(closed);
      for (const words of said) assert.match(words, /did not arrive within 1500 ms \(bodyTimeoutMs\)/);
      assert.match(await session(url.replace(/^ws/, 'http').replace(`/-remote/${LOCATION}/exec`, ''), other.token), /^Failed to create terminal session: /);
    } finally {
      silent.forEach((ws) => ws.terminate());
      await other.close();
    }
  });

  test('guesses over HTTP count for the WebSocket too', async () => {
    const other = await startKeel('sqlite', 'acme', { ...runcSettings(), authFailureLimit: 5 });
    try {
      const otherBase = await other.listen();
      for (let i = 0; i < 5; i++) assert.equal((await fetch(`${otherBase}/org/acme/gvc`, { headers: { authorization: `Bearer ${guess(i)}` } })).status, 401);
      assert.match(await session(otherBase, guess(6)), /^Rate limited \(429 rate_limited/);
    } finally {
      await other.close();
    }
  });
});
