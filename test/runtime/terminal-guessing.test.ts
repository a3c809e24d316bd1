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
    // One limiter: the same address guessing over HTTP is refused too.
    const http = await fetch(`${base}/org/acme/gvc`, { headers: { authorization: `Bearer ${guess(301)}` } });
    assert.equal(http.status, 429);
    assert.ok(Number(http.headers.get('retry-after')) >= 1);
    // A valid key from that address still signs in: it is told about the replica, not refused.
    const valid = await session(base, k.token);
    assert.doesNotMatch(valid, /^(Unauthorized|Rate limited)/);
    assert.match(valid, /^Failed to create terminal session: /);
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
