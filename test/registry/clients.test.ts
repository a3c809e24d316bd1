// The registry driven by real clients, as a user drives it: skopeo copies an image built here into
// Keel and back (identical digests), podman pushes and pulls, the cpln CLI logs Docker in, reads,
// queries and deletes images, and applies workloads that run a pushed image (Ready) or a missing
// one (not ready, with the failed pull). On PostgreSQL a second Keel on the database serves what
// the first received.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, renameSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { Cpln, CPLN_BIN } from '../support/cpln.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { buildOciImage, layoutDigest } from '../support/oci.js';
import { runTool, toolMissing } from '../support/registry-tools.js';
import { waitFor } from '../support/wait.js';
import type { AddressInfo } from 'node:net';

const noSkopeo = toolMissing('skopeo');
const noPodman = toolMissing('podman');

forEachBackend('registry: skopeo copies into Keel and back', (backend) => {
  let keel: TestKeel;
  let host: string;
  let root: string;
  before(async () => {
    keel = await startKeel(backend);
    host = (await keel.listen()).replace('http://', '');
    root = mkdtempSync(join(tmpdir(), 'keel-registry-'));
  });
  after(async () => {
    await keel?.close();
    rmSync(root, { recursive: true, force: true });
  });
  const creds = () => `anyone:${keel.token}`;

  test('an image pushed with skopeo comes back with the same digests, and is an image item', { skip: noSkopeo }, async () => {
    const image = buildOciImage(root, 'v1', [{ 'etc/motd': 'hello from keel\n' }, { 'opt/data.bin': 2_500_000 }]);
    const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', creds(), `oci:${image.dir}:v1`, `docker://${host}/team/app:v1`]);
    assert.equal(pushed.code, 0, pushed.stderr);
    const back = join(root, 'back');
    const pulled = await runTool('skopeo', ['copy', '--src-tls-verify=false', '--src-creds', creds(), `docker://${host}/team/app:v1`, `oci:${back}:v1`]);
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.equal(layoutDigest(back, 'v1'), image.digest);
    for (const blob of image.blobs) {
      assert.deepEqual(readFileSync(join(back, 'blobs', 'sha256', blob.slice(7))), readFileSync(join(image.dir, 'blobs', 'sha256', blob.slice(7))), `blob ${blob}`);
    }
    const inspected = await runTool('skopeo', ['inspect', '--raw', '--tls-verify=false', '--creds', creds(), `docker://${host}/team/app:v1`]);
    assert.deepEqual(JSON.parse(inspected.stdout), image.manifest);

    const item = await keel.call('GET', `/org/${keel.org}/image/${encodeURIComponent('team/app:v1')}`);
    assert.equal(item.status, 200, item.raw);
    assert.equal(item.body.repository, 'team/app');
    assert.equal(item.body.tag, 'v1');
    assert.equal(item.body.digest, image.digest);
    assert.deepEqual(item.body.manifest, image.manifest);
    // The push is in the audit trail as the key's change, like any create.
    const events = await keel.call('GET', `/org/${keel.org}/image/${encodeURIComponent('team/app:v1')}/-eventlog`);
    assert.equal(events.status, 200, events.raw);
    assert.deepEqual(events.body.items.map((e: { action: { type: string }; subject: { name: string } }) => [e.action.type, e.subject.name]), [['create', 'admin']]);
  });

  test('readers gone mid-blob leave later pulls whole; a range across chunk boundaries is exact', async () => {
    const content = randomBytes(20 * 1024 * 1024 + 12_345);
    const digest = `sha256:${createHash('sha256').update(content).digest('hex')}`;
    const auth = { authorization: `Basic ${Buffer.from(creds()).toString('base64')}` };
    const posted = await fetch(`http://${host}/v2/team/big/blobs/uploads/?digest=${digest}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/octet-stream' }, body: content });
    assert.equal(posted.status, 201, await posted.text());
    const blob = `http://${host}/v2/team/big/blobs/${digest}`;
    // More readers than the store keeps connections, each gone after its first bytes.
    for (let i = 0; i < 8; i++) {
      const controller = new AbortController();
      const res = await fetch(blob, { headers: auth, signal: controller.signal });
      assert.equal(res.status, 200);
      await res.body!.getReader().read();
      controller.abort();
    }
    const whole = await fetch(blob, { headers: auth });
    assert.ok(Buffer.from(await whole.arrayBuffer()).equals(content), 'the whole blob comes back intact');
    const [from, to] = [8 * 1024 * 1024 - 3, 17 * 1024 * 1024 + 5];
    const ranged = await fetch(blob, { headers: { ...auth, range: `bytes=${from}-${to}` } });
    assert.equal(ranged.status, 206);
    assert.ok(Buffer.from(await ranged.arrayBuffer()).equals(content.subarray(from, to + 1)), 'the range is exactly those bytes');
  });

  test('tags list and image/-latest follow pushes; a second tag of the same content stores nothing again', { skip: noSkopeo }, async () => {
    const image = buildOciImage(root, 'v2', [{ 'etc/motd': 'second\n' }]);
    for (const tag of ['v2', 'v3']) {
      const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', creds(), `oci:${image.dir}:v2`, `docker://${host}/team/app:${tag}`]);
      assert.equal(pushed.code, 0, pushed.stderr);
    }
    const tags = await runTool('skopeo', ['list-tags', '--tls-verify=false', '--creds', creds(), `docker://${host}/team/app`]);
    assert.equal(tags.code, 0, tags.stderr);
    assert.deepEqual(JSON.parse(tags.stdout).Tags, ['v1', 'v2', 'v3']);
    const latest = await keel.call('GET', `/org/${keel.org}/image/-latest/${encodeURIComponent('team/app')}`);
    assert.equal(latest.status, 200, latest.raw);
    assert.equal(latest.body.name, 'team/app:v3');
    assert.equal(latest.body.digest, image.digest);
    const missing = await keel.call('GET', `/org/${keel.org}/image/-latest/nothing`);
    assert.equal(missing.status, 404);
  });

  test('deleting the image item deletes the tag', { skip: noSkopeo }, async () => {
    const deleted = await keel.call('DELETE', `/org/${keel.org}/image/${encodeURIComponent('team/app:v3')}`);
    assert.equal(deleted.status, 202, deleted.raw);
    const gone = await runTool('skopeo', ['inspect', '--raw', '--tls-verify=false', '--creds', creds(), `docker://${host}/team/app:v3`]);
    assert.notEqual(gone.code, 0);
    assert.match(gone.stderr, /manifest unknown/i);
    const tags = await runTool('skopeo', ['list-tags', '--tls-verify=false', '--creds', creds(), `docker://${host}/team/app`]);
    assert.deepEqual(JSON.parse(tags.stdout).Tags, ['v1', 'v2']);
  });

  if (backend === 'postgres') {
    test('a push through one Keel is pulled through another on the same database', { skip: noSkopeo }, async () => {
      const second = await keel.reopen();
      await second.app.core.listen({ host: '127.0.0.1', port: 0 });
      const otherHost = `127.0.0.1:${(second.app.core.server.address() as AddressInfo).port}`;
      const image = buildOciImage(root, 'x', [{ 'a.bin': 1_500_000 }, { 'b.txt': 'b' }]);
      const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', creds(), `oci:${image.dir}:x`, `docker://${host}/shared:x`]);
      assert.equal(pushed.code, 0, pushed.stderr);
      const back = join(root, 'other');
      const pulled = await runTool('skopeo', ['copy', '--src-tls-verify=false', '--src-creds', creds(), `docker://${otherHost}/shared:x`, `oci:${back}:x`]);
      assert.equal(pulled.code, 0, pulled.stderr);
      assert.equal(layoutDigest(back, 'x'), image.digest);
    });
  }

  test('podman pushes an image it imported and pulls it back', { skip: noPodman || noSkopeo }, async () => {
    const storage = join(tmpdir(), `keel-podman-${randomBytes(6).toString('hex')}`);
    mkdirSync(storage);
    const podman = (args: string[]) => runTool('podman', ['--root', join(storage, 'root'), '--runroot', join(storage, 'run'), '--storage-driver', 'vfs', ...args]);
    try {
      // podman names an image pulled from a layout after its path, which must be lowercase.
      const image = buildOciImage(root, 'p1', [{ 'srv/index.html': '<h1>podman</h1>\n' }]);
      const layout = join(storage, 'layout').toLowerCase();
      renameSync(image.dir, layout);
      const imported = await podman(['pull', `oci:${layout}:p1`]);
      assert.equal(imported.code, 0, imported.stderr);
      const id = imported.stdout.trim().split('\n').pop()!;
      const pushed = await podman(['push', '--tls-verify=false', '--creds', creds(), id, `docker://${host}/podman/site:p1`]);
      assert.equal(pushed.code, 0, pushed.stderr);
      const item = await keel.call('GET', `/org/${keel.org}/image/${encodeURIComponent('podman/site:p1')}`);
      assert.equal(item.status, 200, item.raw);
      await podman(['rmi', '-a', '-f']);
      const pulled = await podman(['pull', '--tls-verify=false', '--creds', creds(), `${host}/podman/site:p1`]);
      assert.equal(pulled.code, 0, pulled.stderr);
      const listed = await podman(['images', '--format', '{{.Repository}}:{{.Tag}} {{.Digest}}']);
      assert.match(listed.stdout, new RegExp(`${host.replace(/[.]/g, '\\.')}/podman/site:p1 ${item.body.digest}`));
    } finally {
      await podman(['rmi', '-a', '-f']);
      rmSync(storage, { recursive: true, force: true });
    }
  });
});

forEachBackend(
  'registry: the cpln CLI and workloads on pushed images',
  (backend) => {
    let keel: TestKeel;
    let host: string;
    let cpln: Cpln;
    let root: string;
    const run = async (args: string[], code = 0) => {
      const result = await cpln.run(args);
      assert.equal(result.code, code, `cpln ${args.join(' ')}: ${result.stderr}\n${result.stdout}`);
      return result;
    };
    before(async () => {
      keel = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: 100 });
      const base = await keel.listen();
      host = base.replace('http://', '');
      cpln = new Cpln([host]);
      root = mkdtempSync(join(tmpdir(), 'keel-registry-cli-'));
      await run(['profile', 'update', 'keel', '--endpoint', base, '--token', keel.token, '--org', 'acme', '--gvc', 'web', '--default']);
      await run(['gvc', 'create', '--name', 'web', '--location', 'aws-us-east-2']);
    });
    after(async () => {
      cpln?.cleanup();
      await keel?.close();
      rmSync(root, { recursive: true, force: true });
    });

    test('cpln image docker-login names Keel; a push through its credential helper works unchanged', { skip: noSkopeo }, async () => {
      const login = await run(['image', 'docker-login']);
      assert.match(login.stderr, new RegExp(`Docker will authenticate to "${host}"`));
      const dockerConfig = JSON.parse(readFileSync(join(cpln.home, '.docker', 'config.json'), 'utf8'));
      assert.equal(dockerConfig.credHelpers[host], 'cpln');
      // skopeo reads Docker's config and asks docker-credential-cpln, which answers with the
      // profile's key as an identity token: the bearer-token flow.
      const image = buildOciImage(root, 'v1', [{ 'app/run.sh': '#!/bin/sh\necho hi\n' }]);
      const env = { ...process.env, HOME: cpln.home, CPLN_HOME: join(cpln.home, 'cpln'), CPLN_PROFILE: 'keel', PATH: `${dirname(CPLN_BIN)}:${process.env.PATH}`, REGISTRY_AUTH_FILE: join(cpln.home, 'no-such-auth.json') };
      const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', `oci:${image.dir}:v1`, `docker://${host}/app:v1`], { env });
      assert.equal(pushed.code, 0, pushed.stderr);
    });

    test('cpln image get, query and delete answer from the pushed images', { skip: noSkopeo }, async () => {
      const image = buildOciImage(root, 'v2', [{ 'app/run.sh': 'v2\n' }]);
      const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `x:${keel.token}`, `oci:${image.dir}:v2`, `docker://${host}/app:v2`]);
      assert.equal(pushed.code, 0, pushed.stderr);
      const got = JSON.parse((await run(['image', 'get', 'app:v2', '-o', 'json'])).stdout);
      assert.equal(got.digest, image.digest);
      assert.equal(got.repository, 'app');
      const all = JSON.parse((await run(['image', 'get', '-o', 'json'])).stdout);
      assert.ok(all.items.map((i: { name: string }) => i.name).includes('app:v2'));
      const queried = JSON.parse((await run(['image', 'query', '--property', 'tag=v2', '-o', 'json'])).stdout);
      assert.deepEqual(queried.items.map((i: { name: string }) => i.name), ['app:v2']);
      await run(['image', 'delete', 'app:v2']);
      await run(['image', 'get', 'app:v2'], 1);
      const gone = await runTool('skopeo', ['inspect', '--raw', '--tls-verify=false', '--creds', `x:${keel.token}`, `docker://${host}/app:v2`]);
      assert.match(gone.stderr, /manifest unknown/i);
    });

    test('cpln apply: a workload on a pushed image becomes Ready; on a missing one it is not ready until the image is pushed', { skip: noSkopeo }, async () => {
      const image = buildOciImage(root, 'v1', [{ 'srv/app': 'ok\n' }]);
      const pushed = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `x:${keel.token}`, `oci:${image.dir}:v1`, `docker://${host}/runner:v1`]);
      assert.equal(pushed.code, 0, pushed.stderr);
      const workload = (name: string, ref: string) => `kind: workload\nname: ${name}\ngvc: web\nspec:\n  type: standard\n  containers:\n    - name: main\n      image: ${ref}\n      ports:\n        - number: 8080\n          protocol: http\n`;
      const file = join(root, 'workloads.yaml');
      // The last is the reference `cpln image build --push` and `stack deploy` write: Keel's own address.
      // Pinned to a digest: one the org holds, in each form, and one it does not hold.
      const unknownDigest = `sha256:${createHash('sha256').update('never pushed').digest('hex')}`;
      writeFileSync(
        file,
        [
          workload('present', '//image/runner:v1'),
          workload('hosted-form', `acme.registry.cpln.io/runner:v1`),
          workload('absent', '//image/ghost:v1'),
          workload('keel-address', `${host}/runner:v1`),
          workload('pinned', `//image/runner@${image.digest}`),
          workload('pinned-hosted-form', `acme.registry.cpln.io/runner@${image.digest}`),
          workload('pinned-keel-address', `${host}/runner@${image.digest}`),
          workload('pinned-absent', `//image/runner@${unknownDigest}`),
        ].join('---\n'),
      );
      await run(['apply', '--file', file]);
      const status = (name: string) => keel.call('GET', `/org/acme/gvc/web/workload/${name}`).then((r) => r.body.status ?? {});
      for (const name of ['present', 'hosted-form', 'keel-address', 'pinned', 'pinned-hosted-form', 'pinned-keel-address']) {
        const ready = await waitFor(`${name} ready`, () => status(name), (s) => s.ready === true);
        assert.equal(ready.resolvedImages.images[0].digest, image.digest);
      }
      const deployment = (name: string) => () => keel.call('GET', `/org/acme/gvc/web/workload/${name}/deployment/aws-us-east-2`).then((r) => r.body?.status ?? {});
      const failing = await waitFor('the failed pull', deployment('absent'), (s) => /Failed to pull image "\/\/image\/ghost:v1"/.test(String(s.message)));
      assert.equal(failing.ready, false);
      assert.equal((await status('absent')).ready, false);
      const pinnedFailing = await waitFor('the failed pull of an unknown digest', deployment('pinned-absent'), (s) => String(s.message).includes(`Failed to pull image "//image/runner@${unknownDigest}"`));
      assert.equal(pinnedFailing.ready, false);
      assert.equal((await status('pinned-absent')).ready, false);
      const ghost = buildOciImage(root, 'v1', [{ 'srv/ghost': 'boo\n' }]);
      const late = await runTool('skopeo', ['copy', '--dest-tls-verify=false', '--dest-creds', `x:${keel.token}`, `oci:${ghost.dir}:v1`, `docker://${host}/ghost:v1`]);
      assert.equal(late.code, 0, late.stderr);
      const ready = await waitFor('absent ready once pushed', () => status('absent'), (s) => s.ready === true);
      assert.equal(ready.resolvedImages.images[0].digest, ghost.digest);
      // External images keep their simulated resolution.
      writeFileSync(file, workload('external', 'nginx:latest'));
      await run(['apply', '--file', file]);
      await waitFor('external ready', () => status('external'), (s) => s.ready === true);
    });
  },
  ['sqlite'],
);
