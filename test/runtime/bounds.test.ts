// What one tenant's replica may take of the host and of Keel: its output comes into the logs at
// KEEL_LOG_BYTES_PER_SECOND at most (the rest dropped and counted), without holding the API's event
// loop, and what it writes to its root filesystem and scratch volumes is bounded by
// KEEL_REPLICA_DISK_BYTES (it gets ENOSPC; the host's disk does not fill), and to a volume set's
// volume by the set's capacity. Real replicas under runc.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import { tsOf, tsOfMs } from '../../src/logs/time.js';
import type { LogLine } from '../../src/store/types.js';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
const RATE = 16 * 1024;
const DISK = 32 * 1024 * 1024;
const MiB = 1024 * 1024;

describe('bounds on a replica (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let dataDir: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-bounds-'));
    rt = await startRuntimeKeel({ settings: { logBytesPerSecond: RATE, replicaDiskBytes: DISK } });
    dataDir = rt.keel.config.dataDir;
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  /** Every stored line of the workload (oldest first). */
  const linesOf = async (workload: string): Promise<LogLine[]> => {
    const all: LogLine[] = [];
    let after: LogLine | undefined;
    for (;;) {
      const page = await rt.keel.store.logs({ org: 'acme', from: tsOf(0n), to: tsOfMs(Date.now() + 60_000), backward: false, labels: [{ label: 'workload', op: '=', value: workload }], contains: [], after, limit: 5000 });
      all.push(...page);
      if (page.length < 5000) return all;
      after = page[page.length - 1];
    }
  };
  const apply = async (name: string, spec: Record<string, unknown>) => {
    const created = await rt.keel.call('POST', '/org/acme/gvc/web/workload', { name, spec: { type: 'standard', defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } }, ...spec } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  };
  const remove = async (name: string) => {
    assert.equal((await rt.keel.call('DELETE', `/org/acme/gvc/web/workload/${name}`)).status, 202);
    await waitFor('nothing of the replica left on the host', async () => leftovers(dataDir), (l) => JSON.stringify(l) === JSON.stringify(NOTHING_LEFT), 60_000);
  };

  /** Blocks the data directory takes on the host's filesystem (-x: not what is seen through the replicas' own mounts). */
  const usage = () => Number(execFileSync('du', ['-s', '-x', '--block-size=1', dataDir], { encoding: 'utf8' }).split('\t')[0]);

  test('a replica flooding stdout: its stored lines stay within the rate, one line a second counts what was dropped, the API keeps answering, and no file grows', async () => {
    const text = `flood ${'0123456789'.repeat(6)}`;
    const image = busyboxImage(work, 'flood', ['/bin/busybox', 'yes', text]);
    const baseline = usage();
    await apply('flood', { containers: [{ name: 'main', image, cpu: '1000m', memory: '64Mi' }] });
    const first = await waitFor('the first flood line', () => linesOf('flood'), (ls) => ls.some((l) => l.line === text), 60_000);
    const t0 = BigInt(first.find((l) => l.line === text)!.ts);
    // Measured while it floods: the event loop's delay, and an unrelated caller's GETs.
    const delay = monitorEventLoopDelay({ resolution: 5 });
    delay.enable();
    const latencies: number[] = [];
    const windowMs = 8_000;
    const until = Date.now() + windowMs;
    while (Date.now() < until) {
      const started = performance.now();
      assert.equal((await rt.keel.call('GET', '/org/acme/gvc/web')).status, 200);
      latencies.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    delay.disable();
    latencies.sort((a, b) => a - b);
    const p99 = latencies[Math.floor(latencies.length * 0.99)];
    const loopP99 = delay.percentile(99) / 1e6;
    console.log(`# during the flood: ${latencies.length} GETs, p50 ${latencies[Math.floor(latencies.length / 2)].toFixed(1)} ms, p99 ${p99.toFixed(1)} ms; event loop delay p99 ${loopP99.toFixed(1)} ms, max ${(delay.max / 1e6).toFixed(1)} ms`);
    // Lines read in the window are written within a tick or two of it.
    const end = t0 + BigInt(windowMs) * 1_000_000n;
    const lines = await waitFor('the markers of the window', () => linesOf('flood'), (ls) => ls.some((l) => BigInt(l.ts) > end + 2_000_000_000n), 30_000);
    const inWindow = lines.filter((l) => BigInt(l.ts) >= t0 && BigInt(l.ts) < end);
    const output = inWindow.filter((l) => l.labels.container === 'main' && l.line === text);
    const stored = output.reduce((sum, l) => sum + Buffer.byteLength(l.line) + 1, 0);
    const markers = inWindow.filter((l) => l.line.startsWith('keel: dropped'));
    const dropped = markers.reduce((sum, l) => sum + Number(/^keel: dropped (\d+) bytes \((\d+) lines\) of output over KEEL_LOG_BYTES_PER_SECOND \(16384 bytes a second\)$/.exec(l.line)?.[1] ?? NaN), 0);
    console.log(`# in ${windowMs} ms: ${stored} bytes stored (${output.length} lines), ${dropped} bytes dropped, ${markers.length} markers`);
    // The rate over the window, plus a second's burst, plus a tenth of a second's refill: a line is
    // stamped when it is queued, a little after the refill that let it through.
    assert.ok(stored <= RATE * (windowMs / 1000 + 1.1), `${stored} bytes stored in ${windowMs} ms at ${RATE} bytes a second`);
    assert.ok(stored >= (RATE * windowMs) / 1000 / 2, `the rate's worth of lines comes in: ${stored}`);
    // One marker a second, each saying how much, with the replica's labels.
    assert.ok(markers.length >= windowMs / 1000 - 2 && markers.length <= windowMs / 1000 + 1, `${markers.length} markers`);
    assert.ok(Number.isFinite(dropped) && dropped > stored * 4, `dropped ${dropped}, stored ${stored}`);
    assert.equal(markers[0].labels.replica, output[0].labels.replica);
    assert.ok(p99 < 100, `GET p99 ${p99} ms while a replica floods`);
    assert.ok(loopP99 < 100, `event loop delay p99 ${loopP99} ms while a replica floods`);
    // Tens of MB of output read: the data directory took the stored lines (and the database's log of them), no copy.
    const grown = usage() - baseline;
    assert.ok(grown < 32 * MiB, `the data directory grew by ${grown} bytes during the flood`);
    await remove('flood');
  });

  test('a replica writing past KEEL_REPLICA_DISK_BYTES gets ENOSPC, in its root filesystem and its scratch volume, and the host does not fill', async () => {
    const script = [
      'dd if=/dev/zero of=/big bs=1M count=64; echo "root dd exit $?"',
      'rm -f /big',
      'dd if=/dev/zero of=/scratch/big bs=1M count=64; echo "scratch dd exit $?"',
      'echo "after ENOSPC" > /scratch/note && echo "still writable: $(cat /scratch/note)"',
      'exec sleep 3600',
    ].join('; ');
    const image = busyboxImage(work, 'filler', ['/bin/sh', '-c', script]);
    const baseline = usage();
    await apply('filler', { containers: [{ name: 'main', image, cpu: '500m', memory: '64Mi', volumes: [{ uri: 'scratch://space', path: '/scratch' }] }] });
    const lines = await waitFor('both writes to end', async () => (await linesOf('filler')).map((l) => l.line), (ls) => ls.some((l) => l.startsWith('still writable')), 60_000);
    const grown = usage() - baseline;
    console.log(`# data directory grew by ${(grown / MiB).toFixed(1)} MiB; the replica said: ${lines.filter((l) => /dd|space|writable/.test(l)).join(' | ')}`);
    assert.ok(lines.includes('root dd exit 1'), lines.join('\n'));
    assert.ok(lines.includes('scratch dd exit 1'), lines.join('\n'));
    assert.ok(lines.filter((l) => /No space left on device/.test(l)).length >= 2, lines.join('\n'));
    assert.ok(lines.includes('still writable: after ENOSPC'), 'what was freed can be written again');
    // 64 MiB asked for, twice: the host took at most the replica's disk (and a little of the database's).
    assert.ok(grown < DISK + 8 * MiB, `the data directory grew by ${grown} bytes`);
    // While it runs, its disk is a mount under the data directory; once it is gone, nothing is.
    assert.ok(readFileSync('/proc/self/mounts', 'utf8').split('\n').some((l) => l.includes(dataDir) && l.includes('ext4')));
    await remove('filler');
    assert.ok(usage() - baseline < 4 * MiB, 'its disk went with it');
  });

  test("a volume set's volume is bounded by the set's capacity, and is unmounted once its replica goes", async () => {
    const set = await rt.keel.call('POST', '/org/acme/gvc/web/volumeset', { name: 'capped', spec: { initialCapacity: 10, fileSystemType: 'ext4' } });
    assert.equal(set.status, 201, JSON.stringify(set.body));
    // fallocate takes the space without writing it: the test does not write gigabytes.
    const script = [
      '/bin/busybox fallocate -l 1G /data/within; echo "within capacity exit $?"',
      '/bin/busybox fallocate -l 11G /data/over; echo "over capacity exit $?"',
      'exec sleep 3600',
    ].join('; ');
    const image = busyboxImage(work, 'allocator', ['/bin/sh', '-c', script]);
    await apply('store', { type: 'stateful', containers: [{ name: 'main', image, cpu: '100m', memory: '64Mi', volumes: [{ uri: 'cpln://volumeset/capped', path: '/data' }] }] });
    const lines = await waitFor('both allocations to end', async () => (await linesOf('store')).map((l) => l.line), (ls) => ls.some((l) => l.startsWith('over capacity exit')), 60_000);
    assert.ok(lines.includes('over capacity exit 1'), lines.join('\n'));
    assert.ok(lines.some((l) => /No space left on device/.test(l)), lines.join('\n'));
    assert.ok(lines.includes('within capacity exit 0'), lines.join('\n'));
    await remove('store');
    assert.equal((await rt.keel.call('DELETE', '/org/acme/gvc/web/volumeset/capped')).status, 202);
    const data = join(dataDir, 'runtime', 'volumes', 'acme', 'web', 'capped');
    await waitFor("the volume set's data to be gone", async () => existsSync(data), (there) => !there, 30_000);
    assert.deepEqual(leftovers(dataDir), NOTHING_LEFT);
  });
});
