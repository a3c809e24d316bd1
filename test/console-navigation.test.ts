// The console's URLs in a real headless Chromium: every route opened directly (as a bookmark, the
// address bar or a link does), signed in and signed out, in the same tab after another console page,
// after a reload and in a new tab; a link opened signed out lands on its page after sign-in; the
// opt-in key remembered on this machine, forgotten on sign-out and when the server refuses it.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { axe, chromiumAvailable, shot, signInHere, startConsoleKeel, WAIT, type ConsoleKeel } from './support/console.js';

const available = chromiumAvailable();

/** A console route and what a person sees on it once it has rendered. */
interface Screen {
  /** The URL after the server's address: /console/#/… (or another form of the console's URL). */
  url: string;
  shows: (page: Page) => ReturnType<Page['getByRole']> | ReturnType<Page['getByTestId']> | ReturnType<Page['locator']>;
  /** The route the page is at once it rendered (a redirect), when not the one opened. */
  at?: RegExp;
}

const heading = (name: string | RegExp) => (page: Page) => page.getByRole('heading', { name, exact: typeof name === 'string' });

const SCREENS: Screen[] = [
  { url: '/console', shows: heading('Org acme'), at: /\/console#\/org\/acme$/ },
  { url: '/console/', shows: heading('Org acme'), at: /\/console\/#\/org\/acme$/ },
  { url: '/console/index.html', shows: heading('Org acme'), at: /#\/org\/acme$/ },
  { url: '/console/#/', shows: heading('Org acme'), at: /#\/org\/acme$/ },
  { url: '/console/#/org/acme', shows: heading('Org acme') },
  { url: '/console/#/org/acme/-audit', shows: (page) => page.getByTestId('audit-row').first() },
  { url: '/console/#/org/acme/-audit?subjectName=admin&resourceType=gvc', shows: (page) => page.getByTestId('audit-row').first() },
  { url: '/console/#/org/acme/gvc', shows: (page) => page.getByRole('link', { name: 'shop', exact: true }) },
  { url: '/console/#/org/acme/gvc/-new', shows: heading('New gvc') },
  { url: '/console/#/org/acme/gvc/shop', shows: heading('gvc shop') },
  { url: '/console/#/org/acme/gvc/shop?tab=yaml', shows: (page) => page.locator('.editor .cm-content').getByText('name: shop') },
  { url: '/console/#/org/acme/gvc/shop/workload', shows: (page) => page.getByRole('link', { name: 'web', exact: true }) },
  { url: '/console/#/org/acme/gvc/shop/workload/-new', shows: heading('New workload') },
  { url: '/console/#/org/acme/gvc/shop/workload/web', shows: (page) => page.getByTestId('summary-Images').getByText('nginx:1.27') },
  { url: '/console/#/org/acme/gvc/shop/workload/web?tab=json', shows: (page) => page.getByTestId('json').getByText('"nginx:1.27"') },
  { url: '/console/#/org/acme/gvc/shop/workload/web?tab=history', shows: (page) => page.getByTestId('version-row').first() },
  { url: '/console/#/org/acme/gvc/shop/workload/web?tab=access', shows: (page) => page.getByRole('table', { name: 'Who can do what' }) },
  { url: '/console/#/org/acme/secret/db', shows: (page) => page.getByTestId('summary-Type').getByText('opaque') },
  { url: '/console/#/org/acme/secret/-new', shows: (page) => page.getByLabel('Type') },
  { url: '/console/#/org/acme/serviceaccount/deployer', shows: (page) => page.getByRole('button', { name: 'Mint key' }) },
  { url: '/console/#/org/acme/domain/shop.example.com', shows: heading('domain shop.example.com') },
  // A kind left out of the menu still opens by its URL.
  { url: '/console/#/org/acme/command', shows: (page) => page.getByTestId('count').filter({ hasText: /\d+ items/ }) },
  // The route in the path instead of the hash is the same page.
  { url: '/console/org/acme/gvc/shop/workload/web', shows: (page) => page.getByTestId('summary-Images'), at: /\/console\/#\/org\/acme\/gvc\/shop\/workload\/web$/ },
];

describe('console navigation', { skip: available ? false : 'Chromium is not installed' }, () => {
  let c: ConsoleKeel;
  let page: Page;
  let base: string;

  /** Opens a screen's URL as the address bar does and waits for what it shows, with no error on the page. */
  const renders = async (target: Page, screen: Screen) => {
    await target.goto(`${base}${screen.url}`);
    await screen.shows(target).first().waitFor({ timeout: WAIT });
    if (screen.at) assert.match(target.url(), screen.at, screen.url);
    assert.deepEqual(await target.getByRole('alert').allTextContents(), [], screen.url);
  };

  before(async () => {
    c = await startConsoleKeel();
    ({ page, base } = c);
    const { k } = c;
    for (const [path, body] of [
      ['/org/acme/gvc', { name: 'shop', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } }],
      ['/org/acme/gvc/shop/workload', { name: 'web', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.27', ports: [{ number: 80, protocol: 'http' }] }] } }],
      ['/org/acme/secret', { name: 'db', type: 'opaque', data: { payload: 'x' } }],
      ['/org/acme/serviceaccount', { name: 'deployer' }],
      ['/org/acme/domain', { name: 'shop.example.com', spec: { dnsMode: 'cname', gvcLink: '//gvc/shop' } }],
    ] as const) {
      const res = await k.call('POST', path, body);
      assert.equal(res.status, 201, JSON.stringify(res.body));
    }
  });
  after(async () => {
    await c?.close();
  });

  test('signed in, opening the console again in the same tab renders (it was a blank page); so does every route, opened directly or reloaded', async () => {
    await page.goto(`${base}/console/`);
    await signInHere(page, c.k.token);
    await page.getByRole('heading', { name: 'Org acme' }).waitFor({ timeout: WAIT });
    // The case that stayed blank: from a page of the console to its bare URL, in the same tab.
    await page.goto(`${base}/console/#/org/acme/gvc`);
    await page.getByRole('link', { name: 'shop', exact: true }).waitFor({ timeout: WAIT });
    await page.evaluate(() => ((globalThis as any).location.href = '/console'));
    await page.getByRole('heading', { name: 'Org acme' }).waitFor({ timeout: WAIT });
    await shot(page, 'reopened');
    // From every route to every next one in the list, as bookmarks are opened one after another.
    for (const screen of SCREENS) {
      await renders(page, screen);
      await page.reload();
      await screen.shows(page).first().waitFor({ timeout: WAIT });
    }
    // A link inside the console to its bare URL, clicked.
    await page.evaluate(() => {
      const doc = (globalThis as any).document;
      const a = doc.createElement('a');
      a.href = '/console/';
      a.textContent = 'console home';
      doc.body.prepend(a);
    });
    await page.getByRole('link', { name: 'console home' }).click();
    await page.getByRole('heading', { name: 'Org acme' }).waitFor({ timeout: WAIT });
    // Back from the org home returns to the page before it, not to a route that redirects again.
    await page.goBack();
    await page.getByTestId('summary-Images').waitFor({ timeout: WAIT });
  });

  test('signed out, every route shows the sign-in page; a deep link lands on its own page after sign-in', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#key').waitFor({ timeout: WAIT });
    for (const screen of SCREENS) {
      await page.goto(`${base}${screen.url}`);
      await page.locator('#key').waitFor({ timeout: WAIT });
      assert.equal(await page.getByRole('navigation', { name: 'Kinds' }).count(), 0, screen.url);
      await page.reload();
      await page.locator('#key').waitFor({ timeout: WAIT });
    }
    await axe(page, 'sign-in with a deep link');

    const deep = SCREENS.filter((s) => s.url.startsWith('/console/#/org/acme/'));
    assert.ok(deep.length > 10);
    for (const screen of deep) {
      await page.goto(`${base}${screen.url}`);
      const path = screen.url.replace('/console/#', '').split('?')[0];
      assert.equal(await page.getByTestId('after-signin').innerText({ timeout: WAIT }), `Sign in to open ${path}.`);
      await signInHere(page, c.k.token);
      await screen.shows(page).first().waitFor({ timeout: WAIT });
      assert.equal(page.url(), `${base}${screen.url}`, 'the link is where sign-in leads, not the org home');
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.locator('#key').waitFor({ timeout: WAIT });
    }
    // Signing in from the sign-in page itself (no page to return to) leads to the org home.
    await page.goto(`${base}/console/#/signin`);
    await signInHere(page, c.k.token);
    await page.getByRole('heading', { name: 'Org acme' }).waitFor({ timeout: WAIT });
  });

  test('a mangled or foreign link shows a message or the org home, never a blank page or another site', async () => {
    const cases: Array<[string, (page: Page) => ReturnType<Page['getByRole']>]> = [
      ['/console/#/org/acme/secret/%E0%A4%A', (p) => p.getByRole('alert').filter({ hasText: /404|400/ })],
      ['/console/#/org/acme/nosuchkind', (p) => p.getByRole('alert').filter({ hasText: "Unknown kind 'nosuchkind'." })],
      ['/console/#/org/not-my-org/secret', (p) => p.getByRole('alert').filter({ hasText: /403|404/ })],
      ['/console/#//evil.example.com/steal', (p) => p.getByRole('heading', { name: 'Org acme' })],
      ['/console/#/org/acme/-audit?fromEvent=%ZZ', (p) => p.getByRole('alert').filter({ hasText: 'fromEvent must be an ISO 8601 time' })],
    ];
    for (const [url, shows] of cases) {
      await page.goto(`${base}${url}`);
      await shows(page).waitFor({ timeout: WAIT });
      assert.equal(await page.getByRole('navigation', { name: 'Kinds' }).count(), 1, url);
    }
    // Signed out, a link to another site's address is no place to go after sign-in: the org home is.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.goto(`${base}/console/#//evil.example.com/steal`);
    await signInHere(page, c.k.token);
    await page.getByRole('heading', { name: 'Org acme' }).waitFor({ timeout: WAIT });
    assert.ok(page.url().startsWith(`${base}/console/#/org/acme`), page.url());
  });

  test('a key is per tab unless remembered: a new tab asks again; a remembered key opens any route in a new tab until sign-out', async () => {
    const context = page.context();
    // Signed in above without remembering: nothing on this machine, and a new tab asks for the key.
    assert.equal(await page.evaluate(() => (globalThis as any).localStorage.length), 0);
    const second = await context.newPage();
    await second.goto(`${base}/console/#/org/acme/gvc/shop`);
    await second.locator('#key').waitFor({ timeout: WAIT });
    await second.close();

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#key').waitFor({ timeout: WAIT });
    await signInHere(page, c.k.token, { remember: true });
    assert.equal(await page.evaluate(() => (globalThis as any).localStorage.getItem('keel.key')), c.k.token);
    for (const screen of SCREENS) {
      const tab = await context.newPage();
      await renders(tab, screen);
      await tab.close();
    }
    // A mistyped key on the sign-in page of another tab changes nothing for the tabs using the remembered one.
    const typo = await context.newPage();
    await typo.goto(`${base}/console/#/signin`);
    await typo.locator('#key').fill('not-a-key');
    await typo.getByRole('button', { name: 'Sign in', exact: true }).click();
    await typo.getByRole('alert').waitFor({ timeout: WAIT });
    assert.equal(await typo.evaluate(() => (globalThis as any).localStorage.getItem('keel.key')), c.k.token);
    await typo.close();
    // Sign-out in one tab forgets the key on this machine, and the other tabs show the sign-in page at once.
    const other = await context.newPage();
    await renders(other, SCREENS.find((s) => s.url.endsWith('/workload/web'))!);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#key').waitFor({ timeout: WAIT });
    await other.locator('#key').waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).localStorage.getItem('keel.key')), null);
    assert.equal(await other.evaluate(() => (globalThis as any).sessionStorage.getItem('keel.key')), null);
    const fresh = await context.newPage();
    await fresh.goto(`${base}/console/#/org/acme/secret/db`);
    await fresh.locator('#key').waitFor({ timeout: WAIT });
    await Promise.all([other.close(), fresh.close()]);
  });

  test('a remembered key the server no longer accepts is forgotten, and sign-in with another key returns to the page', async () => {
    const { k } = c;
    const made = await k.call('POST', '/org/acme/serviceaccount/deployer/-addKey', { description: 'remembered' });
    assert.ok(made.status === 200 || made.status === 201, JSON.stringify(made.body));
    await page.goto(`${base}/console/#/org/acme/secret/db`);
    await signInHere(page, made.body.key, { remember: true });
    await page.getByRole('alert').first().waitFor({ timeout: WAIT }); // the deployer may not read the secret: a 403, not a sign-out
    assert.match(await page.getByRole('alert').first().innerText(), /403/);
    assert.equal(await page.evaluate(() => (globalThis as any).localStorage.getItem('keel.key')), made.body.key);

    const keyName = (await k.call('GET', '/org/acme/serviceaccount/deployer')).body.keys.find((key: { description: string }) => key.description === 'remembered').name;
    assert.equal((await k.call('PATCH', '/org/acme/serviceaccount/deployer', { '$drop/keys': [keyName] })).status, 200);
    await page.reload();
    await page.getByRole('status').filter({ hasText: 'The server no longer accepts your key (401)' }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).localStorage.getItem('keel.key')), null, 'a refused key is not kept');
    assert.equal(await page.getByTestId('after-signin').innerText(), 'Sign in to open /org/acme/secret/db.');
    await shot(page, 'key-refused');
    await axe(page, 'sign-in after a refused key');
    await signInHere(page, k.token);
    await page.getByTestId('summary-Type').getByText('opaque').waitFor({ timeout: WAIT });
    assert.match(page.url(), /#\/org\/acme\/secret\/db$/);
  });

  test('nothing was requested from any other host', () => {
    assert.deepEqual(c.external, []);
  });
});
