// Issue 9: the detailed schemas of the kinds whose status Keel's reconcilers fill, and of the
// secret types, each with a valid and an invalid example (the registry-wide examples are in
// schemas.test.ts; these add the status shapes and the per-type rules).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError } from '../../src/errors.js';
import { findKind } from '../../src/kinds/index.js';
import { SECRET_TYPES } from '../../src/kinds/secret.js';
import type { HookContext } from '../../src/kinds/types.js';
import { validateResource } from '../../src/resources/validate.js';

function valid(kind: string, body: Record<string, unknown>): void {
  assert.doesNotThrow(() => validateResource(findKind(kind)!, structuredClone(body)), `${kind} should accept ${JSON.stringify(body)}`);
}
function invalid(kind: string, body: Record<string, unknown>): void {
  assert.throws(() => validateResource(findKind(kind)!, structuredClone(body)), ApiError, `${kind} should reject ${JSON.stringify(body)}`);
}

const volume = {
  index: 0,
  lifecycle: 'bound',
  storageDeviceId: 'vol-1',
  oldStorageDeviceIds: [],
  resourceName: 'data-aws-us-west-2-0',
  currentSize: 15,
  currentBytesUsed: 9663676416,
  currentBytesFree: 6442450944,
  iops: 3000,
  throughput: 125,
  driver: 'ebs.csi.aws.com',
  volumeSnapshots: [{ name: 's1', id: 'snap-1', created: '2025-01-01T00:00:00.000Z', expires: '2025-01-08T00:00:00.000Z', size: 15, tags: [{ a: 'b' }] }],
  attributes: { 'keel/since': '2025-01-01T00:00:00.000Z' },
  zone: 'us-west-2a',
};

const EXAMPLES: Record<string, { valid: Record<string, unknown>; invalid: Record<string, unknown> }> = {
  'volumeset status (as the reconciler writes it)': {
    valid: {
      name: 'data',
      spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd', autoscaling: { maxCapacity: 100, minFreePercentage: 20, scalingFactor: 1.5 } },
      status: {
        parentId: 'g',
        usedByWorkload: '/org/acme/gvc/prod/workload/db',
        workloadLinks: ['/org/acme/gvc/prod/workload/db'],
        locations: [{ name: 'aws-us-west-2', desiredVolumeCount: 1, clusterId: 'cpln-aws-us-west-2-x', volumes: [volume] }],
      },
    },
    invalid: { name: 'data', spec: { initialCapacity: 10 }, status: { locations: [{ name: 'aws-us-west-2', volumes: [{ ...volume, currentSize: 'big' }] }] } },
  },
  'mk8s status': {
    valid: {
      name: 'k1',
      spec: { version: '1.28.4', provider: { aws: { region: 'us-west-2' } } },
      status: { oidcProviderUrl: 'https://o', serverUrl: 'https://s:6443', homeLocation: 'aws-us-west-2', addOns: { dashboard: { url: 'https://d' } } },
    },
    invalid: { name: 'k1', spec: { version: '1.28.4', provider: { aws: {} } }, status: { ready: 'yes' } },
  },
  'domain name and status': {
    valid: {
      name: 'app.example.com',
      spec: { dnsMode: 'cname', gvcLink: '/org/acme/gvc/prod' },
      status: {
        status: 'ready',
        endpoints: [{ url: 'https://app.example.com', workloadLink: '/org/acme/gvc/prod/workload/web' }],
        locations: [{ name: 'aws-us-west-2', certificateStatus: 'ready' }],
        fingerprint: 'f',
        dnsConfig: [{ type: 'CNAME', ttl: 300, host: 'app.example.com', value: 'x.cpln.app' }],
      },
    },
    invalid: { name: 'App_Example.com', spec: { dnsMode: 'cname' } },
  },
  'domain status values': {
    valid: { name: 'example.com', status: { status: 'pendingDnsConfig' } },
    invalid: { name: 'example.com', status: { status: 'almost' } },
  },
  'deployment status': {
    valid: {
      name: 'aws-us-west-2',
      status: { ready: true, deploying: false, lastProcessedVersion: 2, versions: [{ name: '2', workload: 2, gvc: 1, ready: true, containers: { web: { ready: true } } }] },
    },
    invalid: { name: 'aws-us-west-2', status: { versions: [{ workload: 'two' }] } },
  },
  'command lifecycle stage': {
    valid: { name: 'c1', type: 'expandVolume', lifecycleStage: 'running', spec: { location: 'aws-us-west-2', volumeIndex: 0, newStorageCapacity: 50 }, status: {} },
    invalid: { name: 'c1', type: 'expandVolume', lifecycleStage: 'halfway' },
  },
  'agent status': {
    valid: { name: 'edge', status: { bootstrapConfig: { agentId: 'a', agentLink: '/org/acme/agent/edge', protocolVersion: 'v1', hubEndpoint: 'https://h' } } },
    invalid: { name: 'edge', status: { bootstrap: {} } },
  },
  'cloudaccount per provider': {
    valid: { name: 'gcp-main', provider: 'gcp', data: { projectId: 'my-project' } },
    invalid: { name: 'gcp-main', provider: 'gcp', data: { projectId: 7, region: 'x' } },
  },
  'ipset locations': {
    valid: { name: 'ips', spec: { link: '//gvc/prod/workload/web', locations: [{ name: '//location/aws-us-west-2', retentionPolicy: 'keep' }] } },
    invalid: { name: 'ips', spec: { locations: [{ name: '//location/aws-us-west-2', retentionPolicy: 'forever' }] } },
  },
  'quota max': { valid: { name: 'q1', unit: 'count', max: 10, dimensions: {} }, invalid: { name: 'q1', max: -1 } },
  'task status': { valid: { name: 't1', type: 'invite', targetEmail: 'a@b.c' }, invalid: { name: 't1', status: 'done-ish' } },
  'dbcluster postgres': {
    valid: { name: 'pg', spec: { postgres: { storageGB: 20, locations: [{ name: 'aws-us-west-2', writable: true, instances: 1 }] } } },
    invalid: { name: 'pg', spec: { postgres: { version: '16' } } },
  },
};

describe('the schemas of the remaining kinds: a valid and an invalid example each', () => {
  for (const [title, example] of Object.entries(EXAMPLES)) {
    const kind = title.split(' ')[0];
    it(title, () => {
      valid(kind, example.valid);
      invalid(kind, example.invalid);
    });
  }
});

const noCtx = {} as HookContext;
const SECRETS: Record<string, { valid: unknown; invalid: unknown }> = {
  opaque: { valid: { payload: 'x', encoding: 'base64' }, invalid: { payload: 'x', encoding: 'hex' } },
  tls: { valid: { cert: 'C', key: 'K', chain: 'CH' }, invalid: { key: 'K' } },
  gcp: { valid: '{"type":"service_account"}', invalid: 42 },
  aws: { valid: { accessKey: 'A', secretKey: 'S', roleArn: 'arn:aws:iam::1:role/r' }, invalid: { accessKey: 'A' } },
  docker: { valid: '{"auths":{}}', invalid: ['x'] },
  userpass: { valid: { username: 'u', password: 'p' }, invalid: { username: 'u' } },
  keypair: { valid: { secretKey: 'S', publicKey: 'P' }, invalid: { publicKey: 'P' } },
  'azure-sdk': { valid: '{"subscriptionId":"s"}', invalid: true },
  'azure-connector': { valid: { url: 'https://f', code: 'c' }, invalid: { url: 'https://f' } },
  ecr: { valid: { accessKey: 'A', secretKey: 'S', repos: ['r'] }, invalid: { accessKey: 'A', secretKey: 'S', repos: 'r' } },
  dictionary: { valid: { A: '1', B: '2' }, invalid: { A: 1 } },
  'nats-account': { valid: { accountId: 'A', privateKey: 'P' }, invalid: { accountId: 'A', extra: 'x' } },
};

describe('secrets: every type with a valid and an invalid data example', () => {
  it('covers every secret type', () => assert.deepEqual(Object.keys(SECRETS).sort(), [...SECRET_TYPES].sort()));
  const def = findKind('secret')!;
  for (const type of SECRET_TYPES) {
    it(type, async () => {
      const item = (data: unknown) => ({ name: 's1', type, data, tags: {} });
      valid('secret', item(SECRETS[type].valid));
      await def.check!(item(SECRETS[type].valid), noCtx);
      // The wrong shape is refused by the schema or by the type's own rules.
      let refused = false;
      try {
        validateResource(def, item(SECRETS[type].invalid));
        await def.check!(item(SECRETS[type].invalid), noCtx);
      } catch (err) {
        refused = err instanceof ApiError && err.code === 'bad_request';
      }
      assert.ok(refused, `${type} should refuse ${JSON.stringify(SECRETS[type].invalid)}`);
    });
  }
});
