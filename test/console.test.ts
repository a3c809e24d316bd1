// The web console at /console, driven in a real headless Chromium (Debian's package) against a Keel
// with its reconcilers on: sign-in, every kind's list, create and live deployments, YAML edit with
// the server's dry-run diff, a conflict, history with diff and restore, the audit trail, and a
// limited key. Each main screen is checked with axe-core and kept as a screenshot in
// test-output/console/.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { stringify } from 'yaml';
import { axe as axeOf, chromiumAvailable, shot as shotOf, signInHere, startConsoleKeel, typeInEditor as typeIn, WAIT, type ConsoleKeel } from './support/console.js';
import type { TestKeel } from './support/keel.js';

const available = chromiumAvailable();

describe('console', { skip: available ? false : 'Chromium is not installed' }, () => {
  let c: ConsoleKeel;
  let k: TestKeel;
  let page: Page;
  let base: string;

  const open = async (hash: string) => {
    await page.goto(`${base}/console/#${hash}`);
  };
  const shot = (name: string) => shotOf(page, name);
  const axe = (screen: string) => axeOf(page, screen);
  const typeInEditor = (text: string) => typeIn(page, text);
  const signIn = async (key: string) => {
    await page.goto(`${base}/`);
    await page.waitForURL(/\/console\//, { timeout: WAIT });
    await signInHere(page, key);
  };
  const keyFor = async (name: string, policy?: Record<string, unknown>) => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
    if (policy) assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    return (await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'console test' })).body.key as string;
  };

  before(async () => {
    // Deployments take a few steps to become ready, slow enough to see them change on the page; fault
    // injection holds one back until the test has seen it not ready.
    c = await startConsoleKeel({ reconcile: true, reconcileStepMs: 400, faults: true });
    ({ k, page, base } = c);
  });
  after(async () => {
    await c?.close();
  });

  test('the initial JavaScript stays within 300 KB gzipped; the editor is a separate chunk', async () => {
    const html = await (await fetch(`${base}/console/`)).text();
    const scripts = [...html.matchAll(/<script[^>]+src="([^"]+)"/g), ...html.matchAll(/<link[^>]+rel="modulepreload"[^>]+href="([^"]+)"/g)].map((m) => m[1]);
    assert.ok(scripts.length >= 1, html);
    const { gzipSync } = await import('node:zlib');
    let total = 0;
    for (const src of scripts) {
      const res = await fetch(`${base}${src}`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /javascript/);
      assert.match(res.headers.get('cache-control') ?? '', /immutable/);
      total += gzipSync(Buffer.from(await res.arrayBuffer())).length;
    }
    assert.ok(total <= 300 * 1024, `initial JavaScript is ${total} bytes gzipped`);
    assert.ok(!scripts.some((s) => s.includes('editor')), 'the editor chunk is not loaded up front');
  });

  test('sign in with a pasted key; the key stays in the tab session; sign-out clears it', async () => {
    await page.goto(`${base}/`);
    await page.waitForURL(/\/console\//, { timeout: WAIT });
    await page.locator('#key').waitFor();
    await shot('signin');
    await axe('sign-in');
    await page.locator('#key').fill('not-a-key');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('alert').waitFor({ timeout: WAIT });
    await signIn(k.token);
    await page.getByRole('heading', { name: 'Org acme' }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).sessionStorage.getItem('keel.key')), k.token);
    assert.equal(await page.evaluate(() => (globalThis as any).localStorage.length), 0);
    await shot('home');
    await axe('org home');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#key').waitFor();
    assert.equal(await page.evaluate(() => (globalThis as any).sessionStorage.getItem('keel.key')), null);
    await signIn(k.token);
  });

  test('every kind of the registry has a list that loads without an error, in the menu or not', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'browse' })).status, 201);
    const kinds = (await k.call('GET', '/-kinds', undefined, { token: null })).body.items as Array<{ kind: string; scope: string; operations: Record<string, boolean> }>;
    const shown = kinds.filter((d) => d.kind !== 'org' && (d.operations.create || d.operations.update || d.operations.delete));
    assert.ok(shown.length > 15);
    for (const def of shown) {
      const path = def.scope === 'gvc' ? `/org/acme/gvc/browse/${def.kind}` : `/org/acme/${def.kind}`;
      await open(path);
      await page.getByRole('heading', { name: new RegExp(`^${def.kind}`) }).waitFor({ timeout: WAIT });
      await page.getByTestId('count').filter({ hasText: /\d+ items/ }).waitFor({ timeout: WAIT });
      assert.equal(await page.getByRole('alert').count(), 0, `${def.kind}: ${await page.getByRole('alert').allTextContents()}`);
    }
    assert.equal((await k.call('POST', '/org/acme/gvc/browse/volumeset', { name: 'data', spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd', fileSystemType: 'ext4' } })).status, 201);
    await open('/org/acme/gvc/browse/volumeset/data');
    await page.getByRole('heading', { name: 'Volumes per location' }).waitFor({ timeout: WAIT });
    await page.getByRole('heading', { name: 'Commands' }).waitFor({ timeout: WAIT });
    await open('/org/acme/location');
    await page.getByTestId('count').filter({ hasText: /\d+ items/ }).waitFor({ timeout: WAIT });
    assert.ok((await page.getByRole('row').count()) > 5, 'built-in locations are listed');
    await shot('list');
    await axe('list');
  });

  test('create a GVC and a workload from templates; its deployment becomes ready without a reload', async () => {
    await open('/org/acme/gvc/-new');
    await typeInEditor(stringify({ kind: 'gvc', name: 'shop', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } }));
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.waitForURL(/#\/org\/acme\/gvc\/shop$/, { timeout: WAIT });
    assert.equal((await k.call('GET', '/org/acme/gvc/shop')).status, 200);

    await open('/org/acme/gvc/shop/workload/-new');
    await page.locator('.editor .cm-content').first().waitFor({ timeout: WAIT });
    const template = await page.locator('.editor .cm-content').first().innerText();
    assert.match(template, /containers/, 'the workload template has a container');
    await typeInEditor(template.replace('new-workload', 'web'));
    await page.evaluate(() => ((globalThis as any).__sameDocument = true));
    const hold = { scenario: 'deploymentNeverReady', kind: 'workload', path: '/org/acme/gvc/shop/workload/web' };
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [hold] })).status, 200);
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.waitForURL(/#\/org\/acme\/gvc\/shop\/workload\/web$/, { timeout: WAIT });
    await page.getByTestId('deployment-ready').filter({ hasText: /^Not ready$/ }).first().waitFor({ timeout: WAIT });
    assert.equal((await k.call('DELETE', '/-admin/faults')).status, 202);
    await page.getByTestId('deployment-ready').filter({ hasText: /^Ready$/ }).first().waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).__sameDocument), true, 'the page was not reloaded');
    await shot('workload');
    await axe('workload');
  });

  test('edit in YAML: the dry run shows the diff and saves nothing; the save carries the version', async () => {
    const before = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body;
    await open('/org/acme/gvc/shop/workload/web?tab=yaml');
    await page.locator('.editor .cm-content').first().waitFor({ timeout: WAIT });
    const text = await page.locator('.editor .cm-content').first().innerText();
    await typeInEditor(text.replace(/^description: .*$/m, 'description: edited in the console'));
    await page.getByRole('button', { name: 'Review changes (dry run)' }).click();
    const review = page.getByTestId('review');
    await review.getByText('edited in the console').first().waitFor({ timeout: WAIT });
    assert.equal((await k.call('GET', '/org/acme/gvc/shop/workload/web')).body.version, before.version, 'the dry run saved nothing');
    await shot('edit-diff');
    await axe('edit diff');
    await page.getByRole('button', { name: `Save version ${before.version + 1}` }).click();
    await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor({ timeout: WAIT });
    const after = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body;
    assert.equal(after.description, 'edited in the console');
    assert.equal(after.version, before.version + 1);
  });

  test('a save of a version someone changed meanwhile is refused and shows what changed', async () => {
    await open('/org/acme/gvc/shop/workload/web?tab=yaml');
    await page.locator('.editor .cm-content').first().waitFor({ timeout: WAIT });
    const text = await page.locator('.editor .cm-content').first().innerText();
    assert.equal((await k.call('PATCH', '/org/acme/gvc/shop/workload/web', { description: 'changed by someone else' })).status, 200);
    await typeInEditor(text.replace(/^description: .*$/m, 'description: my stale edit'));
    await page.getByRole('button', { name: 'Review changes (dry run)' }).click();
    const conflict = page.getByTestId('conflict');
    await conflict.waitFor({ timeout: WAIT });
    await conflict.getByText('changed by someone else').first().waitFor({ timeout: WAIT });
    assert.match((await page.getByRole('alert').allTextContents()).join(' '), /409/);
    assert.equal((await k.call('GET', '/org/acme/gvc/shop/workload/web')).body.description, 'changed by someone else');
    await shot('conflict');
  });

  test('history lists the versions, diffs any two, and restores one as a new version', async () => {
    const current = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body;
    await open('/org/acme/gvc/shop/workload/web?tab=history');
    await page.getByTestId('version-row').nth(2).waitFor({ timeout: WAIT });
    const rows = await page.getByTestId('version-row').count();
    assert.equal(rows, current.version);
    await page.getByRole('checkbox', { name: /Compare version 1 / }).check();
    await page.getByRole('checkbox', { name: new RegExp(`Compare version ${current.version} `) }).check();
    await page.getByTestId('diff').getByText(`Version ${current.version}`).waitFor({ timeout: WAIT });
    await page.getByTestId('diff').getByText('changed by someone else').first().waitFor({ timeout: WAIT });
    await shot('history');
    await axe('history');
    await page.getByRole('button', { name: 'Restore version 1' }).click();
    await page.getByRole('status').filter({ hasText: /Restored version 1/ }).waitFor({ timeout: WAIT });
    const first = (await k.call('GET', '/org/acme/gvc/shop/workload/web/-history')).body.items.at(-1).resource;
    const restored = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body;
    assert.equal(restored.version, current.version + 1);
    assert.equal(restored.description, first.description);
    assert.notEqual(restored.description, current.description);
    assert.deepEqual(restored.spec, first.spec);
    const history = (await k.call('GET', '/org/acme/gvc/shop/workload/web/-history')).body.items;
    assert.equal(history[0].subject.name, 'admin');
    assert.equal(history[0].version, current.version + 1);
  });

  test('the audit trail filters by subject and shows each raw event', async () => {
    const robot = await keyFor('robot', { name: 'robot-edits', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['edit'], principalLinks: ['//serviceaccount/robot'] }] });
    assert.equal((await k.call('PATCH', '/org/acme/gvc/shop', { description: 'robot was here' }, { token: robot })).status, 200);
    await open('/org/acme/-audit');
    await page.getByTestId('audit-row').first().waitFor({ timeout: WAIT });
    await page.getByLabel('Subject').fill('robot');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.waitForURL(/subjectName=robot/, { timeout: WAIT });
    await page.getByTestId('audit-subject').first().filter({ hasText: 'robot' }).waitFor({ timeout: WAIT });
    const subjects = await page.getByTestId('audit-subject').allTextContents();
    assert.ok(subjects.length >= 1);
    assert.ok(subjects.every((s) => s === 'robot'), subjects.join(','));
    await page.getByText('Raw JSON').first().click();
    await page.getByText('"robot was here"').first().waitFor({ timeout: WAIT });
    await shot('audit');
    await axe('audit trail');
  });

  test('lists filter by name and tags through -query, sort, and show new items live', async () => {
    for (const [name, team] of [['alpha-one', 'red'], ['alpha-two', 'blue'], ['beta-one', 'red']]) {
      assert.equal((await k.call('POST', '/org/acme/gvc', { name, tags: { team } })).status, 201);
    }
    await open('/org/acme/gvc');
    await page.getByTestId('count').filter({ hasText: /\d+ items/ }).waitFor({ timeout: WAIT });
    const rowNames = () => page.locator('[role=rowgroup].rows [role=row] a').allTextContents();
    /** Waits until the loaded list (not a count left from the previous filter) shows exactly these rows. */
    const rowsAre = (names: string[]) =>
      page.waitForFunction(
        (expected) => {
          const doc = (globalThis as any).document;
          const shown = [...doc.querySelectorAll('[role=rowgroup].rows [role=row] a')].map((a: any) => a.textContent).sort();
          return /^\d+ items/.test(doc.querySelector('[data-testid=count]')?.textContent ?? '') && JSON.stringify(shown) === JSON.stringify(expected);
        },
        [...names].sort(),
        { timeout: WAIT },
      );
    await page.getByLabel('Name contains').fill('alpha');
    await page.getByRole('button', { name: 'Filter' }).click();
    await rowsAre(['alpha-one', 'alpha-two']);
    await page.getByTestId('count').filter({ hasText: /^2 items/ }).waitFor({ timeout: WAIT });
    assert.deepEqual(await rowNames(), ['alpha-one', 'alpha-two']);
    await page.getByRole('button', { name: /^Name/ }).click();
    await page.waitForFunction(() => (globalThis as any).document.querySelector('[role=rowgroup].rows [role=row] a')?.textContent === 'alpha-two', undefined, { timeout: WAIT });
    await page.getByLabel('Name contains').fill('');
    await page.getByLabel(/^Tags/).fill('team=red');
    await page.getByRole('button', { name: 'Filter' }).click();
    await rowsAre(['alpha-one', 'beta-one']);
    await page.getByTestId('count').filter({ hasText: /^2 items/ }).waitFor({ timeout: WAIT });
    await page.getByLabel(/^Tags/).fill('');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByTestId('count').filter({ hasText: /live/ }).or(page.getByTestId('count').filter({ hasText: /items/ })).first().waitFor({ timeout: WAIT });
    await page.evaluate(() => ((globalThis as any).__sameDocument = 'list'));
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'arrived-live' })).status, 201);
    await page.locator('[role=rowgroup].rows [role=row] a', { hasText: 'arrived-live' }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).__sameDocument), 'list');
  });

  test('service account: mint a key shown once with a copy button, then revoke it', async () => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'deployer' })).status, 201);
    await open('/org/acme/serviceaccount/deployer');
    await page.getByLabel('Key description').fill('from the console');
    await page.getByRole('button', { name: 'Mint key' }).click();
    const minted = (await page.getByTestId('minted-key').innerText({ timeout: WAIT })).trim();
    assert.equal((await k.call('GET', '/org/acme/serviceaccount/deployer', undefined, { token: minted })).status !== 401, true, 'the minted key authenticates');
    await page.getByRole('button', { name: 'Copy' }).waitFor();
    await shot('serviceaccount');
    await axe('service account');
    const keyName = (await k.call('GET', '/org/acme/serviceaccount/deployer')).body.keys[0].name;
    await page.getByRole('button', { name: `Revoke ${keyName}` }).click();
    await page.getByRole('button', { name: `Revoke ${keyName}` }).waitFor({ state: 'detached', timeout: WAIT });
    assert.deepEqual((await k.call('GET', '/org/acme/serviceaccount/deployer')).body.keys ?? [], []);
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: minted })).status, 401, 'the revoked key no longer works');
  });

  test('secret values stay hidden until revealed; policy bindings are edited with the kind permissions', async () => {
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'db-password', type: 'opaque', data: { payload: 'hunter2-console', encoding: 'plain' } })).status, 201);
    await open('/org/acme/secret/db-password');
    await page.getByRole('button', { name: 'Reveal' }).waitFor({ timeout: WAIT });
    assert.ok(!(await page.content()).includes('hunter2-console'));
    await page.getByRole('button', { name: 'Reveal' }).click();
    await page.getByTestId('secret-value').filter({ hasText: 'hunter2-console' }).waitFor({ timeout: WAIT });
    await open('/org/acme/secret/db-password?tab=history');
    await page.getByTestId('version-row').first().waitFor({ timeout: WAIT });
    assert.ok(!(await page.content()).includes('hunter2-console'), 'history never shows the value');

    assert.equal((await k.call('POST', '/org/acme/policy', { name: 'readers', targetKind: 'secret', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/deployer'] }] })).status, 201);
    await open('/org/acme/policy/readers');
    await page.getByRole('checkbox', { name: 'reveal' }).check({ timeout: WAIT });
    await page.getByRole('button', { name: 'Save bindings' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor({ timeout: WAIT });
    const policy = (await k.call('GET', '/org/acme/policy/readers')).body;
    assert.deepEqual([...policy.bindings[0].permissions].sort(), ['reveal', 'view']);
    await shot('policy');
    await axe('policy');
    await open('/org/acme/secret/db-password?tab=access');
    await page.getByRole('table', { name: 'Who can do what' }).getByText(/deployer/).first().waitFor({ timeout: WAIT });
  });

  test("a domain's page lists the DNS records to create, as its status reports them", async () => {
    assert.equal((await k.call('POST', '/org/acme/domain', { name: 'shop.example.com', spec: { dnsMode: 'cname', gvcLink: '//gvc/shop' } })).status, 201);
    await open('/org/acme/domain/shop.example.com');
    const records = page.getByRole('table', { name: 'DNS records' });
    await records.waitFor({ timeout: WAIT });
    await records.getByRole('row').filter({ hasText: 'TXT' }).waitFor({ timeout: WAIT });
    const expected = (await k.call('GET', '/org/acme/domain/shop.example.com')).body.status.dnsConfig as Array<{ type: string; host: string; value: string; ttl: number }>;
    assert.ok(expected.some((r) => r.type === 'CNAME'), JSON.stringify(expected));
    const shown = await records.locator('tbody tr').evaluateAll((rows) => rows.map((r: any) => [...r.querySelectorAll('td')].map((td: any) => td.textContent)));
    assert.deepEqual(shown, expected.map((r) => [r.type, r.host, r.value, String(r.ttl)]));
    // The domain's own status moves on while the page is open.
    await page.getByTestId('status-summary').filter({ hasText: /^ready$/ }).waitFor({ timeout: WAIT });
    await page.getByText('Domain status: ready').waitFor({ timeout: WAIT });
    await shot('domain');
    await axe('domain');
  });

  test('cron workload: Run now starts a command whose stages advance on the page without a reload', async () => {
    const created = await k.call('POST', '/org/acme/gvc/shop/workload', { name: 'nightly', spec: { type: 'cron', containers: [{ name: 'main', image: 'busybox:1' }], job: { schedule: '0 3 * * *' } } });
    assert.equal(created.status, 201);
    await open('/org/acme/gvc/shop/workload/nightly');
    await page.getByTestId('deployment-ready').filter({ hasText: /^Ready$/ }).first().waitFor({ timeout: WAIT });
    assert.equal(await page.getByText('No commands.').count(), 1);
    // Every stage the page shows, in order, as it changes.
    await page.evaluate(() => {
      const web = globalThis as any;
      web.__sameDocument = 'cron';
      web.__stages = [];
      new web.MutationObserver(() => {
        const stage = web.document.querySelector('[data-testid=command-stage]')?.textContent;
        if (stage && web.__stages.at(-1) !== stage) web.__stages.push(stage);
      }).observe(web.document.body, { subtree: true, childList: true, characterData: true });
    });
    await page.getByRole('button', { name: 'Run now in aws-us-east-2' }).click();
    await page.getByRole('status').filter({ hasText: 'Run requested in aws-us-east-2.' }).waitFor({ timeout: WAIT });
    await page.getByTestId('command-stage').filter({ hasText: /^completed$/ }).waitFor({ timeout: WAIT });
    const stages = await page.evaluate(() => (globalThis as any).__stages as string[]);
    // Each stage shows as its event arrives, in order, and none goes back.
    assert.deepEqual(stages, ['pending', 'running', 'completed']);
    assert.equal(await page.evaluate(() => (globalThis as any).__sameDocument), 'cron', 'the page was not reloaded');
    const commands = (await k.call('GET', '/org/acme/gvc/shop/workload/nightly/-command')).body.items;
    assert.equal(commands.length, 1);
    assert.deepEqual([commands[0].type, commands[0].spec.location, commands[0].lifecycleStage], ['runCronWorkload', 'aws-us-east-2', 'completed']);
    await shot('cron');
    await axe('cron workload');
  });

  test('workload: force redeploy and suspend/resume show in the deployments live', async () => {
    await open('/org/acme/gvc/shop/workload/web');
    await page.getByTestId('deployment-ready').filter({ hasText: /^Ready$/ }).first().waitFor({ timeout: WAIT });
    await page.evaluate(() => ((globalThis as any).__sameDocument = 'actions'));
    const before = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body.version as number;
    await page.getByRole('button', { name: 'Force redeploy' }).click();
    await page.getByRole('status').filter({ hasText: 'Redeployment requested.' }).waitFor({ timeout: WAIT });
    // The new version deploys (…) and then replaces the old one (✓) in the location.
    await page.getByTestId('deployment-versions').filter({ hasText: `v${before + 1} ✓` }).waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId('deployment-versions').first().innerText(), `v${before + 1} ✓`);
    assert.equal((await k.call('GET', '/org/acme/gvc/shop/workload/web')).body.version, before + 1);

    // The location's own options say "not suspended": Suspend must override them as well, as the CLI's stop does.
    const local = await k.call('PATCH', '/org/acme/gvc/shop/workload/web', { spec: { localOptions: [{ location: '//location/aws-us-east-2', suspend: false, capacityAI: false }] } });
    assert.equal(local.status, 200, JSON.stringify(local.body));
    await page.getByTestId('deployment-versions').filter({ hasText: `v${before + 2} ✓` }).waitFor({ timeout: WAIT });
    await page.getByRole('button', { name: 'Suspend' }).click();
    await page.getByTestId('suspended').waitFor({ timeout: WAIT });
    await page.getByTestId('deployment-ready').filter({ hasText: /^Not ready$/ }).first().waitFor({ timeout: WAIT });
    const suspended = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body.spec;
    assert.equal(suspended.defaultOptions.suspend, true);
    assert.deepEqual(suspended.localOptions.map((o: { suspend: boolean; capacityAI: boolean }) => [o.suspend, o.capacityAI]), [[true, false]], 'the location keeps its other options');
    await axe('suspended workload');
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByTestId('suspended').waitFor({ state: 'detached', timeout: WAIT });
    await page.getByTestId('deployment-ready').filter({ hasText: /^Ready$/ }).first().waitFor({ timeout: WAIT });
    const resumed = (await k.call('GET', '/org/acme/gvc/shop/workload/web')).body.spec;
    assert.deepEqual([resumed.defaultOptions.suspend, resumed.localOptions[0].suspend], [false, false]);
    assert.equal(await page.evaluate(() => (globalThis as any).__sameDocument), 'actions', 'the page was not reloaded');
  });

  test("the org switcher lists the key's orgs and switching shows the other org's items", async () => {
    assert.equal((await k.call('POST', '/org', { name: 'beta-org' })).status, 201);
    assert.equal((await k.call('POST', '/org/beta-org/secret', { name: 'only-in-beta', type: 'opaque', data: { payload: 'b' } })).status, 201);
    await open('/org/acme/secret');
    await page.reload();
    const rows = page.locator('[role=rowgroup].rows [role=row] a');
    await rows.filter({ hasText: 'db-password' }).waitFor({ timeout: WAIT });
    const orgSelect = page.getByRole('combobox', { name: 'Org' });
    assert.deepEqual(await orgSelect.locator('option').allTextContents(), ['acme', 'beta-org']);
    await orgSelect.selectOption('beta-org');
    await page.waitForURL(/#\/org\/beta-org\/secret$/, { timeout: WAIT });
    await rows.filter({ hasText: 'only-in-beta' }).waitFor({ timeout: WAIT });
    await page.getByTestId('count').filter({ hasText: /^1 items/ }).waitFor({ timeout: WAIT });
    assert.deepEqual(await rows.allTextContents(), ['only-in-beta']);
    assert.equal(await page.getByRole('combobox', { name: 'GVC' }).inputValue(), '', "acme's GVC is not offered in beta-org");
    assert.equal(await page.getByRole('navigation', { name: 'Kinds' }).getByRole('link', { name: 'secret', exact: true }).getAttribute('href'), '#/org/beta-org/secret');
    await axe('other org');
    await orgSelect.selectOption('acme');
    await page.waitForURL(/#\/org\/acme\/secret$/, { timeout: WAIT });
    await rows.filter({ hasText: 'db-password' }).waitFor({ timeout: WAIT });
    assert.equal(await rows.filter({ hasText: 'only-in-beta' }).count(), 0);
  });

  test('a minted key is shown once; its copy button puts it on the clipboard', async () => {
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
    await open('/org/acme/serviceaccount/deployer');
    await page.getByLabel('Key description').fill('shown once');
    await page.getByRole('button', { name: 'Mint key' }).click();
    const minted = (await page.getByTestId('minted-key').innerText({ timeout: WAIT })).trim();
    assert.match(minted, /^s\S{15}\.\S+\.\S+$/);
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByRole('button', { name: 'Copied' }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).navigator.clipboard.readText()), minted);
    await page.reload();
    await page.getByRole('table', { name: 'Keys' }).getByText('shown once').waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId('minted-key').count(), 0, 'the key is not shown again');
    assert.ok(!(await page.content()).includes(minted.split('.')[2]), "the key's secret is nowhere on the page");
  });

  test('a key without reveal sees a secret without its value and without the Reveal control', async () => {
    const peeker = await keyFor('peeker', { name: 'peeker-secrets', targetKind: 'secret', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/peeker'] }] });
    assert.equal((await k.call('GET', '/org/acme/secret/db-password/-reveal', undefined, { token: peeker })).status, 403);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await signIn(peeker);
    try {
      await open('/org/acme/secret/db-password');
      await page.getByTestId('no-reveal').waitFor({ timeout: WAIT });
      assert.equal(await page.getByRole('button', { name: 'Reveal' }).count(), 0);
      assert.ok(!(await page.content()).includes('hunter2-console'));
      await shot('secret-no-reveal');
      await axe('secret without reveal');
    } finally {
      await page.getByRole('button', { name: 'Sign out' }).click();
      await signIn(k.token);
    }
  });

  test('secrets are created from the form of their type; a server validation error shows at its field', async () => {
    await open('/org/acme/secret/-new');
    const type = page.getByLabel('Type');
    await type.waitFor({ timeout: WAIT });
    // Every type's form is accessible.
    for (const value of await type.locator('option').evaluateAll((os) => os.map((o: any) => o.value))) {
      await type.selectOption(value);
      await page.getByRole('group', { name: / data$/ }).waitFor();
      await axe(`secret form (${value})`);
    }
    assert.equal(await type.locator('option').count(), 12);

    // userpass without its password: the server's 400 is shown at the password field, nothing is created.
    await type.selectOption('userpass');
    await page.getByLabel(/^Name/).fill('app-login');
    await page.getByLabel(/^Username/).fill('app');
    await page.getByRole('button', { name: 'Create' }).click();
    const passwordError = page.locator('#secret-data-password-error');
    await passwordError.waitFor({ timeout: WAIT });
    assert.equal(await passwordError.innerText(), 'data.password is required');
    assert.equal(await page.getByLabel(/^Password/).getAttribute('aria-invalid'), 'true');
    assert.match(await page.getByRole('alert').innerText(), /invalid secret: data\.password is required \(400 bad_request\)/);
    await shot('secret-form-error');
    await axe('secret form with an error');
    assert.equal((await k.call('GET', '/org/acme/secret/app-login')).status, 404);
    await page.getByLabel(/^Password/).fill('s3cret-from-form');
    await page.getByRole('button', { name: 'Check (dry run)' }).click();
    await page.getByRole('status').filter({ hasText: 'The server accepts this secret.' }).waitFor({ timeout: WAIT });
    assert.equal((await k.call('GET', '/org/acme/secret/app-login')).status, 404, 'the dry run created nothing');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.waitForURL(/#\/org\/acme\/secret\/app-login$/, { timeout: WAIT });
    const userpass = (await k.call('GET', '/org/acme/secret/app-login/-reveal')).body;
    assert.deepEqual([userpass.type, userpass.data], ['userpass', { username: 'app', password: 's3cret-from-form' }]);

    // A dictionary of two entries.
    await open('/org/acme/secret/-new');
    await page.getByLabel('Type').selectOption('dictionary');
    await page.getByLabel(/^Name/).fill('app-config');
    await page.getByLabel('Key 1').fill('REGION');
    await page.getByLabel('Value 1').fill('eu-west-1');
    await page.getByRole('button', { name: 'Add entry' }).click();
    await page.getByLabel('Key 2').fill('MODE');
    await page.getByLabel('Value 2').fill('fast');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.waitForURL(/#\/org\/acme\/secret\/app-config$/, { timeout: WAIT });
    assert.deepEqual((await k.call('GET', '/org/acme/secret/app-config/-reveal')).body.data, { REGION: 'eu-west-1', MODE: 'fast' });

    // ECR: a list field is sent as an array.
    await open('/org/acme/secret/-new');
    await page.getByLabel('Type').selectOption('ecr');
    await page.getByLabel(/^Name/).fill('registry');
    await page.getByLabel(/^Access key/).fill('AKIAEXAMPLE');
    await page.getByLabel(/^Secret key/).fill('ecr-secret');
    await page.getByLabel(/^Repositories/).fill('1.dkr.ecr.us-east-1.amazonaws.com/a\n1.dkr.ecr.us-east-1.amazonaws.com/b\n');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.waitForURL(/#\/org\/acme\/secret\/registry$/, { timeout: WAIT });
    assert.deepEqual((await k.call('GET', '/org/acme/secret/registry/-reveal')).body.data, {
      accessKey: 'AKIAEXAMPLE',
      secretKey: 'ecr-secret',
      repos: ['1.dkr.ecr.us-east-1.amazonaws.com/a', '1.dkr.ecr.us-east-1.amazonaws.com/b'],
    });

    // A name the server refuses: its message shows at the name field.
    await open('/org/acme/secret/-new');
    await page.getByLabel('Type').selectOption('docker');
    await page.getByLabel(/^Name/).fill('Not A Name');
    await page.getByLabel('JSON document').fill('{"auths": {}}');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.locator('#secret-name-error').waitFor({ timeout: WAIT });
    assert.match(await page.locator('#secret-name-error').innerText(), /^name /);
    // The form's body can be finished in YAML.
    await page.getByRole('button', { name: 'Edit as YAML' }).click();
    await page.locator('.editor .cm-content').first().getByText('type: docker').waitFor({ timeout: WAIT });
    assert.match(await page.locator('.editor .cm-content').first().innerText(), /name: Not A Name[\s\S]*data: '\{"auths": \{\}\}'/);
  });

  test('a list misses no change made between its read and its watch; live items outside a filter stay out', async () => {
    // The watch request is held until a change has been made after the list was read.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const watchPattern = /\/-watch\?/;
    await page.route(watchPattern, async (route) => {
      await held;
      await route.continue();
    });
    try {
      await open('/org/acme/gvc');
      await page.locator('[role=rowgroup].rows [role=row] a', { hasText: 'shop' }).waitFor({ timeout: WAIT });
      await page.getByTestId('count').filter({ hasText: /^\d+ items$/ }).waitFor({ timeout: WAIT });
      assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'between-reads', tags: { team: 'red' } })).status, 201);
      release();
      await page.locator('[role=rowgroup].rows [role=row] a', { hasText: 'between-reads' }).waitFor({ timeout: WAIT });
    } finally {
      release();
      await page.unroute(watchPattern);
    }
    await page.getByLabel(/^Tags/).fill('team=blue');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByTestId('count').filter({ hasText: /^1 items/ }).waitFor({ timeout: WAIT });
    assert.deepEqual(await page.locator('[role=rowgroup].rows [role=row] a').allTextContents(), ['alpha-two']);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'also-red', tags: { team: 'red' } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'late-blue', tags: { team: 'blue' } })).status, 201);
    // Events arrive in order: once the later one shows, the earlier one has been seen and left out.
    await page.locator('[role=rowgroup].rows [role=row] a', { hasText: 'late-blue' }).waitFor({ timeout: WAIT });
    assert.deepEqual((await page.locator('[role=rowgroup].rows [role=row] a').allTextContents()).sort(), ['alpha-two', 'late-blue']);
    await page.getByLabel(/^Tags/).fill('');
  });

  test('a limited key sees only what it may view, without edit or delete controls; a 403 is explained', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc/shop/workload', { name: 'secret-sauce', spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }] } })).status, 201);
    const limited = await keyFor('looker', { name: 'looker-web', targetKind: 'workload', targetLinks: ['//gvc/shop/workload/web'], bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/looker'] }] });
    await page.getByRole('button', { name: 'Sign out' }).click();
    const orgsRead = page.waitForResponse((r) => new URL(r.url()).pathname === '/org' && r.request().method() === 'GET', { timeout: WAIT });
    await signIn(limited);
    const orgs = (await (await orgsRead).json()).items.map((o: { name: string }) => o.name);
    assert.ok(!orgs.includes('beta-org'), `the API lists no org the key is no member of: ${orgs}`);
    await open('/org/acme/gvc/shop/workload');
    await page.getByTestId('count').filter({ hasText: /\d+ items/ }).waitFor({ timeout: WAIT });
    assert.deepEqual(await page.getByRole('combobox', { name: 'Org' }).locator('option').allTextContents(), ['acme'], 'an org the key is no member of is not offered');
    const names = await page.locator('[role=rowgroup].rows [role=row] a').allTextContents();
    assert.deepEqual(names, ['web']);
    assert.equal(await page.getByRole('link', { name: /Create workload/ }).count(), 0);
    await open('/org/acme/gvc/shop/workload/web');
    await page.getByRole('heading', { name: /web/ }).waitFor({ timeout: WAIT });
    await page.getByRole('table', { name: 'Deployments' }).waitFor({ timeout: WAIT });
    assert.equal(await page.getByRole('button', { name: 'Delete' }).count(), 0);
    assert.equal(await page.getByRole('button', { name: 'Add tag' }).count(), 0);
    assert.equal(await page.getByRole('button', { name: 'Force redeploy' }).count(), 0);
    await open('/org/acme/gvc/shop/workload/web?tab=yaml');
    await page.getByText('Read only').waitFor({ timeout: WAIT });
    assert.equal(await page.getByRole('button', { name: /Review changes/ }).count(), 0);
    await open('/org/acme/gvc/shop/workload/web?tab=history');
    await page.getByTestId('version-row').first().waitFor({ timeout: WAIT });
    assert.equal(await page.getByRole('button', { name: /Restore/ }).count(), 0);
    await shot('limited');
    await open('/org/acme/gvc/shop/workload/secret-sauce');
    const alert = page.getByRole('alert');
    await alert.waitFor({ timeout: WAIT });
    assert.match(await alert.innerText(), /permission.*403/i);
    await shot('forbidden');
    await axe('forbidden');
  });

  test('a key that may only view and run a cron workload gets Run now, and no edit controls', async () => {
    const runner = await keyFor('runner', { name: 'runner-nightly', targetKind: 'workload', targetLinks: ['//gvc/shop/workload/nightly'], bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/runner'] }] });
    await page.getByRole('button', { name: 'Sign out' }).click();
    await signIn(runner);
    await open('/org/acme/gvc/shop/workload/nightly');
    await page.getByTestId('deployment-ready').first().waitFor({ timeout: WAIT });
    // The console asks which permissions the key holds on the workload, with a read that succeeds.
    const probed = page.waitForResponse((r) => r.url().endsWith('/workload/nightly/-granted'), { timeout: WAIT });
    await page.reload();
    const answer = await probed;
    assert.equal(answer.status(), 200);
    assert.deepEqual((await answer.json()).granted, ['view'], 'view alone may not run');
    await page.getByTestId('deployment-ready').first().waitFor({ timeout: WAIT });
    assert.equal(await page.getByRole('button', { name: /^Run now/ }).count(), 0);

    assert.equal((await k.call('PATCH', '/org/acme/policy/runner-nightly', { bindings: [{ permissions: ['view', 'exec.runCronWorkload'], principalLinks: ['//serviceaccount/runner'] }] })).status, 200);
    const before = (await k.call('GET', '/org/acme/gvc/shop/workload/nightly/-command')).body.items.length as number;
    await page.reload();
    await page.getByRole('button', { name: 'Run now in aws-us-east-2' }).click();
    await page.getByRole('status').filter({ hasText: 'Run requested in aws-us-east-2.' }).waitFor({ timeout: WAIT });
    assert.equal((await k.call('GET', '/org/acme/gvc/shop/workload/nightly/-command')).body.items.length, before + 1, 'the click stored one command');
    assert.equal(await page.getByRole('button', { name: 'Force redeploy' }).count(), 0);
    assert.equal(await page.getByRole('button', { name: 'Delete' }).count(), 0);
  });

  test('nothing was requested from any other host', () => {
    assert.deepEqual(c.external, []);
  });

  test('the console ran under its Content-Security-Policy without a refusal; page and assets forbid framing and sniffing', async () => {
    assert.deepEqual(c.refused, [], 'the browser refused something the console needs');
    const html = await (await fetch(`${base}/console/`)).text();
    const asset = html.match(/<script[^>]+src="([^"]+)"/)![1];
    for (const path of ['/console', '/console/', asset, '/console/assets/missing.js']) {
      const res = await fetch(`${base}${path}`);
      const policy = res.headers.get('content-security-policy') ?? '';
      assert.match(policy, /frame-ancestors 'none'/, path);
      assert.match(policy, /script-src 'self'(;|$)/, `${path}: no inline or eval'd script: ${policy}`);
      assert.match(policy, new RegExp(`connect-src 'self' http://127\\.0\\.0\\.1:${k.config.auditPort}(;|$)`), path);
      assert.equal(res.headers.get('x-frame-options'), 'DENY', path);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff', path);
    }
  });

  test('as an attacker: a page that frames the console is refused by the browser, and an injected inline script does not run', async () => {
    const attacker = await c.browser.newPage();
    try {
      const framed = new Promise<string>((resolve) => attacker.on('console', (m) => /frame|ancestor/i.test(m.text()) && resolve(m.text())));
      // A hostile page on another origin (here about:blank with the console in an iframe).
      await attacker.setContent(`<iframe id="f" src="${base}/console/"></iframe>`);
      assert.match(await framed, /frame-ancestors|X-Frame-Options/i);
      const frame = attacker.frames().find((f) => f.url().startsWith(`${base}/console`));
      assert.equal(await frame?.evaluate(() => (globalThis as any).document.querySelector('#app')?.childElementCount ?? 0).catch(() => 0) ?? 0, 0, 'the framed console shows nothing');
    } finally {
      await attacker.close();
    }
    // Markup that reached the page (an XSS) cannot run script: the policy has no 'unsafe-inline' for scripts.
    await page.goto(`${base}/console/`);
    // An allowed inline script runs as it is inserted, so its effect would be there at once.
    const ran = await page.evaluate(() => {
      (globalThis as any).injected = false;
      const doc = (globalThis as any).document;
      const s = doc.createElement('script');
      s.textContent = 'globalThis.injected = true';
      doc.body.append(s);
      return (globalThis as any).injected;
    });
    assert.equal(ran, false);
  });
});
