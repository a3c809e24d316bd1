// `cpln workload run` under runc: the CLI makes a workload, waits for its replica, runs the command
// in it through the terminal protocol and prints its output; with --rm it deletes the workload, and
// then nothing of it is left on the host (no replica directory, runc container, cgroup or netns).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
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

  /** What of this Keel's replicas is on the host: replica directories, runc containers, cgroups and network namespaces. */
  const onHost = () => {
    const runtime = rt.keel.app.core.runtime as unknown as { dir: string; root: string; scope: string };
    const replicas = existsSync(join(runtime.dir, 'replicas')) ? readdirSync(join(runtime.dir, 'replicas')) : [];
    const containers = execFileSync('runc', ['--root', runtime.root, 'list', '--quiet'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    const cgroups = execFileSync('find', ['/sys/fs/cgroup', '-maxdepth', '2', '-name', `keel-${runtime.scope}-*`], { encoding: 'utf8' }).split('\n').filter(Boolean);
    const namespaces = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' }).split('\n').filter((l) => l.startsWith(`keel-${runtime.scope}-`));
    return { replicas, containers, cgroups, namespaces };
  };

  test('prints the command\'s output, and --rm leaves nothing behind', async () => {
    const image = busyboxImage(work, 'sleeper', ['/bin/sleep', '999d']);
    // The CLI waits a minute after creating the workload before it connects.
    const r = await rt.cpln.run(['workload', 'run', '--rm', '--image', image, '--location', LOCATION, '--', '/bin/sh', '-c', 'echo ran as $(hostname)'], { timeoutMs: 240_000 });
    assert.equal(r.code, 0, r.stderr || r.stdout);
    assert.match(r.stdout, /ran as run-[a-z0-9-]+/);
    const listed = await rt.run(['workload', 'get', '-o', 'names']);
    assert.doesNotMatch(listed.stdout, /run-/);
    const left = await waitFor('the run\'s replica to be gone from the host', async () => onHost(), (h) => h.replicas.length + h.containers.length + h.cgroups.length + h.namespaces.length === 0, 30_000);
    assert.deepEqual(left, { replicas: [], containers: [], cgroups: [], namespaces: [] });
  });
});
