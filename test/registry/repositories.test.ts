// Content is held by repository, as an attacker inside the org would probe it: a key that may pull
// one repository reads nothing of another through it by digest, a key that may delete in one
// repository breaks nothing of another, a mount names a valid repository the caller may pull from
// and which holds the blob. Bounds: open uploads per principal, stored bytes per org (unfinished
// uploads included), abandoned sessions expire. The 401 challenge never echoes a hostile Host.
// Referrers list their annotations. Content pushed before repositories were recorded still serves
// the repositories whose manifests name it. skopeo where a client does it, raw HTTP for the rest.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import Database from 'better-sqlite3';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { buildOciImage, layoutDigest, manifestOf, OCI_MANIFEST, sha } from '../support/oci.js';
import { rawExec } from '../support/raw-sql.js';
import { runTool, toolMissing } from '../support/registry-tools.js';
import { waitFor } from '../support/wait.js';

const octets = { 'content-type': 'application/octet-stream' };
const noSkopeo = toolMissing('skopeo');

interface Reply {
  status: number;
  headers: Headers;
  raw: Buffer;
  json: any;
}

/** A client of one Keel's /v2/ (Basic auth with `key`, or none with null). */
function registryClient(base: () => string) {
  const reg = async (method: string, path: string, key: string | null, options: { body?: Buffer | string; headers?: Record<string, string> } = {}): Promise<Reply> => {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    if (key !== null) headers.authorization = `Basic ${Buffer.from(`user:${key}`).toString('base64')}`;
    const res = await fetch(base() + path, { method, headers, body: options.body, redirect: 'manual' });
    const raw = Buffer.from(await res.arrayBuffer());
    let json: any;
    try {
      json = JSON.parse(raw.toString('utf8'));
    } catch {
      json = undefined;
    }
    return { status: res.status, headers: res.headers, raw, json };
  };
  const pushBlob = async (repo: string, content: Buffer | string, key: string) => {
    const res = await reg('POST', `/v2/${repo}/blobs/uploads/?digest=${sha(content)}`, key, { body: content, headers: octets });
    assert.equal(res.status, 201, res.raw.toString());
    return { digest: sha(content), size: Buffer.byteLength(content) };
  };
  const putManifest = (repo: string, ref: string, body: string, key: string) => reg('PUT', `/v2/${repo}/manifests/${ref}`, key, { body, headers: { 'content-type': OCI_MANIFEST } });
  return { reg, pushBlob, manifestOf, putManifest };
}

const code = (res: { json: any }) => res.json?.errors?.[0]?.code;

/** The challenge of an unauthenticated request sent with `hostHeader` as its Host (fetch would not send one of its own choosing). */
const challenge = (base: string, hostHeader: string, path: string) =>
  new Promise<string | undefined>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: Number(new URL(base).port), path, headers: { host: hostHeader } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.headers['www-authenticate'] as string | undefined));
    });
    req.on('error', reject);
    req.end();
  });

/** A service account of `org` with a key, granted `permissions` on the images of `repository` (every image when '*'). */
async function keyFor(keel: TestKeel, org: string, name: string, grants: Array<[repository: string, permissions: string[]]>): Promise<string> {
  assert.equal((await keel.call('POST', `/org/${org}/serviceaccount`, { name })).status, 201);
  const key = (await keel.call('POST', `/org/${org}/serviceaccount/${name}/-addKey`, { description: 'test' })).body.key;
  for (const [i, [repository, permissions]] of grants.entries()) {
    const target = repository === '*' ? { target: 'all' } : { targetQuery: { spec: { match: 'all', terms: [{ op: '=', property: 'repository', value: repository }] } } };
    const policy = await keel.call('POST', `/org/${org}/policy`, { name: `${name}-${i}`, targetKind: 'image', ...target, bindings: [{ permissions, principalLinks: [`//serviceaccount/${name}`] }] });
    assert.equal(policy.status, 201, policy.raw);
  }
  return key;
}

forEachBackend('registry: content by repository', (backend) => {
  let keel: TestKeel;
  let base: string;
  let host: string;
  let root: string;
  const { reg, pushBlob, manifestOf, putManifest } = registryClient(() => base);
  const admin = () => keel.token;
  const keys: Record<string, string> = {};
  /** `keel registry gc` as an operator runs it, on this Keel's store. */
  const gc = (...flags: string[]) => {
    const env = { ...process.env, KEEL_DATA_DIR: keel.config.dataDir, ...(keel.config.databaseUrl ? { KEEL_DATABASE_URL: keel.config.databaseUrl } : {}) };
    return new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', '..', 'src', 'cli.ts'), 'registry', 'gc', ...flags], { env }, (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout))),
    );
  };
  /** Orgs whose kept count of bytes is not the sum of what they link (the quota reads the count). */
  const miscounted = async (): Promise<number> => {
    const sql = (links: string, blobs: string, counts: string) =>
      `SELECT 1 FROM ${counts} o WHERE o.bytes <> (SELECT coalesce(sum(b.size), 0) FROM ${links} l JOIN ${blobs} b ON b.digest = l.digest WHERE l.org = o.org)`;
    if (backend === 'postgres') return rawExec(keel, sql('registry_links', 'registry_blobs', 'registry_org_bytes'));
    const db = new Database(join(keel.config.dataDir, 'registry', 'registry.db'));
    try {
      return db.prepare(sql('links', 'blobs', 'org_bytes')).all().length;
    } finally {
      db.close();
    }
  };
  const skopeo = (key: string, ...args: string[]) => runTool('skopeo', [...args.slice(0, 1), ...(args[0] === 'copy' ? ['--src-tls-verify=false', '--dest-tls-verify=false', '--src-creds', `u:${key}`, '--dest-creds', `u:${key}`] : ['--tls-verify=false', '--creds', `u:${key}`]), ...args.slice(1)]);

  before(async () => {
    keel = await startKeel(backend, 'acme', { allowSnapshots: true });
    base = await keel.listen();
    host = base.replace('http://', '');
    root = mkdtempSync(join(tmpdir(), 'keel-repositories-'));
    keys.pubPuller = await keyFor(keel, 'acme', 'pub-puller', [['pub', ['pull']]]);
    keys.pubPusher = await keyFor(keel, 'acme', 'pub-pusher', [['pub', ['create']]]);
    keys.scratchDeleter = await keyFor(keel, 'acme', 'scratch-deleter', [['scratch', ['delete', 'pull']]]);
    keys.mover = await keyFor(keel, 'acme', 'mover', [['src', ['pull']], ['dest', ['create']]]);
    keys.flooder = await keyFor(keel, 'acme', 'flooder', [['flood', ['create']]]);
  });
  after(async () => {
    await keel?.close();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  test('a key that may pull one repository reads nothing of another through it, by digest or by a manifest naming its blobs', { skip: noSkopeo }, async () => {
    const secret = buildOciImage(root, 'v2', [{ 'etc/secret': 'the private layer\n' }]);
    const open = buildOciImage(root, 'v1', [{ 'etc/motd': 'the public layer\n' }]);
    assert.equal((await skopeo(admin(), 'copy', `oci:${secret.dir}:v2`, `docker://${host}/priv:v2`)).code, 0);
    assert.equal((await skopeo(admin(), 'copy', `oci:${open.dir}:v1`, `docker://${host}/pub:v1`)).code, 0);

    // What the public repository holds comes back whole.
    const back = join(root, 'pub-back');
    const pulled = await skopeo(keys.pubPuller, 'copy', `docker://${host}/pub:v1`, `oci:${back}:v1`);
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.equal(layoutDigest(back, 'v1'), open.digest);

    // The private manifest through the public name: as unknown as a digest nothing holds.
    const stolen = await skopeo(keys.pubPuller, 'inspect', '--raw', `docker://${host}/pub@${secret.digest}`);
    assert.notEqual(stolen.code, 0, 'skopeo read the private manifest through pub');
    assert.match(stolen.stderr, /manifest unknown/i);
    const stolenCopy = await skopeo(keys.pubPuller, 'copy', `docker://${host}/pub@${secret.digest}`, `oci:${join(root, 'stolen')}:x`);
    assert.notEqual(stolenCopy.code, 0);
    const never = sha('never pushed anywhere');
    for (const method of ['GET', 'HEAD']) {
      const manifest = await reg(method, `/v2/pub/manifests/${secret.digest}`, keys.pubPuller);
      const nothing = await reg(method, `/v2/pub/manifests/${never}`, keys.pubPuller);
      assert.equal(manifest.status, 404);
      assert.equal(manifest.status, nothing.status);
      for (const blob of secret.blobs) {
        const res = await reg(method, `/v2/pub/blobs/${blob}`, keys.pubPuller);
        assert.equal(res.status, 404, `${method} ${blob} through pub`);
        assert.equal(res.headers.get('content-length'), (await reg(method, `/v2/pub/blobs/${never}`, keys.pubPuller)).headers.get('content-length'));
      }
    }
    assert.equal(code(await reg('GET', `/v2/pub/manifests/${secret.digest}`, keys.pubPuller)), 'MANIFEST_UNKNOWN');
    assert.equal(code(await reg('GET', `/v2/pub/blobs/${secret.blobs[0]}`, keys.pubPuller)), 'BLOB_UNKNOWN');
    // The private repository itself stays closed to the key.
    assert.equal(code(await reg('GET', `/v2/priv/manifests/${secret.digest}`, keys.pubPuller)), 'DENIED');

    // A key that may push to pub cannot make the private blobs pub's by naming them in a manifest.
    const smuggled = manifestOf({ digest: secret.blobs[0], size: secret.manifest.config.size }, [{ digest: secret.blobs[1], size: secret.manifest.layers[0].size }]);
    const put = await putManifest('pub', 'smuggled', smuggled, keys.pubPusher);
    assert.equal(put.status, 400, put.raw.toString());
    assert.equal(code(put), 'MANIFEST_BLOB_UNKNOWN');
    assert.equal((await reg('GET', `/v2/pub/blobs/${secret.blobs[1]}`, keys.pubPuller)).status, 404);
    // The referrers of a private manifest are not listed through pub either.
    const empty = await pushBlob('priv', '{}', admin());
    const signature = manifestOf(empty, [], { artifactType: 'application/vnd.example.sig', subject: { mediaType: OCI_MANIFEST, digest: secret.digest, size: 1 } });
    assert.equal((await putManifest('priv', sha(signature), signature, admin())).status, 201);
    assert.equal((await reg('GET', `/v2/priv/referrers/${secret.digest}`, admin())).json.manifests.length, 1);
    assert.deepEqual((await reg('GET', `/v2/pub/referrers/${secret.digest}`, keys.pubPuller)).json.manifests, []);
  });

  test('a key that may delete in one repository removes only that repository\'s reference; what others hold stays pullable, also after gc', { skip: noSkopeo }, async () => {
    const image = buildOciImage(root, 'v2', [{ 'etc/shared': 'held by two repositories\n' }, { 'opt/data.bin': 50_000 }]);
    assert.equal((await skopeo(admin(), 'copy', `oci:${image.dir}:v2`, `docker://${host}/keep:v2`)).code, 0);
    // skopeo copies between repositories of Keel by mounting (the admin may pull keep).
    const copied = await skopeo(admin(), 'copy', `docker://${host}/keep:v2`, `docker://${host}/scratch:v1`);
    assert.equal(copied.code, 0, copied.stderr);
    const only = buildOciImage(root, 'v1', [{ 'etc/only': 'only in keep\n' }]);
    assert.equal((await skopeo(admin(), 'copy', `oci:${only.dir}:v1`, `docker://${host}/keep:only`)).code, 0);

    // A manifest only keep holds is unknown through scratch: nothing is deleted.
    const refused = await skopeo(keys.scratchDeleter, 'delete', `docker://${host}/scratch@${only.digest}`);
    assert.notEqual(refused.code, 0);
    assert.equal(code(await reg('DELETE', `/v2/scratch/manifests/${only.digest}`, keys.scratchDeleter)), 'MANIFEST_UNKNOWN');
    assert.equal(code(await reg('DELETE', `/v2/scratch/blobs/${only.blobs[1]}`, keys.scratchDeleter)), 'BLOB_UNKNOWN');
    // The shared manifest and a shared layer deleted through scratch: gone from scratch only.
    const deleted = await skopeo(keys.scratchDeleter, 'delete', `docker://${host}/scratch@${image.digest}`);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal((await reg('DELETE', `/v2/scratch/blobs/${image.blobs[1]}`, keys.scratchDeleter)).status, 202);
    assert.equal(code(await reg('GET', `/v2/scratch/manifests/${image.digest}`, admin())), 'MANIFEST_UNKNOWN');
    assert.equal(code(await reg('GET', `/v2/scratch/blobs/${image.blobs[1]}`, admin())), 'BLOB_UNKNOWN');
    assert.equal((await keel.call('GET', '/org/acme/image/scratch:v1')).status, 404, "scratch's tag went with its manifest");

    const pullKeep = async (tag: string, expected: string) => {
      const back = mkdtempSync(join(root, 'keep-back-'));
      const pulled = await skopeo(admin(), 'copy', `docker://${host}/keep:${tag}`, `oci:${back}:${tag}`);
      assert.equal(pulled.code, 0, pulled.stderr);
      assert.equal(layoutDigest(back, tag), expected);
    };
    await pullKeep('v2', image.digest);
    await pullKeep('only', only.digest);
    assert.equal((await keel.call('GET', '/org/acme/image/keep:v2')).body.digest, image.digest);
    await gc('--grace-minutes', '0');
    await pullKeep('v2', image.digest);
    await pullKeep('only', only.digest);
    assert.equal(await miscounted(), 0);
  });

  test('a mount names a valid repository of the org that the caller may pull and that holds the blob; anything else is never 201', async () => {
    const layer = await pushBlob('src', 'a layer in src', admin());
    const privateLayer = await pushBlob('hidden', 'a layer only hidden holds', admin());
    const mount = (key: string, digest: string, from: string) => reg('POST', `/v2/dest/blobs/uploads/?mount=${digest}&from=${from}`, key);
    // A name outside the grammar: 400 NAME_INVALID.
    for (const from of ['x/../../../y', '../hidden', 'hidden/..', 'Hidden', 'a//b', '%2e%2e/hidden']) {
      const res = await mount(keys.mover, privateLayer.digest, from);
      assert.equal(res.status, 400, `${from}: ${res.status} ${res.raw}`);
      assert.equal(code(res), 'NAME_INVALID', from);
    }
    // A valid repository the caller may not pull, or that does not hold the blob: an ordinary upload starts.
    for (const [from, digest] of [['hidden', privateLayer.digest], ['src', privateLayer.digest], ['nowhere', layer.digest]]) {
      const res = await mount(keys.mover, digest, from);
      assert.equal(res.status, 202, `${from}: ${res.raw}`);
      assert.match(res.headers.get('location')!, /^\/v2\/dest\/blobs\/uploads\//);
      assert.equal((await reg('DELETE', res.headers.get('location')!, keys.mover)).status, 204);
    }
    assert.equal((await reg('HEAD', `/v2/dest/blobs/${privateLayer.digest}`, admin())).status, 404, 'nothing was mounted');
    // pull on from, push on the target, held by from: mounted.
    const mounted = await mount(keys.mover, layer.digest, 'src');
    assert.equal(mounted.status, 201, mounted.raw.toString());
    assert.equal(mounted.headers.get('location'), `/v2/dest/blobs/${layer.digest}`);
    assert.equal((await reg('GET', `/v2/dest/blobs/${layer.digest}`, admin())).raw.toString(), 'a layer in src');
    // Push on the target is needed as well.
    assert.equal(code(await reg('POST', `/v2/src/blobs/uploads/?mount=${layer.digest}&from=dest`, keys.mover)), 'DENIED');
  });

  test(`a principal keeps at most 16 upload sessions open (KEEL_REGISTRY_MAX_UPLOADS); others are not held up`, async () => {
    const sessions: string[] = [];
    for (let i = 0; i < 16; i++) {
      const res = await reg('POST', '/v2/flood/blobs/uploads/', keys.flooder);
      assert.equal(res.status, 202, `session ${i + 1}: ${res.raw}`);
      sessions.push(res.headers.get('location')!);
    }
    for (let i = 0; i < 2; i++) {
      const refused = await reg('POST', '/v2/flood/blobs/uploads/', keys.flooder);
      assert.equal(refused.status, 429);
      assert.equal(code(refused), 'TOOMANYREQUESTS');
      assert.match(refused.json.errors[0].message, /KEEL_REGISTRY_MAX_UPLOADS/);
    }
    // A monolithic push opens a session too.
    assert.equal((await reg('POST', `/v2/flood/blobs/uploads/?digest=${sha('x')}`, keys.flooder, { body: 'x', headers: octets })).status, 429);
    const other = await reg('POST', '/v2/flood/blobs/uploads/', admin());
    assert.equal(other.status, 202, 'another principal starts its own');
    assert.equal((await reg('DELETE', other.headers.get('location')!, admin())).status, 204);
    // A finished or cancelled session frees its place.
    assert.equal((await reg('DELETE', sessions.pop()!, keys.flooder)).status, 204);
    assert.equal((await reg('PUT', `${sessions.pop()!}?digest=${sha('done')}`, keys.flooder, { body: 'done', headers: octets })).status, 201);
    for (let i = 0; i < 2; i++) assert.equal((await reg('POST', `/v2/flood/blobs/uploads/?digest=${sha(`m${i}`)}`, keys.flooder, { body: `m${i}`, headers: octets })).status, 201);
    const again = await reg('POST', '/v2/flood/blobs/uploads/', keys.flooder);
    assert.equal(again.status, 202);
    sessions.push(again.headers.get('location')!);
    for (const session of sessions) assert.equal((await reg('DELETE', session, keys.flooder)).status, 204);
  });

  test('the referrers index carries each referrer manifest\'s annotations and artifact type', async () => {
    const config = await pushBlob('art', '{"art":1}', admin());
    const subject = manifestOf(config, []);
    assert.equal((await putManifest('art', 'v1', subject, admin())).status, 201);
    const empty = await pushBlob('art', '{}', admin());
    const annotations = { 'org.opencontainers.image.created': '2026-01-02T03:04:05Z', 'com.example.signer': 'ci' };
    const sbom = manifestOf(empty, [], { artifactType: 'application/spdx+json', subject: { mediaType: OCI_MANIFEST, digest: sha(subject), size: subject.length }, annotations });
    assert.equal((await putManifest('art', sha(sbom), sbom, admin())).status, 201);
    const plain = manifestOf(empty, [], { subject: { mediaType: OCI_MANIFEST, digest: sha(subject), size: subject.length } });
    assert.equal((await putManifest('art', sha(plain), plain, admin())).status, 201);
    const listed = await reg('GET', `/v2/art/referrers/${sha(subject)}`, admin());
    assert.equal(listed.status, 200);
    const byDigest = Object.fromEntries(listed.json.manifests.map((m: { digest: string }) => [m.digest, m]));
    assert.deepEqual(byDigest[sha(sbom)], { mediaType: OCI_MANIFEST, digest: sha(sbom), size: sbom.length, artifactType: 'application/spdx+json', annotations });
    assert.deepEqual(byDigest[sha(plain)], { mediaType: OCI_MANIFEST, digest: sha(plain), size: plain.length, artifactType: 'application/vnd.oci.image.config.v1+json' });
    const filtered = await reg('GET', `/v2/art/referrers/${sha(subject)}?artifactType=application/spdx%2Bjson`, admin());
    assert.deepEqual(filtered.json.manifests, [byDigest[sha(sbom)]]);
  });

  test('the challenge names Keel as the KEEL_PUBLIC_URL rule says, whatever Host is sent', async () => {
    const port = Number(new URL(base).port);
    const own = `Bearer realm="http://127.0.0.1:${port}/v2/token",service="keel",scope="repository:pub:pull,push"`;
    for (const hostile of ['evil.example', `evil.example",error="insufficient_scope`, 'evil.example:80/x?', `127.0.0.1:${port}",realm="http://evil.example`]) {
      const header = await challenge(base, hostile, '/v2/pub/manifests/v1');
      assert.equal(header, own, hostile);
    }
    assert.equal(await challenge(base, `localhost:${port}`, '/v2/pub/manifests/v1'), own.replace('127.0.0.1', 'localhost'), 'a loopback Host is believed');
  });

  test('a restored snapshot brings back a tag whose manifest was deleted since through its repository: the repository holds what the tag reaches again', async () => {
    const config = await pushBlob('snap', '{"snap":1}', admin());
    const layer = await pushBlob('snap', 'a layer of snap', admin());
    const manifest = manifestOf(config, [layer]);
    assert.equal((await putManifest('snap', 'v1', manifest, admin())).status, 201);
    // Another repository holds the same image, so the org keeps its content when snap lets go of it.
    for (const blob of [config, layer]) assert.equal((await reg('POST', `/v2/snap-copy/blobs/uploads/?mount=${blob.digest}&from=snap`, admin())).status, 201);
    assert.equal((await putManifest('snap-copy', 'v1', manifest, admin())).status, 201);
    assert.equal((await keel.call('POST', '/-admin/snapshots', { name: 'before-delete' })).status, 201);
    assert.equal((await reg('DELETE', `/v2/snap/manifests/${sha(manifest)}`, admin())).status, 202);
    assert.equal((await reg('DELETE', `/v2/snap/blobs/${layer.digest}`, admin())).status, 202);
    assert.equal(code(await reg('GET', '/v2/snap/manifests/v1', admin())), 'MANIFEST_UNKNOWN');
    const restored = await keel.call('POST', '/-admin/snapshots/before-delete/-restore');
    assert.equal(restored.status, 200, restored.raw);
    const got = await reg('GET', '/v2/snap/manifests/v1', admin());
    assert.equal(got.status, 200, got.raw.toString());
    assert.equal(got.raw.toString(), manifest);
    assert.equal((await reg('GET', `/v2/snap/manifests/${sha(manifest)}`, admin())).status, 200);
    assert.equal((await reg('GET', `/v2/snap/blobs/${layer.digest}`, admin())).raw.toString(), 'a layer of snap');
    assert.equal((await reg('GET', `/v2/pub/blobs/${layer.digest}`, admin())).status, 404, 'no other repository gains it');
  });

  test('content pushed before repositories were recorded serves the repositories whose manifests name it, and only those', async () => {
    const config = await pushBlob('legacy/app', '{"legacy":true}', admin());
    const layer = await pushBlob('legacy/app', 'a legacy layer', admin());
    const stray = await pushBlob('legacy/app', 'uploaded, never named by a manifest', admin());
    const manifest = manifestOf(config, [layer]);
    assert.equal((await putManifest('legacy/app', 'v1', manifest, admin())).status, 201);
    const empty = await pushBlob('legacy/app', '{}', admin());
    const signature = manifestOf(empty, [], { subject: { mediaType: OCI_MANIFEST, digest: sha(manifest), size: manifest.length }, annotations: { signed: 'yes' } });
    assert.equal((await putManifest('legacy/app', sha(signature), signature, admin())).status, 201);
    // The registry as the previous version left it: org links without annotations, no repository links.
    if (backend === 'postgres') {
      await rawExec(keel, 'DELETE FROM registry_repository_links');
      await rawExec(keel, 'UPDATE registry_links SET annotations = NULL');
    } else {
      const db = new Database(join(keel.config.dataDir, 'registry', 'registry.db'));
      db.prepare('DELETE FROM repository_links').run();
      db.prepare('UPDATE links SET annotations = NULL').run();
      db.close();
    }
    const { app } = await keel.reopen();
    const get = (path: string) => app.core.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${keel.token}` } });
    assert.equal((await get('/v2/legacy/app/manifests/v1')).body, manifest);
    assert.equal((await get(`/v2/legacy/app/blobs/${layer.digest}`)).body, 'a legacy layer');
    assert.equal((await get(`/v2/legacy/app/blobs/${config.digest}`)).statusCode, 200);
    assert.deepEqual(
      JSON.parse((await get(`/v2/legacy/app/referrers/${sha(manifest)}`)).body).manifests.map((m: { digest: string; annotations?: unknown }) => [m.digest, m.annotations]),
      [[sha(signature), { signed: 'yes' }]],
    );
    assert.equal((await get(`/v2/legacy/app/manifests/${sha(signature)}`)).statusCode, 200);
    assert.equal((await get(`/v2/legacy/app/blobs/${stray.digest}`)).statusCode, 404, 'what no manifest named belongs to no repository');
    assert.equal((await get(`/v2/other/blobs/${layer.digest}`)).statusCode, 404);
    assert.equal(await miscounted(), 0, 'the links forgotten no longer count');
  });
});

forEachBackend('registry: bounds', (backend) => {
  let keel: TestKeel;
  let base: string;
  const { reg, pushBlob, manifestOf, putManifest } = registryClient(() => base);
  const CAP = 8192;
  const IDLE_MS = 4000;
  let key: string;

  /** What unfinished uploads left: temp files beside SQLite; sessions and content no blob names in PostgreSQL. */
  const leftovers = async (): Promise<number> => {
    if (backend === 'sqlite') {
      const dir = join(keel.config.dataDir, 'registry', 'uploads');
      return readdirSync(dir).flatMap((d) => (existsSync(join(dir, d)) ? readdirSync(join(dir, d)) : [])).length;
    }
    return (await rawExec(keel, 'SELECT 1 FROM registry_uploads')) + (await rawExec(keel, 'SELECT DISTINCT content FROM registry_content WHERE content NOT IN (SELECT content FROM registry_blobs)'));
  };

  /** The most bytes a request being received has written so far: its session's temp file beside SQLite, its copy for the local cache with PostgreSQL. */
  const receivedBytes = (): number => {
    const root = join(keel.config.dataDir, 'registry', backend === 'sqlite' ? 'uploads' : join('cache', 'tmp'));
    if (!existsSync(root)) return 0;
    const sizes = readdirSync(root).flatMap((d) => (existsSync(join(root, d)) ? readdirSync(join(root, d)).map((f) => statSync(join(root, d, f), { throwIfNoEntry: false })?.size ?? 0) : []));
    return Math.max(0, ...sizes);
  };

  before(async () => {
    keel = await startKeel(backend, 'acme', { registryMaxBytesPerOrg: CAP, registryMaxUploads: 2, registryUploadIdleMs: IDLE_MS, publicUrl: 'https://registry.example.test' });
    base = await keel.listen();
    key = await keyFor(keel, 'acme', 'ci', [['*', ['manage']]]);
  });
  after(async () => keel?.close());

  test('an org stores at most KEEL_REGISTRY_MAX_BYTES_PER_ORG, unfinished uploads included; a refused upload or manifest leaves nothing; an abandoned session expires and frees its bytes and its place', async () => {
    const first = Buffer.alloc(5000, 1);
    const layer = await pushBlob('app', first, key);
    // Monolithic, over the cap: refused, nothing stored.
    const big = Buffer.alloc(4000, 2);
    const refused = await reg('POST', `/v2/app/blobs/uploads/?digest=${sha(big)}`, key, { body: big, headers: octets });
    assert.equal(refused.status, 413);
    assert.equal(code(refused), 'DENIED');
    assert.match(refused.json.errors[0].message, /KEEL_REGISTRY_MAX_BYTES_PER_ORG/);
    assert.equal((await reg('HEAD', `/v2/app/blobs/${sha(big)}`, key)).status, 404);
    assert.equal(await leftovers(), 0);
    // Chunked: what a session holds counts while it is open.
    const session = (await reg('POST', '/v2/app/blobs/uploads/', key)).headers.get('location')!;
    assert.equal((await reg('PATCH', session, key, { body: Buffer.alloc(3000, 3), headers: octets })).status, 202);
    const over = await reg('PATCH', session, key, { body: Buffer.alloc(500, 3), headers: octets });
    assert.equal(over.status, 413);
    assert.match(over.json.errors[0].message, /KEEL_REGISTRY_MAX_BYTES_PER_ORG/);
    assert.equal((await reg('GET', session, key)).headers.get('range'), '0-2999', 'the refused chunk left nothing');
    const small = Buffer.alloc(1000, 4);
    assert.equal((await reg('POST', `/v2/app/blobs/uploads/?digest=${sha(small)}`, key, { body: small, headers: octets })).status, 413, 'the unfinished session counts');
    // A manifest that would pass the cap: refused, no tag.
    const config = await (async () => {
      const tiny = '{}';
      return { digest: sha(tiny), size: 2, res: await reg('POST', `/v2/app/blobs/uploads/?digest=${sha(tiny)}`, key, { body: tiny, headers: octets }) };
    })();
    assert.equal(config.res.status, 201);
    const manifest = manifestOf(config, [layer], { annotations: { pad: 'x'.repeat(300) } });
    const put = await putManifest('app', 'v1', manifest, key);
    assert.equal(put.status, 413, put.raw.toString());
    assert.equal(code(put), 'DENIED');
    assert.equal((await keel.call('GET', '/org/acme/image/app:v1')).status, 404);
    assert.equal((await reg('GET', `/v2/app/manifests/${sha(manifest)}`, key)).status, 404);
    // The second session of this principal is its last (KEEL_REGISTRY_MAX_UPLOADS=2).
    const second = await reg('POST', '/v2/app/blobs/uploads/', key);
    assert.equal(second.status, 202);
    const third = await reg('POST', '/v2/app/blobs/uploads/', key);
    assert.equal(third.status, 429);
    assert.match(third.json.errors[0].message, /KEEL_REGISTRY_MAX_UPLOADS/);
    // Left alone for KEEL_REGISTRY_UPLOAD_IDLE_MS, a session goes with its bytes: the push goes through…
    const pushed = await waitFor('the abandoned session to expire', () => reg('POST', `/v2/app/blobs/uploads/?digest=${sha(small)}`, key, { body: small, headers: octets }), (r) => r.status === 201, 5 * IDLE_MS);
    assert.equal(pushed.status, 201);
    // …and once the younger one is gone too, both places are free again.
    const opened = await waitFor(
      'both places to be free',
      async () => {
        const locations: string[] = [];
        for (let i = 0; i < 2; i++) {
          const res = await reg('POST', '/v2/app/blobs/uploads/', key);
          if (res.status === 202) locations.push(res.headers.get('location')!);
        }
        for (const location of locations) await reg('DELETE', location, key);
        return locations.length;
      },
      (n) => n === 2,
      5 * IDLE_MS,
    );
    assert.equal(opened, 2);
    assert.equal(code(await reg('GET', session, key)), 'BLOB_UPLOAD_UNKNOWN');
    assert.equal(code(await reg('GET', second.headers.get('location')!, key)), 'BLOB_UPLOAD_UNKNOWN');
    assert.equal(await leftovers(), 0);
    assert.equal((await putManifest('app', 'v1', manifestOf(config, [layer]), key)).status, 201, 'a manifest within the cap');
    // Content two repositories hold counts once, and is freed when the last of them lets go of it.
    assert.equal((await reg('POST', `/v2/app2/blobs/uploads/?mount=${layer.digest}&from=app`, key)).status, 201);
    const more = Buffer.alloc(4000, 5);
    const pushMore = () => reg('POST', `/v2/app/blobs/uploads/?digest=${sha(more)}`, key, { body: more, headers: octets });
    assert.equal((await pushMore()).status, 413);
    assert.equal((await reg('DELETE', `/v2/app/blobs/${layer.digest}`, key)).status, 202);
    assert.equal((await pushMore()).status, 413, 'app2 still holds the layer');
    assert.equal((await reg('DELETE', `/v2/app2/blobs/${layer.digest}`, key)).status, 202);
    assert.equal((await pushMore()).status, 201, 'the layer no longer counts');
    assert.equal(await leftovers(), 0);
  });

  test("chunks received at once count each other's bytes against the org's bound before either is committed", async () => {
    assert.equal((await keel.call('POST', '/org', { name: 'race' })).status, 201);
    const racer = await keyFor(keel, 'race', 'racer', [['*', ['manage']]]);
    const start = async () => (await reg('POST', '/v2/app/blobs/uploads/', racer)).headers.get('location')!;
    const [first, second] = [await start(), await start()];
    // The first chunk's body stops after 4000 of its 5000 bytes: the request is receiving, nothing is committed.
    const url = new URL(base);
    const socket = connect(Number(url.port), url.hostname);
    let answer = '';
    socket.on('data', (d) => (answer += d.toString()));
    const answered = new Promise<string>((resolve) => socket.on('close', () => resolve(answer)));
    socket.write(`PATCH ${first} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${racer}\r\nContent-Type: application/octet-stream\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n`);
    try {
      socket.write(Buffer.alloc(4000, 6));
      await waitFor("the first chunk's bytes to be received", async () => receivedBytes(), (n) => n >= 4000);
      // 4500 more would pass 8192 with the 4000 being received: refused, though none of them is stored yet.
      const other = await reg('PATCH', second, racer, { body: Buffer.alloc(4500, 7), headers: octets });
      assert.equal(other.status, 413, other.raw.toString());
      assert.match(other.json.errors[0].message, /KEEL_REGISTRY_MAX_BYTES_PER_ORG/);
      socket.write(Buffer.alloc(1000, 6));
      assert.match(await answered, /^HTTP\/1.1 202/);
    } finally {
      socket.destroy();
    }
    assert.equal((await reg('GET', first, racer)).headers.get('range'), '0-4999');
    assert.equal((await reg('PATCH', second, racer, { body: Buffer.alloc(3000, 7), headers: octets })).status, 202, 'what fits goes in');
    for (const location of [first, second]) assert.equal((await reg('DELETE', location, racer)).status, 204);
  });

  test('with KEEL_PUBLIC_URL the challenge names it, whatever Host is sent', async () => {
    assert.equal(await challenge(base, 'evil.example', '/v2/app/manifests/v1'), 'Bearer realm="https://registry.example.test/v2/token",service="keel",scope="repository:app:pull,push"');
  });
});
