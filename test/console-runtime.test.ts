// The console's views of workloads that really run (runc): a replica's logs live from the logs
// API's tail, searched and paused; a terminal in a replica over the exec WebSocket, refused to a key
// without `exec`; and a cron workload's runs with their exit codes and logs. Chromium drives the
// console; the browser's console and every request are watched, and nothing may fail. Skipped with
// a notice without the runtime (KEEL_REQUIRE_RUNTIME=1) or Chromium (KEEL_REQUIRE_CHROMIUM=1).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { axe, chromiumAvailable, failuresOf, shot, signInHere, startConsoleKeel, WAIT, type ConsoleKeel } from './support/console.js';
import type { TestKeel } from './support/keel.js';
import { freePort } from './support/ports.js';
import { busyboxImage, runtimeMissing } from './support/runtime.js';
import { LOCATION, runcSettings } from './support/runtime-keel.js';
import { waitFor } from './support/wait.js';

const runtime = runtimeMissing();
const chromium = chromiumAvailable();
const skip = runtime || (chromium ? false : 'Chromium is not installed');

/** Replicas start and runs end in their own time on a loaded machine. */
const SLOW = 90_000;
const W = '/org/acme/gvc/web/workload';

describe('console views of running workloads (KEEL_RUNTIME=runc)', { skip }, () => {
  let c: ConsoleKeel;
  let k: TestKeel;
  let page: Page;
  let failures: ReturnType<typeof failuresOf>;
  let work: string;
  let replica: string;

  const open = (hash: string) => page.goto(`${c.base}/console/#${hash}`);
  /** The numbers of the `tick N` lines the page shows. */
  const ticks = async () => (await page.getByTestId('log-line').allInnerTexts()).map((t) => /tick (\d+)/.exec(t)?.[1]).filter((n): n is string => n !== undefined).map(Number);
  /** The newest `tick N` the logs API holds. */
  const newestTick = async () => {
    const q = new URLSearchParams({ query: `{gvc="web", workload="ticker", replica="${replica}"} |= "tick"`, limit: '1', direction: 'backward' });
    const res = await k.call('GET', `/logs/org/acme/loki/api/v1/query_range?${q}`);
    const line: string | undefined = res.body?.data?.result?.[0]?.values?.[0]?.[1];
    return line ? Number(/tick (\d+)/.exec(line)?.[1]) : -1;
  };

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-console-runtime-'));
    const ticker = busyboxImage(work, 'ticker', ['/bin/sh', '-c', 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.5; done']);
    const job = busyboxImage(work, 'job', ['/bin/sh', '-c', 'echo "run in $CPLN_REPLICA"; exit ${EXIT_CODE:-0}']);
    c = await startConsoleKeel({ ...runcSettings(), port: await freePort() });
    ({ k, page } = c);
    failures = failuresOf(page);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'web', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } })).status, 201);
    const standard = { name: 'ticker', spec: { type: 'standard', containers: [{ name: 'main', image: ticker }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } };
    assert.equal((await k.call('POST', `/org/acme/gvc/web/workload`, standard)).status, 201);
    for (const [name, exit] of [['job-ok', '0'], ['job-fails', '3']]) {
      const cron = { name, spec: { type: 'cron', job: { schedule: '0 0 1 1 *', historyLimit: 5 }, containers: [{ name: 'main', image: job, env: [{ name: 'EXIT_CODE', value: exit }] }] } };
      assert.equal((await k.call('POST', `/org/acme/gvc/web/workload`, cron)).status, 201);
    }
    const ready = await waitFor('the ticker to run', async () => (await k.call('GET', `${W}/ticker/deployment/${LOCATION}`)).body?.status, (s) => s?.ready === true && s.internal?.replicas?.length === 1, SLOW);
    replica = ready.internal.replicas[0];
    await page.goto(`${c.base}/console/`);
    await signInHere(page, k.token);
    failures.take();
  });
  after(async () => {
    await c?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  test("a replica's logs: its lines, a new line arriving live, search, pause and resume", async () => {
    // The workload's own Logs tab shows the lines of all its replicas, each with its replica's name.
    await open(`${W}/ticker`);
    await page.getByRole('link', { name: 'Logs', exact: true }).click();
    await page.getByRole('heading', { name: 'Logs of workload ticker' }).waitFor({ timeout: WAIT });
    await page.getByTestId('log-line').filter({ hasText: new RegExp(`${replica} tick \\d+`) }).first().waitFor({ timeout: WAIT });
    await open(`${W}/ticker`);
    await page.getByRole('link', { name: `Logs of ${replica}` }).click();
    await page.getByRole('heading', { name: `Logs of replica ${replica}` }).waitFor({ timeout: WAIT });
    await page.getByTestId('log-line').filter({ hasText: /tick \d+/ }).first().waitFor({ timeout: WAIT });
    const seen = Math.max(...(await ticks()));
    // A line the replica prints after the page opened arrives without a reload.
    await waitFor('a newer line on the page', ticks, (t) => t.some((n) => n > seen + 1));
    await shot(page, 'replica-logs');
    await axe(page, 'replica logs');

    // Search: a LogQL line filter; every line shown contains it.
    await page.getByLabel('Lines containing').fill('tick 1');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL(/search=tick\+1/, { timeout: WAIT });
    const found = await waitFor('the lines of the search', () => page.getByTestId('log-line').allInnerTexts(), (lines) => lines.length > 0 && lines.every((l) => l.includes('tick 1')));
    assert.ok(found.every((l) => /tick 1\d*$/.test(l)), JSON.stringify(found.slice(0, 5)));
    await page.getByLabel('Lines containing').fill('');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL((url) => !url.hash.includes('search='), { timeout: WAIT });
    await waitFor('every line again', ticks, (t) => t.some((n) => !String(n).startsWith('1')));

    // Pause: the replica goes on printing, the page shows none of it until Resume; then the lines
    // missed meanwhile arrive, none twice and none left out.
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByTestId('logs-state').filter({ hasText: /Paused/ }).waitFor({ timeout: WAIT });
    const atPause = await ticks();
    const last = Math.max(...atPause);
    await waitFor('the replica to print three more lines', newestTick, (n) => n >= last + 3);
    assert.deepEqual(await ticks(), atPause, 'a paused view shows no new line');
    await page.getByRole('button', { name: 'Resume' }).click();
    const resumed = await waitFor('the lines printed while paused', ticks, (t) => t.includes(last + 3));
    const after = resumed.filter((n) => n >= Math.min(...atPause));
    assert.deepEqual(after, Array.from({ length: after.length }, (_, i) => Math.min(...atPause) + i), 'consecutive lines, none twice, none missing');
    assert.deepEqual(failures.take(), []);
  });

  test('a terminal in a replica: a command typed runs and its output shows; a key without exec is refused visibly', async () => {
    await open(`${W}/ticker`);
    await page.getByRole('link', { name: `Terminal in ${replica}` }).click();
    await page.getByTestId('terminal-state').filter({ hasText: 'Connected' }).waitFor({ timeout: WAIT });
    await page.locator('.xterm').click();
    await page.keyboard.type('echo hello-$RANDOM');
    await page.keyboard.press('Enter');
    // The typed line is echoed as typed; the shell's output has the number.
    const text = await waitFor('the output of the command', () => page.locator('.xterm-rows').innerText(), (t) => /hello-\d+/.test(t));
    assert.match(text, /echo hello-\$RANDOM/);
    await shot(page, 'replica-terminal');
    await axe(page, 'replica terminal');
    assert.deepEqual(failures.take(), []);

    // A key that may view the workload but not exec in it.
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'looker' })).status, 201);
    for (const kind of ['workload', 'gvc']) {
      const policy = { name: `looker-${kind}`, targetKind: kind, target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/looker'] }] };
      assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    }
    const looker = (await k.call('POST', '/org/acme/serviceaccount/looker/-addKey', { description: 'looker' })).body.key as string;
    const other = await (await c.browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
    const otherFailures = failuresOf(other);
    await other.goto(`${c.base}/console/#${W}/ticker?tab=terminal&location=${LOCATION}&replica=${replica}`);
    await signInHere(other, looker);
    const alert = other.getByRole('alert').filter({ hasText: /refused the terminal/ });
    await alert.waitFor({ timeout: WAIT });
    assert.match(await alert.innerText(), /may not exec/);
    assert.match(await alert.innerText(), /needs the exec permission/);
    assert.equal(await other.getByTestId('terminal-state').innerText(), 'Refused');
    await shot(other, 'replica-terminal-refused');
    assert.deepEqual(otherFailures.take(), []);
    await other.context().close();
  });

  test("a cron workload's runs: status, exit code, start and end, and each run's logs", async () => {
    for (const name of ['job-ok', 'job-fails']) {
      assert.equal((await k.call('POST', `${W}/${name}/-command`, { type: 'runCronWorkload', spec: { location: LOCATION } })).status, 201);
    }
    await open(`${W}/job-fails`);
    const failed = page.getByTestId('run-row').filter({ has: page.getByTestId('run-status').filter({ hasText: /^failed$/ }) });
    await failed.first().waitFor({ timeout: SLOW });
    assert.equal(await failed.first().getByTestId('run-exit-code').innerText(), '3');
    assert.match(await failed.first().innerText(), /exit code 3/);

    await open(`${W}/job-ok`);
    const done = page.getByTestId('run-row').filter({ has: page.getByTestId('run-status').filter({ hasText: /^successful$/ }) });
    await done.first().waitFor({ timeout: SLOW });
    assert.equal(await done.first().getByTestId('run-exit-code').innerText(), '0');
    const cells = await done.first().getByRole('cell').allInnerTexts();
    assert.ok(cells[4] && cells[5] && cells[5] !== 'running', `a start and an end: ${JSON.stringify(cells)}`);
    await shot(page, 'cron-runs');
    await axe(page, 'cron runs');
    const run = (await done.first().locator('code').innerText()).trim();
    await done.first().getByRole('link', { name: /^Logs of run/ }).click();
    await page.getByTestId('log-line').filter({ hasText: `run in ${run}` }).waitFor({ timeout: WAIT });
    assert.deepEqual(failures.take(), []);
  });
});
