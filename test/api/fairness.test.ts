// Many hostile principals against one server: each gets its fair share of the server's seats and no
// more, and an unrelated caller's work is dispatched in its own turn while the attack goes on.
// Written as the attackers call the API: several service-account keys that may only view.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { buildApp } from '../../src/server/app.js';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse } from '../support/sse.js';
import { waitFor } from '../support/wait.js';

/** Every `~` term on `*` reads every value of every candidate: with the budget below, each such query runs until refused. */
const HEAVY = { spec: { match: 'any', terms: Array.from({ length: 10 }, (_, i) => ({ op: '~', property: '*', value: `nothing-matches-${i}` })) } };
const HOSTILE = 20;

forEachBackend('fair sharing among principals', (backend) => {
  let k: TestKeel;
  let base: string;
  /** Keys of HOSTILE service accounts that may view gvcs and groups, and of one bystander that may also edit gvcs. */
  const hostile: string[] = [];
  let bystander: string;

  const call = async (token: string, method: string, url: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await k.app.core.inject({ method: method as 'GET', url, headers, payload: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.statusCode, headers: res.headers, body: res.body ? JSON.parse(res.body) : undefined };
  };

  const keyFor = async (name: string) => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
    const res = await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, {});
    assert.equal(res.status, 200, res.raw);
    return res.body.key as string;
  };

  before(async () => {
    // One seat for lists and one for long reads make the order of dispatch the whole story; four
    // mutation seats show that bodies still arriving hold none of them.
    k = await startKeel(backend, 'acme', { queryBudgetMs: 100, maxListsInFlight: 1, listsQueuedPerPrincipal: 4, maxLongReadsInFlight: 1, maxMutationsInFlight: 4, maxInFlightPerPrincipal: 60 });
    await k.app.core.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(k.app.core.server.address() as { port: number }).port}`;
    for (let i = 0; i < HOSTILE; i++) hostile.push(await keyFor(`hostile-${i}`));
    bystander = await keyFor('bystander');
    const bind = (permissions: string[], names: string[]) => [{ permissions, principalLinks: names.map((n) => `//serviceaccount/${n}`) }];
    const hostileNames = hostile.map((_, i) => `hostile-${i}`);
    for (const kind of ['gvc', 'group']) {
      assert.equal((await k.call('POST', '/org/acme/policy', { name: `hostile-${kind}`, targetKind: kind, target: 'all', bindings: bind(['view'], hostileNames) })).status, 201);
    }
    assert.equal((await k.call('POST', '/org/acme/policy', { name: 'bystander-gvc', targetKind: 'gvc', target: 'all', bindings: bind(['view', 'create', 'edit'], ['bystander']) })).status, 201);
    // A chain for the replays: groups made through the API, each an audit event.
    const tags = (i: number) => Object.fromEntries(Array.from({ length: 20 }, (_, t) => [`t${t}`, `${i}-${t}-`.padEnd(500, 'x')]));
    for (let batch = 0; batch < 15; batch++) {
      await Promise.all(Array.from({ length: 20 }, async (_, j) => assert.equal((await k.call('POST', '/org/acme/group', { name: `team-${batch * 20 + j}`, tags: tags(batch * 20 + j) })).status, 201)));
    }
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
  after(() => k.close());

  test("heavy queries from many principals: an unrelated caller's list is dispatched at the next free seat, ahead of their lines", async () => {
    // The bystander lists now and then: the scheduler knows its lists are light.
    for (let i = 0; i < 8; i++) assert.equal((await call(bystander, 'GET', '/org/acme/gvc?limit=5')).status, 200);
    let answered = 0;
    const statuses: number[] = [];
    const attack = hostile.flatMap((key) =>
      Array.from({ length: 4 }, () =>
        call(key, 'POST', '/org/acme/gvc/-query', HEAVY).then((res) => {
          answered++;
          statuses.push(res.status);
        }),
      ),
    );
    // The attack is under way: its queries are being answered one at a time.
    await waitFor('the first heavy queries to be answered', async () => answered, (n) => n >= 2, 60_000);
    const before = answered;
    const list = await call(bystander, 'GET', '/org/acme/gvc?limit=5');
    const meanwhile = answered - before;
    const ongoing = answered < attack.length;
    await Promise.all(attack);
    assert.equal(list.status, 200, JSON.stringify(list.body));
    assert.equal(list.body.items.length, 5);
    // First come, first served would have put it behind every query already in line (up to 78).
    assert.ok(meanwhile <= 2, `the list waited for ${meanwhile} heavy queries`);
    assert.ok(ongoing, 'the attack was still going on');
    assert.deepEqual([...new Set(statuses)], [400], 'each heavy query ran to its budget; none was refused, as each principal stayed within its line');
  });

  test("heavy queries from many principals hold every seat but the one kept for short work: a caller whose lists are short does not wait for any of them to end", async () => {
    // Each side's cost is known: the bystander's lists are short, each hostile key's query runs to its budget.
    for (let i = 0; i < 8; i++) assert.equal((await call(bystander, 'GET', '/org/acme/gvc?limit=5')).status, 200);
    await Promise.all(hostile.map(async (key) => assert.equal((await call(key, 'POST', '/org/acme/gvc/-query', HEAVY)).status, 400)));
    let answered = 0;
    const attack = hostile.flatMap((key) =>
      Array.from({ length: 2 }, () => call(key, 'POST', '/org/acme/gvc/-query', HEAVY).then(() => void answered++)),
    );
    await waitFor('the first heavy query to be answered', async () => answered, (n) => n >= 1, 60_000);
    const before = answered;
    // One after another, as a client pages: with no seat of its own, each list after the first would
    // wait for the heavy query holding the one general seat to end.
    const LISTS = 6;
    for (let i = 0; i < LISTS; i++) {
      const list = await call(bystander, 'GET', '/org/acme/gvc?limit=5');
      assert.equal(list.status, 200, JSON.stringify(list.body));
    }
    const meanwhile = answered - before;
    const ongoing = answered < attack.length;
    await Promise.all(attack);
    assert.ok(ongoing, 'the attack was still going on');
    assert.ok(meanwhile <= LISTS / 2, `${LISTS} lists waited for ${meanwhile} heavy queries to end`);
  });

  test("heavy queries from many principals hold every list seat: a new caller's history and event log reads are answered at once, not after a turn of theirs", async () => {
    // A principal the scheduler has not seen: were it in the queries' level, it would not count as
    // short, and would wait behind about one query of each of the twenty.
    const historian = await keyFor('historian');
    assert.equal((await k.call('POST', '/org/acme/policy', { name: 'historian', targetKind: 'group', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/historian'] }] })).status, 201);
    let answered = 0;
    const attack = hostile.flatMap((key) =>
      Array.from({ length: 2 }, () => call(key, 'POST', '/org/acme/gvc/-query', HEAVY).then(() => void answered++)),
    );
    await waitFor('the first heavy query to be answered', async () => answered, (n) => n >= 1, 60_000);
    const before = answered;
    const history = await call(historian, 'GET', '/org/acme/group/team-7/-history?limit=5');
    const eventlog = await call(historian, 'GET', '/org/acme/group/team-7/-eventlog');
    const meanwhile = answered - before;
    const ongoing = answered < attack.length;
    await Promise.all(attack);
    assert.equal(history.status, 200, JSON.stringify(history.body));
    assert.equal(history.body.items[0].resource.name, 'team-7');
    assert.equal(eventlog.status, 200, JSON.stringify(eventlog.body));
    assert.ok(ongoing, 'the attack was still going on');
    // Two reads in one line behind the queries would each have waited for several of them to end.
    assert.ok(meanwhile <= 2, `the reads waited for ${meanwhile} heavy queries to end`);
  });

  test('heavy queries from many principals hold one list seat at a time: their answers come a budget apart, and a caller whose lists are light takes the other seat at once', async () => {
    // Two list seats and none kept for short work, on the same store: only the rule for heavy work keeps a seat for the bystander.
    // Work is heavy from a quarter of the budget, measured in seat time: 100 ms here, which a 5-item
    // list stays below even on a machine so loaded that it takes tens. A hundred regular expressions over
    // each item's long description run to this budget on any machine; eight keys keep the attack (a budget each, one at a time) short.
    const BUDGET = 400;
    const HEAVIEST = { spec: { match: 'any', terms: Array.from({ length: 100 }, (_, i) => ({ op: '~', property: 'description', value: `nothing-matches-${i}` })) } };
    const attackers = hostile.slice(0, 8);
    const two = await buildApp({ ...k.config, queryBudgetMs: BUDGET, maxListsInFlight: 2, shortReadSeats: 0 }, k.store, { logger: false });
    const on = async (token: string, method: string, url: string, body?: unknown) => {
      const res = await two.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) }, payload: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.statusCode, body: JSON.parse(res.body) };
    };
    try {
      // Each side's cost is known to this server's scheduler.
      for (let i = 0; i < 8; i++) assert.equal((await on(bystander, 'GET', '/org/acme/gvc?limit=5')).status, 200);
      await Promise.all(attackers.map(async (key) => assert.equal((await on(key, 'POST', '/org/acme/gvc/-query', HEAVIEST)).status, 400)));
      const answeredAt: number[] = [];
      const statuses: number[] = [];
      const attack = attackers.map((key) => on(key, 'POST', '/org/acme/gvc/-query', HEAVIEST).then((res) => {
        answeredAt.push(performance.now());
        statuses.push(res.status);
      }));
      await waitFor('the first heavy query to be answered', async () => answeredAt.length, (n) => n >= 1, 60_000);
      const before = answeredAt.length;
      const LISTS = 6;
      for (let i = 0; i < LISTS; i++) assert.equal((await on(bystander, 'GET', '/org/acme/gvc?limit=5')).status, 200);
      const meanwhile = answeredAt.length - before;
      const ongoing = answeredAt.length < attack.length;
      await Promise.all(attack);
      assert.ok(ongoing, 'the attack was still going on');
      // Were both seats held by heavy queries, each list would wait for one of them to end.
      assert.ok(meanwhile <= 2, `${LISTS} lists waited for ${meanwhile} heavy queries to end`);
      // One heavy query at a time, each running its whole budget: no two end together.
      assert.deepEqual([...new Set(statuses)], [400], 'each heavy query ran to its budget');
      const gaps = answeredAt.slice(1).map((t, i) => t - answeredAt[i]);
      assert.ok(Math.min(...gaps) >= BUDGET * 0.6, `two heavy queries ended ${Math.min(...gaps).toFixed(1)} ms apart`);
    } finally {
      await two.core.close();
      await two.audit.close();
    }
  });

  test('a principal whose line is full gets 429 rate_limited with Retry-After; the first org\'s superusers and /about still answer', async () => {
    const flood = Array.from({ length: 8 }, () => call(hostile[0], 'POST', '/org/acme/gvc/-query', HEAVY));
    // Exempt: neither queued nor counted, whatever the long-read line holds.
    const admin = await call(k.token, 'GET', '/org/acme/gvc?limit=3');
    assert.equal(admin.status, 200);
    assert.equal(admin.body.items.length, 3);
    const about = await k.app.core.inject({ method: 'GET', url: '/about' });
    assert.equal(about.statusCode, 200);
    const results = await Promise.all(flood);
    const refused = results.filter((r) => r.status === 429);
    // One running, four waiting (listsQueuedPerPrincipal), three refused.
    assert.equal(refused.length, 3, results.map((r) => r.status).join(' '));
    for (const r of refused) {
      assertError(r, 429, 'rate_limited');
      assert.equal(r.headers['retry-after'], '1');
      assert.match(r.body.message, /maxListsInFlight, listsQueuedPerPrincipal/);
    }
    for (const r of results) if (r.status !== 429) assertError(r, 400, 'bad_request');
    // Another principal's line is its own.
    assert.equal((await call(hostile[1], 'GET', '/org/acme/gvc?limit=1')).status, 200);
  });

  test('clients that go away while they wait, while their body comes or while they run give their seats back', async () => {
    // Heavy queries dropped by their clients at every stage, many times over, through real connections.
    for (let round = 0; round < 5; round++) {
      const dropped = hostile.slice(0, 10).flatMap((key, i) =>
        Array.from({ length: 3 }, async (_, j) => {
          const gone = new AbortController();
          const res = fetch(`${base}/org/acme/gvc/-query`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(HEAVY), signal: gone.signal });
          setTimeout(() => gone.abort(), (i * 3 + j) * 7);
          await res.then((r) => r.arrayBuffer()).catch(() => undefined);
        }),
      );
      await Promise.all(dropped);
    }
    // Every seat is free again: a list is answered, and so is each of a lone caller's two at once.
    const lists = await Promise.all([0, 1].map(() => call(bystander, 'GET', '/org/acme/gvc?limit=1')));
    assert.deepEqual(lists.map((r) => r.status), [200, 200]);
  });

  test('twenty keys sending sixty slow bodies each hold their share and no seat: another client changes and lists as usual', async () => {
    // Keys that may edit GVCs: their bodies are read (a key that may not is refused before its body).
    const editors = await k.call('POST', '/org/acme/policy', { name: 'hostile-gvc-edit', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['edit'], principalLinks: hostile.map((_, i) => `//serviceaccount/hostile-${i}`) }] });
    assert.equal(editors.status, 201, editors.raw);
    const port = Number(new URL(base).port);
    const sockets: Socket[] = [];
    const answers = new Map<string, string[]>(hostile.map((key) => [key, []]));
    /** A PATCH whose body never comes. */
    const hold = (key: string, i: number): Promise<void> =>
      new Promise((resolve, reject) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.write(`PATCH /org/acme/gvc/g-0-${i} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
          resolve();
        });
        socket.once('error', reject);
        socket.on('data', (d) => {
          socket.destroy();
          answers.get(key)!.push(d.toString());
        });
        sockets.push(socket);
      });
    // A key holds its share (maxBodiesPerPrincipal, 16) of slow bodies: the others are refused.
    const holdsItsShare = (key: string) => waitFor('the slow bodies of a key past its share to be refused', async () => answers.get(key)!.length, (n) => n === 60 - 16);
    try {
      for (const key of hostile) {
        // Sixty at a time (a burst of 1,200 connects would overflow the listen backlog, and the kernel drops some).
        await Promise.all(Array.from({ length: 60 }, (_, i) => hold(key, i)));
        await holdsItsShare(key);
      }
      assert.equal((await call(bystander, 'POST', '/org/acme/gvc', { name: 'served' })).status, 201);
      const patched = await call(bystander, 'PATCH', '/org/acme/gvc/served', { description: 'still served' });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      assert.equal(patched.body.description, 'still served');
      const listed = await fetch(`${base}/org/acme/gvc?limit=2`, { headers: { authorization: `Bearer ${bystander}` } });
      assert.equal(listed.status, 200);
      for (const [key, refused] of answers) {
        assert.equal(refused.length, 60 - 16, 'no slow body within the share was answered');
        // Refused as over its share of slow bodies, or (while a request of its earlier tests is still
        // open) over maxInFlightPerPrincipal.
        for (const answer of refused) assert.match(answer, /^HTTP\/1\.1 (429[^]*maxBodiesPerPrincipal|503[^]*maxInFlightPerPrincipal)/, key);
      }
    } finally {
      sockets.forEach((s) => s.destroy());
    }
  });

  test("watch replays from many principals take turns with everyone's reads: an unrelated list answers while they run", async () => {
    const target = (await k.store.auditHead('acme')).seq;
    let done = 0;
    const replays = hostile.slice(0, 10).flatMap((key) =>
      Array.from({ length: 2 }, async () => {
        const stream = await openSse(`${base}/org/acme/-watch?since=0`, { authorization: `Bearer ${key}` });
        const events = await stream.takeUntil((e) => Number(e.id) >= target);
        stream.close();
        done++;
        return events;
      }),
    );
    const list = await fetch(`${base}/org/acme/gvc?limit=2`, { headers: { authorization: `Bearer ${bystander}` } });
    assert.equal(list.status, 200);
    const answeredWhileRunning = done;
    const results = await Promise.all(replays);
    assert.ok(answeredWhileRunning < replays.length, 'the list was answered before the replays were done');
    // Every replay, however it was interleaved, saw the whole chain once and in order.
    for (const events of results) {
      const groups = events.filter((e) => e.event === 'create' && e.data.kind === 'group').map((e) => e.data.object.name);
      assert.equal(groups.length, 300);
      assert.equal(new Set(groups).size, 300);
      const ids = events.filter((e) => e.event !== 'bookmark').map((e) => Number(e.id));
      assert.deepEqual(ids, [...ids].sort((a, b) => a - b));
    }
  });
});
