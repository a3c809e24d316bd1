// Volumes under the runc runtime, as a user drives them with the cpln CLI: a stateful workload's
// volume set volume keeps what a replica wrote across a replica stop, a scratch volume does not,
// a secret appears as read-only files for an identity granted reveal, and what should not work
// does not: another org's volume set or secret, a workload without the grant, cloud storage, a
// mount path over /proc or with '..'. Deleting the workload keeps the volume set's data; deleting
// the volume set removes it; nothing is left mounted.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { toolMissing } from '../support/registry-tools.js';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { LOCATION, secondOrg, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing() || toolMissing('skopeo');

describe('volumes of workloads that really run (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let image: string;
  let otherToken: string;
  let otherImage: string;
  let files = 0;
  const apply = async (resource: Record<string, unknown>, ...extra: string[]) => {
    const file = join(work, `resource-${++files}.json`);
    writeFileSync(file, JSON.stringify(resource));
    return rt.run(['apply', '--file', file, ...extra]);
  };
  const deployment = async (workload: string, org = 'acme') =>
    (await rt.keel.call('GET', `/org/${org}/gvc/web/workload/${workload}/deployment/${LOCATION}`, undefined, org === 'acme' ? {} : { token: otherToken })).body;
  const exec = (workload: string, replica: string, ...command: string[]) => rt.cpln.run(['workload', 'exec', workload, '--location', LOCATION, '--replica', replica, '--', ...command], { timeoutMs: 60_000 });
  /** A workload of one container running the idle image; `container` adds to that container, the rest to the spec. */
  const workload = (name: string, { container = {}, ...spec }: Record<string, unknown> & { container?: Record<string, unknown> }) => ({
    kind: 'workload',
    name,
    spec: { containers: [{ name: 'main', image, cpu: '50m', memory: '64Mi', ...container }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } }, ...spec },
  });
  const volumeDir = () => join(rt.keel.config.dataDir, 'runtime', 'volumes', 'acme', 'web', 'data');

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-volumes-'));
    image = busyboxImage(work, 'idle', ['/bin/sh', '-c', 'exec sleep 1000000']);
    rt = await startRuntimeKeel();
    ({ token: otherToken, image: otherImage } = await secondOrg(rt, 'other', image) as { token: string; image: string });
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test("a stateful replica's volume set volume outlives it; its scratch volume does not", async () => {
    await apply({ kind: 'volumeset', name: 'data', spec: { initialCapacity: 10, fileSystemType: 'ext4' } });
    await apply(
      workload('db', {
        type: 'stateful',
        container: { volumes: [{ uri: 'cpln://volumeset/data', path: '/var/lib/data' }, { uri: 'scratch://work', path: '/scratch' }] },
      }),
    );
    await waitFor('db to be ready', () => deployment('db'), (d) => d.status?.ready === true, 60_000);
    const wrote = await exec('db', 'db-0', 'sh', '-c', 'echo kept > /var/lib/data/f && echo gone > /scratch/f && touch /tmp/first-run && ls /var/lib/data');
    assert.equal(wrote.code, 0, wrote.stdout);
    assert.equal(wrote.stdout, 'f', 'the volume holds only what this replica wrote');
    // On the host: the volume set's directory for the location and replica index 0.
    assert.equal(readFileSync(join(volumeDir(), LOCATION, '0', 'f'), 'utf8'), 'kept\n');
    // The bind mounts live in the container's mount namespace alone: on the host there are only the replica's root
    // overlay, its disk (which its scratch volumes are on) and the volume set's volume (see bounds.test.ts).
    const hostMounts = leftovers(rt.keel.config.dataDir)
      .mounts.filter((m) => !m.startsWith('overlay '))
      .map((m) => m.split(' ').slice(1, 3).join(' ').replace(rt.keel.config.dataDir, '').replace(/\/replicas\/[0-9a-f]+\//, '/replicas/ID/'));
    assert.deepEqual(hostMounts.sort(), ['/runtime/replicas/ID/disk ext4', `/runtime/volumes/acme/web/data/${LOCATION}/0 ext4`].sort());

    await rt.run(['workload', 'replica', 'stop', 'db', '--location', LOCATION, '--replica-name', 'db-0']);
    // The replacement is a new container: its /tmp no longer has the first run's marker.
    const read = await waitFor(
      'the replacement replica to read the volume',
      () => exec('db', 'db-0', 'sh', '-c', 'test -e /tmp/first-run && echo first || { cat /var/lib/data/f; ls -A /scratch; }'),
      (r) => r.code === 0 && r.stdout !== 'first',
      60_000,
    );
    assert.equal(read.stdout, 'kept', 'the volume set volume kept the file; the scratch volume came back empty');
    // Keel's data directory stays out of reach, volumes or not.
    const listed = await exec('db', 'db-0', 'ls', rt.keel.config.dataDir);
    assert.notEqual(listed.code, 0);
  });

  test('a secret is mounted as read-only files for a workload whose identity is granted reveal', async () => {
    await apply({ kind: 'secret', name: 'token', type: 'opaque', data: { payload: 's3cr3t', encoding: 'plain' } });
    await apply({ kind: 'secret', name: 'db', type: 'dictionary', data: { host: 'db.internal', port: '5432' } });
    await apply({ kind: 'identity', name: 'app' });
    await apply({
      kind: 'policy',
      name: 'app-reads-secrets',
      targetKind: 'secret',
      targetLinks: ['//secret/token', '//secret/db'],
      bindings: [{ permissions: ['reveal'], principalLinks: ['//gvc/web/identity/app'] }],
    });
    // Granted by a query on the secret's tags, as a policy may grant any request.
    await apply({ kind: 'secret', name: 'tagged', type: 'opaque', tags: { team: 'app' }, data: { payload: 'by query', encoding: 'plain' } });
    await apply({
      kind: 'policy',
      name: 'app-reads-team-secrets',
      targetKind: 'secret',
      targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'app' }] } },
      bindings: [{ permissions: ['reveal'], principalLinks: ['//gvc/web/identity/app'] }],
    });
    await apply(
      workload('reader', {
        type: 'standard',
        identityLink: '//gvc/web/identity/app',
        container: {
          volumes: [
            { uri: 'cpln://secret/token', path: '/run/token' },
            { uri: 'cpln://secret/db', path: '/etc/db' },
            { uri: 'cpln://secret/db.host', path: '/etc/db-host' },
            { uri: 'cpln://secret/tagged', path: '/run/tagged' },
          ],
        },
      }),
    );
    const ready = await waitFor('reader to be ready', () => deployment('reader'), (d) => d.status?.ready === true, 60_000);
    const replica = ready.status.internal.replicas[0] as string;
    assert.equal((await exec('reader', replica, 'cat', '/run/token/payload')).stdout, 's3cr3t');
    assert.equal((await exec('reader', replica, 'sh', '-c', 'cat /etc/db/host; echo; cat /etc/db/port')).stdout, 'db.internal\n5432');
    assert.equal((await exec('reader', replica, 'ls', '/etc/db-host')).stdout, 'host', 'the .KEY form mounts that one key');
    assert.equal((await exec('reader', replica, 'cat', '/run/tagged/payload')).stdout, 'by query');
    const write = await exec('reader', replica, 'sh', '-c', 'echo changed > /run/token/payload');
    assert.notEqual(write.code, 0, 'a secret volume is read-only');
    assert.match(write.stdout, /Read-only file system/);
    // On the host, the replica's secret files sit in a directory only root may enter.
    const replicas = join(rt.keel.config.dataDir, 'runtime', 'replicas');
    const privateDirs = readdirSync(replicas).map((id) => join(replicas, id, 'volumes')).filter((d) => existsSync(d) && readdirSync(d).some((n) => n.startsWith('secret-')));
    assert.equal(privateDirs.length, 1);
    assert.equal(statSync(privateDirs[0]).mode & 0o777, 0o700);

    await rt.run(['workload', 'delete', 'reader']);
    await waitFor('the secret files to be gone with the replica', async () => existsSync(privateDirs[0]), (there) => !there, 30_000);
  });

  test('a replica whose image runs as a non-root user reads its root filesystem and its secret, and writes its volume', async () => {
    const nonRoot = busyboxImage(work, 'nonroot', ['/bin/sh', '-c', 'exec sleep 1000000'], {}, { user: '1000:1000' });
    await apply(
      workload('unprivileged', {
        type: 'standard',
        identityLink: '//gvc/web/identity/app',
        container: { image: nonRoot, volumes: [{ uri: 'cpln://secret/token', path: '/run/token' }, { uri: 'scratch://work', path: '/data/scratch' }] },
      }),
    );
    const ready = await waitFor('unprivileged to be ready', () => deployment('unprivileged'), (d) => d.status?.ready === true, 60_000);
    const replica = ready.status.internal.replicas[0] as string;
    const run = async (script: string) => {
      const r = await exec('unprivileged', replica, 'sh', '-c', script);
      assert.equal(r.code, 0, `${script}: ${r.stdout}`);
      return r.stdout;
    };
    assert.equal(await run('id -u'), '1000');
    assert.equal(await run('ls / >/dev/null && ls /data && cat /run/token/payload'), 'scratch\ns3cr3t');
    assert.equal(await run('echo mine > /data/scratch/note && cat /data/scratch/note'), 'mine');
    await rt.run(['workload', 'delete', 'unprivileged']);
  });

  test("misuse: another org's volume set and secret, no grant, cloud storage, paths over /proc or with '..'", async () => {
    // Org "other" has a GVC of the same name, but not acme's volume set nor its secret: it gets nothing of them.
    const other = (name: string, volumes: unknown[], extra: Record<string, unknown> = {}) =>
      apply(workload(name, { type: 'stateful', container: { volumes, image: otherImage }, ...extra }), '--profile', 'other');
    await other('thief', [{ uri: 'cpln://volumeset/data', path: '/data' }]);
    await other('spy', [{ uri: 'cpln://secret/token', path: '/run/token' }]);
    const thief = await waitFor('the thief to say why it does not start', () => deployment('thief', 'other'), (d) => /volume set data does not exist in GVC web/.test(d.status?.message ?? ''), 30_000);
    assert.equal(thief.status.ready, false);
    const spy = await waitFor('the spy to say why it does not start', () => deployment('spy', 'other'), (d) => /secret token does not exist in org other/.test(d.status?.message ?? ''), 30_000);
    assert.equal(spy.status.ready, false);
    assert.ok(!existsSync(join(rt.keel.config.dataDir, 'runtime', 'volumes', 'other')), 'nothing was made for org other');

    // In acme itself: without an identity, or with one that is not granted reveal, no secret.
    await apply(workload('nosy', { type: 'standard', container: { volumes: [{ uri: 'cpln://secret/token', path: '/run/token' }] } }));
    await apply({ kind: 'identity', name: 'nobody' });
    await apply(workload('ungranted', { type: 'standard', identityLink: '//gvc/web/identity/nobody', container: { volumes: [{ uri: 'cpln://secret/token', path: '/run/token' }] } }));
    await apply(workload('bucket', { type: 'standard', container: { volumes: [{ uri: 's3://my-bucket', path: '/data' }] } }));
    for (const [name, why] of [
      ['nosy', /the workload has no identity/],
      ['ungranted', /identity nobody is not granted reveal on secret token/],
      ['bucket', /s3:\/\/ cloud storage is not mounted by Keel's runc runtime/],
    ] as const) {
      const d = await waitFor(`${name} to say why it does not start`, () => deployment(name), (x) => why.test(x.status?.message ?? ''), 30_000);
      assert.equal(d.status.ready, false);
    }

    // Validation refuses mount paths over the container's own filesystems, '..' and URIs that are not volumes.
    for (const [volume, field] of [
      [{ uri: 'scratch://x', path: '/proc' }, /path must not be \/proc/],
      [{ uri: 'scratch://x', path: '/data/../etc' }, /path must be a plain path/],
      [{ uri: 'cpln://volumeset/../../other', path: '/data' }, /is not a volume URI/],
      [{ uri: 'cpln://secret/token/../../x', path: '/data' }, /is not a volume URI/],
      [{ uri: 'file:///etc', path: '/data' }, /is not a volume URI/],
    ] as const) {
      const res = await rt.keel.call('POST', '/org/acme/gvc/web/workload', workload('bad', { type: 'standard', container: { volumes: [volume] } }));
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.match(res.body.message, field);
    }
    const file = join(work, 'bad.json');
    writeFileSync(file, JSON.stringify(workload('bad', { type: 'standard', container: { volumes: [{ uri: 'scratch://x', path: '/proc' }] } })));
    const refused = await rt.cpln.run(['apply', '--file', file], { timeoutMs: 60_000 });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stdout + refused.stderr, /must not be \/proc/);
    for (const name of ['nosy', 'ungranted', 'bucket']) await rt.run(['workload', 'delete', name]);
    for (const name of ['thief', 'spy']) await rt.run(['workload', 'delete', name, '--profile', 'other']);
  });

  test('deleting the workload keeps the volume set data; deleting the volume set removes it; nothing stays mounted', async () => {
    await rt.run(['workload', 'delete', 'db']);
    await waitFor('every container to be gone', async () => leftovers(rt.keel.config.dataDir).containers, (c) => c.length === 0, 30_000);
    await waitFor("the replicas' directories to be gone", async () => readdirSync(join(rt.keel.config.dataDir, 'runtime', 'replicas')), (d) => d.length === 0, 30_000);
    assert.deepEqual(leftovers(rt.keel.config.dataDir), NOTHING_LEFT);
    // Unmounted with its last replica: read from the volume's filesystem file itself.
    assert.equal(execFileSync('debugfs', ['-R', 'cat /f', join(volumeDir(), LOCATION, '0.img')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }), 'kept\n', 'the volume set still holds what the replica wrote');

    await rt.run(['volumeset', 'delete', 'data']);
    await waitFor('the volume set data to be removed', async () => existsSync(volumeDir()), (there) => !there, 30_000);
  });
});
