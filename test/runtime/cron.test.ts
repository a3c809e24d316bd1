// Cron workloads under the runc runtime: each run is a container that runs once, started by the
// schedule or by `cpln workload cron start`; its execution ends when the process does, with its
// exit code, and a failing run fails its command.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

describe('cron workloads as real runs (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  const executions = async (workload: string) => ((await rt.deployment(workload))?.status?.jobExecutions ?? []) as Array<Record<string, any>>;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-cron-'));
    const image = busyboxImage(work, 'job', ['/bin/sh', '-c', 'echo "run in $CPLN_REPLICA"; sleep 1; exit ${EXIT_CODE:-0}']);
    rt = await startRuntimeKeel();
    for (const [name, exit] of [['nightly', '0'], ['broken', '3']]) {
      const file = join(work, `${name}.json`);
      writeFileSync(file, JSON.stringify({ kind: 'workload', name, spec: { type: 'cron', job: { schedule: '* * * * *', historyLimit: 10 }, containers: [{ name: 'main', image, env: [{ name: 'EXIT_CODE', value: exit }] }] } }));
      await rt.run(['apply', '--file', file]);
    }
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('cron start, twice: each run a container that ends with its exit code, its output in the logs', async () => {
    for (let i = 0; i < 2; i++) await rt.run(['workload', 'cron', 'start', 'nightly', '--location', LOCATION]);
    const done = await waitFor('both runs to end', () => executions('nightly'), (e) => e.filter((x) => x.name.startsWith('command-') && x.status === 'successful').length === 2, 60_000);
    for (const e of done.filter((x) => x.name.startsWith('command-'))) {
      assert.match(e.containers.main.message, /^Completed \(exit code 0\)$/);
      // A real run takes as long as its process: over the second it sleeps.
      assert.ok(Date.parse(e.completionTime) - Date.parse(e.startTime) >= 1000, `${e.startTime} → ${e.completionTime}`);
      const logs = await rt.run(['logs', `{workload="nightly", replica="${e.replica}"}`, '--limit', '0']);
      assert.match(logs.stdout, new RegExp(`run in ${e.replica}`));
    }
    const commands = (await rt.keel.call('GET', '/org/acme/gvc/web/workload/nightly/-command')).body.items as Array<{ lifecycleStage: string }>;
    assert.deepEqual(commands.map((c) => c.lifecycleStage), ['completed', 'completed']);
  });

  test('a run that exits 3 fails, and so does the command that started it', async () => {
    await rt.run(['workload', 'cron', 'start', 'broken', '--location', LOCATION]);
    const done = await waitFor('the run to fail', () => executions('broken'), (e) => e.some((x) => x.name.startsWith('command-') && x.status === 'failed'), 60_000);
    const failed = done.find((x) => x.name.startsWith('command-') && x.status === 'failed')!;
    assert.match(failed.conditions[0].message, /exit code 3/);
    const command = await waitFor('the command to fail', async () => (await rt.keel.call('GET', '/org/acme/gvc/web/workload/broken/-command')).body.items[0], (c) => c.lifecycleStage !== 'running', 30_000);
    assert.equal(command.lifecycleStage, 'failed');
    assert.match(command.status.messages.at(-1), /exit code 3/);
  });

  test('the schedule starts runs by itself (every minute here)', async () => {
    const done = await waitFor('a scheduled run to end', () => executions('nightly'), (e) => e.some((x) => !x.name.startsWith('command-') && x.status === 'successful'), 90_000);
    const scheduled = done.find((x) => !x.name.startsWith('command-') && x.status === 'successful')!;
    assert.match(scheduled.containers.main.message, /exit code 0/);
  });

  test('deleting the cron workloads leaves nothing behind', async () => {
    await rt.run(['workload', 'delete', 'nightly']);
    await rt.run(['workload', 'delete', 'broken']);
    await waitFor('the replicas\' directories to be gone', async () => readdirSync(join(rt.keel.config.dataDir, 'runtime', 'replicas')), (d) => d.length === 0, 60_000);
    assert.deepEqual(leftovers(rt.keel.config.dataDir), NOTHING_LEFT);
  });
});
