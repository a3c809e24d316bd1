// The bodies the cpln CLI really sends (cpln-cli.md §6-7) and api-semantics.md §6.3.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { applyPatch } from '../../src/patch/index.js';
import { assertBadRequest, assertValid, storedWorkload, workloadSchema, type Doc } from './fixtures.js';


function patched(patch: Record<string, unknown>, stored: Doc = storedWorkload()): Doc {
  const result = applyPatch(stored, patch, workloadSchema);
  assertValid(workloadSchema, result);
  return result;
}

describe('cli bodies', () => {
  test('api-semantics §6.3 worked example', () => {
    const stored = {
      name: 'api',
      description: 'the api',
      tags: { a: '1', b: '2' },
      spec: {
        containers: [{ name: 'main', image: 'nginx:1', env: [{ name: 'X', value: '1' }, { name: 'Y', value: '2' }] }],
        firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } },
      },
    };
    const patch = {
      version: 7,
      tags: { b: null, c: '3' },
      $drop: ['description'],
      spec: {
        '$patch/containers': [{ name: 'main', image: 'nginx:2', '$drop/env': ['Y'], '$patch/env': [{ name: 'Z', value: '9' }] }],
        firewallConfig: { external: { '$append/inboundAllowCIDR': ['10.0.0.0/8'] } },
      },
    };
    assert.deepEqual(applyPatch(stored, patch, workloadSchema), {
      name: 'api',
      tags: { a: '1', c: '3' },
      spec: {
        containers: [{ name: 'main', image: 'nginx:2', env: [{ name: 'X', value: '1' }, { name: 'Z', value: '9' }] }],
        firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0', '10.0.0.0/8'] } },
      },
    });
  });

  test('workload update --set: $patch/containers with nested $patch/env, string numbers kept for ajv to coerce', () => {
    const w = patched({
      version: 3,
      id: 'whatever',
      spec: {
        '$patch/containers': [{ name: 'main', image: 'nginx:2', '$patch/env': [{ name: 'X', value: 'bar' }] }],
        defaultOptions: { autoscaling: { maxScale: '3' } },
      },
    });
    assert.deepEqual(w.spec.containers[0], { name: 'main', image: 'nginx:2', env: [{ name: 'X', value: 'bar' }, { name: 'Y', value: '2' }] });
    assert.deepEqual(w.spec.containers[1], storedWorkload().spec.containers[1]);
    assert.deepEqual(w.spec.defaultOptions, { autoscaling: { minScale: 1, maxScale: '3' }, suspend: false });
    assert.equal(w.id, storedWorkload().id);
    assert.equal(w.version, 3);
  });

  test('workload update --unset: $patch/containers with $drop/env', () => {
    const w = patched({ version: 3, id: 'x', spec: { '$patch/containers': [{ name: 'main', '$drop/env': ['X'] }] } });
    assert.deepEqual(w.spec.containers[0].env, [{ name: 'Y', value: '2' }]);
  });

  test('$patch/containers with a new name appends the container', () => {
    const w = patched({ spec: { '$patch/containers': [{ name: 'third', image: 'busybox', '$append/env': [{ name: 'A', value: 'b' }] }] } });
    assert.deepEqual(w.spec.containers.at(-1), { name: 'third', image: 'busybox', env: [{ name: 'A', value: 'b' }] });
  });

  test('gvc tag: tags {a: b, c: null}', () => {
    assert.deepEqual(patched({ tags: { c: 'd', a: null } }).tags, { b: '2', c: 'd' });
  });

  test('force-redeployment: a tag with a slash in its key', () => {
    assert.equal(patched({ tags: { 'cpln/deployTimestamp': '2025-01-01T00:00:00Z' } }).tags['cpln/deployTimestamp'], '2025-01-01T00:00:00Z');
  });

  test('stop/start: spec.defaultOptions.suspend', () => {
    assert.equal(patched({ spec: { defaultOptions: { suspend: true } } }).spec.defaultOptions.suspend, true);
  });

  test('group add-member / remove-member: $append/memberLinks and $drop/memberLinks', () => {
    const added = patched({ '$append/memberLinks': ['/org/acme/user/b@x.io', '/org/acme/serviceaccount/sa'] });
    assert.deepEqual(added.memberLinks, ['/org/acme/user/a@x.io', '/org/acme/user/b@x.io', '/org/acme/serviceaccount/sa']);
    const removed = patched({ '$drop/memberLinks': ['/org/acme/user/a@x.io'] }, added);
    assert.deepEqual(removed.memberLinks, ['/org/acme/user/b@x.io', '/org/acme/serviceaccount/sa']);
  });

  test('serviceaccount remove-key: $drop/keys by key name', () => {
    assert.deepEqual(patched({ '$drop/keys': ['sk1'] }).keys, [storedWorkload().keys[1]]);
  });

  test('policy add-binding style: a plain array replaces', () => {
    assert.deepEqual(patched({ memberLinks: ['/org/acme/group/g'] }).memberLinks, ['/org/acme/group/g']);
  });

  test('cpln edit: the whole GET body patched back, read-only fields included', () => {
    const body = storedWorkload();
    body.description = 'edited';
    body.version = 99;
    body.status = { ready: false };
    body.links = [];
    body.keys[0].created = 'forged';
    const w = patched(body);
    assert.deepEqual(w, { ...storedWorkload(), description: 'edited' });
  });

  test('$append/keys with a name already present -> 400; read-only fields in appended items are dropped', () => {
    assertBadRequest(() => patched({ '$append/keys': [{ name: 'sk2' }] }), '$append/keys[0]', /already exists/);
    assert.deepEqual(patched({ '$append/keys': [{ name: 'sk3', created: 'forged' }] }).keys.at(-1), { name: 'sk3' });
  });

  test('the immutable workload type: same value fine, new value 400', () => {
    assert.equal(patched({ spec: { type: 'standard' } }).spec.type, 'standard');
    assertBadRequest(() => patched({ spec: { type: 'cron' } }), 'spec.type', /immutable/);
  });
});
