// diffPatch: the patch it writes, and that applying it gives the target.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { applyPatch, diffPatch } from '../../src/patch/index.js';
import { groupSchema, storedGroup, storedVolumeset, volumesetSchema, type Doc } from './fixtures.js';

describe('diffPatch', () => {
  test('equal objects give an empty patch', () => {
    assert.deepEqual(diffPatch(storedGroup(), storedGroup(), groupSchema), {});
  });

  test('plain fields, nested merges and nulls', () => {
    const a = storedVolumeset();
    const b = storedVolumeset();
    b.description = 'new';
    delete b.tags.tier;
    b.spec.autoscaling.predictive.lookbackHours = 1;
    delete b.spec.mountOptions;
    b.spec.customEncryption.regions.r = { keyId: 'x' };
    assert.deepEqual(diffPatch(a, b, volumesetSchema), {
      description: 'new',
      tags: { tier: null },
      spec: { autoscaling: { predictive: { lookbackHours: 1 } }, mountOptions: null, customEncryption: { regions: { r: { keyId: 'x' } } } },
    });
    assert.deepEqual(applyPatch(a, diffPatch(a, b, volumesetSchema), volumesetSchema), b);
  });

  test('arrays are sent whole', () => {
    const a = storedGroup();
    const b = storedGroup();
    b.memberQuery.spec.terms.pop();
    assert.deepEqual(diffPatch(a, b, groupSchema), { memberQuery: { spec: { terms: b.memberQuery.spec.terms } } });
  });

  test('$replace/x where a merge cannot say it: null values and $ keys in maps', () => {
    const a = storedGroup();
    const b: Doc = storedGroup();
    b.tags = { team: null, $x: 'y' };
    assert.deepEqual(diffPatch(a, b, groupSchema), { '$replace/tags': { team: null, $x: 'y' } });
    assert.deepEqual(applyPatch(a, diffPatch(a, b, groupSchema), groupSchema), b);
    const c = storedGroup();
    c.tags = { team: 'core', env: 'prod', $x: 'y' };
    assert.deepEqual(applyPatch(c, diffPatch(c, a, groupSchema), groupSchema), a);
  });

  test('read-only fields are left out', () => {
    const a = storedGroup();
    const b = { ...storedGroup(), version: 9, origin: 'builtin', description: 'x' };
    assert.deepEqual(diffPatch(a, b, groupSchema), { description: 'x' });
  });

  test('__proto__ keys in maps survive the round trip', () => {
    const a = storedGroup();
    const b = storedGroup();
    b.tags = JSON.parse('{"__proto__": "p", "team": "core"}');
    const patch = diffPatch(a, b, groupSchema);
    assert.equal(Object.getOwnPropertyDescriptor(patch.tags, '__proto__')?.value, 'p');
    assert.deepEqual(applyPatch(a, patch, groupSchema), b);
  });
});
