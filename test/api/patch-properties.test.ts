// Properties of PATCH over HTTP, on a stored group and volume set, on every backend: an invalid
// patch is a 4xx error object and leaves the item byte-identical; a valid one (the generators of
// test/patch/arbitrary.ts) reads back as answered, its dry run predicts it, and the version
// grows by exactly one when something changed and not at all otherwise.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import type { JsonSchema } from '../../src/kinds/schema.js';
import { patchArb } from '../patch/arbitrary.js';
import { groupSchema, volumesetSchema, type Doc } from '../patch/fixtures.js';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';
import { ERROR_KEYS } from '../support/errors.js';

// Each run is a few requests; this keeps the file well under 30 s per backend.
const NUM_RUNS = 60;

interface Target {
  kind: string;
  url: string;
  schema: JsonSchema;
  /** Fields random valid patches leave alone. */
  fixed: string[];
  /** Patches that are wrong whatever else the body holds, given the stored item. */
  invalid(stored: Doc): fc.Arbitrary<Doc>;
}

const word = fc.stringMatching(/^[a-z][a-zA-Z0-9]{0,8}$/);

/** Invalid whatever the rest of the patch does: unknown names, directives, required drops, stale versions, renames. */
function commonInvalid(stored: Doc, schema: JsonSchema): Array<fc.Arbitrary<Doc>> {
  const unknown = word.filter((w) => !Object.hasOwn(schema.properties ?? {}, w));
  return [
    unknown.map((w) => ({ [w]: 'x' })),
    unknown.map((w) => ({ [`$append/${w}`]: ['x'] })),
    fc.tuple(fc.constantFrom('merge', 'set', 'delete', 'Patch', 'DROP'), word).map(([d, w]) => ({ [`$${d}/${w}`]: [] })),
    word.map((w) => ({ [`$${w}`]: [] })),
    fc.constant({ $drop: ['name'] }),
    fc.constant({ $drop: 'description' }),
    fc.constant({ '$patch/tags': [{ name: 'x' }] }),
    fc.constant({ '$replace/description': 'x' }),
    fc.constant({ description: 'x'.repeat(251) }),
    fc.constant({ tags: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`t${i}`, 'v'])) }),
    fc.constant(JSON.parse('{"__proto__": {"polluted": true}}') as Doc),
    fc.integer({ min: 1, max: 1000 }).map((n) => ({ version: stored.version + n })),
    fc.constantFrom('other', 'x1', 'devs-2').map((name) => ({ name })),
    // a version read earlier, as a string the way the CLI may echo it
    ...(stored.version > 1 ? [fc.integer({ min: 1, max: stored.version - 1 }).map((v) => ({ version: String(v) }))] : []),
  ];
}

const targets: Target[] = [
  {
    kind: 'group',
    url: '/org/acme/group/props',
    schema: groupSchema,
    // name and version are tested on their own; the group's JMESPath check is not in the schema the generators read
    fixed: ['name', 'version', 'identityMatcher'],
    invalid: (stored) =>
      fc.oneof(
        ...commonInvalid(stored, groupSchema),
        fc.constant({ '$patch/memberLinks': [{ name: 'x' }] }),
        fc.constant({ '$drop/memberLinks': [{ href: 'x' }] }),
        fc.constant({ memberLinks: ['not a link'] }),
        fc.constant({ memberQuery: { spec: { match: 'some' } } }),
        word.map((w) => ({ memberQuery: { spec: { [`$${w}`]: 1 } } })),
        fc.constant({ memberQuery: { spec: { '$patch/terms': [{ op: '=' }] } } }),
        fc.constant({ identityMatcher: { language: 'lua' } }),
      ),
  },
  {
    kind: 'volumeset',
    url: '/org/acme/gvc/props/volumeset/props',
    schema: volumesetSchema,
    fixed: ['name', 'version'],
    invalid: (stored) =>
      fc.oneof(
        ...commonInvalid(stored, volumesetSchema),
        fc.constant({ spec: { performanceClass: stored.spec.performanceClass === 'xfs' ? 'x' : 'high-throughput-ssd' } }),
        fc.constant({ spec: { fileSystemType: 'xfs' } }),
        fc.constant({ spec: { $drop: ['fileSystemType'] } }),
        fc.integer({ min: -5, max: 9 }).map((n) => ({ spec: { initialCapacity: n } })),
        fc.constant({ spec: { initialCapacity: 'twenty' } }),
        fc.constant({ spec: { snapshots: { retentionDuration: '7 days' } } }),
        fc.constant({ spec: { autoscaling: { '$replace/predictive': { enabled: true, bogus: 1 } } } }),
        fc.constant({ spec: { mountOptions: { resources: { $drop: ['gpu'] } } } }),
      ),
  },
];

/**
 * `invalid` laid over a valid patch, minus whatever in the valid patch addresses the same fields
 * (`$drop`, `$replace/x`, `$retain/x`...): those run around the plain field and could undo it.
 */
function spoil(patch: Doc, invalid: Doc): Doc {
  const taken = (field: string) => Object.hasOwn(invalid, field);
  const out: Doc = {};
  for (const key of Object.keys(patch)) {
    if (key === '$drop') {
      const names = (patch.$drop as string[]).filter((name) => !taken(name));
      if (names.length) out.$drop = names;
    } else if (!taken(key.replace(/^\$(replace|drop|retain|patch|append)\//, ''))) {
      out[key] = patch[key];
    }
  }
  for (const key of Object.keys(invalid)) Object.defineProperty(out, key, { value: invalid[key], enumerable: true, writable: true, configurable: true });
  return out;
}

/** What a PATCH body may not carry over HTTP at all: the JSON parser refuses prototype keys and NUL. */
function sendable(patch: Doc): boolean {
  const json = JSON.stringify(patch);
  return !json.includes('"__proto__"') && !json.includes('\\u0000');
}

/**
 * Removing `tags` is left out: it bumps the version without a visible change (an absent `tags`
 * reads as `{}`), the known bug that patch.test.ts tracks as a todo.
 */
function keepsTags(patch: Doc): boolean {
  return patch.tags !== null && !(patch.$drop ?? []).includes('tags');
}

/** The item without the fields every accepted change moves. */
const content = ({ version: _v, lastModified: _l, ...rest }: Doc) => rest;

forEachBackend('PATCH properties over HTTP', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'props' })).status, 201);
    const group = await k.call('POST', '/org/acme/group', {
      name: 'props',
      memberLinks: ['/org/acme/user/a@x.io', '/org/acme/serviceaccount/ci'],
      memberQuery: { kind: 'user', spec: { match: 'all', terms: [{ op: '~', property: 'email', value: '@x.io' }, { op: '=', tag: 'team', value: 'core' }] } },
      identityMatcher: { expression: 'groups', language: 'jmespath' },
    });
    assert.equal(group.status, 201, JSON.stringify(group.body));
    const vs = await k.call('POST', '/org/acme/gvc/props/volumeset', {
      name: 'props',
      spec: {
        initialCapacity: 20,
        fileSystemType: 'ext4',
        snapshots: { createFinalSnapshot: true, retentionDuration: '7d' },
        autoscaling: { maxCapacity: 100, minFreePercentage: 10, scalingFactor: 1.5, predictive: { enabled: true, lookbackHours: 24 } },
        mountOptions: { resources: { maxCpu: '2', minCpu: '500m' } },
      },
    });
    assert.equal(vs.status, 201, JSON.stringify(vs.body));
  });
  after(() => k.close());

  for (const target of targets) {
    test(`${target.kind}: an invalid patch is a 4xx error object and the item reads back byte-identical`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.gen(), fc.boolean(), async (gen, dryRun) => {
          const before: Response = await k.call('GET', target.url);
          const stored: Doc = before.body;
          const valid = gen(() => patchArb(target.schema, stored, target.fixed));
          const body = spoil(valid, gen(() => target.invalid(stored)));
          const res = await k.call('PATCH', `${target.url}${dryRun ? '?dryRun=true' : ''}`, body);
          assert.ok(res.status >= 400 && res.status < 500, `${res.status} ${res.raw}`);
          assert.deepEqual(Object.keys(res.body).sort(), ERROR_KEYS);
          assert.equal(res.body.status, res.status);
          assert.equal((await k.call('GET', target.url)).raw, before.raw);
        }),
        { numRuns: NUM_RUNS, includeErrorInReport: true },
      );
    });

    test(`${target.kind}: a valid patch is predicted by its dry run, reads back as answered, and moves the version by 1 or 0`, async () => {
      let changed = 0;
      await fc.assert(
        fc.asyncProperty(fc.gen(), fc.boolean(), async (gen, withVersion) => {
          const before: Response = await k.call('GET', target.url);
          const stored: Doc = before.body;
          const patch = gen(() => patchArb(target.schema, stored, target.fixed).filter((p) => sendable(p) && keepsTags(p)));
          // The CLI's update sends the version it read; other commands send none.
          const body = withVersion ? { ...patch, version: stored.version, id: stored.id } : patch;
          const dry = await k.call('PATCH', `${target.url}?dryRun=true`, body);
          assert.equal(dry.status, 200, `${dry.raw}\n${JSON.stringify(body)}`);
          assert.equal((await k.call('GET', target.url)).raw, before.raw, 'a dry run stores nothing');
          const res = await k.call('PATCH', target.url, body);
          assert.equal(res.status, 200, `${res.raw}\n${JSON.stringify(body)}`);
          assert.deepEqual(content(res.body), content(dry.body));
          assert.deepEqual((await k.call('GET', target.url)).body, res.body);
          const same = JSON.stringify(content(res.body)) === JSON.stringify(content(stored));
          if (same) {
            assert.equal(res.body.version, stored.version);
            assert.equal(res.body.lastModified, stored.lastModified);
          } else {
            assert.equal(res.body.version, stored.version + 1);
            changed++;
          }
        }),
        { numRuns: NUM_RUNS, includeErrorInReport: true },
      );
      assert.ok(changed > NUM_RUNS / 4, `only ${changed} of ${NUM_RUNS} patches changed anything`);
    });
  }
});
