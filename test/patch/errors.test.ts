// Every way a patch is refused, read-only fields, prototype safety, depth, and input immutability.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '../../src/errors.js';
import { MAX_DEPTH, applyPatch } from '../../src/patch/index.js';
import {
  assertBadRequest,
  assertValid,
  deepFreeze,
  groupSchema,
  storedGroup,
  storedVolumeset,
  storedWorkload,
  volumesetSchema,
  workloadSchema,
  type Doc,
} from './fixtures.js';


const onWorkload = (patch: unknown) => (): Doc => applyPatch(storedWorkload(), patch as Doc, workloadSchema);

describe('refused patches', () => {
  test('a body that is not an object', () => {
    assertBadRequest(onWorkload([]), '');
    assertBadRequest(onWorkload(null), '');
  });

  test('unknown fields in closed objects, at any level', () => {
    assertBadRequest(onWorkload({ nope: 1 }), 'nope', /not a known field/);
    assertBadRequest(onWorkload({ spec: { firewallConfig: { internal: {} } } }), 'spec.firewallConfig.internal');
    assertBadRequest(onWorkload({ spec: { '$patch/containers': [{ name: 'main', gpu: 1 }] } }), 'spec.$patch/containers[0].gpu');
  });

  test('unknown directives', () => {
    assertBadRequest(onWorkload({ $set: {} }), '$set', /not a known directive/);
    assertBadRequest(onWorkload({ spec: { '$merge/containers': [] } }), 'spec.$merge/containers');
    assertBadRequest(onWorkload({ spec: { '$replace/': {} } }), 'spec.$replace/');
    assertBadRequest(onWorkload({ tags: { $nope: 'x' } }), 'tags.$nope');
  });

  test('directives naming an unknown field', () => {
    assertBadRequest(onWorkload({ '$replace/specs': {} }), '$replace/specs', /'specs' is not a known field/);
    assertBadRequest(onWorkload({ '$append/members': [] }), '$append/members');
  });

  test('$drop: wrong type, required and unknown entries', () => {
    assertBadRequest(onWorkload({ $drop: 'description' }), '$drop', /array of field names/);
    assertBadRequest(onWorkload({ $drop: ['description', 3] }), '$drop', /array of field names/);
    assertBadRequest(onWorkload({ $drop: ['name'] }), '$drop[0]', /required/);
    assertBadRequest(onWorkload({ spec: { '$patch/containers': [{ name: 'main', $drop: ['image'] }] } }), 'spec.$patch/containers[0].$drop[0]', /required/);
    assertBadRequest(onWorkload({ spec: { $drop: ['replicas'] } }), 'spec.$drop[0]', /not a known field/);
  });

  test('array directives on fields that are not arrays', () => {
    assertBadRequest(onWorkload({ '$append/tags': ['x'] }), '$append/tags', /not an array/);
    assertBadRequest(onWorkload({ '$drop/description': ['x'] }), '$drop/description', /not an array/);
    assertBadRequest(onWorkload({ '$retain/spec': ['x'] }), '$retain/spec', /not an array/);
    assertBadRequest(onWorkload({ '$patch/spec': [{}] }), '$patch/spec', /not an array/);
  });

  test('array directives with a wrong argument type', () => {
    assertBadRequest(onWorkload({ '$append/memberLinks': '/org/acme/user/x' }), '$append/memberLinks', /must be an array/);
    assertBadRequest(onWorkload({ '$drop/memberLinks': { a: 1 } }), '$drop/memberLinks', /must be an array/);
    assertBadRequest(onWorkload({ '$drop/memberLinks': [{ a: 1 }] }), '$drop/memberLinks[0]', /plain value/);
    assertBadRequest(onWorkload({ '$retain/keys': [{ name: 'sk1' }] }), '$retain/keys[0]', /name of an item/);
    assertBadRequest(onWorkload({ spec: { '$patch/containers': { name: 'main' } } }), 'spec.$patch/containers', /must be an array/);
    assertBadRequest(onWorkload({ spec: { '$patch/containers': ['main'] } }), 'spec.$patch/containers[0]', /must be an object/);
    assertBadRequest(onWorkload({ spec: { '$patch/containers': [{ image: 'x' }] } }), 'spec.$patch/containers[0]', /must carry its name/);
    assertBadRequest(onWorkload({ '$replace/spec': [] }), '$replace/spec', /must be an object/);
    assertBadRequest(onWorkload({ '$replace/tags': 'a=b' }), '$replace/tags', /must be an object/);
  });

  test('$drop/, $retain/, $patch/ on an array of objects with no identity key', () => {
    const ports = (d: string, v: unknown) => onWorkload({ spec: { '$patch/containers': [{ name: 'main', [d]: v }] } });
    assertBadRequest(ports('$drop/ports', ['http']), 'spec.$patch/containers[0].$drop/ports', /no identity key/);
    assertBadRequest(ports('$retain/ports', ['http']), 'spec.$patch/containers[0].$retain/ports', /no identity key/);
    assertBadRequest(ports('$patch/ports', [{ number: 80 }]), 'spec.$patch/containers[0].$patch/ports', /no identity key/);
    // appending to such an array is fine
    const w = onWorkload({ spec: { '$patch/containers': [{ name: 'main', '$append/ports': [{ protocol: 'http', number: 80 }] }] } })();
    assert.deepEqual((w.spec as Doc).containers[0].ports, [{ protocol: 'http', number: 80 }]);
  });

  test('$patch/ on a primitive array', () => {
    assertBadRequest(onWorkload({ '$patch/memberLinks': [{ name: 'x' }] }), '$patch/memberLinks', /not objects/);
  });

  test('immutable fields', () => {
    assertBadRequest(onWorkload({ spec: { type: 'cron' } }), 'spec.type', /immutable/);
    assertBadRequest(onWorkload({ '$replace/spec': { type: 'cron' } }), 'spec.type', /immutable/);
    assertBadRequest(onWorkload({ spec: { '$replace/type': 'cron' } }), 'spec.$replace/type');
    assertBadRequest(onWorkload({ spec: { type: null } }), 'spec.type', /immutable/);
  });

  test('the error is an ApiError with the API error shape', () => {
    try {
      onWorkload({ nope: 1 })();
      assert.fail('expected a throw');
    } catch (err) {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 400);
      assert.deepEqual(err.details, { errors: [{ path: 'nope', message: 'is not a known field' }] });
      assert.match(err.message, /nope/);
    }
  });
});

describe('read-only fields are ignored wherever they appear', () => {
  test('top-level common fields and status', () => {
    const w = onWorkload({ id: 'x', kind: 'y', version: 1, created: 'c', lastModified: 'l', links: [], status: { ready: false }, gvc: {} })();
    assert.deepEqual(w, storedWorkload());
  });

  test('in directives and nested items', () => {
    const w = onWorkload({
      $drop: ['status', 'id'],
      '$replace/status': {},
      '$append/links': [{ rel: 'x', href: 'y' }],
      '$patch/keys': [{ name: 'sk1', created: 'forged', description: 'new' }],
    })();
    assert.deepEqual(w.status, { ready: true });
    assert.equal(w.id, storedWorkload().id);
    assert.deepEqual(w.links, storedWorkload().links);
    assert.deepEqual(w.keys[0], { name: 'sk1', description: 'new', created: '2025-01-01T00:00:00.000Z' });
  });

  test('null on a read-only field is ignored', () => {
    const v = applyPatch(storedVolumeset(), { status: null, $drop: ['tags'] }, volumesetSchema);
    assert.deepEqual(v.status, storedVolumeset().status);
  });
});

describe('prototype safety', () => {
  test('__proto__, constructor, prototype are unknown fields of closed objects', () => {
    for (const key of ['__proto__', 'constructor', 'prototype']) {
      assertBadRequest(onWorkload(JSON.parse(`{"${key}": {"polluted": 1}}`)), key);
      assertBadRequest(onWorkload(JSON.parse(`{"spec": {"${key}": {"polluted": 1}}}`)), `spec.${key}`);
      assertBadRequest(onWorkload({ $drop: [key] }), '$drop[0]');
      assertBadRequest(onWorkload({ [`$replace/${key}`]: {} }), `$replace/${key}`);
    }
    assert.equal(({} as Doc).polluted, undefined);
  });

  test('in maps they are stored as plain own keys', () => {
    const patch = JSON.parse(
      '{"tags": {"__proto__": "p", "constructor": "c", "prototype": "t"},' +
        ' "memberQuery": {"$replace/context": {"__proto__": {"polluted": 1}}}}',
    );
    const g = applyPatch(storedGroup(), patch, groupSchema);
    assert.equal(({} as Doc).polluted, undefined);
    assert.equal(Object.getPrototypeOf(g.tags), Object.prototype);
    assert.deepEqual(Object.keys(g.tags as Doc), ['team', 'env', '__proto__', 'constructor', 'prototype']);
    assert.equal(Object.getOwnPropertyDescriptor(g.tags, '__proto__')?.value, 'p');
    const context = (g.memberQuery as Doc).context;
    assert.equal(Object.getPrototypeOf(context), Object.prototype);
    assert.deepEqual(Object.getOwnPropertyDescriptor(context, '__proto__')?.value, { polluted: 1 });
    assert.match(JSON.stringify(g), /"__proto__":"p"/);
    assertValid(groupSchema, g);

    // and they can be removed again
    const again = applyPatch(g, JSON.parse('{"tags": {"__proto__": null, "$drop": ["constructor"]}}'), groupSchema);
    assert.deepEqual(Object.keys(again.tags as Doc), ['team', 'env', 'prototype']);
  });

  test('object-valued map entries and keyed items named __proto__', () => {
    const v = applyPatch(storedVolumeset(), JSON.parse('{"spec": {"customEncryption": {"regions": {"__proto__": {"keyId": "evil"}}}}}'), volumesetSchema);
    const regions = ((v.spec as Doc).customEncryption as Doc).regions;
    assert.equal(Object.getOwnPropertyDescriptor(regions, '__proto__')?.value.keyId, 'evil');
    assert.equal(({} as Doc).keyId, undefined);
    const w: Doc = applyPatch(storedWorkload(), { '$patch/keys': [{ name: '__proto__', description: 'x' }], '$drop/keys': ['constructor'] }, workloadSchema);
    assert.deepEqual(w.keys.at(-1), { name: '__proto__', description: 'x' });
    assert.equal(Object.getPrototypeOf(w.keys.at(-1)), Object.prototype);
  });
});

describe('depth', () => {
  const nested = (levels: number): Doc => {
    let value: Doc = { leaf: 1 };
    for (let i = 1; i < levels; i++) value = { a: value };
    return value;
  };

  test(`a patch ${MAX_DEPTH} levels deep applies; one more is refused`, () => {
    // root (1) > memberQuery (2) > context (3) > nested levels
    const ok = applyPatch(storedGroup(), { memberQuery: { context: nested(MAX_DEPTH - 2) } }, groupSchema);
    assert.ok(ok.memberQuery);
    assert.throws(
      () => applyPatch(storedGroup(), { memberQuery: { context: nested(MAX_DEPTH - 1) } }, groupSchema),
      (err: unknown) => err instanceof ApiError && err.status === 400 && /deeper than 64/.test(err.message),
    );
  });

  test('a hostile 100 000-level body fails fast with 400, no stack overflow', () => {
    assert.throws(
      () => applyPatch(storedGroup(), { memberQuery: { context: nested(100_000) } }, groupSchema),
      (err: unknown) => err instanceof ApiError && err.status === 400,
    );
  });
});

describe('inputs are never mutated', () => {
  test('frozen inputs, deep changes', () => {
    const stored = deepFreeze(storedWorkload());
    const patch = deepFreeze({
      tags: { a: null, z: '1' },
      $drop: ['memberLinks'],
      spec: {
        '$patch/containers': [{ name: 'main', '$patch/env': [{ name: 'X', value: 'new' }], '$drop/env': ['Y'] }],
        firewallConfig: { external: { '$append/inboundAllowCIDR': ['1.2.3.4/32'] } },
      },
      '$append/keys': [{ name: 'k9' }],
    });
    const before = JSON.stringify([stored, patch]);
    const result = applyPatch(stored, patch, workloadSchema);
    assert.equal(JSON.stringify([stored, patch]), before);
    // and the result shares nothing with the inputs
    (result.spec as Doc).containers[1].image = 'changed';
    (result.tags as Doc).b = 'changed';
    assert.equal(JSON.stringify([stored, patch]), before);
  });

  test('a refused patch leaves the input byte-identical', () => {
    const stored = storedWorkload();
    const before = JSON.stringify(stored);
    assert.throws(() => applyPatch(stored, { tags: { a: 'changed' }, spec: { '$patch/containers': [{ name: 'main', image: 'y' }] }, '$append/name': ['x'] }, workloadSchema));
    assert.equal(JSON.stringify(stored), before);
  });
});
