// Cron workloads under the runc runtime: each run is a container that runs once, started by the
// schedule or by `cpln workload cron start`; its execution ends when the process does, with its
// exit code, and a failing run fails its command.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Cpln } from '../support/cpln.js';
import { startKeel, type TestKeel } from '../support/keel.js';
import { freePort } from '../support/ports.js';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing, testSubnet } from '../support/runtime.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
const LOCATION = 'aws-us-east-2';

describe('cron workloads as real runs (KEEL_RUNTIME=runc)', { skip }, () => {
  let keel: TestKeel;
  let cpln: Cpln;
  let work: string;
  const run = async (args: string[], expect = 0) => {
    const r = await cpln.run(args, { timeoutMs: 60_000 });
    assert.equal(r.code, expect, `cpln ${args.join(' ')} exited ${r.code}: ${r.stderr || r.stdout}`);
    return r;
  };
  const executions = async (workload: string) => ((await keel.call('GET', `/org/acme/gvc/web/workload/${workload}/deployment/${LOCATION}`)).body?.status?.jobExecutions ?? []) as Array<Record<string, any>>;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-cron-'));
    const image = busyboxImage(work, 'job', ['/bin/sh', '-c', 'echo "run in $CPLN_REPLICA"; sleep 1; exit ${EXIT_CODE:-0}']);
    const port = await freePort();
    keel = await startKeel('sqlite', 'acme', { port, reconcile: true, reconcileStepMs: 100, runtime: 'runc', ingressPort: 0, runtimeSubnet: testSubnet() });
    await keel.app.core.listen({ host: '127.0.0.1', port });
    cpln = new Cpln([`127.0.0.1:${port}`]);
    await run(['profile', 'update', 'keel', '--endpoint', `http://127.0.0.1:${port}`, '--token', keel.token, '--org', 'acme', '--gvc', 'web', '--default']);
    await run(['gvc', 'create', '--name', 'web', '--location', LOCATION]);
    for (const [name, exit] of [['nightly', '0'], ['broken', '3']]) {
      const file = join(work, `${name}.json`);
      writeFileSync(file, JSON.stringify({ kind: 'workload', name, spec: { type: 'cron', job: { schedule: '* * * * *', historyLimit: 10 }, containers: [{ name: 'main', image, env: [{ name: 'EXIT_CODE', value: exit }] }] } }));
      await run(['apply', '--file', file]);
    }
  });
  after(async () => {
    cpln?.cleanup();
    await keel?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('cron start, twice: each run a container that ends with its exit code, its output in the logs', async () => {
    for (let i = 0; i < 2; i++) await run(['workload', 'cron', 'start', 'nightly', '--location', LOCATION]);
    const done = await waitFor('both runs to end', () => executions('nightly'), (e) => e.filter((x) => x.name.startsWith('command-') && x.status === 'successful').length === 2, 60_000);
    for (const e of done.filter((x) => x.name.startsWith('command-'))) {
      assert.match(e.containers.main.message, /^Completed \(exit code 0\)$/);
      // A real run takes as long as its process: over the second it sleeps.
      assert.ok(Date.parse(e.completionTime) - Date.parse(e.startTime) >= 1000, `${e.startTime} → ${e.completionTime}`);
      const logs = await run(['logs', `{workload="nightly", replica="${e.replica}"}`, '--limit', '0']);
      assert.match(logs.stdout, new RegExp(`run in ${e.replica}`));
    }
    const commands = (await keel.call('GET', '/org/acme/gvc/web/workload/nightly/-command')).body.items as Array<{ lifecycleStage: string }>;
    assert.deepEqual(commands.map((c) => c.lifecycleStage), ['completed', 'completed']);
  });

  test('a run that exits 3 fails, and so does the command that started it', async () => {
    await run(['workload', 'cron', 'start', 'broken', '--location', LOCATION]);
    const done = await waitFor('the run to fail', () => executions('broken'), (e) => e.some((x) => x.name.startsWith('command-') && x.status === 'failed'), 60_000);
    const failed = done.find((x) => x.name.startsWith('command-') && x.status === 'failed')!;
    assert.match(failed.conditions[0].message, /exit code 3/);
    const command = await waitFor('the command to fail', async () => (await keel.call('GET', '/org/acme/gvc/web/workload/broken/-command')).body.items[0], (c) => c.lifecycleStage !== 'running', 30_000);
    assert.equal(command.lifecycleStage, 'failed');
    assert.match(command.status.messages.at(-1), /exit code 3/);
  });

  test('the schedule starts runs by itself (every minute here)', async () => {
    const done = await waitFor('a scheduled run to end', () => executions('nightly'), (e) => e.some((x) => !x.name.startsWith('command-') && x.status === 'successful'), 90_000);
    const scheduled = done.find((x) => !x.name.startsWith('command-') && x.status === 'successful')!;
    assert.match(scheduled.containers.main.message, /exit code 0/);
  });

  test('deleting the cron workloads leaves nothing behind', async () => {
    await run(['workload', 'delete', 'nightly']);
    await run(['workload', 'delete', 'broken']);
    await waitFor('the replicas\' directories to be gone', async () => readdirSync(join(keel.config.dataDir, 'runtime', 'replicas')), (d) => d.length === 0, 60_000);
    assert.deepEqual(leftovers(keel.config.dataDir), NOTHING_LEFT);
  });
});
