// List, then watch: every list, query and item GET names the chain position it reflects
// (Keel-Seq), and a watch from it delivers every later change exactly once, with writes racing
// the list, across reconnects, and (on PostgreSQL) across two real Keel processes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse, type SseEvent } from '../support/sse.js';
import { spawnKeel, type KeelProcess } from '../support/spawn-keel.js';

forEachBackend('list then watch', (backend) => {
  let k: TestKeel;
  let base: string;
  /** Where the watch and half the writes go: a second process on PostgreSQL, the same one on SQLite. */
  let other: string;
  let second: KeelProcess | undefined;
  before(async () => {
    k = await startKeel(backend);
    base = await k.listen();
    if (backend === 'postgres') second = await spawnKeel(k.config.databaseUrl!);
    other = second?.base ?? base;
  });
  after(async () => {
    await second?.stop();
    await k.close();
  });

  const headers = () => ({ authorization: `Bearer ${k.token}`, 'content-type': 'application/json' });
  const send = async (at: string, method: string, path: string, body?: unknown) => {
    const res = await fetch(at + path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, seq: res.headers.get('keel-seq'), body: text ? JSON.parse(text) : undefined };
  };

  test('list, query and item GET carry Keel-Seq, the org head; a write to any kind moves it', async () => {
    assert.equal((await send(base, 'POST', '/org/acme/group', { name: 'pos-a' })).status, 201);
    const list = await send(base, 'GET', '/org/acme/group');
    const head = (await k.store.auditHead('acme')).seq;
    assert.equal(list.seq, String(head));
    const item = await send(base, 'GET', '/org/acme/group/pos-a');
    assert.equal(item.seq, String(head));
    const query = await send(base, 'POST', '/org/acme/group/-query', { spec: { match: 'all', terms: [{ property: 'name', op: '=', value: 'pos-a' }] } });
    assert.equal(query.status, 200);
    assert.equal(query.seq, String(head));
    assert.deepEqual(Object.keys(list.body).sort(), ['itemKind', 'items', 'kind', 'links'], 'the list envelope is unchanged');
    assert.equal((await send(base, 'POST', '/org/acme/secret', { name: 'pos-s', type: 'opaque', data: { payload: 'x' } })).status, 201);
    assert.equal((await send(other, 'GET', '/org/acme/group/pos-a')).seq, String(head + 1), 'a secret created elsewhere moves the group read position');
    // Errors carry no position.
    assert.equal((await send(base, 'GET', '/org/acme/group/missing')).seq, null);
  });

  test('since equal to the head is accepted; past it is 400; not a number is 400', async () => {
    const head = Number((await send(base, 'GET', '/org/acme/group')).seq);
    const at = await openSse(`${base}/org/acme/-watch?since=${head}`, { authorization: `Bearer ${k.token}` });
    at.close();
    for (const since of [String(head + 1), '99999999999']) {
      const res = await fetch(`${base}/org/acme/-watch?since=${since}`, { headers: headers() });
      assert.equal(res.status, 400);
      const body = (await res.json()) as Record<string, unknown>;
      assert.equal(body.code, 'bad_request');
      assert.match(String(body.message), /past the org's head/);
      assert.deepEqual(Object.keys(body).sort(), ['code', 'details', 'id', 'message', 'status']);
    }
    const past = await fetch(`${base}/org/acme/-watch`, { headers: { ...headers(), 'last-event-id': String(head + 5) } });
    assert.equal(past.status, 400);
    for (const since of ['-1', '1e3', 'x']) assert.equal((await fetch(`${base}/org/acme/-watch?since=${since}`, { headers: headers() })).status, 400);
  });

  test('a watch from a list position sees every later change exactly once, with writes racing the list and a reconnect', async () => {
    const names = Array.from({ length: 8 }, (_, i) => `race-${i}`);
    for (const name of names) assert.equal((await send(base, 'POST', '/org/acme/group', { name })).status, 201);
    let writing = true;
    const writer = async (at: string, w: number) => {
      let i = 0;
      while (writing || i < 10) {
        const name = names[(i * 3 + w) % names.length];
        const res = await send(at, 'PATCH', `/org/acme/group/${name}`, { description: `w${w} ${i}` });
        assert.equal(res.status, 200);
        if (i % 7 === 0) assert.equal((await send(at, 'POST', '/org/acme/group', { name: `race-new-${w}-${i}` })).status, 201);
        i++;
      }
    };
    const writers = [writer(base, 0), writer(other, 1)];
    // The list and the watch start while both processes write.
    await new Promise((resolve) => setTimeout(resolve, 30));
    const list = await send(base, 'GET', '/org/acme/group?limit=1000');
    assert.equal(list.status, 200);
    const listed = new Map<string, number>(list.body.items.map((g: { name: string; version: number }) => [g.name, g.version]));
    const url = `${other}/org/acme/-watch?kind=group`;
    const auth = { authorization: `Bearer ${k.token}` };
    const first = await openSse(`${url}&since=${list.seq}`, auth);
    const seen: SseEvent[] = await first.take(5);
    first.close();
    // Reconnects, on the other process, from the last event it saw.
    const resumed = await openSse(url, { ...auth, 'last-event-id': seen[seen.length - 1].id! });
    writing = false;
    await Promise.all(writers);
    const final = await send(base, 'GET', '/org/acme/group?limit=1000');
    const finalVersions = new Map<string, number>(final.body.items.map((g: { name: string; version: number }) => [g.name, g.version]));
    // Reads until every group's latest version has arrived (the final list's position bounds it).
    const target = Number(final.seq);
    seen.push(...(await resumed.takeUntil((e) => Number(e.id) >= target)));
    resumed.close();
    const changes = seen.filter((e) => e.event !== 'bookmark');
    const versions = new Map<string, number[]>();
    for (const e of changes) versions.set(e.data.object.name, [...(versions.get(e.data.object.name) ?? []), e.data.object.version]);
    for (const [name, last] of finalVersions) {
      if (!name.startsWith('race-')) continue;
      const from = listed.get(name) ?? 0;
      const expected = Array.from({ length: last - from }, (_, i) => from + 1 + i);
      assert.deepEqual(versions.get(name) ?? [], expected, `${name}: listed at version ${from}, final ${last}`);
    }
    const seqs = changes.map((e) => Number(e.id));
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
    assert.equal(new Set(seqs).size, seqs.length, 'no event twice');
    assert.ok(seqs.every((s) => s > Number(list.seq)));
  });
});
