// Console pages in a real headless Chromium against a Keel with its reconcilers on: ten YAML saves in
// a row on one page and a real conflict after them; the audit trail's filters (subject, kind, action,
// time); the spec summary of each common kind; the side menu's groups without internal kinds.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { axe, chromiumAvailable, shot, signInHere, startConsoleKeel, typeInEditor, WAIT, type ConsoleKeel } from './support/console.js';
import type { TestKeel } from './support/keel.js';
import { waitFor } from './support/wait.js';

const available = chromiumAvailable();

describe('console pages', { skip: available ? false : 'Chromium is not installed' }, () => {
  let c: ConsoleKeel;
  let k: TestKeel;
  let page: Page;
  let base: string;
  const open = (hash: string) => page.goto(`${base}/console/#${hash}`);
  const created = async (path: string, body: Record<string, unknown>, token?: string) => {
    const res = await k.call('POST', path, body, token ? { token } : undefined);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body;
  };
  const keyFor = async (name: string, policy?: Record<string, unknown>) => {
    await created('/org/acme/serviceaccount', { name });
    if (policy) await created('/org/acme/policy', policy);
    return (await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'console test' })).body.key as string;
  };
  const editorText = () => page.locator('.editor .cm-content').first().innerText({ timeout: WAIT });

  before(async () => {
    c = await startConsoleKeel({ reconcile: true, reconcileStepMs: 100 });
    ({ k, page, base } = c);
    await created('/org/acme/gvc', { name: 'shop', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2', '//location/gcp-us-east1'] } } });
    await created('/org/acme/gvc/shop/workload', {
      name: 'web',
      description: 'the shop',
      spec: {
        type: 'standard',
        containers: [
          { name: 'app', image: 'nginx:1.27', ports: [{ number: 80, protocol: 'http' }] },
          { name: 'sidecar', image: 'busybox:1.36', ports: [{ number: 9100, protocol: 'grpc' }] },
        ],
      },
    });
    await page.goto(`${base}/console/`);
    await signInHere(page, k.token);
  });
  after(async () => {
    await c?.close();
  });

  test('ten YAML saves in a row on one page all succeed; a change by another client meanwhile is still refused with 409', async () => {
    const path = '/org/acme/gvc/shop/workload/web';
    const start = (await k.call('GET', path)).body.version as number;
    await open(`${path}?tab=yaml`);
    // A second tab opened before the saves: its edit starts from the version it read.
    const stale = await page.context().newPage();
    await stale.goto(`${base}/console/#${path}?tab=yaml`);
    await signInHere(stale, k.token);
    await stale.locator('.editor .cm-content').first().getByText('description:').waitFor({ timeout: WAIT });

    await page.evaluate(() => ((globalThis as any).__sameDocument = 'saves'));
    for (let i = 1; i <= 10; i++) {
      // The editor shows what the last save stored before the next edit starts.
      await page.locator('.editor .cm-content').first().getByText(i === 1 ? /^description: / : `description: save ${i - 1}`).waitFor({ timeout: WAIT });
      await typeInEditor(page, (await editorText()).replace(/^description: .*$/m, `description: save ${i}`));
      await page.getByRole('button', { name: 'Review changes (dry run)' }).click();
      await page.getByTestId('review').getByText(`save ${i}`).first().waitFor({ timeout: WAIT });
      await page.getByRole('button', { name: `Save version ${start + i}` }).click();
      await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor({ timeout: WAIT });
      assert.deepEqual(await page.getByRole('alert').allTextContents(), [], `save ${i}`);
      const now = (await k.call('GET', path)).body;
      assert.deepEqual([now.version, now.description], [start + i, `save ${i}`]);
    }
    await page.getByTestId('version').filter({ hasText: `version ${start + 10}` }).waitFor({ timeout: WAIT });
    assert.equal(await page.evaluate(() => (globalThis as any).__sameDocument), 'saves', 'all on one page, without a reload');

    // The tab that read the item before the ten saves: its save is a conflict showing what changed.
    await typeInEditor(stale, (await stale.locator('.editor .cm-content').first().innerText()).replace(/^description: .*$/m, 'description: from a stale tab'));
    await stale.getByRole('button', { name: 'Review changes (dry run)' }).click();
    await stale.getByTestId('conflict').getByText('save 10').first().waitFor({ timeout: WAIT });
    assert.match((await stale.getByRole('alert').allTextContents()).join(' '), /Conflict \(409\)/);
    await stale.close();

    // Another client changes the item while the page is open: the page says so, and its save is refused.
    assert.equal((await k.call('PATCH', path, { description: 'changed by another client' })).status, 200);
    await page.getByRole('status').filter({ hasText: `This item changed since you opened it (now version ${start + 11})` }).waitFor({ timeout: WAIT });
    await typeInEditor(page, (await editorText()).replace(/^description: .*$/m, 'description: my edit'));
    await page.getByRole('button', { name: 'Review changes (dry run)' }).click();
    const conflict = page.getByTestId('conflict');
    await conflict.getByText('changed by another client').first().waitFor({ timeout: WAIT });
    assert.match((await page.getByRole('alert').allTextContents()).join(' '), /Conflict \(409\)/);
    assert.equal((await k.call('GET', path)).body.description, 'changed by another client', 'the refused edit saved nothing');
    await shot(page, 'conflict-after-saves');
    await axe(page, 'conflict after saves');
    // Going on from the version saved meanwhile: the next save succeeds.
    await page.getByRole('button', { name: 'Edit the current version' }).click();
    await page.locator('.editor .cm-content').first().getByText('changed by another client').waitFor({ timeout: WAIT });
    await typeInEditor(page, (await editorText()).replace(/^description: .*$/m, 'description: after the conflict'));
    await page.getByRole('button', { name: 'Review changes (dry run)' }).click();
    await page.getByRole('button', { name: `Save version ${start + 12}` }).click();
    await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor({ timeout: WAIT });
    assert.equal((await k.call('GET', path)).body.description, 'after the conflict');
  });

  test('the audit trail applies its subject, kind, action and time filters', async () => {
    const robot = await keyFor('robot', { name: 'robot-edits', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['create', 'edit', 'delete'], principalLinks: ['//serviceaccount/robot'] }] });
    await created('/org/acme/serviceaccount', { name: 'idle' });
    const early = await created('/org/acme/gvc', { name: 'early' });
    // The next change is at a later millisecond than `early`'s, so a time between them separates them.
    await waitFor('the clock to pass the last change', async () => Date.now(), (now) => now > Date.parse(early.lastModified) + 1);
    const from = new Date().toISOString();
    await waitFor('the clock to pass the time filter', async () => Date.now(), (now) => now > Date.parse(from) + 1);
    assert.equal((await k.call('PATCH', '/org/acme/gvc/early', { description: 'robot was here' }, { token: robot })).status, 200);
    await created('/org/acme/gvc', { name: 'robots' }, robot);
    assert.equal((await k.call('DELETE', '/org/acme/gvc/robots', undefined, { token: robot })).status, 202);

    const rowsOf = async (testid: string) => page.getByTestId(testid).allTextContents();
    /** Applies the filters as typed; waits for the Audit API's answer to them and for the page to show it. */
    const applied = async (param: RegExp) => {
      const answered = page.waitForResponse((r) => r.url().includes('/audit/org/acme?') && param.test(r.url()), { timeout: WAIT });
      await page.getByRole('button', { name: 'Apply filters' }).click();
      await answered;
      await page.waitForURL(param, { timeout: WAIT });
      await page.getByText('Loading…').waitFor({ state: 'detached', timeout: WAIT });
    };

    // A principal that changed nothing: its trail is empty, though the org's is not. Its page links there.
    await open('/org/acme/serviceaccount/idle');
    await page.getByRole('link', { name: 'Changes by idle' }).click();
    await page.waitForURL(/-audit\?subjectName=idle$/, { timeout: WAIT });
    await page.getByTestId('audit-empty').waitFor({ timeout: WAIT });
    assert.deepEqual(await rowsOf('audit-row'), []);
    assert.equal(await page.getByLabel('Subject').inputValue(), 'idle');
    await page.getByRole('link', { name: 'Clear filters' }).click();
    await page.getByTestId('audit-row').first().waitFor({ timeout: WAIT });
    assert.ok((await rowsOf('audit-subject')).includes('admin'));

    await page.getByLabel('Subject').fill('robot');
    await applied(/subjectName=robot/);
    assert.deepEqual((await rowsOf('audit-subject')).sort(), ['robot', 'robot', 'robot']);
    assert.deepEqual((await rowsOf('audit-action')).sort(), ['create', 'delete', 'edit']);

    await page.getByLabel('Action').fill('delete');
    await applied(/actionType=delete/);
    assert.deepEqual(await rowsOf('audit-resource'), ['gvc/robots']);

    await page.getByLabel('Subject').fill('');
    await page.getByLabel('Action').fill('');
    await page.getByLabel('Kind', { exact: true }).fill('serviceaccount');
    await applied(/resourceType=serviceaccount/);
    const resources = await rowsOf('audit-resource');
    assert.ok(resources.length >= 3 && resources.every((r) => r.startsWith('serviceaccount/')), resources.join(','));
    assert.ok(resources.includes('serviceaccount/idle'));

    // From a time in the browser's local time: only what happened since, sent as an ISO instant.
    await page.getByLabel('Kind', { exact: true }).fill('gvc');
    const local = await page.evaluate((iso) => {
      const t = new Date(iso);
      return new Date(t.getTime() - t.getTimezoneOffset() * 60_000).toISOString().slice(0, 23);
    }, from);
    await page.getByLabel('From').fill(local);
    await applied(/fromEvent=/);
    assert.equal(new URL(page.url().replace('#', '')).searchParams.get('fromEvent'), from);
    // Keel's own status writes may land at any time: the changes people made are what is checked.
    const changes = async () => {
      const [actions, resources] = [await rowsOf('audit-action'), await rowsOf('audit-resource')];
      return actions.map((a, i) => `${a} ${resources[i]}`).filter((row) => !row.startsWith('status '));
    };
    assert.deepEqual((await changes()).sort(), ['create gvc/robots', 'delete gvc/robots', 'edit gvc/early']);
    assert.ok((await rowsOf('audit-time')).every((t) => t >= from));
    // And up to it: what came before.
    await page.getByLabel('From').fill('');
    await page.getByLabel('To').fill(local);
    await applied(/toEvent=/);
    assert.deepEqual((await changes()).sort(), ['create gvc/early', 'create gvc/shop']);
    assert.ok((await rowsOf('audit-time')).every((t) => t <= from));
    await shot(page, 'audit-filtered');
    await axe(page, 'filtered audit trail');

    // A time the Audit API cannot read is refused with its message, not shown as an empty trail.
    await open('/org/acme/-audit?fromEvent=yesterday');
    await page.getByRole('alert').filter({ hasText: 'fromEvent must be an ISO 8601 time' }).waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId('audit-empty').count(), 0);
  });

  test('item pages summarize the spec of each kind above its views', async () => {
    await created('/org/acme/gvc/shop/workload', { name: 'nightly', spec: { type: 'cron', containers: [{ name: 'job', image: 'busybox:1.36' }], job: { schedule: '0 3 * * *' } } });
    await created('/org/acme/secret', { name: 'login', type: 'userpass', data: { username: 'name-never-shown', password: 'value-never-shown' } });
    await created('/org/acme/policy', {
      name: 'readers',
      targetKind: 'secret',
      targetLinks: ['//secret/login'],
      bindings: [
        { permissions: ['view', 'reveal'], principalLinks: ['//serviceaccount/robot'] },
        { permissions: ['edit'], principalLinks: ['//serviceaccount/idle'] },
      ],
    });
    await created('/org/acme/gvc/shop/volumeset', { name: 'data', spec: { initialCapacity: 20, performanceClass: 'general-purpose-ssd', fileSystemType: 'xfs' } });
    await created('/org/acme/domain', { name: 'shop.example.com', spec: { dnsMode: 'cname', gvcLink: '//gvc/shop', ports: [{ number: 443, protocol: 'http2', routes: [] }] } });

    const summary = async () =>
      page.getByTestId('summary').locator('div').evaluateAll((rows) => Object.fromEntries(rows.map((r: any) => [r.querySelector('dt').textContent, r.querySelector('dd').textContent])));
    const expect = async (path: string, shown: Record<string, string>, screen?: string) => {
      await open(path);
      await page.getByTestId('summary').waitFor({ timeout: WAIT });
      await waitFor(`the summary of ${path}`, summary, (s) => JSON.stringify(s) === JSON.stringify(shown));
      if (screen) {
        await shot(page, screen);
        await axe(page, screen);
      }
    };
    await expect(
      '/org/acme/gvc/shop/workload/web',
      { Type: 'standard', Images: 'nginx:1.27, busybox:1.36', Ports: '80/http; 9100/grpc', Locations: 'aws-us-east-2, gcp-us-east1' },
      'summary-workload',
    );
    await expect('/org/acme/gvc/shop/workload/nightly', { Type: 'cron', Images: 'busybox:1.36', Schedule: '0 3 * * *', Locations: 'aws-us-east-2, gcp-us-east1' });
    // Above the YAML too.
    await open('/org/acme/gvc/shop/workload/nightly?tab=yaml');
    await page.locator('.editor .cm-content').first().waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId('summary-Schedule').locator('dd').innerText(), '0 3 * * *');
    assert.ok((await page.getByTestId('summary').boundingBox())!.y < (await page.locator('.editor').boundingBox())!.y, 'the summary is above the editor');
    await expect('/org/acme/gvc/shop', { Locations: 'aws-us-east-2, gcp-us-east1' });
    await expect('/org/acme/secret/login', { Type: 'userpass' });
    await expect('/org/acme/policy/readers', { 'Target kind': 'secret', Targets: 'login', Bindings: 'view, reveal → serviceaccount/robot; edit → serviceaccount/idle' }, 'summary-policy');
    await expect('/org/acme/gvc/shop/volumeset/data', { Capacity: '20 GB', 'Performance class': 'general-purpose-ssd', 'File system': 'xfs' });
    await expect('/org/acme/domain/shop.example.com', { 'DNS mode': 'cname', GVC: 'shop', Ports: '443/http2' });
    await expect('/org/acme/location/aws-us-east-2', { Provider: 'aws', Region: 'us-east-2', Enabled: 'true' });
    // A secret's summary never carries its values.
    await open('/org/acme/secret/login');
    await page.getByTestId('summary').waitFor({ timeout: WAIT });
    const content = await page.content();
    assert.ok(!content.includes('name-never-shown') && !content.includes('value-never-shown'));
    // A kind with nothing to summarize shows no summary.
    await created('/org/acme/auditctx', { name: 'app-events' });
    await open('/org/acme/auditctx/app-events');
    await page.getByRole('heading', { name: 'auditctx app-events' }).waitFor({ timeout: WAIT });
    assert.equal(await page.getByTestId('summary').count(), 0);
  });

  test('the side menu groups the kinds and leaves internal ones out', async () => {
    await open('/org/acme/gvc/shop/workload');
    const menu = page.getByRole('navigation', { name: 'Kinds' });
    await menu.getByRole('link', { name: 'workload', exact: true }).waitFor({ timeout: WAIT });
    const groups = await menu.getByRole('group').evaluateAll((gs) => gs.map((g: any) => [g.querySelector('h2').textContent, [...g.querySelectorAll('a')].map((a: any) => a.textContent)]));
    assert.deepEqual(groups, [
      ['Workloads', ['gvc', 'workload', 'identity', 'volumeset']],
      ['Access', ['serviceaccount', 'user', 'group', 'policy', 'task', 'audit trail']],
      ['Platform', ['secret', 'domain', 'image', 'location', 'cloudaccount', 'agent', 'ipset', 'quota', 'auditctx', 'resourcepolicy', 'dbcluster', 'memcachecluster', 'spicedbcluster', 'mk8s']],
    ]);
    for (const internal of ['deployment', 'command', 'event', 'permissions', 'accessreport', 'policymembership', 'imagesummary', 'link', 'foreign', 'primitive', 'resource', 'account', 'tenant', 'org']) {
      assert.equal(await menu.getByRole('link', { name: internal, exact: true }).count(), 0, internal);
    }
    // Every kind of the registry is in the menu or known to be internal: a new kind would show under Other.
    const registry = (await k.call('GET', '/-kinds', undefined, { token: null })).body.items.map((d: { kind: string }) => d.kind).sort();
    const listed = groups.flatMap(([, links]) => links as string[]).filter((l) => l !== 'audit trail');
    assert.equal(registry.length, listed.length + 14);
    assert.equal(await menu.locator('[aria-current=page]').innerText(), 'workload');
    await shot(page, 'menu');
    await axe(page, 'menu');
    // Without a GVC picked, its kinds are named, not linked.
    await open('/org/acme/secret');
    await page.evaluate(() => (globalThis as any).sessionStorage.removeItem('keel.gvc.acme'));
    await page.reload();
    await menu.getByText('Pick a GVC to see its workload, identity, volumeset.').waitFor({ timeout: WAIT });
    assert.equal(await menu.getByRole('link', { name: 'workload', exact: true }).count(), 0);
  });

  test('nothing was requested from any other host', () => {
    assert.deepEqual(c.external, []);
  });
});
