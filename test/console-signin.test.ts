// The console's "Sign in with your account": authorization code + PKCE through Keel's sign-in page,
// in a real Chromium; the header names the person; sign-out forgets the token.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { axe, chromiumAvailable, startConsoleKeel, WAIT, type ConsoleKeel } from './support/console.js';
import { invitedWithPassword, PASSWORD } from './support/sign-in.js';

const available = chromiumAvailable();

describe('console sign-in for people', { skip: available ? false : 'Chromium is not installed' }, () => {
  let c: ConsoleKeel;
  before(async () => {
    c = await startConsoleKeel();
    await invitedWithPassword(c.k, 'ada@example.com');
    await c.k.call('POST', '/org/acme/policy', { name: 'ada-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/ada@example.com'] }] });
    assert.equal((await c.k.call('POST', '/org/acme/gvc', { name: 'web' })).status, 201);
  });
  after(() => c?.close());

  test('a wrong password is refused on the sign-in page; the right one comes back signed in, named; sign-out forgets the token', async () => {
    const { page, base } = c;
    await page.goto(`${base}/console/#/org/acme/gvc`);
    await page.getByRole('button', { name: 'Sign in with your account' }).click();
    await page.waitForURL(/\/login\/authorize\?/, { timeout: WAIT });
    await axe(page, 'sign-in page');
    await page.getByLabel('Email').fill('ada@example.com');
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('#error').filter({ hasText: 'the email or password is wrong' }).waitFor({ timeout: WAIT });

    await page.getByLabel('Email').fill('ada@example.com');
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('navigation', { name: 'Kinds' }).waitFor({ timeout: WAIT });
    await page.getByTestId('who').filter({ hasText: 'ada@example.com' }).waitFor({ timeout: WAIT });
    assert.equal(new URL(page.url()).search, '', 'the code is gone from the address bar');
    assert.match(page.url(), /#\/org\/acme\/gvc$/, 'back on the page asked for');
    await page.getByRole('link', { name: 'web' }).first().waitFor({ timeout: WAIT });
    const token = await page.evaluate(() => (globalThis as any).sessionStorage.getItem('keel.key'));
    assert.ok(token && token.split('.').length === 3);
    assert.equal((await c.k.call('GET', '/org/acme/gvc/web', undefined, { token })).status, 200);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in with your account' }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).sessionStorage.getItem('keel.key') ?? (globalThis as any).localStorage.getItem('keel.key')), null);
    assert.deepEqual(c.external, []);
    assert.deepEqual(c.refused, []);
  });

  test('the sign-in page opened by hand leads to the console; reloaded, it still signs in; the console reloaded stays signed in', async () => {
    const { page, base } = c;
    await page.goto(`${base}/login/authorize`);
    await page.getByRole('button', { name: 'Sign in with your account' }).click();
    await page.waitForURL(/\/login\/authorize\?/, { timeout: WAIT });
    await page.reload();
    await page.getByLabel('Email').fill('ada@example.com');
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('who').filter({ hasText: 'ada@example.com' }).waitFor({ timeout: WAIT });
    await page.reload();
    await page.getByTestId('who').filter({ hasText: 'ada@example.com' }).waitFor({ timeout: WAIT });
    await page.getByRole('navigation', { name: 'Kinds' }).waitFor({ timeout: WAIT });
    // Back to the sign-in page and forward again: the used code is not offered twice, and the console still works.
    await page.goBack();
    await page.goForward();
    await page.getByTestId('who').filter({ hasText: 'ada@example.com' }).waitFor({ timeout: WAIT });
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in with your account' }).waitFor({ timeout: WAIT });
    assert.deepEqual(c.external, []);
    assert.deepEqual(c.refused, []);
  });

  test('a code that comes back with another state is refused', async () => {
    const { page, base } = c;
    await page.goto(`${base}/console/`);
    await page.evaluate(() => (globalThis as any).sessionStorage.setItem('keel.signin', JSON.stringify({ verifier: 'v'.repeat(43), state: 'expected', after: '/' })));
    await page.goto(`${base}/console/?code=forged&state=other`);
    await page.getByRole('status').filter({ hasText: 'state differs' }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).sessionStorage.getItem('keel.key')), null);
  });
});
