// `cpln workload run` under runc: the CLI makes a workload, waits for its replica, runs the command
// in it through the terminal protocol and prints its output; with --rm it deletes the workload, and
// then nothing of it is left on the host (no replica directory, runc container, cgroup or netns).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

describe('cpln workload run (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-run-'));
    rt = await startRuntimeKeel();
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  /** What of this Keel's replicas is on the host: runc containers, namespaces, veths, mounts, cgroups and replica directories. */
  const onHost = () => {
    const dataDir = dirname((rt.keel.app.core.runtime as unknown as { dir: string }).dir);
    const replicas = join(dataDir, 'runtime', 'replicas');
    return { ...leftovers(dataDir), replicaDirs: existsSync(replicas) ? readdirSync(replicas) : [] };
  };

  test('prints the command\'s output, and --rm leaves nothing behind', async () => {
    const image = busyboxImage(work, 'sleeper', ['/bin/sleep', '999d']);
    // The CLI waits a minute after creating the workload before it connects.
    const r = await rt.cpln.run(['workload', 'run', '--rm', '--image', image, '--location', LOCATION, '--', '/bin/sh', '-c', 'echo ran as $(hostname)'], { timeoutMs: 240_000 });
    assert.equal(r.code, 0, r.stderr || r.stdout);
    assert.match(r.stdout, /ran as run-[a-z0-9-]+/);
    const listed = await rt.run(['workload', 'get', '-o', 'names']);
    assert.doesNotMatch(listed.stdout, /run-/);
    const nothing = { ...NOTHING_LEFT, replicaDirs: [] };
    const left = await waitFor("the run's replica to be gone from the host", async () => onHost(), (h) => JSON.stringify(h) === JSON.stringify(nothing), 30_000);
    assert.deepEqual(left, nothing);
  });
});
