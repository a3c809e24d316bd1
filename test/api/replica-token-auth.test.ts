// The authentication side of CPLN_TOKEN (test/runtime/token.test.ts drives it from real replicas):
// a token whose hash the runtime stored acts as the workload's identity on every Keel process on
// the store, is refused on all of them within FRESH_MS once its row is deleted (the replica
// stopped), and a token of the right shape that no replica holds is refused.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { mintReplicaToken } from '../../src/auth/replica-tokens.js';
import type { App } from '../../src/server/app.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse } from '../support/sse.js';

forEachBackend('replica tokens (CPLN_TOKEN) across Keel processes', (backend) => {
  let k: TestKeel;
  let second: App;
  const get = async (app: App, url: string, token: string) => (await k.call('GET', url, undefined, { token, app })).status;
  /** Polls both processes until each refuses the token, failing if one still accepts it 1.5 s after `since`. */
  const refusedSoon = async (token: string, since: number) => {
    for (const app of [second, k.app]) {
      for (;;) {
        const status = await get(app, '/org/acme/gvc/web', token);
        if (status === 401) break;
        assert.equal(status, 200);
        assert.ok(Date.now() - since < 1_500, `still accepted ${Date.now() - since} ms after its replica stopped`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  };

  before(async () => {
    k = await startKeel(backend);
    second = (await k.reopen()).app;
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'web' })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/web/identity', { name: 'app' })).status, 201);
    const policy = { name: 'app-views-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//gvc/web/identity/app'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 's1', type: 'opaque', data: { payload: 'x' } })).status, 201);
  });
  after(() => k.close());

  test('a stored token acts as the identity on both processes, and is refused on both within a second of its deletion', async () => {
    const { token, tokenHash } = mintReplicaToken();
    await k.store.putReplicaToken({ tokenHash, org: 'acme', gvc: 'web', identity: 'app', scope: 'test', replica: 'r1', created: new Date().toISOString() });
    for (const app of [k.app, second]) {
      assert.equal(await get(app, '/org/acme/gvc/web', token), 200);
      assert.equal(await get(app, '/org/acme/secret/s1', token), 403, 'granted view on GVCs only');
      assert.equal(await get(app, '/org/acme/secret', token), 200, 'a member of its org lists what it may see');
      assert.equal(await get(app, '/org/acme', token), 403, 'a member of its org, without view on it');
    }
    await k.store.deleteReplicaTokens('test', 'r1');
    await refusedSoon(token, Date.now());
  });

  test('a watch stream opened with the token ends once its replica stopped', async () => {
    const base = await k.listen();
    const { token, tokenHash } = mintReplicaToken();
    await k.store.putReplicaToken({ tokenHash, org: 'acme', gvc: 'web', identity: 'app', scope: 'test', replica: 'r3', created: new Date().toISOString() });
    const stream = await openSse(`${base}/org/acme/-watch?kind=gvc`, { authorization: `Bearer ${token}` });
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'seen' })).status, 201);
    await stream.takeUntil((e) => e.data?.object?.name === 'seen');
    await k.store.deleteReplicaTokens('test', 'r3');
    const stopped = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('the stream was still open 5 s after its replica stopped')), 5_000)));
    await Promise.race([stream.rest(), late]).finally(() => clearTimeout(timer));
    assert.ok(Date.now() - stopped < 3_000, `the stream ended ${Date.now() - stopped} ms after its replica stopped`);
  });

  test("misuse: a forged token, a token on another org's path, a deleted scope's tokens", async () => {
    assert.equal(await get(k.app, '/org/acme/gvc/web', mintReplicaToken().token), 401);
    assert.equal(await get(k.app, '/org/acme/gvc/web', 'keelwl_short'), 401);
    const { token, tokenHash } = mintReplicaToken();
    await k.store.putReplicaToken({ tokenHash, org: 'acme', gvc: 'web', identity: 'app', scope: 'gone', replica: 'r2', created: new Date().toISOString() });
    assert.equal(await get(second, '/org/acme/gvc/web', token), 200);
    assert.equal((await k.call('POST', '/org', { name: 'beta' })).status, 201);
    assert.equal(await get(second, '/org/beta', token), 403);
    assert.equal(await get(second, '/org/beta/gvc', token), 403);
    // A runtime starting again over its data directory deletes every token of its earlier replicas.
    await k.store.deleteReplicaTokens('gone');
    await refusedSoon(token, Date.now());
  });
});
