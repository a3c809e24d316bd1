// Watchers that never read, as an attacker would open them while large changes are written: what
// their streams hold counts against one server-wide budget (watchBufferTotalBytes), so they are cut
// long before their own bound would cut them, each told where to resume; a watcher that reads is
// never cut for their sake and misses nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { assertCutSlowConsumer, openRawStream, openSse } from '../support/sse.js';

/** 50 tags of 1,000 characters: an event of about 50 kB. */
const bigTags = (mark: string) => Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`t${i}`, `${mark}-${i}-`.padEnd(1000, 'x')]));

forEachBackend('watch streams against a server-wide budget', (backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    // Each stream alone could hold 256 MB; all of them together 1 MB.
    k = await startKeel(backend, 'acme', { watchStreamsPerPrincipal: 10, watchBufferBytes: 256 * 1024 * 1024, watchBufferTotalBytes: 1024 * 1024 });
    base = await k.listen();
  });
  after(() => k.close());

  const ok = async (method: string, url: string, body?: unknown) => {
    const res = await k.call(method, url, body);
    assert.ok(res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  };

  test('four watchers that never read are cut by the shared budget; a reader is not, and misses nothing', async () => {
    await ok('POST', '/org/acme/serviceaccount', { name: 'idle' });
    await ok('POST', '/org/acme/policy', { name: 'idle-view', targetKind: 'group', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/idle'] }] });
    const key = (await ok('POST', '/org/acme/serviceaccount/idle/-addKey', { description: 'idle' })).body.key as string;
    await ok('POST', '/org/acme/group', { name: 'big' });
    const from = (await k.store.auditHead('acme')).seq;
    const idle = await Promise.all(
      Array.from({ length: 4 }, () => openRawStream(`${base}/org/acme/-watch?kind=group&since=${from}`, key)),
    );
    for (const stream of idle) stream.pause();
    // The idle principal's other six streams fill its cap of ten: each stream opened beyond it marks one idle stream cut.
    const fillers = await Promise.all(Array.from({ length: 6 }, () => openSse(`${base}/org/acme/-watch?kind=user`, { authorization: `Bearer ${key}` })));
    const reader = await openSse(`${base}/org/acme/-watch?kind=group&since=${from}`, { authorization: `Bearer ${k.token}` });
    const read = reader.takeUntil((e) => e.event === 'disconnect' || e.data?.object?.description === 'last');
    let writes = 0;
    let cut = 0;
    while (cut < 4) {
      await ok('PATCH', '/org/acme/group/big', { tags: bigTags(`v${writes}`) });
      writes++;
      assert.ok(writes < 400, `only ${cut} idle streams were cut after ${writes} changes of 50 kB`);
      if (writes % 5 !== 0) continue;
      const probe = await fetch(`${base}/org/acme/-watch?kind=user`, { headers: { authorization: `Bearer ${key}` } });
      if (probe.status === 200) {
        cut++;
        // Kept open: the slot stays taken, so the next probe measures the next cut.
        fillers.push({ close: () => void probe.body!.cancel() } as any);
      } else {
        assert.equal(probe.status, 429);
        await probe.body!.cancel();
      }
    }
    await ok('PATCH', '/org/acme/group/big', { description: 'last', tags: {} });
    const received = await read;
    assert.notEqual(received[received.length - 1].event, 'disconnect', 'the reader was cut');
    const versions = received.filter((e) => e.event === 'edit').map((e) => e.data.object.version);
    assert.deepEqual(versions, Array.from({ length: writes + 1 }, (_, i) => i + 2));
    reader.close();
    for (const f of fillers) f.close();
    // Each idle stream ends with the position to resume from, naming the shared budget.
    for (const stream of idle) {
      await assertCutSlowConsumer(stream, from, /watchBufferTotalBytes/);
    }
  });
});
