// Seed 4.2: the volume set patch body, level by level.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { applyPatch } from '../../src/patch/index.js';
import { assertBadRequest, assertValid, storedVolumeset, volumesetSchema, type Doc } from './fixtures.js';


function patched(patch: Record<string, unknown>): Doc {
  const result = applyPatch(storedVolumeset(), patch, volumesetSchema);
  assertValid(volumesetSchema, result);
  return result;
}

const spec = () => storedVolumeset().spec as Doc;

describe('volumeset: top level', () => {
  test('plain name, description, tags, spec', () => {
    const v = patched({ name: 'data', description: 'd2', tags: { tier: null, x: 'y' }, spec: { initialCapacity: 30 } });
    assert.equal(v.description, 'd2');
    assert.deepEqual(v.tags, { x: 'y' });
    assert.deepEqual(v.spec, { ...spec(), initialCapacity: 30 });
  });

  test('$drop of description and tags', () => {
    const v = patched({ $drop: ['description', 'tags'] });
    assert.equal('description' in v || 'tags' in v, false);
  });

  test('$replace/tags', () => {
    assert.deepEqual(patched({ '$replace/tags': { a: 'b' } }).tags, { a: 'b' });
  });

  test('$replace/spec sets spec wholesale but keeps the immutable fields it leaves out', () => {
    const v = patched({ '$replace/spec': { initialCapacity: 50, fileSystemType: 'ext4' } });
    assert.deepEqual(v.spec, { initialCapacity: 50, fileSystemType: 'ext4', performanceClass: 'general-purpose-ssd' });
  });

  test('gvc and $replace/gvc are read-only and ignored', () => {
    const v = patched({ gvc: { name: 'other' }, '$replace/gvc': { name: 'other' } });
    assert.deepEqual(v.gvc, {});
  });

  test('the whole GET body sent back changes nothing', () => {
    assert.deepEqual(patched(storedVolumeset()), storedVolumeset());
  });
});

describe('volumeset: spec', () => {
  test('plain spec fields merge; numbers are not coerced here', () => {
    const v = patched({ spec: { initialCapacity: '40', storageClassSuffix: 'slow', snapshots: { createFinalSnapshot: 'false' } } });
    assert.equal(v.spec.initialCapacity, '40');
    assert.equal(v.spec.snapshots.createFinalSnapshot, 'false');
    assert.equal(v.spec.snapshots.retentionDuration, '7d');
    assert.equal(v.spec.storageClassSuffix, 'slow');
  });

  test('spec.$drop', () => {
    const v = patched({ spec: { $drop: ['storageClassSuffix', 'customEncryption', 'snapshots', 'autoscaling', 'mountOptions'] } });
    assert.deepEqual(v.spec, { initialCapacity: 20, performanceClass: 'general-purpose-ssd', fileSystemType: 'ext4' });
  });

  for (const field of ['customEncryption', 'snapshots', 'autoscaling', 'mountOptions']) {
    test(`spec.$replace/${field}`, () => {
      const values: Doc = {
        customEncryption: { regions: { 'gcp-us-east1': { keyId: 'g' } } },
        snapshots: { retentionDuration: '1d' },
        autoscaling: { maxCapacity: 200 },
        mountOptions: { resources: { maxCpu: '1' } },
      };
      const v = patched({ spec: { [`$replace/${field}`]: values[field] } });
      assert.deepEqual(v.spec, { ...spec(), [field]: values[field] });
    });
  }

  test('customEncryption: $drop regions; $replace/regions; regions merge per key', () => {
    assert.deepEqual(patched({ spec: { customEncryption: { $drop: ['regions'] } } }).spec.customEncryption, {});
    assert.deepEqual(patched({ spec: { customEncryption: { '$replace/regions': { r: { keyId: 'z' } } } } }).spec.customEncryption, {
      regions: { r: { keyId: 'z' } },
    });
    assert.deepEqual(
      patched({ spec: { customEncryption: { regions: { 'aws-us-west-2': null, r: { keyId: 'z' } } } } }).spec.customEncryption.regions,
      { 'aws-eu-central-1': { keyId: 'k2' }, r: { keyId: 'z' } },
    );
  });

  test('customEncryption.regions is a map: $drop takes any key', () => {
    const v = patched({ spec: { customEncryption: { regions: { $drop: ['aws-us-west-2', 'not-there'] } } } });
    assert.deepEqual(v.spec.customEncryption.regions, { 'aws-eu-central-1': { keyId: 'k2' } });
  });

  test('snapshots: $drop', () => {
    assert.deepEqual(patched({ spec: { snapshots: { $drop: ['schedule', 'createFinalSnapshot'] } } }).spec.snapshots, {
      retentionDuration: '7d',
    });
  });

  test('autoscaling: $drop and $replace/predictive', () => {
    const v = patched({ spec: { autoscaling: { $drop: ['scalingFactor'], '$replace/predictive': { enabled: false } } } });
    assert.deepEqual(v.spec.autoscaling, { maxCapacity: 100, minFreePercentage: 10, predictive: { enabled: false } });
  });

  test('autoscaling.predictive: $drop and merge', () => {
    const v = patched({ spec: { autoscaling: { predictive: { $drop: ['minDataPoints', 'scalingFactor'], lookbackHours: 48 } } } });
    assert.deepEqual(v.spec.autoscaling.predictive, { enabled: true, lookbackHours: 48, projectionHours: 6, minGrowthRateGBPerHour: 0.5 });
  });

  test('mountOptions: $drop resources; $replace/resources; resources.$drop', () => {
    assert.deepEqual(patched({ spec: { mountOptions: { $drop: ['resources'] } } }).spec.mountOptions, {});
    assert.deepEqual(patched({ spec: { mountOptions: { '$replace/resources': { minCpu: '1' } } } }).spec.mountOptions, {
      resources: { minCpu: '1' },
    });
    assert.deepEqual(patched({ spec: { mountOptions: { resources: { $drop: ['maxCpu', 'minMemory'] } } } }).spec.mountOptions, {
      resources: { minCpu: '500m', maxMemory: '4Gi' },
    });
  });

  test('everything at once', () => {
    const v = patched({
      $drop: ['description'],
      tags: { owner: 'ann' },
      spec: {
        $drop: ['storageClassSuffix'],
        initialCapacity: 25,
        '$replace/snapshots': { createFinalSnapshot: false },
        customEncryption: { '$replace/regions': {} },
        autoscaling: { predictive: { $drop: ['enabled'] }, '$replace/predictive': { enabled: false, lookbackHours: 2 } },
        mountOptions: { resources: { $drop: ['maxCpu'], maxMemory: '8Gi' } },
      },
    });
    assert.equal('description' in v, false);
    assert.deepEqual(v.tags, { tier: 'db', owner: 'ann' });
    assert.deepEqual(v.spec, {
      initialCapacity: 25,
      performanceClass: 'general-purpose-ssd',
      fileSystemType: 'ext4',
      customEncryption: { regions: {} },
      snapshots: { createFinalSnapshot: false },
      autoscaling: { maxCapacity: 100, minFreePercentage: 10, scalingFactor: 1.5, predictive: { enabled: false, lookbackHours: 2 } },
      mountOptions: { resources: { minCpu: '500m', minMemory: '1Gi', maxMemory: '8Gi' } },
    });
  });
});

describe('volumeset: immutable and unknown', () => {
  test('changing performanceClass or fileSystemType -> 400 naming it; the same value is fine', () => {
    assertBadRequest(() => patched({ spec: { performanceClass: 'high-throughput-ssd' } }), 'spec.performanceClass', /immutable/);
    assertBadRequest(() => patched({ '$replace/spec': { fileSystemType: 'xfs' } }), 'spec.fileSystemType', /immutable/);
    assert.equal(patched({ spec: { performanceClass: 'general-purpose-ssd', fileSystemType: 'ext4' } }).spec.fileSystemType, 'ext4');
  });

  test('removing an immutable field explicitly -> 400', () => {
    assertBadRequest(() => patched({ spec: { fileSystemType: null } }), 'spec.fileSystemType', /immutable/);
    assertBadRequest(() => patched({ spec: { $drop: ['performanceClass'] } }), 'spec.$drop[0]', /immutable/);
  });

  test('an immutable field not set yet may be set', () => {
    const stored = storedVolumeset();
    delete (stored.spec as Doc).fileSystemType;
    assert.equal((applyPatch(stored, { spec: { fileSystemType: 'xfs' } }, volumesetSchema).spec as Doc).fileSystemType, 'xfs');
  });

  test('status is read-only at any depth', () => {
    const v = patched({ status: { parentId: 'hacked' }, spec: { initialCapacity: 11 } });
    assert.equal(v.status.parentId, 'p1');
  });

  test('unknown fields and directives name their path', () => {
    assertBadRequest(() => patched({ spec: { autoscaling: { '$replace/bogus': {} } } }), 'spec.autoscaling.$replace/bogus');
    assertBadRequest(() => patched({ spec: { autoscaling: { predictive: { turbo: true } } } }), 'spec.autoscaling.predictive.turbo');
    assertBadRequest(() => patched({ spec: { '$replace/initialCapacity': 10 } }), 'spec.$replace/initialCapacity');
    assertBadRequest(() => patched({ spec: { '$append/snapshots': [] } }), 'spec.$append/snapshots', /not an array/);
    assertBadRequest(
      () => patched({ spec: { autoscaling: { '$replace/predictive': { enabled: true, warp: 9 } } } }),
      'spec.autoscaling.$replace/predictive.warp',
    );
  });
});
