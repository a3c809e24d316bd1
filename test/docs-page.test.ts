// The API reference page at /docs, rendered by a real headless Chromium (Debian's package),
// served entirely by Keel (no CDN: the machine is offline).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { chromium } from 'playwright-core';
import { startKeel } from './support/keel.js';

const CHROMIUM = process.env.KEEL_CHROMIUM ?? '/usr/bin/chromium';
const available = existsSync(CHROMIUM);
if (!available && process.env.KEEL_REQUIRE_CHROMIUM === '1') throw new Error(`Chromium is required (KEEL_REQUIRE_CHROMIUM=1) but ${CHROMIUM} does not exist`);
if (!available) console.log(`# NOTICE: ${CHROMIUM} not found; the /docs page test is SKIPPED (apt-get install chromium)`);

test('the /docs page renders and lists the operations', { skip: available ? false : 'Chromium is not installed' }, async () => {
  const k = await startKeel('sqlite');
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    await k.app.core.listen({ host: '127.0.0.1', port: 0 });
    const port = (k.app.core.server.address() as { port: number }).port;
    const page = await browser.newPage();
    const external: string[] = [];
    page.on('request', (request) => {
      if (!request.url().startsWith(`http://127.0.0.1:${port}/`)) external.push(request.url());
    });
    await page.goto(`http://127.0.0.1:${port}/docs`);
    await page.waitForSelector('.opblock-summary-path', { timeout: 20_000 });
    const title = await page.textContent('.info .title');
    assert.match(title ?? '', /Keel Core API/);
    const paths = await page.$$eval('.opblock-summary-path', (nodes) => nodes.map((n) => n.textContent?.replace(/\u200b/g, '') ?? ''));
    assert.ok(paths.length > 300, `only ${paths.length} operations listed`);
    assert.ok(paths.includes('/org/{org}/gvc/{gvc}/volumeset'), 'seed operation 1 is listed');
    assert.ok(paths.includes('/org/{org}/workload/-query'), 'seed operation 2 is listed');
    assert.deepEqual(external, [], 'nothing is fetched from outside Keel');
  } finally {
    await browser.close();
    await k.close();
  }
});
