// CPLN_TOKEN under the runc runtime, as a workload uses it: from inside its replica, against
// CPLN_ENDPOINT, the token acts as the workload's identity (a policy granting the identity decides,
// the audit names the identity), and dies with the replica. What should not work does not: the
// token after its replica stopped, a forged token of the same shape, a token of one org on
// another's path, a token for a workload without an identity, the token anywhere the API shows.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { KEEL_ACTOR } from '../../src/audit/events.js';
import { mintReplicaToken } from '../../src/auth/replica-tokens.js';
import { accountLinkOf, createOrg } from '../../src/resources/orgs.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

describe('CPLN_TOKEN: a replica acts as its workload identity, until it stops (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let files = 0;
  const apply = async (resource: Record<string, unknown>, ...extra: string[]) => {
    const file = join(work, `resource-${++files}.json`);
    writeFileSync(file, JSON.stringify(resource));
    const r = await rt.cpln.run(['apply', '--file', file, ...extra], { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    return r;
  };
  const deployment = async (workload: string) => (await rt.keel.call('GET', `/org/acme/gvc/web/workload/${workload}/deployment/${LOCATION}`)).body;
  const exec = (workload: string, replica: string, ...command: string[]) => rt.cpln.run(['workload', 'exec', workload, '--location', LOCATION, '--replica', replica, '--', ...command], { timeoutMs: 60_000 });
  const workload = (name: string, spec: Record<string, unknown> = {}) => ({
    kind: 'workload',
    name,
    spec: { type: 'standard', containers: [{ name: 'main', image, cpu: '50m', memory: '64Mi' }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } }, ...spec },
  });
  const ready = async (name: string) => (await waitFor(`${name} to be ready`, () => deployment(name), (d) => d.status?.ready === true, 60_000)).status.internal.replicas[0] as string;
  const printenv = async (name: string, replica: string, variable: string) => {
    const r = await exec(name, replica, 'sh', '-c', `[ -n "\${${variable}+set}" ] && printf %s "$${variable}"`);
    return r.code === 0 ? r.stdout : undefined;
  };
  /** The status line of a GET of `path` made from inside the replica with its own CPLN_TOKEN. */
  const fromReplica = async (name: string, replica: string, path: string) => {
    const r = await exec(name, replica, 'sh', '-c', `busybox timeout 3 busybox wget -S -q -O /dev/null --header "Authorization: Bearer $CPLN_TOKEN" "$CPLN_ENDPOINT${path}" 2>&1; true`);
    return /HTTP\/1\.1 (\d{3})/.exec(r.stdout)?.[1] ?? r.stdout;
  };
  /** The status of a call with `token`, made from the host (as a stolen token would be). */
  const withToken = async (token: string, method: string, path: string, body?: unknown) => {
    const res = await fetch(`http://127.0.0.1:${rt.port}${path}`, { method, headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined });
    return res.status;
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-token-'));
    image = busyboxImage(work, 'idle', ['/bin/sh', '-c', 'exec sleep 1000000']);
    rt = await startRuntimeKeel();
    await createOrg(rt.keel.store, { name: 'other', actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf('other'), adminServiceAccount: 'admin' });
    await apply({ kind: 'identity', name: 'app' });
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('from inside the replica: 403 without a policy, 200 with one granting the identity view; its writes are audited as the identity', async () => {
    await apply(workload('caller', { identityLink: '//gvc/web/identity/app' }));
    const replica = await ready('caller');
    const token = await printenv('caller', replica, 'CPLN_TOKEN');
    assert.match(token ?? '', /^keelwl_[A-Za-z0-9_-]{43}$/);
    assert.equal(await fromReplica('caller', replica, '/org/acme/gvc/web'), '403', 'a member of its org, granted nothing yet');

    await apply({ kind: 'policy', name: 'app-views-web', targetKind: 'gvc', targetLinks: ['//gvc/web'], bindings: [{ permissions: ['view'], principalLinks: ['//gvc/web/identity/app'] }] });
    await waitFor('the grant to apply', () => fromReplica('caller', replica, '/org/acme/gvc/web'), (s) => s === '200', 10_000);
    assert.equal(await fromReplica('caller', replica, '/org/acme/gvc/web/workload/caller'), '403', 'view on the GVC is not view on its workloads');
    // The CLI takes the token as any other (CPLN_TOKEN over its profile's key), as a workload's own cpln would.
    const viewed = await rt.cpln.run(['gvc', 'get', 'web', '-o', 'json'], { timeoutMs: 60_000, env: { CPLN_TOKEN: token! } });
    assert.equal(viewed.code, 0, viewed.stderr);
    assert.equal(JSON.parse(viewed.stdout).name, 'web');
    const refused = await rt.cpln.run(['workload', 'get', 'caller', '-o', 'json'], { timeoutMs: 60_000, env: { CPLN_TOKEN: token! } });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr + refused.stdout, /403|forbidden|not granted/i);

    // A write made with the token names the identity in the audit trail.
    await apply({ kind: 'policy', name: 'app-writes-secrets', targetKind: 'secret', target: 'all', bindings: [{ permissions: ['create', 'view'], principalLinks: ['//gvc/web/identity/app'] }] });
    await waitFor('the identity to create a secret', () => withToken(token!, 'POST', '/org/acme/secret', { name: 'made-by-app', type: 'opaque', data: { payload: 'x' } }), (s) => s === 201, 10_000);
    const created = (await rt.keel.call('GET', '/org/acme/secret/made-by-app')).body;
    assert.equal(created.name, 'made-by-app');
    const audit = await waitFor(
      'the audit event of the write',
      async () => JSON.parse((await rt.keel.app.audit.inject({ method: 'GET', url: '/audit/org/acme?resourceType=secret&resourceName=made-by-app', headers: { authorization: `Bearer ${rt.keel.token}` } })).body),
      (b) => Array.isArray(b?.items) && b.items.length > 0,
      10_000,
    );
    const event = audit.items[0];
    assert.equal(event.subject.name, 'app');
    assert.equal(event.subject.data.principalLink, '/org/acme/gvc/web/identity/app');
    assert.equal(event.subject.data.type, 'identity');

    // The token is nowhere the API or the logs show.
    for (const path of ['/org/acme/gvc/web/workload/caller', `/org/acme/gvc/web/workload/caller/deployment/${LOCATION}`]) {
      assert.ok(!JSON.stringify((await rt.keel.call('GET', path)).body).includes(token!), path);
    }
    const logs = await rt.cpln.run(['logs', '{gvc="web",workload="caller"}', '--limit', '200'], { timeoutMs: 60_000 });
    assert.ok(!logs.stdout.includes(token!));
    await rt.run(['workload', 'delete', 'caller']);
  });

  test('the token dies with its replica: 401 within 2 s of replica stop, and of the workload delete; a new replica gets a new one', async (t) => {
    await apply(workload('mortal', { identityLink: '//gvc/web/identity/app' }));
    const first = await ready('mortal');
    const token = (await printenv('mortal', first, 'CPLN_TOKEN'))!;
    assert.equal(await withToken(token, 'GET', '/org/acme/gvc/web'), 200);
    await rt.run(['workload', 'replica', 'stop', 'mortal', '--location', LOCATION, '--replica-name', first]);
    const stopped = Date.now();
    await waitFor('the stopped replica\'s token to be refused', () => withToken(token, 'GET', '/org/acme/gvc/web'), (s) => s === 401, 5_000);
    const ms = Date.now() - stopped;
    t.diagnostic(`refused ${ms} ms after the CLI's stop returned`);
    assert.ok(ms < 2_000, `refused ${ms} ms after the CLI's stop returned`);

    const again = await ready('mortal');
    const renewed = (await waitFor('the new replica to run', () => printenv('mortal', again, 'CPLN_TOKEN'), (t) => Boolean(t) && t !== token, 60_000))!;
    assert.equal(await withToken(renewed, 'GET', '/org/acme/gvc/web'), 200);
    assert.equal(await withToken(token, 'GET', '/org/acme/gvc/web'), 401, 'the old token stays dead');
    await rt.run(['workload', 'delete', 'mortal']);
    const deleted = Date.now();
    await waitFor('the deleted workload\'s token to be refused', () => withToken(renewed, 'GET', '/org/acme/gvc/web'), (s) => s === 401, 10_000);
    t.diagnostic(`refused ${Date.now() - deleted} ms after the CLI's delete returned`);
  });

  test('misuse: a forged token of the right shape, a token on another org, a workload without an identity', async () => {
    assert.equal(await withToken(mintReplicaToken().token, 'GET', '/org/acme/gvc/web'), 401, 'a token no replica holds');
    await apply(workload('nosy', { identityLink: '//gvc/web/identity/app' }));
    const replica = await ready('nosy');
    const token = (await printenv('nosy', replica, 'CPLN_TOKEN'))!;
    assert.equal(await withToken(token, 'GET', '/org/acme/gvc/web'), 200);
    assert.equal(await withToken(token, 'GET', '/org/other'), 403, "another org's path");
    assert.equal(await withToken(token, 'GET', '/org/other/secret'), 403);
    assert.equal(await withToken(token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A'), 'GET', '/org/acme/gvc/web'), 401, 'one character changed');

    // A workload without an identity gets no token (it would act as no one).
    await apply(workload('anonymous'));
    const plain = await ready('anonymous');
    assert.equal(await printenv('anonymous', plain, 'CPLN_TOKEN'), undefined);
    assert.match((await printenv('anonymous', plain, 'CPLN_ENDPOINT')) ?? '', /^http:/);
    await rt.run(['workload', 'delete', 'anonymous']);
    await rt.run(['workload', 'delete', 'nosy']);
    await waitFor('the token to be refused', () => withToken(token, 'GET', '/org/acme/gvc/web'), (s) => s === 401, 10_000);
  });
});
