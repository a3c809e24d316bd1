// KEEL_HAPROXY_RELOAD_MIN_MS: a readiness probe that flaps every second changes HAProxy's table
// every second, yet HAProxy is reloaded at most once per gap; the replica still gets served.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing({ haproxy: true });
const GAP_MS = 3000;

describe('HAProxy reloads have a minimum gap (KEEL_HAPROXY_RELOAD_MIN_MS)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  const front = () => (rt.keel.app.core.runtime as unknown as { front: { reloads: number } }).front;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-reloads-'));
    rt = await startRuntimeKeel({ ingressProxy: 'haproxy', settings: { haproxyReloadMinMs: GAP_MS } });
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('a probe flapping every second reloads HAProxy at most once per gap', async () => {
    const image = busyboxImage(work, 'flap', ['/bin/sh', '-c', 'exec httpd -f -p 8080 -h /www'], { 'www/index.html': 'up\n' });
    // Passes in even seconds, fails in odd ones: the replica is ready and not ready by turns.
    const flapping = { exec: { command: ['/bin/sh', '-c', 'test $(( $(date +%s) % 2 )) -eq 0'] }, periodSeconds: 1, failureThreshold: 1, successThreshold: 1 };
    const file = join(work, 'flap.json');
    writeFileSync(file, JSON.stringify({ kind: 'workload', name: 'flap', gvc: 'web', spec: { type: 'standard', containers: [{ name: 'httpd', image, ports: [{ number: 8080, protocol: 'http' }], readinessProbe: flapping }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } }));
    await rt.run(['apply', '--file', file]);
    let flips = 0;
    let last: boolean | undefined;
    // Watch the readiness flip, so the test knows the table changed often enough to matter.
    await waitFor('the replica to flip readiness several times', async () => {
      const ready = (await rt.deployment('flap'))?.status?.ready === true;
      if (last !== undefined && ready !== last) flips++;
      last = ready;
      return flips;
    }, (n) => n >= 2, 90_000);
    const start = front().reloads;
    const began = Date.now();
    flips = 0;
    await waitFor('more readiness flips', async () => {
      const ready = (await rt.deployment('flap'))?.status?.ready === true;
      if (ready !== last) flips++;
      last = ready;
      return flips;
    }, (n) => n >= 6, 120_000);
    const reloads = front().reloads - start;
    const seconds = (Date.now() - began) / 1000;
    assert.ok(reloads <= Math.ceil((seconds * 1000) / GAP_MS) + 1, `${reloads} reloads in ${seconds} s with a gap of ${GAP_MS} ms`);
    assert.ok(reloads >= 1, "the table's changes still reach HAProxy");
  });
});
