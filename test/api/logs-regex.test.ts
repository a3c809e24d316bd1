// LogQL regular expressions as an attacker with only readLogs sends them: a pattern too long or that
// would compile too large is refused before it runs, and one that is costly on every line runs in
// slices (other requests are answered meanwhile) until its budget, then gets a 400 naming it.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { stamp, tsOfMs } from '../../src/logs/time.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const LOGS = '/logs/org/acme/loki/api/v1';
const q = (params: Record<string, string | number>) => new URLSearchParams(Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])).toString();

forEachBackend('LogQL regular expressions under a budget', (backend) => {
  let k: TestKeel;
  let reader: string;
  const range = (query: string, token = reader) => k.call('GET', `${LOGS}/query_range?${q({ query, limit: 1000, since: '1h' })}`, undefined, { token });

  before(async () => {
    // A budget well below what matching every line costs even on a fast, quiet machine (over a
    // second there), so the cut is certain wherever the test runs.
    k = await startKeel(backend, 'acme', { logsQueryBudgetMs: 200 });
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'reader' })).status, 201);
    reader = (await k.call('POST', '/org/acme/serviceaccount/reader/-addKey', { description: 'readLogs only' })).body.key;
    const policy = { name: 'log-readers', targetKind: 'org', target: 'all', bindings: [{ permissions: ['readLogs'], principalLinks: ['//serviceaccount/reader'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    // 40,000 lines of 200 random a's and b's: text on which a pattern that needs many DFA states is slow.
    let seed = 7;
    const letter = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) & 64 ? 'a' : 'b');
    const lines = Array.from({ length: 40_000 }, (_, i) => ({ org: 'acme', ts: stamp(Date.now()), labels: { gvc: 'g', workload: 'w' }, line: `${i} ${Array.from({ length: 200 }, letter).join('')}` }));
    await k.store.transaction((tx) => tx.appendLogs(lines));
  });
  after(() => k.close());

  test('the 4 KB `.*.*…Z` line filter is refused at once: a pattern is at most 1024 characters', async () => {
    const res = await range(`{gvc="g"} |~ "${'.*'.repeat(2000)}Z"`);
    assert.equal(res.status, 400, res.raw);
    assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
    assert.match(res.body.message, /regular expression is longer than 1024 characters/);
    // The same in a label matcher, and in a tail.
    assert.match((await range(`{gvc=~"${'.*'.repeat(600)}g"}`)).body.message, /longer than 1024/);
  });

  test('a short pattern that would compile large is refused before it is compiled; so are several that do together', async () => {
    for (const query of ['{gvc="g"} |~ "(a|aa){1000}"', '{gvc="g"} |~ "(?:[a-z]{30}){30}"', `{gvc="g"}${' |~ "(?:ab|cd){100}"'.repeat(3)}`, '{gvc=~"(g|gg){600}"}']) {
      const res = await range(query);
      assert.equal(res.status, 400, `${query}: ${res.raw.slice(0, 200)}`);
      assert.match(res.body.message, /regular expressions are too large .* more than 1000/);
    }
    const many = await range(`{gvc="g"}${' |~ "a"'.repeat(5)}`);
    assert.equal(many.status, 400);
    assert.match(many.body.message, /more than 4 regular expressions/);
    const invalid = await range('{gvc="g"} |~ "(a"');
    assert.equal(invalid.status, 400);
    assert.match(invalid.body.message, /invalid regular expression "\(a": missing closing \)/);
  });

  test('a pattern costly on every line yields to other requests while it runs, then is cut at logsQueryBudgetMs', async () => {
    let finished = false;
    const hostile = range('{gvc="g"} |~ "(?:a[ab]{20}b[ab]{20}){2}[^ab]"').finally(() => (finished = true));
    // Another caller's requests are answered while the hostile read is still matching.
    let answered = 0;
    while (!finished && answered < 20) {
      assert.equal((await k.call('GET', '/org/acme/gvc')).status, 200);
      answered++;
    }
    const res = await hostile;
    assert.ok(answered >= 3, `only ${answered} requests were answered while the regex ran`);
    assert.equal(res.status, 400, res.raw.slice(0, 200));
    assert.match(res.body.message, /spent more than 200 ms matching lines \(logsQueryBudgetMs\)/);
  });

  test('a tail with such a pattern is closed (1011) naming the budget, and other requests are answered meanwhile', async () => {
    const base = (await k.listen()).replace(/^http/, 'ws');
    const query = '{gvc="g"} |~ "(?:a[ab]{20}b[ab]{20}){2}[^ab]"';
    const socket = new WebSocket(`${base}${LOGS}/tail?${q({ query, limit: 10, start: tsOfMs(Date.now() - 3_600_000) })}`, { headers: { authorization: reader } });
    let closed: { code: number; reason: string } | undefined;
    const ended = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve((closed = { code, reason: reason.toString() }))));
    let answered = 0;
    while (!closed && answered < 20) {
      assert.equal((await k.call('GET', '/org/acme/gvc')).status, 200);
      answered++;
    }
    const { code, reason } = await ended;
    assert.ok(answered >= 3, `only ${answered} requests were answered while the tail matched`);
    assert.equal(code, 1011);
    assert.match(reason, /logsQueryBudgetMs/);
  });

  test('ordinary regular expressions still answer, case-insensitively and anchored as Loki does', async () => {
    const res = await range('{gvc="g", workload=~"w|x"} |~ "(?i)^1999 [AB]+$"');
    assert.equal(res.status, 200, res.raw.slice(0, 300));
    const values = res.body.data.result.flatMap((s: any) => s.values.map((v: [string, string]) => v[1]));
    assert.equal(values.length, 1);
    assert.match(values[0], /^1999 [ab]{200}$/);
    assert.equal((await range('{gvc="g", workload=~"W"}')).body.data.result.length, 0);
  });
});
