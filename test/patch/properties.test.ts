// Property-based tests over the group, volumeset and workload-like schemas.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ApiError } from '../../src/errors.js';
import type { JsonSchema } from '../../src/kinds/schema.js';
import { KINDS, findKind, resourceSchema } from '../../src/kinds/index.js';
import { applyPatch, diffPatch } from '../../src/patch/index.js';
import { resolveLink } from '../../src/resources/links.js';
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

// ---- links in directives ------------------------------------------------------------------------

/** The object paths of every list of links in a schema: where `$drop/x`, `$retain/x`, `$append/x` apply. */
function linkLists(schema: JsonSchema, path: string[] = []): string[][] {
  const out: string[][] = [];
  for (const [key, sub] of Object.entries(schema.properties ?? {})) {
    if (sub.readOnly) continue;
    if (sub.type === 'array' && sub.items?.format === 'keel-link') out.push([...path, key]);
    else if (sub.type === 'object') out.push(...linkLists(sub, [...path, key]));
  }
  return out;
}

/** Nests `leaf` under `path` (all but the last segment). */
function nest(path: string[], leaf: Doc): Doc {
  return path.slice(0, -1).reduceRight<Doc>((inner, key) => ({ [key]: inner }), leaf);
}

function listAt(doc: Doc, path: string[]): unknown {
  return path.reduce<unknown>((v, key) => (v && typeof v === 'object' ? (v as Doc)[key] : undefined), doc);
}

// Full links (the stored form), with names that are Object.prototype members among them.
const FULL = [
  '/org/acme/serviceaccount/a', '/org/acme/serviceaccount/constructor', '/org/acme/user/x@y.io', '/org/acme/group/toString',
  '/org/acme/location/aws-us-west-2', '/org/acme/secret/hasOwnProperty', '/org/acme/gvc/g1/workload/w', '/org/acme/gvc/g1/workload/__proto__',
  '/org/acme/gvc/g2/workload/w', '/org/acme/gvc/g1/identity/i',
];

/** Every form a client may write `full` in, inside `gvc` (if the item lives in one). */
function formsOf(full: string, gvc: string | undefined): string[] {
  const rest = full.slice('/org/acme/'.length);
  const forms = [full, `//${rest}`];
  const inGvc = /^gvc\/([^/]+)\/(.+)$/.exec(rest);
  if (inGvc && inGvc[1] === gvc) forms.push(`//${inGvc[2]}`);
  return forms;
}

describe('properties: links in directives compare in full form', () => {
  const targets = KINDS.flatMap((def) => linkLists(resourceSchema(def)).map((path) => ({ def, path })));
  test('every kind with link lists is covered', () => {
    const kinds = new Set(targets.map((t) => t.def.kind));
    for (const kind of ['group', 'policy', 'gvc', 'workload']) assert.ok(kinds.has(kind), kind);
  });

  for (const { def, path } of targets) {
    test(`${def.kind} ${path.join('.')}: relative and absolute forms drop, retain and append the same links`, () => {
      const place = { org: 'acme', gvc: def.scope === 'gvc' ? 'g1' : undefined };
      const link = (l: string) => resolveLink(l, place, (kind) => findKind(kind)?.scope === 'gvc');
      const sent = fc.array(fc.constantFrom(...FULL).chain((full) => fc.constantFrom(...formsOf(full, place.gvc)).map((form) => ({ full, form }))), { maxLength: 4 });
      fc.assert(
        fc.property(fc.uniqueArray(fc.constantFrom(...FULL), { maxLength: 5 }), sent, fc.constantFrom('drop', 'retain', 'append'), (stored, values, op) => {
          const field = path[path.length - 1];
          const doc = nest(path, { [field]: stored });
          const patch = nest(path, { [`$${op}/${field}`]: values.map((v) => v.form) });
          const result = listAt(applyPatch(doc, patch, resourceSchema(def), { link }), path);
          const named = values.map((v) => v.full);
          const expected =
            op === 'drop'
              ? stored.filter((l) => !named.includes(l))
              : op === 'retain'
                ? stored.filter((l) => named.includes(l))
                : [...stored, ...named.filter((l, i) => !stored.includes(l) && named.indexOf(l) === i)];
          assert.deepEqual(result, expected);
        }),
        { numRuns: 100 },
      );
    });
  }
});
