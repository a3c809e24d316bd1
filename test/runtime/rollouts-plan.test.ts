// The rollout planner on its own: which replicas a pass starts and stops, by surge, unavailability,
// minReadySeconds and a stateful set's ordering.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { plan, rolloutOf, type Running } from '../../src/runtime/rollouts.js';

const want = (names: string[], version: number) => names.map((name) => ({ name, version, spec: {} }));
const ready = (name: string, version: number, since = 0): Running => ({ name, version, ready: true, readySince: since });
const NOW = 100_000;

describe('the rollout planner', () => {
  test('rolloutOptions read as Kubernetes reads them', () => {
    assert.deepEqual(rolloutOf({}, 4), { surge: 1, unavailable: 1, minReadyMs: 0, ordered: false, graceMs: 90_000 });
    const o = rolloutOf({ rolloutOptions: { maxSurgeReplicas: '50%', maxUnavailableReplicas: '2', minReadySeconds: 3, terminationGracePeriodSeconds: 5 } }, 3);
    assert.deepEqual(o, { surge: 2, unavailable: 2, minReadyMs: 3000, ordered: false, graceMs: 5000 });
    assert.equal(rolloutOf({ rolloutOptions: { maxSurgeReplicas: '0', maxUnavailableReplicas: '0%' } }, 4).unavailable, 1, 'never stuck');
    assert.equal(rolloutOf({ type: 'stateful', rolloutOptions: { maxUnavailableReplicas: '0' } }, 4).unavailable, 1, 'a stateful set cannot surge');
    assert.equal(rolloutOf({ type: 'stateful' }, 4).ordered, true);
    assert.equal(rolloutOf({ type: 'stateful', rolloutOptions: { scalingPolicy: 'Parallel' } }, 4).ordered, false);
  });

  test('surge 1, unavailable 0: one new replica at a time, an old one goes only once a new one is available', () => {
    const r = rolloutOf({ rolloutOptions: { maxSurgeReplicas: '1', maxUnavailableReplicas: '0', minReadySeconds: 2 } }, 4);
    const v2 = want(['b1', 'b2', 'b3', 'b4'], 2);
    const v1 = ['a1', 'a2', 'a3', 'a4'].map((n) => ready(n, 1));
    assert.deepEqual(plan(v1, v2, r, NOW), { start: [v2[0]], stop: [], after: undefined });
    // b1 not ready yet: nothing moves.
    assert.deepEqual(plan([...v1, { name: 'b1', version: 2, ready: false }], v2, r, NOW), { start: [], stop: [], after: undefined });
    // b1 ready for 1 s of the 2 minReadySeconds: still nothing, look again in 1 s.
    assert.deepEqual(plan([...v1, ready('b1', 2, NOW - 1000)], v2, r, NOW), { start: [], stop: [], after: 1000 });
    // b1 available: one old goes, one new starts.
    const moved = plan([...v1, ready('b1', 2, NOW - 2000)], v2, r, NOW);
    assert.equal(moved.stop.length, 1);
    assert.deepEqual(moved.start, [v2[1]]);
  });

  test('a new version that never becomes ready stops no old replica', () => {
    const r = rolloutOf({}, 4);
    const v2 = want(['b1', 'b2', 'b3', 'b4'], 2);
    const running = [...['a1', 'a2', 'a3'].map((n) => ready(n, 1)), ...['b1', 'b2'].map((name) => ({ name, version: 2, ready: false }))];
    // 3 available, floor 3: none of v1 may go, and 5 = 4 + surge already run.
    assert.deepEqual(plan(running, v2, r, NOW), { start: [], stop: [], after: undefined });
  });

  test('a stateful set is replaced in place, the highest ordinal first, one at a time', () => {
    const r = rolloutOf({ type: 'stateful' }, 3);
    const v2 = want(['s-0', 's-1', 's-2'], 2);
    const v1 = ['s-0', 's-1', 's-2'].map((n) => ready(n, 1));
    assert.deepEqual(plan(v1, v2, r, NOW), { start: [v2[2]], stop: ['s-2'], after: undefined });
    // s-2 of v2 not ready yet: s-1 waits.
    assert.deepEqual(plan([ready('s-0', 1), ready('s-1', 1), { name: 's-2', version: 2, ready: false }], v2, r, NOW), { start: [], stop: [], after: undefined });
    // OrderedReady scale-up from nothing: s-0 first, s-1 once s-0 is available.
    assert.deepEqual(plan([], v2, r, NOW).start, [v2[0]]);
    assert.deepEqual(plan([ready('s-0', 2)], v2, r, NOW).start, [v2[1]]);
    assert.deepEqual(plan([], v2, rolloutOf({ type: 'stateful', rolloutOptions: { scalingPolicy: 'Parallel' } }, 3), NOW).start, v2);
  });
});
