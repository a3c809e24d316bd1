// The console as a newcomer first meets it, in Chromium: every list page of the menu loads without
// a request that fails or an error in the browser's console (whether to offer "Create" comes from
// the permissions Keel reports the key holds, not from a write that fails), and the audit trail
// shows the latest change first, with Keel's own status events hidden until asked for.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { axe, chromiumAvailable, failuresOf, shot, signInHere, startConsoleKeel, WAIT, type ConsoleKeel } from './support/console.js';
import type { TestKeel } from './support/keel.js';
import { waitFor } from './support/wait.js';

const available = chromiumAvailable();

describe('console for a newcomer', { skip: available ? false : 'Chromium is not installed' }, () => {
  let c: ConsoleKeel;
  let k: TestKeel;
  let page: Page;
  let failures: ReturnType<typeof failuresOf>;

  const signIn = async (key: string) => {
    await page.goto(`${c.base}/console/`);
    await signInHere(page, key);
  };

  before(async () => {
    c = await startConsoleKeel({ reconcile: true, reconcileStepMs: 100 });
    ({ k, page } = c);
    failures = failuresOf(page);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'browse', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } })).status, 201);
    const web = { name: 'web', spec: { type: 'standard', containers: [{ name: 'main', image: 'nginx:1.25', ports: [{ protocol: 'http', number: 80 }] }] } };
    assert.equal((await k.call('POST', '/org/acme/gvc/browse/workload', web)).status, 201);
  });
  after(async () => {
    await c?.close();
  });

  test('every list page in the menu loads with no failed request and no console error; Create shows from the key\'s permissions', async () => {
    await signIn(k.token);
    await page.goto(`${c.base}/console/#/org/acme/gvc/browse/workload`);
    await page.getByTestId('count').filter({ hasText: /\d+ items/ }).waitFor({ timeout: WAIT });
    const menu = page.getByRole('navigation', { name: 'Kinds' });
    const links = await menu.getByRole('link').evaluateAll((as) => as.map((a) => ({ name: a.textContent ?? '', href: a.getAttribute('href') ?? '' })));
    assert.ok(links.length > 15, JSON.stringify(links));
    failures.take();
    for (const link of links) {
      await menu.getByRole('link', { name: link.name, exact: true }).first().click();
      await page.waitForURL((url) => url.hash === link.href, { timeout: WAIT });
      if (link.href.endsWith('/-audit')) await page.getByTestId('audit-row').first().waitFor({ timeout: WAIT });
      else {
        await page.getByTestId('count').filter({ hasText: /\d+ items/ }).waitFor({ timeout: WAIT });
        // The superuser may create every kind the registry lets clients create.
        if (['secret', 'gvc', 'workload', 'policy'].includes(link.name)) await page.getByRole('link', { name: `Create ${link.name}` }).waitFor({ timeout: WAIT });
      }
      assert.deepEqual(failures.take(), [], `the ${link.name} page`);
    }

    // A key that may only view workloads sees no Create, and nothing fails either.
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'reader' })).status, 201);
    const policy = { name: 'reader-workloads', targetKind: 'workload', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/reader'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    const reader = (await k.call('POST', '/org/acme/serviceaccount/reader/-addKey', { description: 'reader' })).body.key as string;
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#key').waitFor({ timeout: WAIT });
    await page.goto(`${c.base}/console/#/org/acme/gvc/browse/workload`);
    await signInHere(page, reader);
    await page.getByRole('link', { name: 'web', exact: true }).waitFor({ timeout: WAIT });
    await page.getByTestId('count').filter({ hasText: /1 items/ }).waitFor({ timeout: WAIT });
    assert.equal(await page.getByRole('link', { name: /^Create/ }).count(), 0);
    assert.deepEqual(failures.take(), []);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#key').waitFor({ timeout: WAIT });
  });

  test('the audit trail lists the latest change first and hides Keel\'s status events until asked for', async () => {
    await waitFor('status events', async () => (await k.call('GET', '/org/acme/gvc/browse/workload/web/deployment')).body.items?.[0]?.status?.ready, (ready) => ready === true);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/browse', { description: 'the latest change' })).status, 200);
    await signIn(k.token);
    await page.goto(`${c.base}/console/#/org/acme/-audit`);
    await page.getByTestId('audit-row').first().waitFor({ timeout: WAIT });
    const first = page.getByTestId('audit-row').first();
    assert.equal(await first.getByTestId('audit-resource').innerText(), 'gvc/browse');
    assert.equal(await first.getByTestId('audit-action').innerText(), 'edit');
    const actions = await page.getByTestId('audit-action').allInnerTexts();
    assert.ok(actions.length > 3 && !actions.includes('status'), JSON.stringify(actions));
    const times = (await page.getByTestId('audit-time').allInnerTexts()).map((t) => Date.parse(t));
    assert.deepEqual(times, [...times].sort((a, b) => b - a), 'newest first');
    await shot(page, 'audit-newest-first');
    await axe(page, 'audit trail');

    await page.getByLabel(/Show Keel's status events/).check();
    await page.getByTestId('audit-action').filter({ hasText: /^status$/ }).first().waitFor({ timeout: WAIT });
    assert.match(page.url(), /showStatus=1/);
    const subjects = await page.getByTestId('audit-row').filter({ has: page.getByTestId('audit-action').filter({ hasText: /^status$/ }) }).getByTestId('audit-subject').allInnerTexts();
    assert.ok(subjects.length > 0 && subjects.every((s) => s === 'keel'), JSON.stringify(subjects));
    await page.getByLabel(/Show Keel's status events/).uncheck();
    await page.waitForURL((url) => !url.hash.includes('showStatus'), { timeout: WAIT });
    await page.getByTestId('audit-row').first().waitFor({ timeout: WAIT });
    await waitFor('the status events hidden again', () => page.getByTestId('audit-action').allInnerTexts(), (a) => a.length > 0 && !a.includes('status'));
    assert.deepEqual(failures.take(), []);
  });
});
