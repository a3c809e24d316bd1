// Schemas and helpers shared by the patch tests.
import assert from 'node:assert/strict';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { ApiError } from '../../src/errors.js';
import { resourceSchema } from '../../src/kinds/derive.js';
import { FORMATS } from '../../src/kinds/formats.js';
import groupDef from '../../src/kinds/group.js';
import { arr, bool, immutable, int, keyed, link, nameSchema, obj, oneOf, readOnly, str, type JsonSchema } from '../../src/kinds/schema.js';
import volumesetDef from '../../src/kinds/volumeset.js';

/** A resource as the tests read it: loosely typed, so deep fields can be asserted on. */
export type Doc = Record<string, any>;

export const groupSchema = resourceSchema(groupDef);
export const volumesetSchema = resourceSchema(volumesetDef);

/** Enough of a workload, a service account and a group to carry the bodies the CLI sends. */
export const workloadSchema = resourceSchema({
  kind: 'patchtestworkload',
  scope: 'gvc',
  summary: 'workload-like kind for the patch tests',
  permissions: [],
  fields: {
    spec: obj({
      type: immutable(oneOf(['serverless', 'standard', 'cron', 'stateful'])),
      containers: keyed(
        obj(
          {
            name: nameSchema(),
            image: str({ maxLength: 256 }),
            cpu: str({ maxLength: 16 }),
            env: keyed(obj({ name: str({ minLength: 1, maxLength: 64 }), value: str({ maxLength: 256 }) }, { required: ['name'] })),
            ports: arr(obj({ protocol: oneOf(['http', 'tcp']), number: int({ minimum: 1, maximum: 65535 }) }), { maxItems: 5 }),
          },
          { required: ['name', 'image'] },
        ),
        'name',
        { maxItems: 8 },
      ),
      firewallConfig: obj({ external: obj({ inboundAllowCIDR: arr(str({ maxLength: 64 }), { maxItems: 20 }) }) }),
      defaultOptions: obj({ autoscaling: obj({ minScale: int({ minimum: 0, maximum: 100 }), maxScale: int({ minimum: 0, maximum: 100 }) }), suspend: bool() }),
      identityLink: link(),
    }),
    memberLinks: arr(link(), { maxItems: 50 }),
    keys: keyed(obj({ name: str({ minLength: 1, maxLength: 64 }), description: str({ maxLength: 250 }), created: readOnly(str()) }, { required: ['name'] })),
    status: readOnly(obj({ ready: bool() })),
  },
});

const ajv = new Ajv({ allErrors: true, coerceTypes: true, strict: false });
addFormats.default(ajv);
for (const [name, format] of Object.entries(FORMATS)) ajv.addFormat(name, { type: 'string', validate: (v: string) => name === 'keel-link' || format.problem(v) === undefined });

const validators = new Map<JsonSchema, ReturnType<typeof ajv.compile>>();

/** Validation errors of a value against a schema (on a copy: coerceTypes rewrites in place). */
export function validationErrors(schema: JsonSchema, value: unknown): string[] {
  let validate = validators.get(schema);
  if (!validate) validators.set(schema, (validate = ajv.compile(schema)));
  if (validate(structuredClone(value))) return [];
  return (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`);
}

export function assertValid(schema: JsonSchema, value: unknown): void {
  assert.deepEqual(validationErrors(schema, value), [], JSON.stringify(value));
}

/** Asserts a 400 whose details name `path`. */
export function assertBadRequest(fn: () => unknown, path: string, message?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ApiError, `expected ApiError, got ${String(err)}`);
    assert.equal(err.status, 400);
    assert.equal(err.code, 'bad_request');
    const errors = err.details.errors as Array<{ path: string; message: string }>;
    assert.deepEqual(
      errors.map((e) => e.path),
      [path],
    );
    if (message) assert.match(errors[0].message, message);
    return true;
  });
}

/** Deeply freezes a value so any mutation by the code under test throws. */
export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
    Object.freeze(value);
  }
  return value;
}

export const stamp = {
  id: '0b5e0d0e-3c1f-4d2a-9d52-6f0f6d1d4e11',
  version: 3,
  created: '2025-01-01T00:00:00.000Z',
  lastModified: '2025-01-02T00:00:00.000Z',
  links: [{ rel: 'self', href: '/org/acme/x/y' }],
};

export function storedGroup(): Doc {
  return {
    ...structuredClone(stamp),
    kind: 'group',
    name: 'devs',
    description: 'developers',
    tags: { team: 'core', env: 'prod' },
    origin: 'default',
    memberLinks: ['/org/acme/user/a@x.io', '/org/acme/serviceaccount/ci'],
    memberQuery: {
      kind: 'user',
      spec: {
        match: 'all',
        terms: [
          { op: '~', property: 'email', value: '@x.io' },
          { op: '=', tag: 'team', value: 'core' },
          { op: 'exists', rel: 'manager' },
        ],
        sort: { by: 'name', order: 'asc' },
      },
    },
    identityMatcher: { expression: 'groups', language: 'jmespath' },
  };
}

export function storedVolumeset(): Doc {
  return {
    ...structuredClone(stamp),
    kind: 'volumeset',
    name: 'data',
    description: 'data',
    tags: { tier: 'db' },
    gvc: {},
    spec: {
      initialCapacity: 20,
      performanceClass: 'general-purpose-ssd',
      fileSystemType: 'ext4',
      storageClassSuffix: 'fast',
      customEncryption: { regions: { 'aws-us-west-2': { keyId: 'k1' }, 'aws-eu-central-1': { keyId: 'k2' } } },
      snapshots: { createFinalSnapshot: true, retentionDuration: '7d', schedule: '0 1 * * *' },
      autoscaling: {
        maxCapacity: 100,
        minFreePercentage: 10,
        scalingFactor: 1.5,
        predictive: { enabled: true, lookbackHours: 24, projectionHours: 6, minDataPoints: 10, minGrowthRateGBPerHour: 0.5, scalingFactor: 2 },
      },
      mountOptions: { resources: { maxCpu: '2', minCpu: '500m', minMemory: '1Gi', maxMemory: '4Gi' } },
    },
    status: { parentId: 'p1', workloadLinks: [], locations: [{ name: 'aws-us-west-2', desiredVolumeCount: 1, volumes: [] }] },
  };
}

export function storedWorkload(): Doc {
  return {
    ...structuredClone(stamp),
    kind: 'patchtestworkload',
    name: 'api',
    tags: { a: '1', b: '2' },
    spec: {
      type: 'standard',
      containers: [
        { name: 'main', image: 'nginx:1', env: [{ name: 'X', value: '1' }, { name: 'Y', value: '2' }] },
        { name: 'side', image: 'envoy:1', env: [] },
      ],
      firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } },
      defaultOptions: { autoscaling: { minScale: 1, maxScale: 2 }, suspend: false },
    },
    memberLinks: ['/org/acme/user/a@x.io'],
    keys: [
      { name: 'sk1', description: 'ci', created: '2025-01-01T00:00:00.000Z' },
      { name: 'sk2', description: 'dev', created: '2025-01-01T00:00:00.000Z' },
    ],
    status: { ready: true },
  };
}
