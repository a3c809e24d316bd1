// Property-based tests over the group, volumeset and workload-like schemas.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ApiError } from '../../src/errors.js';
import type { JsonSchema } from '../../src/kinds/schema.js';
import { applyPatch, diffPatch } from '../../src/patch/index.js';
import { carryOver, patchArb, valueArb } from './arbitrary.js';
import { deepFreeze, groupSchema, validationErrors, volumesetSchema, workloadSchema, type Doc } from './fixtures.js';

const NUM_RUNS = 200;

const kinds: Array<[string, JsonSchema]> = [
  ['group', groupSchema],
  ['volumeset', volumesetSchema],
  ['workload-like', workloadSchema],
];

/** Patches that every resource schema refuses: unknown names, required drops, wrong types, depth. */
function invalidArb(): fc.Arbitrary<Doc> {
  let deep: Doc = { leaf: 1 };
  for (let i = 0; i < 70; i++) deep = { a: deep };
  return fc.constantFrom<Doc>(
    { $bogus: 1 },
    { notAField: 'x' },
    { $drop: ['name'] },
    { $drop: 'description' },
    { $drop: ['nope'] },
    { '$append/name': ['x'] },
    { '$replace/name': 'x' },
    { '$drop/description': ['x'] },
    { '$patch/tags': [{ name: 'x' }] },
    { '$replace/nope': {} },
    JSON.parse('{"__proto__": {"polluted": true}}'),
    { tags: deep },
  );
}

for (const [kind, schema] of kinds) {
  const stored = valueArb(schema, { readOnly: true }) as fc.Arbitrary<Doc>;
  const storedAndPatch = stored.chain((a) => patchArb(schema, a).map((patch) => ({ a, patch })));

  describe(`properties: ${kind}`, () => {
    test('generated objects validate (sanity check of the generator)', () => {
      fc.assert(
        fc.property(stored, (a) => assert.deepEqual(validationErrors(schema, a), [])),
        { numRuns: NUM_RUNS },
      );
    });

    test('(a) a random valid patch gives an object that validates', () => {
      fc.assert(
        fc.property(storedAndPatch, ({ a, patch }) => {
          const result = applyPatch(a, patch, schema);
          assert.deepEqual(validationErrors(schema, result), []);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    test('(b) applyPatch(a, diffPatch(a, b)) deep-equals b', () => {
      const pair = fc.tuple(stored, stored).map(([a, b]) => ({ a, b: carryOver(a, b, schema) as Doc }));
      fc.assert(
        fc.property(pair, ({ a, b }) => {
          const patch = diffPatch(a, b, schema);
          assert.deepEqual(applyPatch(a, patch, schema), b);
          // and the JSON round trip of the patch (how it travels) gives the same
          assert.deepEqual(applyPatch(a, JSON.parse(JSON.stringify(patch)), schema), b);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    test('(c) a patch with an invalid directive throws 400 and leaves the input byte-identical', () => {
      fc.assert(
        fc.property(storedAndPatch, invalidArb(), ({ a, patch }, invalid) => {
          const bad: Doc = { ...patch };
          for (const key of Object.keys(invalid)) Object.defineProperty(bad, key, { value: invalid[key], enumerable: true, writable: true });
          const before = JSON.stringify([a, bad]);
          assert.throws(
            () => applyPatch(a, bad, schema),
            (err: unknown) => err instanceof ApiError && err.status === 400 && Array.isArray(err.details.errors),
          );
          assert.equal(JSON.stringify([a, bad]), before);
          assert.equal(({} as Doc).polluted, undefined);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    test('(d) inputs are never mutated', () => {
      fc.assert(
        fc.property(storedAndPatch, stored, ({ a, patch }, b) => {
          const before = JSON.stringify([a, patch, b]);
          deepFreeze(a);
          deepFreeze(patch);
          deepFreeze(b);
          applyPatch(a, patch, schema);
          diffPatch(a, b, schema);
          assert.equal(JSON.stringify([a, patch, b]), before);
        }),
        { numRuns: NUM_RUNS },
      );
    });
  });
}
