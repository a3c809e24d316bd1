// `keel login` as a person runs it: Chromium opens the invitation and sets a password, `keel login`
// prints a URL and a code, Chromium confirms it, and the official cpln CLI then uses the profile it
// wrote; on PostgreSQL a second Keel process agrees on the token and on its revocation.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { Cpln } from '../support/cpln.js';
import { CHROMIUM, chromiumAvailable, WAIT } from '../support/console.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { spawnKeel, type KeelProcess } from '../support/spawn-keel.js';
import { keelCli } from '../support/sign-in.js';

const PASSWORD = 'a long enough secret';
const hasChromium = chromiumAvailable();

forEachBackend('keel login and the cpln CLI', (backend) => {
  let keel: TestKeel;
  let base: string;
  let browser: Browser;
  let page: Page;
  let cpln: Cpln;
  let second: KeelProcess | undefined;
  before(async () => {
    keel = await startKeel(backend, 'acme');
    base = await keel.listen();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'] });
    page = await (await browser.newContext()).newPage();
    cpln = new Cpln([base.replace('http://', '')]);
  });
  after(async () => {
    await second?.stop();
    await browser?.close();
    await keel.close();
  });

  test('invitation → password → keel login → code confirmed in the browser → cpln gvc get allowed only once a policy grants it', { skip: !hasChromium }, async () => {
    assert.equal((await keel.call('POST', '/org/acme/gvc', { name: 'web' })).status, 201);
    const invited = await fetch(`${base}/org/acme/user/-invite`, { method: 'POST', headers: { authorization: `Bearer ${keel.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'ada@example.com' }) });
    const link = ((await invited.json()) as { inviteLink: string }).inviteLink;
    await page.goto(link);
    await page.getByLabel('New password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Set password' }).click();
    await page.locator('#result').filter({ hasText: 'The password of ada@example.com is set' }).waitFor({ timeout: WAIT });

    const cplnHome = join(cpln.home, 'cpln');
    let confirmed: Promise<void> | undefined;
    const login = await keelCli(['login', '--endpoint', base, '--profile', 'ada'], cplnHome, (out) => {
      const m = /Open (\S+) and enter the code ([A-Z]{4}-[A-Z]{4})/.exec(out);
      if (!m || confirmed) return;
      confirmed = (async () => {
        await page.goto(m[1]);
        await page.getByLabel('Code shown by keel login').fill(m[2]);
        await page.getByLabel('Email').fill('ada@example.com');
        await page.getByLabel('Password').fill(PASSWORD);
        await page.getByRole('button', { name: 'Allow' }).click();
        await page.locator('#result').filter({ hasText: 'Signed in as ada@example.com to org acme' }).waitFor({ timeout: WAIT });
      })();
    });
    await confirmed;
    assert.equal(login.code, 0, login.stderr);
    assert.match(login.stdout, new RegExp(`Open ${base}/login/device and enter the code`));
    assert.match(login.stdout, /Signed in as ada@example\.com to org 'acme'; profile 'ada' holds the token/);
    const profile = JSON.parse(readFileSync(join(cplnHome, 'profiles', 'ada.json'), 'utf8'));
    assert.equal(profile.request.endpoint, base);
    assert.equal(profile.context.org, 'acme');
    assert.equal(profile.authInfo, undefined);

    const printed = await cpln.run(['profile', 'token', 'ada']);
    assert.equal(printed.code, 0, printed.stderr);
    assert.equal(printed.stdout, profile.request.token);

    const refused = await cpln.run(['gvc', 'get', 'web', '--profile', 'ada', '-o', 'json']);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr + refused.stdout, /403|not granted|forbidden/i);
    const policy = await keel.call('POST', '/org/acme/policy', { name: 'ada-gvcs', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['/org/acme/user/ada@example.com'] }] });
    assert.equal(policy.status, 201, policy.raw);
    const allowed = await cpln.run(['gvc', 'get', 'web', '--profile', 'ada', '-o', 'json']);
    assert.equal(allowed.code, 0, allowed.stderr);
    assert.equal(JSON.parse(allowed.stdout).name, 'web');
    assert.deepEqual(allowed.foreign, []);

    if (backend === 'postgres') {
      // Another Keel process on the same database accepts the token, and refuses it once the user is deleted.
      second = await spawnKeel(keel.config.databaseUrl!);
      const onSecond = await cpln.run(['gvc', 'get', 'web', '--profile', 'ada', '--endpoint', second.base, '-o', 'json']);
      assert.equal(onSecond.code, 0, onSecond.stderr);
      assert.equal((await keel.call('DELETE', '/org/acme/user/ada@example.com')).status, 202);
      const res = await fetch(`${second.base}/org/acme/gvc/web`, { headers: { authorization: `Bearer ${profile.request.token}` } });
      assert.equal(res.status, 401);
      assert.equal(((await res.json()) as { message: string }).message, 'the token is invalid, expired or revoked');
    }

    const out = await keelCli(['logout', '--profile', 'ada'], cplnHome);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(existsSync(join(cplnHome, 'profiles', 'ada.json')), false);
    const gone = await cpln.run(['profile', 'token', 'ada']);
    assert.notEqual(gone.code, 0);
  });

  test('keel user invite prints only the link, and the link works once', async () => {
    const run = await keelCli(['user', 'invite', 'Bea@Example.com', '--org', 'acme', '--data-dir', keel.config.dataDir, ...(keel.config.databaseUrl ? ['--database-url', keel.config.databaseUrl] : []), '--public-url', base], join(cpln.home, 'cpln'));
    assert.equal(run.code, 0, run.stderr);
    const link = run.stdout.trim();
    assert.match(link, new RegExp(`^${base}/login/invitation\\?token=[A-Za-z0-9_-]{43}$`));
    assert.equal((await keel.call('GET', '/org/acme/user/bea@example.com')).status, 200);
    const token = new URL(link).searchParams.get('token')!;
    const short = await fetch(`${base}/login/invitation`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token, password: 'short' }) });
    assert.equal(short.status, 400);
    assert.match(await short.text(), /at least 12 characters/);
    const set = await fetch(`${base}/login/invitation`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token, password: PASSWORD }) });
    assert.equal(set.status, 200);
    const again = await fetch(link);
    assert.equal(again.status, 404);
    assert.match(await again.text(), /unknown, expired or already used/);
  });
});
