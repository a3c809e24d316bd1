// Watch streams under load and misuse: bookmarks, 410 once history is pruned, each filter (and
// permission before it), a slow client disconnected with a position it resumes from, the caps on
// streams and replays per principal, and hostile replays that must not stall an unrelated GET.
import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse, parseSse, type SseEvent } from '../support/sse.js';

/** 50 tags of 1,000 characters: an event of about 50 kB. */
const bigTags = (mark: string) => Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`t${i}`, `${mark}-${i}-`.padEnd(1000, 'x')]));

forEachBackend('watch limits', (backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { watchBookmarkMs: 100, watchStreamsPerPrincipal: 10, watchBufferBytes: 64 * 1024 });
    await k.app.core.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(k.app.core.server.address() as { port: number }).port}`;
  });
  after(() => k.close());

  const auth = (token = k.token) => ({ authorization: `Bearer ${token}` });
  const ok = async (method: string, url: string, body?: unknown) => {
    const res = await k.call(method, url, body);
    assert.ok(res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  };
  /** A service account's key; with `policy`, a policy of that target granting it `view`. */
  const keyFor = async (name: string, policy?: Record<string, unknown>) => {
    await ok('POST', '/org/acme/serviceaccount', { name });
    if (policy) await ok('POST', '/org/acme/policy', { name: `${name}-view`, ...policy, bindings: [{ permissions: ['view'], principalLinks: [`//serviceaccount/${name}`] }] });
    return (await ok('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'test' })).body.key as string;
  };
  const head = async () => (await k.store.auditHead('acme')).seq;
  const changesOf = (events: SseEvent[]) => events.filter((e) => e.event !== 'bookmark');
  /**
   * History that a client which does not read cannot take in one go (more than the kernel's socket
   * buffers hold, then more events than a replay reads at once), so a replay from the returned
   * position waits on that client. Written once, for the tests that need such replays.
   */
  let heldHistory: Promise<number> | undefined;
  const historyToHold = () =>
    (heldHistory ??= (async () => {
      const from = await head();
      for (let batch = 0; batch < 8; batch++) await Promise.all(Array.from({ length: 20 }, (_, i) => ok('POST', '/org/acme/group', { name: `held-${batch}-${i}`, tags: bigTags(`h${batch}-${i}`) })));
      for (let batch = 0; batch < 11; batch++) await Promise.all(Array.from({ length: 20 }, (_, i) => ok('POST', '/org/acme/group', { name: `held-small-${batch}-${i}` })));
      return from;
    })());

  test('a quiet watch gets bookmarks with its position; resuming from one misses nothing', async () => {
    const stream = await openSse(`${base}/org/acme/-watch?kind=group`, auth());
    const [mark] = await stream.takeUntil((e) => e.event === 'bookmark');
    assert.equal(mark.id, String(await head()));
    assert.deepEqual(mark.data, { seq: await head() });
    await ok('POST', '/org/acme/gvc', { name: 'not-watched' });
    // Bookmarks move past changes the filter leaves out.
    const moved = await stream.takeUntil((e) => e.event === 'bookmark' && Number(e.id) === Number(mark.id) + 1);
    assert.deepEqual(changesOf(moved), []);
    stream.close();
    await ok('POST', '/org/acme/group', { name: 'after-bookmark' });
    const resumed = await openSse(`${base}/org/acme/-watch?kind=group`, { ...auth(), 'last-event-id': moved[moved.length - 1].id! });
    const [change] = changesOf(await resumed.takeUntil((e) => e.event === 'create'));
    resumed.close();
    assert.equal(change.data.object.name, 'after-bookmark');
  });

  test('filters: gvc, names and a query, each with kind; malformed filters are 400', async () => {
    await ok('POST', '/org/acme/gvc', { name: 'g1' });
    await ok('POST', '/org/acme/gvc', { name: 'g2' });
    const from = await head();
    const open = (filter: string) => openSse(`${base}/org/acme/-watch?since=${from}&${filter}`, auth());
    const byGvc = await open('kind=identity&gvc=g1');
    const byName = await open('kind=group&name=pick-a,pick-b');
    const query = { kind: 'group', spec: { match: 'all', terms: [{ property: 'description', op: '=', value: 'chosen' }, { tag: 'team', op: '=', value: 'blue' }] } };
    const byQuery = await open(`query=${encodeURIComponent(JSON.stringify(query))}`);
    await ok('POST', '/org/acme/gvc/g2/identity', { name: 'id-other' });
    await ok('POST', '/org/acme/gvc/g1/identity', { name: 'id-one' });
    await ok('POST', '/org/acme/group', { name: 'pick-c', description: 'chosen', tags: { team: 'red' } });
    await ok('POST', '/org/acme/group', { name: 'pick-a', description: 'chosen', tags: { team: 'blue' } });
    await ok('POST', '/org/acme/group', { name: 'pick-b' });
    await ok('PATCH', '/org/acme/group/pick-b', { description: 'chosen', tags: { team: 'blue' } });
    const last = await head();
    const until = (s: { takeUntil: (stop: (e: SseEvent) => boolean) => Promise<SseEvent[]> }) => s.takeUntil((e) => Number(e.id) >= last && e.event === 'bookmark');
    const seen = async (s: Awaited<ReturnType<typeof open>>) => {
      const events = changesOf(await until(s));
      s.close();
      return events.map((e) => `${e.event} ${e.data.object.name} v${e.data.object.version}`);
    };
    assert.deepEqual(await seen(byGvc), ['create id-one v1']);
    assert.deepEqual(await seen(byName), ['create pick-a v1', 'create pick-b v1', 'edit pick-b v2']);
    assert.deepEqual(await seen(byQuery), ['create pick-a v1', 'edit pick-b v2']);

    const bad = async (filter: string, headers = auth()) => {
      const res = await fetch(`${base}/org/acme/-watch?${filter}`, { headers });
      const body = (await res.json()) as Record<string, unknown>;
      assert.equal(res.status, 400, `${filter}: ${JSON.stringify(body)}`);
      assert.equal(body.code, 'bad_request');
      assert.deepEqual(Object.keys(body).sort(), ['code', 'details', 'id', 'message', 'status']);
    };
    await bad('kind=group&gvc=g1');
    await bad('kind=identity&gvc=Not_A_Name');
    await bad('query=%7Bnot%20json');
    await bad(`query=${encodeURIComponent(JSON.stringify({ spec: { terms: [] } }))}`);
    await bad(`kind=gvc&query=${encodeURIComponent(JSON.stringify(query))}`);
    await bad(`kind=group&query=${encodeURIComponent(JSON.stringify({ spec: { terms: [{ property: 'name', op: 'nope', value: 'x' }] } }))}`);
    await bad(`name=${Array.from({ length: 101 }, (_, i) => `n${i}`).join(',')}`);
  });

  test('permission filters before any filter: names and queries cannot reach what the key may not view', async () => {
    const key = await keyFor('narrow', { targetKind: 'group', targetLinks: ['//group/seen-one'] });
    const from = await head();
    const everything = { kind: 'group', spec: { match: 'all', terms: [] } };
    const stream = await openSse(`${base}/org/acme/-watch?since=${from}&name=hidden-one,seen-one&query=${encodeURIComponent(JSON.stringify(everything))}`, auth(key));
    await ok('POST', '/org/acme/group', { name: 'hidden-one' });
    await ok('POST', '/org/acme/group', { name: 'seen-one' });
    const last = await head();
    const events = changesOf(await stream.takeUntil((e) => e.event === 'bookmark' && Number(e.id) >= last));
    stream.close();
    assert.deepEqual(events.map((e) => e.data.object.name), ['seen-one']);
    // The replay of the same range (narrowed in SQL to the one granted name) shows the same.
    const replay = await openSse(`${base}/org/acme/-watch?since=${from}&kind=group`, auth(key));
    const replayed = changesOf(await replay.takeUntil((e) => e.event === 'bookmark' && Number(e.id) >= last));
    replay.close();
    assert.deepEqual(replayed.map((e) => e.data.object.name), ['seen-one']);
  });

  test('410 gone for a position older than the retained history; its oldest position is accepted', async () => {
    for (let i = 0; i < 4; i++) await ok('POST', '/org/acme/group', { name: `prune-${i}` });
    await k.store.pruneAudit('acme', { keep: 2 });
    const { prunedUpTo } = await k.store.auditHead('acme');
    assert.ok(prunedUpTo > 1);
    for (const since of ['0', String(prunedUpTo - 1)]) {
      const res = await fetch(`${base}/org/acme/-watch?since=${since}`, { headers: auth() });
      assert.equal(res.status, 410);
      const body = (await res.json()) as Record<string, unknown>;
      assert.equal(body.code, 'gone');
      assert.equal(body.status, 410);
      assert.match(String(body.message), /older than the retained history/);
    }
    const kept = await openSse(`${base}/org/acme/-watch?kind=group&since=${prunedUpTo}`, auth());
    const [first] = changesOf(await kept.takeUntil((e) => e.event === 'create'));
    kept.close();
    assert.equal(first.data.object.name, 'prune-2');
  });

  test('a client that does not read is disconnected with the position to resume from, and misses nothing', async () => {
    const key = await keyFor('slow', { targetKind: 'group', target: 'all' });
    await ok('POST', '/org/acme/group', { name: 'big' });
    const from = await head();
    // The slow client's stream, never read until the end of the test.
    const slow = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest(`${base}/org/acme/-watch?kind=group&since=${from}`, { headers: auth(key) }, resolve);
      req.on('error', reject);
      req.end();
    });
    assert.equal(slow.statusCode, 200);
    slow.pause();
    // The principal's other nine streams fill its cap: a tenth opens only once the slow one is gone.
    const fillers = await Promise.all(Array.from({ length: 9 }, () => openSse(`${base}/org/acme/-watch?kind=user`, auth(key))));
    let writes = 0;
    for (;;) {
      await ok('PATCH', '/org/acme/group/big', { tags: bigTags(`v${writes}`) });
      writes++;
      if (writes % 5 !== 0) continue;
      const probe = await fetch(`${base}/org/acme/-watch?kind=user`, { headers: auth(key) });
      if (probe.status === 200) {
        await probe.body!.cancel();
        break;
      }
      assert.equal(probe.status, 429);
      assert.equal(((await probe.json()) as { code: string }).code, 'rate_limited');
      assert.ok(writes < 600, 'the slow client was never disconnected');
    }
    for (const f of fillers) f.close();
    const text = await new Promise<string>((resolve) => {
      let all = '';
      slow.setEncoding('utf8');
      slow.on('data', (chunk: string) => (all += chunk));
      slow.on('end', () => resolve(all));
      slow.resume();
    });
    const events = parseSse(text).events;
    const final = events[events.length - 1];
    assert.equal(final.event, 'disconnect');
    assert.equal(final.data.reason, 'slow_consumer');
    assert.equal(final.id, String(final.data.seq));
    const before = changesOf(events.slice(0, -1));
    assert.equal(before[before.length - 1].id, final.id, 'the position is that of the last event sent');
    const resumed = await openSse(`${base}/org/acme/-watch?kind=group`, { ...auth(key), 'last-event-id': final.id! });
    const target = await head();
    const rest = changesOf(await resumed.takeUntil((e) => Number(e.id) >= target));
    resumed.close();
    const versions = [...before, ...rest].map((e) => e.data.object.version);
    assert.deepEqual(versions, Array.from({ length: writes }, (_, i) => i + 2));
  });

  test('caps: streams per principal, replays per principal (429 with the error object)', async () => {
    const key = await keyFor('greedy', { targetKind: 'group', target: 'all' });
    const from = await historyToHold();
    const streams = await Promise.all(Array.from({ length: 10 }, () => openSse(`${base}/org/acme/-watch`, auth(key))));
    const over = await fetch(`${base}/org/acme/-watch`, { headers: auth(key) });
    assert.equal(over.status, 429);
    const body = (await over.json()) as Record<string, unknown>;
    assert.equal(body.code, 'rate_limited');
    assert.deepEqual(Object.keys(body).sort(), ['code', 'details', 'id', 'message', 'status']);
    assert.match(String(body.message), /10 open watch streams/);
    assert.equal((await fetch(`${base}/org/acme/-watch`, { headers: auth() })).status, 200, "another principal's streams are not counted");
    for (const s of streams) s.close();

    // Replays: two clients that do not read hold the principal's two replays.
    const replay = () =>
      new Promise<IncomingMessage>((resolve, reject) => {
        const req = httpRequest(`${base}/org/acme/-watch?since=${from}`, { headers: auth(key) }, resolve);
        req.on('error', reject);
        req.end();
      });
    const holders: IncomingMessage[] = [];
    // The server sees the ten closed streams go as their sockets close: until then a new one is over the cap.
    for (let attempt = 0; holders.length < 2; attempt++) {
      const res = await replay();
      if (res.statusCode === 429 && attempt < 500) {
        res.resume();
        await new Promise((resolve) => res.once('end', resolve));
        continue;
      }
      holders.push(res);
    }
    for (const h of holders) {
      assert.equal(h.statusCode, 200);
      h.pause();
    }
    const third = await fetch(`${base}/org/acme/-watch?since=${from}`, { headers: auth(key) });
    assert.equal(third.status, 429);
    assert.match(((await third.json()) as { message: string }).message, /replays history/);
    for (const h of holders) h.destroy();
  });

  test('a replay that has caught up frees its replay slot while it stays open', async () => {
    const key = await keyFor('catcher', { targetKind: 'group', target: 'all' });
    const oldest = (await k.store.auditHead('acme')).prunedUpTo;
    const target = await head();
    // Two replays read to the head and stay open: they follow the feed now and no longer replay.
    const caughtUp = await Promise.all(
      Array.from({ length: 2 }, async () => {
        const stream = await openSse(`${base}/org/acme/-watch?since=${oldest}`, auth(key));
        await stream.takeUntil((e) => Number(e.id) >= target);
        return stream;
      }),
    );
    const third = await fetch(`${base}/org/acme/-watch?since=${oldest}`, { headers: auth(key) });
    assert.equal(third.status, 200, 'two caught-up streams still held the replay cap');
    await third.body!.cancel();
    for (const s of caughtUp) s.close();
  });

  test('a caller reopening refused replays in a tight loop is held back to one refusal per Retry-After; others are served', async () => {
    const key = await keyFor('looper', { targetKind: 'group', target: 'all' });
    const oldest = await historyToHold();
    // Two clients that do not read hold the principal's two replays.
    const holders = await Promise.all(
      Array.from({ length: 2 }, () =>
        new Promise<IncomingMessage>((resolve, reject) => {
          const req = httpRequest(`${base}/org/acme/-watch?since=${oldest}`, { headers: auth(key) }, resolve);
          req.on('error', reject);
          req.end();
        }),
      ),
    );
    for (const h of holders) {
      assert.equal(h.statusCode, 200);
      h.pause();
    }
    // The attacker: reopen as soon as refused, ignoring Retry-After, for two seconds.
    const refusals: Array<{ status: number; retryAfter: string | null; code: string }> = [];
    const loopUntil = Date.now() + 2000;
    const others: number[] = [];
    const otherCaller = (async () => {
      while (Date.now() < loopUntil) {
        others.push((await fetch(`${base}/org/acme/group/held-small-0-0`, { headers: auth() })).status);
        const watch = await fetch(`${base}/org/acme/-watch?kind=group`, { headers: auth() });
        others.push(watch.status);
        await watch.body?.cancel();
      }
    })();
    while (Date.now() < loopUntil) {
      const res = await fetch(`${base}/org/acme/-watch?since=${oldest}`, { headers: auth(key) });
      const body = res.status === 200 ? (await res.body?.cancel(), { code: 'opened' }) : ((await res.json()) as { code: string });
      refusals.push({ status: res.status, retryAfter: res.headers.get('retry-after'), code: body.code });
    }
    await otherCaller;
    assert.ok(refusals.length >= 2 && refusals.length <= 4, `${refusals.length} refusals in 2 s: the reopen loop was not held back`);
    for (const r of refusals) assert.deepEqual(r, { status: 429, retryAfter: '1', code: 'rate_limited' });
    assert.ok(others.length >= 4 && others.every((s) => s === 200), `another caller got ${others.join(', ')}`);
    for (const h of holders) h.destroy();
    // A client that waits as told is let in once a replay slot is free.
    let status = 429;
    let retryAfter = refusals[refusals.length - 1].retryAfter;
    for (let attempt = 0; status === 429 && attempt < 20; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, Number(retryAfter) * 1000));
      const res = await fetch(`${base}/org/acme/-watch?since=${oldest}`, { headers: auth(key) });
      status = res.status;
      retryAfter = res.headers.get('retry-after');
      await res.body?.cancel();
    }
    assert.equal(status, 200);
  });
});

forEachBackend('hostile replays', (backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { watchReplaysPerPrincipal: 12, watchBookmarkMs: 200 });
    await k.app.core.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(k.app.core.server.address() as { port: number }).port}`;
    for (let i = 0; i < 200; i++) {
      const res = await k.call('POST', '/org/acme/group', { name: `heavy-${i}`, tags: bigTags(`h${i}`) });
      assert.equal(res.status, 201);
    }
  });
  after(() => k.close());

  const openKey = async (name: string, policy?: Record<string, unknown>) => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
    if (policy) assert.equal((await k.call('POST', '/org/acme/policy', { name: `${name}-view`, ...policy, bindings: [{ permissions: ['view'], principalLinks: [`//serviceaccount/${name}`] }] })).status, 201);
    return (await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'h' })).body.key as string;
  };

  /** Twelve replays from 0 of a ~10 MB chain, read as fast as the client can; resolves when each has caught up. */
  const replays = (key: string, target: number) =>
    Array.from({ length: 12 }, async () => {
      const stream = await openSse(`${base}/org/acme/-watch?since=0`, { authorization: `Bearer ${key}` });
      const events = await stream.takeUntil((e) => Number(e.id) >= target);
      stream.close();
      return events;
    });

  test('an unrelated GET answers while twelve replays of the whole chain run', async () => {
    const key = await openKey('reader', { targetKind: 'group', target: 'all' });
    const target = (await k.store.auditHead('acme')).seq;
    let done = 0;
    const running = replays(key, target).map((p) => p.then((events) => (done++, events)));
    const get = await fetch(`${base}/org/acme/group/heavy-0`, { headers: { authorization: `Bearer ${k.token}` } });
    assert.equal(get.status, 200);
    const answeredWhileRunning = done;
    const results = await Promise.all(running);
    assert.ok(answeredWhileRunning < 12, 'the GET was answered before the replays were done');
    for (const events of results) assert.equal(events.filter((e) => e.event === 'create' && e.data.kind === 'group').length, 200);
  });

  test('replays of a key that may view nothing read nothing: they catch up at once and show nothing', async () => {
    const key = await openKey('nobody');
    const target = (await k.store.auditHead('acme')).seq;
    const firsts = await Promise.all(
      Array.from({ length: 12 }, async () => {
        const stream = await openSse(`${base}/org/acme/-watch?since=0`, { authorization: `Bearer ${key}` });
        const [first] = await stream.take(1);
        stream.close();
        return first;
      }),
    );
    for (const first of firsts) {
      assert.equal(first.event, 'bookmark');
      assert.ok(Number(first.id) >= target);
    }
  });
});
