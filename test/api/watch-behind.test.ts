// Large changes written faster than one client reads them, while four other clients never read:
// the reader falls behind in bursts but keeps reading, so it receives every change and is never cut;
// the four that never read are cut once they have stayed behind for watchBehindMs, and what the
// server holds for them stays bounded: the bytes written to a stream's socket and not yet taken by
// its client never pass the per-stream bound by more than one event.
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { assertCutSlowConsumer, openRawStream, parseSse, type SseEvent } from '../support/sse.js';
import { waitFor } from '../support/wait.js';

/** 50 tags of 1,000 characters: an event of about 50 kB. */
const bigTags = (mark: string) => Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`t${i}`, `${mark}-${i}-`.padEnd(1000, 'x')]));
const CHANGES = 200;
/** Writers at once, each changing its own group. */
const WRITERS = 4;
/** The reader takes at most this much every READ_TICK_MS: about 800 kB/s, slower than the writes come. */
const READ_BYTES = 16 * 1024;
const READ_TICK_MS = 20;

/** Reads the stream to its end at READ_BYTES per READ_TICK_MS, as a client on a slow link or a busy machine does. */
function readPaced(stream: IncomingMessage): { events: SseEvent[]; close(): void } {
  const events: SseEvent[] = [];
  let buffer = '';
  // Bytes, decoded here: Node's partial read(n) of a stream in string mode can fail inside the stream.
  const decoder = new StringDecoder('utf8');
  stream.pause();
  const tick = setInterval(() => {
    if (stream.destroyed || stream.readableEnded) return;
    for (let taken = 0, chunk: Buffer | null; taken < READ_BYTES && (chunk = stream.read(Math.min(READ_BYTES - taken, stream.readableLength)) ?? null) !== null; taken += chunk.length) {
      if (chunk.length === 0) break;
      const parsed = parseSse(buffer + decoder.write(chunk));
      buffer = parsed.left;
      events.push(...parsed.events);
    }
  }, READ_TICK_MS);
  stream.on('close', () => clearInterval(tick));
  return { events, close: () => stream.destroy() };
}

forEachBackend('a watch client that reads is cut only if it stays behind', (backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    // The default per-stream bound (1 MiB), with a shorter time budget than the default 30 s.
    k = await startKeel(backend, 'acme', { watchBehindMs: 10_000 });
    base = await k.listen();
    k.app.core.server.on('connection', (socket: Socket) => sockets.add(socket));
  });
  /** The server's side of every connection: what it holds for a client is its socket's unsent bytes. */
  const sockets = new Set<Socket>();
  after(() => k.close());

  const ok = async (method: string, url: string, body?: unknown) => {
    const res = await k.call(method, url, body);
    assert.ok(res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  };

  test('a reader slower than the writes receives every change; the four that never read are cut', async (t) => {
    for (let w = 0; w < WRITERS; w++) await ok('POST', '/org/acme/group', { name: `big${w}` });
    const from = (await k.store.auditHead('acme')).seq;
    const url = `${base}/org/acme/-watch?kind=group&since=${from}`;
    const idle = await Promise.all(Array.from({ length: 4 }, () => openRawStream(url, k.token)));
    for (const stream of idle) stream.pause();
    const reader = readPaced(await openRawStream(url, k.token));
    t.after(() => {
      reader.close();
      for (const stream of idle) stream.destroy();
    });
    const rssBefore = process.memoryUsage().rss;
    let rssMax = rssBefore;
    // The most the server held unsent for any one client, and for all of them at once.
    let heldMax = 0;
    let heldTotalMax = 0;
    const sample = () => {
      let total = 0;
      for (const socket of sockets) {
        heldMax = Math.max(heldMax, socket.writableLength);
        total += socket.writableLength;
      }
      heldTotalMax = Math.max(heldTotalMax, total);
      rssMax = Math.max(rssMax, process.memoryUsage().rss);
    };
    const sampler = setInterval(sample, 5);
    t.after(() => clearInterval(sampler));
    await Promise.all(
      Array.from({ length: WRITERS }, async (_, w) => {
        for (let i = 0; i < CHANGES / WRITERS; i++) {
          await ok('PATCH', `/org/acme/group/big${w}`, { tags: bigTags(`v${i}`) });
          sample();
        }
      }),
    );
    await ok('PATCH', '/org/acme/group/big0', { description: 'last', tags: {} });
    const last = await waitFor('the reader to receive the last change or be cut', async () => reader.events[reader.events.length - 1], (e) => e?.event === 'disconnect' || e?.data?.object?.description === 'last', 60_000);
    assert.notEqual(last.event, 'disconnect', `the reader was cut after ${reader.events.length - 1} events: ${JSON.stringify(last.data)}`);
    const edits = reader.events.filter((e) => e.event === 'edit');
    for (let w = 0; w < WRITERS; w++) {
      const versions = edits.filter((e) => e.data.object.name === `big${w}`).map((e) => e.data.object.version);
      assert.deepEqual(versions, Array.from({ length: CHANGES / WRITERS + (w === 0 ? 1 : 0) }, (_, i) => i + 2), `every change of big${w}, once, in order`);
    }
    const ids = edits.map((e) => Number(e.id));
    assert.deepEqual(ids, [...ids].sort((a, b) => a - b), 'in chain order');

    // Each stream that never read ends with the position to resume from, naming the time budget.
    for (const stream of idle) {
      const sent = await assertCutSlowConsumer(stream, from, /watchBehindMs/);
      assert.ok(sent.length < CHANGES, `a client that never read was sent all ${CHANGES} changes`);
    }
    clearInterval(sampler);
    // What was held for the clients stayed bounded: 200 changes of 50 kB are 10 MB for each stream,
    // of which a stream may hold its bound (1 MiB) and the one event that crossed it. RSS is only
    // reported: it counts garbage not yet collected, which a busy machine lets grow.
    const bound = k.config.watchBufferBytes + 64 * 1024;
    console.log(`# held at most ${(heldMax / 1e6).toFixed(2)} MB for one client, ${(heldTotalMax / 1e6).toFixed(2)} MB for all; RSS grew ${((rssMax - rssBefore) / 1e6).toFixed(0)} MB`);
    assert.ok(heldMax > 0, 'the server never held anything for a client: the streams were not observed');
    assert.ok(heldMax <= bound, `the server held ${heldMax} bytes for one client, over the ${bound}-byte bound`);
    assert.ok(heldTotalMax <= 5 * bound, `the server held ${heldTotalMax} bytes for five clients`);
  });
});
