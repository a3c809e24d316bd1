// Every field of every kind in the public types (types-ts interfaces and the Terraform provider's
// client structs, compiled into test/fixtures/public-types/catalogue.json) is accepted through
// the HTTP API with a valid value and comes back; an object given a field neither source names
// is refused with 400 naming that field. When the sources move, regenerating the catalogue
// (scripts/public-types.ts) and running this file lists what Keel has to learn.
import assert from 'node:assert/strict';
import { after, before, describe, it, test } from 'node:test';
import { FORMATS } from '../../src/kinds/formats.js';
import { findKind, resourceSchema } from '../../src/kinds/index.js';
import type { JsonSchema } from '../../src/kinds/schema.js';
import { CATALOGUE, contains, resolve, segments, type FieldEntry } from '../support/catalogue.js';
import { assertError } from '../support/errors.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const ORG = 'acme';
const WORKLOAD = `/org/${ORG}/gvc/prod/workload/api`;
const SECRET = `/org/${ORG}/secret/creds`;

/** Kinds whose every field the registry writes (images come from registry pushes): checked against the schema only. */
const SERVER_WRITTEN = new Set(['image']);

/**
 * Objects Keel stores as sent, without naming their fields: an unknown field inside them is not
 * refused. Each is a subtree the public types leave open or that changes faster than Keel follows.
 */
const OPEN_BY_DESIGN: Record<string, string[]> = {
  workload: ['spec.sidecar.envoy', 'spec.defaultOptions.autoscaling.keda', 'spec.localOptions[].autoscaling.keda', 'spec.extras'],
  gvc: ['spec.sidecar.envoy'],
  mk8s: ['spec.provider', 'spec.addOns'],
};

/**
 * Enums of the types that Keel does not enforce: product versions, whose lists in the types trail
 * what the service offers (Keel's own tests use versions newer than the lists).
 */
const FREE_VERSIONS = ['dbcluster spec.postgres.version', 'memcachecluster spec.version', 'mk8s spec.version', 'spicedbcluster spec.version'];

/**
 * Fields the provider's client structs declare but never send in that place: one Go struct serves
 * both default and per-location options, and only per-location options carry a location.
 */
const NOT_SENT = ['workload spec.defaultOptions.location'];

const container = { name: 'web', image: 'nginx:latest', cpu: '50m', memory: '128Mi', ports: [{ protocol: 'http', number: 8080 }] };

/** A minimal valid document per kind; `path` is the field about to be set (some fields need a context). */
function baseDocument(kind: string, name: string, path: string, value: unknown): Record<string, unknown> {
  switch (kind) {
    case 'workload':
      if (path.startsWith('spec.job') || (path === 'spec.type' && value === 'cron')) return { name, spec: { type: 'cron', containers: [container], job: { schedule: '*/5 * * * *' } } };
      if (path.startsWith('spec.vm') || /volumes\[\]\.(bus|bootOrder|name)$/.test(path) || (path === 'spec.type' && value === 'vm')) {
        return { name, spec: { type: 'vm', containers: [container], vm: {} } };
      }
      if (path.startsWith('spec.rolloutOptions.scalingPolicy')) return { name, spec: { type: 'stateful', containers: [container] } };
      return { name, spec: { type: 'standard', containers: [container] } };
    case 'mk8s': {
      const provider = /^spec\.provider\.(\w+)/.exec(path)?.[1] ?? 'generic';
      return { name, spec: { version: '1.28.2', provider: { [provider]: provider === 'generic' ? { location: 'aws-us-west-2' } : {} } } };
    }
    case 'secret': {
      const type = secretTypeFor(path);
      return path.startsWith('data.') ? { name, type, data: { ...SECRET_DATA[type] } } : { name, type };
    }
    case 'cloudaccount': {
      const byField: Record<string, string> = { projectId: 'gcp', secretLink: 'azure' };
      return { name, provider: byField[/^data\.(\w+)/.exec(path)?.[1] ?? ''] ?? 'aws' };
    }
    case 'location':
      return { name, provider: 'byok' };
    case 'user':
      return { name, email: name };
    case 'policy':
      return { name, targetKind: path === 'targetQuery.kind' ? value : 'secret' };
    case 'quota':
      return { name, unit: 'count', max: 10, dimensions: {} };
    case 'dbcluster':
      return { name, spec: { postgres: { version: '13.4', storageGB: 20, defaults: { size: 'small-2c-8g', instances: 1 } } } };
    default:
      return { name };
  }
}

/** The fields each secret type requires, so that one more field can be set beside them. */
const SECRET_DATA: Record<string, Record<string, unknown>> = {
  opaque: {}, dictionary: {}, tls: { cert: 'c' }, aws: { accessKey: 'a', secretKey: 's' }, ecr: { accessKey: 'a', secretKey: 's' },
  userpass: { username: 'u', password: 'p' }, keypair: { secretKey: 's' }, 'azure-connector': { url: 'https://example.com', code: 'c' },
  'nats-account': { accountId: 'a', privateKey: 'p' },
};

function secretTypeFor(path: string): string {
  const field = /^data\.(\w+)/.exec(path)?.[1];
  const byField: Record<string, string> = {
    payload: 'opaque', encoding: 'opaque', key: 'tls', cert: 'tls', chain: 'tls', accessKey: 'aws', secretKey: 'aws', roleArn: 'aws',
    externalId: 'aws', repos: 'ecr', username: 'userpass', password: 'userpass', publicKey: 'keypair', passphrase: 'keypair',
    url: 'azure-connector', code: 'azure-connector', accountId: 'nats-account', privateKey: 'nats-account',
  };
  return field ? (byField[field] ?? 'dictionary') : 'opaque';
}

/** Values of an enum that a client may create with (clients create only byok locations; the others are built in). */
const CREATABLE: Record<string, Record<string, unknown[]>> = { location: { provider: ['byok'] } };

/** A valid string for a field, by its name (links point at the resources made in `before`). */
function sampleString(s: Sampler, path: string, keel?: JsonSchema): string {
  const name = segments(path).filter((seg) => seg !== '[]').pop()!;
  const format = typeof keel?.format === 'string' && keel.format !== 'keel-link' ? FORMATS[keel.format] : undefined;
  if (format) return format.examples[0];
  if (s.kind === 'user' && name === 'email') return s.name;
  if (/^agentLink$/.test(name)) return `/org/${ORG}/agent/vpc-agent`;
  if (/^retentionDuration$/.test(name)) return '7d';
  if (/^checksum$/.test(name)) return 'sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08';
  if (path === 'spec.vm.hostname') return 'guest';
  // A mount path is absolute (the hosted docs: "a unique absolute path").
  if (path === 'spec.containers[].volumes[].path') return '/mnt/data';
  if (/^(workloadLink|aliasWorkloadLink|inboundAllowWorkload|link)$/.test(name)) return WORKLOAD;
  if (/^identityLink$/.test(name)) return `/org/${ORG}/gvc/prod/identity/app-id`;
  if (/secret|Secret|credentials|pullSecretLinks|secrets/.test(name)) return SECRET;
  if (/^cloudAccountLink$/.test(name)) return `/org/${ORG}/cloudaccount/aws-main`;
  if (/^gvcLink$/.test(name)) return `/org/${ORG}/gvc/prod`;
  if (/^(locationLink|locationLinks|locations|homeLocation)$/.test(name) || path.endsWith('locations[].name')) return `/org/${ORG}/location/aws-us-west-2`;
  if (/^volumeSet$/.test(name)) return 'cpln://volumeset/data';
  if (/^clusterLink$/.test(name)) return `/org/${ORG}/memcachecluster/mc`;
  if (/^(principalLinks|memberLinks)$/.test(name)) return `/org/${ORG}/group/superusers`;
  if (/^targetLinks$/.test(name)) return SECRET;
  if (/^(cpu|minCpu)$/.test(name)) return '50m';
  if (/^(memory|minMemory)$/.test(name)) return '128Mi';
  if (/^image$/.test(name)) return 'nginx:latest';
  if (/^schedule$/.test(name)) return '*/5 * * * *';
  if (/CIDR|cidr|Cidr/.test(name)) return '10.0.0.0/8';
  if (/[Ee]mails?$|^email$|^targetEmail$|domainAutoMembers/.test(name)) return 'ops@example.com';
  if (/^(endpoint|url|uri|homepage|discoveryUrl|serverUrl)$/.test(name)) return name === 'uri' ? 's3://bucket' : 'https://example.com/x';
  if (/^(domain|hostname|outboundAllowHostname|host)$/.test(name)) return 'app.example.com';
  if (/^(maxUnavailableReplicas|maxSurgeReplicas)$/.test(name)) return '25%';
  if (/^(version)$/.test(name)) return '1.28.2';
  if (/^(timezone)$/.test(name)) return 'UTC';
  if (/^(maxAge|interval|timeout|delay|ttl)$/i.test(name)) return '10s';
  if (/^(name)$/.test(name)) return 'sample-name';
  if (/^(roleName)$/.test(name)) return 'app-role';
  return 'sample';
}

interface Sampler {
  kind: string;
  /** The name of the item being written. */
  name: string;
  fields: Record<string, FieldEntry>;
  root: JsonSchema;
}

/** A valid value for the catalogue field `path`, with its required fields. */
function sample(s: Sampler, path: string): unknown {
  const entry = s.fields[path];
  const keel = resolve(s.root, path)?.schema;
  const enumValues = entry?.enum ?? (keel?.enum as unknown[] | undefined);
  if (enumValues?.length) return enumValues[0];
  let type = entry?.type ?? 'any';
  if (type === 'any' && hasChildren(s, path)) type = 'object';
  if (type === 'any') {
    const keelType = Array.isArray(keel?.type) ? keel?.type[0] : keel?.type;
    type = keelType === 'integer' ? 'number' : ((keelType as FieldEntry['type']) ?? 'object');
  }
  switch (type) {
    case 'string':
      return sampleString(s, path, keel);
    case 'number': {
      const min = typeof keel?.minimum === 'number' ? keel.minimum : 1;
      const max = typeof keel?.maximum === 'number' ? keel.maximum : Number.MAX_SAFE_INTEGER;
      const wanted = /port/i.test(path) ? 8080 : 1;
      return Math.min(Math.max(wanted, min), max);
    }
    case 'boolean':
      return true;
    case 'array':
      return s.fields[`${path}[]`] ? [sample(s, `${path}[]`)] : [];
    case 'map':
      return {};
    default: {
      const value: Record<string, unknown> = {};
      fillRequired(s, path, value);
      return value;
    }
  }
}

function hasChildren(s: Sampler, path: string): boolean {
  return Object.keys(s.fields).some((p) => p.startsWith(`${path}.`));
}

/**
 * Sets the required fields of the object at `path` that `value` lacks: those the catalogue marks
 * required, and those Keel's schema requires (the provider's structs do not say which are).
 */
function fillRequired(s: Sampler, path: string, value: Record<string, unknown>): void {
  const prefix = path ? `${path}.` : '';
  const keelRequired = (path ? resolve(s.root, path)?.schema : s.root)?.required ?? [];
  for (const [p, e] of Object.entries(s.fields)) {
    if (!p.startsWith(prefix)) continue;
    const child = p.slice(prefix.length);
    if (child.includes('.') || child.includes('[')) continue;
    if ((e.required || keelRequired.includes(child)) && value[child] === undefined) value[child] = sample(s, p);
  }
}

/** Query terms need an operator, a value and exactly one of property, tag or rel. */
function completeTerms(value: unknown): void {
  if (Array.isArray(value)) return value.forEach(completeTerms);
  if (!value || typeof value !== 'object') return;
  for (const [key, child] of Object.entries(value)) {
    if (key === 'terms' && Array.isArray(child)) {
      for (const term of child as Array<Record<string, unknown>>) {
        term.op ??= '=';
        term.value ??= 'x';
        if (term.property === undefined && term.tag === undefined && term.rel === undefined) term.property = 'name';
      }
    } else completeTerms(child);
  }
}

/** A VM's volumes are named disks, never mounted at a path (the types, older than VMs, require one). */
function completeVmVolumes(doc: Record<string, unknown>): void {
  const spec = doc.spec as { type?: string; containers?: Array<{ volumes?: Array<Record<string, unknown>> }> } | undefined;
  if (spec?.type !== 'vm') return;
  for (const volume of (spec.containers ?? []).flatMap((c) => c.volumes ?? [])) {
    delete volume.path;
    volume.name ??= 'disk';
  }
}

/** `leaf` over what the base document already holds there (objects merge deeply, anything else replaces). */
function merged(existing: unknown, leaf: unknown): unknown {
  if (existing && leaf && typeof existing === 'object' && typeof leaf === 'object' && !Array.isArray(existing) && !Array.isArray(leaf)) {
    const out: Record<string, unknown> = { ...(existing as Record<string, unknown>) };
    for (const [key, value] of Object.entries(leaf)) out[key] = merged(out[key], value);
    return out;
  }
  return leaf;
}

/** `doc` with the field `path` set to `leaf`, creating (with their required fields) the objects on the way. */
function place(s: Sampler, doc: Record<string, unknown>, path: string, leaf: unknown): { doc: Record<string, unknown>; concrete: string } {
  const segs = segments(path);
  let cursor: any = doc;
  let soFar = '';
  let concrete = '';
  fillRequired(s, '', doc);
  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i];
    const last = i === segs.length - 1;
    if (seg === '[]') {
      soFar += '[]';
      concrete += '[0]';
      if (last) cursor[0] = merged(cursor[0], leaf);
      else {
        cursor[0] ??= {};
        fillRequired(s, soFar, cursor[0]);
        cursor = cursor[0];
      }
      continue;
    }
    soFar = soFar ? `${soFar}.${seg}` : seg;
    concrete = concrete ? `${concrete}.${seg}` : seg;
    if (last) {
      cursor[seg] = merged(cursor[seg], leaf);
    } else {
      const arrayNext = segs[i + 1] === '[]';
      if (typeof cursor[seg] !== 'object' || cursor[seg] === null) cursor[seg] = arrayNext ? [] : {};
      if (!arrayNext) fillRequired(s, soFar, cursor[seg]);
      cursor = cursor[seg];
    }
  }
  return { doc, concrete };
}

function valueAt(doc: unknown, concrete: string): unknown {
  let cursor: any = doc;
  for (const part of concrete.split(/\.|(?=\[)/)) {
    if (cursor === undefined || cursor === null) return undefined;
    const index = /^\[(\d+)\]$/.exec(part);
    cursor = index ? cursor[Number(index[1])] : cursor[part];
  }
  return cursor;
}

function collectionOf(kind: string): string {
  return findKind(kind)!.scope === 'gvc' ? `/org/${ORG}/gvc/prod/${kind}` : `/org/${ORG}/${kind}`;
}

let counter = 0;
function freshName(kind: string): string {
  counter += 1;
  if (kind === 'user') return `u${counter}@example.com`;
  if (kind === 'domain') return `f${counter}.example.com`;
  return `f${counter}`;
}

const KINDS = Object.keys(CATALOGUE.kinds).sort();

describe('the catalogue of the public types', () => {
  it('names its sources and the kinds Keel serves', () => {
    assert.deepEqual(Object.keys(CATALOGUE.sources).sort(), ['terraform-provider-cpln', 'types-ts']);
    for (const kind of KINDS) assert.ok(findKind(kind), `catalogue kind ${kind} is served by Keel`);
    assert.ok(Object.keys(CATALOGUE.kinds.workload).length > 100, 'the workload type is catalogued field by field');
  });

  for (const kind of KINDS) {
    it(`${kind}: Keel's schema knows every field of the catalogue`, () => {
      const root = resourceSchema(findKind(kind)!);
      const unknown = Object.keys(CATALOGUE.kinds[kind]).filter((p) => !resolve(root, p) && !NOT_SENT.includes(`${kind} ${p}`));
      assert.deepEqual(unknown, [], `${kind} fields the public types name and Keel refuses`);
    });
  }

  it('the subtrees Keel stores as sent are exactly the declared ones', () => {
    const undeclared: string[] = [];
    for (const kind of KINDS) {
      const root = resourceSchema(findKind(kind)!);
      const fields = CATALOGUE.kinds[kind];
      const open = Object.keys(fields).filter((p) => {
        const r = resolve(root, p);
        return fields[p].type === 'object' && r && !r.open && !r.readOnly && r.schema?.type === 'object' && r.schema.additionalProperties !== false && !r.schema.properties;
      });
      const declared = OPEN_BY_DESIGN[kind] ?? [];
      for (const p of open) if (!declared.some((d) => p === d || p.startsWith(`${d}.`) || p.startsWith(`${d}[`))) undeclared.push(`${kind} ${p}`);
    }
    assert.deepEqual(undeclared, [], 'objects stored without checking their fields');
  });

  it('where the public types list the allowed values, Keel lists them too (and refuses others)', () => {
    const loose: string[] = [];
    for (const kind of KINDS) {
      const root = resourceSchema(findKind(kind)!);
      for (const [path, entry] of Object.entries(CATALOGUE.kinds[kind])) {
        const r = resolve(root, path);
        if (!entry.enum || !r || r.open || r.readOnly || FREE_VERSIONS.includes(`${kind} ${path}`)) continue;
        if (!r.schema?.enum && r.schema?.const === undefined) loose.push(`${kind} ${path}`);
      }
    }
    assert.deepEqual(loose, []);
  });
});

forEachBackend('public types through the HTTP API', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend, ORG);
    const setup: Array<[string, unknown]> = [
      [`/org/${ORG}/gvc`, { name: 'prod', spec: { staticPlacement: { locationLinks: [`/org/${ORG}/location/aws-us-west-2`] } } }],
      [`/org/${ORG}/secret`, { name: 'creds', type: 'opaque', data: { payload: 'x', encoding: 'plain' } }],
      [`/org/${ORG}/cloudaccount`, { name: 'aws-main', provider: 'aws', data: { roleArn: 'arn:aws:iam::123456789012:role/x' } }],
      [`/org/${ORG}/gvc/prod/workload`, { name: 'api', spec: { type: 'standard', containers: [container] } }],
      [`/org/${ORG}/gvc/prod/identity`, { name: 'app-id' }],
      [`/org/${ORG}/agent`, { name: 'vpc-agent' }],
      [`/org/${ORG}/gvc/prod/volumeset`, { name: 'data', spec: { initialCapacity: 10, fileSystemType: 'ext4', performanceClass: 'general-purpose-ssd' } }],
      [`/org/${ORG}/memcachecluster`, { name: 'mc', spec: { nodeCount: 1, nodeSizeGiB: 1, locations: [`/org/${ORG}/location/aws-us-west-2`] } }],
    ];
    for (const [url, body] of setup) {
      const res = await k.call('POST', url, body);
      assert.equal(res.status, 201, `${url}: ${JSON.stringify(res.body)}`);
    }
  });
  after(() => k.close());

  for (const kind of KINDS.filter((k) => !SERVER_WRITTEN.has(k))) {
    test(`${kind}: every catalogued field is accepted and comes back`, async () => {
      const root = resourceSchema(findKind(kind)!);
      const fields = CATALOGUE.kinds[kind];
      const failures: string[] = [];
      let writes = 0;
      for (const path of Object.keys(fields)) {
        if (path === 'name' || NOT_SENT.includes(`${kind} ${path}`)) continue;
        const target = resolve(root, path);
        const s: Sampler = { kind, name: freshName(kind), fields, root };
        // Every value of an enum, one write each; one sample value otherwise.
        const values: unknown[] = CREATABLE[kind]?.[path] ?? fields[path].enum ?? [undefined];
        for (const enumValue of values) {
          s.name = freshName(kind);
          const value = enumValue ?? sample(s, path);
          const { res, concrete, sent, url } = await write(k, s, path, value);
          writes += 1;
          if (res.status !== 200 && res.status !== 201) {
            failures.push(`${path}: ${res.status} ${res.body?.message} (sent ${JSON.stringify(sent)})`);
            continue;
          }
          if (target?.readOnly) continue;
          // The write answers the stored item; only a secret's data needs a read of its own (-reveal).
          const stored = kind === 'secret' ? (await k.call('GET', `${url}/-reveal`)).body : res.body;
          const back = valueAt(stored, concrete);
          if (!contains(back, value)) failures.push(`${path}: sent ${JSON.stringify(value)}, read back ${JSON.stringify(back)}`);
        }
      }
      assert.deepEqual(failures, []);
      assert.ok(writes >= Object.keys(fields).length - 1);
    });

    test(`${kind}: a field neither source names is refused with 400 naming it`, async () => {
      const root = resourceSchema(findKind(kind)!);
      const s: Sampler = { kind, name: '', fields: CATALOGUE.kinds[kind], root };
      const objects = ['', ...Object.keys(s.fields).filter((p) => {
        const r = resolve(root, p);
        return s.fields[p].type === 'object' && r && !r.open && !r.readOnly && r.schema?.additionalProperties === false;
      })];
      const failures: string[] = [];
      for (const path of objects) {
        s.name = freshName(kind);
        const value = path ? (sample(s, path) as Record<string, unknown>) : {};
        const stray = 'keelUnknownField';
        const { res, concrete } = await write(k, s, path ? `${path}.${stray}` : stray, 'x', value);
        const where = concrete;
        if (res.status !== 400) {
          failures.push(`${where}: answered ${res.status}`);
          continue;
        }
        assertError(res, 400, 'bad_request');
        const named = (res.body.details.errors ?? []).some((e: { path: string; message: string }) => e.path === where && /not a known field/.test(e.message));
        if (!named) failures.push(`${where}: ${JSON.stringify(res.body.details.errors)}`);
      }
      assert.deepEqual(failures, []);
    });
  }
});

/**
 * Writes a document with the field `path` set to `value`: a new item where clients create the
 * kind, a patch of the org itself for `org`. `around` seeds the parent object of a stray field.
 */
async function write(k: TestKeel, s: Sampler, path: string, value: unknown, around?: Record<string, unknown>) {
  const kind = s.kind;
  const name = kind === 'org' ? ORG : s.name;
  const base = kind === 'org' ? { name } : structuredClone(baseDocument(kind, name, path, value));
  let built: { doc: Record<string, unknown>; concrete: string };
  if (around) {
    const parent = path.includes('.') ? path.slice(0, path.lastIndexOf('.')) : '';
    const leaf = path.slice(path.lastIndexOf('.') + 1);
    built = parent ? place(s, base, parent, { ...around, [leaf]: value }) : { doc: { ...base, [leaf]: value }, concrete: '' };
    built.concrete = built.concrete ? `${built.concrete}.${leaf}` : leaf;
  } else {
    built = place(s, base, path, value);
  }
  completeTerms(built.doc);
  if (kind === 'workload') completeVmVolumes(built.doc);
  if (kind === 'org') {
    const res = await k.call('PATCH', `/org/${ORG}`, built.doc);
    return { res, concrete: built.concrete, sent: built.doc, url: `/org/${ORG}` };
  }
  const res = await k.call('POST', collectionOf(kind), built.doc);
  return { res, concrete: built.concrete, sent: built.doc, url: `${collectionOf(kind)}/${encodeURIComponent(name)}` };
}
