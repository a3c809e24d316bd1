// Authentication (service-account keys, JWTs of trusted issuers) and the access-control kinds:
// users, groups (memberLinks, memberQuery, identityMatcher), policies, permission schemas, access reports.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SignJWT, exportJWK, exportSPKI, generateKeyPair, type CryptoKey } from 'jose';
import { parseIssuers } from '../../src/auth/issuers.js';
import { configFromEnv } from '../../src/config.js';
import { KINDS } from '../../src/kinds/index.js';
import { buildApp, type App } from '../../src/server/app.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { assertError } from '../support/errors.js';

const ISSUER = 'https://idp.test';
const AUDIENCE = 'keel';

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const now = () => Math.floor(Date.now() / 1000);

interface Signer {
  key: CryptoKey;
  kid: string;
}

/** A JWT; `claims` override the defaults (a valid token of the trusted issuer for `email`). */
async function jwt(signer: Signer, email: string, claims: Record<string, unknown> = {}, header: Record<string, unknown> = {}): Promise<string> {
  const payload = { iss: ISSUER, aud: AUDIENCE, email, iat: now(), exp: now() + 600, ...claims };
  for (const [k, v] of Object.entries(payload)) if (v === undefined) delete (payload as Record<string, unknown>)[k];
  return new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid: signer.kid, ...header }).sign(signer.key);
}

forEachBackend('authentication and authorization', (backend) => {
  let k: TestKeel;
  let app: App; // the same store, with the test issuer trusted
  let dir: string;
  let signer: Signer;
  let impostor: Signer; // the trusted kid, the wrong key
  let stranger: Signer; // a kid the JWKS does not hold

  const as = async (token: string | null, method: string, url: string, body?: unknown) => {
    const headers: Record<string, string> = token === null ? {} : { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await app.core.inject({ method: method as 'GET', url, headers, payload: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.statusCode, headers: res.headers, body: res.body ? JSON.parse(res.body) : undefined };
  };
  const admin = (method: string, url: string, body?: unknown) => as(k.token, method, url, body);
  const ok = async (res: Promise<{ status: number; body: any }>, status = 200) => {
    const r = await res;
    assert.equal(r.status, status, JSON.stringify(r.body));
    return r.body;
  };
  const newKey = async (sa: string) => {
    if ((await admin('GET', `/org/acme/serviceaccount/${sa}`)).status === 404) await ok(admin('POST', '/org/acme/serviceaccount', { name: sa }), 201);
    return (await ok(admin('POST', `/org/acme/serviceaccount/${sa}/-addKey`, { description: 'test' }))).key as string;
  };

  before(async () => {
    k = await startKeel(backend);
    dir = mkdtempSync(join(tmpdir(), 'keel-jwks-'));
    const pair = await generateKeyPair('RS256');
    const other = await generateKeyPair('RS256');
    signer = { key: pair.privateKey, kid: 'k1' };
    impostor = { key: other.privateKey, kid: 'k1' };
    stranger = { key: other.privateKey, kid: 'k2' };
    const jwks = { keys: [{ ...(await exportJWK(pair.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }] };
    writeFileSync(join(dir, 'jwks.json'), JSON.stringify(jwks));
    const issuers = parseIssuers(JSON.stringify([{ issuer: ISSUER, audience: AUDIENCE, jwksFile: join(dir, 'jwks.json') }]));
    // The founder test creates an org as a JWT user: the operator lets that email (see orgCreators).
    app = await buildApp({ ...k.config, jwtIssuers: issuers, orgCreators: ['superusers', 'founder@example.com'] }, k.store, { logger: false });
    await ok(admin('POST', '/org/acme/gvc', { name: 'prod' }), 201);
  });
  after(async () => {
    await app.core.close();
    await k.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a minted key works as Bearer and bare, is shown once, and $drop/keys revokes it at once', async () => {
    const minted = await ok(admin('POST', '/org/acme/serviceaccount', { name: 'ci' }), 201);
    assert.deepEqual(minted.keys, []);
    const key = await ok(admin('POST', '/org/acme/serviceaccount/ci/-addKey', { description: 'ci key' }));
    assert.deepEqual(Object.keys(key).sort(), ['created', 'description', 'key', 'name']);
    assert.equal(key.key.split('.')[0], key.name);
    assert.equal(Buffer.from(key.key.split('.')[1], 'base64url').toString(), `acme.ci.${key.name}`);
    await ok(admin('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/ci'] }));
    await ok(as(key.key, 'GET', '/org/acme/gvc/prod'));
    const bare = await app.core.inject({ method: 'GET', url: '/org/acme/gvc/prod', headers: { authorization: key.key } });
    assert.equal(bare.statusCode, 200);
    const sa = await ok(admin('GET', '/org/acme/serviceaccount/ci'));
    assert.deepEqual(sa.keys.map((x: any) => x.name), [key.name]);
    assert.ok(!JSON.stringify(sa).includes(key.key.split('.')[2]), 'the secret is never shown again');
    await ok(admin('PATCH', '/org/acme/serviceaccount/ci', { '$drop/keys': [key.name] }));
    assertError(await as(key.key, 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
  });

  test('deleting a service account revokes all its keys at once; a tampered secret is 401', async () => {
    const a = await newKey('doomed');
    const b = await newKey('doomed');
    await ok(admin('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/doomed'] }));
    await ok(as(a, 'GET', '/org/acme/gvc/prod'));
    await ok(as(b, 'GET', '/org/acme/gvc/prod'));
    const tampered = a.slice(0, -2) + (a.endsWith('AA') ? 'BB' : 'AA');
    assertError(await as(tampered, 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
    await ok(admin('DELETE', '/org/acme/serviceaccount/doomed'), 202);
    assertError(await as(a, 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
    assertError(await as(b, 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
    assertError(await as(null, 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
    assertError(await as('not-a-token', 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
  });

  test('users are named by email: created by an admin, invited, and found with -for/email', async () => {
    const created = await as(k.token, 'POST', '/org/acme/user', { email: 'ann@example.com' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(created.headers.location, '/org/acme/user/ann@example.com');
    assert.equal(created.body.name, 'ann@example.com');
    const invited = await as(k.token, 'POST', '/org/acme/user/-invite', { email: 'bob.long-name+keel@sub.example.com' });
    assert.equal(invited.status, 201, JSON.stringify(invited.body));
    assert.equal(invited.body.email, 'bob.long-name+keel@sub.example.com');
    const found = await ok(admin('GET', '/org/acme/user/-for/email/ann@example.com'));
    assert.equal(found.email, 'ann@example.com');
    assert.equal(found.links[0].href, '/org/acme/user/ann@example.com');
    assertError(await admin('GET', '/org/acme/user/-for/email/nobody@example.com'), 404, 'not_found');
    assertError(await admin('POST', '/org/acme/user', { name: 'ann', email: 'ann@example.com' }), 400, 'bad_request');
    assertError(await admin('POST', '/org/acme/user/-invite', {}), 400, 'bad_request');
    const long = `${'x'.repeat(200)}@example.com`;
    await ok(admin('POST', '/org/acme/user/-invite', { email: long }), 201);
    await ok(admin('GET', `/org/acme/user/-for/email/${long}`));
    // Inviting needs `invite` on users: a key without it is refused and nothing is created.
    const plain = await newKey('no-invite');
    assertError(await as(plain, 'POST', '/org/acme/user/-invite', { email: 'eve@example.com' }), 403, 'forbidden');
    assertError(await admin('GET', '/org/acme/user/eve@example.com'), 404, 'not_found');
  });

  test('a JWT of a trusted issuer authenticates as the user of the org it addresses', async () => {
    await ok(admin('POST', '/org/acme/user', { email: 'jwt-user@example.com' }), 201);
    const token = await jwt(signer, 'jwt-user@example.com');
    // A member with no grants sees nothing, but is a member.
    assert.deepEqual((await ok(as(token, 'GET', '/org/acme/gvc'))).items, []);
    assertError(await as(token, 'GET', '/org/acme/gvc/prod'), 403, 'forbidden');
    await ok(admin('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/user/jwt-user@example.com'] }));
    assert.equal((await ok(as(token, 'GET', '/org/acme/gvc/prod'))).name, 'prod');
    // An email that is no user of the org: 403 on every path of it.
    const outsider = await jwt(signer, 'outsider@example.com');
    assertError(await as(outsider, 'GET', '/org/acme/gvc'), 403, 'forbidden');
    assertError(await as(outsider, 'GET', '/org/acme/gvc/prod'), 403, 'forbidden');
  });

  test('every bad JWT is 401 with the error object', async () => {
    await ok(admin('POST', '/org/acme/user', { email: 'victim@example.com' }), 201);
    await ok(admin('PATCH', '/org/acme/group/superusers', { '$append/memberLinks': ['/org/acme/user/victim@example.com'] }));
    const good = await jwt(signer, 'victim@example.com');
    await ok(as(good, 'GET', '/org/acme/gvc/prod'));
    const [h, p] = good.split('.');
    const cases: Record<string, string> = {
      'alg none': `${b64({ alg: 'none', typ: 'JWT' })}.${p}.`,
      'alg none with a signature': `${b64({ alg: 'none', kid: 'k1' })}.${p}.${good.split('.')[2]}`,
      'HS256 with the public key id': await new SignJWT({ iss: ISSUER, aud: AUDIENCE, email: 'victim@example.com', exp: now() + 600 })
        .setProtectedHeader({ alg: 'HS256', kid: 'k1' })
        .sign(new TextEncoder().encode('a-shared-secret-of-at-least-32-bytes!')),
      expired: await jwt(signer, 'victim@example.com', { exp: now() - 120, iat: now() - 720 }),
      'not yet valid': await jwt(signer, 'victim@example.com', { nbf: now() + 600 }),
      'wrong issuer': await jwt(signer, 'victim@example.com', { iss: 'https://evil.test' }),
      'no issuer': await jwt(signer, 'victim@example.com', { iss: undefined }),
      'wrong audience': await jwt(signer, 'victim@example.com', { aud: 'someone-else' }),
      'wrong signature (trusted kid, other key)': await jwt(impostor, 'victim@example.com'),
      'unknown kid': await jwt(stranger, 'victim@example.com'),
      'payload swapped under a valid signature': `${h}.${b64({ iss: ISSUER, aud: AUDIENCE, email: 'victim@example.com', exp: now() + 9999, admin: true })}.${good.split('.')[2]}`,
      'no exp': await jwt(signer, 'victim@example.com', { exp: undefined }),
      'no email claim': await jwt(signer, 'victim@example.com', { email: undefined }),
      garbage: 'eyJhbGciOiJSUzI1NiJ9.not-json.sig',
    };
    for (const [name, token] of Object.entries(cases)) {
      const res = await as(token, 'GET', '/org/acme/gvc/prod');
      assert.equal(res.status, 401, `${name}: ${JSON.stringify(res.body)}`);
      assertError(res, 401, 'unauthorized');
    }
  });

  test('a rotated JWKS file is read again: the new key is trusted and the retired one is not, without a restart', async () => {
    await ok(admin('POST', '/org/acme/user', { email: 'rotated@example.com' }), 201);
    await ok(admin('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['/org/acme/user/rotated@example.com'] }));
    await ok(as(await jwt(signer, 'rotated@example.com'), 'GET', '/org/acme/gvc/prod'));
    const file = join(dir, 'jwks.json');
    const original = readFileSync(file, 'utf8');
    const next = await generateKeyPair('RS256');
    try {
      writeFileSync(file, JSON.stringify({ keys: [{ ...(await exportJWK(next.publicKey)), kid: 'k9', alg: 'RS256', use: 'sig' }] }));
      await ok(as(await jwt({ key: next.privateKey, kid: 'k9' }, 'rotated@example.com'), 'GET', '/org/acme/gvc/prod'));
      assertError(await as(await jwt(signer, 'rotated@example.com'), 'GET', '/org/acme/gvc/prod'), 401, 'unauthorized');
      // Caught half-written: the keys read last stay in use.
      writeFileSync(file, '{"keys": [');
      await ok(as(await jwt({ key: next.privateKey, kid: 'k9' }, 'rotated@example.com'), 'GET', '/org/acme/gvc/prod'));
    } finally {
      writeFileSync(file, original);
    }
    await ok(as(await jwt(signer, 'rotated@example.com'), 'GET', '/org/acme/gvc/prod'));
  });

  test('groups: memberQuery over users and identityMatcher over JWT claims', async () => {
    await ok(admin('POST', '/org/acme/secret', { name: 'corp-secret', type: 'opaque', data: { payload: 'x', encoding: 'plain' } }), 201);
    await ok(admin('POST', '/org/acme/group', { name: 'corp', memberQuery: { kind: 'user', spec: { match: 'all', terms: [{ op: '~', property: 'email', value: '@corp.example' }] } } }), 201);
    await ok(admin('POST', '/org/acme/group', { name: 'idp-admins', identityMatcher: { expression: "contains(groups, 'admins')", language: 'jmespath' } }), 201);
    await ok(admin('POST', '/org/acme/policy', { name: 'corp-secrets', targetKind: 'secret', targetLinks: ['//secret/corp-secret'], bindings: [{ permissions: ['reveal'], principalLinks: ['//group/corp', '//group/idp-admins'] }] }), 201);
    assertError(await admin('POST', '/org/acme/group', { name: 'broken', identityMatcher: { expression: 'contains(groups,', language: 'jmespath' } }), 400, 'bad_request');

    await ok(admin('POST', '/org/acme/user', { email: 'dev@corp.example' }), 201);
    await ok(admin('POST', '/org/acme/user', { email: 'dev@elsewhere.example' }), 201);
    const inCorp = await jwt(signer, 'dev@corp.example');
    assert.equal((await ok(as(inCorp, 'GET', '/org/acme/secret/corp-secret/-reveal'))).data.payload, 'x');
    assertError(await as(await jwt(signer, 'dev@elsewhere.example'), 'GET', '/org/acme/secret/corp-secret'), 403, 'forbidden');

    // identityMatcher: not a user of the org, but the claims make it a member of a bound group.
    const admins = await jwt(signer, 'ops@idp.example', { groups: ['admins', 'ops'] });
    assert.equal((await ok(as(admins, 'GET', '/org/acme/secret/corp-secret'))).name, 'corp-secret');
    assertError(await as(admins, 'GET', '/org/acme/gvc/prod'), 403, 'forbidden');
    const notAdmin = await jwt(signer, 'ops@idp.example', { groups: ['ops'] });
    assertError(await as(notAdmin, 'GET', '/org/acme/secret/corp-secret'), 403, 'forbidden');
  });

  test('group membership changes take effect at once', async () => {
    const key = await newKey('member');
    await ok(admin('POST', '/org/acme/group', { name: 'readers' }), 201);
    await ok(admin('POST', '/org/acme/policy', { name: 'readers-gvc', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }] }), 201);
    assertError(await as(key, 'GET', '/org/acme/gvc/prod'), 403, 'forbidden');
    await ok(admin('PATCH', '/org/acme/group/readers', { '$append/memberLinks': ['//serviceaccount/member'] }));
    await ok(as(key, 'GET', '/org/acme/gvc/prod'));
    await ok(admin('PATCH', '/org/acme/group/readers', { '$drop/memberLinks': ['/org/acme/serviceaccount/member'] }));
    assertError(await as(key, 'GET', '/org/acme/gvc/prod'), 403, 'forbidden');
  });

  test('built-in groups cannot be deleted and a caller cannot remove itself from superusers', async () => {
    assertError(await admin('DELETE', '/org/acme/group/superusers'), 403, 'forbidden');
    assertError(await admin('DELETE', '/org/acme/group/viewers'), 403, 'forbidden');
    const res = await admin('PATCH', '/org/acme/group/superusers', { '$drop/memberLinks': ['/org/acme/serviceaccount/admin'] });
    assertError(res, 403, 'forbidden');
    assertError(await admin('PUT', '/org/acme/group/superusers', { name: 'superusers', memberLinks: [] }), 403, 'forbidden');
    assert.ok((await ok(admin('GET', '/org/acme/group/superusers'))).memberLinks.includes('/org/acme/serviceaccount/admin'));
    // Removing someone else is fine.
    await ok(admin('PATCH', '/org/acme/group/superusers', { '$append/memberLinks': ['//serviceaccount/temp'] }));
    await ok(admin('PATCH', '/org/acme/group/superusers', { '$drop/memberLinks': ['/org/acme/serviceaccount/temp'] }));
  });

  test('a targetQuery policy covers items created after it', async () => {
    const key = await newKey('tagged-reader');
    await ok(admin('POST', '/org/acme/policy', {
      name: 'blue-gvcs',
      targetKind: 'gvc',
      targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'blue' }] } },
      bindings: [{ permissions: ['edit'], principalLinks: ['//serviceaccount/tagged-reader'] }],
    }), 201);
    await ok(admin('POST', '/org/acme/gvc', { name: 'later-blue', tags: { team: 'blue' } }), 201);
    await ok(admin('POST', '/org/acme/gvc', { name: 'later-red', tags: { team: 'red' } }), 201);
    assert.equal((await ok(as(key, 'GET', '/org/acme/gvc/later-blue'))).name, 'later-blue');
    assertError(await as(key, 'GET', '/org/acme/gvc/later-red'), 403, 'forbidden');
    assert.deepEqual((await ok(as(key, 'GET', '/org/acme/gvc'))).items.map((g: any) => g.name), ['later-blue']);
    assert.deepEqual((await ok(as(key, 'POST', '/org/acme/gvc/-query', {}))).items.map((g: any) => g.name), ['later-blue']);
    // edit implies view; retagging moves the item out of the policy's reach.
    await ok(as(key, 'PATCH', '/org/acme/gvc/later-blue', { tags: { team: 'green' } }));
    assertError(await as(key, 'GET', '/org/acme/gvc/later-blue'), 403, 'forbidden');
  });

  test('a targetQuery policy on any property grants a GET exactly the items it lists: the id, version and dates are not properties', async () => {
    const key = await newKey('star-reader');
    await ok(admin('POST', '/org/acme/policy', {
      name: 'version-one',
      targetKind: 'gvc',
      targetQuery: { spec: { match: 'all', terms: [{ op: '=', property: '*', value: 1 }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/star-reader'] }],
    }), 201);
    await ok(admin('POST', '/org/acme/gvc', { name: 'at-version-one' }), 201);
    assert.equal((await ok(admin('GET', '/org/acme/gvc/at-version-one'))).version, 1);
    assert.deepEqual((await ok(as(key, 'GET', '/org/acme/gvc'))).items.map((g: any) => g.name), []);
    assertError(await as(key, 'GET', '/org/acme/gvc/at-version-one'), 403, 'forbidden');
  });

  test('identity principals are stored in bindings (and authenticate nothing)', async () => {
    const p = await ok(admin('POST', '/org/acme/policy', { name: 'ident', targetKind: 'secret', target: 'all', bindings: [{ permissions: ['reveal'], principalLinks: ['//gvc/prod/identity/app', '//user/ann@example.com'] }] }), 201);
    assert.deepEqual(p.bindings[0].principalLinks, ['/org/acme/gvc/prod/identity/app', '/org/acme/user/ann@example.com']);
  });

  test('every kind has its permission schema', async () => {
    for (const def of KINDS) {
      const url = def.kind === 'org' ? '/org/-schema/permissions' : `/org/acme/${def.kind}/-schema/permissions`;
      const body = await ok(admin('GET', url));
      assert.deepEqual(Object.keys(body).sort(), ['implied', 'items', 'kind', 'links', 'targetKind']);
      assert.equal(body.kind, 'permissions');
      assert.equal(body.targetKind, def.kind);
      assert.deepEqual(body.items.map((i: any) => i.name), def.permissions.map((x) => x.name));
      if (body.implied.manage) assert.deepEqual([...body.implied.manage].sort(), def.permissions.map((x) => x.name).sort());
    }
    const user = await ok(admin('GET', '/org/acme/user/-schema/permissions'));
    assert.deepEqual(user.items.map((i: any) => i.name), ['delete', 'edit', 'impersonate', 'invite', 'manage', 'view']);
  });

  test('access reports name the principal, policy, permissions and match, for items and for the org', async () => {
    await ok(admin('POST', '/org/acme/secret', { name: 'reported', type: 'opaque', data: { payload: 'x', encoding: 'plain' }, tags: { env: 'prod' } }), 201);
    await ok(admin('POST', '/org/acme/policy', { name: 'by-link', targetKind: 'secret', targetLinks: ['//secret/reported'], bindings: [{ permissions: ['reveal'], principalLinks: ['//serviceaccount/ci'] }] }), 201);
    await ok(admin('POST', '/org/acme/policy', { name: 'by-query', targetKind: 'secret', targetQuery: { spec: { terms: [{ op: '=', tag: 'env', value: 'prod' }] } }, bindings: [{ permissions: ['use'], principalLinks: ['//group/viewers'] }] }), 201);
    const report = await ok(admin('GET', '/org/acme/secret/reported/-accessreport'));
    assert.deepEqual(Object.keys(report).sort(), ['created', 'kind', 'links', 'permissions']);
    assert.equal(report.kind, 'accessreport');
    assert.deepEqual(report.permissions.map((p: any) => p.name), ['create', 'delete', 'edit', 'manage', 'reveal', 'use', 'view']);
    const of = (perm: string) => report.permissions.find((p: any) => p.name === perm).bindings;
    assert.deepEqual(of('reveal').find((b: any) => b.grantingPolicyLink === '/org/acme/policy/by-link'), { principalLink: '/org/acme/serviceaccount/ci', grantingPolicyLink: '/org/acme/policy/by-link', grantedPermissions: ['reveal'], match: 'link' });
    assert.ok(of('view').some((b: any) => b.grantingPolicyLink === '/org/acme/policy/by-query' && b.match === 'query' && b.principalLink === '/org/acme/group/viewers'), 'use implies view');
    assert.ok(of('view').some((b: any) => b.grantingPolicyLink === '/org/acme/policy/superusers-secret' && b.match === 'all' && b.principalLink === '/org/acme/group/superusers'));
    assert.ok(!of('use').some((b: any) => b.grantingPolicyLink === '/org/acme/policy/by-link'));
    const org = await ok(admin('GET', '/org/acme/-accessreport'));
    assert.ok(org.permissions.find((p: any) => p.name === 'viewAccessReport').bindings.some((b: any) => b.principalLink === '/org/acme/group/superusers'));
    const wl = await ok(admin('POST', '/org/acme/gvc/prod/workload', { name: 'wl', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }] } }), 201);
    assert.equal(wl.name, 'wl');
    assert.equal((await ok(admin('GET', '/org/acme/gvc/prod/workload/wl/-accessreport'))).links[0].href, '/org/acme/gvc/prod/workload/wl/-accessreport');
    assert.equal((await ok(admin('GET', '/org/acme/gvc/prod/-accessreport'))).links[1].href, '/org/acme/gvc/prod');
    assertError(await admin('GET', '/org/acme/secret/missing/-accessreport'), 404, 'not_found');
    // viewAccessReport on the org is enough, for any item; a viewer has neither it nor manage.
    const auditor = await newKey('auditor');
    assertError(await as(auditor, 'GET', '/org/acme/secret/reported/-accessreport'), 403, 'forbidden');
    await ok(admin('POST', '/org/acme/policy', { name: 'auditors', targetKind: 'org', target: 'all', bindings: [{ permissions: ['viewAccessReport'], principalLinks: ['//serviceaccount/auditor'] }] }), 201);
    await ok(as(auditor, 'GET', '/org/acme/secret/reported/-accessreport'));
    assertError(await as(auditor, 'GET', '/org/acme/secret/reported'), 403, 'forbidden');
  });

  test('a JWT user lists the orgs it is a user of, and creating an org makes it a superuser there', async () => {
    const token = await jwt(signer, 'founder@example.com');
    const before = await ok(as(token, 'GET', '/org'));
    assert.deepEqual(before.items, [], 'a user of no org sees none');
    const created = await as(token, 'POST', '/org', { name: 'founded' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const su = await ok(as(token, 'GET', '/org/founded/group/superusers'));
    assert.equal((await admin('GET', '/org/founded/group/superusers')).status, 403, 'the org is not the admin key\'s');
    assert.deepEqual(su.memberLinks, ['/org/founded/user/founder@example.com']);
    assert.equal((await ok(as(token, 'GET', '/org/founded/user/founder@example.com'))).email, 'founder@example.com');
    assert.equal((await as(token, 'POST', '/org/founded/gvc', { name: 'mine' })).status, 201);
    assert.deepEqual((await ok(as(token, 'GET', '/org'))).items.map((o: any) => o.name), ['founded']);
    assert.equal((await as(token, 'GET', '/org/acme/gvc')).status, 403, 'no access to an org it is not a user of');
  });
});

forEachBackend('access changes seen by a second Keel process', (backend) => {
  let k: TestKeel;
  let second: App;
  before(async () => {
    k = await startKeel(backend);
    second = (await k.reopen()).app;
  });
  after(() => k.close());

  const call = async (app: App, token: string, method: string, url: string, body?: unknown) => {
    const res = await app.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined };
  };
  /** The second instance's very next answer (no polling: it waits for its catch-up, not for time). */
  const next = async (token: string, url: string, status: number) => {
    const res = await call(second, token, 'GET', url);
    assert.equal(res.status, status, `${url}: ${JSON.stringify(res.body)}`);
  };

  test('membership, policy and key changes reach the other instance at once', async () => {
    assert.equal((await call(k.app, k.token, 'POST', '/org/acme/serviceaccount', { name: 'remote' })).status, 201);
    const key = (await call(k.app, k.token, 'POST', '/org/acme/serviceaccount/remote/-addKey', { description: 'x' })).body.key;
    assert.equal((await call(k.app, k.token, 'POST', '/org/acme/gvc', { name: 'gx' })).status, 201);
    assert.equal((await call(second, key, 'GET', '/org/acme/gvc/gx')).status, 403);
    // Group membership added on the first instance.
    assert.equal((await call(k.app, k.token, 'PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['//serviceaccount/remote'] })).status, 200);
    await next(key, '/org/acme/gvc/gx', 200);
    // Removed again.
    assert.equal((await call(k.app, k.token, 'PATCH', '/org/acme/group/viewers', { '$drop/memberLinks': ['/org/acme/serviceaccount/remote'] })).status, 200);
    await next(key, '/org/acme/gvc/gx', 403);
    // A policy granting it directly.
    assert.equal((await call(k.app, k.token, 'POST', '/org/acme/policy', { name: 'direct', targetKind: 'gvc', targetLinks: ['//gvc/gx'], bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/remote'] }] })).status, 201);
    await next(key, '/org/acme/gvc/gx', 200);
    // The key revoked on the first instance stops working on the second.
    const name = key.split('.')[0];
    assert.equal((await call(k.app, k.token, 'PATCH', '/org/acme/serviceaccount/remote', { '$drop/keys': [name] })).status, 200);
    await next(key, '/org/acme/gvc/gx', 401);
  });
}, ['postgres']);

describe('KEEL_JWT_ISSUERS', () => {
  test('a valid value is parsed, with the email claim defaulted', async () => {
    const { publicKey } = await generateKeyPair('ES256');
    const pem = await exportSPKI(publicKey);
    const config = configFromEnv({ KEEL_JWT_ISSUERS: JSON.stringify([{ issuer: 'https://a', audience: ['x', 'y'], publicKey: pem }, { issuer: 'https://b', audience: 'z', jwksUrl: 'https://b/jwks', emailClaim: 'upn' }]) });
    assert.deepEqual(config.jwtIssuers, [
      { issuer: 'https://a', audience: ['x', 'y'], publicKey: pem, emailClaim: 'email' },
      { issuer: 'https://b', audience: ['z'], jwksUrl: 'https://b/jwks', emailClaim: 'upn' },
    ]);
  });
  test('a bad value is a clear error naming the problem', () => {
    const bad: Array<[string, RegExp]> = [
      ['{', /JSON array/],
      ['{}', /must be a JSON array/],
      ['[{"audience":"a","jwksUrl":"https://x"}]', /\[0\]\.issuer/],
      ['[{"issuer":"i","jwksUrl":"https://x"}]', /\[0\]\.audience/],
      ['[{"issuer":"i","audience":"a"}]', /exactly one of jwksUrl, jwksFile or publicKey/],
      ['[{"issuer":"i","audience":"a","jwksUrl":"https://x","jwksFile":"/f"}]', /exactly one/],
      ['[{"issuer":"i","audience":"a","jwksUrl":"ftp://x"}]', /http\(s\) URL/],
      ['[{"issuer":"i","audience":"a","publicKey":"abc"}]', /PEM/],
      ['[{"issuer":"i","audience":"a","jwksFile":"/f","secret":"s"}]', /unknown field/],
      ['[{"issuer":"i","audience":"a","jwksFile":"/f"},{"issuer":"i","audience":"a","jwksFile":"/f"}]', /listed twice/],
    ];
    for (const [value, message] of bad) assert.throws(() => configFromEnv({ KEEL_JWT_ISSUERS: value }), message, value);
  });
});
