// Sign-in through an upstream OpenID provider: a real one (oidc-provider) on loopback, its login
// and consent pages driven in Chromium; only a verified, invited email gets a Keel token.
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { after, before, test } from 'node:test';
import Provider from 'oidc-provider';
import { chromium, type Browser, type Page } from 'playwright-core';
import { CHROMIUM, chromiumAvailable, WAIT } from '../support/console.js';
import { startKeel, type TestKeel } from '../support/keel.js';
import { freePort } from '../support/ports.js';
import { keelCli, poll, startDevice } from '../support/sign-in.js';
import { Cpln } from '../support/cpln.js';
import { join } from 'node:path';

const hasChromium = chromiumAvailable();

test.describe('sign-in through an upstream OpenID provider', { skip: !hasChromium }, () => {
  let keel: TestKeel;
  let base: string;
  let provider: Server;
  let browser: Browser;
  let page: Page;

  before(async () => {
    const port = await freePort();
    const issuer = `http://127.0.0.1:${port}`;
    keel = await startKeel('sqlite', 'acme', { oidcIssuer: issuer, oidcClientId: 'keel', oidcClientSecret: 'a-client-secret-for-keel' });
    base = await keel.listen();
    const op = new Provider(issuer, {
      clients: [{ client_id: 'keel', client_secret: 'a-client-secret-for-keel', redirect_uris: [`${base}/login/callback`], token_endpoint_auth_method: 'client_secret_basic' }],
      // Anyone may sign in with any password (the dev login form); an address starting "unverified" is not verified.
      findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub, email: sub, email_verified: !sub.startsWith('unverified') }) }),
      claims: { openid: ['sub'], email: ['email', 'email_verified'] },
      features: { devInteractions: { enabled: true } },
      cookies: { keys: ['a-cookie-key-for-the-test-provider'] },
    });
    provider = op.listen(port);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'] });
    page = await (await browser.newContext()).newPage();
  });
  after(async () => {
    await browser?.close();
    provider?.close();
    await keel.close();
  });

  /** Confirms a device code in the browser, signing in at the provider as `email`; the page's last text. */
  async function confirmThroughProvider(userCode: string, email: string): Promise<string> {
    await page.context().clearCookies();
    await page.goto(`${base}/login/device?user_code=${userCode}`);
    await page.getByRole('button', { name: 'Allow' }).click();
    await page.locator('input[name=login]').fill(email);
    await page.locator('input[name=password]').fill('anything');
    await page.getByRole('button', { name: 'Sign-in' }).click();
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.locator('#result, #error').waitFor({ timeout: WAIT });
    return (await page.locator('#result, #error').textContent()) ?? '';
  }

  test('an invited, verified email confirms the code and gets a token that acts as its user', async () => {
    assert.equal((await keel.call('POST', '/org/acme/gvc', { name: 'web' })).status, 201);
    const invited = await keel.call('POST', '/org/acme/user/-invite', { email: 'ada@example.com' });
    assert.equal(invited.status, 201);
    await keel.call('POST', '/org/acme/policy', { name: 'ada-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/ada@example.com'] }] });
    const device = await startDevice(base);
    const shown = await confirmThroughProvider(device.user_code, 'ada@example.com');
    assert.match(shown, /Signed in as ada@example\.com to org acme/);
    const issued = await poll(base, device.device_code);
    assert.equal(issued.status, 200, issued.text);
    const res = await keel.call('GET', '/org/acme/gvc/web', undefined, { token: issued.json.access_token });
    assert.equal(res.status, 200, res.raw);
  });

  test('keel login through the provider writes a profile cpln uses, allowed only once a policy grants it', async () => {
    await keel.call('POST', '/org/acme/user/-invite', { email: 'bea@example.com' });
    const cpln = new Cpln([base.replace('http://', '')]);
    const cplnHome = join(cpln.home, 'cpln');
    let confirmed: Promise<string> | undefined;
    const login = await keelCli(['login', '--endpoint', base, '--profile', 'bea', '--org', 'acme'], cplnHome, (out) => {
      const m = /enter the code ([A-Z]{4}-[A-Z]{4})/.exec(out);
      if (m && !confirmed) confirmed = confirmThroughProvider(m[1], 'bea@example.com');
    });
    assert.match((await confirmed) ?? '', /Signed in as bea@example\.com to org acme/);
    assert.equal(login.code, 0, login.stderr);
    const refused = await cpln.run(['gvc', 'get', 'web', '--profile', 'bea', '-o', 'json']);
    assert.notEqual(refused.code, 0);
    await keel.call('POST', '/org/acme/policy', { name: 'bea-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/bea@example.com'] }] });
    const allowed = await cpln.run(['gvc', 'get', 'web', '--profile', 'bea', '-o', 'json']);
    assert.equal(allowed.code, 0, allowed.stderr);
    assert.equal(JSON.parse(allowed.stdout).name, 'web');
  });

  test('an unverified or uninvited email is refused', async () => {
    await keel.call('POST', '/org/acme/user/-invite', { email: 'unverified@example.com' });
    const first = await startDevice(base);
    assert.match(await confirmThroughProvider(first.user_code, 'unverified@example.com'), /has not verified unverified@example\.com/);
    assert.equal((await poll(base, first.device_code)).json.error, 'authorization_pending');
    const second = await startDevice(base);
    assert.match(await confirmThroughProvider(second.user_code, 'mallory@example.com'), /mallory@example\.com has not been invited to any org/);
  });

  test('no passwords in upstream mode; a refused or unknown callback gets a clear page', async () => {
    const invitation = await fetch(`${base}/login/invitation`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token: 'x', password: 'a long enough password' }) });
    assert.equal(invitation.status, 400);
    assert.match(await invitation.text(), /Passwords are not used here/);
    const denied = await fetch(`${base}/login/callback?error=access_denied&error_description=the%20user%20said%20no&state=whatever`);
    assert.equal(denied.status, 403);
    assert.match(await denied.text(), /the provider refused: the user said no/);
    const unknown = await fetch(`${base}/login/callback?code=abc&state=forged`);
    assert.equal(unknown.status, 400);
    assert.match(await unknown.text(), /unknown, expired or already finished/);
  });
});
