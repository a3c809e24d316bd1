// The PostgreSQL read cache's catch-ups under load: reads that arrive in one turn of the event loop
// share one (sent when the turn ends), a read that arrives while one is under way waits for the next
// (sent at the end of the turn that one returns in), and a read is never served by a catch-up sent
// before it arrived.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Store } from '../../src/store/types.js';
import { forEachBackend, storeFor } from '../support/keel.js';

forEachBackend('catch-ups of the PostgreSQL read cache', (backend) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  before(async () => {
    ({ store, cleanup } = await storeFor(backend, undefined, 0)); // without a lease: every read catches up
  });
  after(async () => {
    await store.close();
    await cleanup();
  });

  test('fifty reads arriving in one turn of the event loop share one catch-up; a read arriving after it was sent waits for a second', async () => {
    const feed = store.accessFeed!;
    assert.equal(await feed.caughtUp(), true);
    const sentBefore = feed.mark();
    const marks = Array.from({ length: 50 }, () => feed.mark());
    // None is sent before the turn ends: the first read's catch-up is the other 49's too.
    const waits = marks.map((mark) => feed.caughtUp(mark));
    assert.equal(feed.mark(), sentBefore, 'no catch-up is sent during the turn the reads arrived in');
    assert.deepEqual(await Promise.all(waits), marks.map(() => true));
    assert.equal(feed.mark() - sentBefore, 1);
    for (const mark of marks) assert.equal(feed.caughtUp(mark), true, 'a read whose catch-up was applied does not wait again');
    const late = feed.mark();
    const waited = feed.caughtUp(late);
    assert.ok(waited instanceof Promise, 'a read arriving after the last catch-up was sent waits for a new one');
    assert.equal(await waited, true);
    assert.equal(feed.mark(), late + 1);
  });

  test('a read arriving in the next turn, while the catch-up it missed is under way, is answered by the one after', async () => {
    const feed = store.accessFeed!;
    assert.equal(await feed.caughtUp(), true);
    const sentBefore = feed.mark();
    const first = feed.caughtUp(feed.mark());
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(feed.mark(), sentBefore + 1, 'the first read\'s catch-up was sent when its turn ended');
    const mark = feed.mark();
    const second = feed.caughtUp(mark);
    assert.ok(second instanceof Promise, 'the catch-up under way was sent before the second read arrived: it cannot serve it');
    assert.deepEqual(await Promise.all([first, second]), [true, true]);
    assert.equal(feed.mark(), sentBefore + 2);
    assert.equal(feed.caughtUp(mark), true);
  });

  test('a mark no catch-up has reached yet (one from elsewhere, or made up) waits for a new catch-up rather than trusting what is held', async () => {
    const feed = store.accessFeed!;
    const sent = feed.mark();
    assert.equal(await feed.caughtUp(sent + 1000), true);
    assert.equal(feed.mark(), sent + 1);
  });

  test('a read waiting when its store closes is answered with a refusal to trust the cache (read the database), and opens no connection again', async () => {
    const own = await storeFor(backend, undefined, 0);
    try {
      const feed = own.store.accessFeed!;
      assert.equal(await feed.caughtUp(), true);
      const waiting = feed.caughtUp(feed.mark());
      await own.store.close();
      // Had its catch-up opened a connection after the close, this test file's process would not exit.
      assert.equal(await waiting, false);
    } finally {
      await own.cleanup();
    }
  });
}, ['postgres']);
