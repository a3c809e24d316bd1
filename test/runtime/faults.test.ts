// Bad input to the runc runtime ends in a deployment status and log lines that say what is wrong,
// and the reconciler goes on with the other workloads: an image that is missing, one built for
// another CPU architecture, a command the image does not have, a process over its memory limit,
// and a probe that never passes (nothing listens on its port).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startKeel, type TestKeel } from '../support/keel.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { createGvc, LOCATION, runcSettings } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';
import { runTool, toolMissing } from '../support/registry-tools.js';

const skip = runtimeMissing();
const noSkopeo = skip ? false : toolMissing('skopeo');
const OTHER_ARCH = process.arch === 'arm64' ? 'amd64' : 'arm64';

describe('bad input to the runc runtime', { skip }, () => {
  let keel: TestKeel;
  let work: string;
  let image: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-faults-'));
    image = busyboxImage(work, 'tools', ['/bin/sh', '-c', 'echo up; exec sleep 3600']);
    keel = await startKeel('sqlite', 'acme', runcSettings());
    await createGvc(keel);
  });
  after(async () => {
    await keel?.close();
    rmSync(work, { recursive: true, force: true });
  });

  const apply = async (name: string, container: Record<string, unknown>) => {
    const created = await keel.call('POST', '/org/acme/gvc/web/workload', { name, spec: { type: 'standard', containers: [{ name: 'main', ports: [{ number: 8080, protocol: 'http' }], ...container }] } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  };
  const deploymentSays = (name: string, pattern: RegExp) =>
    waitFor(
      `workload ${name}'s deployment to say ${pattern}`,
      async () => (await keel.call('GET', `/org/acme/gvc/web/workload/${name}/deployment/${LOCATION}`)).body?.status,
      (status) => status !== undefined && pattern.test(String(status.message)),
      60_000,
    );
  const logsSay = (name: string, pattern: RegExp) =>
    waitFor(
      `workload ${name}'s logs to say ${pattern}`,
      async () => {
        const res = await keel.call('GET', `/logs/org/acme/loki/api/v1/query_range?query=${encodeURIComponent(`{workload="${name}"}`)}&limit=1000`);
        return (res.body?.data?.result ?? []).flatMap((s: { values: Array<[string, string]> }) => s.values.map(([, line]) => line)).join('\n');
      },
      (text) => pattern.test(text),
      30_000,
    );

  test('an OCI layout that is not there', async () => {
    await apply('missing', { image: `oci:${join(work, 'nothing-here')}:v1` });
    const status = await deploymentSays('missing', /not an OCI image layout/);
    assert.equal(status.ready, false);
    await logsSay('missing', /Failed to pull image .*nothing-here.*not an OCI image layout/);
  });

  test('a tag the layout does not hold', async () => {
    await apply('notag', { image: `${image.slice(0, image.lastIndexOf(':'))}:nope` });
    await deploymentSays('notag', /not found \(no tag nope/);
  });

  test('an image built for another CPU architecture', async () => {
    const foreign = busyboxImage(work, 'foreign', ['/bin/true'], {}, { architecture: OTHER_ARCH });
    await apply('foreign', { image: foreign });
    const status = await deploymentSays('foreign', new RegExp(`built for linux/${OTHER_ARCH}`));
    assert.equal(status.ready, false);
  });

  test('a command the image does not have: the start fails, is retried with back-off, and says why', async () => {
    await apply('nocommand', { image, command: '/bin/no-such-program' });
    // runc's own reason, not its exit code 1.
    const status = await deploymentSays('nocommand', /Back-off restarting replica .*exited \(unable to start container process: exec: "\/bin\/no-such-program": .*no such file or directory\)/);
    assert.equal(status.ready, false);
    assert.doesNotMatch(String(status.message), /exit code 1/);
    await logsSay('nocommand', /no-such-program/);
    await apply('notinpath', { image, command: 'no-such-program' });
    await deploymentSays('notinpath', /exec: "no-such-program": executable file not found in \$PATH/);
  });

  test('a process over its memory limit is killed and the status says OOMKilled', async () => {
    await apply('hungry', { image, memory: '32Mi', command: '/bin/sh', args: ['-c', 'echo filling; exec dd if=/dev/zero of=/dev/null bs=64M count=1'] });
    await deploymentSays('hungry', /OOMKilled/);
    await logsSay('hungry', /filling/);
  });

  test('a readiness probe on a port nothing listens on never passes, and the status says so', async () => {
    await apply('deaf', { image, readinessProbe: { tcpSocket: { port: 9999 }, periodSeconds: 1, failureThreshold: 1 } });
    const status = await deploymentSays('deaf', /Readiness probe of container main failed: TCP connect to port 9999: connection refused/);
    assert.equal(status.ready, false);
    // The replica runs all the while: it is only not ready.
    await logsSay('deaf', /^up$/m);
  });

  test('a liveness probe that fails kills the container, which starts again with back-off', async () => {
    await apply('stale', { image, livenessProbe: { exec: { command: ['/bin/false'] }, periodSeconds: 1, failureThreshold: 1 } });
    await logsSay('stale', /Killing container main of replica .*: its liveness probe failed/);
    await deploymentSays('stale', /Back-off restarting replica .*killed by SIGKILL|Back-off restarting replica .*exit code 137/);
  });

  test("an image pushed to the org's registry with skopeo runs from Keel's own blobs", { skip: noSkopeo }, async () => {
    const host = new URL(await keel.listen()).host;
    const layout = image.slice('oci:'.length, image.lastIndexOf(':'));
    const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `anyone:${keel.token}`, `oci:${layout}:tools`, `docker://${host}/tools:v1`]);
    assert.equal(pushed.code, 0, pushed.stderr);
    await apply('pushed', { image: '//image/tools:v1' });
    const status = await deploymentSays('pushed', /^Ready$/);
    assert.equal(status.ready, true);
    await logsSay('pushed', /^up$/m);
    // A tag nobody pushed fails the pull, as on the hosted service.
    await apply('unpushed', { image: '//image/tools:v2' });
    await deploymentSays('unpushed', /Failed to pull image "\/\/image\/tools:v2"/);
  });

  test('after all that, a good workload still becomes ready', async () => {
    await apply('fine', { image });
    const status = await deploymentSays('fine', /^Ready$/);
    assert.equal(status.ready, true);
  });
});
