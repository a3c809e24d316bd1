import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { PriorityLevel, type Release } from '../../src/server/fairness.js';

const limits = { seats: 2, shortSeats: 0, heavySeats: 1, heavyMs: 1, queued: 10, seatsSetting: 'seats', queuedSetting: 'queued' };

/** Holds a seat of `level` for `who` for `ms`, so the level learns what its work costs. */
async function hold(level: PriorityLevel, who: string, ms: number): Promise<void> {
  const release = await level.acquire(who);
  await sleep(ms);
  release();
}

test("a caller whose work is past the heavy line but a small fraction of the heavy queries' takes the free seat while they wait for the heavy one", async () => {
  const level = new PriorityLevel('lists', limits);
  // Seat times of 200 ms and 4 ms: both at least heavyMs, as on a machine loaded enough to stretch every list.
  await Promise.all(['h1', 'h2', 'h3'].map((who) => hold(level, who, 200)));
  await hold(level, 'light', 4);
  const heavyFirst = (await level.acquire('h1')) as Release;
  const waiting = ['h2', 'h3'].map((who) => level.acquire(who));
  let heavyEnded = false;
  const light = Promise.resolve(level.acquire('light')).then((release) => ({ release, heavyEnded }));
  // The light caller's seat comes while the first heavy query still holds the heavy seat.
  const lightSeat = await Promise.race([light, sleep(2_000).then(() => undefined)]);
  assert.ok(lightSeat, 'the light caller got the free seat');
  assert.equal(lightSeat.heavyEnded, false);
  lightSeat.release();
  heavyEnded = true;
  heavyFirst();
  // The two heavy ones take the heavy seat in whichever order their costs give: each gives it back when it gets it.
  await Promise.all(waiting.map(async (next) => (await next)()));
});

test('heavy work still holds one seat at a time: a second heavy principal waits for the first with a seat free', async () => {
  const level = new PriorityLevel('lists', limits);
  await Promise.all(['h1', 'h2'].map((who) => hold(level, who, 50)));
  const first = (await level.acquire('h1')) as Release;
  let secondStarted = false;
  const second = Promise.resolve(level.acquire('h2')).then((release) => {
    secondStarted = true;
    return release;
  });
  await sleep(100);
  assert.equal(secondStarted, false, 'the second heavy query waited with a seat free');
  first();
  (await second)();
  assert.equal(secondStarted, true);
});
