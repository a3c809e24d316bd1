// Fuzzing the Core API (and the Audit API) over HTTP with requests drawn from the kind schemas (test/fuzz/requests.ts):
// random valid and invalid bodies for every kind's create/replace/apply/patch, patch directives,
// queries, headers and content types, hostile bodies (deep nesting, sizes around the 1 MiB limit,
// prototype keys, unicode) and path tricks in names. Every answer comes within a deadline, is
// never a 5xx, and every 4xx is exactly the API's error object; Object.prototype stays untouched,
// and Keel still serves correctly afterwards. The bounded run here; `npm run fuzz` runs longer.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, test } from 'node:test';
import { KINDS } from '../../src/kinds/index.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { verifyChain } from '../../src/audit/verify.js';
import { anyRequest, assertNoPollution, AUDIT_CONTEXT, auditRequest, checkAnswer, fuzz, GVC, hostileRequests, kindPath, kindRequest, send, seedTargets, type FuzzRequest, type Targets } from './requests.js';

const RUNS = Number(process.env.FUZZ_TEST_RUNS ?? 250);
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;

forEachBackend('HTTP fuzzing', (backend) => {
  let k: TestKeel;
  let port: number;
  let targets: Targets;
  let sent = 0;

  // The server's error log, so that a 5xx is reported with the error behind it.
  const errors: string[] = [];
  const exercise = async (req: FuzzRequest) => {
    const logged = errors.length;
    const res = await send(k.app, port, req);
    sent++;
    try {
      checkAnswer(req, res);
    } catch (err) {
      if (errors.length > logged) (err as Error).message += `\n  server log: ${errors.slice(logged).join('\n  ').slice(0, 2000)}`;
      throw err;
    }
    assertNoPollution(`${req.label} ${req.method} ${req.url.slice(0, 80)}`);
  };

  before(async () => {
    const log = new Writable({
      write(chunk, _encoding, done) {
        errors.push(String(chunk).trim());
        done();
      },
    });
    // The fuzzer sends thousands of bad credentials from one address on purpose; the limit on failed
    // authentications (which would then refuse the admin too) has its own tests in test/api/limits.test.ts.
    k = await startKeel(backend, 'acme', { logLevel: 'error', authFailureLimit: 0 }, log);
    const gvc = await k.call('POST', '/org/acme/gvc', { name: GVC });
    assert.equal(gvc.status, 201, JSON.stringify(gvc.body));
    assert.equal((await k.call('POST', '/org/acme/auditctx', { name: AUDIT_CONTEXT })).status, 201);
    await k.app.core.listen({ port: 0, host: '127.0.0.1' });
    port = (k.app.core.server.address() as { port: number }).port;
    targets = { token: k.token, seeded: await seedTargets(k.app, k.token) };
  });
  after(() => k.close());

  test('items were seeded for most kinds, so patches reach real objects', () => {
    // A regression guard for the generators: if valid bodies stop being valid, the fuzzing below
    // would only ever see 4xx for "not found" and prove little.
    assert.ok(targets.seeded.size >= 15, `seeded only ${[...targets.seeded.keys()].join(', ')}`);
  });

  test('hostile bodies, content types and headers: no 5xx, no hang, valid error objects', async () => {
    for (const req of hostileRequests(targets)) await exercise(req);
  });

  test('random requests about every kind (create, apply, replace, patch, get, list, query, delete)', async () => {
    for (const def of KINDS) {
      await fuzz(kindRequest(def, targets), Math.max(8, Math.round(RUNS / 10)), exercise, SEED);
    }
  });

  test('random requests anywhere, including odd paths', async () => {
    await fuzz(anyRequest(targets), RUNS, exercise, SEED);
  });

  test('random Audit API requests (queries, lookups, custom events): no 5xx, and the chain still verifies', async () => {
    await fuzz(auditRequest(targets), RUNS, exercise, SEED);
    const custom = await k.app.audit.inject({ method: 'GET', url: `/audit/org/acme?contextName=${AUDIT_CONTEXT}&limit=1000`, headers: { authorization: `Bearer ${k.token}` } });
    assert.equal(custom.statusCode, 200);
    assert.ok(JSON.parse(custom.body).items.length > 0, 'no custom event was accepted: the generator only makes invalid ones');
    const chain = await verifyChain(k.store, 'acme');
    assert.equal(chain.ok, true, JSON.stringify(chain));
  });

  test('afterwards Keel still answers correctly and the prototype chain is intact', async () => {
    assert.ok(sent > 1000, `only ${sent} requests were sent`);
    const about = await k.call('GET', '/about');
    assert.equal(about.status, 200);
    const group = await k.call('POST', '/org/acme/group', { name: 'after-fuzz', tags: { ok: 'yes' } });
    assert.equal(group.status, 201, JSON.stringify(group.body));
    const read = await k.call('GET', '/org/acme/group/after-fuzz');
    assert.deepEqual(read.body.tags, { ok: 'yes' });
    // Nothing stored by the fuzzing breaks reading any kind.
    for (const def of KINDS) {
      const list = await k.call('GET', `${kindPath(def)}?limit=1000`);
      assert.ok(list.status < 500 && (list.status !== 200 || Array.isArray(list.body.items)), `${def.kind}: ${list.status} ${list.raw.slice(0, 300)}`);
      for (const item of list.status === 200 ? list.body.items : []) assert.equal(typeof item.name, 'string', `${def.kind}: an item without a name`);
    }
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assertNoPollution('the whole run');
  });
});
