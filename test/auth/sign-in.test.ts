// People sign in (DESIGN.md, "Sign-in for people"): invitation → password → device code confirmed
// → token, through Keel's own directory, on both backends; every refusal a person or an attacker meets.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, generateKeyPair, jwtVerify, SignJWT } from 'jose';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { form, invitedWithPassword, PASSWORD, poll, startDevice } from '../support/sign-in.js';

forEachBackend('sign-in through the directory', (backend) => {
  let keel: TestKeel;
  let base: string;
  before(async () => {
    keel = await startKeel(backend, 'acme');
    base = await keel.listen();
  });
  after(() => keel.close());

  test('metadata and JWKS name Keel as issuer and its endpoints', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
      const meta = (await (await fetch(base + path)).json()) as Record<string, any>;
      assert.equal(meta.issuer, base);
      assert.equal(meta.device_authorization_endpoint, `${base}/login/device/code`);
      assert.equal(meta.token_endpoint, `${base}/login/token`);
      assert.deepEqual(meta.code_challenge_methods_supported, ['S256']);
    }
    const jwks = (await (await fetch(`${base}/login/jwks`)).json()) as { keys: Array<Record<string, unknown>> };
    assert.equal(jwks.keys.length, 1);
    assert.equal(jwks.keys[0].d, undefined, 'no private part is published');
  });

  test('invitation → password → device code confirmed → a token that acts as the user once a policy grants it', async () => {
    await invitedWithPassword(keel, 'ada@example.com');
    const device = await startDevice(base);
    assert.match(device.user_code, /^[A-Z]{4}-[A-Z]{4}$/);
    assert.equal(device.verification_uri, `${base}/login/device`);
    assert.equal(device.interval, 5);
    assert.equal((await poll(base, device.device_code)).json.error, 'authorization_pending');
    assert.equal((await poll(base, device.device_code)).json.error, 'slow_down', 'a poll sooner than the interval');
    const page = await fetch(device.verification_uri_complete);
    assert.match(await page.text(), new RegExp(`value="${device.user_code}"`));
    const confirmed = await form(`${base}/login/device`, { user_code: device.user_code.toLowerCase(), email: 'Ada@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(confirmed.status, 200, confirmed.text);
    assert.match(confirmed.text, /Signed in as <b>ada@example\.com<\/b> to org <b>acme<\/b>/);
    const issued = await poll(base, device.device_code);
    assert.equal(issued.status, 200, issued.text);
    assert.equal(issued.json.token_type, 'Bearer');
    assert.equal(issued.json.expires_in, 12 * 3600);
    const token = issued.json.access_token as string;

    // The JWT is Keel's: verified against the published JWKS.
    const { payload } = await jwtVerify(token, createRemoteJWKSet(new URL(`${base}/login/jwks`)), { issuer: base, audience: base });
    const userItem = await keel.call('GET', '/org/acme/user/ada@example.com');
    assert.equal(payload.sub, userItem.body.id);
    assert.equal(payload.email, 'ada@example.com');

    // The code is spent.
    assert.equal((await poll(base, device.device_code)).json.error, 'invalid_grant');

    // A member with no policy: refused; granted view on gvcs: allowed.
    assert.equal((await keel.call('POST', '/org/acme/gvc', { name: 'web' })).status, 201);
    const refused = await keel.call('GET', '/org/acme/gvc/web', undefined, { token });
    assert.equal(refused.status, 403, refused.raw);
    const policy = await keel.call('POST', '/org/acme/policy', { name: 'ada-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/ada@example.com'] }] });
    assert.equal(policy.status, 201, policy.raw);
    const allowed = await keel.call('GET', '/org/acme/gvc/web', undefined, { token });
    assert.equal(allowed.status, 200, allowed.raw);

    // A change the person makes is audited under their email.
    await keel.call('POST', '/org/acme/policy', { name: 'ada-secrets', targetKind: 'secret', target: 'all', bindings: [{ permissions: ['create'], principalLinks: ['/org/acme/user/ada@example.com'] }] });
    assert.equal((await keel.call('POST', '/org/acme/secret', { name: 'ada-note', type: 'opaque', data: { payload: 'x' } }, { token })).status, 201);
    const events = await keel.app.audit.inject({ method: 'GET', url: '/audit/org/acme/subject/email/ada@example.com', headers: { authorization: `Bearer ${keel.token}` } });
    assert.equal(events.statusCode, 200, events.body);
    const created = (events.json() as { items: Array<{ resource: { name: string }; subject: { name: string; data: { principalLink: string } } }> }).items.find((e) => e.resource.name === 'ada-note');
    assert.equal(created?.subject.name, 'ada@example.com');
    assert.equal(created?.subject.data.principalLink, '/org/acme/user/ada@example.com');
  });

  test('a wrong, reused or expired code, a denied request, a wrong password: clear answers', async () => {
    await invitedWithPassword(keel, 'bob@example.com');
    const wrong = await form(`${base}/login/device`, { user_code: 'BCDF-GHJK', email: 'bob@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(wrong.status, 400);
    assert.match(wrong.text, /this code is unknown, expired or already used/);

    const device = await startDevice(base);
    const badPassword = await form(`${base}/login/device`, { user_code: device.user_code, email: 'bob@example.com', password: 'not the password', action: 'allow' });
    assert.equal(badPassword.status, 401);
    assert.match(badPassword.text, /the email or password is wrong/);
    const ok = await form(`${base}/login/device`, { user_code: device.user_code, email: 'bob@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(ok.status, 200, ok.text);
    const reused = await form(`${base}/login/device`, { user_code: device.user_code, email: 'bob@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(reused.status, 400);
    assert.match(reused.text, /already used/);

    const denied = await startDevice(base);
    const no = await form(`${base}/login/device`, { user_code: denied.user_code, action: 'deny' });
    assert.equal(no.status, 200);
    const answer = await poll(base, denied.device_code);
    assert.equal(answer.status, 400);
    assert.equal(answer.json.error, 'access_denied');

    assert.equal((await poll(base, 'no-such-code')).json.error, 'invalid_grant');
    assert.equal((await form(`${base}/login/device/code`, { client_id: 'someone-else' })).json.error, 'invalid_client');
    assert.equal((await form(`${base}/login/token`, { grant_type: 'password' })).json.error, 'unsupported_grant_type');
  });

  test('an uninvited email, or one whose user was deleted, gets no token', async () => {
    await invitedWithPassword(keel, 'carol@example.com');
    assert.equal((await keel.call('DELETE', '/org/acme/user/carol@example.com')).status, 202);
    const device = await startDevice(base);
    const refused = await form(`${base}/login/device`, { user_code: device.user_code, email: 'carol@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(refused.status, 403);
    assert.match(refused.text, /carol@example\.com has not been invited to any org/);
    const stranger = await form(`${base}/login/device`, { user_code: device.user_code, email: 'eve@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(stranger.status, 401, 'no password was ever set for an uninvited email');
  });

  test('guessing passwords is stopped per email', async () => {
    await invitedWithPassword(keel, 'dan@example.com');
    const device = await startDevice(base);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await form(`${base}/login/device`, { user_code: device.user_code, email: 'dan@example.com', password: `guess number ${i}`, action: 'allow' })).status);
    assert.deepEqual(statuses, [401, 401, 401, 401, 401, 429]);
    const right = await form(`${base}/login/device`, { user_code: device.user_code, email: 'dan@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(right.status, 429, 'even the right password waits once the email is locked');
  });

  test('a forged token and an expired one get 401', async () => {
    const jwks = (await (await fetch(`${base}/login/jwks`)).json()) as { keys: Array<{ kid: string }> };
    const pair = await generateKeyPair('ES256');
    const userItem = await keel.call('GET', '/org/acme/user/ada@example.com');
    const forged = await new SignJWT({ email: 'ada@example.com', org: 'acme' })
      .setProtectedHeader({ alg: 'ES256', kid: jwks.keys[0].kid })
      .setIssuer(base)
      .setAudience(base)
      .setSubject(userItem.body.id)
      .setExpirationTime('1h')
      .sign(pair.privateKey);
    const res = await keel.call('GET', '/org/acme/gvc/web', undefined, { token: forged });
    assert.equal(res.status, 401);
    assert.equal(res.body.code, 'unauthorized');

    const short = await keel.reopen({ userTokenTtlMs: 1000 });
    const addr = await short.app.core.listen({ host: '127.0.0.1', port: 0 });
    await invitedWithPassword(keel, 'erin@example.com');
    await keel.call('POST', '/org/acme/policy', { name: 'erin-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/erin@example.com'] }] });
    const device = await startDevice(addr);
    await form(`${addr}/login/device`, { user_code: device.user_code, email: 'erin@example.com', password: PASSWORD, action: 'allow' });
    const token = (await poll(addr, device.device_code)).json.access_token as string;
    assert.equal(decodeProtectedHeader(token).kid, jwks.keys[0].kid, 'both processes sign with the one stored key');
    const exp = decodeJwt(token).exp! * 1000;
    assert.equal((await keel.call('GET', '/org/acme/gvc/web', undefined, { token })).status, 200);
    await new Promise((r) => setTimeout(r, Math.max(0, exp - Date.now() + 50)));
    const expired = await keel.call('GET', '/org/acme/gvc/web', undefined, { token });
    assert.equal(expired.status, 401);
    assert.match(expired.body.message, /"exp" claim timestamp check failed/);
  });

  test('a device code past KEEL_DEVICE_CODE_TTL gets expired_token', async () => {
    const quick = await keel.reopen({ deviceCodeTtlMs: 300 });
    const addr = await quick.app.core.listen({ host: '127.0.0.1', port: 0 });
    const device = await startDevice(addr);
    const deadline = Date.now() + 300;
    await new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now() + 50)));
    const confirm = await form(`${addr}/login/device`, { user_code: device.user_code, email: 'ada@example.com', password: PASSWORD, action: 'allow' });
    assert.equal(confirm.status, 400);
    const answer = await poll(addr, device.device_code);
    assert.equal(answer.json.error, 'expired_token');
  });

  test('deleting the user refuses its token at once, on another process too', async () => {
    await invitedWithPassword(keel, 'fay@example.com');
    await keel.call('POST', '/org/acme/policy', { name: 'fay-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/fay@example.com'] }] });
    const device = await startDevice(base);
    await form(`${base}/login/device`, { user_code: device.user_code, email: 'fay@example.com', password: PASSWORD, action: 'allow' });
    const token = (await poll(base, device.device_code)).json.access_token as string;
    const other = await keel.reopen();
    assert.equal((await keel.call('GET', '/org/acme/gvc/web', undefined, { token, app: other.app })).status, 200);
    assert.equal((await keel.call('DELETE', '/org/acme/user/fay@example.com')).status, 202);
    for (const app of [keel.app, other.app]) {
      const res = await keel.call('GET', '/org/acme/gvc/web', undefined, { token, app });
      assert.equal(res.status, 401);
      assert.equal(res.body.message, 'the token is invalid, expired or revoked');
    }
    // Invited again: a new user item, and the old token stays refused.
    await keel.call('POST', '/org/acme/user/-invite', { email: 'fay@example.com' });
    assert.equal((await keel.call('GET', '/org/acme/gvc/web', undefined, { token, app: other.app })).status, 401);
  });

  test('guessing from one address, flooding device codes, and posting the form from another site are refused', async () => {
    const fresh = await keel.reopen();
    const addr = await fresh.app.core.listen({ host: '127.0.0.1', port: 0 });
    const device = await startDevice(addr);
    const statuses: number[] = [];
    for (let i = 0; i < 21; i++) statuses.push((await form(`${addr}/login/device`, { user_code: device.user_code, email: `guess${i}@example.com`, password: 'a wrong password', action: 'allow' })).status);
    assert.deepEqual(statuses, [...Array(20).fill(401), 429]);
    const codes: number[] = [];
    for (let i = 0; i < 30; i++) codes.push((await form(`${addr}/login/device/code`, { client_id: 'keel-cli' })).status);
    assert.equal(codes.filter((s) => s === 200).length, 29, 'one device code was asked for above');
    assert.equal(codes.at(-1), 429);
    const limited = await form(`${addr}/login/device/code`, { client_id: 'keel-cli' });
    assert.equal(limited.json.error, 'slow_down');

    const other = await startDevice(base);
    const crossSite = await fetch(`${base}/login/device`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'https://evil.example' },
      body: new URLSearchParams({ user_code: other.user_code, action: 'deny' }),
    });
    assert.equal(crossSite.status, 403);
    assert.equal((await poll(base, other.device_code)).json.error, 'authorization_pending', 'the code was not touched');
  });
});
