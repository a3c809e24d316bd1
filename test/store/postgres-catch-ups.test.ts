// The PostgreSQL read cache's catch-ups under load: reads that arrive together share them, a read
// that arrives while one is under way waits for the next (sent as soon as that one returns), and a
// read is never served by a catch-up sent before it arrived.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Store } from '../../src/store/types.js';
import { forEachBackend, storeFor } from '../support/keel.js';

forEachBackend('catch-ups of the PostgreSQL read cache', (backend) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  before(async () => {
    ({ store, cleanup } = await storeFor(backend));
  });
  after(async () => {
    await store.close();
    await cleanup();
  });

  test('fifty reads arriving together share two catch-ups; a read arriving after them waits for a third', async () => {
    const feed = store.accessFeed!;
    assert.equal(await feed.caughtUp(), true);
    const sentBefore = feed.mark();
    const marks = Array.from({ length: 50 }, () => feed.mark());
    // The first read sends a catch-up at once; the other 49 arrived after it was sent and share the next.
    assert.deepEqual(await Promise.all(marks.map((mark) => feed.caughtUp(mark))), marks.map(() => true));
    assert.equal(feed.mark() - sentBefore, 2);
    for (const mark of marks) assert.equal(feed.caughtUp(mark), true, 'a read whose catch-up was applied does not wait again');
    const late = feed.mark();
    const waited = feed.caughtUp(late);
    assert.ok(waited instanceof Promise, 'a read arriving after the last catch-up was sent waits for a new one');
    assert.equal(await waited, true);
    assert.equal(feed.mark(), late + 1);
  });

  test('a mark no catch-up has reached yet (one from elsewhere, or made up) waits for a new catch-up rather than trusting what is held', async () => {
    const feed = store.accessFeed!;
    const sent = feed.mark();
    assert.equal(await feed.caughtUp(sent + 1000), true);
    assert.equal(feed.mark(), sent + 1);
  });
}, ['postgres']);
