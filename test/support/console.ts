// The console's browser tests: its built files (dist/console), built here when missing or older than
// a source file the way `npm run build` builds them; a Keel with a headless Chromium on it; and what
// the tests do on a page (check accessibility, keep a screenshot, type in the editor, sign in).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { consoleDir } from '../../src/server/console.js';
import { startKeel, type TestKeel } from './keel.js';
import { freePort } from './ports.js';

function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs);
  }
  return latest;
}

export function ensureConsoleBuilt(): void {
  const index = join(consoleDir(), 'index.html');
  const root = join(consoleDir(), '..', '..');
  const sources = Math.max(newest(join(root, 'console', 'src')), statSync(join(root, 'console', 'index.html')).mtimeMs, statSync(join(root, 'console', 'vite.config.mjs')).mtimeMs);
  if (existsSync(index) && statSync(index).mtimeMs >= sources) return;
  const run = spawnSync('npm', ['run', 'build:console'], { cwd: root, stdio: 'inherit' });
  if (run.status !== 0) throw new Error('building the console failed (npm run build:console)');
}

export const CHROMIUM = process.env.KEEL_CHROMIUM ?? '/usr/bin/chromium';

/** Whether the browser tests can run; without Chromium they are skipped with a notice, or fail when KEEL_REQUIRE_CHROMIUM=1. */
export function chromiumAvailable(): boolean {
  const available = existsSync(CHROMIUM);
  if (!available && process.env.KEEL_REQUIRE_CHROMIUM === '1') throw new Error(`Chromium is required (KEEL_REQUIRE_CHROMIUM=1) but ${CHROMIUM} does not exist`);
  if (!available) console.log(`# NOTICE: ${CHROMIUM} not found; the console browser tests are SKIPPED (apt-get install chromium)`);
  return available;
}

/** How long a test waits for what the page should show. */
export const WAIT = 20_000;
const OUT = join(import.meta.dirname, '..', '..', 'test-output', 'console');
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

export interface ConsoleKeel {
  k: TestKeel;
  browser: Browser;
  page: Page;
  /** The Core API's base URL, where the console is served. */
  base: string;
  /** Hosts other than Keel's two ports that the browser asked for (the console must ask none). */
  external: string[];
  /** What the browser refused under the console's Content-Security-Policy (the console must need nothing it refuses). */
  refused: string[];
  close(): Promise<void>;
}

/**
 * A Keel serving the Core and Audit APIs on real sockets (with its reconcilers when asked), with the
 * console built, and a headless Chromium page on it.
 */
export async function startConsoleKeel(options: Parameters<typeof startKeel>[2] = {}): Promise<ConsoleKeel> {
  ensureConsoleBuilt();
  mkdirSync(OUT, { recursive: true });
  const k = await startKeel('sqlite', 'acme', { auditPort: await freePort(), ...options });
  await k.app.core.listen({ host: '127.0.0.1', port: options.port ?? 0 });
  await k.app.audit.listen({ host: '127.0.0.1', port: k.config.auditPort });
  const base = `http://127.0.0.1:${(k.app.core.server.address() as AddressInfo).port}`;
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  // A context of its own, so a test can open more tabs that share its storage as a person's browser does.
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  const external: string[] = [];
  page.context().on('request', (request) => {
    const url = request.url();
    if (!url.startsWith(`${base}/`) && !url.startsWith(`http://127.0.0.1:${k.config.auditPort}/`) && !url.startsWith('data:')) external.push(url);
  });
  const refused: string[] = [];
  page.context().on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) refused.push(message.text());
  });
  return {
    k,
    browser,
    page,
    base,
    external,
    refused,
    close: async () => {
      await browser.close();
      await k.close();
    },
  };
}

/** Saves what the page shows as test-output/console/<name>.png. */
export const shot = (page: Page, name: string) => page.screenshot({ path: join(OUT, `${name}.png`), fullPage: false });

/** Asserts that the screen as it is has no serious or critical accessibility violations (axe-core). */
export async function axe(page: Page, screen: string): Promise<void> {
  // Evaluated through the DevTools protocol: the console's policy refuses inline scripts (as it should).
  if (!(await page.evaluate(() => 'axe' in globalThis))) await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await (globalThis as any).axe.run((globalThis as any).document, { resultTypes: ['violations'] });
    return result.violations.map((v: any) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n: any) => n.target.join(' ')) }));
  });
  const bad = violations.filter((v: { impact: string }) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad, [], `${screen}: ${JSON.stringify(bad, null, 2)}`);
}

/** Replaces the CodeMirror editor's text as a person would (select all, type). */
export async function typeInEditor(page: Page, text: string): Promise<void> {
  const content = page.locator('.editor .cm-content').first();
  await content.waitFor({ timeout: WAIT });
  await content.click();
  await page.keyboard.press('Control+a');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(text);
}

/** Pastes a key on the sign-in page the page shows and signs in; waits for the console's menu. */
export async function signInHere(page: Page, key: string, options: { remember?: boolean } = {}): Promise<void> {
  await page.locator('#key').fill(key);
  if (options.remember) await page.getByLabel('Remember this key on this machine').check();
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('navigation', { name: 'Kinds' }).waitFor({ timeout: WAIT });
}

/**
 * What went wrong in the browser while a page was used: console errors (a failed resource load is
 * one), requests that failed, and answers of 400 or more. A test takes them and asserts none.
 */
export function failuresOf(page: Page): { take(): string[] } {
  let seen: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') seen.push(`console: ${message.text()}`);
  });
  page.on('pageerror', (error) => seen.push(`page error: ${error.message}`));
  page.on('requestfailed', (request) => {
    // A page that moves on aborts what it no longer needs (a list's next pages, a watch): not a failure.
    if (request.failure()?.errorText !== 'net::ERR_ABORTED') seen.push(`request failed: ${request.method()} ${request.url()} ${request.failure()?.errorText}`);
  });
  page.on('response', (response) => {
    if (response.status() >= 400) seen.push(`${response.status()}: ${response.request().method()} ${response.url()}`);
  });
  return {
    take() {
      const out = seen;
      seen = [];
      return out;
    },
  };
}
