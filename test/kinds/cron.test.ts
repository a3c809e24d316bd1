// Cron schedules: five fields in UTC, lists, ranges, steps, names and @shorthands; when a
// schedule fires next and last; bad schedules are refused with the part that is wrong.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nextFire, parseSchedule, previousFire } from '../../src/kinds/cron.js';

const at = (iso: string) => Date.parse(iso);
const next = (schedule: string, after: string) => new Date(nextFire(parseSchedule(schedule), at(after))!).toISOString();
const prev = (schedule: string, before: string) => new Date(previousFire(parseSchedule(schedule), at(before))!).toISOString();

test('the next and the last time a schedule fires', () => {
  assert.equal(next('* * * * *', '2026-03-01T10:00:30.000Z'), '2026-03-01T10:01:00.000Z');
  assert.equal(next('* * * * *', '2026-03-01T10:01:00.000Z'), '2026-03-01T10:02:00.000Z', 'strictly after');
  assert.equal(prev('* * * * *', '2026-03-01T10:01:00.000Z'), '2026-03-01T10:01:00.000Z', 'at or before');
  assert.equal(next('*/15 9-17 * * mon-fri', '2026-03-06T17:50:00.000Z'), '2026-03-09T09:00:00.000Z', 'Friday evening to Monday morning');
  assert.equal(next('0 0 29 feb *', '2026-03-01T00:00:00.000Z'), '2028-02-29T00:00:00.000Z');
  assert.equal(prev('0 0 29 feb *', '2026-03-01T00:00:00.000Z'), '2024-02-29T00:00:00.000Z');
  assert.equal(next('@hourly', '2026-03-01T10:00:00.000Z'), '2026-03-01T11:00:00.000Z');
  assert.equal(next('0 12 * * 7', '2026-03-01T13:00:00.000Z'), '2026-03-08T12:00:00.000Z', '7 is Sunday too');
  // Day of month and day of week both restricted: either matches (cron's rule).
  assert.equal(next('0 0 13 * fri', '2026-03-01T00:00:00.000Z'), '2026-03-06T00:00:00.000Z');
  assert.equal(next('5,10 1 1 1 *', '2026-01-01T01:05:00.000Z'), '2026-01-01T01:10:00.000Z');
  assert.equal(nextFire(parseSchedule('0 0 31 2 *'), at('2026-01-01T00:00:00.000Z')), undefined, 'never fires');
});

test('bad schedules are refused, naming what is wrong', () => {
  assert.throws(() => parseSchedule('* * * *'), /five fields/);
  assert.throws(() => parseSchedule('60 * * * *'), /'60' is not in 0-59/);
  assert.throws(() => parseSchedule('*/0 * * * *'), /bad step/);
  assert.throws(() => parseSchedule('5-1 * * * *'), /bad range/);
  assert.throws(() => parseSchedule('* * * smarch *'), /'smarch'/);
  assert.throws(() => parseSchedule('@sometimes'), /five fields/);
});
