import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { FORMATS } from '../../src/kinds/formats.js';
import { KINDS, findKind, impliedPermissions, resourceSchema } from '../../src/kinds/index.js';
import { LOCATIONS_CATALOG } from '../../src/kinds/locations-catalog.js';
import type { HookContext, KindDef, Resource } from '../../src/kinds/types.js';
import { ApiError } from '../../src/errors.js';
import { applyPatch } from '../../src/patch/index.js';
import { present } from '../../src/resources/present.js';

const ajv = new Ajv({ allErrors: true, coerceTypes: true, strict: false });
addFormats.default(ajv);
for (const [name, format] of Object.entries(FORMATS)) ajv.addFormat(name, { type: 'string', validate: (v: string) => name === 'keel-link' || format.problem(v) === undefined });

const compiled = new Map<string, ValidateFunction>();
function validator(kind: string): ValidateFunction {
  let v = compiled.get(kind);
  if (!v) {
    v = ajv.compile(resourceSchema(findKind(kind)!));
    compiled.set(kind, v);
  }
  return v;
}

/** Validates a deep copy (ajv coerces in place) and returns the error list, or [] when valid. */
function errorsOf(kind: string, body: unknown): string[] {
  const v = validator(kind);
  const copy = structuredClone(body);
  return v(copy) ? [] : (v.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
}

function accepts(kind: string, body: unknown) {
  assert.deepEqual(errorsOf(kind, body), [], `${kind} should accept ${JSON.stringify(body)}`);
}
function rejects(kind: string, body: unknown) {
  const errors = errorsOf(kind, body);
  assert.notDeepEqual(errors, [], `${kind} should reject ${JSON.stringify(body)}`);
  if (process.env.KEEL_SHOW_REJECTIONS) console.log(kind, errors);
}

const container = { name: 'web', image: 'nginx:latest', cpu: '50m', memory: '128Mi', ports: [{ protocol: 'http', number: 8080 }] };

/** One valid and one invalid body per kind (invalid: an unknown field or a wrong type). */
const EXAMPLES: Record<string, { valid: Record<string, unknown>; invalid: Record<string, unknown> }> = {
  org: {
    valid: { name: 'acme', spec: { sessionTimeoutSeconds: 900, authConfig: { samlOnly: false }, logging: { s3: { bucket: 'b', region: 'us-east-1', credentials: '//secret/aws' } } } },
    invalid: { name: 'acme', spec: { sessionTimeoutSeconds: 'soon' } },
  },
  cloudaccount: {
    valid: { name: 'aws-main', provider: 'aws', data: { roleArn: 'arn:aws:iam::1:role/x' } },
    invalid: { name: 'aws-main', provider: 'ibm' },
  },
  policy: {
    valid: {
      name: 'p1',
      targetKind: 'secret',
      targetLinks: ['//secret/db'],
      bindings: [{ permissions: ['reveal', 'use'], principalLinks: ['//group/devs'] }],
    },
    invalid: { name: 'p1', targetKind: 'secret', bindings: [{ permissions: ['view'], principalLinks: [] }] },
  },
  user: { valid: { name: 'jane', email: 'jane@example.com', idp: 'google' }, invalid: { name: 'jane', email: 'jane@example.com', phone: '1' } },
  group: { valid: { name: 'devs', memberLinks: ['//user/a@b.c'] }, invalid: { name: 'devs', memberLinks: 'x' } },
  resource: { valid: { name: 'r1', spec: { any: 1 } }, invalid: { name: 'r1', other: 1 } },
  task: { valid: { name: 't1', type: 'invite', targetEmail: 'a@b.c', context: {} }, invalid: { name: 't1', context: 'x' } },
  permissions: { valid: { name: 'p1', spec: {} }, invalid: { name: 'p1', items: [] } },
  serviceaccount: {
    valid: { name: 'ci', keys: [{ name: 'sabcdefghijklmno', created: '2025-01-01T00:00:00Z', description: 'ci key' }], origin: 'default' },
    invalid: { name: 'ci', keys: [{ name: 'k1', hash: 'x' }] },
  },
  secret: {
    valid: { name: 'db', type: 'opaque', data: { payload: 'aGk=', encoding: 'base64' } },
    invalid: { name: 'db', type: 'magic' },
  },
  location: {
    valid: { name: 'my-cluster', provider: 'byok', spec: { enabled: true } },
    invalid: { name: 'my-cluster', provider: 'byok', spec: { enabled: true, weight: 3 } },
  },
  gvc: {
    valid: { name: 'prod', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] }, env: [{ name: 'A', value: '1' }] } },
    invalid: { name: 'prod', spec: { placement: {} } },
  },
  workload: {
    valid: { name: 'api', spec: { type: 'standard', containers: [container] } },
    invalid: { name: 'api', spec: { type: 'batch', containers: [container] } },
  },
  quota: { valid: { name: 'q1', unit: 'count', max: 10, dimensions: {} }, invalid: { name: 'q1', max: 'lots' } },
  identity: { valid: { name: 'app-id', aws: { cloudAccountLink: '//cloudaccount/aws-main', roleName: 'r' } }, invalid: { name: 'app-id', k8s: {} } },
  deployment: { valid: { name: 'aws-us-west-2', status: { ready: true } }, invalid: { name: 'aws-us-west-2', ready: true } },
  event: { valid: { name: 'e1', spec: {} }, invalid: { name: 'e1', spec: 'x' } },
  account: { valid: { name: 'acct', spec: {} }, invalid: { name: 'acct', owner: 'x' } },
  domain: {
    valid: {
      name: 'example',
      spec: { dnsMode: 'cname', ports: [{ number: 443, protocol: 'http2', routes: [{ prefix: '/', workloadLink: '//gvc/prod/workload/api' }] }] },
    },
    invalid: { name: 'example', spec: { dnsMode: 'mx' } },
  },
  image: { valid: { name: 'app:v1', repository: 'app', tag: 'v1', digest: 'sha256:00' }, invalid: { name: 'app:v1', layers: [] } },
  ipset: {
    valid: { name: 'ips', spec: { link: '//gvc/prod/workload/api', locations: [{ name: '//location/aws-us-west-2', retentionPolicy: 'keep' }] } },
    invalid: { name: 'ips', spec: { locations: [{ name: '//location/aws-us-west-2', retentionPolicy: 'forever' }] } },
  },
  resourcepolicy: { valid: { name: 'rp', spec: {} }, invalid: { name: 'rp', rules: [] } },
  accessreport: { valid: { name: 'ar', spec: {} }, invalid: { name: 'ar', permissions: [] } },
  agent: { valid: { name: 'vpc-agent', status: { bootstrapConfig: {} } }, invalid: { name: 'vpc-agent', spec: {} } },
  auditctx: { valid: { name: 'ops', origin: 'default' }, invalid: { name: 'ops', origin: 'mine' } },
  dbcluster: {
    valid: { name: 'pg', spec: { postgres: { version: '13.4', storageGB: 20, defaults: { size: 'small-2c-8g', instances: 1 } } } },
    invalid: { name: 'pg', spec: { mysql: {} } },
  },
  memcachecluster: {
    valid: { name: 'mc', spec: { nodeCount: 2, nodeSizeGiB: 1, locations: ['//location/aws-us-west-2'] } },
    invalid: { name: 'mc', spec: { nodeSizeGiB: 1 } },
  },
  spicedbcluster: { valid: { name: 'authz', spec: { version: '1.14.1', locations: [] } }, invalid: { name: 'authz', spec: { nodes: 3 } } },
  tenant: { valid: { name: 'tn', spec: {} }, invalid: { name: 'tn', spec: [] } },
  mk8s: {
    valid: { name: 'k8s', spec: { version: '1.28.2', provider: { generic: { location: 'x' } }, firewall: [{ sourceCIDR: '0.0.0.0/0' }] } },
    invalid: { name: 'k8s', spec: { version: '1.28.2', provider: { generic: {}, hetzner: {} } } },
  },
  command: { valid: { name: 'c1', type: 'runCronWorkload', spec: {} }, invalid: { name: 'c1', type: { a: 1 } } },
  policymembership: { valid: { name: 'pm', spec: {} }, invalid: { name: 'pm', member: 'x' } },
  primitive: { valid: { name: 'pr', spec: {} }, invalid: { name: 'pr', value: 1 } },
  foreign: { valid: { name: 'fo', spec: {} }, invalid: { name: 'fo', ref: 'x' } },
  link: { valid: { name: 'li', spec: {} }, invalid: { name: 'li', href: 'x' } },
  imagesummary: { valid: { name: 'is', spec: {} }, invalid: { name: 'is', repositories: [] } },
  volumeset: {
    valid: { name: 'data', spec: { initialCapacity: 10, fileSystemType: 'ext4' } },
    invalid: { name: 'data', spec: { initialCapacity: 10, size: 3 } },
  },
};

const noCtx: HookContext = {
  place: { org: 'acme' },
  lookup: async () => undefined,
  countInGvc: async () => 0,
  revokeKeysExcept: async () => {},
  kind: findKind,
};

const keyNamesOf = (item: Record<string, unknown>) => (item.keys as Array<{ name: string }>).map((k) => k.name);

function resource(kind: string, fields: Record<string, unknown>): Resource {
  return {
    id: '00000000-0000-4000-8000-000000000000',
    kind,
    name: 'x1',
    version: 1,
    tags: {},
    created: '2025-01-01T00:00:00Z',
    lastModified: '2025-01-01T00:00:00Z',
    links: [],
    ...fields,
  };
}

async function thrown(fn: () => unknown): Promise<ApiError | undefined> {
  try {
    await fn();
  } catch (err) {
    assert.ok(err instanceof ApiError, `expected an ApiError, got ${String(err)}`);
    return err;
  }
  return undefined;
}

describe('kind registry', () => {
  it('declares all 37 kinds of seed section 1 with their scopes', () => {
    assert.equal(KINDS.length, 37);
    assert.equal(new Set(KINDS.map((k) => k.kind)).size, 37);
    const gvcScoped = KINDS.filter((k) => k.scope === 'gvc').map((k) => k.kind).sort();
    assert.deepEqual(gvcScoped, ['identity', 'volumeset', 'workload']);
  });

  it('has an example for every kind', () => {
    assert.deepEqual(Object.keys(EXAMPLES).sort(), KINDS.map((k) => k.kind).sort());
  });

  it('never repeats the common fields in a kind', () => {
    for (const def of KINDS) {
      for (const common of ['id', 'kind', 'name', 'description', 'tags', 'version', 'created', 'lastModified', 'links', 'gvc']) {
        assert.ok(!(common in def.fields), `${def.kind} redeclares ${common}`);
      }
    }
  });

  it('lists permissions sorted by name, each with a description', () => {
    for (const def of KINDS) {
      const names = def.permissions.map((p) => p.name);
      assert.deepEqual(names, [...names].sort((a, b) => a.localeCompare(b)), def.kind);
      assert.equal(new Set(names).size, names.length, def.kind);
      for (const p of def.permissions) assert.ok(p.description.length > 0, `${def.kind}.${p.name}`);
      for (const [from, tos] of Object.entries(def.implied ?? {})) {
        assert.ok(names.includes(from), `${def.kind} implies from unknown ${from}`);
        for (const to of tos) assert.ok(names.includes(to), `${def.kind} implies unknown ${to}`);
      }
    }
  });
});

describe('schemas: one valid and one invalid example per kind', () => {
  for (const def of KINDS) {
    it(def.kind, () => {
      const example = EXAMPLES[def.kind];
      accepts(def.kind, example.valid);
      rejects(def.kind, example.invalid);
    });
  }
});

describe('seed limits (section 8)', () => {
  for (const def of KINDS) {
    it(`${def.kind}: name <= 64, description <= 250, unknown top-level field rejected`, () => {
      const base = EXAMPLES[def.kind].valid;
      // Domains are DNS names: labels of at most 63 characters, so their 64 characters have a dot.
      // Images are REPOSITORY:TAG, as long as the distribution spec lets those be together.
      const long = def.kind === 'domain' ? `${'a'.repeat(31)}.${'b'.repeat(32)}` : def.kind === 'image' ? `${'a'.repeat(381)}:v1` : 'a'.repeat(64);
      accepts(def.kind, { ...base, name: long, description: 'd'.repeat(250), tags: { team: 'core' } });
      rejects(def.kind, { ...base, name: def.kind === 'image' ? `${'a'.repeat(382)}:v1` : 'a'.repeat(65) });
      if (def.kind === 'image') rejects(def.kind, { ...base, name: 'app' });
      rejects(def.kind, { ...base, description: 'd'.repeat(251) });
      rejects(def.kind, { ...base, notAField: true });
    });
  }
});

describe('seed 2.6: identity', () => {
  const full = {
    name: 'app-id',
    description: 'identity of the app',
    tags: { team: 'core' },
    aws: {
      cloudAccountLink: '/org/acme/cloudaccount/aws',
      policyRefs: ['aws::AmazonS3ReadOnlyAccess'],
      trustPolicy: { Version: '2012-10-17', Statement: [{ Effect: 'Allow' }] },
      roleName: 'app-role',
    },
    gcp: {
      cloudAccountLink: '/org/acme/cloudaccount/gcp',
      scopes: ['https://www.googleapis.com/auth/cloud-platform'],
      serviceAccount: 'sa@project.iam.gserviceaccount.com',
      bindings: [{ resource: '//cloudresourcemanager.googleapis.com/projects/p', roles: ['roles/viewer'] }],
    },
    azure: {
      cloudAccountLink: '/org/acme/cloudaccount/azure',
      roleAssignments: [{ scope: '/subscriptions/s', roles: ['Reader'] }],
    },
    ngs: {
      cloudAccountLink: '/org/acme/cloudaccount/ngs',
      pub: { allow: ['a.>'], deny: ['b'] },
      sub: { allow: ['c'], deny: [] },
      resp: { max: 1, ttl: '5s' },
      subs: 10,
      data: -1,
      payload: 1024,
    },
    networkResources: [
      { name: 'db', agentLink: '/org/acme/agent/vpc', IPs: ['10.0.0.5'], FQDN: 'db.internal', resolverIP: '10.0.0.2', ports: [5432] },
    ],
    nativeNetworkResources: [
      { name: 'pl', FQDN: 'svc.internal', ports: [443], awsPrivateLink: { endpointServiceName: 'com.amazonaws.vpce.x' } },
      { name: 'psc', FQDN: 'svc2.internal', ports: [443], gcpServiceConnect: { targetService: 'projects/p/regions/r/serviceAttachments/s' } },
    ],
    memcacheAccess: [{ clusterLink: '/org/acme/memcachecluster/mc', role: 'readWrite' }],
    spicedbAccess: [{ clusterLink: '/org/acme/spicedbcluster/authz' }],
  };

  it('accepts every field of the seed table', () => accepts('identity', full));
  it('keys networkResources and nativeNetworkResources by name', () => {
    assert.equal(resourceSchema(findKind('identity')!).properties!.networkResources['x-key'], 'name');
    assert.equal(resourceSchema(findKind('identity')!).properties!.nativeNetworkResources['x-key'], 'name');
  });
  it('rejects unknown fields at every level', () => {
    rejects('identity', { ...full, k8s: {} });
    rejects('identity', { ...full, aws: { ...full.aws, region: 'x' } });
    rejects('identity', { ...full, ngs: { ...full.ngs, resp: { max: 1, ttl: '5s', extra: 1 } } });
    rejects('identity', { ...full, networkResources: [{ ...full.networkResources[0], protocol: 'tcp' }] });
    rejects('identity', { ...full, memcacheAccess: [{ clusterLink: '/org/acme/memcachecluster/mc', role: 'admin' }] });
  });
  it('rejects wrong types', () => {
    rejects('identity', { ...full, gcp: { ...full.gcp, scopes: 'all' } });
    rejects('identity', { ...full, networkResources: [{ name: 'db', ports: ['http'] }] });
  });
  it('declares use -> view', () => {
    assert.deepEqual(impliedPermissions(findKind('identity')!).use, ['view']);
  });
});

describe('seed 2.7: location', () => {
  const full = {
    name: 'aws-us-west-2',
    description: 'AWS US West (Oregon)',
    tags: {},
    origin: 'builtin',
    provider: 'aws',
    region: 'us-west-2',
    spec: { enabled: true },
    status: {
      geo: { lat: 45.8, lon: -119.7, country: 'USA', state: 'Oregon', city: 'Boardman', continent: 'North America' },
      ipRanges: ['1.2.3.0/24'],
    },
  };
  it('accepts every field of the seed table', () => accepts('location', full));
  it('accepts every origin and provider value', () => {
    for (const origin of ['builtin', 'default', 'custom']) accepts('location', { ...full, origin });
    for (const provider of ['aws', 'gcp', 'azure', 'byok', 'linode', 'vultr', 'equinix', 'oci']) accepts('location', { ...full, provider });
  });
  it('rejects unknown fields and values', () => {
    rejects('location', { ...full, provider: 'ibm' });
    rejects('location', { ...full, origin: 'mine' });
    rejects('location', { ...full, zone: 'a' });
    rejects('location', { ...full, status: { ...full.status, geo: { ...full.status.geo, altitude: 1 } } });
    rejects('location', { ...full, status: { ...full.status, geo: { ...full.status.geo, lat: 91 } } });
  });
  it('requires a provider', () => rejects('location', { name: 'x1' }));

  const def = findKind('location')!;
  it('lets clients create byok locations only', async () => {
    assert.equal(await thrown(() => def.check!({ name: 'mine', provider: 'byok', origin: 'custom' }, noCtx)), undefined);
    const err = await thrown(() => def.check!({ name: 'mine', provider: 'aws', origin: 'custom' }, noCtx));
    assert.equal(err?.status, 400);
    // the server's own seeding of built-ins passes
    assert.equal(await thrown(() => def.check!({ name: 'aws-us-west-2', provider: 'aws', origin: 'builtin' }, noCtx)), undefined);
  });
  it('defaults origin to custom and enabled to true', () => {
    const item: Record<string, unknown> = { name: 'mine', provider: 'byok' };
    def.defaults!(item, { org: 'acme' });
    assert.equal(item.origin, 'custom');
    assert.deepEqual(item.spec, { enabled: true });
  });
  it('lets a built-in location be enabled, disabled and tagged, but not moved', async () => {
    const previous = resource('location', { ...full, origin: 'builtin' });
    assert.equal(await thrown(() => def.check!({ ...full, spec: { enabled: false }, tags: { team: 'x' } }, noCtx, previous)), undefined);
    assert.equal(resourceSchema(def).properties!.provider['x-immutable'], true);
    assert.equal(resourceSchema(def).properties!.region['x-immutable'], true);
  });
  it('refuses to delete a built-in location', async () => {
    const err = await thrown(() => def.beforeDelete!(resource('location', { origin: 'builtin', provider: 'aws' }), noCtx));
    assert.equal(err?.status, 403);
    assert.equal(await thrown(() => def.beforeDelete!(resource('location', { origin: 'custom', provider: 'byok' }), noCtx)), undefined);
  });
});

describe('seed 2.8: gvc', () => {
  const full = {
    kind: 'gvc',
    id: '6f1c1e0e-2b55-4a7e-9a34-3d2f0d8b7c11',
    name: 'prod',
    alias: 'gm0b1e3a1vxjj',
    description: 'prod',
    version: 3,
    tags: { team: 'core' },
    created: '2025-02-01T10:00:00.000Z',
    lastModified: '2025-02-03T08:12:44.512Z',
    links: [{ rel: 'self', href: '/org/acme/gvc/prod' }],
    status: {},
    spec: {
      env: [{ name: 'A', value: '1' }],
      loadBalancer: { trustedProxies: 1, dedicated: true, multiZone: { enabled: false } },
      staticPlacement: {
        locationLinks: ['/org/acme/location/aws-us-west-2'],
        locationQuery: { kind: 'location', spec: { match: 'all', terms: [{ op: '=', property: 'provider', value: 'aws' }] } },
      },
      pullSecretLinks: ['/org/acme/secret/regcred'],
    },
  };
  it('accepts every field of the seed', () => accepts('gvc', full));
  it('coerces the strings the CLI sends', () => accepts('gvc', { ...full, spec: { loadBalancer: { trustedProxies: '2' } } }));
  it('rejects unknown fields', () => {
    rejects('gvc', { ...full, placement: {} });
    rejects('gvc', { ...full, spec: { ...full.spec, region: 'x' } });
    rejects('gvc', { ...full, spec: { env: [{ name: 'A', value: '1', secret: true }] } });
    rejects('gvc', { ...full, spec: { staticPlacement: { locationLinks: [], regions: [] } } });
  });
  it('keys env by name', () => {
    const spec = resourceSchema(findKind('gvc')!).properties!.spec;
    assert.equal(spec.properties!.env['x-key'], 'name');
  });

  const def = findKind('gvc')!;
  it('generates a 13-character alias once', () => {
    const item: Record<string, unknown> = { name: 'prod' };
    def.defaults!(item, { org: 'acme' });
    assert.match(String(item.alias), /^[a-z][a-z0-9]{12}$/);
    const kept = { name: 'prod', alias: 'abc' };
    def.defaults!(kept, { org: 'acme' });
    assert.equal(kept.alias, 'abc');
  });
  it('links its workloads and identities', () => {
    const rels = def.links!(resource('gvc', {}), '/org/acme/gvc/prod').map((l) => l.rel);
    assert.deepEqual(rels, ['workload', 'identity']);
  });
  it('refuses deletion while workloads, identities or volume sets remain', async () => {
    const counts: Record<string, number> = { workload: 2, identity: 0, volumeset: 1 };
    const ctx: HookContext = { ...noCtx, countInGvc: async (kind, gvc) => (gvc === 'prod' ? counts[kind] ?? 0 : 0) };
    const err = await thrown(() => def.beforeDelete!(resource('gvc', { name: 'prod' }), ctx));
    assert.equal(err?.status, 409);
    assert.equal(err?.code, 'conflict');
    assert.match(err!.message, /2 workloads/);
    assert.match(err!.message, /1 volumeset/);
    assert.equal(await thrown(() => def.beforeDelete!(resource('gvc', { name: 'empty' }), ctx)), undefined);
  });
});

describe('workload', () => {
  const def = findKind('workload')!;
  it('accepts the body of cpln workload create', () => {
    accepts('workload', {
      name: 'api',
      description: 'api',
      tags: {},
      spec: {
        type: 'standard',
        containers: [{ name: 'nginx', image: 'nginx:latest', env: [], inheritEnv: false, cpu: '50m', memory: '128Mi', volumes: [], ports: [{ protocol: 'http', number: 8080 }] }],
        firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'], outboundAllowCIDR: [] }, internal: { inboundAllowType: 'same-gvc' } },
        defaultOptions: { autoscaling: { metric: 'cpu', minScale: '1', maxScale: '3', target: 60 }, capacityAI: 'false', suspend: false },
        identityLink: '//identity/app-id',
      },
    });
  });
  it('accepts a cron job with probes, rollout and security options', () => {
    accepts('workload', {
      name: 'nightly',
      spec: {
        type: 'cron',
        containers: [{ ...container, readinessProbe: { httpGet: { path: '/', port: 8080, scheme: 'HTTP' }, periodSeconds: 10 }, command: 'run', args: ['--x'] }],
        job: { schedule: '0 2 * * *', concurrencyPolicy: 'Forbid', restartPolicy: 'Never' },
        rolloutOptions: { minReadySeconds: 0, maxSurgeReplicas: '25%' },
        securityOptions: { filesystemGroupId: 1000 },
        localOptions: [{ location: 'aws-us-west-2', suspend: true }],
        supportDynamicTags: true,
      },
    });
  });
  it('rejects unknown container fields and bad ports', () => {
    rejects('workload', { name: 'api', spec: { containers: [{ ...container, privileged: true }] } });
    rejects('workload', { name: 'api', spec: { containers: [{ ...container, ports: [{ protocol: 'udp', number: 53 }] }] } });
    rejects('workload', { name: 'api', spec: { containers: [] } });
  });
  it('defaults type and options to what the hosted service shows', () => {
    const item: Record<string, unknown> = { name: 'api', spec: { containers: [container] } };
    def.defaults!(item, { org: 'acme', gvc: 'prod' });
    const spec = item.spec as Record<string, any>;
    assert.equal(spec.type, 'standard');
    assert.deepEqual(spec.defaultOptions.autoscaling, { metric: 'concurrency', target: 100, minScale: 1, maxScale: 5, scaleToZeroDelay: 300, maxConcurrency: 0 });
    assert.equal(spec.defaultOptions.capacityAI, true);
    assert.equal(spec.defaultOptions.timeoutSeconds, 5);
    assert.equal(spec.defaultOptions.suspend, false);
    accepts('workload', item);
  });
  it('keeps what the client set', () => {
    const item: Record<string, unknown> = { name: 'api', spec: { type: 'serverless', containers: [container], defaultOptions: { autoscaling: { maxScale: 9 } } } };
    def.defaults!(item, { org: 'acme', gvc: 'prod' });
    const spec = item.spec as Record<string, any>;
    assert.equal(spec.type, 'serverless');
    assert.equal(spec.defaultOptions.autoscaling.maxScale, 9);
  });
  it('adds the deployment link the CLI follows', () => {
    const self = '/org/acme/gvc/prod/workload/api';
    assert.deepEqual(def.links!(resource('workload', {}), self), [{ rel: 'deployment', href: `${self}/deployment` }]);
  });
  it('checks name length, cron jobs and scale bounds', async () => {
    const ok = { name: 'api', spec: { type: 'standard', containers: [container] } };
    assert.equal(await thrown(() => def.check!(ok, noCtx)), undefined);
    assert.equal((await thrown(() => def.check!({ ...ok, name: 'a'.repeat(50) }, noCtx)))?.status, 400);
    assert.equal((await thrown(() => def.check!({ ...ok, name: 'api-headless' }, noCtx)))?.status, 400);
    assert.equal((await thrown(() => def.check!({ name: 'c1', spec: { type: 'cron', containers: [container] } }, noCtx)))?.status, 400);
    const inverted = { name: 'api', spec: { containers: [container], defaultOptions: { autoscaling: { minScale: 4, maxScale: 2 } } } };
    assert.equal((await thrown(() => def.check!(inverted, noCtx)))?.status, 400);
  });
  it('takes the patches cpln workload update sends', () => {
    const def = findKind('workload')!;
    const stored = { name: 'api', spec: { type: 'standard', containers: [{ ...container, name: 'nginx', env: [{ name: 'FOO', value: '1' }] }] } };
    const next = applyPatch(stored, {
      spec: {
        '$patch/containers': [{ name: 'nginx', image: 'nginx:2', '$patch/env': [{ name: 'BAR', value: 'x' }], '$drop/env': ['FOO'] }],
        defaultOptions: { autoscaling: { maxScale: '3' } },
        '$patch/localOptions': [{ location: 'aws-us-west-2', suspend: true }],
      },
    }, resourceSchema(def)) as any;
    assert.equal(next.spec.containers[0].image, 'nginx:2');
    assert.deepEqual(next.spec.containers[0].env, [{ name: 'BAR', value: 'x' }]);
    assert.deepEqual(next.spec.localOptions, [{ location: 'aws-us-west-2', suspend: true }]);
    accepts('workload', next);
  });
  it('marks spec.type immutable', () => {
    assert.equal(resourceSchema(def).properties!.spec.properties!.type['x-immutable'], true);
  });
});

describe('policy', () => {
  const def = findKind('policy')!;
  const principals = (n: number) => Array.from({ length: n }, (_, i) => `//serviceaccount/sa${i}`);
  it('accepts the bodies the CLI sends', () => {
    accepts('policy', { name: 'p1', targetKind: 'gvc', tags: {}, targetLinks: ['/org/acme/gvc/g'] });
    accepts('policy', { name: 'p1', targetKind: 'gvc', tags: {}, target: 'all', targetLinks: [] });
    accepts('policy', { name: 'p1', targetKind: 'user', targetQuery: { spec: { match: 'all', terms: [{ op: '~', property: 'email', value: 'x' }] } } });
  });
  it('enforces the binding limits', () => {
    accepts('policy', { name: 'p1', targetKind: 'gvc', bindings: [{ permissions: ['view'], principalLinks: principals(200) }] });
    rejects('policy', { name: 'p1', targetKind: 'gvc', bindings: [{ permissions: ['view'], principalLinks: principals(201) }] });
    const many = Array.from({ length: 51 }, (_, i) => ({ permissions: [`p${i}`], principalLinks: ['//group/g'] }));
    rejects('policy', { name: 'p1', targetKind: 'gvc', bindings: many });
    accepts('policy', { name: 'p1', targetKind: 'gvc', bindings: many.slice(0, 50) });
    rejects('policy', { name: 'p1', targetKind: 'gvc', target: 'some' });
    rejects('policy', { name: 'p1' });
  });
  it('refuses two bindings with the same permission set', async () => {
    const item = {
      name: 'p1',
      targetKind: 'gvc',
      bindings: [
        { permissions: ['view', 'edit'], principalLinks: ['//group/a'] },
        { permissions: ['edit', 'view'], principalLinks: ['//group/b'] },
      ],
    };
    assert.equal((await thrown(() => def.check!(item, noCtx)))?.status, 400);
  });
  it('protects built-in policies', async () => {
    const builtin = resource('policy', { name: 'superusers-gvc', origin: 'builtin', targetKind: 'gvc' });
    assert.equal((await thrown(() => def.beforeDelete!(builtin, noCtx)))?.status, 403);
    assert.equal((await thrown(() => def.check!({ name: 'superusers-gvc', targetKind: 'gvc' }, noCtx, builtin)))?.status, 400);
  });
  it('defaults origin to default', () => {
    const item: Record<string, unknown> = { name: 'p1', targetKind: 'gvc' };
    def.defaults!(item, { org: 'acme' });
    assert.equal(item.origin, 'default');
  });
});

describe('secret', () => {
  const def = findKind('secret')!;
  const check = (item: Record<string, unknown>) => thrown(() => def.check!(item, noCtx));
  it('accepts the data shape of each simple type', async () => {
    const cases: Array<[string, unknown]> = [
      ['opaque', { payload: 'hello', encoding: 'plain' }],
      ['tls', { cert: 'C', key: 'K' }],
      ['aws', { accessKey: 'A', secretKey: 'S', roleArn: 'arn' }],
      ['ecr', { accessKey: 'A', secretKey: 'S', repos: ['r'] }],
      ['userpass', { username: 'u', password: 'p' }],
      ['keypair', { secretKey: 'k' }],
      ['azure-connector', { url: 'https://x', code: 'c' }],
      ['dictionary', { A: '1', B: '2' }],
      ['nats-account', { accountId: 'a', privateKey: 'k' }],
      ['gcp', '{"type":"service_account"}'],
      ['docker', '{"auths":{}}'],
      ['azure-sdk', '{"subscriptionId":"s"}'],
    ];
    for (const [type, data] of cases) {
      accepts('secret', { name: 's1', type, data });
      assert.equal(await check({ name: 's1', type, data }), undefined, type);
    }
  });
  it('rejects data that does not fit the type', async () => {
    assert.equal((await check({ name: 's1', type: 'opaque', data: { payload: 'x', encoding: 'hex' } }))?.status, 400);
    assert.equal((await check({ name: 's1', type: 'opaque', data: { value: 'x' } }))?.status, 400);
    assert.equal((await check({ name: 's1', type: 'tls', data: { key: 'K' } }))?.status, 400);
    assert.equal((await check({ name: 's1', type: 'dictionary', data: { A: 1 } }))?.status, 400);
    assert.equal((await check({ name: 's1', type: 'userpass', data: 'u:p' }))?.status, 400);
  });
  it('requires a known type', () => {
    rejects('secret', { name: 's1' });
    rejects('secret', { name: 's1', type: 'password' });
  });
  it('hides data from plain reads without touching the stored item', () => {
    const data = { name: 's1', type: 'opaque', data: { payload: 'x' } };
    const item = { org: 'acme', kind: 'secret', gvc: '', name: 's1', id: 'i', version: 1, created: 't', lastModified: 't', data };
    const shown = present(def, item);
    assert.equal('data' in shown, false);
    assert.equal(shown.type, 'opaque');
    assert.deepEqual(data.data, { payload: 'x' });
    assert.deepEqual(present(def, item, { reveal: true }).data, { payload: 'x' });
  });
  it('implies view from reveal and use', () => {
    const implied = impliedPermissions(def);
    assert.deepEqual(implied.reveal, ['view']);
    assert.deepEqual(implied.use, ['view']);
  });
});

describe('service accounts, audit contexts, groups: built-ins', () => {
  it('serviceaccount defaults, built-in protection and key listing', async () => {
    const def = findKind('serviceaccount')!;
    const item: Record<string, unknown> = { name: 'ci' };
    def.defaults!(item, { org: 'acme' });
    assert.equal(item.origin, 'default');
    const builtin = resource('serviceaccount', { name: 'controlplane', origin: 'builtin', keys: [] });
    assert.equal((await thrown(() => def.beforeDelete!(builtin, noCtx)))?.status, 403);
    assert.equal((await thrown(() => def.check!({ name: 'controlplane' }, noCtx, builtin)))?.status, 400);
    // A key entry holds its listing fields only: a hash has no place to be stored and shown.
    rejects('serviceaccount', { name: 'ci', keys: [{ name: 'k', description: 'd', secretHash: 'h' }] });
  });
  it('serviceaccount keys: $drop/keys removes a key and afterWrite revokes what is no longer listed', async () => {
    const def = findKind('serviceaccount')!;
    const stored = { name: 'ci', origin: 'default', keys: [{ name: 'sk1', created: 't', description: 'a' }, { name: 'sk2', created: 't', description: 'b' }] };
    const next = applyPatch(structuredClone(stored), { '$drop/keys': ['sk1'] }, resourceSchema(def)) as Record<string, unknown>;
    assert.deepEqual(keyNamesOf(next), ['sk2']);
    accepts('serviceaccount', next);
    const calls: Array<[string, string[]]> = [];
    const ctx: HookContext = { ...noCtx, revokeKeysExcept: async (sa, keep) => void calls.push([sa, keep]) };
    await def.afterWrite!('ci', next, ctx);
    await def.afterWrite!('ci', undefined, ctx);
    assert.deepEqual(calls, [['ci', ['sk2']], ['ci', []]]);
  });
  it('serviceaccount keys: a create starts empty, a replace without keys keeps them', async () => {
    const def = findKind('serviceaccount')!;
    const created: Record<string, unknown> = { name: 'ci' };
    await def.check!(created, noCtx);
    assert.deepEqual(created.keys, []);
    const previous = resource('serviceaccount', { name: 'ci', origin: 'default', keys: [{ name: 'sk1', created: 't1' }, { name: 'sk2', created: 't2' }] });
    const replaced: Record<string, unknown> = { name: 'ci', description: 'new' };
    await def.check!(replaced, noCtx, previous);
    assert.deepEqual(replaced.keys, [{ name: 'sk1', created: 't1' }, { name: 'sk2', created: 't2' }]);
    // a replace listing one key (created stripped as read-only) keeps that key's created
    const narrowed: Record<string, unknown> = { name: 'ci', keys: [{ name: 'sk2', description: 'd' }] };
    await def.check!(narrowed, noCtx, previous);
    assert.deepEqual(narrowed.keys, [{ name: 'sk2', description: 'd', created: 't2' }]);
  });
  it('auditctx cannot be deleted; the built-in cannot be edited', async () => {
    const def = findKind('auditctx')!;
    assert.equal(def.operations?.delete, 'audit contexts cannot be deleted');
    const builtin = resource('auditctx', { name: 'cpln', origin: 'builtin' });
    assert.equal((await thrown(() => def.check!({ name: 'cpln' }, noCtx, builtin)))?.status, 400);
    const item: Record<string, unknown> = { name: 'ops' };
    def.defaults!(item, { org: 'acme' });
    assert.equal(item.origin, 'default');
    const implied = impliedPermissions(def);
    assert.deepEqual(implied.readAudit, ['view']);
    assert.deepEqual(implied.writeAudit, ['view']);
  });
});

describe('operations', () => {
  it('images are created only by pushing', () => {
    assert.equal(findKind('image')!.operations?.create, 'images are created only by pushing them to the registry');
  });
  it('read-only projections cannot be written', () => {
    for (const kind of ['deployment', 'permissions', 'accessreport', 'event']) {
      assert.deepEqual(findKind(kind)!.operations, { create: false, update: false, delete: false }, kind);
    }
  });
});

describe('permissions (api-semantics §9.3)', () => {
  it('manage implies every permission and edit implies view, for every kind that has them', () => {
    for (const def of KINDS) {
      const names = def.permissions.map((p) => p.name).sort();
      const implied = impliedPermissions(def);
      if (names.includes('manage')) assert.deepEqual(implied.manage, names, def.kind);
      if (names.includes('edit') && names.includes('view')) assert.ok(implied.edit.includes('view'), def.kind);
    }
  });
  it('has the documented kind-specific implications', () => {
    const implied = (kind: string) => impliedPermissions(findKind(kind)!);
    assert.deepEqual(implied('workload').exec, ['exec.runCronWorkload', 'exec.stopReplica']);
    assert.deepEqual(implied('image').create, ['pull', 'view']);
    assert.deepEqual(implied('image').pull, ['view']);
    assert.deepEqual(implied('agent').use, ['view']);
    assert.deepEqual(implied('org').readLogs, ['view']);
    assert.deepEqual(implied('org').exec, ['exec.echo']);
  });
  it('has the documented permission names', () => {
    const names = (kind: string) => findKind(kind)!.permissions.map((p) => p.name);
    assert.deepEqual(names('serviceaccount'), ['addKey', 'create', 'delete', 'edit', 'manage', 'view']);
    assert.deepEqual(names('policy'), ['create', 'delete', 'edit', 'manage', 'view']);
    assert.deepEqual(names('auditctx'), ['create', 'edit', 'manage', 'readAudit', 'view', 'writeAudit']);
    assert.deepEqual(names('secret'), ['create', 'delete', 'edit', 'manage', 'reveal', 'use', 'view']);
    assert.deepEqual(names('user'), ['delete', 'edit', 'impersonate', 'invite', 'manage', 'view']);
    assert.deepEqual(names('org'), ['edit', 'exec', 'exec.echo', 'grafanaAdmin', 'manage', 'readLogs', 'readMetrics', 'readUsage', 'view', 'viewAccessReport']);
    assert.deepEqual(names('image'), ['create', 'delete', 'edit', 'manage', 'pull', 'view']);
    assert.deepEqual(names('agent'), ['create', 'delete', 'edit', 'manage', 'use', 'view']);
    for (const w of ['connect', 'create', 'delete', 'edit', 'exec', 'exec.runCronWorkload', 'manage', 'view']) assert.ok(names('workload').includes(w), w);
  });
});

describe('location catalog', () => {
  it('has at least 30 built-in locations covering the 7 clouds', () => {
    assert.ok(LOCATIONS_CATALOG.length >= 30);
    const providers = new Set(LOCATIONS_CATALOG.map((l) => l.provider));
    assert.deepEqual([...providers].sort(), ['aws', 'azure', 'equinix', 'gcp', 'linode', 'oci', 'vultr']);
  });
  it('has unique names of the form provider-region, each a valid location', () => {
    assert.equal(new Set(LOCATIONS_CATALOG.map((l) => l.name)).size, LOCATIONS_CATALOG.length);
    for (const loc of LOCATIONS_CATALOG) {
      assert.equal(loc.name, `${loc.provider}-${loc.region}`);
      accepts('location', { ...loc, origin: 'builtin' });
    }
  });
  it('has valid geo for every entry', () => {
    for (const { name, status } of LOCATIONS_CATALOG) {
      const g = status.geo;
      assert.ok(g.lat >= -90 && g.lat <= 90 && g.lon >= -180 && g.lon <= 180, name);
      assert.ok(!(g.lat === 0 && g.lon === 0), name);
      for (const f of [g.country, g.state, g.city, g.continent]) assert.ok(f.length > 0, name);
      assert.deepEqual(status.ipRanges, []);
    }
    for (const loc of LOCATIONS_CATALOG) assert.equal(loc.tags['cpln/city'], loc.status.geo.city);
  });
  it('includes the well-known names', () => {
    const names = new Set(LOCATIONS_CATALOG.map((l) => l.name));
    for (const n of ['aws-us-west-2', 'gcp-us-east1', 'azure-eastus2', 'linode-us-ord', 'vultr-ewr', 'equinix-da', 'oci-us-ashburn-1']) {
      assert.ok(names.has(n), n);
    }
  });
});

describe('other kind hooks', () => {
  it('cloud account data must match its provider', async () => {
    const def = findKind('cloudaccount')!;
    assert.equal(await thrown(() => def.check!({ name: 'c1', provider: 'gcp', data: { projectId: 'p' } }, noCtx)), undefined);
    assert.equal((await thrown(() => def.check!({ name: 'c1', provider: 'gcp', data: { roleArn: 'x' } }, noCtx)))?.status, 400);
  });
  it('mk8s takes exactly one provider', () => {
    rejects('mk8s', { name: 'k1', spec: { version: '1.28.2', provider: {} } });
    rejects('mk8s', { name: 'k1', spec: { version: '1.28.2', provider: { openstack: {} } } });
  });
  it('users carry an email', () => {
    rejects('user', { name: 'jane' });
    rejects('user', { name: 'jane', email: 'not an email' });
  });
  it('every declared hook only runs on plain objects without throwing unexpectedly', () => {
    for (const def of KINDS as readonly KindDef[]) {
      if (!def.defaults) continue;
      const item: Record<string, unknown> = structuredClone(EXAMPLES[def.kind].valid);
      def.defaults(item, { org: 'acme', gvc: def.scope === 'gvc' ? 'prod' : undefined });
      accepts(def.kind, item);
    }
  });
});
